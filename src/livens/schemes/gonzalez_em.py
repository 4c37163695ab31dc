"""Gonzalez's energy-momentum scheme for holonomic constraints, EM-G (Gonzalez 1999, Physica D
132; as compared in KBS23b §6.3, Figs 23-30).

The Hamiltonian form with the discrete gradients of the potential and of the constraints:

    q^{n+1} - q^n = h M^-1 p^{n+1/2}
    p^{n+1} - p^n = -h D^G V(q^n, q^{n+1}) - h D^G g(q^n, q^{n+1})^T lambda
    g(q^{n+1}) = 0

Unknowns per step: q^{n+1}, p^{n+1}, lambda (2d + m). D^G V + D^G g^T lambda is one discrete
gradient of V + lambda.g (the discrete gradient is linear in the function): the midpoint gradient
corrected along the part of q^{n+1} - q^n outside the symmetry directions
(:func:`livens.discrete_gradients.corrected`), so that it meets the directionality condition and
is orthogonal to the generators xi q^{n+1/2} of every exact symmetry of the system (Gonzalez's
own requirement for momentum conservation; KBS23b eq 85); where the System declares
``invariants``, D^G V is Greenspan's gradient (KBS23b eq 126) and the correction acts on lambda.g
alone. For quadratic constraints D^G g is the midpoint Jacobian G(q^{n+1/2}). The reported
velocity is nodal, v^n = M^-1 p^n.

Properties: the Hamiltonian H = 1/2 p.M^-1 p + V is conserved (the directionality of D^G V and
D^G g with g(q^n) = g(q^{n+1}) = 0), the momentum maps of the exact symmetries are conserved,
g(q) = 0 at the nodes -- but the secondary constraint G(q) M^-1 p = 0 is *not*
enforced and drifts at O(h^2) (KBS23b Fig 23; contrast EM, Fig 24). Second order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import discrete_gradients as dg
from . import register
from .base import About, Capabilities, Scheme, State


def _residual(u, s: State, h, t, params, mech):
    """Residual of Gonzalez's scheme (three equations above)."""
    q1, p1, lam = u["q1"], u["p1"], u["lam"]
    q0, p0 = s.q, s.p
    Minv = mech.Minv()
    return jnp.concatenate(
        [
            q1 - q0 - 0.5 * h * Minv @ (p0 + p1),
            p1 - p0 + h * _force(mech, q0, q1, lam),
            mech.g(q1),
        ]
    )


def _force(mech, q0, q1, lam):
    """D^G V + D^G g^T lambda, one :func:`~livens.discrete_gradients.corrected` gradient of
    V + lambda.g (Greenspan's D^G V apart where the System declares invariants).

    Where V and g are at most quadratic, the midpoint gradient of V + lambda.g is an exact discrete
    gradient (KBS23b eq 99) and is used as such: the increment of V + lambda.g is a0 . dq exactly,
    so no quotient of round-off by a small increment is formed (Greenspan's (V(pi^{n+1}) -
    V(pi^n)) / (pi^{n+1} - pi^n) for a potential linear in its invariants, the heavy top's, is
    V' plus round-off / |dpi|, whose derivative, of size eps |V| / |dpi|^2, forward and reverse
    mode evaluate to different round-off)."""
    qm, dq = 0.5 * (q0 + q1), q1 - q0
    Z = mech.generators(qm)

    def phi(q):
        return lam @ mech.g(q)

    # an invariant g meets the orthogonality condition by itself; an equivariant one is imposed
    force = Z is not None and not mech.invariant_constraints
    if mech.quadratic_constraints and mech.quadratic_potential:
        a0 = jax.grad(lambda q: mech.V(q) + phi(q))(qm)
        if not force:
            return a0
        return dg.corrected(a0, dq, a0 @ dq, qm, Z, jnp.zeros(Z.shape[1]))
    if mech.quadratic_constraints and not force and mech.invariants is not None:  # KBS23b eq 99 for g
        return dg.potential_gradient(mech, q0, q1) + jax.grad(phi)(qm)
    if mech.invariants is not None:
        DV = dg.potential_gradient(mech, q0, q1)
        targets = -(Z.T @ DV) if force else None
        return DV + dg.corrected(jax.grad(phi)(qm), dq, phi(q1) - phi(q0), qm, Z, targets)
    a0 = jax.grad(lambda q: mech.V(q) + phi(q))(qm)
    targets = jnp.zeros(Z.shape[1]) if force else None
    return dg.corrected(a0, dq, mech.V(q1) - mech.V(q0) + phi(q1) - phi(q0), qm, Z, targets)


GONZALEZ_EM = register(
    Scheme(
        name="gonzalez-em",
        unknowns=(("q1", "d"), ("p1", "d"), ("lam", "m")),
        residual=_residual,
        capabilities=Capabilities(external_force=False, velocity_kind="nodal", symmetries=True),
        about=About(
            paper="Gonzalez 1999 (Physica D 132), as EM-G in KBS23b §6.3",
            description="Gonzalez's energy-momentum scheme, position constraints only",
            keeps="energy, momentum maps, g(q) at nodes; order 2",
            order=2,
        ),
    ),
    aliases={"EM-G": {}},
)
