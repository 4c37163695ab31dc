"""Variational integrators with the midpoint discrete Lagrangian (SLO09 §4, eq 13-18).

Discrete Lagrangian (SLO09 eq 18, written for any L(q, v) = 1/2 v.M(q)v - V(q)):

    L_d(q_i, q_{i+1}) = h L((q_i + q_{i+1})/2, (q_{i+1} - q_i)/h)

which for a constant M is 1/2 (q_{i+1} - q_i).M(q_{i+1} - q_i)/h - h V((q_i + q_{i+1})/2).

``vi-lagrange``: the discrete Euler-Lagrange equations with Lagrange multipliers (SLO09 eq 14)

    D_2 L_d(q_{i-1}, q_i) + D_1 L_d(q_i, q_{i+1}) + h G(q_i)^T lambda_i = 0,   g(q_{i+1}) = 0,

a two-step scheme started by the constrained discrete Legendre transform (SLO09 eq 15)

    p_0 + D_1 L_d(q_0, q_1) + h/2 G(q_0)^T lambda_0 = 0,   g(q_1) = 0.

``vi-nullspace``: the discrete null space method (SLO09 eq 16, 17). Eq 14 is premultiplied by P(q_i)^T,
P(q) an orthonormal basis of null(G(q)), and q_{i+1} = F(w_{i+1}, q_i) is a nodal reparametrization,
so that only k = d - m unknowns w_{i+1} are solved for:

    P(q_i)^T [D_2 L_d(q_{i-1}, q_i) + D_1 L_d(q_i, F(w_{i+1}, q_i))] = 0          (16)
    P(q_0)^T [p_0 + D_1 L_d(q_0, F(w_1, q_0))] = 0                                (17)

SLO09 does not spell out F for its examples (it refers to Leyendecker et al. 2008b, where F comes
from the geometry of the system). For a generic system F is taken here as the tangent step
corrected along the normal space at q_i: F(w, q_i) = q_i + P(q_i) w + N(q_i) z with g(F) = 0, N(q)
an orthonormal basis of range G(q)^T (the complement of P in the same QR factor), z found by an inner
Newton iteration in its m unknowns (matrix G(u) N(q_i), first derivatives of g only) and
differentiated implicitly (:func:`make_chart`). Since P^T N = 0, w = P^T (F(w, q_i) - q_i). Any local
chart of the constraint manifold gives the same q_{i+1}: (16) is (14) with the multiplier term
removed by P^T (SLO09: "(16) and (14) are equivalent"), so ``vi-nullspace`` reproduces the
``vi-lagrange`` trajectory to the Newton tolerance; lambda_i is recovered afterwards by least
squares from (14). (An earlier form, the closest-point projection u = y + G(u)^T mu, needed the
Hessian of mu.g in its inner Newton matrix, of size d + m.)

Position-momentum form. Both schemes report the nodal momenta of the constrained discrete Legendre
transform, p_i = D_2 L_d(q_{i-1}, q_i) + h/2 G(q_i)^T lambda_i = -D_1 L_d(q_i, q_{i+1}) - h/2 G(q_i)^T
lambda_i (the two agree by eq 14; i = 0 is eq 15 with the given p_0), and the interval velocities
(q_{i+1} - q_i)/h (velocity_kind "interval"). Because p_i needs lambda_i, which eq 14 at node i
determines together with q_{i+1}, the time step n -> n+1 solves eq 14 at node n+1 for q_{n+2} and
lambda_{n+1} (one node ahead; ``start`` solves eq 15 for q_1), then reports q^{n+1}, p^{n+1} and the
velocity (q^{n+1} - q^n)/h. An external force enters as the discrete forces
f^-_d = f^+_d = h/2 F(q_mid, (q_{i+1} - q_i)/h, t_i + h/2) of the discrete Lagrange-d'Alembert
principle.

Increment form. The unknowns and the carried state are increments: vi-lagrange solves for
dq2 = q^{n+2} - q^{n+1}, the state keeps dq = q^{n+1} - q^n, and L_d is evaluated as
h L(q_i + dq/2, dq/h), so that no difference of nodal values is formed and the velocity dq/h keeps
the increment's precision (at small h the difference (q_{i+1} - q_i)/h of rounded nodes has an
error of ulp(q)/h, the floor of Newton's residual). The nodes are accumulated by compensated
summation (:func:`livens.schemes.base.compensated_add`).

What eq 14 / 16 at node n+1 holds fixed while Newton iterates, D_2 L_d(q^n, q^{n+1}) and (null space
form) the QR factors of G(q^{n+1})^T, is computed once per step before the first guess
(``Scheme.prepare``), not in each residual.

Both schemes are variational, hence symplectic and momentum-conserving (discrete Noether, for
symmetries leaving L and g invariant), and second order (SLO09 Fig. 4).
Neither scheme forms M^-1: both run a singular mass matrix as long as it is positive definite on the
tangent space of the constraint manifold (then the Newton matrix of eq 14 is regular for small h), as
for the director beams of the three-bar swing (SLO09 §4.2, where d3 carries no inertia), and a
configuration-dependent M through L(q, v).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from .._lru import LRU
from ..solvers import TangentForms, banded_tangent, choose_form
from ..solvers.banded import same_pattern
from ..solvers.newton import LinearizedNewton, dense_tangent_solve, implicit, linearized_jacobian
from . import register
from .base import About, Capabilities, Scheme, Solving, State, compensated_add

_START_TOL = 1e-12
_START_MAX_ITER = 60
_START_ACCEPT = 1e-9
"""The start (SLO09 eq 15, 17) is solved to ||R||_inf <= :data:`_START_TOL`, or, where round-off keeps
its residual above that (the elastic forces of stiff beams: the three-bar swing with 40 elements stalls
at ~1.5e-12), until the residual stops halving below _START_ACCEPT (1 + |p_0|), the level the start
requires (``floor`` of :func:`livens.solvers.newton.newton`), instead of iterating to max_iter."""


# ------------------------------------------------------------------ discrete Lagrangian (SLO09 eq 18)
def discrete_lagrangian(mech, q0, dq, h):
    """L_d(q0, q1) = h L((q0 + q1)/2, (q1 - q0)/h), the midpoint discrete Lagrangian (SLO09 eq 18),
    written in the increment dq = q1 - q0, so that the velocity dq/h keeps the increment's
    precision (no difference of nodal values; see the module docstring)."""
    return h * mech.L(q0 + 0.5 * dq, dq / h)


def _discrete_force(mech, q0, dq, h, t):
    """f^+_d = f^-_d = h/2 F(q_mid, dq/h, t + h/2), midpoint discrete forces (zero without F)."""
    if not mech.has_external_force:
        return jnp.zeros_like(q0)
    return 0.5 * h * mech.F(q0 + 0.5 * dq, dq / h, t + 0.5 * h)


def D1Ld(mech, q0, dq, h, t):
    """D_1 L_d(q0, q0 + dq) plus the discrete force f^-_d of the interval [t, t + h]: with q1 held,
    dq moves against q0."""
    a, b = jax.grad(discrete_lagrangian, argnums=(1, 2))(mech, q0, dq, h)
    return a - b + _discrete_force(mech, q0, dq, h, t)


def D2Ld(mech, q0, dq, h, t):
    """D_2 L_d(q0, q0 + dq) plus the discrete force f^+_d of the interval [t, t + h]."""
    return jax.grad(discrete_lagrangian, argnums=2)(mech, q0, dq, h) + _discrete_force(mech, q0, dq, h, t)


def _next(q1, dq2, c1):
    """(q2, c2): q1 + dq2 by compensated summation, the carry c1 of q1 -> c2 of q2."""
    return compensated_add(q1, c1, dq2)


def _qr_bases(mech, q):
    """(P, N, R1) from the complete QR factorization G(q)^T = [N P] [R1; 0] (G of full rank m): P
    (d x k) an orthonormal basis of null G(q) (SLO09 §4), N (d x m) one of its complement range
    G(q)^T, R1 (m x m) upper triangular with G(q)^T = N R1. Any orthonormal basis P gives the same
    q_{i+1}; QR costs less than the SVD. Differentiable (:func:`_complete_qr`)."""
    return _complete_qr(mech.G(q).T)


@jax.custom_jvp
def _complete_qr(A):
    """(P, N, R1) of the complete QR factorization A = [N P] [R1; 0] of a d x m matrix of rank m.

    Its derivative: (dN, dR1) that of the reduced factorization A = N R1 (C = N^T dA R1^-1,
    Omega = tril(C, -1) - tril(C, -1)^T, dN = N (Omega - C) + dA R1^-1, dR1 = (C - Omega) R1), and
    dP = -N dN^T P, the derivative of the basis of the complement carried along without rotating
    within it (P^T P = I and N^T P = 0 to first order). The complement's own choice is not unique,
    and the derivative that JAX defines for it is NaN where A has zero rows (G(q) at a
    configuration on a coordinate axis); the null space method's q_{i+1} does not depend on that
    choice, only on the span of P."""
    m = A.shape[1]
    Q, R = jnp.linalg.qr(A, mode="complete")
    return Q[:, m:], Q[:, :m], R[:m]


@_complete_qr.defjvp
def _complete_qr_jvp(primals, tangents):
    (A,), (dA,) = primals, tangents
    P, N, R1 = _complete_qr(A)
    if N.shape[1] == 0:
        return (P, N, R1), (jnp.zeros_like(P), jnp.zeros_like(N), jnp.zeros_like(R1))
    dA_Rinv = jsl.solve_triangular(R1, dA.T, trans=1, lower=False).T  # dA R1^-1
    C = N.T @ dA_Rinv
    low = jnp.tril(C, -1)
    omega = low - low.T
    dN = N @ (omega - C) + dA_Rinv
    dR1 = (C - omega) @ R1
    return (P, N, R1), (-N @ (dN.T @ P), dN, dR1)


def _multiplier(N, R1, r, h):
    """lambda with h G(q)^T lambda = -r in the least-squares sense, from the QR factors
    G(q)^T = N R1 (:func:`_qr_bases`): lambda = -R1^-1 N^T r / h, a triangular solve (recovers
    lambda_i of eq 14, and with h/2 lambda_0 of eq 15)."""
    if N.shape[1] == 0:
        return jnp.zeros((0,), r.dtype)
    return -jsl.solve_triangular(R1, N.T @ r, lower=False) / h


# ------------------------------------------------------------------ nodal reparametrization F(w, q)
CHART_MAX_ITER = 50
"""Newton iterations of the normal correction z (:func:`_normal_correction`)."""


def _normal_correction(mech, y, N):
    """(u, z): the point u = y + N z on g(u) = 0, z found by Newton's method from z = 0 with the
    m x m matrix G(u) N (m products of g's linearization at u: no second derivatives of g), to a
    correction below 1e-15 (1 + |y|). A correction still above 1e-8 (1 + |y|) after
    :data:`CHART_MAX_ITER` iterations (no point of the normal space near y on the manifold) gives
    NaN, so that the step that asked for it fails instead of leaving g(q) = 0."""
    scale = 1.0 + jnp.max(jnp.abs(y))

    def normal_matrix(u):
        r, lin = jax.linearize(mech.g, u)
        return r, jax.vmap(lin, in_axes=1, out_axes=1)(N)

    def cond(c):
        _, dz_norm, it = c
        return (it < CHART_MAX_ITER) & (dz_norm > 1e-15 * scale) & jnp.isfinite(dz_norm)  # dz_norm starts at 1

    def body(c):
        z, _, it = c
        r, J = normal_matrix(y + N @ z)
        dz = -jnp.linalg.solve(J, r)
        return z + dz, jnp.max(jnp.abs(dz)), it + 1

    z0 = jnp.zeros((N.shape[1],), y.dtype)
    z, dz_norm, _ = jax.lax.while_loop(cond, body, (z0, jnp.asarray(1.0, y.dtype), jnp.int32(0)))
    z = jnp.where(dz_norm <= 1e-8 * scale, z, jnp.nan)
    return y + N @ z, z


def make_chart(mech):
    """The point u = y + N z on g = 0 (:func:`_normal_correction`) as a function of (y, N), with its
    implicit derivative (``lax.custom_root``): G(u) du = 0 with du = t + N dz, t = dy + dN z (and
    the System's parameters' part of dg where they are traced), so that dz = -(G(u) N)^-1 G(u) t
    (one m x m solve). Written with ``custom_root``, whose residual may close over traced values
    (the parameters of a gradient), the chart differentiates on every System.

    The Newton loop is one ``jit`` function, called by the chart and by its derivative: a step
    calls it at several places (first guess, Newton, update), which the native backend then writes
    as one C function (:mod:`livens.engine.native.codegen`). Without constraints (m = 0) u = y."""
    if mech.m == 0:
        return lambda y, N: y
    correction = jax.jit(lambda y, N: _normal_correction(mech, y, N))

    def chart(y, N):
        def residual(z):
            return mech.g(y + N @ z)

        def solve(_, z_start):  # the same equations, solved by the one Newton function
            return correction(y, N)[1]

        z = jax.lax.custom_root(residual, jnp.zeros((mech.m,), y.dtype), solve, dense_tangent_solve)
        return y + N @ z

    return chart


_CHARTS = LRU(16)


def reparametrization(mech):
    """F(w, q) = q + P(q) w + N(q) z with g(F) = 0, the nodal reparametrization of the discrete
    null space method: the tangent step P w corrected along the normal space range G(q)^T. Called
    as F(w, q, (P, N)) with the bases of :func:`_qr_bases` at q. Since P^T N = 0,
    w = P^T (F(w, q) - q): the chart's coordinate of a point is its tangent component."""
    chart = _CHARTS.get(mech)
    if chart is None:
        chart = make_chart(mech)
        _CHARTS[mech] = chart

    def F(w, q, bases):
        P, N = bases
        return chart(q + P @ w, N)

    return F


# ------------------------------------------------------------------ the Newton system of eq 14 and 15
def _lagrange_system(x, args, mech):
    """The residual of SLO09 eq 14 and eq 15, one form in the unknowns x = (dq, lambda):

        r + D_1 L_d(q, q + dq) + c h G(q)^T lambda = 0,   g(q + dq) = 0,

    with args = (q, its carry, r, c, h, t): eq 14 at node n+1 is q = q^{n+1}, r = D_2 L_d(q^n, q^{n+1}),
    c = 1, t = t^{n+1}; eq 15 is q = q_0, r = p_0, c = 1/2, t = 0. Its Jacobian is the saddle-point
    matrix [D_dq D_1 L_d, c h G(q)^T; G(q + dq), 0]."""
    q, carry, r, c, h, t = args
    d = mech.d
    dq, lam = x[:d], x[d:]
    return jnp.concatenate([r + D1Ld(mech, q, dq, h, t) + c * h * mech.GT_mul(q, lam), mech.g(_next(q, dq, carry)[0])])


# the step's tangent (eq 14, the band form's key ("scheme", "vi-lagrange"), livens.solvers.tangent) and the
# start's (eq 15) are those of one system, _lagrange_system, at other arguments: one sparsity pattern
same_pattern("vi-lagrange eq 14, 15", "vi-lagrange eq 15", ("scheme", "vi-lagrange"))


def _start_tangent(x, args, mech, jvp):
    """The Newton matrix of :func:`_lagrange_system` at x in the form the size policy takes
    (:func:`livens.solvers.choose_form`, rule ``"unknowns"``): with constraints, the band form
    (:func:`livens.solvers.banded_tangent`: its pattern found once per system, LU with partial pivoting
    over the band, which pivots across the saddle point's zero block) where the matrix is a narrow band,
    else the dense matrix from the linearization ``jvp`` at x."""

    def banded():
        return banded_tangent("vi-lagrange eq 15", _lagrange_system, x, args, mech, jvp)

    forms = TangentForms(
        "unknowns", lambda: linearized_jacobian(x, jvp), n=int(x.shape[0]), banded=banded if mech.m else None
    )
    return choose_form(forms)


# ------------------------------------------------------------------ start (SLO09 eq 15, 17)
def _start_equations(mech, kind, q0, p0, h):
    """Solve the constrained discrete Legendre transform (SLO09 eq 15, or eq 17 for the null space
    form) for the increment dq = q_1 - q_0 and lambda_0; pure and traceable, the solution's
    derivative by the implicit function theorem (:func:`livens.solvers.newton.implicit`). Returns
    (q_1, its carry, dq, lambda_0, residual of eq 15, Newton iterations). Newton takes R and its
    tangent from one linearization per iterate (R written once)."""
    d, m = mech.d, mech.m
    zero = jnp.zeros_like(q0)
    newton = LinearizedNewton(floor=_START_ACCEPT * (1.0 + jnp.max(jnp.abs(p0))))

    def solve(R, x0, tangent=None):
        return implicit(lambda f, x_start: newton.solve(f, x_start, _START_TOL, _START_MAX_ITER, tangent), R, x0)

    if kind == "lagrange":
        args = (q0, zero, p0, jnp.asarray(0.5, q0.dtype), h, jnp.zeros((), q0.dtype))

        def R(x):  # SLO09 eq 15, in the increment dq = q_1 - q_0
            return _lagrange_system(x, args, mech)

        def tangent(x, lin):
            return _start_tangent(x, args, mech, lin)

        res = solve(R, jnp.zeros((d + m,), q0.dtype), tangent)
        dq, lam = res.x[:d], res.x[d:]
    else:
        F = reparametrization(mech)
        P, N, R1 = _qr_bases(mech, q0)

        def R(w):  # SLO09 eq 17
            return P.T @ (p0 + D1Ld(mech, q0, F(w, q0, (P, N)) - q0, h, 0.0))

        res = solve(R, jnp.zeros((d - m,), q0.dtype))
        dq = F(res.x, q0, (P, N)) - q0
    r = p0 + D1Ld(mech, q0, dq, h, 0.0)
    if kind != "lagrange":  # eq 15: r + h/2 G(q_0)^T lambda_0 = 0
        lam = _multiplier(N, R1, r, 0.5 * h)
    q1, c1 = _next(q0, dq, zero)
    full = jnp.concatenate([r + 0.5 * h * mech.GT_mul(q0, lam), mech.g(q1)])
    return q1, c1, dq, lam, jnp.max(jnp.abs(full)), res.iterations


def _make_start(kind):
    eq = "15" if kind == "lagrange" else "17"

    def start(state: State, h, params, mech):
        """q_1 and lambda_0 from the constrained discrete Legendre transform (SLO09 eq {eq}), pure
        and traceable: (the state of the first step, (ok, residual, Newton iterations)). ``ok``:
        the residual of eq 15 is below 1e-9 (1 + |p_0|), or below its round-off floor: eq 15 holds
        M (q_1 - q_0)/h, whose round-off grows like |M| |q| eps / h (heavy bodies at small h, the
        beams of SLO09 §4.2: 1.6e-9 with 540 kg nodes at h = 1.25e-5)."""
        q, p = state.q, state.p
        q1, c1, dq, lam0, resid, its = _start_equations(mech, kind, q, p, h)
        scale = 1.0 + jnp.max(jnp.abs(p))
        floor = 50.0 * jnp.finfo(q.dtype).eps * jnp.max(jnp.abs(mech.M(q))) * (1.0 + jnp.max(jnp.abs(q))) / h
        ok = resid <= jnp.maximum(_START_ACCEPT * scale, floor)
        new = State(q=q, p=p, v=state.v, lam=lam0, gam=state.gam, extra={"q_next": q1, "c_next": c1, "dq": dq})
        return new, (ok, resid, its)

    start.__doc__ = start.__doc__.replace("{eq}", eq)
    return start


# ------------------------------------------------------------------ vi-lagrange (SLO09 eq 14)
def _prepare(s: State, h, t, params, mech) -> State:
    """The step's invariant of eq 14 at node n+1: r = D_2 L_d(q^n, q^{n+1}) (with the discrete force
    f^+_d), the same at every Newton iterate and the first term of p^{n+1} (:func:`_advance`)."""
    return s._replace(extra={**s.extra, "r": D2Ld(mech, s.q, s.extra["dq"], h, t)})


def _d2(s: State, h, t, mech):
    """r = D_2 L_d(q^n, q^{n+1}) of the step: prepared (:func:`_prepare`), else computed."""
    ex = s.extra
    return ex["r"] if "r" in ex else D2Ld(mech, s.q, ex["dq"], h, t)


def _step_args(s: State, h, t, mech):
    """The arguments of :func:`_lagrange_system` for eq 14 at node n+1."""
    ex = s.extra
    q1 = ex["q_next"]
    return q1, ex["c_next"], _d2(s, h, t, mech), jnp.ones((), q1.dtype), h, t + h


def _lagrange_residual(u, s: State, h, t, params, mech):
    """SLO09 eq 14 at node n+1: D_2 L_d(q^n, q^{n+1}) + D_1 L_d(q^{n+1}, q^{n+2}) + h G^T lambda = 0,
    in the increments (``extra["dq"]`` = q^{n+1} - q^n, the unknown dq2 = q^{n+2} - q^{n+1})."""
    return _lagrange_system(jnp.concatenate([u["dq2"], u["lam"]]), _step_args(s, h, t, mech), mech)


def _lagrange_guess(s: State, h, t, params, mech, mode):
    """q^{n+2} = q^{n+1} ("simple") or 2 q^{n+1} - q^n ("advanced"), as increments."""
    dq2 = s.extra["dq"] if mode == "advanced" else jnp.zeros_like(s.q)
    return {"dq2": dq2, "lam": s.lam}


def _advance(dq2, lam1, s: State, h, t, mech):
    """Node n+1 of the position-momentum form: p^{n+1} by the constrained discrete Legendre
    transform; q^{n+2} = q^{n+1} + dq2 by compensated summation (carry in ``extra["c_next"]``)."""
    ex = s.extra
    q1, dq1 = ex["q_next"], ex["dq"]
    p1 = _d2(s, h, t, mech) + 0.5 * h * mech.GT_mul(q1, lam1)
    v = dq1 / h
    q2, c2 = _next(q1, dq2, ex["c_next"])
    new = State(q=q1, p=p1, v=v, lam=lam1, gam=s.gam, extra={"q_next": q2, "c_next": c2, "dq": dq2})
    return new, {"v": v, "lam": s.lam}


def _lagrange_update(u, s: State, h, t, params, mech):
    return _advance(u["dq2"], u["lam"], s, h, t, mech)


def _regular_start(name: str):
    """``Capabilities.applies_to``: refuse a start at a singular configuration (rank G(q_0) below the
    rank near q_0, :mod:`livens.redundancy`). The start step holds the constraint force at the node,
    h/2 G(q_0)^T lambda_0 (SLO09 eq 15, 17): there it spans one direction fewer than the motion needs, so
    eq 15 has no solution for a generic p_0 (and eq 17 no null-space basis of the right size)."""

    def check(problem, mech):
        rank = getattr(problem, "constraint_rank", None)
        if rank is None or not rank.singular_start:
            return None
        return (
            f"{name} cannot start at a singular configuration: rank G(q0) = {rank.rank_q0} < {rank.rank} = rank G "
            "near q0, and its start step (SLO09 eq 15, 17) needs the constraint force at q0, G(q0)^T lambda_0, to "
            "span the normal space. Start it a step away from q0 (e.g. from the end of a one-step run of another "
            "scheme), or use a scheme that evaluates G at the new node or the midpoint: ggl-vi or rattle "
            "(symplectic), ggl-em (energy-momentum)."
        )

    return check


VI_LAGRANGE = register(
    Scheme(
        name="vi-lagrange",
        unknowns=(("dq2", "d"), ("lam", "m")),
        residual=_lagrange_residual,
        guess=_lagrange_guess,
        update=_lagrange_update,
        start=_make_start("lagrange"),
        prepare=_prepare,
        capabilities=Capabilities(
            velocity_kind="interval",
            mass_inverse=False,
            singular_mass=True,
            configuration_mass=True,
            applies_to=_regular_start("vi-lagrange"),
        ),
        about=About(
            paper="SLO09 eq 14, 15, 18 (Schmidt, Leyendecker, Ortiz 2009)",
            description="variational integrator, midpoint discrete Lagrangian, Lagrange multipliers (two-step)",
            keeps="variational (symplectic), momentum maps, g(q) at the nodes; order 2",
            order=2,
        ),
    ),
)


# ------------------------------------------------------------------ vi-nullspace (SLO09 eq 16, 17)
def _prepare_nullspace(s: State, h, t, params, mech) -> State:
    """The step's invariants of eq 16 at node n+1: r = D_2 L_d(q^n, q^{n+1}) (:func:`_prepare`) and
    the bases P, N and factor R1 of G(q^{n+1})^T (:func:`_qr_bases`)."""
    P, N, R1 = _qr_bases(mech, s.extra["q_next"])
    s = _prepare(s, h, t, params, mech)
    return s._replace(extra={**s.extra, "P": P, "N": N, "R1": R1})


def _bases(s: State, mech):
    """(P, N, R1) at q^{n+1}: prepared (:func:`_prepare_nullspace`), else computed."""
    ex = s.extra
    return (ex["P"], ex["N"], ex["R1"]) if "P" in ex else _qr_bases(mech, ex["q_next"])


def _nullspace_residual(u, s: State, h, t, params, mech):
    """SLO09 eq 16 at node n+1, for w with q^{n+2} = F(w, q^{n+1})."""
    q1 = s.extra["q_next"]
    P, N, _ = _bases(s, mech)
    q2 = reparametrization(mech)(u["w"], q1, (P, N))
    return P.T @ (_d2(s, h, t, mech) + D1Ld(mech, q1, q2 - q1, h, t + h))


def _nullspace_guess(s: State, h, t, params, mech, mode):
    """w of eq 16 (SLO09) for q^{n+2}: 0 ("simple"), or P^T (q^{n+1} - q^n), the tangent component of the
    last increment ("advanced")."""
    q1 = s.extra["q_next"]
    if mode == "advanced":
        return {"w": _bases(s, mech)[0].T @ s.extra["dq"]}
    return {"w": jnp.zeros((mech.d - mech.m,), q1.dtype)}


def _nullspace_update(u, s: State, h, t, params, mech):
    """q^{n+2} = F(w, q^{n+1}); lambda_{n+1} from eq 14 by least squares, h N R1 lambda = -r with
    r = D_2 L_d + D_1 L_d (G^T = N R1: a triangular solve); then :func:`_advance`."""
    q1 = s.extra["q_next"]
    P, N, R1 = _bases(s, mech)
    dq2 = reparametrization(mech)(u["w"], q1, (P, N)) - q1
    lam1 = _multiplier(N, R1, _d2(s, h, t, mech) + D1Ld(mech, q1, dq2, h, t + h), h)
    return _advance(dq2, lam1, s, h, t, mech)


VI_NULLSPACE = register(
    Scheme(
        name="vi-nullspace",
        unknowns=(("w", "k"),),
        residual=_nullspace_residual,
        guess=_nullspace_guess,
        update=_nullspace_update,
        start=_make_start("nullspace"),
        prepare=_prepare_nullspace,
        capabilities=Capabilities(
            velocity_kind="interval",
            mass_inverse=False,
            singular_mass=True,
            configuration_mass=True,
            applies_to=_regular_start("vi-nullspace"),
        ),
        solving=Solving(linearize_once=True),
        about=About(
            paper="SLO09 eq 16, 17, 18 (discrete null space method; Leyendecker, Marsden, Ortiz 2008)",
            description="discrete null space method: the vi-lagrange trajectory from d - m unknowns per step",
            keeps="variational (symplectic), momentum maps, g(q) at the nodes; order 2",
            order=2,
        ),
    ),
)
