"""One-stage theta GGL variational integrators, options A and B (KBS23b §4.3, eq 76-83).

Both follow from the discrete GGL action sum (KBS23b eq 56) with L_d = h L(q^{n+theta}, v^{n+1}) and
G_d = h G(q^{n+theta}) (eq 66), q^{n+theta} = (1-theta) q^n + theta q^{n+1} (eq 65). Unknowns per
step: q^{n+1}, p^{n+1}, v^{n+1}, lambda^n, gamma^n (3d + 2m); the velocity v^{n+1} belongs to the
interval [t^n, t^{n+1}] (``velocity_kind = "interval"``).

Option A, ``ggl-theta-a`` (eq 79; g_d = h g(q^{n+theta}), eq 77), theta in (0, 1):

    q^{n+1} - q^n = h v^{n+1} + h M^-1 G(q^{n+theta})^T gamma^n                              (79a)
    p^{n+1} - p^n = h D_1 L(q^{n+theta}, v^{n+1}) - h G(q^{n+theta})^T lambda^n
                    - h sum_k gamma_k^n D^2 g_k(q^{n+theta}) v^{n+1}                           (79b)
    M v^{n+1} = p^{n+1-theta} = theta p^n + (1-theta) p^{n+1}                                 (79c, 75)
    g(q^{n+theta}) = 0                                                                        (79d)
    G(q^{n+theta}) v^{n+1} = 0                                                                (79e)

Alias VI-A: theta = 1/2 (second order; KBS23b Figs 18-19). For theta != 1/2 the nodal constraint
residuals have a parasitic root (our linearization of 79c-e, not in the paper):
g(q^{n+1}) = -((1-theta)/theta) g(q^n) + O(h^2) and G M^-1 p^{n+1} = -(theta/(1-theta)) G M^-1 p^n
+ O(h), so one of them grows geometrically unless theta = 1/2; use theta != 1/2 for short runs only.

Option B, ``ggl-theta-b`` (eq 82; trapezoidal g_d, eq 80), theta in [0, 1], vartheta in (0, 1).
KBS23b §4.3.2 admits vartheta = 1, but there D_1 g_d = 0 (eq 81): with p^{n+1} eliminated by 82c,
lambda^n drops out of 82b and the step has no regular solution, so livens refuses it. For
vartheta > 1/2 lambda^n and G M^-1 p^n are multiplied by -vartheta/(1-vartheta) per step (-3 at
vartheta = 3/4): use vartheta <= 1/2 for long runs (tests/test_properties_systems.py).
At vartheta = 1/2 (VI-B) the factor is -1: the mode neither grows nor decays, and where G(q) loses
rank it is excited and then persists. On the double four-bar at the paper's h, after the first
dead-centre position, lambda^n alternates from step to step and the nodal momenta leave the
velocity constraint (|G M^-1 p^n| up to 56, H(q^n, p^n) off by up to 2.8 E^0), while the enforced
constraints hold and the interval velocities v^{n+1} give VI-S's kinetic energy
(tests/test_examples_defaults.py).

    q^{n+1} - q^n = h v^{n+1} + h M^-1 G(q^{n+theta})^T gamma^n                              (82a)
    p^{n+1} - p^n = h D_1 L(q^{n+theta}, v^{n+1})
                    - h ((1-vartheta) G(q^n) + vartheta G(q^{n+1}))^T lambda^n
                    - h sum_k gamma_k^n D^2 g_k(q^{n+theta}) v^{n+1}                           (82b)
    M v^{n+1} = p^{n+1-theta} - h (theta (1-vartheta) G(q^n)^T
                                   - (1-theta) vartheta G(q^{n+1})^T) lambda^n                 (82c)
    g(q^{n+1}) = 0                                                                            (82d)
    G(q^{n+theta}) v^{n+1} = 0                                                                (82e)

Alias VI-B: theta = 1, vartheta = 1/2 (eq 83; first order). theta = vartheta = 1/2 is second order.
g(q) = 0 holds at the nodes for every theta (82d).

Note: eq 79b/82b print "D_1 L_d(q^{n+theta}, v^{n+1})"; by eq 69a-b and 72 this is
h D_1 L(q^{n+theta}, v^{n+1}) (L the continuous Lagrangian), which is what is used here. The
gamma term is h sum_k gamma_k D^2 g_k M^-1 (p^{n+1} + P^n) with M v^{n+1} = p^{n+1} + P^n (eq 70,
72), i.e. h sum_k gamma_k D^2 g_k(q^{n+theta}) v^{n+1}.

Configuration-dependent M(q) (new; derivation in the theory pages): the discrete action KBS23b
eq 56 with f_d = h v^{n+1} + h M(q^{n+theta})^-1 G(q^{n+theta})^T gamma^n (eq 58, 66b with M at
q^{n+theta}), i.e. the term h gamma.g_v(q^{n+theta}, p^{n+1} + P^n), g_v(q, p) = G(q) M(q)^-1 p
(KBS23b Remark 3). Its DEL are eq 76 with M v^{n+1} -> D_2 L(q^{n+theta}, v^{n+1}) =
M(q^{n+theta}) v^{n+1} in (c) (already the residual's form), M^-1 G^T gamma -> a = M(q^{n+theta})^-1
G(q^{n+theta})^T gamma in (a), and sum_k gamma_k D^2 g_k v^{n+1} -> D_1 g_v(q^{n+theta},
M(q^{n+theta}) v^{n+1})^T gamma = sum_k gamma_k D^2 g_k(q^{n+theta}) v^{n+1} - D_q[a . M(q) v^{n+1}]
at q^{n+theta} in (b) (:mod:`livens.schemes.ggl_mass`); (e) stays G(q^{n+theta}) v^{n+1} = 0. With a
constant M the residual is the one above, operation for operation. A singular M is refused.

Both are symplectic and conserve momentum maps of the form J = p . xi q (KBS23b §4.2, App. A.7).
Eq 79 and 82 have no external force term: a System with ``external_force`` is refused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import ggl_mass, register
from .base import About, Capabilities, Enforced, Param, Scheme, Solving, State


def _q_theta(q0, q1, theta):
    """q^{n+theta} = (1-theta) q^n + theta q^{n+1} (KBS23b eq 65)."""
    return (1.0 - theta) * q0 + theta * q1


def _common(u, s: State, h, params, mech):
    q1, p1, v1, lam, gam = u["q1"], u["p1"], u["v1"], u["lam"], u["gam"]
    q0, p0 = s.q, s.p
    theta = params["theta"]
    qt = _q_theta(q0, q1, theta)
    Gt = mech.G(qt)
    if mech.constant_mass:
        kin = q1 - q0 - h * v1 - h * mech.Minv() @ (Gt.T @ gam)  # (79a) / (82a)
        d1l, hess = mech.D1L(qt, v1), mech.hess_g_vec(qt, gam, v1)  # sum_k gamma_k D^2 g_k v^{n+1}
    else:
        # M(q): a = M(q^{n+theta})^-1 G^T gamma in (a); D_1 L - D_1 g_v(q^{n+theta}, M v^{n+1})^T gamma in (b)
        # as one gradient at q^{n+theta} (module docstring)
        a = ggl_mass.mass_solve(mech, qt, Gt.T @ gam)
        kin = q1 - q0 - h * v1 - h * a
        secondary = ggl_mass.secondary_potential(mech, gam, v1, a, kinetic=v1)
        d1l, hess = jax.grad(lambda y: secondary(y) - mech.V(y))(qt), None
    p_1mtheta = theta * p0 + (1.0 - theta) * p1  # (75)
    return q0, p0, q1, p1, v1, lam, gam, theta, qt, Gt, kin, d1l, hess, p_1mtheta


def _momentum_balance(p0, p1, h, d1l, GdT, lam, hess):
    """p^{n+1} - p^n - h D_1 L + h Gd^T lambda + h sum_k gamma_k D^2 g_k v^{n+1} (eq 79b / 82b, Gd^T
    given as ``GdT``); for M(q) ``d1l`` already holds the gamma term (``hess`` None)."""
    r = p1 - p0 - h * d1l + h * GdT @ lam
    return r if hess is None else r + h * hess


def _residual_a(u, s: State, h, t, params, mech):
    """Residual of option A, KBS23b eq 79a-e."""
    q0, p0, q1, p1, v1, lam, gam, theta, qt, Gt, kin, d1l, hess, p_1mt = _common(u, s, h, params, mech)
    return jnp.concatenate(
        [
            kin,
            _momentum_balance(p0, p1, h, d1l, Gt.T, lam, hess),  # (79b)
            mech.D2L(qt, v1) - p_1mt,  # (79c)
            mech.g(qt),  # (79d)
            Gt @ v1,  # (79e)
        ]
    )


def _residual_b(u, s: State, h, t, params, mech):
    """Residual of option B, KBS23b eq 82a-e."""
    q0, p0, q1, p1, v1, lam, gam, theta, qt, Gt, kin, d1l, hess, p_1mt = _common(u, s, h, params, mech)
    vt = params["vartheta"]
    G0, G1 = mech.G(q0), mech.G(q1)
    return jnp.concatenate(
        [
            kin,
            _momentum_balance(p0, p1, h, d1l, ((1.0 - vt) * G0 + vt * G1).T, lam, hess),  # (82b)
            mech.D2L(qt, v1) - p_1mt + h * (theta * (1.0 - vt) * G0.T - (1.0 - theta) * vt * G1.T) @ lam,  # (82c)
            mech.g(q1),  # (82d)
            Gt @ v1,  # (82e)
        ]
    )


_UNKNOWNS = (("q1", "d"), ("p1", "d"), ("v1", "d"), ("lam", "m"), ("gam", "m"))

GGL_THETA_A = register(
    Scheme(
        name="ggl-theta-a",
        unknowns=_UNKNOWNS,
        residual=_residual_a,
        params=(Param("theta", 0.5, 0.0, 1.0, low_open=True, high_open=True),),
        capabilities=Capabilities(
            external_force=False,
            velocity_kind="interval",
            gamma=True,
            mass_inverse=False,
            configuration_mass=True,
            applies_to=ggl_mass.refusal("ggl-theta-a"),
        ),
        solving=Solving(guess="advanced"),
        about=About(
            paper="KBS23b eq 79 (option A, g_d = h g(q^{n+theta}), eq 77); M(q) by KBS23b Remark 3",
            description="one-stage theta GGL variational integrator, constraints at q^{n+theta}",
            enforced=(Enforced("position", at="theta"), Enforced("velocity", at="theta", w="v")),  # 79d, e
            keeps="symplectic, momentum maps; g and G v at q^{n+theta}; order 2 for theta = 1/2",
            order=2,
        ),
    ),
    aliases={"VI-A": {"theta": 0.5}},
)

GGL_THETA_B = register(
    Scheme(
        name="ggl-theta-b",
        unknowns=_UNKNOWNS,
        residual=_residual_b,
        params=(Param("theta", 1.0, 0.0, 1.0), Param("vartheta", 0.5, 0.0, 1.0, low_open=True, high_open=True)),
        capabilities=Capabilities(
            external_force=False,
            velocity_kind="interval",
            gamma=True,
            mass_inverse=False,
            configuration_mass=True,
            applies_to=ggl_mass.refusal("ggl-theta-b"),
        ),
        about=About(
            paper="KBS23b eq 82 (option B, trapezoidal g_d, eq 80); VI-B eq 83; M(q) by KBS23b Remark 3",
            description="one-stage theta GGL variational integrator, g(q) at the nodes",
            enforced=(Enforced("position"), Enforced("velocity", at="theta", w="v")),  # 82d, e
            keeps="symplectic, momentum maps, g(q) at nodes; order 1 (VI-B), 2 for theta = vartheta = 1/2",
            order=1,
        ),
    ),
    aliases={"VI-B": {"theta": 1.0, "vartheta": 0.5}},
)
