"""Schemes in the (q, v, p) form of Livens principle, for singular and configuration-dependent M
(003 §4-5). Neither forms M^-1; the Newton matrix stays regular where M(q) is only semi-definite.

``livens-em``: the energy-consistent scheme of 003 eq 28 (specified for L = T - V in eq 30),
unknowns q1, p1, v1, lambda (d + d + d + m):

    q^{n+1} - q^n = h v^{n+1/2}                                                      (28a)
    p^{n+1} - p^n = h D1_bar L(q, v) - h sum_k lambda_k D_bar g_k(q)                 (28b)
    p^{n+1/2}     = D2_bar L(q, v)                                                   (28c)
    g(q^{n+1})    = 0                                                                (28d)

with v^{n+1/2} = (v^n + v^{n+1})/2, p^{n+1/2} = (p^n + p^{n+1})/2, (D1_bar L, D2_bar L) the partitioned
discrete derivative of L(q, v) (003 eq 29; :func:`livens.discrete_gradients.partitioned`) and D_bar g_k
Gonzalez's discrete gradient (003 eq 26; :func:`livens.discrete_gradients.gonzalez_jacobian`).
It conserves the discrete generalized energy E^n = p^n.v^n - 1/2 v^n.M(q^n)v^n + V(q^n) (003 eq 31,
Prop. 5.4) to round-off and meets g(q^{n+1}) = 0 to the Newton tolerance. For a
configuration-dependent M, p^n = M(q^n)v^n does not hold exactly (Prop. 5.5), so the total energy
1/2 v.M(q)v + V (eq 35) is not conserved exactly (003 Fig. 7); for a constant M both coincide.

``livens-midpoint``: the implicit midpoint rule applied to the same equations (003 eq 21), the
contrast case: same unknowns,

    q^{n+1} - q^n = h v^{n+1/2},
    p^{n+1} - p^n = h D_1 L(q^{n+1/2}, v^{n+1/2}) - h G(q^{n+1/2})^T lambda,
    p^{n+1/2}     = D_2 L(q^{n+1/2}, v^{n+1/2}) = M(q^{n+1/2}) v^{n+1/2},
    g(q^{n+1})    = 0,

with q^{n+1/2} = (q^n + q^{n+1})/2. It conserves E only for at most quadratic L and g.

An external force F(q, v, t) enters both as h F(q^{n+1/2}, v^{n+1/2}, t + h/2) in the momentum
balance.
"""
from __future__ import annotations

import jax.numpy as jnp

from .. import discrete_gradients as dg
from . import register
from .base import Scheme, State, enforced_position


def _external(mech, q0, q1, v0, v1, t, h):
    if not mech.has_external_force:
        return jnp.zeros_like(q0)
    return mech.F(0.5 * (q0 + q1), 0.5 * (v0 + v1), t + 0.5 * h)


def _livens_em_residual(u, s: State, h, t, params, mech):
    """003 eq 28a-d with the partitioned discrete derivative of L (eq 29) and Gonzalez's D_bar g (eq 26)."""
    q1, p1, v1, lam = u["q1"], u["p1"], u["v1"], u["lam"]
    q0, p0, v0 = s.q, s.p, s.v
    D1L, D2L = dg.partitioned(mech.L, q0, v0, q1, v1)
    force = D1L + _external(mech, q0, q1, v0, v1, t, h)
    if mech.m:
        force = force - dg.gonzalez_jacobian(mech.g, q0, q1).T @ lam
    return jnp.concatenate([
        q1 - q0 - 0.5 * h * (v0 + v1),
        p1 - p0 - h * force,
        0.5 * (p0 + p1) - D2L,
        mech.g(q1),
    ])


def _livens_midpoint_residual(u, s: State, h, t, params, mech):
    """The midpoint rule for 003 eq 21 in (q, v, p) form."""
    q1, p1, v1, lam = u["q1"], u["p1"], u["v1"], u["lam"]
    q0, p0, v0 = s.q, s.p, s.v
    qm, vm = 0.5 * (q0 + q1), 0.5 * (v0 + v1)
    force = mech.D1L(qm, vm) + _external(mech, q0, q1, v0, v1, t, h)
    if mech.m:
        force = force - mech.G(qm).T @ lam
    return jnp.concatenate([
        q1 - q0 - h * vm,
        p1 - p0 - h * force,
        0.5 * (p0 + p1) - mech.D2L(qm, vm),
        mech.g(q1),
    ])


LIVENS_EM = register(
    Scheme(
        name="livens-em",
        paper="003 eq 28, 30 (Kinon, Betsch: Livens principle); discrete energy eq 31",
        unknowns=(("q1", "d"), ("p1", "d"), ("v1", "d"), ("lam", "m")),
        residual=_livens_em_residual,
        velocity_kind="nodal",
        description="energy-consistent Livens scheme; singular or configuration-dependent M, no M^-1",
        needs_mass_inverse=False,
        allows_singular_mass=True,
        allows_configuration_mass=True,
        enforced=enforced_position,  # g(q^{n+1}) (003 eq 28d)
        keeps="generalized energy E(q, v, p) (003 eq 31), g(q) at the nodes; order 2",
        order=2,
    ),
)

LIVENS_MIDPOINT = register(
    Scheme(
        name="livens-midpoint",
        paper="003 eq 21 (Livens equations) discretized by the implicit midpoint rule (comparison)",
        unknowns=(("q1", "d"), ("p1", "d"), ("v1", "d"), ("lam", "m")),
        residual=_livens_midpoint_residual,
        velocity_kind="nodal",
        description="midpoint rule in Livens (q, v, p) form; singular or configuration-dependent M, no M^-1",
        needs_mass_inverse=False,
        allows_singular_mass=True,
        allows_configuration_mass=True,
        enforced=enforced_position,  # g(q^{n+1}) (003 eq 28d)
        keeps="g(q) at the nodes; order 2",
        order=2,
    ),
)
