"""What the GGL schemes share for a configuration-dependent mass matrix M(q) (docs: theory, "The GGL
family with M(q)").

The GGL functional (KBS23b eq 33) holds for M(q) with the secondary constraint
g_v(q, p) = G(q) M(q)^-1 p (KBS23b Remark 3, after eq 39). Its derivatives, with w = M(q)^-1 p and
a = M(q)^-1 G(q)^T gamma (both are solutions of linear systems with M(q): no inverse is formed),

    D_2 g_v(q, p)^T gamma = a,
    D_1 g_v(q, p)^T gamma = sum_k gamma_k D^2 g_k(q) w - D_q[a . M(q) w]   (a and w held fixed),

where the second term comes from D(M^-1) = -M^-1 (DM) M^-1; for a constant M it vanishes and these
are the terms M^-1 G^T gamma and sum_k gamma_k D^2 g_k M^-1 p of KBS23b eq 55, 76 and 84. g_v needs
M(q)^-1, so a singular M is refused (:func:`regular_mass`): the derivation does not extend to it
(KBS23b Remark 4: the form G(q) v of the secondary constraint, which would avoid M^-1, does not give
the equations of motion).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..mechanics import mass_inverse


def mass_solve(mech, q, x):
    """M(q)^-1 x, by a linear solve with M(q) (x a vector or the columns of a matrix)."""
    return jnp.linalg.solve(mech.M(q), x)


def secondary(mech, q, p):
    """g_v(q, p) = G(q) M(q)^-1 p (KBS23b eq 29, Remark 3), as a Jacobian-vector product of g."""
    if mech.m == 0:
        return jnp.zeros((0,), dtype=q.dtype)
    return jax.jvp(mech.g, (q,), (mass_solve(mech, q, p),))[1]


def solve_at(mech, q, gam, *columns):
    """(a, x_1, ..., x_k) = M(q)^-1 [G(q)^T gamma, c_1, ..., c_k]: one linear solve with M(q) for
    a = D_2 g_v(q, p)^T gamma, the direction of the gamma term in the position update (KBS23b eq 55a,
    76a, 84a), and the given vectors."""
    X = mass_solve(mech, q, jnp.stack([mech.GT_mul(q, gam), *columns], axis=1))
    return tuple(X[:, i] for i in range(X.shape[1]))


def secondary_potential(mech, gam, w, a, kinetic=None):
    """y -> gamma.G(y) w - a.M(y) w: its gradient at q, with w = M(q)^-1 p and a = M(q)^-1 G(q)^T gamma
    held fixed, is D_1 g_v(q, p)^T gamma (module docstring). A scalar, so that a scheme adds it to the
    other terms it differentiates at the same point and takes one gradient of the sum. With
    ``kinetic`` = v: y -> T(y, v) - (gamma.G(y) w - a.M(y) w), M(y) evaluated once (the theta
    schemes' D_1 L - D_1 g_v^T gamma, KBS23b eq 76b, with -DV added by the caller)."""

    def phi(y):
        My = mech.M(y)
        Gw = jax.jvp(mech.g, (y,), (w,))[1] if mech.m else jnp.zeros((0,), y.dtype)
        out = gam @ Gw - a @ (My @ w)
        return out if kinetic is None else 0.5 * kinetic @ (My @ kinetic) - out

    return phi


def point_force(mech, q, lam, gam, w, a=None, dw: bool = False):
    """The force terms of a GGL scheme at one point and the constraints there, from one gradient:
    ``(f, g(q), G(q) w)``, with ``dw`` ``(f, G(q)^T gamma, g(q), G(q) w)``, where f = grad_q phi of

        phi(y, w) = V(y) + lambda.g(y) + gamma.G(y) w                            (constant M)
        phi(y)    = V(y) + lambda.g(y) + gamma.G(y) w - a.M(y) w - 1/2 w.M(y) w  (M(q); a, w fixed)

    so that -f is the force -DV - G^T lambda - D_1 g_v^T gamma (+ D_q T for M(q)) at w = M(q)^-1 p and
    a = M(q)^-1 G(q)^T gamma (module docstring), and grad_w phi = G(q)^T gamma (``dw``, constant M only).
    g(q) and G(q) w come from phi's forward pass (one JVP of g), so that the user's g is evaluated
    once for all of them, where the separate forms (:meth:`livens.mechanics.Mechanics.GT_mul` twice,
    :meth:`~livens.mechanics.Mechanics.hess_g_vec`, a JVP of g for the constraints) evaluate it in four
    places: a smaller program to trace and compile. The same terms to round-off."""

    def phi(y, w):
        gy, Gw = jax.jvp(mech.g, (y,), (w,))
        out = mech.V(y) + lam @ gy + gam @ Gw
        if a is not None:
            Mw = mech.M(y) @ w
            out = out - a @ Mw - 0.5 * w @ Mw
        return out, (gy, Gw)

    if dw:
        (f, gt), (gq, gw) = jax.grad(phi, argnums=(0, 1), has_aux=True)(q, w)
        return f, gt, gq, gw
    f, (gq, gw) = jax.grad(phi, has_aux=True)(q, w)
    return f, gq, gw


def secondary_q_term(mech, q, gam, w, a):
    """D_1 g_v(q, M(q) w)^T gamma = sum_k gamma_k D^2 g_k(q) w - D_q[a . M(q) w] at fixed a, w
    (module docstring), for a = M(q)^-1 G(q)^T gamma (:func:`solve_at`)."""
    if mech.m == 0:
        return jnp.zeros_like(q)
    return jax.grad(secondary_potential(mech, gam, w, a))(q)


def refusal(name: str):
    """``Capabilities.applies_to`` of a GGL scheme: None where M is regular (constant, or M(q) at
    q0), else why the scheme cannot run the system, naming the schemes that can."""

    def regular_mass(problem, mech):
        if mech.constant_mass:
            if mech.Minv_const is not None:
                return None
            what = "singular"
        else:
            M0 = np.asarray(mech.M(jnp.asarray(problem.q0, dtype=float)), dtype=float)
            if mass_inverse(M0) is not None:
                return None
            what = "singular at q0 (configuration dependent)"
        from . import get, names

        accept = ", ".join(n for n in names() if get(n)[0].capabilities.singular_mass) or "(none registered)"
        return (
            f"Scheme {name!r} needs M^-1, but the mass matrix of this system is {what}: its secondary "
            "constraint G(q) M(q)^-1 p (KBS23b eq 29) needs a regular M. Schemes that accept it: "
            f"{accept}."
        )

    return regular_mass
