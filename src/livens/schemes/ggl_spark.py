"""The Lobatto IIIA-IIIB SPARK GGL integrator of order 2s - 2 (``ggl-spark``, option ``stages`` = s = 2, 3).

A specialized partitioned additive Runge-Kutta (SPARK) method in the manner of [Jay07] for the GGL
equations, the stationarity conditions of KBS23b eq 33, written in Hamiltonian form with the
augmented Hamiltonian

    K(q, p, lambda, gamma) = H(q, p) + lambda . g(q) + gamma . g_v(q, p),   g_v(q, p) = G(q) M(q)^-1 p,

whose flow is q' = M^-1 (p + G^T gamma), p' = -D_q H - G^T lambda - D_1 g_v^T gamma. As in [Jay07]
the q-terms (the velocity M^-1 p and the gamma term M^-1 G^T gamma) are integrated with the s-stage
Lobatto IIIA coefficients a_ij, the p-terms (the force and both constraint forces) with the Lobatto
IIIB coefficients ahat_ij = b_j (1 - a_ji / b_i), a symplectic pair, every additive term with the
multipliers of its own stage; the position constraint holds at the stages, the velocity constraint
in s - 1 weighted sums of its stage values (the rows i = 2..s of IIIA, the weights of
int_0^{c_i} g_v dt), and both at the node. The equations (new, in this GGL form):

    Q_i = q^n + h sum_j a_ij U_j,                 i = 2, ..., s  (Q_1 = q^n, Q_s = q^{n+1})
    P_i = p^n + h sum_j ahat_ij F_j,              i = 1, ..., s
    p^{n+1} = p^n + h sum_j b_j F_j
    g(Q_i) = 0,                                   i = 2, ..., s
    sum_j a_ij g_v(Q_j, P_j) = 0,                 i = 2, ..., s
    g_v(q^{n+1}, p^{n+1}) = 0
    b_j Gamma_j = sum_{k=1}^{s-1} a_{k+1, j} Gamma~_k

with U_j = M(Q_j)^-1 (P_j + G(Q_j)^T Gamma_j) = D_p K and F_j = -D_q H(Q_j, P_j) - G(Q_j)^T Lambda_j
- D_1 g_v(Q_j, P_j)^T Gamma_j = -D_q K at stage j. The unknowns: the stage momenta P_1..P_s, the
interior stage Q_2 (s = 3), q^{n+1}, p^{n+1}, Lambda_1..Lambda_s and Gamma~_1..Gamma~_{s-1}. Lambda_s
enters p^{n+1} only (the last column of IIIB is zero) and the secondary constraint at the node fixes
it, as RATTLE fixes its second multiplier ([And83]). The IIIB stage momenta cannot meet g_v at every
stage (for s = 2, P_1 = P_2 would have to meet it at q^n and at q^{n+1}); hence the weighted sums,
with as many gamma unknowns, tied to the stage gammas by the last line.

Symplectic on {g = 0, g_v = 0}: for a symplectic pair the defect of the step is
h sum_j b_j (dLambda_j ^ dg(Q_j) + dGamma_j ^ dg_v(Q_j, P_j)); the first sum vanishes with g at the
stages, the second is sum_k dGamma~_k ^ d(sum_j a_{k+1, j} g_v(Q_j, P_j)) = 0 by the last line. Momentum
maps of the symmetries of H and g are kept; order 2s - 2 in q and p ([Jay07]: 2 for s = 2, 4 for
s = 3). M(q) enters through linear solves with M(Q_j) only, so a regular configuration-dependent M runs
with the same equations.

The unknowns are increments: dq = q^{n+1} - q^n, dp = p^{n+1} - p^n, P1..Ps = P_i - p^n,
Q2 = Q_2 - q^n (s = 3). ``stages`` is a static option (:attr:`livens.schemes.base.Param.static`):
each s is a scheme of its own (:data:`VARIANTS`), with the unknowns of s stages only, so that a run
traces and compiles the equations of its s alone.
A structured Newton tangent is assembled by :func:`stage_tangent`: the Jacobians of the terms at each point, in that
point's own arguments, batched over the points, assembled with the method's coefficients
(:mod:`livens.schemes.stage_tangents`); it equals the AD Jacobian of the residual (the tests compare
them). The scheme's Newton tangent is the dense AD Jacobian of all its unknowns at once, at every size
(:func:`livens.schemes.stage_tangents.ad_tangent_at_once`: one ``jacfwd``, not one per named block of
unknowns nor a search for a band, which repeated the residual in the compiled program once per
block); the assembled tangent cost no less per step on the systems measured (up to the heavy top)
and compiles longer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..mechanics import Mechanics
from ..solvers import tracing_native
from . import ggl_mass, register
from . import stage_tangents as st_
from .base import About, Capabilities, Enforced, Param, Scheme, State, next_node
from .ggl_galerkin import lobatto

STAGES = (2, 3)
"""The numbers of stages s the scheme runs: the s Gauss-Lobatto points of Lobatto IIIA-IIIB."""


def lobatto_iiia_iiib(s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(c, b, A, Ahat) of the s-stage Lobatto IIIA-IIIB pair: the Gauss-Lobatto points c and weights b,
    the IIIA coefficients A (collocation: sum_j a_ij c_j^(k-1) = c_i^k / k, k = 1..s) and the IIIB
    coefficients ahat_ij = b_j (1 - a_ji / b_i), so that b_i ahat_ij + b_j a_ji = b_i b_j (symplectic)."""
    c, b, _ = lobatto(s - 1)
    V = np.vander(c, s, increasing=True).T  # V[k, j] = c_j^k
    rhs = np.stack([c ** (k + 1) / (k + 1) for k in range(s)])  # rhs[k, i] = c_i^(k+1) / (k+1)
    A = np.linalg.solve(V, rhs).T
    Ahat = b[None, :] * (1.0 - A.T / b[:, None])
    return c, b, A, Ahat


def _unknowns(s: int) -> tuple:
    """The layout for s stages: increments, stage momenta, the interior stages, the s stage lambdas and
    the s - 1 gammas of the weighted velocity constraints."""
    stages = tuple((f"P{i}", "d") for i in range(1, s + 1))
    inner = tuple((f"Q{i}", "d") for i in range(2, s))
    lams = tuple((f"lam{i}", "m") for i in range(1, s + 1))
    gams = tuple((f"gam{k}", "m") for k in range(1, s))
    return (("dq", "d"), ("dp", "d")) + stages + inner + lams + gams


def _stages(u, params=None) -> int:
    """The number of stages s of the unknowns ``u`` (named as in :func:`_unknowns`: s stage momenta),
    checked against ``params`` (:func:`livens.schemes.stage_tangents.check_stages`)."""
    s = sum(1 for name in u if name.startswith("P"))
    st_.check_stages(params, s, "ggl-spark")
    return s


def stage_terms(
    mech: Mechanics, q: jax.Array, p: jax.Array, lam: jax.Array, gam: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(U, F) = (D_p K, -D_q K) of K = H + lambda . g + gamma . g_v at one stage (module docstring):
    U = M(q)^-1 (p + G(q)^T gamma), F = D_q T(q, v) - DV(q) - G(q)^T lambda - D_1 g_v(q, p)^T gamma with
    v = M(q)^-1 p; for a constant M, D_1 g_v(q, p)^T gamma = sum_k gamma_k D^2 g_k(q) v."""
    if mech.m == 0:
        v = mech.Minv_mul(p) if mech.constant_mass else ggl_mass.mass_solve(mech, q, p)
        return v, mech.D1L(q, v)
    if mech.constant_mass:
        v = mech.Minv_mul(p)
        a = mech.Minv_mul(mech.GT_mul(q, gam))
        force = -mech.dV(q) - mech.GT_mul(q, lam) - mech.hess_g_vec(q, gam, v)
        return v + a, force
    a, v = ggl_mass.solve_at(mech, q, gam, p)
    # D_q T(q, v) - D_1 g_v(q, M(q) v)^T gamma in one gradient (a, v held fixed)
    kinetic = jax.grad(ggl_mass.secondary_potential(mech, gam, v, a, kinetic=v))(q)
    return v + a, kinetic - mech.dV(q) - mech.GT_mul(q, lam)


def _stage_values(u, st: State, s: int):
    """The end node (q^{n+1}, p^{n+1}), the stage increments X (s, d) of q from q^n (X_1 = 0,
    X_s = q^{n+1} - q^n), the stage momenta Y (s, d) and the stage multipliers lambda (s, m) from the
    unknowns of :func:`_unknowns`."""
    cq, cp = (None, None) if st.comp is None else st.comp
    q1 = next_node(st.q, u["dq"], cq)
    p1 = next_node(st.p, u["dp"], cp)
    X = jnp.stack([jnp.zeros_like(st.q)] + [u[f"Q{i}"] for i in range(2, s)] + [q1 - st.q])
    Y = jnp.stack([u[f"P{i}"] for i in range(1, s + 1)])
    lams = jnp.stack([u[f"lam{i}"] for i in range(1, s + 1)])
    return q1, p1, X, Y, lams


def _residual_s(u, st: State, h, mech, s: int):
    """The step equations of the module docstring for s stages, in the layout of :func:`_unknowns`."""
    _, b, A, Ahat = (jnp.asarray(x) for x in lobatto_iiia_iiib(s))
    q1, p1, X, Y, lams = _stage_values(u, st, s)
    # the stage gammas from the s - 1 unknowns of the weighted velocity constraints: b_j Gamma_j =
    # sum_k a_{k+1, j} Gamma~_k, so that their symplecticity defect vanishes (module docstring)
    gams = (A[1:].T @ jnp.stack([u[f"gam{k}"] for k in range(1, s)])) / b[:, None]
    Q, P = st.q[None, :] + X, st.p[None, :] + Y
    if _one_gradient(mech):
        U, F, g, gv = jax.vmap(lambda q, p, lam, gam: _stage_at_once(mech, q, p, lam, gam))(Q, P, lams, gams)
    else:
        U, F = jax.vmap(lambda q, p, lam, gam: stage_terms(mech, q, p, lam, gam))(Q, P, lams, gams)

    qrows = X[1:] - h * (A @ U)[1:]
    prows = Y - h * (Ahat @ F)
    d_rows = [*qrows, *prows, (p1 - st.p) - h * (b @ F)]
    m_rows = []
    if mech.m:
        if not _one_gradient(mech):
            # g(Q_j) and g_v(Q_j, P_j) = G(Q_j) M(Q_j)^-1 P_j of every stage from one batched evaluation
            # of g and its JVP (:func:`livens.schemes.ggl_mass.secondary`): one copy of them in the program
            g, gv = jax.vmap(lambda q, p: jax.jvp(mech.g, (q,), (ggl_mass.mass_solve(mech, q, p),)))(Q, P)
        m_rows += list(g[1:])
        m_rows += list(A[1:] @ gv)
        m_rows.append(ggl_mass.secondary(mech, q1, p1))
    return jnp.concatenate(d_rows + m_rows)


def _one_gradient(mech: Mechanics) -> bool:
    """Whether a stage's terms come from :func:`_stage_at_once`: with constraints, in every trace but
    that of a native kernel of one member (:func:`livens.engine.tracing_native`), whose C program
    keeps :func:`stage_terms` and its results bit for bit."""
    return mech.m > 0 and not tracing_native()


def _stage_at_once(mech: Mechanics, q, p, lam, gam):
    """(U, F, g(q), g_v(q, p)) at one stage: :func:`stage_terms` with the stage's constraints, the
    force terms and G(q)^T gamma from one gradient whose forward pass gives g(q) and G(q) v
    (:func:`livens.schemes.ggl_mass.point_force`), v = M(q)^-1 p, where :func:`stage_terms` and the
    constraints evaluate g in four places. The same terms to round-off; the compiled program of an
    XLA step holds the user's g, and its derivatives, once per stage instead of four times."""
    if mech.constant_mass:
        v = mech.Minv_mul(p)
        f, gt, g, gv = ggl_mass.point_force(mech, q, lam, gam, v, dw=True)
        return v + mech.Minv_mul(gt), -f, g, gv
    a, v = ggl_mass.solve_at(mech, q, gam, p)
    f, g, gv = ggl_mass.point_force(mech, q, lam, gam, v, a=a)
    return v + a, -f, g, gv


def _stage_outputs(mech, q, p, lam, gam):
    """What the step equations take from one stage (:func:`stage_terms`): U, F, g(q), g_v(q, p)."""
    if _one_gradient(mech):
        return jnp.concatenate(_stage_at_once(mech, q, p, lam, gam))
    U, F = stage_terms(mech, q, p, lam, gam)
    if not mech.m:
        return jnp.concatenate([U, F])
    return jnp.concatenate([U, F, mech.g(q), ggl_mass.secondary(mech, q, p)])


def _tangent_s(u, st: State, h, mech, s: int):
    """dR/dx of :func:`_residual_s` assembled from the Jacobians of :func:`_stage_outputs` at the s
    stages (:mod:`livens.schemes.stage_tangents`): the stage j takes Q_j, P_j, Lambda_j of its own
    unknowns and Gamma_j = sum_k a_{k+1, j} Gamma~_k / b_j; the rows apply the IIIA, IIIB and b
    coefficients to the stage Jacobians."""
    d, m = mech.d, mech.m
    _, b, A, Ahat = lobatto_iiia_iiib(s)
    q1, p1, X, Y, lams = _stage_values(u, st, s)
    Cg = A[1:].T / b[:, None]  # Gamma_j = sum_k Cg_jk Gamma~_k
    gams = jnp.asarray(Cg) @ jnp.stack([u[f"gam{k}"] for k in range(1, s)])
    Jq, Jp, Jl, Jg = st_.point_jacobians(lambda *a: _stage_outputs(mech, *a), st.q + X, st.p + Y, lams, gams)
    TG = jnp.asarray(Cg)[:, :, None, None] * Jg[:, None]
    groups = [st_.diagonal(Jq)[:, 1:], st_.diagonal(Jp), st_.diagonal(Jl), TG]  # Q_1 = q^n
    own = [np.eye(s - 1), None, None, None], [None, np.eye(s), None, None]  # X_i and Y_i in their rows

    def rows(T, q_own, p_own):
        qr = -h * st_.mix(A[1:], T[:, :, :d])
        pr = -h * st_.mix(Ahat, T[:, :, d : 2 * d])
        if q_own is not None:
            qr = qr + jnp.asarray(q_own)[:, :, None, None] * jnp.eye(d)
        if p_own is not None:
            pr = pr + jnp.asarray(p_own)[:, :, None, None] * jnp.eye(d)
        parts = [st_.blocks(qr), st_.blocks(pr), st_.blocks(-h * st_.mix(b[None, :], T[:, :, d : 2 * d]))]
        if m:
            parts += [st_.blocks(T[1:, :, 2 * d : 2 * d + m]), st_.blocks(st_.mix(A[1:], T[:, :, 2 * d + m :]))]
        return jnp.concatenate(parts, axis=0)

    J = jnp.concatenate([rows(T, qo, po) for T, qo, po in zip(groups, *own)], axis=1)
    lay = st_.Layout(VARIANTS[s].sizes(d, m))
    names = [f"Q{i}" for i in range(2, s)] + ["dq"] + [f"P{i}" for i in range(1, s + 1)]
    names += [f"lam{i}" for i in range(1, s + 1)] + [f"gam{k}" for k in range(1, s)]
    out = st_.place(lay.n, np.arange(J.shape[0]), lay.indices(names), J)  # every row but the secondary
    dp = lay.indices(["dp"])
    out = out.at[np.arange((2 * s - 1) * d, 2 * s * d), dp].add(1.0)  # p^{n+1} - p^n - h b.F
    if m:
        out = st_.secondary_rows(out, lambda q, p: ggl_mass.secondary(mech, q, p), q1, p1, lay.indices(["dq"]), dp)
    return out


def stage_tangent(u: dict, s: State, h: float, t: float, params: dict, mech: Mechanics) -> jax.Array:
    """The structured tangent of the step (:func:`_tangent_s`), for the number of stages of the unknowns."""
    return _tangent_s(u, s, h, mech, _stages(u, params))


def _residual(u, s: State, h, t, params, mech):
    """The step equations of the module docstring (new), for the number of stages of the unknowns."""
    return _residual_s(u, s, h, mech, _stages(u, params))


def _guess_for(stages: int):
    """The first guess of s = ``stages`` stages: q^{n+1} = q^n + h v^n and Q_2 = q^n + c_2 h v^n
    ("advanced") or q^n, the stage momenta p^n, the multipliers of the last step."""
    c = lobatto(stages - 1)[0]

    def guess(s: State, h, t, params, mech, mode):
        st_.check_stages(params, stages, "ggl-spark")
        adv = mode == "advanced"
        out = {"dq": h * s.v if adv else jnp.zeros_like(s.q), "dp": jnp.zeros_like(s.p)}
        for i in range(1, stages + 1):
            out[f"P{i}"] = jnp.zeros_like(s.p)
            out[f"lam{i}"] = s.lam
        for k in range(1, stages):
            # constant stage gammas equal to gamma^n: Gamma~_{s-1} = gamma^n, the others zero
            out[f"gam{k}"] = s.gam if k == stages - 1 else jnp.zeros_like(s.gam)
        for i in range(2, stages):
            out[f"Q{i}"] = c[i - 1] * h * s.v if adv else jnp.zeros_like(s.q)
        return out

    return guess


def _update(u, s: State, h, t, params, mech):
    """q^{n+1}, p^{n+1} (as the time loop stores them), v = M(q^{n+1})^-1 p^{n+1}, Lambda_s and the mean
    gamma Gamma~_{s-1}."""
    cq, cp = (None, None) if s.comp is None else s.comp
    q1 = next_node(s.q, u["dq"], cq)
    p1 = next_node(s.p, u["dp"], cp)
    v = mech.Minv_mul(p1) if mech.constant_mass else ggl_mass.mass_solve(mech, q1, p1)
    stages = _stages(u, params)  # Lambda_s and Gamma~_{s-1}, the b-weighted mean sum_j b_j Gamma_j
    lam, gam = u[f"lam{stages}"], u[f"gam{stages - 1}"]
    new = State(q=q1, p=p1, v=v, lam=lam, gam=gam, extra=s.extra, comp=s.comp)
    return new, {"v": v, "lam": lam, "gam": gam}


VARIANTS: dict[int, Scheme] = {}
"""The scheme for each number of stages (``stages`` is static: each compiles its own program)."""
_variant = st_.stage_variant(_stages, VARIANTS)


def _scheme(s: int) -> Scheme:
    """ggl-spark with s stages: its unknowns, the first guess of its stages, order 2s - 2."""
    return Scheme(
        name="ggl-spark",
        unknowns=_unknowns(s),
        residual=_residual,
        tangent=_TANGENT,
        guess=_guess_for(s),
        update=_update,
        params=(Param("stages", 3.0, 2.0, 3.0, whole=True, static=_variant),),
        capabilities=Capabilities(
            velocity_kind="nodal",
            gamma=True,
            mass_inverse=False,
            configuration_mass=True,
            external_force=False,
            applies_to=ggl_mass.refusal("ggl-spark"),
        ),
        about=About(
            paper="Jay07 (SPARK methods of Lobatto IIIA-IIIB type for overdetermined DAEs) on the GGL equations KBS23b eq 33",
            description="Lobatto IIIA-IIIB SPARK GGL integrator of order 2s - 2 (stages s = 2, 3)",
            enforced=(Enforced("position"), Enforced("velocity", w="M(q)^-1 p")),
            keeps="symplectic, momentum maps, g(q) and G M^-1 p at the nodes; order 2s - 2 (2 for stages = 2, 4 for stages = 3)",
            order=2 * s - 2,
        ),
    )


_TANGENT = st_.ad_tangent_at_once(_residual)
"""The Newton tangent of every s (module docstring)."""

VARIANTS.update({s: _scheme(s) for s in STAGES})

GGL_SPARK = register(VARIANTS[3])
"""The registered ggl-spark: the default s = 3 (:meth:`livens.schemes.base.Scheme.specialized` gives
the scheme of the ``stages`` a run asks for)."""
