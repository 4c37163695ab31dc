"""Discrete gradients in the sense of Gonzalez, for the energy-momentum schemes.

A discrete gradient D f(x0, x1) of a scalar f is a second-order approximation of the gradient
at the midpoint that satisfies the *directionality condition* (KB23 eq 27; KBS23b eq 86)

    D f(x0, x1) . (x1 - x0) = f(x1) - f(x0).

This module provides

- :func:`gonzalez`: Gonzalez's discrete gradient (KB23 eq 26) for any scalar function;
- :func:`gonzalez_jacobian`: the same, row by row, for a vector function (e.g. the constraints g);
- :func:`partitioned` and :func:`partitioned_jacobian`: the partitioned discrete derivative of a
  function of two arguments, e.g. L(q, v) or g_v(q, p) (KB23 eq 29; KBS23b eq 84-86);
- :func:`greenspan`: the invariant-based discrete gradient of V(q) = sum_i V_i(pi_i(q)) with
  quadratic invariants pi_i (KBS23b eq 122-126), which also satisfies the orthogonality conditions
  (KBS23b eq 85) needed for the conservation of momentum maps;
- :func:`midpoint`: the gradient at the midpoint, to which all of them reduce for functions that
  are at most quadratic (KBS23b eq 99, §6.2);
- :func:`corrected` and :func:`symmetric`: a discrete gradient that also meets the orthogonality
  conditions of KBS23b eq 85 for the generators of a symmetry group (McLachlan, Quispel, Robidoux
  1999 build discrete gradients that keep several first integrals the same way), whether or not
  the function is written in invariants; the energy-momentum schemes use it;
- :func:`symmetric_partitioned`: the partitioned discrete gradient of L(q, v) corrected the same
  way for a symmetry lifted to the velocities (livens-em with a configuration-dependent M).
- :func:`gram_solve`: the solve with the generators' Gram matrix that :func:`corrected` uses, and
  :func:`outside`, the part of an increment outside the generators' span that it gives.

The quotients that couple every coordinate (c above, and the projections onto the symmetry
generators of :func:`corrected`) are marked with :func:`livens.solvers.couplings.coupling`, so
that the Newton tangent of a chain or a beam keeps its band and takes them as a low-rank term
(:mod:`livens.solvers.tangent`); the mark changes no value.

All functions are pure and jit-traceable; derivatives are taken by JAX AD. They are also safe to
differentiate (the Newton tangent of a scheme differentiates through them): where an increment
is tiny the correction terms fade out smoothly, so that neither value nor derivative is NaN.

Smooth fallback. Gonzalez's correction is c dx with c = (f(x1) - f(x0) - Df(xm).dx) / |dx|^2,
which is 0/0 when x1 = x0. We evaluate it as

    c = (f(x1) - f(x0) - Df(xm).dx) |dx|^2 / (|dx|^4 + delta^4),

which equals Gonzalez's quotient up to a relative change delta^4/|dx|^4 for |dx| >> delta, and
fades smoothly (C-infinity, no switch, no jump) to the midpoint gradient for |dx| << delta. The
directionality condition then holds up to (f(x1) - f(x0) - Df(xm).dx) delta^4/(|dx|^4 + delta^4)
<= |D^3 f| delta^3 / 24, i.e. below round-off for delta = 1e-6 (relative to 1 + |xm|). Greenspan's
quotient is treated the same way, per invariant.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from . import _jaxconfig  # noqa: F401
from .solvers.couplings import coupling

#: Relative length below which an increment counts as tiny (see the module docstring).
DELTA = 1e-6


def _blend(num, s, scale2):
    """num * s / (s^2 + delta^4): Gonzalez's num / s, faded out smoothly where s = |dx|^2 is tiny.

    ``scale2`` is the squared length scale (1 + |xm|^2) that makes delta relative.
    """
    d4 = (DELTA**2 * scale2) ** 2
    return num * s / (s * s + d4)


def midpoint(f: Callable, x0, x1):
    """The gradient of the scalar f at the midpoint, Df((x0 + x1)/2).

    For f at most quadratic this *is* a discrete gradient (it satisfies the directionality
    condition exactly); all discrete gradients here reduce to it then (KBS23b eq 99).
    """
    return jax.grad(f)(0.5 * (x0 + x1))


def gonzalez(f: Callable, x0, x1, df=None):
    """Gonzalez's discrete gradient of a scalar f (KB23 eq 26; Gonzalez 1996):

        D f(x0, x1) = Df(xm) + (f(x1) - f(x0) - Df(xm).dx) dx / |dx|^2,   xm = (x0+x1)/2, dx = x1-x0,

    with the smooth fallback to Df(xm) for tiny |dx| described in the module docstring.
    Satisfies f(x1) - f(x0) = D f . dx to round-off and D f = Df(xm) + O(|dx|^2).
    ``df``: f(x1) - f(x0) where the caller has it.
    """
    xm = 0.5 * (x0 + x1)
    dx = x1 - x0
    grad_m = jax.grad(f)(xm)
    num = (f(x1) - f(x0) if df is None else df) - grad_m @ dx
    s = dx @ dx
    return grad_m + coupling(_blend(num, s, 1.0 + xm @ xm)) * dx


def gonzalez_jacobian(fvec: Callable, x0, x1):
    """Row-wise Gonzalez discrete derivative of a vector function f: R^n -> R^m, shape (m, n).

    Row k is :func:`gonzalez` of f_k, so that f(x1) - f(x0) = D f (x1 - x0) (KBS23b eq 86c for g).
    """
    xm = 0.5 * (x0 + x1)
    dx = x1 - x0
    J = jax.jacfwd(fvec)(xm)
    num = fvec(x1) - fvec(x0) - J @ dx
    s = dx @ dx
    return J + jnp.outer(coupling(_blend(num, s, 1.0 + xm @ xm)), dx)


def partitioned(f: Callable, x0, y0, x1, y1):
    """Partitioned discrete gradient (Dx, Dy) of a scalar f(x, y) (KB23 eq 29; KBS23b eq 84, 86):

        Dx = 1/2 [ D_G f(., y0)(x0, x1) + D_G f(., y1)(x0, x1) ],
        Dy = 1/2 [ D_G f(x0, .)(y0, y1) + D_G f(x1, .)(y0, y1) ],

    with D_G Gonzalez's discrete gradient (:func:`gonzalez`). It satisfies the directionality
    condition f(x1, y1) - f(x0, y0) = Dx.(x1 - x0) + Dy.(y1 - y0), and reduces to the midpoint
    derivatives (D_1 f(xm, ym), D_2 f(xm, ym)) for f bilinear, e.g. g_v(q, p) = G(q) M^-1 p with
    quadratic constraints.
    """
    Dx = 0.5 * (gonzalez(lambda x: f(x, y0), x0, x1) + gonzalez(lambda x: f(x, y1), x0, x1))
    Dy = 0.5 * (gonzalez(lambda y: f(x0, y), y0, y1) + gonzalez(lambda y: f(x1, y), y0, y1))
    return Dx, Dy


def partitioned_jacobian(fvec: Callable, x0, y0, x1, y1):
    """Row-wise :func:`partitioned` for a vector function f(x, y): returns (Dx, Dy) of shapes
    (m, nx), (m, ny) with f(x1, y1) - f(x0, y0) = Dx (x1 - x0) + Dy (y1 - y0) (KBS23b eq 86b)."""
    Dx = 0.5 * (gonzalez_jacobian(lambda x: fvec(x, y0), x0, x1) + gonzalez_jacobian(lambda x: fvec(x, y1), x0, x1))
    Dy = 0.5 * (gonzalez_jacobian(lambda y: fvec(x0, y), y0, y1) + gonzalez_jacobian(lambda y: fvec(x1, y), y0, y1))
    return Dx, Dy


def _diag_derivative(potentials: Callable, pi):
    """V_i'(pi_i) for an elementwise potentials: pi (r,) -> (V_1(pi_1), ..., V_r(pi_r))."""
    return jax.jvp(potentials, (pi,), (jnp.ones_like(pi),))[1]


def greenspan(pi: Callable, potentials: Callable, q0, q1):
    """Invariant-based discrete gradient of V(q) = sum_i V_i(pi_i(q)) (KBS23b eq 122-126).

    ``pi: q -> (r,)`` are quadratic invariants, ``potentials: pi -> (r,)`` gives V_i(pi_i)
    elementwise. Per invariant, Greenspan's quotient (KBS23b eq 126)

        (V_i(pi_i^{n+1}) - V_i(pi_i^n)) / (pi_i^{n+1} - pi_i^n)  times  D pi_i(q^{n+1/2})

    (pi_i quadratic, so D pi_i at the midpoint is its exact discrete derivative). Where the
    increment of one invariant is tiny, *that invariant alone* falls back smoothly to
    V_i'((pi_i^n + pi_i^{n+1})/2) (the same blend as in :func:`gonzalez`, relative to
    1 + |pi_i|); the others keep their quotients, so the directionality condition
    V(q1) - V(q0) = D V . (q1 - q0) holds to round-off in every case. (Switching all invariants
    at once to DV(q^{n+1/2}) breaks it by O(|dq|^2 V'') -- e.g. 2e-6 of energy in the first step
    of the four-particle system.)

    If the invariants are symmetric under a group (KBS23b §6.3: rotations and translations), so is
    D pi_i(q^{n+1/2}), which gives the orthogonality condition (KBS23b eq 85a).
    """
    p0, p1 = pi(q0), pi(q1)
    dp = p1 - p0
    pm = 0.5 * (p0 + p1)
    dV = potentials(p1) - potentials(p0)
    slope_m = _diag_derivative(potentials, pm)
    s = dp * dp
    quotient = slope_m + _blend(dV - slope_m * dp, s, 1.0 + pm * pm) * dp
    Dpi = jax.jacfwd(pi)(0.5 * (q0 + q1))
    return Dpi.T @ quotient


#: Relative size, against the increment, of the part of an increment outside the symmetry
#: directions below which :func:`corrected` fades its directional correction out.
SYMMETRY_EPS = 1e-7


def gram_solve(Z: jax.Array, B: jax.Array) -> jax.Array:
    """(Z^T Z)^-1 B for the r generators in the columns of Z and B of shape (r, k), with one step
    of iterative refinement.

    The Gram matrix is factored with tau ~ 1e-14 tr Z^T Z added to its diagonal, which keeps the
    solve finite where the generators are dependent or vanish at the midpoint. Where they are
    independent but ill-conditioned -- rotations about the origin of a body far from it nearly
    repeat its translations (condition numbers of 1e6 for a beam flying 10 lengths away) -- that
    shift alone would leave Z^T u and the directionality condition of :func:`corrected` off by
    tau/lambda_min relative (1e-12 of the energy per step); one refinement step against the exact
    Z^T Z brings both back to round-off. r is small (at most 6 for the Euclidean group): an
    unrolled Cholesky factorization in plain array operations, which XLA fuses, instead of a
    LAPACK call per step.

    With S = Z^T Z + tau I the result is (S^-1 + tau S^-2) B exactly (in exact arithmetic):
    :func:`shifted_gram` gives tau and S^-1 for its derivative."""
    gram = Z.T @ Z
    tau, solve = _shifted_solve(gram)
    X = solve(B)
    return X + solve(B - gram @ X)


def shifted_gram(Z: jax.Array):
    """(tau, S^-1) of :func:`gram_solve`: its shift of the Gram matrix and the inverse of the
    shifted matrix S = Z^T Z + tau I (symmetric), for the derivative of the solve (:func:`symmetric_inverse`)."""
    gram = Z.T @ Z
    tau = _gram_shift(gram)
    return tau, symmetric_inverse(gram + tau * jnp.eye(gram.shape[0], dtype=gram.dtype))


def gram_inverse(Z: jax.Array):
    """(tau, (Z^T Z)^-1): :func:`gram_solve`'s shift and the inverse of the unshifted Gram matrix
    (:func:`symmetric_inverse`; not finite, or not positive, where the generators are dependent). Where
    tau tr((Z^T Z)^-1) is small, (Z^T Z)^-1 is the matrix S^-1 + tau S^-2 that :func:`gram_solve` applies,
    to a relative (tau tr((Z^T Z)^-1))^2 (the rest of its series in tau S^-1)."""
    gram = Z.T @ Z
    return _gram_shift(gram), symmetric_inverse(gram)


def symmetric_inverse(S):
    """The inverse of a small symmetric positive definite matrix S (r x r, unrolled).

    From a factorization without square roots, S = L D L^T with L unit lower triangular, and L's
    inverse: S^-1 = L^-T D^-1 L^-1, r divisions (the reciprocals of D) for the r^2 entries, where
    solving a Cholesky factorization for the columns of the identity divides twice per entry, and
    divisions are the slowest of these operations. Cholesky's elimination without pivoting (backward
    stable for a positive definite S); the result is symmetric."""
    r = S.shape[0]
    if r == 1:
        return 1.0 / S
    L, D, inv = {}, [None] * r, [None] * r
    for j in range(r):
        LD = [L[j, k] * D[k] for k in range(j)]  # row j of L D
        D[j] = _less(S[j, j], [(L[j, k], LD[k]) for k in range(j)])
        inv[j] = 1.0 / D[j]
        for i in range(j + 1, r):
            L[i, j] = _less(S[i, j], [(L[i, k], LD[k]) for k in range(j)]) * inv[j]
    N = {}  # L^-1 below its unit diagonal
    for j in range(r):
        for i in range(j + 1, r):
            N[i, j] = -_more(L[i, j], [(L[i, k], N[k, j]) for k in range(j + 1, i)])
    # E = D^-1 L^-1 (lower triangular); (S^-1)_ab = sum over k >= b of E_ka (L^-1)_kb for b >= a
    E = {(k, a): inv[k] if k == a else N[k, a] * inv[k] for a in range(r) for k in range(a, r)}
    rows = [[None] * r for _ in range(r)]
    for a in range(r):
        for b in range(a, r):
            rows[a][b] = rows[b][a] = _more(E[b, a], [(E[k, a], N[k, b]) for k in range(b + 1, r)])
    return jnp.stack([jnp.stack(row) for row in rows])


def _less(x, products):
    """x - sum of the products a b of the pairs (a, b), left to right."""
    for a, b in products:
        x = x - a * b
    return x


def _more(x, products):
    """x + sum of the products a b of the pairs (a, b), left to right."""
    for a, b in products:
        x = x + a * b
    return x


#: The shift tau = GRAM_SHIFT tr(Z^T Z) / r (+ 1e-200) that :func:`gram_solve` adds to the diagonal of
#: the Gram matrix of r generators.
GRAM_SHIFT = 1e-14


def _gram_shift(gram):
    """tau = GRAM_SHIFT tr(gram) / r (+ 1e-200) for the r x r Gram matrix ``gram``."""
    return GRAM_SHIFT * jnp.trace(gram) / gram.shape[0] + 1e-200


def _shifted_solve(gram):
    """(tau, B -> S^-1 B) for S = gram + tau I (:data:`GRAM_SHIFT`, :func:`gram_solve`)."""
    r = gram.shape[0]
    tau = _gram_shift(gram)
    shifted = gram + tau * jnp.eye(r, dtype=gram.dtype)
    if r == 1:
        return tau, lambda rhs: rhs / shifted[0, 0]
    L = [[None] * r for _ in range(r)]
    for j in range(r):
        diag = shifted[j, j] - sum(L[j][k] * L[j][k] for k in range(j))
        L[j][j] = jnp.sqrt(diag)
        for i in range(j + 1, r):
            L[i][j] = (shifted[i, j] - sum(L[i][k] * L[j][k] for k in range(j))) / L[j][j]

    def solve(rhs):
        y = [None] * r
        for i in range(r):
            y[i] = (rhs[i] - sum(L[i][k] * y[k] for k in range(i))) / L[i][i]
        x = [None] * r
        for i in reversed(range(r)):
            x[i] = (y[i] - sum(L[k][i] * x[k] for k in range(i + 1, r))) / L[i][i]
        return jnp.stack(x)

    return tau, solve


def outside(Z: jax.Array, dx):
    """u = dx - Z (Z^T Z)^-1 Z^T dx, the part of dx outside span Z, as :func:`corrected` computes it
    without targets (:func:`gram_solve`)."""
    return dx - Z @ coupling(gram_solve(Z, (Z.T @ dx)[:, None])[:, 0])


def corrected(a0, dx, df, xm, Z=None, targets=None, u=None):
    """A discrete gradient from an approximation a0 of the gradient at the midpoint xm:

        a = a0 + Z y + c u,   u = dx - Z (Z^T Z)^-1 Z^T dx   (the part of dx outside span Z),

    with c chosen so that a . dx = df (the directionality condition, KB23 eq 27; KBS23b eq 86) and,
    where ``targets`` is given, y so that Z^T a = ``targets`` (else y = 0, and Z^T a = Z^T a0). The
    columns of Z are the infinitesimal generators of a symmetry group at the midpoint,
    xi_k x^{n+1/2} (KBS23b eq 17, 85): for a function invariant under the group, a0 = its gradient at
    xm meets Z^T a0 = 0 already, and a meets the orthogonality conditions (KBS23b eq 85) exactly.
    Without Z (r = 0) this is Gonzalez's formula (KB23 eq 26) with a0 = Df(xm).

    c = num / |u|^2 with num = df - (a0 + Z y) . dx. For an invariant function num vanishes with u
    (two points whose difference lies along the generators are related by a group element), so
    c u = O(|dx|^2) stays a second-order perturbation of a0. Where u is tiny the quotient is faded
    out smoothly, as in :func:`gonzalez`, below |u| = SYMMETRY_EPS |dx| (and below the absolute
    DELTA of the module docstring): c = num |u|^2 / (|u|^4 + (SYMMETRY_EPS |dx|)^4 + delta^4).
    All operations are smooth, so the Newton tangent may differentiate through them.

    ``u``: :func:`outside` of Z and dx where the caller has it (without ``targets``): a caller that
    computes it first has its chain of square roots and divisions run beside the work on a0 and df.
    """
    if Z is not None and Z.shape[1]:
        if targets is None:
            u = outside(Z, dx) if u is None else u
        else:
            Y = coupling(gram_solve(Z, jnp.stack([targets - Z.T @ a0, Z.T @ dx], axis=1)))
            a0 = a0 + Z @ Y[:, 0]
            u = dx - Z @ Y[:, 1]
    else:
        u = dx
    s = u @ u
    dx2 = dx @ dx
    d4 = (DELTA**2 * (1.0 + xm @ xm)) ** 2 + (SYMMETRY_EPS**2 * dx2) ** 2
    num = df - a0 @ dx
    return a0 + coupling(num * s / (s * s + d4)) * u


def symmetric(f: Callable, x0, x1, generators: Callable | None = None):
    """A discrete gradient of a scalar f that is orthogonal to the symmetry generators at the
    midpoint (KBS23b eq 85) when f is invariant: :func:`corrected` with a0 = Df(x^{n+1/2}),
    df = f(x1) - f(x0) and Z = ``generators(x^{n+1/2})`` (a (n, r) array; None or r = 0 gives
    Gonzalez's discrete gradient, :func:`gonzalez`)."""
    xm = 0.5 * (x0 + x1)
    Z = None if generators is None else generators(xm)
    return corrected(jax.grad(f)(xm), x1 - x0, f(x1) - f(x0), xm, Z)


def symmetric_partitioned(f: Callable, x0, y0, x1, y1, Zx, Zy):
    """The partitioned discrete gradient (Dx, Dy) of a scalar f(x, y) (:func:`partitioned`; KB23
    eq 29) made orthogonal to the generators of a symmetry lifted to both arguments: with
    (Zx, Zy) the generators (xi_k x, xi_k y) at the midpoint as the columns of two (n, r) arrays,

        Zx^T Dx + Zy^T Dy = 0,

    the orthogonality condition of KBS23b eq 85 for f = L(q, v) invariant under
    (q, v) -> (exp(a xi) q, exp(a xi) v) (Zy = 0 for a translation), while the directionality
    condition f(x1, y1) - f(x0, y0) = Dx.(x1 - x0) + Dy.(y1 - y0) still holds. Dy is the partitioned
    one, unchanged (for L: the discrete fibre derivative, KB23 eq 28c); Dx is :func:`corrected` in x
    alone, with the targets Zx^T Dx = -Zy^T Dy and the increment of f less Dy.(y1 - y0). For an
    invariant f the partitioned gradient is orthogonal up to O(|dx|^2), so the correction is a
    second-order perturbation of it."""
    Dx, Dy = partitioned(f, x0, y0, x1, y1)
    df = f(x1, y1) - f(x0, y0) - Dy @ (y1 - y0)
    return corrected(Dx, x1 - x0, df, 0.5 * (x0 + x1), Zx, -(Zy.T @ Dy)), Dy


def potential_gradient(mech, q0, q1):
    """The discrete gradient of a system's potential (a :class:`~livens.mechanics.Mechanics`)
    used by the energy-momentum schemes: :func:`greenspan` when the System declares
    ``invariants=(pi, potentials)``, else :func:`gonzalez` of V."""
    if mech.invariants is not None:
        pi, potentials = mech.invariants
        return greenspan(pi, potentials, q0, q1)
    return gonzalez(mech.V, q0, q1)


__all__ = [
    "gonzalez",
    "gonzalez_jacobian",
    "partitioned",
    "partitioned_jacobian",
    "greenspan",
    "midpoint",
    "potential_gradient",
    "corrected",
    "symmetric",
    "symmetric_partitioned",
    "DELTA",
    "SYMMETRY_EPS",
    "gram_solve",
    "shifted_gram",
    "gram_inverse",
    "symmetric_inverse",
    "outside",
]
