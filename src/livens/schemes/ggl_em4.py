"""The GGL energy-momentum scheme of order 4 (``ggl-em4``): a continuous Galerkin time finite element.

A continuous-Galerkin (mcG(2)) time finite element in the manner of [BS02b] applied to the GGL
equations of motion (KBS23b eq 37; a configuration-dependent M(q) by KBS23b Remark 3), with an
energy-momentum correction of the force in the spirit of the discrete gradients of KBS23b eq 85-86;
derived in the theory pages ("The GGL energy-momentum scheme of order 4"), every equation below is new.

On [t^n, t^n + h], tau in [0, 1], q and p are polynomials of degree 2 through their values at
tau = 0, 1/2, 1 (q(0) = q^n, q(1) = q^{n+1}, the same for p); lambda and gamma are polynomials of
degree 1 through their values lambda_0 = lambda(0), lambda_1 = lambda(1) (and gamma_0, gamma_1). The
tests are the polynomials of degree 1, with the orthonormal basis phi_0 = 1, phi_1 = sqrt(3) (2 tau - 1)
on [0, 1], and every integral is a Gauss-Legendre quadrature with N = :data:`QUADRATURE_POINTS` points
(exact to degree 2N - 1), written <f>_i = sum_k w_k phi_i(c_k) f(c_k). With ' = d/dtau, the step solves,
for i = 0, 1,

    <q'>_i = h <M(q)^-1 p>_i + h <M(q)^-1 G(q)^T gamma>_i                  (position equation)
    <p'>_i = -h F_i                                                        (momentum equation)
    g(q^{n+1}) = 0,  <g(q)>_0 = 0                                          (lambda_0, lambda_1)
    g_v(q^{n+1}, p^{n+1}) = 0,  <g_v(q, p)>_0 = 0,  g_v = G(q) M(q)^-1 p     (gamma_0, gamma_1)

with F = F^0 + correction, F^0_i = <grad_q H(q, p) + G(q)^T lambda + D_q g_v(q, p)^T gamma>_i the
Galerkin projection of the force of KBS23b eq 37 (grad_q H = grad V for a constant M). Writing
a_i = <q'>_i, b_i = <p'>_i (q' = sum_i a_i phi_i exactly), Pi_i = <M^-1 p>_i,
Gamma_i = <M^-1 G^T gamma>_i, P_i = <p>_i, the position and momentum equations give
sum_i a_i . b_i = h sum_i b_i . (Pi_i + Gamma_i) = -h sum_i a_i . F_i, and the momentum map
J = p . xi(q) of a symmetry xi(q) = A q + e changes by exact integrals of polynomials, so that

    H^{n+1} = H^n        if  sum_i a_i . F_i = H^{n+1} - H^n - sum_i b_i . (Pi_i + Gamma_i),
    J^{n+1} - J^n = -h sum_i F_i . <xi(q)>_i + h sum_i (A^T P_i) . (Pi_i + Gamma_i)

(A^T p = -(its cotangent generator)). For a constant M the energy condition's right-hand side is
V^{n+1} - V^n - sum_i b_i . Gamma_i (T's change is sum_i b_i . Pi_i exactly) and the Pi-term of J
vanishes (M^-1 A is skew); the scheme evaluates these forms there. The correction (the formula of
:func:`livens.discrete_gradients.corrected`, on the 2d-vectors (F_0, F_1), :func:`_corrected`) meets the
energy condition and makes J's change vanish: H and the momentum maps of the exact symmetries of V, g
and M are conserved to the Newton tolerance, whatever the quadrature error. The uncorrected F^0 already
meets both up to O(h^4) (the quadrature error of the energy balance and the parts of xi(q), p and
M^-1 p outside the tests), so the correction changes p by O(h^5) per step: the order of cG(2), 4 in q
and p at the nodes, is kept. Both constraints hold at the nodes; not symplectic. An M(q) enters through
linear solves with M(q) at the quadrature points only (a singular M is refused: g_v needs M^-1).

The unknowns are increments: dq = q^{n+1} - q^n, dp = p^{n+1} - p^n, Qm = q(1/2) - q^n,
Pm = p(1/2) - p^n, and lam0, lam (lambda_0, lambda_1), gam0, gam (gamma_0, gamma_1): 4d + 4m.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import discrete_gradients as dg
from ..mechanics import Mechanics
from ..solvers import Dense, TangentForms, banded_tangent, choose_form
from ..solvers.couplings import coupling
from . import ggl_em4_tangent, ggl_mass, register
from .base import BOTH_NODAL, About, Capabilities, Scheme, State, next_node

QUADRATURE_POINTS = 4
"""N, the Gauss-Legendre points of every integral over a step (exact to degree 2N - 1 = 7)."""


def tables(n: int = QUADRATURE_POINTS) -> dict[str, np.ndarray]:
    """The quadrature on [0, 1] and the polynomials of a step at its points c_k: ``c``, ``w`` (points
    and weights), ``W`` (2, n) = w_k phi_i(c_k) (the projection onto the tests phi_0 = 1,
    phi_1 = sqrt(3) (2 tau - 1)), ``lm``, ``l1`` and their derivatives ``dlm``, ``dl1``: the Lagrange
    polynomials on tau = 0, 1/2, 1 of the midpoint and of the end point (the one of tau = 0 is not
    needed: the unknowns are increments), and ``lin`` (2, n): 1 - c_k and c_k (a polynomial of degree
    1 from its end values)."""
    x, wx = np.polynomial.legendre.leggauss(n)
    c, w = (x + 1.0) / 2.0, wx / 2.0
    phi = np.stack([np.ones_like(c), np.sqrt(3.0) * (2.0 * c - 1.0)])
    return {
        "c": c,
        "w": w,
        "W": w[None, :] * phi,
        "lm": -4.0 * c * (c - 1.0),
        "l1": 2.0 * c * (c - 0.5),
        "dlm": -8.0 * c + 4.0,
        "dl1": 4.0 * c - 1.0,
        "lin": np.stack([1.0 - c, c]),
    }


def _path(x0: jax.Array, dmid: jax.Array, dend: jax.Array, tab: dict) -> tuple[jax.Array, jax.Array]:
    """(values, tau-derivatives) at the quadrature points, (n, d) each, of the polynomial of degree 2
    with x(0) = x0, x(1/2) = x0 + dmid, x(1) = x0 + dend."""
    lm, l1 = jnp.asarray(tab["lm"])[:, None], jnp.asarray(tab["l1"])[:, None]
    dlm, dl1 = jnp.asarray(tab["dlm"])[:, None], jnp.asarray(tab["dl1"])[:, None]
    return x0[None, :] + lm * dmid + l1 * dend, dlm * dmid + dl1 * dend


def _corrected(a0, dx, df, xm, Z, targets):
    """The corrected gradient of :func:`livens.discrete_gradients.corrected` (a0 + Z y + c u with
    Z^T a = ``targets`` and a . dx = ``df``, u the part of dx outside span Z, c faded out where u is
    tiny), the same formula with its r x r Gram system solved by one LU factorization and one step of
    iterative refinement: its derivative, which the AD tangent of the 4d + 4m unknowns needs, compiles
    in a fraction of the time of the unrolled Cholesky factorization of the module."""
    if Z is None or not Z.shape[1]:
        return dg.corrected(a0, dx, df, xm)
    r = Z.shape[1]
    gram = Z.T @ Z
    shifted = gram + (1e-14 * jnp.trace(gram) / r + 1e-200) * jnp.eye(r, dtype=gram.dtype)
    B = jnp.stack([targets - Z.T @ a0, Z.T @ dx], axis=1)
    Y = jnp.linalg.solve(shifted, B)
    Y = coupling(Y + jnp.linalg.solve(shifted, B - gram @ Y))
    a1, u = a0 + Z @ Y[:, 0], dx - Z @ Y[:, 1]
    s = u @ u
    d4 = (dg.DELTA**2 * (1.0 + xm @ xm)) ** 2 + (dg.SYMMETRY_EPS**2 * (dx @ dx)) ** 2
    return a1 + coupling((df - a1 @ dx) * s / (s * s + d4)) * u


def _at_points(mech: Mechanics, Q: jax.Array, P: jax.Array, lam_k: jax.Array, gam_k: jax.Array):
    """(w, a, f), (n, d) each, at the quadrature points (q_k, p_k, lambda_k, gamma_k): w = M^-1 p,
    a = M^-1 G(q)^T gamma and f = grad_q H(q, p) + G(q)^T lambda + D_q g_v(q, p)^T gamma, the force of
    KBS23b eq 37 (Remark 3 for M(q)). A constant M is applied as M^-1 (grad_q H = grad V); an M(q)
    by one linear solve with M(q_k) for a and w (:func:`livens.schemes.ggl_mass.solve_at`), and f as
    the gradient of V + lambda.g - 1/2 w.M(y) w + gamma.G(y) w - a.M(y) w at a, w held fixed
    (docs/theory/ggl-mass.md: -1/2 w.DM w = grad_q 1/2 p.M^-1 p, the last two terms D_q g_v^T gamma)."""
    if mech.constant_mass:
        w = jax.vmap(mech.Minv_mul)(P)
        a = jax.vmap(mech.Minv_mul)(jax.vmap(mech.GT_mul)(Q, gam_k))
        return w, a, jax.vmap(jax.grad(constant_mass_force_potential(mech)))(Q, lam_k, gam_k, w)

    def point(q, p, lam, gam):
        a, w = ggl_mass.solve_at(mech, q, gam, p)
        kinetic = ggl_mass.secondary_potential(mech, gam, w, a, kinetic=w)

        def phi(y):  # V + lambda.g - (T(y, w) - gamma.G(y) w + a.M(y) w)
            out = mech.V(y) - kinetic(y)
            return out + lam @ mech.g(y) if mech.m else out

        return w, a, jax.grad(phi)(q)

    return jax.vmap(point)(Q, P, lam_k, gam_k)


def constant_mass_force_potential(mech: Mechanics):
    """(q, lambda, gamma, w) -> V(q) + lambda.g(q) + gamma.G(q) w: its gradient in q is the force of
    KBS23b eq 37 for a constant M at w = M^-1 p."""

    def phi(q, lam, gam, w):
        if not mech.m:
            return mech.V(q)
        gq, Gw = jax.jvp(mech.g, (q,), (w,))
        return mech.V(q) + lam @ gq + gam @ Gw

    return phi


class Evaluations:
    """The system's functions as a step evaluates them: at the quadrature points (:meth:`points`) and at
    the end node (:meth:`end`). The residual takes them from here; the structured tangent takes the
    values from its Jacobians at the same points (:class:`livens.schemes.ggl_em4_tangent.PointJacobians`)."""

    def __init__(self, mech: Mechanics):
        self.mech = mech

    def points(self, Q, P, lam_k, gam_k) -> dict:
        """At the points (q_k, p_k, lambda_k, gamma_k): ``w``, ``a``, ``f`` (:func:`_at_points`), ``g`` (g(q_k)),
        ``gv`` (G(q_k) w_k) and ``gens`` (the symmetries' generators, (n, d, r); absent without symmetries)."""
        mech = self.mech
        w, a, f = _at_points(mech, Q, P, lam_k, gam_k)
        out = {"w": w, "a": a, "f": f}
        if mech.symmetries:
            out["gens"] = jax.vmap(mech.generators)(Q)
        if mech.m:
            out["g"] = jax.vmap(mech.g)(Q)
            out["gv"] = jax.vmap(lambda q, w: jax.jvp(mech.g, (q,), (w,))[1])(Q, w)
        return out

    def end(self, q1, p1) -> dict:
        """At the end node: ``energy`` (V(q1) for a constant M, else H(q1, p1)), ``g`` (g(q1)) and ``gv``
        (g_v(q1, p1)); the last two only with constraints."""
        mech = self.mech
        out = {"energy": mech.V(q1) if mech.constant_mass else hamiltonian(mech, q1, p1)}
        if mech.m:
            out["g"] = mech.g(q1)
            out["gv"] = ggl_mass.secondary(mech, q1, p1)
        return out


def hamiltonian(mech: Mechanics, q: jax.Array, p: jax.Array) -> jax.Array:
    """H(q, p) = 1/2 p.M(q)^-1 p + V(q) (KBS23b eq 7), M(q)^-1 p by a linear solve."""
    return 0.5 * p @ ggl_mass.mass_solve(mech, q, p) + mech.V(q)


def step_terms(
    mech: Mechanics,
    q0: jax.Array,
    p0: jax.Array,
    dq: jax.Array,
    qm: jax.Array,
    dp: jax.Array,
    pm: jax.Array,
    lams: jax.Array,
    gams: jax.Array,
    q1: jax.Array | None = None,
    p1: jax.Array | None = None,
    at: Evaluations | None = None,
) -> dict[str, jax.Array]:
    """The projections of a step (module docstring, new) at the polynomials q, p through q0, q0 + qm,
    q0 + dq (p likewise) and the multipliers lambda, gamma through ``lams``, ``gams`` (2, m): ``a``, ``b``
    (<q'>_i, <p'>_i), ``Pi`` (<M^-1 p>_i), ``Gam`` (<M^-1 G^T gamma>_i), ``F`` (the corrected force) and
    ``F0`` (its Galerkin projection), each (2, d); ``gmean``, ``gvmean`` (<g>_0, <g_v>_0), ``g1``, ``gv1``
    (g and g_v at the end node) and ``correction`` (the arguments of :func:`_corrected` that give F).
    ``q1``, ``p1`` are where the end point is stored (default q0 + dq, p0 + dp); the energy balance is
    taken there. ``at``: where the system's functions are evaluated (default :class:`Evaluations` of
    ``mech``)."""
    tab = tables()
    W = jnp.asarray(tab["W"])
    lin = jnp.asarray(tab["lin"])
    at = Evaluations(mech) if at is None else at
    q1 = q0 + dq if q1 is None else q1
    p1 = p0 + dp if p1 is None else p1
    Q, dQ = _path(q0, qm, dq, tab)
    P, dP = _path(p0, pm, dp, tab)
    lam_k, gam_k = lin.T @ lams, lin.T @ gams
    pts, end = at.points(Q, P, lam_k, gam_k), at.end(q1, p1)
    a, b, Pi, Gam, F0 = W @ dQ, W @ dP, W @ pts["w"], W @ pts["a"], W @ pts["f"]
    d = mech.d
    if mech.constant_mass:  # T^{n+1} - T^n = sum_i b_i . Pi_i exactly
        target_e = end["energy"] - mech.V(q0) - jnp.sum(b * Gam)
        flow = Gam  # sum_i (A^T P_i) . Pi_i = 0: A M^-1 is skew
    else:
        target_e = end["energy"] - hamiltonian(mech, q0, p0) - jnp.sum(b * (Pi + Gam))
        flow = Pi + Gam
    xm = (W @ Q).reshape(-1)
    if not mech.symmetries:
        Z, targets = None, None
    else:
        Z = jnp.einsum("ik,kdr->idr", W, pts["gens"]).reshape(2 * d, -1)
        Pbar = W @ P
        cot = jax.vmap(mech.cotangent_generators)(Pbar)  # (2, d, r): -A^T P_i
        targets = -jnp.einsum("idr,id->r", cot, flow)
    correction = (F0.reshape(-1), a.reshape(-1), target_e, xm, Z, targets)
    F = _corrected(*correction).reshape(2, d)
    out = {"a": a, "b": b, "Pi": Pi, "Gam": Gam, "F": F, "F0": F0, "correction": correction}
    if mech.m:
        out.update(gmean=W[0] @ pts["g"], gvmean=W[0] @ pts["gv"], g1=end["g"], gv1=end["gv"])
    else:
        out.update({k: jnp.zeros((0,), q0.dtype) for k in ("gmean", "gvmean", "g1", "gv1")})
    return out


_UNKNOWNS = (
    ("dq", "d"),
    ("dp", "d"),
    ("Qm", "d"),
    ("Pm", "d"),
    ("lam0", "m"),
    ("lam", "m"),
    ("gam0", "m"),
    ("gam", "m"),
)


def _residual(u, s: State, h, t, params, mech):
    """The step equations of the module docstring (new), in the layout of :data:`_UNKNOWNS`."""
    cq, cp = (None, None) if s.comp is None else s.comp
    q1 = next_node(s.q, u["dq"], cq)
    p1 = next_node(s.p, u["dp"], cp)
    lams = jnp.stack([u["lam0"], u["lam"]])
    gams = jnp.stack([u["gam0"], u["gam"]])
    st = step_terms(mech, s.q, s.p, u["dq"], u["Qm"], u["dp"], u["Pm"], lams, gams, q1, p1)
    rows = [
        (st["a"] - h * (st["Pi"] + st["Gam"])).reshape(-1),
        (st["b"] + h * st["F"]).reshape(-1),
    ]
    if mech.m:
        rows += [st["g1"], st["gmean"], st["gv1"], st["gvmean"]]
    return jnp.concatenate(rows)


def _tangent(u, s: State, h, t, params, mech):
    """dR/dx in the form the size policy takes (:func:`livens.solvers.choose_form`, rule ``"unknowns"``):
    the band form where the system's couplings make one; else, for a constant M, assembled from the
    Jacobians of the system's functions at the quadrature points and the end node
    (:func:`_assembled`), and for an M(q) the dense AD Jacobian of all the unknowns at once (one
    ``jax.jacfwd``)."""
    sizes = [(n, int(u[n].shape[0])) for n, _ in _UNKNOWNS]
    x = jnp.concatenate([u[n] for n, _ in sizes])

    def unpack(z):  # as Scheme.unpack
        starts = [int(i) for i in np.cumsum([0] + [k for _, k in sizes])]
        return {n: z[i : i + k] for (n, k), i in zip(sizes, starts)}

    def residual(z, a, mech):
        return _residual(unpack(z), *a, mech)

    def banded():
        return banded_tangent(("scheme", "ggl-em4"), residual, x, (s, h, t, params), mech)

    def dense():
        if mech.constant_mass:
            return Dense(_assembled(u, s, h, mech, sizes))
        # one jacfwd of all the unknowns (the solvers' AD tangent below block_jacobian_unknowns, the same
        # program): the block form's one jacfwd per named unknown held the residual, its solves with M(q)
        # and their derivatives eight times in the compiled step (Andrews' squeezer)
        return Dense(jax.jacfwd(lambda z: _residual(unpack(z), s, h, t, params, mech))(x))

    return choose_form(TangentForms("unknowns", dense, n=int(x.shape[0]), banded=banded))


def _assembled(u, s: State, h, mech, sizes):
    """dR/dx for a constant M, assembled from the Jacobians of the system's functions at the quadrature
    points and the end node (:mod:`livens.schemes.ggl_em4_tangent`); ``sizes``: ((name, n), ...) of the
    unknowns in their order."""
    tab = tables()
    lin = jnp.asarray(tab["lin"])
    cq, cp = (None, None) if s.comp is None else s.comp
    q1, p1 = next_node(s.q, u["dq"], cq), next_node(s.p, u["dp"], cp)
    lams, gams = jnp.stack([u["lam0"], u["lam"]]), jnp.stack([u["gam0"], u["gam"]])
    Q = _path(s.q, u["Qm"], u["dq"], tab)[0]
    P = _path(s.p, u["Pm"], u["dp"], tab)[0]
    J = ggl_em4_tangent.PointJacobians(
        mech, constant_mass_force_potential(mech), Q, P, lin.T @ lams, lin.T @ gams, q1, p1
    )
    terms = step_terms(mech, s.q, s.p, u["dq"], u["Qm"], u["dp"], u["Pm"], lams, gams, q1, p1, at=J)
    return ggl_em4_tangent.assembled(J, terms, tab, h, _corrected, sizes)


def _guess(s: State, h, t, params, mech, mode):
    """q^{n+1} = q^n + h v^n, q(1/2) = q^n + h/2 v^n ("advanced") or q^n; p^n throughout; the
    multipliers of the last step."""
    adv = mode == "advanced"
    z = jnp.zeros_like(s.q)
    return {
        "dq": h * s.v if adv else z,
        "Qm": 0.5 * h * s.v if adv else z,
        "dp": jnp.zeros_like(s.p),
        "Pm": jnp.zeros_like(s.p),
        "lam0": s.lam,
        "lam": s.lam,
        "gam0": s.gam,
        "gam": s.gam,
    }


def _update(u, s: State, h, t, params, mech):
    """q^{n+1}, p^{n+1} (as the time loop stores them), v = M(q^{n+1})^-1 p^{n+1}, lambda(t^{n+1}), gamma(t^{n+1})."""
    cq, cp = (None, None) if s.comp is None else s.comp
    q1 = next_node(s.q, u["dq"], cq)
    p1 = next_node(s.p, u["dp"], cp)
    v = mech.Minv_mul(p1) if mech.constant_mass else ggl_mass.mass_solve(mech, q1, p1)
    new = State(q=q1, p=p1, v=v, lam=u["lam"], gam=u["gam"], extra=s.extra, comp=s.comp)
    return new, {"v": v, "lam": u["lam"], "gam": u["gam"]}


GGL_EM4 = register(
    Scheme(
        name="ggl-em4",
        unknowns=_UNKNOWNS,
        residual=_residual,
        tangent=_tangent,
        guess=_guess,
        update=_update,
        capabilities=Capabilities(
            external_force=False,
            velocity_kind="nodal",
            gamma=True,
            symmetries=True,
            mass_inverse=False,
            configuration_mass=True,
            applies_to=ggl_mass.refusal("ggl-em4"),
        ),
        about=About(
            paper="BS02b (continuous Galerkin time finite elements) applied to the GGL equations KBS23b eq 37 "
            "(M(q) by KBS23b Remark 3), with the energy-momentum conditions of KBS23b eq 85-86",
            description="GGL energy-momentum scheme of order 4 (continuous Galerkin, degree 2)",
            enforced=BOTH_NODAL,
            keeps="energy, momentum maps, both constraints at nodes; order 4",
            order=4,
        ),
    ),
)
