"""The Galerkin GGL variational integrator of order 2s (``ggl-galerkin``, option ``stages`` = s = 2, 3).

A Galerkin discretization of the GGL functional (KBS23b eq 33) in the manner of the constrained Galerkin
variational integrators of [WOL17], derived in the theory pages ("The Galerkin GGL variational
integrator"); every equation below is new. Eliminating v and p from KBS23b eq 33 pointwise (its
stationarity in v and p: p = M(q) v, q' = v + M(q)^-1 G(q)^T gamma) leaves the GGL Lagrangian

    L_GGL(q, q', lambda, gamma) = L(q, q' - M(q)^-1 G(q)^T gamma) - lambda . g(q).

On [t^n, t^n + h], q(t^n + tau h) = sum_j q_j l_j(tau) is the polynomial of degree s through the s + 1
Gauss-Lobatto points c_0 = 0 < c_1 < ... < c_s = 1 (q_0 = q^n, q_s = q^{n+1}); the same points with
the Lobatto weights b_i are the quadrature (order 2s). With q_i' = (1/h) sum_j l_j'(c_i) q_j and
v_i = q_i' - M(q_i)^-1 G(q_i)^T gamma_i, the discrete Lagrangian is

    L_d = h sum_i b_i [ L(q_i, v_i) - lambda_i . g(q_i) ].

One step solves for q_1, ..., q_s, p^{n+1}, lambda_0, ..., lambda_s, gamma_0, ..., gamma_s:

    p^n = -D_{q_0} L_d                            (discrete Legendre transform at t^n)
    0 = D_{q_j} L_d,  j = 1, ..., s - 1           (interior stationarity)
    p^{n+1} = D_{q_s} L_d                         (discrete Legendre transform at t^{n+1})
    g(q_i) = 0,  i = 1, ..., s                    (stationarity in lambda_i)
    G(q_i) v_i = 0,  i = 0, ..., s                (stationarity in gamma_i: G(q_i) M(q_i)^-1 p_i = 0, p_i = M(q_i) v_i)
    G(q^{n+1}) M(q^{n+1})^-1 p^{n+1} = 0          (the secondary constraint at the node)

The action sum fixes only lambda_s of one step plus lambda_0 of the next (both multiply g at the same
node); the last equation splits that sum so that p^{n+1} lies on the secondary constraint, and the
steps map {g = 0, G M^-1 p = 0} into itself. Symplectic on that manifold, momentum maps of the
symmetries of L and g conserved, g(q) at the nodes and at the interior Lobatto points; order 2s in
q and p. M(q) enters through linear solves with M(q_i) only, so a regular configuration-dependent M
runs with the same equations.

The unknowns are increments: dq = q^{n+1} - q^n, dp = p^{n+1} - p^n, Q1, Q2 = q_1 - q^n, q_2 - q^n
(derivatives of the Lagrange polynomials sum to zero, so q_i' is formed from the increments).
``stages`` is a static option (:attr:`livens.schemes.base.Param.static`): each s is a scheme of its
own (:data:`VARIANTS`), with the unknowns of s stages only, so that a run traces and compiles the
equations of its s alone.
Newton's tangent is structured (:func:`stage_tangent`): the Jacobians of the terms at each point, in that
point's own arguments, batched over the points, assembled with the method's coefficients
(:mod:`livens.schemes.stage_tangents`); it equals the AD Jacobian of the residual (the tests compare
them). Small systems take the dense AD Jacobian instead (:func:`_tangent`).
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

STAGES = (2, 3)
"""The numbers of stages s the scheme runs: q of degree s on s + 1 Gauss-Lobatto points."""


def lobatto(s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(c, b, D) of the s + 1 Gauss-Lobatto points on [0, 1]: the points c_i (0, the roots of
    P_s'(2 tau - 1), 1), the quadrature weights b_i (exact for polynomials of degree 2s - 1) and
    the differentiation matrix D_ij = l_j'(c_i) of the Lagrange polynomials l_j on these points."""
    inner = np.polynomial.legendre.Legendre.basis(s).deriv().roots()
    x = np.concatenate([[-1.0], np.sort(np.real(inner)), [1.0]])
    Ps = np.polynomial.legendre.Legendre.basis(s)(x)
    w = 2.0 / (s * (s + 1) * Ps**2)
    c, b = (x + 1.0) / 2.0, w / 2.0
    n = s + 1
    # barycentric weights and the differentiation matrix of the Lagrange polynomials
    bw = np.array([1.0 / np.prod([c[j] - c[k] for k in range(n) if k != j]) for j in range(n)])
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                D[i, j] = bw[j] / bw[i] / (c[i] - c[j])
        D[i, i] = -np.sum(D[i])
    return c, b, D


def _unknowns(s: int) -> tuple:
    """The layout for s stages: increments, the s - 1 interior points, s + 1 lambdas and gammas."""
    inner = tuple((f"Q{j}", "d") for j in range(1, s))
    lams = tuple((f"lam{i}", "m") for i in range(s)) + (("lam", "m"),)
    gams = tuple((f"gam{i}", "m") for i in range(s)) + (("gam", "m"),)
    return (("dq", "d"), ("dp", "d")) + inner + lams + gams


def _stages(u, params=None) -> int:
    """The number of stages s of the unknowns ``u`` (named as in :func:`_unknowns`: s - 1 interior
    points), checked against ``params`` (:func:`livens.schemes.stage_tangents.check_stages`)."""
    s = 1 + sum(1 for name in u if name.startswith("Q"))
    st_.check_stages(params, s, "ggl-galerkin")
    return s


def _multipliers(u, prefix: str, s: int):
    """(s + 1, m) array of the multipliers lambda_0..lambda_s (or gamma_0..gamma_s)."""
    return jnp.stack([u[f"{prefix}{i}"] for i in range(s)] + [u[prefix]])


def _point(mech, q, qdot, lam, gam):
    """At one Lobatto point: v = q' - a with a = M(q)^-1 G(q)^T gamma, p = M(q) v, and the force
    f = D_1 L(q, v) - G(q)^T lambda - D_1 g_v(q, p)^T gamma, the derivative of
    L(q, q' - M(q)^-1 G(q)^T gamma) - lambda . g(q) in q at fixed q' (theory pages, new); for a
    constant M, D_1 g_v(q, p)^T gamma = sum_k gamma_k D^2 g_k(q) v."""
    if mech.m == 0:
        return qdot, mech.D2L(q, qdot), mech.D1L(q, qdot)
    if mech.constant_mass:
        v = qdot - mech.Minv_mul(mech.GT_mul(q, gam))
        force = -mech.dV(q) - mech.GT_mul(q, lam) - mech.hess_g_vec(q, gam, v)
        return v, mech.D2L(q, v), force
    a = ggl_mass.mass_solve(mech, q, mech.GT_mul(q, gam))
    v = qdot - a
    # D_q T(q, v) - D_1 g_v(q, M(q) v)^T gamma in one gradient (a, v held fixed)
    kinetic = jax.grad(ggl_mass.secondary_potential(mech, gam, v, a, kinetic=v))(q)
    return v, mech.M(q) @ v, kinetic - mech.dV(q) - mech.GT_mul(q, lam)


def stationarity(
    mech: Mechanics, X: jax.Array, q0: jax.Array, h: float, lams: jax.Array, gams: jax.Array, s: int
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(D_{q_0} L_d, ..., D_{q_s} L_d) of L_d = h sum_i b_i [L(q_i, v_i) - lambda_i . g(q_i)] (module
    docstring, new) at the points q_i = q0 + X_i (X the (s + 1, d) increments, X_0 = 0), with
    q_i' = (1/h) sum_j D_ij X_j: D_{q_j} L_d = sum_i b_i D_ij p_i + h b_j f_j (:func:`_point`).
    Returns them with the points, their velocities v_i and momenta p_i."""
    return _stationarity(mech, X, q0, h, lams, gams, s)[:4]


def _stationarity(mech: Mechanics, X, q0, h, lams, gams, s: int):
    """:func:`stationarity`'s (D_{q_j} L_d, Q, V, P) and the points' g(q_i), G(q_i) v_i where they come
    from the same gradient (:func:`_point_at_once`), else None, None."""
    _, b, D = lobatto(s)
    Q = q0[None, :] + X
    Qdot = jnp.asarray(D) @ X / h
    g = gv = None
    if _one_gradient(mech):
        V, P, F, g, gv = jax.vmap(lambda q, qd, lam, gam: _point_at_once(mech, q, qd, lam, gam))(Q, Qdot, lams, gams)
    else:
        V, P, F = jax.vmap(lambda q, qd, lam, gam: _point(mech, q, qd, lam, gam))(Q, Qdot, lams, gams)
    bc = jnp.asarray(b)[:, None]
    return jnp.asarray(D).T @ (bc * P) + h * bc * F, Q, V, P, g, gv


def discrete_lagrangian(
    mech: Mechanics, X: jax.Array, q0: jax.Array, h: float, lams: jax.Array, gams: jax.Array, s: int
) -> jax.Array:
    """L_d = h sum_i b_i [L(q_i, v_i) - lambda_i . g(q_i)] (module docstring, new), at the points of
    :func:`stationarity` (for tests: its gradient in X is :func:`stationarity`)."""
    _, b, D = lobatto(s)
    Q = q0[None, :] + X
    Qdot = jnp.asarray(D) @ X / h
    V = jax.vmap(lambda q, qd, lam, gam: _point(mech, q, qd, lam, gam)[0])(Q, Qdot, lams, gams)
    lag = jax.vmap(mech.L)(Q, V)
    cons = jnp.sum(lams * jax.vmap(mech.g)(Q), axis=1) if mech.m else jnp.zeros_like(lag)
    return h * jnp.sum(jnp.asarray(b) * (lag - cons))


def _residual_s(u, st: State, h, mech, s: int):
    """The step equations of the module docstring for s stages, in the layout of :func:`_unknowns`."""
    d = mech.d
    cq, cp = (None, None) if st.comp is None else st.comp
    q1 = next_node(st.q, u["dq"], cq)
    p1 = next_node(st.p, u["dp"], cp)
    X = jnp.stack([jnp.zeros(d, st.q.dtype)] + [u[f"Q{j}"] for j in range(1, s)] + [q1 - st.q])
    lams, gams = _multipliers(u, "lam", s), _multipliers(u, "gam", s)

    dLd, Q, V, _, g, gv = _stationarity(mech, X, st.q, h, lams, gams, s)
    # the rows of the d-vectors, then of the m-vectors
    d_rows = [st.p + dLd[0], *[dLd[j] for j in range(1, s)], p1 - dLd[s]]
    m_rows = []
    if mech.m:
        if g is None:
            # g(q_i) and G(q_i) v_i of every point from one batched evaluation of g and its JVP: one copy
            # of them in the program
            g, gv = jax.vmap(lambda q, v: jax.jvp(mech.g, (q,), (v,)))(Q, V)
        m_rows += list(g[1:])
        m_rows += list(gv)
        m_rows.append(ggl_mass.secondary(mech, q1, p1))
    return jnp.concatenate(d_rows + m_rows)


def _residual(u, s: State, h, t, params, mech):
    """The step equations of the module docstring (new), for the number of stages of the unknowns."""
    return _residual_s(u, s, h, mech, _stages(u, params))


def _one_gradient(mech: Mechanics) -> bool:
    """Whether a point's terms come from :func:`_point_at_once`: with constraints, in every trace but
    that of a native kernel of one member (:func:`livens.engine.tracing_native`), whose C program
    keeps :func:`_point` and its results bit for bit."""
    return mech.m > 0 and not tracing_native()


def _point_at_once(mech: Mechanics, q, qdot, lam, gam):
    """(v, p, f, g(q), G(q) v) at one Lobatto point: :func:`_point` with the point's constraints, the
    force terms from one gradient whose forward pass gives g(q) and G(q) v
    (:func:`livens.schemes.ggl_mass.point_force`), where :func:`_point` and the constraints evaluate g
    in four places. The same terms to round-off; the compiled program of an XLA step holds the user's
    g, and its derivatives, twice per point (G(q)^T gamma comes first, for v) instead of four times."""
    gt = mech.GT_mul(q, gam)
    if mech.constant_mass:
        v = qdot - mech.Minv_mul(gt)
        f, g, gv = ggl_mass.point_force(mech, q, lam, gam, v)
        return v, mech.D2L(q, v), -f, g, gv
    a = ggl_mass.mass_solve(mech, q, gt)
    v = qdot - a
    f, g, gv = ggl_mass.point_force(mech, q, lam, gam, v, a=a)
    return v, mech.M(q) @ v, -f, g, gv


def _point_terms(mech, q, qdot, lam, gam):
    """What the step equations take from one Lobatto point (:func:`_point`): p, f, g(q), G(q) v."""
    if _one_gradient(mech):
        return jnp.concatenate(_point_at_once(mech, q, qdot, lam, gam)[1:])
    v, p, f = _point(mech, q, qdot, lam, gam)
    if not mech.m:
        return jnp.concatenate([p, f])
    return jnp.concatenate([p, f, mech.g(q), jax.jvp(mech.g, (q,), (v,))[1]])


def _tangent_s(u, st: State, h, mech, s: int):
    """dR/dx of :func:`_residual_s` assembled from the Jacobians of :func:`_point_terms` at the s + 1
    points (:mod:`livens.schemes.stage_tangents`): with dQ_i/dX_k = delta_ik and
    dQ_i'/dX_k = D_ik / h, the rows D_{q_j} L_d = sum_i b_i D_ij p_i + h b_j f_j are the
    coefficients (b_i D_ij, h b_j delta_ij) applied to the point Jacobians; g(q_i) and G(q_i) v_i are
    the point Jacobians themselves."""
    d, m = mech.d, mech.m
    _, b, D = lobatto(s)
    cq, cp = (None, None) if st.comp is None else st.comp
    q1 = next_node(st.q, u["dq"], cq)
    p1 = next_node(st.p, u["dp"], cp)
    X = jnp.stack([jnp.zeros(d, st.q.dtype)] + [u[f"Q{j}"] for j in range(1, s)] + [q1 - st.q])
    lams, gams = _multipliers(u, "lam", s), _multipliers(u, "gam", s)
    Q, Qdot = st.q[None, :] + X, jnp.asarray(D) @ X / h
    Jq, Jqd, Jl, Jg = st_.point_jacobians(lambda *a: _point_terms(mech, *a), Q, Qdot, lams, gams)
    TX = (st_.diagonal(Jq) + jnp.asarray(D / h)[:, :, None, None] * Jqd[:, None])[:, 1:]  # X_0 = 0
    Cp, bh = D.T * b[None, :], jnp.asarray(h * b)[:, None, None, None]
    sign = np.r_[np.ones(s), -1.0][:, None, None, None]  # p^n + D_0 L_d, ..., p^{n+1} - D_s L_d

    def rows(T):
        parts = [st_.blocks(sign * (st_.mix(Cp, T[:, :, :d]) + bh * T[:, :, d : 2 * d]))]
        if m:
            parts += [st_.blocks(T[1:, :, 2 * d : 2 * d + m]), st_.blocks(T[:, :, 2 * d + m :])]
        return jnp.concatenate(parts, axis=0)

    J = jnp.concatenate([rows(TX), rows(st_.diagonal(Jl)), rows(st_.diagonal(Jg))], axis=1)
    lay = st_.Layout(VARIANTS[s].sizes(d, m))
    names = [f"Q{j}" for j in range(1, s)] + ["dq"]
    names += [f"lam{i}" for i in range(s)] + ["lam"] + [f"gam{i}" for i in range(s)] + ["gam"]
    out = st_.place(lay.n, np.arange(J.shape[0]), lay.indices(names), J)  # every row but the secondary
    dp = lay.indices(["dp"])
    out = out.at[np.arange(s * d, (s + 1) * d), dp].add(1.0)  # p^{n+1} in row s
    if m:
        out = st_.secondary_rows(out, lambda q, p: ggl_mass.secondary(mech, q, p), q1, p1, lay.indices(["dq"]), dp)
    return out


def stage_tangent(u: dict, s: State, h: float, t: float, params: dict, mech: Mechanics) -> jax.Array:
    """The structured tangent of the step (:func:`_tangent_s`), for the number of stages of the unknowns."""
    return _tangent_s(u, s, h, mech, _stages(u, params))


_tangent = st_.sized(stage_tangent, _residual)
"""The scheme's tangent in the form the size policy takes (:func:`livens.solvers.choose_form`, rule ``"stages"``):
:func:`stage_tangent` from :attr:`livens.engine.SizePolicy.stage_unknowns` unknowns on,
below it the dense AD Jacobian of :func:`_residual`."""


def _guess_for(stages: int):
    """The first guess of s = ``stages`` stages: q_j = q^n + c_j h v^n ("advanced") or q^n,
    p^{n+1} = p^n, the multipliers of the last step."""
    c = lobatto(stages)[0]

    def guess(s: State, h, t, params, mech, mode):
        st_.check_stages(params, stages, "ggl-galerkin")
        adv = mode == "advanced"
        out = {"dq": h * s.v if adv else jnp.zeros_like(s.q), "dp": jnp.zeros_like(s.p)}
        for j in range(1, stages):
            out[f"Q{j}"] = c[j] * h * s.v if adv else jnp.zeros_like(s.q)
        for i in range(stages):
            out[f"lam{i}"], out[f"gam{i}"] = s.lam, s.gam
        out["lam"], out["gam"] = s.lam, s.gam
        return out

    return guess


def _update(u, s: State, h, t, params, mech):
    """q^{n+1}, p^{n+1} (as the time loop stores them), v = M(q^{n+1})^-1 p^{n+1}, lambda_s and gamma_s."""
    cq, cp = (None, None) if s.comp is None else s.comp
    q1 = next_node(s.q, u["dq"], cq)
    p1 = next_node(s.p, u["dp"], cp)
    v = mech.Minv_mul(p1) if mech.constant_mass else ggl_mass.mass_solve(mech, q1, p1)
    new = State(q=q1, p=p1, v=v, lam=u["lam"], gam=u["gam"], extra=s.extra, comp=s.comp)
    return new, {"v": v, "lam": u["lam"], "gam": u["gam"]}


VARIANTS: dict[int, Scheme] = {}
"""The scheme for each number of stages (``stages`` is static: each compiles its own program)."""
_variant = st_.stage_variant(_stages, VARIANTS)


def _scheme(s: int) -> Scheme:
    """ggl-galerkin with s stages: its unknowns, the first guess of its Lobatto points, order 2s."""
    return Scheme(
        name="ggl-galerkin",
        unknowns=_unknowns(s),
        residual=_residual,
        tangent=_tangent,
        guess=_guess_for(s),
        update=_update,
        params=(Param("stages", 2.0, 2.0, 3.0, whole=True, static=_variant),),
        capabilities=Capabilities(
            velocity_kind="nodal",
            gamma=True,
            mass_inverse=False,
            configuration_mass=True,
            external_force=False,
            applies_to=ggl_mass.refusal("ggl-galerkin"),
        ),
        about=About(
            paper="WOL17 (Galerkin variational integrators with constraints) applied to the GGL functional KBS23b eq 33",
            description="Galerkin GGL variational integrator of order 2s on Gauss-Lobatto points (stages s = 2, 3)",
            enforced=(Enforced("position"), Enforced("velocity", w="M(q)^-1 p")),
            keeps="symplectic, momentum maps, g(q) and G M^-1 p at the nodes; order 2s (4 for stages = 2, 6 for stages = 3)",
            order=2 * s,
        ),
    )


VARIANTS.update({s: _scheme(s) for s in STAGES})

GGL_GALERKIN = register(VARIANTS[2])
"""The registered ggl-galerkin: the default s = 2 (:meth:`livens.schemes.base.Scheme.specialized` gives
the scheme of the ``stages`` a run asks for)."""
