"""Schemes in the (q, v, p) form of Livens principle, for singular and configuration-dependent M
(KB23 §4-5). Neither forms M^-1; the Newton matrix stays regular where M(q) is only semi-definite.

``livens-em``: the energy-consistent scheme of KB23 eq 28 (specified for L = T - V in eq 30):

    q^{n+1} - q^n = h v^{n+1/2}                                                      (28a)
    p^{n+1} - p^n = h D1_bar L(q, v) - h sum_k lambda_k D_bar g_k(q)                 (28b)
    p^{n+1/2}     = D2_bar L(q, v)                                                   (28c)
    g(q^{n+1})    = 0                                                                (28d)

with v^{n+1/2} = (v^n + v^{n+1})/2, p^{n+1/2} = (p^n + p^{n+1})/2, (D1_bar L, D2_bar L) the partitioned
discrete derivative of L(q, v) (KB23 eq 29; :func:`livens.discrete_gradients.partitioned`) and D_bar g_k
Gonzalez's discrete gradient (KB23 eq 26), applied to the multipliers as the discrete gradient of the
scalar lambda.g(q) (:func:`livens.discrete_gradients.gonzalez`; the same sum, by linearity).
It conserves the discrete generalized energy E^n = p^n.v^n - 1/2 v^n.M(q^n)v^n + V(q^n) (KB23 eq 31,
Prop. 5.4) to round-off and meets g(q^{n+1}) = 0 to the Newton tolerance. For a
configuration-dependent M, p^n = M(q^n)v^n does not hold exactly (Prop. 5.5), so the total energy
1/2 v.M(q)v + V (eq 35) is not conserved exactly (KB23 Fig. 7); for a constant M both coincide.

``livens-midpoint``: the implicit midpoint rule applied to the same equations (KB23 eq 21), the
contrast case:

    q^{n+1} - q^n = h v^{n+1/2},
    p^{n+1} - p^n = h D_1 L(q^{n+1/2}, v^{n+1/2}) - h G(q^{n+1/2})^T lambda,
    p^{n+1/2}     = D_2 L(q^{n+1/2}, v^{n+1/2}) = M(q^{n+1/2}) v^{n+1/2},
    g(q^{n+1})    = 0,

with q^{n+1/2} = (q^n + q^{n+1})/2. It conserves E only for at most quadratic L and g.

Newton's unknowns. Equations (a) and (c) give q^{n+1} and p^{n+1} explicitly from v^{n+1} (and q^{n+1}):
q^{n+1} = q^n + h/2 (v^n + v^{n+1}), p^{n+1} = 2 D2 L - p^n. Both schemes therefore solve (b) and (d) in the
d + m unknowns (v^{n+1}, lambda), with q^{n+1} and p^{n+1} computed from them: the same solution as
Newton on all four equations in (q, p, v, lambda), to the Newton tolerance, from a system of a third of
the size. For beams and chains its tangent is a band (plus, for livens-em, a matrix of low rank from
the quotients of the discrete gradients: :mod:`livens.solvers.tangent`); below that size, livens-em's
tangent for a constant M is assembled from its terms, the derivative of the corrected discrete
gradient taken once (:mod:`livens.schemes.livens_em_tangent`).

An external force F(q, v, t) enters both as h F(q^{n+1/2}, v^{n+1/2}, t + h/2) in the momentum
balance.

Momentum maps (KB23 §5: the scheme "aims at the preservation of momentum maps"). For each symmetry
of the conservative part of the system (``mech.symmetries``: the Problem's symmetries that leave V,
g and M invariant, :func:`livens.problem.exact_symmetries`) the discrete gradients of ``livens-em``
are made orthogonal to its generators at the midpoint (KBS23b eq 85), so that the momentum map
J = p . xi q (KBS23b eq 45) obeys the discrete balance

    J^{n+1} - J^n = h F(q^{n+1/2}, v^{n+1/2}, t + h/2) . xi q^{n+1/2}

exactly (to the Newton tolerance): J is constant wherever the load vanishes, however the load acts
while it does. With p^{n+1/2} = D2_bar L and q^{n+1} - q^n = h v^{n+1/2}, J^{n+1} - J^n =
(p^{n+1} - p^n) . xi q^{n+1/2} + p^{n+1/2} . xi (q^{n+1} - q^n) (J is bilinear), which is that impulse
when D1_bar L . xi q^{n+1/2} + D2_bar L . xi v^{n+1/2} = 0 and lambda . D_bar g xi q^{n+1/2} = 0:

- constant M (singular or not): D2_bar L = M v^{n+1/2} meets the first with M xi skew (M
  invariant), and D_bar V + lambda . D_bar g is one :func:`livens.discrete_gradients.corrected`
  gradient of V + lambda.g, orthogonal to xi q^{n+1/2};
- configuration-dependent M: (D1_bar L, D2_bar L) is the partitioned gradient corrected in (q, v)
  (:func:`livens.discrete_gradients.symmetric_partitioned`, with the generators (xi q, xi v) of the
  tangent lift) and lambda . D_bar g a corrected gradient of lambda.g.

Every corrected gradient still meets the directionality condition, so the energy is conserved as
before (KB23 Prop. 5.4). Gonzalez's own correction points along q^{n+1} - q^n, which has
translational and rotational parts: without these corrections the momentum maps drift. Without
symmetries the discrete gradients are those of KB23 eq 26, 29.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import discrete_gradients as dg
from . import livens_em_tangent, register
from .base import About, Capabilities, Scheme, State


def _external(mech, q0, q1, v0, v1, t, h):
    if not mech.has_external_force:
        return jnp.zeros_like(q0)
    return mech.F(0.5 * (q0 + q1), 0.5 * (v0 + v1), t + 0.5 * h)


def _position(s: State, v1, h):
    """q^{n+1} = q^n + h/2 (v^n + v^{n+1}) (eq 28a)."""
    return s.q + 0.5 * h * (s.v + v1)


def _projection(q0, q1, mech):
    """(Z, u): the generators xi q^{n+1/2} and the part u of q^{n+1} - q^n outside their span
    (:func:`livens.discrete_gradients.outside`), where the discrete gradient needs no more of the
    Gram solve (symmetries of invariant constraints); else None. Traced before the rest of the
    residual, so that the compiled step starts the solve's chain of square roots and divisions first
    and computes the independent work beside it (the same operations: the same values)."""
    if not (mech.symmetries and mech.invariant_constraints):
        return None
    Z = mech.generators(0.5 * (q0 + q1))
    return Z, dg.outside(Z, q1 - q0)


def _discrete_gradient(f, q0, q1, mech, df=None, projection=None):
    """The discrete gradient of a scalar f(q) (V + lambda.g, or lambda.g): Gonzalez's (KB23 eq 26)
    without symmetries; with them, :func:`livens.discrete_gradients.corrected`, orthogonal to the
    generators xi q^{n+1/2} (KBS23b eq 85; imposed for constraints only equivariant, as in EM-G).
    ``df``: f(q^{n+1}) - f(q^n), ``projection``: :func:`_projection`'s, where the caller has them."""
    df = f(q1) - f(q0) if df is None else df
    if not mech.symmetries:
        return dg.gonzalez(f, q0, q1, df)
    qm = 0.5 * (q0 + q1)
    if projection is not None:
        Z, u = projection
        return dg.corrected(jax.grad(f)(qm), q1 - q0, df, qm, Z, u=u)
    Z = mech.generators(qm)
    targets = None if mech.invariant_constraints else jnp.zeros(Z.shape[1], dtype=q0.dtype)
    return dg.corrected(jax.grad(f)(qm), q1 - q0, df, qm, Z, targets)


def _prepare(s: State, h, t, params, mech) -> State:
    """The step's invariants for a constant M: V(q^n) and g(q^n), the same at every Newton iterate
    (and in the tangent), computed once per step (:attr:`livens.schemes.base.Scheme.prepare`)."""
    if not mech.constant_mass:
        return s
    start = {"V0": mech.V(s.q), "g0": mech.g(s.q) if mech.m else None}
    return s._replace(extra={**(s.extra or {}), "start": start})


def start_values(s: State, mech):
    """(V(q^n), g(q^n)): prepared (:func:`_prepare`), else computed (g None without constraints)."""
    start = livens_em_tangent.prepared_start(s)
    if start is not None:
        return start
    return mech.V(s.q), mech.g(s.q) if mech.m else None


def _unprepared(extra):
    """``extra`` without the prepared values (:func:`_prepare`): the state the step returns."""
    if not isinstance(extra, dict) or "start" not in extra:
        return extra
    rest = {k: v for k, v in extra.items() if k != "start"}
    return rest or ()


def _lagrangian_gradient(s: State, q1, v1, mech):
    """(D1_bar L, D2_bar L), the partitioned discrete derivative of L(q, v) (KB23 eq 29); with
    symmetries, made orthogonal to the generators (xi q, xi v) of their tangent lift at the midpoint
    (:func:`livens.discrete_gradients.symmetric_partitioned`). Configuration-dependent M only."""
    if not mech.symmetries:
        return dg.partitioned(mech.L, s.q, s.v, q1, v1)
    qm, vm = 0.5 * (s.q + q1), 0.5 * (s.v + v1)
    Zv = jnp.stack([sym.tangent_generator(vm) for sym in mech.symmetries], axis=1)
    return dg.symmetric_partitioned(mech.L, s.q, s.v, q1, v1, mech.generators(qm), Zv)


def _em_forces(u, s: State, h, t, mech):
    """(q^{n+1}, D1_bar L + F - D_bar g^T lambda, D2_bar L, g(q^{n+1}) or None) of KB23 eq 28 for the
    unknowns u.

    For a constant M, L = 1/2 v.Mv - V(q) is separable with T quadratic, and the partitioned discrete
    derivative (KB23 eq 29) is exactly (-D_G V, M v^{n+1/2}) (Gonzalez's quotient vanishes for a
    quadratic function); the potential and the multipliers' term are then one Gonzalez gradient of
    V + lambda.g (the quotient is linear in the function): the same equations, one quotient instead
    of five, and a smaller program. With symmetries every discrete gradient is the corrected one of
    the module docstring. phi(q^n) is taken from V(q^n) and g(q^n) of the step's start
    (:func:`start_values`), and g(q^{n+1}) once, for phi and for eq (d)."""
    v1, lam = u["v1"], u["lam"]
    q0, v0 = s.q, s.v
    q1 = _position(s, v1, h)
    projection = _projection(q0, q1, mech) if mech.constant_mass else None
    external = _external(mech, q0, q1, v0, v1, t, h)
    if mech.constant_mass:

        def phi(q):
            return mech.V(q) + lam @ mech.g(q) if mech.m else mech.V(q)

        V0, g0 = start_values(s, mech)
        g1 = mech.g(q1) if mech.m else None
        df = (mech.V(q1) + lam @ g1) - (V0 + lam @ g0) if mech.m else mech.V(q1) - V0
        a = _discrete_gradient(phi, q0, q1, mech, df, projection)
        return q1, external - a, _em_momentum(s, q1, v1, mech), g1
    D1L, D2L = _lagrangian_gradient(s, q1, v1, mech)
    force = D1L + external
    if mech.m:
        force = force - _discrete_gradient(lambda q: lam @ mech.g(q), q0, q1, mech)
    return q1, force, D2L, None


def _em_momentum(s: State, q1, v1, mech):
    """D2_bar L of KB23 eq 29 (p^{n+1/2}, eq 28c): M v^{n+1/2} for a constant M."""
    if mech.constant_mass:
        return mech.D2L(s.q, 0.5 * (s.v + v1))
    return _lagrangian_gradient(s, q1, v1, mech)[1]


def _midpoint_momentum(s: State, q1, v1, mech):
    """D_2 L(q^{n+1/2}, v^{n+1/2}) (KB23 eq 21)."""
    return mech.D2L(0.5 * (s.q + q1), 0.5 * (s.v + v1))


def _midpoint_forces(u, s: State, h, t, mech):
    """(q^{n+1}, D_1 L + F - G^T lambda at the midpoint, D_2 L at the midpoint) of KB23 eq 21."""
    v1, lam = u["v1"], u["lam"]
    q0, v0 = s.q, s.v
    q1 = _position(s, v1, h)
    qm, vm = 0.5 * (q0 + q1), 0.5 * (v0 + v1)
    force = mech.D1L(qm, vm) + _external(mech, q0, q1, v0, v1, t, h)
    if mech.m:
        force = force - mech.GT_mul(qm, lam)
    return q1, force, _midpoint_momentum(s, q1, v1, mech), None


def _residual(forces):
    def residual(u, s: State, h, t, params, mech):
        """Eq (b) with p^{n+1} = 2 D2 L - p^n from (c), and eq (d), at q^{n+1} from (a)."""
        q1, force, D2L, g1 = forces(u, s, h, t, mech)
        return jnp.concatenate([2.0 * (D2L - s.p) - h * force, mech.g(q1) if g1 is None else g1])

    return residual


def _update(momentum):
    def update(u, s: State, h, t, params, mech):
        """q^{n+1} (eq a), p^{n+1} = 2 D2 L - p^n (eq c), v^{n+1} and lambda."""
        q1 = _position(s, u["v1"], h)
        p1 = 2.0 * momentum(s, q1, u["v1"], mech) - s.p
        new = State(q=q1, p=p1, v=u["v1"], lam=u["lam"], gam=s.gam, extra=_unprepared(s.extra), comp=s.comp)
        return new, {"v": u["v1"], "lam": u["lam"]}

    return update


def _em_external(v1, s: State, h, t, mech):
    """F(q^{n+1/2}, v^{n+1/2}, t + h/2) as a function of v^{n+1} (for the structured tangent)."""
    return _external(mech, s.q, _position(s, v1, h), s.v, v1, t, h)


def _guess(s: State, h, t, params, mech, mode):
    """The velocity and multipliers of step n ("simple" and "advanced" alike: with v^{n+1} = v^n,
    q^{n+1} = q^n + h v^n, the advanced guess of KBS23b Table 2)."""
    return {"v1": s.v, "lam": s.lam}


LIVENS_EM = register(
    Scheme(
        name="livens-em",
        unknowns=(("v1", "d"), ("lam", "m")),
        residual=_residual(_em_forces),
        guess=_guess,
        update=_update(_em_momentum),
        tangent=livens_em_tangent.tangent(_residual(_em_forces), _em_external),
        prepare=_prepare,
        capabilities=Capabilities(
            velocity_kind="nodal",
            mass_inverse=False,
            singular_mass=True,
            configuration_mass=True,
            symmetries=True,
        ),
        about=About(
            paper="KB23 eq 28, 30 (Kinon, Betsch: Livens principle); discrete energy eq 31; KBS23b eq 85",
            description="energy-momentum Livens scheme; singular or configuration-dependent M, no M^-1",
            keeps="generalized energy E(q, v, p) (KB23 eq 31), momentum maps (balance with the loads' "
            "impulse), g(q) at the nodes; order 2",
            order=2,
        ),
    ),
)

LIVENS_MIDPOINT = register(
    Scheme(
        name="livens-midpoint",
        unknowns=(("v1", "d"), ("lam", "m")),
        residual=_residual(_midpoint_forces),
        guess=_guess,
        update=_update(_midpoint_momentum),
        capabilities=Capabilities(
            velocity_kind="nodal",
            mass_inverse=False,
            singular_mass=True,
            configuration_mass=True,
        ),
        about=About(
            paper="KB23 eq 21 (Livens equations) discretized by the implicit midpoint rule (comparison)",
            description="midpoint rule in Livens (q, v, p) form; singular or configuration-dependent M, no M^-1",
            keeps="g(q) at the nodes; order 2",
            order=2,
        ),
    ),
)
