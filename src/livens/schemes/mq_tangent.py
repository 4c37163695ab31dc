"""A structured Newton tangent of the GGL energy-momentum scheme with a configuration-dependent mass
matrix M(q) (``ggl-em``, :func:`livens.schemes.ggl_em._residual_mass`; KBS23b eq 84 with KBS23b
Remark 3 and KB23 eq 29).

The residual is nonlinear in the position increment dq only through functions evaluated at two
points, q^{n+1/2} and q^{n+1}: M(q), g(q), V(q) and their derivatives. In the other unknowns
(dp, v^{n+1}, lambda, gamma) it is polynomial, through the linear solves with M(q^{n+1/2}) and
M(q^{n+1}). The dense AD tangent pushes every one of the 3d + 2m unknown directions through the
whole residual; :func:`em_mass_tangent` instead takes one forward-mode Jacobian in the d directions
of q at each of the two points (of the gradient of the scalar whose midpoint gradient starts EM's
discrete gradient, and of the products M(q) w, G(q) w it needs), and forms every other block from
those matrices and the solves (derivation in :class:`EMMassTangent`). Gonzalez's correction
(:func:`livens.discrete_gradients.corrected`) is differentiated by AD in its own arguments and
applied by the chain rule. The inverse is applied by eliminating v^{n+1} and dp, which are affine
in dq and gamma, and one LU of the remaining (d + 2m) square system.

It applies where EM's force is one Gonzalez gradient (no symmetries, no invariants declared,
m > 0: :func:`em_applies`); elsewhere ``ggl-em`` keeps the AD tangent. Tested against ``jax.jacfwd`` of
the residual (tests/test_ggl_mq_tangent.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import discrete_gradients as dg
from ..solvers.dense import solver
from .base import State, next_node


def em_applies(mech) -> bool:
    """Whether :func:`em_mass_tangent` applies to ``mech``: M(q) configuration dependent, m > 0, no
    symmetries (EM's force is then Gonzalez's gradient, without the orthogonality correction) and
    no invariants (the potential is inside that one gradient)."""
    return (not mech.constant_mass) and mech.m > 0 and not mech.symmetries and mech.invariants is None


def _value_and_jacobian(fun, x):
    """fun(x) (a pytree of arrays) and its Jacobians in x, each with the direction as last axis:
    one linearization, the primal computed once."""
    y, lin = jax.linearize(fun, x)
    J = jax.vmap(lin, out_axes=-1)(jnp.eye(x.shape[0], dtype=x.dtype))
    return y, J


class EMMassTangent:
    """The Jacobian of ``ggl-em``'s residual for M(q) in its blocks, and its inverse.

    With x = (dq, dp, v1, lambda, gamma), q_m = q^{n+1/2}, M_m = M(q_m), M_0, M_1 = M(q^n), M(q^{n+1}),
    a = M_m^-1 G_m^T gamma, w_m = M_m^-1 p^{n+1/2}, w_1 = M_1^-1 p^{n+1}, and, at q_m, B = D[G^T gamma
    - M a] (a fixed), DMw = D[M w_m], the rows of dR/dx are

        (84a)  [ I - h/2 M_m^-1 B,  0,        -h/2 I,           0,     -h M_m^-1 G_m^T ]
        (84b)  [ h F_q,             I + h F_p, h F_v,            h F_l, h F_g           ]
        (84c)  [ -1/2 D[M v_m](q^{n+1}), 1/2 I, -1/4 (M_0 + M_1), 0,    0               ]
        (84d)  [ G_1,               0,         0,                0,     0               ]
        (84e)  [ K_1 - G_1 M_1^-1 D[M w_1], G_1 M_1^-1, 0,       0,     0               ]

    where f = c(A, dq, Df, q_m) is Gonzalez's corrected gradient of the midpoint gradient A of
    Psi = V + lambda.g - 1/4 (v^n.M v^n + v1.M v1) + gamma.G w_m - a.M w_m (a, w_m fixed) and of the
    increment Df of :func:`livens.schemes.ggl_em._force_mass`, so that F_x = c_A dA/dx + c_Df dDf/dx
    (+ c_dq + 1/2 c_qm for dq), with dA/ddq = 1/2 (D^2 Psi - DMw^T M_m^-1 B - B^T M_m^-1 DMw),
    dA/ddp = 1/2 B^T M_m^-1, dA/dv1 = -1/2 D[M v1]^T, dA/dlambda = G_m^T,
    dA/dgamma = D[G w_m]^T - DMw^T M_m^-1 G_m^T. :meth:`matrix` assembles it (for tests),
    :meth:`solve` eliminates dv (84a) and dp (84c) and solves the (d + 2m) rows (84b, d, e) in
    (dq, lambda, gamma), (84b) and (84e) scaled by h/2.
    """

    def __init__(self, h, blocks: dict):
        self.h = h
        self.b = blocks
        self.d = blocks["Aq"].shape[0]
        self.m = blocks["G1"].shape[0]

    def matrix(self) -> jax.Array:
        """The dense Jacobian dR/dx (3d + 2m square), assembled from the blocks."""
        b, h, d, m = self.b, self.h, self.d, self.m
        hh = 0.5 * h
        I, Z = jnp.eye(d), jnp.zeros((d, d))
        Zdm, Zmd, Zmm = jnp.zeros((d, m)), jnp.zeros((m, d)), jnp.zeros((m, m))
        return jnp.block(
            [
                [b["Aq"], Z, -hh * I, Zdm, -h * b["Am"]],
                [b["Bq"], b["Bp"], b["Bv"], b["Bl"], b["Bg"]],
                [b["Cq"], 0.5 * I, -0.25 * b["Mbar"], Zdm, Zdm],
                [b["G1"], Zmd, Zmd, Zmm, Zmm],
                [b["Eq"], b["A1"].T, Zmd, Zmm, Zmm],
            ]
        )

    def solve(self, r: jax.Array) -> jax.Array:
        """dR/dx^-1 r by block elimination (class docstring)."""
        b, h, d, m = self.b, self.h, self.d, self.m
        hh = 0.5 * h
        r1, r2, r3, r4, r5 = r[:d], r[d : 2 * d], r[2 * d : 3 * d], r[3 * d : 3 * d + m], r[3 * d + m :]
        Mbar, Ep = b["Mbar"], b["A1"].T
        # dv = Vq dq + Vg dgamma + v0 from (84a); dp = Pq dq + Pg dgamma + p0 from (84c); hh-scaled
        hVq, hVg, hv0 = b["Aq"], -h * b["Am"], -r1  # hh times Vq, Vg, v0
        hPq = -h * b["Cq"] + 0.5 * Mbar @ hVq
        hPg, hp0 = 0.5 * Mbar @ hVg, h * r3 + 0.5 * Mbar @ hv0
        Bp, Bv = b["Bp"], b["Bv"]
        top = jnp.concatenate([hh * b["Bq"] + Bp @ hPq + Bv @ hVq, hh * b["Bl"], hh * b["Bg"] + Bp @ hPg + Bv @ hVg], 1)
        mid = jnp.concatenate([b["G1"], jnp.zeros((m, 2 * m))], 1)
        bot = jnp.concatenate([hh * b["Eq"] + Ep @ hPq, jnp.zeros((m, m)), Ep @ hPg], 1)
        rhs = jnp.concatenate([hh * r2 - Bp @ hp0 - Bv @ hv0, r4, hh * r5 - Ep @ hp0])
        y = solver(jnp.concatenate([top, mid, bot], 0))(rhs)
        dq, dl, dgam = y[:d], y[d : d + m], y[d + m :]
        dv = (hVq @ dq + hVg @ dgam + hv0) / hh
        dp = (hPq @ dq + hPg @ dgam + hp0) / hh
        return jnp.concatenate([dq, dp, dv, dl, dgam])


def em_mass_tangent(u: dict, s: State, h, mech) -> EMMassTangent:
    """The blocks of :class:`EMMassTangent` at the unknowns ``u`` (``dq``, ``dp``, ``v1``, ``lam``,
    ``gam``) from the state ``s``: one forward-mode Jacobian at q^{n+1/2} and one at q^{n+1}."""
    dq, dp, v1, lam, gam = u["dq"], u["dp"], u["v1"], u["lam"], u["gam"]
    cq, cp = (None, None) if s.comp is None else s.comp
    q0, p0, v0 = s.q, s.p, s.v
    q1, p1 = next_node(q0, dq, cq), next_node(p0, dp, cp)
    qm, pm = q0 + 0.5 * dq, p0 + 0.5 * dp
    d = mech.d
    M0, Mm, M1 = mech.M(q0), mech.M(qm), mech.M(q1)
    solve_m, solve_1 = solver(Mm), solver(M1)
    g, Mf = mech.g, mech.M
    Gm = mech.G(qm)
    X = solve_m(jnp.concatenate([jnp.stack([Gm.T @ gam, pm, dp], 1), Gm.T], 1))
    a, wm, w_dp, Am = X[:, 0], X[:, 1], X[:, 2], X[:, 3:]
    W = jnp.stack([a, wm, v1, w_dp], 1)

    def at_midpoint(y):
        def psi(z):
            Mz = Mf(z)
            Gw = jax.jvp(g, (z,), (wm,))[1]
            kin = 0.25 * (v0 @ (Mz @ v0) + v1 @ (Mz @ v1))
            return mech.V(z) + lam @ g(z) - kin + gam @ Gw - a @ (Mz @ wm)

        return jax.grad(psi)(y), mech.GT_mul(y, gam), Mf(y) @ W, jax.jvp(g, (y,), (wm,))[1]

    (A, _, _, _), (Hpsi, Hg, DMW, Km) = _value_and_jacobian(at_midpoint, qm)
    DMa, DMw, DMv1, DMdp = (DMW[:, k, :] for k in range(4))
    B = Hg - DMa
    MiB = solve_m(B)
    T = DMw.T @ MiB
    w1 = solve_1(p1)
    W1 = jnp.stack([w1, v0, v1], 1)

    def at_node(y):
        return g(y), jax.jvp(g, (y,), (w1,))[1], Mf(y) @ W1, mech.V(y)

    (g1, gv1, _, V1), (G1, K1, DMW1, DV1) = _value_and_jacobian(at_node, q1)
    DMw1, DMv0_1, DMv1_1 = (DMW1[:, k, :] for k in range(3))
    A1 = solve_1(G1.T)
    a1 = A1 @ gam
    # Df = V^{n+1} - V^n + lambda.(g^{n+1} - g^n) - (T-mean^{n+1} - T-mean^n) + gamma.(gv^{n+1} - gv^n - G_m w_dp)
    g0, gv0 = jax.jvp(g, (q0,), (solver(M0)(p0),))

    def kin(M):
        return 0.25 * (v0 @ (M @ v0) + v1 @ (M @ v1))

    Df = V1 - mech.V(q0) + lam @ (g1 - g0) - (kin(M1) - kin(M0)) + gam @ (gv1 - gv0 - Gm @ w_dp)
    chi = Hg @ w_dp - DMdp.T @ a  # grad at q_m of gamma.G(q) w_dp - a.M(q) w_dp
    dDf = {
        "q": DV1 + G1.T @ lam - 0.25 * (DMv0_1.T @ v0 + DMv1_1.T @ v1) + K1.T @ gam - DMw1.T @ a1 - 0.5 * chi,
        "p": a1 - a,
        "v": -0.5 * (M1 - M0) @ v1,
        "l": g1 - g0,
        "g": gv1 - gv0 - Gm @ w_dp,
    }
    dA = {
        "q": 0.5 * (Hpsi - T - T.T),
        "p": 0.5 * MiB.T,
        "v": -0.5 * DMv1.T,
        "l": Gm.T,
        "g": Km.T - DMw.T @ Am,
    }

    def correct(A, dx, df, xm):
        return dg.corrected(A, dx, df, xm)

    cA, cdx, cdf, cxm = jax.jacfwd(correct, argnums=(0, 1, 2, 3))(A, dq, Df, qm)
    F = {k: cA @ dA[k] + jnp.outer(cdf, dDf[k]) for k in dA}
    F["q"] = F["q"] + cdx + 0.5 * cxm
    I = jnp.eye(d)
    blocks = {
        "Aq": I - 0.5 * h * MiB,
        "Am": Am,
        "Bq": h * F["q"],
        "Bp": I + h * F["p"],
        "Bv": h * F["v"],
        "Bl": h * F["l"],
        "Bg": h * F["g"],
        "Cq": -0.25 * (DMv0_1 + DMv1_1),
        "Mbar": M0 + M1,
        "G1": G1,
        "Eq": K1 - A1.T @ DMw1,
        "A1": A1,
    }
    return EMMassTangent(h, blocks)
