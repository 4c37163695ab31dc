"""Small dense linear algebra for the Newton steps (speed of small systems).

On a CPU, a Newton step of a small system costs what its operations cost to launch, not their
arithmetic: a LAPACK call has a fixed cost even for a 2 x 2 matrix. ``solver(A)`` therefore solves
systems up to :attr:`livens.engine.SizePolicy.unroll_unknowns` unknowns by unrolled Gaussian elimination with partial pivoting (a
handful of fused elementwise operations) and larger ones with one LU factorization
(``lax.linalg.lu``) reused for every right-hand side. Both are exact solves (no approximation):
they change results only at round-off level.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

from ..engine import size_policy, tracing_native


def small_solve(A, B):
    """Solve A X = B for an n x n matrix A with few unknowns (:attr:`livens.engine.SizePolicy.unroll_unknowns`),
    unrolled (partial pivoting)."""
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
    if n <= size_policy().unroll_unknowns:
        return lambda B: small_solve(A, B)
    lu, _, perm = lax.linalg.lu(A)

    def solve(B):
        y = jsl.solve_triangular(lu, B[perm], lower=True, unit_diagonal=True)
        return jsl.solve_triangular(lu, y, lower=False)

    return solve


_POLICY = threading.local()  # each thread traces its own programs


def _batched() -> bool:
    return getattr(_POLICY, "batched", 0) > 0


@contextlib.contextmanager
def batched_systems():
    """While a step is traced inside this context (the step loop of an ensemble, which ``vmap``
    maps over its members: :func:`livens.timestep.make_loop` with ``batched``), :func:`block_solve`
    factorizes the whole system instead of eliminating blocks: batched, the block form can hang XLA's
    CPU runtime (large ensembles of the double four-bar, with one BLAS thread too)."""
    _POLICY.batched = getattr(_POLICY, "batched", 0) + 1
    try:
        yield
    finally:
        _POLICY.batched -= 1


def block_solve(A11, A12, A21, A22, b1, b2, after=None):
    """Solve [[A11, A12], [A21, A22]] [x1; x2] = [b1; b2] by block elimination on A11 (square):
    x2 from the Schur complement A22 - A21 A11^-1 A12, then x1. Exact (two LU factorizations of
    the blocks' size instead of one of twice the size: fewer operations from about 16 unknowns
    per block on), for systems whose block A11 is regular and well conditioned.

    ``after``: an array the factorization of A11 must wait for (so that XLA does not run two
    LAPACK factorizations at the same time). Inside :func:`batched_systems` (the loop of an
    ensemble's members) the whole system is solved with one LU instead.
    """
    if _batched():
        x = solver(jnp.block([[A11, A12], [A21, A22]]))(jnp.concatenate([b1, b2]))
        return x[: A11.shape[0]], x[A11.shape[0] :]
    if after is not None:
        A11, _ = lax.optimization_barrier((A11, after))
    F = solver(A11)
    X = F(jnp.concatenate([A12, b1[:, None]], axis=1))
    X12, x1 = X[:, :-1], X[:, -1]
    x2 = solver(A22 - A21 @ X12)(b2 - A21 @ x1)
    return x1 - X12 @ x2, x2


def symmetric_solver(A) -> Callable:
    """:func:`solver` for a symmetric A expected to be positive definite (a mass matrix plus a small
    symmetric term), with a form for native kernels: where :func:`livens.engine.tracing_native` (a
    native kernel will run the trace) and A has at most :attr:`SizePolicy.symmetric_unroll_unknowns
    <livens.engine.SizePolicy>` unknowns, Gaussian elimination without pivoting, unrolled entry by entry, so that the C compiler
    drops the products with entries that are zero by the structure of A (a pivot search and row
    swaps make every entry depend on every other). It is checked by its pivots: a symmetric matrix
    whose unpivoted elimination has only positive pivots is positive definite, where the
    elimination is backward stable (it is Cholesky's); otherwise (A indefinite, singular or not
    finite) a ``lax.cond`` solves with :func:`solver` (LU with partial pivoting). Where partial
    pivoting would swap no rows (a diagonal that dominates its column at every step, as in a mass
    matrix plus h times a small term) both do the same operations in the same order: the same bits.
    Everywhere else (XLA, whose program of scalar operations and a ``cond`` would run several times
    more slowly; inside :func:`batched_systems`): :func:`solver` itself. A lane kernel takes the
    native form too (its ``cond`` computes the fallback only where some lane needs it)."""
    n = A.shape[0]
    if n == 0 or n > size_policy().symmetric_unroll_unknowns or _batched() or not tracing_native():
        return solver(A)
    U = [[A[i, j] for j in range(n)] for i in range(n)]
    L = {}
    for k in range(n):  # the order of operations of the pivoted LU rule where it swaps nothing
        inv = 1.0 / U[k][k]
        for i in range(k + 1, n):
            L[i, k] = U[i][k] * inv
            for j in range(k + 1, n):
                U[i][j] = U[i][j] - L[i, k] * U[k][j]
    ok = jnp.all(jnp.stack([U[k][k] for k in range(n)]) > 0)

    def unrolled(B):
        Y = [B[i] for i in range(n)]
        for i in range(n):
            for k in range(i):
                Y[i] = Y[i] - L[i, k] * Y[k]
        X = [None] * n
        for i in range(n - 1, -1, -1):
            acc = Y[i]
            for j in range(i + 1, n):
                acc = acc - U[i][j] * X[j]
            X[i] = acc / U[i][i]
        return jnp.stack(X)

    return lambda B: lax.cond(ok, unrolled, lambda B: solver(A)(B), B)


def solve(A, B):
    """A^-1 B (see :func:`solver`)."""
    return solver(A)(B)
