"""Small dense linear algebra for the Newton steps (issue 7: speed).

On a CPU, a Newton step of a small system costs what its operations cost to launch, not their
arithmetic: a LAPACK call costs about 1 us even for a 2 x 2 matrix. ``solver(A)`` therefore solves
systems up to :data:`UNROLL` unknowns by unrolled Gaussian elimination with partial pivoting (a
handful of fused elementwise operations) and larger ones with one LU factorization
(``lax.linalg.lu``) reused for every right-hand side. Both are exact solves (no approximation):
they change results only at round-off level.
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

UNROLL = 4


def small_solve(A, B):
    """Solve A X = B for an n x n matrix A with n <= :data:`UNROLL`, unrolled (partial pivoting)."""
    n = A.shape[0]
    vec = B.ndim == 1
    if vec:
        B = B[:, None]
    rows = [jnp.concatenate([A[i], B[i]]) for i in range(n)]
    for k in range(n):
        for i in range(k + 1, n):  # bring the largest |a_ik| (i >= k) to row k
            swap = jnp.abs(rows[i][k]) > jnp.abs(rows[k][k])
            rk, ri = rows[k], rows[i]
            rows[k] = jnp.where(swap, ri, rk)
            rows[i] = jnp.where(swap, rk, ri)
        for i in range(k + 1, n):
            rows[i] = rows[i] - (rows[i][k] / rows[k][k]) * rows[k]
    X = [None] * n
    for k in range(n - 1, -1, -1):
        acc = rows[k][n:]
        for j in range(k + 1, n):
            acc = acc - rows[k][j] * X[j]
        X[k] = acc / rows[k][k]
    X = jnp.stack(X)
    return X[:, 0] if vec else X


def solver(A) -> Callable:
    """A function B -> A^-1 B; A is factorized once (LU with partial pivoting) for all calls."""
    n = A.shape[0]
    if n == 0:
        return lambda B: B
    if n <= UNROLL:
        return lambda B: small_solve(A, B)
    lu, _, perm = lax.linalg.lu(A)

    def solve(B):
        y = jsl.solve_triangular(lu, B[perm], lower=True, unit_diagonal=True)
        return jsl.solve_triangular(lu, y, lower=False)

    return solve


def solve(A, B):
    """A^-1 B (see :func:`solver`)."""
    return solver(A)(B)
