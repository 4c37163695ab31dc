"""The GGL energy-momentum scheme EM (002 §5, eq 84-91).

A direct discretization of the Euler-Lagrange equations of the GGL principle (002 eq 37) with
discrete derivatives in the sense of Gonzalez:

    q^{n+1} - q^n = h v^{n+1/2} + h (D^G_p g_v)^T gamma^{n+1}                                (84a)
    p^{n+1} - p^n = h D^G_q L - h (D^G g)^T lambda^{n+1} - h (D^G_q g_v)^T gamma^{n+1}         (84b)
    p^{n+1/2} = D^G_v L                                                                      (84c)
    g(q^{n+1}) = 0                                                                           (84d)
    g_v(q^{n+1}, p^{n+1}) = G(q^{n+1}) M^-1 p^{n+1} = 0                                      (84e)

with (.)^{n+1/2} the mean of the nodal values. Unknowns per step: q^{n+1}, p^{n+1}, v^{n+1} (nodal),
lambda^{n+1}, gamma^{n+1} (3d + 2m).

Discrete derivatives (:mod:`livens.discrete_gradients`):
- (D^G_q L, D^G_v L): the partitioned discrete gradient of L(q, v) (003 eq 29). For the constant
  mass matrix this scheme requires, L = 1/2 v.M v - V(q) is separable and the partitioned
  gradient is exactly (-D^G V, M v^{n+1/2}), with D^G V Greenspan's invariant-based gradient
  (002 eq 126) when the System declares ``invariants``, else Gonzalez's (003 eq 26).
- (D^G_q g_v, D^G_p g_v): the partitioned discrete derivative of g_v(q, p) (002 eq 86b);
  D^G g: Gonzalez's discrete derivative of g, row by row (002 eq 86c).
For at most quadratic L, g, g_v all of these equal the midpoint derivatives (002 eq 99).

Properties (002 §5.1-5.2): the energy E(q, v, p) = p.v - L(q, v) (eq 4) is conserved (eq 89),
momentum maps J = p . xi q are conserved (eq 91) when the discrete derivatives satisfy the
orthogonality conditions (eq 85) -- true for the midpoint derivatives of quadratic functions
and for Greenspan's gradient on symmetric invariants -- and both constraints hold at the nodes.
With p^0 = M v^0, (84c) gives p^n = M v^n at every node (003 Prop. 5.5), so E = T + V.
Second order; not symplectic.
"""
from __future__ import annotations

import jax.numpy as jnp

from .. import discrete_gradients as dg
from . import register
from .ggl_theta import _guess, _update  # same unknowns q1, p1, v1, lam, gam
from .base import Scheme, State


def _gv_derivative(mech, q0, p0, q1, p1):
    """Partitioned discrete derivative (D^G_q g_v, D^G_p g_v) of g_v(q, p) = G(q) M^-1 p.

    Equal to :func:`livens.discrete_gradients.partitioned_jacobian` of g_v, evaluated with two
    exact simplifications because g_v is linear in p: Gonzalez's derivative of a linear function
    is its Jacobian, so D^G_p g_v = 1/2 (G(q^n) + G(q^{n+1})) M^-1; and Gonzalez's formula is
    linear in the function, so D^G_q g_v = D^G [q -> G(q) M^-1 p^{n+1/2}](q^n, q^{n+1}).
    (Half the work of the generic formula; the tests compare the two.)
    """
    Minv = mech.Minv()
    w = Minv @ (0.5 * (p0 + p1))
    Dq = dg.gonzalez_jacobian(lambda q: mech.G(q) @ w, q0, q1)
    Dp = 0.5 * (mech.G(q0) + mech.G(q1)) @ Minv
    return Dq, Dp


def _residual(u, s: State, h, t, params, mech):
    """Residual of 002 eq 84a-e."""
    q1, p1, v1, lam, gam = u["q1"], u["p1"], u["v1"], u["lam"], u["gam"]
    q0, p0, v0 = s.q, s.p, s.v
    DqL = -dg.potential_gradient(mech.system, q0, q1)        # D^G_q L = -D^G V (L separable)
    DvL = mech.M(q0) @ (0.5 * (v0 + v1))                      # D^G_v L = M v^{n+1/2} (T quadratic)
    Dg = dg.gonzalez_jacobian(mech.g, q0, q1)                 # D^G g
    Dq_gv, Dp_gv = _gv_derivative(mech, q0, p0, q1, p1)
    return jnp.concatenate([
        q1 - q0 - 0.5 * h * (v0 + v1) - h * Dp_gv.T @ gam,                # (84a)
        p1 - p0 - h * DqL + h * Dg.T @ lam + h * Dq_gv.T @ gam,            # (84b)
        0.5 * (p0 + p1) - DvL,                                             # (84c)
        mech.g(q1),                                                        # (84d)
        mech.gv(q1, p1),                                                   # (84e)
    ])


def _enforced(sol):
    """The constraints EM is built to meet: g(q^{n+1}) and g_v(q^{n+1}, p^{n+1}) (002 eq 84d, e)."""
    return {
        "position g(q^{n+1})": sol.constraint_residual("position")[1:],
        "velocity G(q^{n+1}) M^-1 p^{n+1}": sol.constraint_residual("velocity")[1:],
    }


GGL_EM = register(
    Scheme(
        name="ggl-em",
        paper="002 eq 84-91",
        unknowns=(("q1", "d"), ("p1", "d"), ("v1", "d"), ("lam", "m"), ("gam", "m")),
        residual=_residual,
        guess=_guess,
        update=_update,
        velocity_kind="nodal",
        description="GGL energy-momentum scheme with discrete gradients",
        has_gamma=True,
        enforced=_enforced,
        keeps="energy, momentum maps, both constraints at nodes; order 2",
        order=2,
    ),
    aliases={"EM": {}},
)
