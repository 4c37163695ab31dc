"""Rules of the C translation that write small dense algebra out element by element, and the reuse
of an equation the program repeats, each against the general form it replaces, bit for bit (NaN,
infinities and signed zeros included where the rule keeps them), and against XLA to round-off:
the LU of a small square matrix written out column by column (AlgebraRules._lu_unrolled), the
triangular solve of one right-hand side written out (AlgebraRules._triangular_unrolled), the rows of
a matrix product without the terms of known zeros (AlgebraRules._register_rows), and an equation
written once where its operands are the same arrays (Translator.eqn), never out of the block that
computed it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from livens.engine import native
from livens.engine.native.algebra_rules import AlgebraRules
from livens.engine.native.codegen import Translator

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _bits(got, ref):
    for g, r in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        g, r = np.asarray(g), np.asarray(r)
        assert g.dtype == r.dtype and g.shape == r.shape
        assert g.tobytes() == r.tobytes(), (g, r)


def _close(got, want, tol=1e-11):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        np.testing.assert_allclose(g, w, rtol=0, atol=tol * scale)


def _lu_matrices(n, rng):
    """Matrices on which partial pivoting swaps rows, takes the first of tied pivots, meets a zero
    pivot (a zero column, a singular matrix) and NaN or infinite entries."""
    out = [rng.standard_normal((n, n)), np.roll(np.eye(n), 1, axis=0) + 0.1 * rng.standard_normal((n, n))]
    tied = rng.standard_normal((n, n))
    tied[:, 0] = np.where(rng.random(n) < 0.5, 2.0, -2.0)  # every |a_i0| the same
    out.append(tied)
    if n > 2:
        singular = rng.standard_normal((n, n))
        singular[:, 1] = 0.0
        singular[-1] = singular[0]
        out.append(singular)
    special = rng.standard_normal((n, n))
    special[n // 2, 0] = np.nan
    special[0, n - 1] = np.inf
    out.append(special)
    out.append(np.zeros((n, n)))
    return out


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 9, 12, 17, 18, 24, 32, 33])
def test_lu_written_out_is_the_loop_bit_for_bit(monkeypatch, n):
    f = lambda a: lax.linalg.lu(a)  # noqa: E731
    a0 = np.zeros((n, n))
    written = native.compile_function(f, a0)
    assert ("lu_v" in written.source) == (n <= AlgebraRules.LU_UNROLL)
    monkeypatch.setattr(AlgebraRules, "LU_UNROLL", 0)
    loop = native.compile_function(f, a0)
    assert "lu_v" not in loop.source
    rng = np.random.default_rng(n)
    for k, a in enumerate(_lu_matrices(n, rng)):
        got = written(a)
        _bits(got, loop(a))
        if k < 3:  # regular: LAPACK's factors and pivots to round-off
            want = jax.jit(f)(a)
            _close(got, want)
            np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


def test_lu_written_out_in_a_batch_and_a_solve(monkeypatch):
    """A batch of LU factorizations and the solve that uses one (livens.solvers.dense.solver)."""
    from livens.solvers.dense import solver

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 12, 12)), rng.standard_normal((3, 12))
    f = lambda a, b: jax.vmap(lambda m, v: solver(m)(v))(a, b)  # noqa: E731
    written = native.compile_function(f, a, b)
    monkeypatch.setattr(AlgebraRules, "LU_UNROLL", 0)
    monkeypatch.setattr(AlgebraRules, "TRIANGULAR_UNROLL", 0)
    loop = native.compile_function(f, a, b)
    _bits(written(a, b), loop(a, b))
    _close(written(a, b), jax.jit(f)(a, b))


def _triangular_cases():
    cases = []
    for left in (True, False):
        for lower in (True, False):
            for trans in (False, True):
                for unit in (False, True):
                    cases.append((left, lower, trans, unit))
    return cases


@pytest.mark.parametrize("left, lower, trans, unit", _triangular_cases())
@pytest.mark.parametrize("m", [1, 2, 5, 18, 33])
def test_triangular_solve_of_one_right_hand_side_written_out(monkeypatch, m, left, lower, trans, unit):
    rng = np.random.default_rng(m + 2 * left + 4 * lower + 8 * trans + 16 * unit)
    a = np.tril(rng.standard_normal((m, m))) if lower else np.triu(rng.standard_normal((m, m)))
    a[np.diag_indices(m)] = rng.uniform(1.0, 3.0, m) * np.where(rng.random(m) < 0.5, 1.0, -1.0)
    b = rng.standard_normal((m, 1) if left else (1, m))

    def f(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit)

    written = native.compile_function(f, a, b)
    most = AlgebraRules.TRIANGULAR_UNROLL
    monkeypatch.setattr(AlgebraRules, "TRIANGULAR_UNROLL", 0)
    loop = native.compile_function(f, a, b)
    assert (written.source != loop.source) == (m <= most)
    for bb in (b, -b, b * 0.0, np.where(rng.random(b.shape) < 0.3, np.nan, b), b * np.inf):
        _bits(written(a, bb), loop(a, bb))
    _close(written(a, b), jax.jit(f)(a, b), tol=1e-10)


def test_triangular_solves_of_a_vector_in_a_batch(monkeypatch):
    rng = np.random.default_rng(11)
    a = np.triu(rng.standard_normal((2, 9, 9))) + 3 * np.eye(9)
    b = rng.standard_normal((2, 9))
    f = lambda a, b: jax.vmap(lambda m, v: jax.scipy.linalg.solve_triangular(m, v, trans=1))(a, b)  # noqa: E731
    written = native.compile_function(f, a, b)
    monkeypatch.setattr(AlgebraRules, "TRIANGULAR_UNROLL", 0)
    _bits(written(a, b), native.compile_function(f, a, b)(a, b))
    _close(written(a, b), jax.jit(f)(a, b))


def _with_zeros(x):
    """The heavy top's pattern: a right operand whose columns and rows are partly known zeros."""
    z = jnp.zeros_like(x)
    y = jnp.where(jnp.arange(x.shape[1])[None, :] % 3 == 1, z, x)  # not known: where of runtime values
    return jnp.concatenate([x[:, :6], jnp.zeros((x.shape[0], 2)), y[:, :8], jnp.zeros((x.shape[0], 3))], axis=1)


@pytest.mark.parametrize(
    "f",
    [
        lambda a, x: a.T @ _with_zeros(x),
        lambda a, x: a.T @ jnp.concatenate([x[:, :6], jnp.zeros((12, 2)), x[:, 6:8]], axis=1),
        lambda a, x: (
            a.T
            @ jnp.stack(
                [x[:, 0], jnp.zeros(12), x[:, 1], x[:, 2], x[:, 3], jnp.zeros(12), x[:, 4], x[:, 5], x[:, 6]], 1
            )
        ),
    ],
)
def test_product_rows_without_the_terms_of_known_zeros(monkeypatch, f):
    rng = np.random.default_rng(5)
    a, x = rng.standard_normal((12, 9)), rng.standard_normal((12, 10))
    a.flat[::4] = -0.0
    x.flat[1::5] = 0.0
    fast = native.compile_function(f, a, x)
    monkeypatch.setattr(AlgebraRules, "SKIP_ZERO_TERMS", 0)
    slow = native.compile_function(f, a, x)
    assert "vector_size" in fast.source and fast.source != slow.source
    for aa, xx in ((a, x), (-a, x), (a * 0.0, -x), (a, x * 0.0)):
        _bits(fast(aa, xx), slow(aa, xx))
        _close(fast(aa, xx), jax.jit(f)(aa, xx), tol=1e-13)


def test_an_equation_repeated_is_written_once(monkeypatch):
    def f(x, y):
        return jnp.sin(x * y) + jnp.cos(x) * jnp.sin(x * y) + jnp.max(jnp.abs(x * y))

    x, y = np.linspace(-1.0, 2.0, 20), np.linspace(0.5, 3.0, 20)
    once = native.compile_function(f, x, y)
    monkeypatch.setattr(Translator, "REUSE", False)
    twice = native.compile_function(f, x, y)
    assert once.source.count("sin(") < twice.source.count("sin(")
    _bits(once(x, y), twice(x, y))
    _close(once(x, y), jax.jit(f)(x, y), tol=1e-15)


def test_a_newton_loop_body_reads_the_norm_its_condition_took(monkeypatch):
    """A while loop whose condition and body take the same norm of the carried residual: written
    once, the condition's, read by the body (the loop's results unchanged)."""

    def f(x0, c):
        def res(x):
            return x * x * x - c

        def cond(s):
            x, r, k = s
            return (jnp.max(jnp.abs(r)) > 1e-14) & (k < 50)

        def body(s):
            x, r, k = s
            before = jnp.max(jnp.abs(r))
            x = x - r / (3 * x * x)
            r = res(x)
            return x, jnp.where(jnp.max(jnp.abs(r)) < before, r, r * 1.0), k + 1

        return lax.while_loop(cond, body, (x0, res(x0), 0))

    x0, c = np.full(24, 1.5), np.linspace(1.0, 3.0, 24)
    once = native.compile_function(f, x0, c)
    monkeypatch.setattr(Translator, "REUSE", False)
    twice = native.compile_function(f, x0, c)
    assert once.source.count("-INFINITY") < twice.source.count("-INFINITY")
    _bits(once(x0, c), twice(x0, c))
    _close(once(x0, c), jax.jit(f)(x0, c), tol=1e-14)


def test_an_equation_of_a_branch_is_not_read_outside_it():
    """The same equation inside one branch of a cond and after it: the branch's value is not in
    scope after the cond (and is not computed where the other branch runs)."""

    def f(x, p):
        inside = lax.cond(p > 0, lambda x: jnp.sin(x) * 2.0, lambda x: jnp.cos(x), x)
        return inside + jnp.sin(x), jnp.exp(x) + lax.cond(p > 1, lambda x: jnp.exp(x), lambda x: -x, x)

    x = np.linspace(-1.0, 1.0, 7)
    k = native.compile_function(f, x, np.float64(1.0))
    for p in (-1.0, 1.0, 2.0):
        _close(k(x, np.float64(p)), jax.jit(f)(x, np.float64(p)), tol=1e-15)
