"""The GGL energy-momentum scheme of order 4 (``ggl-em4``): a continuous Galerkin time finite element.

A continuous-Galerkin (mcG(2)) time finite element in the manner of [BS02b] applied to the GGL
equations of motion (KBS23b eq 37, constant M), with an energy-momentum correction of the force
in the spirit of the discrete gradients of KBS23b eq 85-86; derived in the theory pages ("The GGL
energy-momentum scheme of order 4"), every equation below is new.

On [t^n, t^n + h], tau in [0, 1], q and p are polynomials of degree 2 through their values at
tau = 0, 1/2, 1 (q(0) = q^n, q(1) = q^{n+1}, the same for p); lambda and gamma are polynomials of
degree 1 through their values lambda_0 = lambda(0), lambda_1 = lambda(1) (and gamma_0, gamma_1). The
tests are the polynomials of degree 1, with the orthonormal basis phi_0 = 1, phi_1 = sqrt(3) (2 tau - 1)
on [0, 1], and every integral is a Gauss-Legendre quadrature with N = :data:`QUADRATURE_POINTS` points
(exact to degree 2N - 1), written <f>_i = sum_k w_k phi_i(c_k) f(c_k). With ' = d/dtau, the step solves,
for i = 0, 1,

    <q'>_i = h <M^-1 p>_i + h <M^-1 G(q)^T gamma>_i                   (position equation)
    <p'>_i = -h F_i                                                  (momentum equation)
    g(q^{n+1}) = 0,  <g(q)>_0 = 0                                    (lambda_0, lambda_1)
    g_v(q^{n+1}, p^{n+1}) = 0,  <g_v(q, p)>_0 = 0,  g_v = G(q) M^-1 p  (gamma_0, gamma_1)

with F = F^0 + correction, F^0_i = <grad V(q) + G(q)^T lambda + D_q g_v(q, p)^T gamma>_i the Galerkin
projection of the force of KBS23b eq 37. Writing a_i = <q'>_i, b_i = <p'>_i (q' = sum_i a_i phi_i
exactly), Gamma_i = <M^-1 G^T gamma>_i, P_i = <p>_i, the energy H = 1/2 p.M^-1 p + V and the momentum
map J = p . xi(q) of a symmetry xi change over the step by

    H^{n+1} - H^n = V^{n+1} - V^n - sum_i a_i . F_i - sum_i b_i . Gamma_i,
    J^{n+1} - J^n = -h sum_i F_i . <xi(q)>_i + h sum_i (A^T P_i) . Gamma_i,

(xi(q) = A q + e, A^T p = -(its cotangent generator); exact integrals of polynomials, given that
M^-1 A is skew). The correction (the formula of :func:`livens.discrete_gradients.corrected`, on
the 2d-vectors (F_0, F_1), :func:`_corrected`) makes both right-hand sides vanish: H and the momentum maps of the exact symmetries of
V, g and M are conserved to the Newton tolerance, whatever the quadrature error. The uncorrected
F^0 already meets both up to O(h^4) (the quadrature error of the energy balance and the part of
xi(q) outside the tests), so the correction changes p by O(h^5) per step: the order of cG(2), 4 in q
and p at the nodes, is kept. Both constraints hold at the nodes; not symplectic.

The unknowns are increments: dq = q^{n+1} - q^n, dp = p^{n+1} - p^n, Qm = q(1/2) - q^n,
Pm = p(1/2) - p^n, and lam0, lam (lambda_0, lambda_1), gam0, gam (gamma_0, gamma_1): 4d + 4m.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import discrete_gradients as dg
from ..mechanics import Mechanics
from ..solvers.couplings import coupling
from . import ggl_mass, register
from .base import About, Capabilities, Scheme, State, enforced_both_nodal, next_node

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
) -> dict[str, jax.Array]:
    """The projections of a step (module docstring, new) at the polynomials q, p through q0, q0 + qm,
    q0 + dq (p likewise) and the multipliers lambda, gamma through ``lams``, ``gams`` (2, m): ``a``, ``b``
    (<q'>_i, <p'>_i), ``Pi`` (<M^-1 p>_i), ``Gam`` (<M^-1 G^T gamma>_i), ``F`` (the corrected force) and
    ``F0`` (its Galerkin projection), each (2, d); ``gmean``, ``gvmean`` (<g>_0, <g_v>_0). ``q1`` is
    where the end point is stored (default q0 + dq); the energy balance is taken there."""
    tab = tables()
    W = jnp.asarray(tab["W"])
    lin = jnp.asarray(tab["lin"])
    q1 = q0 + dq if q1 is None else q1
    Q, dQ = _path(q0, qm, dq, tab)
    P, dP = _path(p0, pm, dp, tab)
    lam_k, gam_k = lin.T @ lams, lin.T @ gams
    Wp = jax.vmap(mech.Minv_mul)(P)
    GTg = jax.vmap(mech.GT_mul)(Q, gam_k)
    a, b, Pi, Gam = W @ dQ, W @ dP, W @ Wp, W @ jax.vmap(mech.Minv_mul)(GTg)

    def phi(q, lam, gam, w):  # V + lambda.g + gamma.G(q) w: its gradient is the force of KBS23b eq 37
        if not mech.m:
            return mech.V(q)
        gq, Gw = jax.jvp(mech.g, (q,), (w,))
        return mech.V(q) + lam @ gq + gam @ Gw

    F0 = W @ jax.vmap(jax.grad(phi))(Q, lam_k, gam_k, Wp)
    d = mech.d
    target_e = mech.V(q1) - mech.V(q0) - jnp.sum(b * Gam)
    xm = (W @ Q).reshape(-1)
    gens = jax.vmap(mech.generators)(Q) if mech.symmetries else None
    if gens is None:
        Z, targets = None, None
    else:
        Z = jnp.einsum("ik,kdr->idr", W, gens).reshape(2 * d, -1)
        Pbar = W @ P
        cot = jax.vmap(mech.cotangent_generators)(Pbar)  # (2, d, r)
        targets = -jnp.einsum("idr,id->r", cot, Gam)
    F = _corrected(F0.reshape(-1), a.reshape(-1), target_e, xm, Z, targets).reshape(2, d)
    if mech.m:
        gmean = W[0] @ jax.vmap(mech.g)(Q)
        gvmean = W[0] @ jax.vmap(lambda q, w: jax.jvp(mech.g, (q,), (w,))[1])(Q, Wp)
    else:
        gmean = gvmean = jnp.zeros((0,), q0.dtype)
    return {"a": a, "b": b, "Pi": Pi, "Gam": Gam, "F": F, "F0": F0, "gmean": gmean, "gvmean": gvmean}


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
    st = step_terms(mech, s.q, s.p, u["dq"], u["Qm"], u["dp"], u["Pm"], lams, gams, q1)
    rows = [
        (st["a"] - h * (st["Pi"] + st["Gam"])).reshape(-1),
        (st["b"] + h * st["F"]).reshape(-1),
    ]
    if mech.m:
        rows += [mech.g(q1), st["gmean"], ggl_mass.secondary(mech, q1, p1), st["gvmean"]]
    return jnp.concatenate(rows)


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
    """q^{n+1}, p^{n+1} (as the time loop stores them), v = M^-1 p^{n+1}, lambda(t^{n+1}), gamma(t^{n+1})."""
    cq, cp = (None, None) if s.comp is None else s.comp
    q1 = next_node(s.q, u["dq"], cq)
    p1 = next_node(s.p, u["dp"], cp)
    v = mech.Minv_mul(p1)
    new = State(q=q1, p=p1, v=v, lam=u["lam"], gam=u["gam"], extra=s.extra, comp=s.comp)
    return new, {"v": v, "lam": u["lam"], "gam": u["gam"]}


GGL_EM4 = register(
    Scheme(
        name="ggl-em4",
        unknowns=_UNKNOWNS,
        residual=_residual,
        guess=_guess,
        update=_update,
        capabilities=Capabilities(
            external_force=False,
            velocity_kind="nodal",
            gamma=True,
            symmetries=True,
            mass_inverse=True,
            configuration_mass=False,
        ),
        about=About(
            paper="BS02b (continuous Galerkin time finite elements) applied to the GGL equations KBS23b eq 37, "
            "with the energy-momentum conditions of KBS23b eq 85-86",
            description="GGL energy-momentum scheme of order 4 (continuous Galerkin, degree 2)",
            enforced=enforced_both_nodal,
            keeps="energy, momentum maps, both constraints at nodes; order 4",
            order=4,
        ),
    ),
)
