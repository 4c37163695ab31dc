"""The Newton tangent of ``livens-em`` (KB23 eq 28, 30) for a constant mass matrix, assembled from
its terms.

For a constant M, ``livens-em`` solves in the unknowns x = (v^{n+1}, lambda)
(:mod:`livens.schemes.livens_em`)

    R_1 = M (v^n + v^{n+1}) - 2 p^n - h F(q^{n+1/2}, v^{n+1/2}, t + h/2) + h a,     R_2 = g(q^{n+1}),

with q^{n+1} = q^n + h/2 (v^n + v^{n+1}) and a the discrete gradient of phi = V + lambda.g: Gonzalez's
(KB23 eq 26) without symmetries, the corrected one of
:func:`livens.discrete_gradients.corrected` with them (orthogonal to the generators
Z = [xi_k q^{n+1/2}], KBS23b eq 85). With dx = q^{n+1} - q^n, q_m = q^{n+1/2}, a_0 = D phi(q_m) and
P = I - Z K Z^T (K the Gram solve's (Z^T Z)^-1, below),

    a = a_0' + kappa num u,   u = P dx,   num = phi(q^{n+1}) - phi(q^n) - a_0'.dx,
    kappa = s / (s^2 + d_4),  s = u.u,  d_4 = (delta^2 (1 + q_m.q_m))^2 + (eps^2 dx.dx)^2,

a_0' = a_0 where the constraints are invariant (or without symmetries: then u = dx and eps = 0),
else a_0' = P a_0 (the targets Z^T a = 0 of an equivariant g). The derivative of ``jax.jacfwd``
through these formulas differentiates the Gram solve of P (an unrolled Cholesky factorization
of the shifted Gram matrix Gs = Z^T Z + tau I, tau = 1e-14 tr(Z^T Z)/r, with one refinement step)
once per unknown, which is most of the tangent's cost. That solve applies the matrix
K = Gs^-1 + tau Gs^-2 (exactly, refinement included); here K and its derivative

    dK = -Gs^-1 dGs Gs^-1 - tau (Gs^-1 dGs Gs^-2 + Gs^-2 dGs Gs^-1) + dtau Gs^-2,
    dGs = dZ^T Z + Z^T dZ + dtau I,

are formed once (:func:`_gram_inverse`; dZ from AD of the generators), exact also where the
generators are nearly dependent and the shift matters. For w with the derivative D w,

    D [w - Z K Z^T w] = D w - dZ (K Z^T w) - Z (dK Z^T w + K (dZ^T w + Z^T D w))     (:func:`_project`)

gives D u (w = dx, D w = I) and D a_0' (w = a_0, D w = H/2, H = D^2 phi(q_m)),
and with D num = D phi(q^{n+1}) - a_0' - D a_0'^T dx, D kappa from s and d_4,

    D a = D a_0' + kappa num D u + u (num D kappa + kappa D num)^T           (d/dq^{n+1}),
    d a/d lambda = d a_0'/d lambda + kappa u (g(q^{n+1}) - g(q^n) - (d a_0'/d lambda)^T dx)^T,

the rank-one terms those of the quotient. The tangent is then

    dR/dx = [[M + h^2/2 D a - h dF/dv^{n+1},  h d a/d lambda],
             [h/2 G(q^{n+1}),                  0            ]],

solved by one LU factorization (M may be singular). Every value is the exact derivative of the
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


def _gram_inverse(Z, DZ):
    """(K, dK): the matrix K = Gs^-1 + tau Gs^-2 that :func:`livens.discrete_gradients.gram_solve`
    applies (the shifted Gram matrix Gs = Z^T Z + tau I and its one refinement step against
    Z^T Z), and its derivative (r, r, d) along the generators' derivative DZ (d, r, d). Exact also
    where the generators are nearly dependent and the shift tau = 1e-14 tr(Z^T Z)/r matters."""
    r = Z.shape[1]
    gram = Z.T @ Z
    tau = 1e-14 * jnp.trace(gram) / r + 1e-200
    eye = jnp.eye(r, dtype=Z.dtype)
    Gsi = jnp.linalg.inv(gram + tau * eye)
    dG = jnp.einsum("ire,is->rse", DZ, Z)
    dG = dG + jnp.transpose(dG, (1, 0, 2))
    dtau = (1e-14 / r) * jnp.einsum("rre->e", dG)
    T1 = jnp.einsum("ab,bce,cd->ade", Gsi, dG + eye[:, :, None] * dtau, Gsi)
    Gsi2 = Gsi @ Gsi
    dK = -T1 - tau * (jnp.einsum("abe,bc->ace", T1, Gsi) + jnp.einsum("ab,bce->ace", Gsi, T1))
    return Gsi + tau * Gsi2, dK + Gsi2[:, :, None] * dtau[None, None, :]


def _project(Z, DZ, K, dK, w, Dw):
    """(w - Z K Z^T w, its derivative) for w with the derivative Dw (d, d) in q^{n+1}: the part of w
    outside the generators' span that :func:`livens.discrete_gradients.corrected` forms."""
    c = Z.T @ w
    y = K @ c
    inner = jnp.einsum("ire,i->re", DZ, w) + Z.T @ Dw
    D = Dw - jnp.einsum("ire,r->ie", DZ, y) - Z @ (jnp.einsum("rse,s->re", dK, c) + K @ inner)
    return w - Z @ y, D


def _projected(mech, qm, Z, dx, a0, equivariant: bool, H, Gm):
    """(u, D u, a_0', D a_0', d a_0'/d lambda) of the module docstring (derivatives in q^{n+1}),
    with the Gram solves of :func:`livens.discrete_gradients.corrected` as products with the matrix
    K of :func:`_gram_inverse`."""
    DZ = 0.5 * jax.jacfwd(mech.generators)(qm)  # d Z(q^{n+1/2}) / d q^{n+1}
    K, dK = _gram_inverse(Z, DZ)
    u, Du = _project(Z, DZ, K, dK, dx, jnp.eye(dx.shape[0], dtype=dx.dtype))
    if not equivariant:
        return u, Du, a0, 0.5 * H, Gm.T
    a0, Da0 = _project(Z, DZ, K, dK, a0, 0.5 * H)  # targets Z^T a = 0: a_0' = a_0 - Z K Z^T a_0
    return u, Du, a0, Da0, Gm.T - Z @ (K @ (Z.T @ Gm.T))


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
        if mech.constant_mass:
            return Dense(structured(u, s, h, t, params, mech, lambda v1: external(v1, s, h, t, mech)))
        d = mech.d
        J = ad_jacobian(lambda v: residual(v, s, h, t, params, mech), x, lambda z: {"v1": z[:d], "lam": z[d:]})
        return Dense(J)

    return tangent_
