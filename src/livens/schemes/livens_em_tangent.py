"""The Newton tangent of ``livens-em`` (KB23 eq 28, 30) for a constant mass matrix, assembled from
its terms.

For a constant M, ``livens-em`` solves in the unknowns x = (v^{n+1}, lambda)
(:mod:`livens.schemes.livens_em`)

    R_1 = M (v^n + v^{n+1}) - 2 p^n - h F(q^{n+1/2}, v^{n+1/2}, t + h/2) + h a,     R_2 = g(q^{n+1}),

with q^{n+1} = q^n + h/2 (v^n + v^{n+1}) and a the discrete gradient of phi = V + lambda.g: Gonzalez's
(KB23 eq 26) without symmetries, the corrected one of
:func:`livens.discrete_gradients.corrected` with them (orthogonal to the generators
Z = [xi_k q^{n+1/2}], KBS23b eq 85). With dx = q^{n+1} - q^n, q_m = q^{n+1/2}, a_0 = D phi(q_m) and
P = I - Z (Z^T Z)^-1 Z^T,

    a = a_0' + kappa num u,   u = P dx,   num = phi(q^{n+1}) - phi(q^n) - a_0'.dx,
    kappa = s / (s^2 + d_4),  s = u.u,  d_4 = (delta^2 (1 + q_m.q_m))^2 + (eps^2 dx.dx)^2,

a_0' = a_0 where the constraints are invariant (or without symmetries: then u = dx and eps = 0),
else a_0' = P a_0 (the targets Z^T a = 0 of an equivariant g). The Gram solve in P is
:func:`livens.discrete_gradients.gram_solve`'s: a Cholesky factorization of S = Z^T Z + tau I
(tau = GRAM_SHIFT tr(Z^T Z) / r for r generators, :data:`livens.discrete_gradients.GRAM_SHIFT`)
and one refinement step, that is y = W c with c = Z^T w and W = S^-1 + tau S^-2, which is
(Z^T Z)^-1 up to (tau / lambda_min)^2 where the generators are independent and far from it where
they are nearly dependent (collinear points under three rotations). The derivative of
``jax.jacfwd`` through these formulas differentiates the factorization once per unknown, which is
most of the tangent's cost; here it is taken once, by the chain rule through W: with y_k = S^-k c,

    D y = W (D c - D(Z^T Z) y) + tau^2 S^-2 D(Z^T Z) y_2 - 2 tau y_3 (D tau)^T,
    D(Z^T Z) v = B_{Zv} + Z^T A_v,   A_v = D_q[Z(q) v],   B_w = D_q[Z(q)^T w]

(A, B by forward AD of the generators, for v, w held fixed; D tau = 2 GRAM_SHIFT / r D_q[sum Z(q) * Z]
by one reverse pass, the generators' transpose applied to Z, not a forward derivative of the r d
products; S^-1 formed once, by :func:`livens.discrete_gradients.symmetric_inverse`). The last two terms,
those of the shift, are of relative size (tau |S^-1|)^2 and below: they are computed only where
tau tr((Z^T Z)^-1) exceeds :data:`SHIFT_NEGLIGIBLE` (nearly dependent generators), and below it lie far
under the round-off of the first; there W is (Z^T Z)^-1 itself, which differs from S^-1 + tau S^-2 by
the next terms of the same series, and S^-1 is not formed. Then

    D u = (I - A_{y_u}/2) - Z D y_u,   D c_u - D(Z^T Z) y_u = Z^T (I - A_{y_u}/2) + B_u/2,
    D a_0' = X_0 + Z D y_a,   D c_a - D(Z^T Z) y_a = -[Z^T X_0 + B_{a_0'}/2],
    X_0 = (H + A_{y_a})/2   (H = D^2 phi(q_m), c_u = Z^T dx, c_a = -Z^T a_0; A, B, D tau halved
                             as derivatives in q^{n+1} through q_m),

and with D num = D phi(q^{n+1}) - a_0' - D a_0'^T dx, D kappa from s and d_4,

    D a = D a_0' + kappa num D u + u (num D kappa + kappa D num)^T           (d/dq^{n+1}),
    d a/d lambda = d a_0'/d lambda + kappa u (g(q^{n+1}) - g(q^n) - (d a_0'/d lambda)^T dx)^T,

the rank-one terms those of the quotient. The tangent is then

    dR/dx = [[M + h^2/2 D a - h dF/dv^{n+1},  h d a/d lambda],
             [h/2 G(q^{n+1}),                  0            ]],

solved by one LU factorization (M may be singular). Every value is the exact derivative of the
residual, nearly dependent generators included (then D y is large along span Z's near null space,
which Z's product maps back to a moderate D u): the tests compare it with ``jax.jacfwd``. A
configuration-dependent M keeps the default tangent (:func:`livens.solvers.tangent_operator`'s band
or dense AD form), and so does a system
large enough for the band form (from :attr:`livens.engine.SizePolicy.banded_unknowns` unknowns on, the size policy's
choice: :func:`livens.solvers.choose_form`) where it finds one.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from .. import discrete_gradients as dg
from ..solvers import Dense, TangentForms, ad_jacobian, banded_tangent, choose_form
from .base import State

SHIFT_NEGLIGIBLE = 1e-10
"""tau tr((Z^T Z)^-1) (at least tau tr(S^-1) and tau |S^-1|_2, S being positive definite) below which the terms
of D y that carry the Gram solve's shift (tau^2 S^-2 D(Z^T Z) y_2 and 2 tau y_3 (D tau)^T, relative size
(tau |S^-1|)^2 and below) lie far below the round-off of W (D c - D(Z^T Z) y) and are not computed, and W is
taken as (Z^T Z)^-1 (the difference of relative size (tau tr((Z^T Z)^-1))^2 and below). tau tr((Z^T Z)^-1) is
at most r GRAM_SHIFT times the ratio of the mean to the least eigenvalue of Z^T Z: below the bound for Gram
matrices conditioned up to about 1e3, as those of the Euclidean group on a few bodies near the origin."""


def _constraints(mech) -> Callable:
    if mech.m:
        return mech.g
    return lambda q: jnp.zeros((0,), q.dtype)


def _projected(mech, qm, Z, dx, a0, equivariant: bool, H, Gm):
    """(u, D u, a_0', D a_0', d a_0'/d lambda) of the module docstring (derivatives in q^{n+1}),
    the exact derivatives of :func:`livens.discrete_gradients.gram_solve`'s shifted solve
    y = W c, W = S^-1 + tau S^-2 (module docstring)."""
    d, r = dx.shape[0], Z.shape[1]
    eye = jnp.eye(d, dtype=dx.dtype)
    # where the shift is negligible, W = (Z^T Z)^-1 to a relative (tau tr((Z^T Z)^-1))^2, far below
    # round-off: the unshifted inverse, without S^-1 and S^-2; else W = S^-1 + tau S^-2 itself
    tau, Gi = dg.gram_inverse(Z)
    test = tau * jnp.trace(Gi)  # not finite, or negative, where the generators are dependent
    shifted = ~((test >= 0.0) & (test <= SHIFT_NEGLIGIBLE))

    def exact():
        tau_, Si = dg.shifted_gram(Z)
        Si2 = Si @ Si
        return Si + tau_ * Si2, Si, Si2

    def negligible():
        zero = jnp.zeros_like(Gi)
        return Gi, zero, zero

    W, Si, Si2 = lax.cond(shifted, exact, negligible)
    if equivariant:  # targets Z^T a = 0: a_0' = P a_0
        c = jnp.stack([Z.T @ dx, -(Z.T @ a0)], axis=1)
    else:
        c = (Z.T @ dx)[:, None]
    y = W @ c
    u = dx - Z @ y[:, 0]
    if equivariant:
        a0 = a0 + Z @ y[:, 1]
        ws = jnp.stack([u, a0], axis=1)
    else:
        ws = u[:, None]
    k = c.shape[1]

    def through_generators(q, v, w):  # (A_v, B_w) of the module docstring, for the columns of v, w
        Zq = mech.generators(q)
        return Zq @ v, Zq.T @ w

    A, B = jax.jacfwd(through_generators)(qm, y, ws)

    X1 = eye - 0.5 * A[:, 0, :]
    # W (D c_i - D(Z^T Z) y_i) for each column i (sign: that of c_i; the part through Z^T: X1, X0)
    rhs = [Z.T @ X1 + 0.5 * B[:, 0, :]]
    if equivariant:
        X0 = 0.5 * (H + A[:, 1, :])
        rhs.append(-(Z.T @ X0 + 0.5 * B[:, 1, :]))
    WR = jnp.stack([W @ R for R in rhs])

    def with_shift(WR):
        """D y_i = W (D c_i - D(Z^T Z) y_i) + tau^2 S^-2 D(Z^T Z) y2_i - 2 tau y3_i dtau^T, shape (k, r, d)."""
        y2 = Si2 @ c
        A2, B2 = jax.jacfwd(through_generators)(qm, y2, Z @ y2)
        t = jax.vjp(mech.generators, qm)[1](Z)[0]  # D_q sum(Z(q) * Z): one reverse pass
        dtau = (dg.GRAM_SHIFT / r) * t  # d tau / d q^{n+1} (tau = GRAM_SHIFT tr(Z^T Z) / r; through q_m)
        y3 = Si @ y2
        return jnp.stack(
            [
                WR[i]
                + (tau * tau) * (Si2 @ (0.5 * (B2[:, i, :] + Z.T @ A2[:, i, :])))
                - (2.0 * tau) * jnp.outer(y3[:, i], dtau)
                for i in range(k)
            ]
        )

    # the shift's terms are of relative size (tau |S^-1|)^2 and below: not computed below SHIFT_NEGLIGIBLE
    Dy = lax.cond(shifted, with_shift, lambda WR: WR, WR)
    Du = X1 - Z @ Dy[0]
    if equivariant:
        return u, Du, a0, X0 + Z @ Dy[1], Gm.T - Z @ (W @ (Z.T @ Gm.T))
    return u, Du, a0, None, None  # a_0' = a_0: D a_0' and d a_0'/d lambda are the caller's


def gradient_jacobians(mech, q0, q1, lam, start=None):
    """(D a, d a/d lambda, G(q^{n+1})): the derivatives of the discrete gradient a of
    phi = V + lambda.g that ``livens-em`` takes for a constant M (module docstring) in q^{n+1}
    (d x d) and in lambda (d x m), and the constraints' Jacobian at q^{n+1}. ``start``: (V(q^n), g(q^n))
    where the caller has them (g(q^n) None without constraints)."""
    g = _constraints(mech)

    def phi(q):
        return mech.V(q) + lam @ g(q)

    def with_values(f):  # f's forward derivative and its values, from one evaluation
        def twice(q):
            y = f(q)
            return y, y

        return jax.jacfwd(twice, has_aux=True)

    dx = q1 - q0
    qm = 0.5 * (q0 + q1)
    # for invariant constraints the projection of dx needs neither grad phi nor its derivative: it is
    # traced first, so that the compiled step starts its chain of divisions and square roots (the Gram
    # factorization, S^-1) before the derivatives below, which the processor then computes beside it
    # (the same operations in another order: the same values)
    invariant = mech.symmetries and mech.invariant_constraints
    if invariant:
        u, Du = _projected(mech, qm, mech.generators(qm), dx, None, False, None, None)[:2]
    (H, Gm), (a0, _) = with_values(lambda q: (jax.grad(phi)(q), g(q)))(qm)
    (b1, G1), (phi1, g1) = with_values(lambda q: (phi(q), g(q)))(q1)
    V0, g0 = start if start is not None else (mech.V(q0), None)
    g0 = g(q0) if g0 is None else g0
    if invariant:
        Da0, La0 = 0.5 * H, Gm.T
        eps2 = dg.SYMMETRY_EPS**2
    elif mech.symmetries:
        Z = mech.generators(qm)
        u, Du, a0, Da0, La0 = _projected(mech, qm, Z, dx, a0, True, H, Gm)
        eps2 = dg.SYMMETRY_EPS**2
    else:  # Gonzalez's gradient (KB23 eq 26)
        u, Du, Da0, La0 = dx, jnp.eye(dx.shape[0], dtype=dx.dtype), 0.5 * H, Gm.T
        eps2 = 0.0
    num = phi1 - (V0 + lam @ g0) - a0 @ dx
    Dnum = b1 - a0 - dx @ Da0
    Lnum = g1 - g0 - dx @ La0
    s = u @ u
    Ds = 2.0 * (u @ Du)
    c1 = dg.DELTA**2 * (1.0 + qm @ qm)
    c2 = eps2 * (dx @ dx)
    den = s * s + c1 * c1 + c2 * c2
    Dd4 = (2.0 * dg.DELTA**2 * c1) * qm + (4.0 * eps2 * c2) * dx
    inv = 1.0 / den  # one division (the vector's entries multiplied by it)
    kappa = s * inv
    Dkappa = inv * (Ds - kappa * (2.0 * s * Ds + Dd4))
    Ja = Da0 + (kappa * num) * Du + jnp.outer(u, num * Dkappa + kappa * Dnum)
    La = La0 + kappa * jnp.outer(u, Lnum)
    return Ja, La, G1


def prepared_start(s: State):
    """(V(q^n), g(q^n)) where the step prepared them (``livens-em``'s ``Scheme.prepare``), else None."""
    start = s.extra.get("start") if isinstance(s.extra, dict) else None
    return None if start is None else (start["V0"], start["g0"])


def structured(u, s: State, h, t, params, mech, external: Callable) -> jax.Array:
    """dR/dx of ``livens-em`` for a constant M (module docstring), as a matrix; ``external(v1)`` the
    force term F(q^{n+1/2}, v^{n+1/2}, t + h/2) as a function of v^{n+1}."""
    v1, lam = u["v1"], u["lam"]
    q1 = s.q + 0.5 * h * (s.v + v1)
    Ja, La, G1 = gradient_jacobians(mech, s.q, q1, lam, prepared_start(s))
    A = mech.M(s.q) + (0.5 * h * h) * Ja
    if mech.has_external_force:
        A = A - h * jax.jacfwd(external)(v1)
    m = lam.shape[0]
    return jnp.block([[A, h * La], [0.5 * h * G1, jnp.zeros((m, m), A.dtype)]])


def tangent(residual: Callable, external: Callable) -> Callable:
    """The tangent ``(u, s, h, t, params, mech)`` of ``livens-em``'s ``residual`` in the form the size
    policy takes (:func:`livens.solvers.choose_form`, rule ``"unknowns"``): the band form where one is
    found (:func:`livens.solvers.banded_tangent`), else :func:`structured` for a constant M and the dense
    AD Jacobian for a configuration-dependent one. ``external(v1, s, h, t, mech)``: the force term."""

    def full(z, a, mech):
        st, hh, tt, pp = a
        return residual({"v1": z[: mech.d], "lam": z[mech.d :]}, st, hh, tt, pp, mech)

    def tangent_(u, s, h, t, params, mech):
        x = jnp.concatenate([u["v1"], u["lam"]])
        d = mech.d

        def banded():
            return banded_tangent(("scheme", "livens-em"), full, x, (s, h, t, params), mech)

        def dense():
            if not mech.constant_mass:
                unpack = lambda z: {"v1": z[:d], "lam": z[d:]}
                return Dense(ad_jacobian(lambda v: residual(v, s, h, t, params, mech), x, unpack))
            return Dense(structured(u, s, h, t, params, mech, lambda v1: external(v1, s, h, t, mech)))

        return choose_form(TangentForms("unknowns", dense, n=int(x.shape[0]), banded=banded))

    return tangent_
