"""Classical one-step schemes for constrained Hamiltonian systems: the contrast cases.

All four are written in position-momentum form for a constant, regular mass matrix (they use M^-1,
KBS23b eq 29), with the residuals below (q_mid = (q^n + q^{n+1})/2, p_mid = (p^n + p^{n+1})/2,
F = D_1 L + external force; for a constant M, D_1 L = -DV):

``ggl-midpoint``  classical GGL stabilization (KBS23b eq 30) discretized by the implicit midpoint rule,
    both constraints at the nodes (unknowns q1, p1, lambda, gamma):
        q^{n+1} - q^n = h M^-1 p_mid + h G(q_mid)^T gamma               (30a)
        p^{n+1} - p^n = h F(q_mid) - h G(q_mid)^T lambda                 (30b)
        g(q^{n+1}) = 0,   G(q^{n+1}) M^-1 p^{n+1} = 0                    (30c, d)

``midpoint``  implicit midpoint rule for the index-3 equations (KBS23b eq 28), g at the nodes
    (unknowns q1, p1, lambda):
        q^{n+1} - q^n = h M^-1 p_mid,  p^{n+1} - p^n = h F(q_mid) - h G(q_mid)^T lambda,
        g(q^{n+1}) = 0

``rattle``  RATTLE (Andersen 1983; Hairer, Lubich, Wanner, Geometric Numerical Integration, 2nd ed.,
    Ch. VII.1, "SHAKE and RATTLE"; cited in SLO09 §4), unknowns q1, p1, lambda, gamma (gamma is the second
    multiplier mu of HLW):
        p_half  = p^n - h/2 (DV(q^n) + G(q^n)^T lambda)
        q^{n+1} = q^n + h M^-1 p_half,            g(q^{n+1}) = 0
        p^{n+1} = p_half - h/2 (DV(q^{n+1}) + G(q^{n+1})^T gamma),   G(q^{n+1}) M^-1 p^{n+1} = 0
    Symplectic on the constraint manifold, second order.

``symplectic-euler``  the constrained symplectic Euler method (HLW Ch. VII.1, first-order symplectic
    method, here without the optional momentum projection; Leimkuhler and Reich 2004, Ch. 7) (the SHAKE-type
    variational scheme with discrete Lagrangian
    h L(q^n, (q^{n+1} - q^n)/h)), unknowns q1, p1, lambda:
        p^{n+1} = p^n - h (DV(q^n) + G(q^n)^T lambda),  q^{n+1} = q^n + h M^-1 p^{n+1},
        g(q^{n+1}) = 0
    Symplectic (variational), first order; p^{n+1} = M (q^{n+1} - q^n)/h is the momentum of the
    interval, so only g holds at the nodes (G M^-1 p^{n+1} = O(h)).

An external force F(q, v, t) enters at the point where the scheme evaluates DV (midpoint rules: at
q_mid, v = M^-1 p_mid, t + h/2; RATTLE: half at each node; symplectic Euler: at q^n, t^n).
"""

from __future__ import annotations

import jax.numpy as jnp

from . import register
from .base import BOTH_NODAL, About, Capabilities, Scheme, State


def _force(mech, q, v, t):
    """D_1 L(q, v) plus the external force: the applied generalized force (KBS23b eq 27b)."""
    f = mech.D1L(q, v)
    if mech.has_external_force:
        f = f + mech.F(q, v, t)
    return f


# ---------------------------------------------------------------------------------- ggl-midpoint
def _ggl_midpoint_residual(u, s: State, h, t, params, mech):
    """KBS23b eq 30a-d, midpoint rule for the differential part, both constraints at q^{n+1}."""
    q1, p1, lam, gam = u["q1"], u["p1"], u["lam"], u["gam"]
    Minv = mech.Minv()
    qm, pm = 0.5 * (s.q + q1), 0.5 * (s.p + p1)
    Gm = mech.G(qm)
    vm = Minv @ pm
    return jnp.concatenate(
        [
            q1 - s.q - h * vm - h * Gm.T @ gam,
            p1 - s.p - h * _force(mech, qm, vm, t + 0.5 * h) + h * Gm.T @ lam,
            mech.g(q1),
            mech.G(q1) @ (Minv @ p1),
        ]
    )


GGL_MIDPOINT = register(
    Scheme(
        name="ggl-midpoint",
        unknowns=(("q1", "d"), ("p1", "d"), ("lam", "m"), ("gam", "m")),
        residual=_ggl_midpoint_residual,
        capabilities=Capabilities(velocity_kind="nodal", gamma=True),
        about=About(
            paper="KBS23b eq 30 (classical GGL stabilization, Gear, Gupta, Leimkuhler 1985), midpoint rule",
            description="implicit midpoint rule for the GGL-stabilized index-2 equations",
            enforced=BOTH_NODAL,
            keeps="both constraints at the nodes; no structure (the contrast case)",
            order=2,
        ),
    ),
)


# ---------------------------------------------------------------------------------- midpoint
def _midpoint_residual(u, s: State, h, t, params, mech):
    """KBS23b eq 28 discretized by the implicit midpoint rule, g(q^{n+1}) = 0."""
    q1, p1, lam = u["q1"], u["p1"], u["lam"]
    qm, pm = 0.5 * (s.q + q1), 0.5 * (s.p + p1)
    vm = mech.Minv() @ pm
    return jnp.concatenate(
        [
            q1 - s.q - h * vm,
            p1 - s.p - h * _force(mech, qm, vm, t + 0.5 * h) + h * mech.G(qm).T @ lam,
            mech.g(q1),
        ]
    )


MIDPOINT = register(
    Scheme(
        name="midpoint",
        unknowns=(("q1", "d"), ("p1", "d"), ("lam", "m")),
        residual=_midpoint_residual,
        capabilities=Capabilities(velocity_kind="nodal"),
        about=About(
            paper="KBS23b eq 28 (index-3 equations), implicit midpoint rule",
            description="implicit midpoint rule for the index-3 equations, g(q) at the nodes",
            keeps="g(q) at the nodes",
            order=2,
        ),
    ),
)


# ---------------------------------------------------------------------------------- rattle
def _rattle_residual(u, s: State, h, t, params, mech):
    """RATTLE (Andersen 1983; HLW Ch. VII.1) with p_{n+1/2} eliminated."""
    q1, p1, lam, mu = u["q1"], u["p1"], u["lam"], u["gam"]
    Minv = mech.Minv()
    v0 = Minv @ s.p
    phalf = s.p + 0.5 * h * (_force(mech, s.q, v0, t) - mech.G(s.q).T @ lam)
    G1 = mech.G(q1)
    v1 = Minv @ p1
    return jnp.concatenate(
        [
            q1 - s.q - h * Minv @ phalf,
            p1 - phalf - 0.5 * h * (_force(mech, q1, v1, t + h) - G1.T @ mu),
            mech.g(q1),
            G1 @ v1,
        ]
    )


RATTLE = register(
    Scheme(
        name="rattle",
        unknowns=(("q1", "d"), ("p1", "d"), ("lam", "m"), ("gam", "m")),
        residual=_rattle_residual,
        capabilities=Capabilities(velocity_kind="nodal", gamma=True),
        about=About(
            paper="Andersen 1983; Hairer-Lubich-Wanner GNI Ch. VII.1; SLO09 §4",
            description="RATTLE: symplectic, both constraints at the nodes, second order",
            enforced=BOTH_NODAL,
            keeps="symplectic, momentum maps, both constraints at the nodes; order 2",
            order=2,
        ),
    ),
)


# ---------------------------------------------------------------------------------- symplectic Euler
def _symplectic_euler_residual(u, s: State, h, t, params, mech):
    """Constrained symplectic Euler (HLW Ch. VII.1; Leimkuhler-Reich Ch. 7), constraint force at q^n."""
    q1, p1, lam = u["q1"], u["p1"], u["lam"]
    Minv = mech.Minv()
    v0 = Minv @ s.p
    return jnp.concatenate(
        [
            p1 - s.p - h * _force(mech, s.q, v0, t) + h * mech.G(s.q).T @ lam,
            q1 - s.q - h * Minv @ p1,
            mech.g(q1),
        ]
    )


SYMPLECTIC_EULER = register(
    Scheme(
        name="symplectic-euler",
        unknowns=(("q1", "d"), ("p1", "d"), ("lam", "m")),
        residual=_symplectic_euler_residual,
        # the reported velocity, M^-1 p^{n+1}, is the interval velocity (q^{n+1} - q^n)/h (the default update)
        capabilities=Capabilities(velocity_kind="interval"),
        about=About(
            paper="constrained symplectic Euler: Hairer-Lubich-Wanner GNI Ch. VII.1; Leimkuhler-Reich 2004 Ch. 7",
            description="constrained symplectic Euler (SHAKE-type), first order",
            keeps="symplectic, momentum maps, g(q) at the nodes; order 1",
            order=1,
        ),
    ),
)
