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
else a_0' = P a_0 (the targets Z^T a = 0 of an equivariant g). The derivative of ``jax.jacfwd``
through these formulas differentiates the Gram solve of P (an unrolled Cholesky factorization)
once per unknown, which is most of the tangent's cost; here its derivative is taken once, by the
implicit function theorem: for a vector w held fixed,

    D_q [P(q) w] e = -P A_w e - Z (Z^T Z)^-1 B_{Pw} e,   A_w = D_q[Z(q) (Z^T Z)^-1 Z^T w],
                                                       B_v = D_q[Z(q)^T v]

(A and B by AD of the generators; (Z^T Z)^-1 formed once), so that

    D u = (I - A_1/2) - Z (Z^T Z)^-1 [Z^T (I - A_1/2) + B_u/2],
    D a_0' = X_0 - Z (Z^T Z)^-1 [Z^T X_0 + B_{a_0'}/2],  X_0 = (H + A_0)/2   (H = D^2 phi(q_m)),

and with D num = D phi(q^{n+1}) - a_0' - D a_0'^T dx, D kappa from s and d_4,

    D a = D a_0' + kappa num D u + u (num D kappa + kappa D num)^T           (d/dq^{n+1}),
    d a/d lambda = d a_0'/d lambda + kappa u (g(q^{n+1}) - g(q^n) - (d a_0'/d lambda)^T dx)^T,

the rank-one terms those of the quotient. The tangent is then

    dR/dx = [[M + h^2/2 D a - h dF/dv^{n+1},  h d a/d lambda],
             [h/2 G(q^{n+1}),                  0            ]],

solved by one LU factorization (M may be singular). Where the generators are nearly dependent
(:func:`well_conditioned`), the Gram solve's shift is no longer negligible and the tangent is the dense
AD Jacobian (a ``lax.cond``). Every value is the exact derivative of the
residual: the tests compare it with ``jax.jacfwd``. A configuration-dependent M keeps the default
tangent (:func:`livens.solvers.tangent_operator`'s band or dense AD form), and so does a system
large enough for the band form (:attr:`livens.engine.SizePolicy.banded_unknowns`) where it finds one.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from .. import discrete_gradients as dg
from ..solvers import Dense, ad_jacobian, banded_tangent, size_policy
from .base import State


def _constraints(mech) -> Callable:
    if mech.m:
        return mech.g
    return lambda q: jnp.zeros((0,), q.dtype)


def _projected(mech, qm, Z, dx, a0, equivariant: bool, H, Gm):
    """(u, D u, a_0', D a_0', d a_0'/d lambda) of the module docstring (derivatives in q^{n+1}).
    Every Gram solve is a product with (Z^T Z)^-1, formed once
    (:func:`livens.discrete_gradients.gram_solve` of the identity) and refined once per product."""
    d = dx.shape[0]
    eye = jnp.eye(d, dtype=dx.dtype)
    gram = Z.T @ Z
    Gi = dg.gram_solve(Z, jnp.eye(Z.shape[1], dtype=Z.dtype))

    def solve(B):
        X = Gi @ B
        return X + Gi @ (B - gram @ X)

    if equivariant:  # targets Z^T a = 0: a_0' = P a_0
        Y = solve(jnp.stack([-(Z.T @ a0), Z.T @ dx], axis=1))
        a0 = a0 + Z @ Y[:, 0]
        u = dx - Z @ Y[:, 1]
        ys, ws = jnp.stack([Y[:, 1], Y[:, 0]], axis=1), jnp.stack([u, a0], axis=1)
    else:
        ys = solve((Z.T @ dx)[:, None])
        u = dx - Z @ ys[:, 0]
        ws = u[:, None]
    A, B = jax.jacfwd(lambda q: (mech.generators(q) @ ys, mech.generators(q).T @ ws))(qm)
    X1 = eye - 0.5 * A[:, 0, :]
    rhs = [Z.T @ X1 + 0.5 * B[:, 0, :]]
    if equivariant:
        X0 = 0.5 * (H + A[:, 1, :])
        rhs += [Z.T @ X0 + 0.5 * B[:, 1, :], Z.T @ Gm.T]
    S = solve(jnp.concatenate(rhs, axis=1))
    Du = X1 - Z @ S[:, :d]
    if equivariant:
        return u, Du, a0, X0 - Z @ S[:, d : 2 * d], Gm.T - Z @ S[:, 2 * d :]
    return u, Du, a0, 0.5 * H, Gm.T


def well_conditioned(mech, qm) -> jax.Array:
    """Whether the generators at q_m are independent enough for the formulas of the module docstring:
    tr(Z^T Z) max diag((Z^T Z)^-1) below :data:`GRAM_CONDITION`. Where they are nearly dependent (three
    rotations of collinear points, rotations and translations of a rigid rod), the shift that
    :func:`livens.discrete_gradients.gram_solve` adds to Z^T Z is no longer negligible, and the
    tangent is the dense AD Jacobian instead."""
    Z = mech.generators(qm)
    Gi = dg.gram_solve(Z, jnp.eye(Z.shape[1], dtype=Z.dtype))
    return jnp.trace(Z.T @ Z) * jnp.max(jnp.diagonal(Gi)) < GRAM_CONDITION


#: The condition estimate of the generators' Gram matrix above which the tangent is the dense AD
#: Jacobian (:func:`well_conditioned`): the Gram solve's shift (1e-14 of its trace) then changes its
#: inverse by more than 1e-6.
GRAM_CONDITION = 1e8


def gradient_jacobians(mech, q0, q1, lam):
    """(D a, d a/d lambda, G(q^{n+1})): the derivatives of the discrete gradient a of
    phi = V + lambda.g that ``livens-em`` takes for a constant M (module docstring) in q^{n+1}
    (d x d) and in lambda (d x m), and the constraints' Jacobian at q^{n+1}."""
    g = _constraints(mech)

    def phi(q):
        return mech.V(q) + lam @ g(q)

    dx = q1 - q0
    qm = 0.5 * (q0 + q1)
    H, Gm = jax.jacfwd(lambda q: (jax.grad(phi)(q), g(q)))(qm)
    b1, G1 = jax.jacfwd(lambda q: (phi(q), g(q)))(q1)
    a0 = jax.grad(phi)(qm)
    if mech.symmetries:
        Z = mech.generators(qm)
        u, Du, a0, Da0, La0 = _projected(mech, qm, Z, dx, a0, not mech.invariant_constraints, H, Gm)
        eps2 = dg.SYMMETRY_EPS**2
    else:  # Gonzalez's gradient (KB23 eq 26)
        u, Du, Da0, La0 = dx, jnp.eye(dx.shape[0], dtype=dx.dtype), 0.5 * H, Gm.T
        eps2 = 0.0
    num = phi(q1) - phi(q0) - a0 @ dx
    Dnum = b1 - a0 - Da0.T @ dx
    Lnum = g(q1) - g(q0) - La0.T @ dx
    s = u @ u
    Ds = 2.0 * (Du.T @ u)
    c1 = dg.DELTA**2 * (1.0 + qm @ qm)
    c2 = eps2 * (dx @ dx)
    den = s * s + c1 * c1 + c2 * c2
    Dd4 = (2.0 * dg.DELTA**2 * c1) * qm + (4.0 * eps2 * c2) * dx
    kappa = s / den
    Dkappa = Ds / den - (s / (den * den)) * (2.0 * s * Ds + Dd4)
    Ja = Da0 + (kappa * num) * Du + jnp.outer(u, num * Dkappa + kappa * Dnum)
    La = La0 + kappa * jnp.outer(u, Lnum)
    return Ja, La, G1


def structured(u, s: State, h, t, params, mech, external: Callable) -> jax.Array:
    """dR/dx of ``livens-em`` for a constant M (module docstring), as a matrix; ``external(v1)`` the
    force term F(q^{n+1/2}, v^{n+1/2}, t + h/2) as a function of v^{n+1}."""
    v1, lam = u["v1"], u["lam"]
    q1 = s.q + 0.5 * h * (s.v + v1)
    Ja, La, G1 = gradient_jacobians(mech, s.q, q1, lam)
    A = mech.M(s.q) + (0.5 * h * h) * Ja
    if mech.has_external_force:
        A = A - h * jax.jacfwd(external)(v1)
    m = lam.shape[0]
    return jnp.block([[A, h * La], [0.5 * h * G1, jnp.zeros((m, m), A.dtype)]])


def tangent(residual: Callable, external: Callable) -> Callable:
    """The tangent ``(u, s, h, t, params, mech)`` of ``livens-em``'s ``residual``: from
    :attr:`livens.engine.SizePolicy.banded_unknowns` unknowns on the band form where one is found
    (:func:`livens.solvers.banded_tangent`), else :func:`structured` for a constant M and the dense AD
    Jacobian for a configuration-dependent one. ``external(v1, s, h, t, mech)``: the force term."""

    def full(z, a, mech):
        st, hh, tt, pp = a
        return residual({"v1": z[: mech.d], "lam": z[mech.d :]}, st, hh, tt, pp, mech)

    def tangent_(u, s, h, t, params, mech):
        x = jnp.concatenate([u["v1"], u["lam"]])
        if x.shape[0] >= size_policy().banded_unknowns:
            band = banded_tangent(("scheme", "livens-em"), full, x, (s, h, t, params), mech)
            if band is not None:
                return band
        d = mech.d

        def dense(x):
            return ad_jacobian(lambda v: residual(v, s, h, t, params, mech), x, lambda z: {"v1": z[:d], "lam": z[d:]})

        if not mech.constant_mass:
            return Dense(dense(x))

        def assembled(x):
            return structured(u, s, h, t, params, mech, lambda v1: external(v1, s, h, t, mech))

        if len(mech.symmetries) < 2:
            return Dense(assembled(x))
        qm = s.q + 0.25 * h * (s.v + u["v1"])
        return Dense(jax.lax.cond(well_conditioned(mech, qm), assembled, dense, x))

    return tangent_
