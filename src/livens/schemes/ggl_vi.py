"""The first-order GGL variational integrator VI-S (002 eq 55; 000 eq 41, damped form 000 eq 57).

Unknowns per step: q^{n+1}, p^{n+1}, v^n, lambda^n, gamma^{n+1} (3d + 2m). With
q_bar = q^n + h v^n (002 eq 53):

    q^{n+1} - q^n = h v^n + h M^-1 G(q_bar)^T gamma                                (55a)
    p^{n+1} - p^n = h D_1 L(q^n, v^n) - h G(q^n)^T lambda
                    - h sum_k gamma_k D^2 g_k(q_bar) M^-1 p^{n+1} - h C(q^n) v^n     (55b, 57b)
    D_2 L(q^n, v^n) = p^{n+1} + h sum_k gamma_k D^2 g_k(q_bar) M^-1 p^{n+1}         (55c)
    g(q^{n+1}) = 0                                                                 (55d)
    G(q_bar) M^-1 p^{n+1} = 0                                                      (55e)

000 eq 41b and 57b print M^-1 p^n in the gamma term; the derivation (000 eq 40b) and 002 eq 55b
give M^-1 p^{n+1}, which is used here. An external force enters like the damping force, at t^n.
Symplectic, conserves momentum maps, g(q) = 0 at the nodes; first order.
"""
from __future__ import annotations

import jax.numpy as jnp

from . import register
from .base import Scheme, State


def _residual(u, s: State, h, t, params, mech):
    q1, p1, v0, lam, gam = u["q1"], u["p1"], u["v0"], u["lam"], u["gam"]
    q0, p0 = s.q, s.p
    Minv = mech.Minv()
    qbar = q0 + h * v0
    Gbar = mech.G(qbar)
    w = Minv @ p1
    hess = mech.hess_g_vec(qbar, gam, w)
    force = mech.D1L(q0, v0) - mech.G(q0).T @ lam
    if mech.has_dissipation:
        force = force - mech.C(q0) @ v0
    if mech.has_external_force:
        force = force + mech.F(q0, v0, t)
    return jnp.concatenate([
        q1 - q0 - h * v0 - h * Minv @ (Gbar.T @ gam),
        p1 - p0 - h * force + h * hess,
        mech.D2L(q0, v0) - p1 - h * hess,
        mech.g(q1),
        Gbar @ w,
    ])


def _guess(s: State, h, t, params, mech, mode):
    q1 = s.q + h * s.v if mode == "advanced" else s.q
    return {"q1": q1, "p1": s.p, "v0": s.v, "lam": s.lam, "gam": s.gam}


def _update(u, s: State, h, t, params, mech):
    new = State(q=u["q1"], p=u["p1"], v=u["v0"], lam=u["lam"], gam=u["gam"], extra=s.extra)
    return new, {"v": u["v0"], "lam": u["lam"], "gam": u["gam"]}


def _enforced(sol):
    """The constraints VI-S is built to meet: g(q^{n+1}) and G(q_bar) M^-1 p^{n+1} (55d, e)."""
    import numpy as np

    mech = sol.mechanics
    qbar = sol.q[:-1] + sol.h * sol.v
    Minv = np.asarray(mech.Minv())
    G = sol._vmap(mech.G, qbar)
    gv = np.einsum("nij,nj->ni", G, sol.p[1:] @ Minv.T)
    return {
        "position g(q^{n+1})": sol.constraint_residual("position")[1:],
        "velocity G(q_bar) M^-1 p^{n+1}": gv,
    }


VI_S = register(
    Scheme(
        name="ggl-vi",
        paper="002 eq 55; 000 eq 41 (typo in 41b corrected), damped 000 eq 57",
        unknowns=(("q1", "d"), ("p1", "d"), ("v0", "d"), ("lam", "m"), ("gam", "m")),
        residual=_residual,
        guess=_guess,
        update=_update,
        velocity_kind="leading",
        description="first-order symplectic GGL variational integrator",
        has_gamma=True,
        supports_dissipation=True,
        enforced=_enforced,
        keeps="symplectic, momentum maps, g(q) at nodes; order 1",
        order=1,
    ),
    aliases={"VI-S": {}, "vi-s": {}},
)
