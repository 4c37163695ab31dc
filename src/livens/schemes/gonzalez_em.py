"""Gonzalez's energy-momentum scheme for holonomic constraints, EM-G (Gonzalez 1999, Physica D
132; as compared in 002 §6.3, Figs 23-30).

The Hamiltonian form with the discrete gradients of the potential and of the constraints:

    q^{n+1} - q^n = h M^-1 p^{n+1/2}
    p^{n+1} - p^n = -h D^G V(q^n, q^{n+1}) - h D^G g(q^n, q^{n+1})^T lambda
    g(q^{n+1}) = 0

Unknowns per step: q^{n+1}, p^{n+1}, lambda (2d + m). D^G V is Greenspan's invariant-based
gradient (002 eq 126) when the System declares ``invariants``, else Gonzalez's (003 eq 26);
D^G g is Gonzalez's derivative of g row by row (the midpoint Jacobian G(q^{n+1/2}) for quadratic
constraints). The reported velocity is nodal, v^n = M^-1 p^n.

Properties: the Hamiltonian H = 1/2 p.M^-1 p + V is conserved (the directionality of D^G V and
D^G g with g(q^n) = g(q^{n+1}) = 0), momentum maps are conserved for symmetric discrete
gradients, g(q) = 0 at the nodes -- but the secondary constraint G(q) M^-1 p = 0 is *not*
enforced and drifts at O(h^2) (002 Fig 23; contrast EM, Fig 24). Second order.
"""
from __future__ import annotations

import jax.numpy as jnp

from .. import discrete_gradients as dg
from . import register
from .base import Scheme, State


def _residual(u, s: State, h, t, params, mech):
    """Residual of Gonzalez's scheme (three equations above)."""
    q1, p1, lam = u["q1"], u["p1"], u["lam"]
    q0, p0 = s.q, s.p
    Minv = mech.Minv()
    DV = dg.potential_gradient(mech.system, q0, q1)
    Dg = dg.gonzalez_jacobian(mech.g, q0, q1)
    return jnp.concatenate([
        q1 - q0 - 0.5 * h * Minv @ (p0 + p1),
        p1 - p0 + h * DV + h * Dg.T @ lam,
        mech.g(q1),
    ])


def _guess(s: State, h, t, params, mech, mode):
    """State n ("simple"), or q^n + h v^n for q^{n+1} ("advanced", 002 Table 2)."""
    q1 = s.q + h * s.v if mode == "advanced" else s.q
    return {"q1": q1, "p1": s.p, "lam": s.lam}


def _update(u, s: State, h, t, params, mech):
    v1 = mech.Minv() @ u["p1"]
    new = State(q=u["q1"], p=u["p1"], v=v1, lam=u["lam"], gam=s.gam, extra=s.extra)
    return new, {"v": v1, "lam": u["lam"]}


def _enforced(sol):
    """The only constraint EM-G is built to meet: g(q^{n+1})."""
    return {"position g(q^{n+1})": sol.constraint_residual("position")[1:]}


GONZALEZ_EM = register(
    Scheme(
        name="gonzalez-em",
        supports_external_force=False,  # 002 eq 79/82/84 and Gonzalez 1999 have no F term
        paper="Gonzalez 1999 (Physica D 132), as EM-G in 002 §6.3",
        unknowns=(("q1", "d"), ("p1", "d"), ("lam", "m")),
        residual=_residual,
        guess=_guess,
        update=_update,
        velocity_kind="nodal",
        description="Gonzalez's energy-momentum scheme, position constraints only",
        has_gamma=False,
        enforced=_enforced,
        keeps="energy, momentum maps, g(q) at nodes; order 2",
        order=2,
    ),
    aliases={"EM-G": {}},
)
