"""Native forms that cost less and compute the same: the unpivoted symmetric solve
(livens.solvers.dense.symmetric_solver) and the engine's flag that chooses it
(livens.engine.tracing_native), on only while a native kernel (of one member or in lanes) is traced; the
unpivoted elimination solves like LU with partial pivoting (the same bits where pivoting swaps
nothing) and falls back to it where a pivot is not positive; XLA's programs are unchanged. And
rules of the C translation that keep every bit: the LU unrolled by columns, max/min in lanes, the
rows of a matrix product in registers."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import CompiledCache, EngineOptions, loop_size, native, tracing_native
from livens.engine.native.runner import ChunkRunner
from livens.engine.native.target import native_trace
from livens.solvers import batched_systems
from livens.solvers import dense as _linalg

_run = importlib.import_module("livens.driver.run")  # the module (livens.driver.run is also a function's name)

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _spd(n, rng, off=0.1, density=0.3):
    """A sparse symmetric positive definite matrix: a positive diagonal plus a small symmetric term
    (the form of a mass matrix plus h times a Hessian)."""
    S = rng.standard_normal((n, n)) * (rng.random((n, n)) < density)
    return np.diag(rng.uniform(1.0, 4000.0, n)) + off * (S + S.T)


def _kernels(n, k):
    """Native kernels of B -> A^-1 B by symmetric_solver (traced as for a kernel of one member) and
    by solver (LU with partial pivoting), for an n x n A and k right-hand sides (k = 0: a vector)."""
    A, B = jnp.zeros((n, n)), jnp.zeros((n, k) if k else (n,))
    with native_trace():
        sym = native.compile_function(lambda A, B: _linalg.symmetric_solver(A)(B), A, B)
    piv = native.compile_function(lambda A, B: _linalg.solver(A)(B), A, B)
    return sym, piv


def test_the_flag_is_on_only_while_a_native_kernel_is_traced():
    seen = []

    def loop(x):
        seen.append(tracing_native())
        return x * 2.0

    x = jnp.arange(3.0)
    assert not tracing_native()
    runner = ChunkRunner(loop, jax.jit(loop), EngineOptions(backend="native"), loop_size(3, 3, 0))
    np.testing.assert_array_equal(runner(x), 2.0 * x)
    assert runner.backend == "native" and seen == [True]
    np.testing.assert_array_equal(runner.xla(x), 2.0 * x)  # XLA traces the loop itself, not the native trace
    assert seen == [True, False]
    mine = lambda x: loop(x)  # noqa: E731 - a function JAX has not traced yet
    lanes = ChunkRunner(mine, jax.jit(mine), EngineOptions(backend="auto"), loop_size(3, 3, 0), lanes=2)
    lanes.kernel(x)
    assert len(seen) == 3 and seen[-1] is True  # a lane kernel runs the single kernel's program
    jax.make_jaxpr(lambda x: loop(x) + 1.0)(x)
    assert seen[-1] is False and not tracing_native()
    with native_trace(False):
        assert not tracing_native()


@pytest.mark.parametrize("n, k", [(1, 0), (5, 3), (12, 9), (12, 0), (16, 4)])
def test_native_unpivoted_solve_is_the_pivoted_one(n, k):
    """Random sparse SPD matrices with a dominant diagonal: the same bits as the pivoted LU kernel
    (which swaps no rows there) and the solution of numpy's solve to round-off."""
    sym, piv = _kernels(n, k)
    rng = np.random.default_rng(n + k)
    for _ in range(3):
        A = _spd(n, rng)
        B = rng.standard_normal((n, k) if k else (n,))
        x = np.asarray(sym(A, B))
        np.testing.assert_array_equal(x, np.asarray(piv(A, B)))
        ref = np.linalg.solve(A, B)
        np.testing.assert_allclose(x, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
        np.testing.assert_allclose(x, np.asarray(jnp.linalg.solve(A, B)), rtol=0, atol=1e-13 * np.abs(ref).max())


def test_native_unpivoted_solve_of_a_structured_matrix():
    """The structure of the heavy top's S = M + h Hg (a diagonal block, then a 9 x 9 block of 3 x 3
    multiples of the identity) and an SPD matrix whose diagonal does not dominate (partial pivoting
    would swap rows: then the unpivoted elimination agrees to round-off, not bit for bit)."""
    sym, piv = _kernels(12, 9)
    rng = np.random.default_rng(5)
    C = rng.uniform(-1.0, 1.0, (3, 3))
    A = np.zeros((12, 12))
    A[:3, :3] = 0.7 * np.eye(3)
    A[3:, 3:] = np.kron(np.diag([2.6e-4, 2.6e-4, 4.1e-4]) + 1e-9 * (C + C.T), np.eye(3))
    B = rng.standard_normal((12, 9))
    np.testing.assert_array_equal(np.asarray(sym(A, B)), np.asarray(piv(A, B)))
    np.testing.assert_allclose(A @ np.asarray(sym(A, B)), B, rtol=0, atol=1e-12)
    R = rng.standard_normal((12, 12))
    A = R @ R.T + 0.1 * np.eye(12)  # SPD, pivoting swaps rows
    x = np.asarray(sym(A, B))
    ref = np.linalg.solve(A, B)
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-12 * np.linalg.cond(A) * np.abs(ref).max())


@pytest.mark.parametrize(
    "A",
    [
        [[0.0, 1.0, 0.0], [1.0, 0.0, 2.0], [0.0, 2.0, -3.0]],  # a zero leading pivot: needs pivoting
        [[1.0, 2.0, 0.0], [2.0, 1.0, 1.0], [0.0, 1.0, 5.0]],  # indefinite: a negative second pivot
        [[1e-20, 1.0], [1.0, 1.0]],  # a tiny positive first pivot, then a negative one (-1e20)
    ],
)
def test_native_unpivoted_solve_falls_back_to_pivoting_where_a_pivot_is_not_positive(A):
    A = np.asarray(A)
    n = A.shape[0]
    sym, piv = _kernels(n, 0)
    b = np.linspace(1.0, -2.0, n)
    x = np.asarray(sym(A, b))
    np.testing.assert_array_equal(x, np.asarray(piv(A, b)))
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-13)


def test_outside_native_traces_the_symmetric_solve_is_the_pivoted_solver():
    """XLA's programs (and those of an ensemble's vmapped members) are those of solver itself."""
    A, B = jnp.asarray(_spd(12, np.random.default_rng(1))), jnp.ones((12, 9))
    ref = str(jax.make_jaxpr(lambda A, B: _linalg.solver(A)(B))(A, B))
    assert str(jax.make_jaxpr(lambda A, B: _linalg.symmetric_solver(A)(B))(A, B)) == ref
    with native_trace():
        assert str(jax.make_jaxpr(lambda A, B: _linalg.symmetric_solver(A)(B))(A, B)) != ref
        with batched_systems():
            assert str(jax.make_jaxpr(lambda A, B: _linalg.symmetric_solver(A)(B))(A, B)) == ref


def test_heavy_top_native_run_takes_the_same_steps_as_with_pivoted_lu(monkeypatch):
    """VI-S's S = M + h Hg solved without pivoting in the native kernel: the same bits as the
    pivoted LU over 2000 steps of the heavy top (KBS23b §6.2)."""
    problem, h, steps = lv.examples.load("heavy-top"), 0.002, 2000
    calls = []
    real = _linalg.tracing_native

    def spy():
        calls.append(real())
        return calls[-1]

    monkeypatch.setattr(_run, "_LOOPS", CompiledCache(32))
    monkeypatch.setattr(_linalg, "tracing_native", spy)
    sym = lv.simulate(problem, "VI-S", h=h, t_end=steps * h, progress=False, backend="native")
    assert True in calls
    monkeypatch.setattr(_run, "_LOOPS", CompiledCache(32))
    monkeypatch.setattr(_linalg, "tracing_native", lambda: False)
    piv = lv.simulate(problem, "VI-S", h=h, t_end=steps * h, progress=False, backend="native")
    assert sym.meta["backend"] == piv.meta["backend"] == "native"
    np.testing.assert_array_equal(sym.q, piv.q)
    np.testing.assert_array_equal(sym.p, piv.p)


@pytest.mark.parametrize("shape", [(18, 18), (3, 12, 12), (7, 5), (5, 7)])
def test_native_lu_unrolled_by_columns_gives_the_same_bits(monkeypatch, shape):
    """The native LU with its loop over the columns unrolled (AlgebraRules.LU_UNROLL) against the
    rolled loop, on matrices where partial pivoting swaps rows: the same factors, pivots and
    permutation, bit for bit; and XLA's (LAPACK's) pivots and factors to round-off."""
    from jax import lax

    from livens.engine.native.algebra_rules import AlgebraRules

    a = np.random.default_rng(sum(shape)).standard_normal(shape)
    f = lambda a: lax.linalg.lu(a)  # noqa: E731
    unrolled = native.compile_function(f, a)
    square = shape[-1] == shape[-2]  # written out column by column (AlgebraRules._lu_unrolled)
    assert ("#pragma GCC unroll" in unrolled.source) != square
    assert ("lu_v" in unrolled.source) == square
    monkeypatch.setattr(AlgebraRules, "LU_UNROLL", 0)
    rolled = native.compile_function(f, a)
    assert "#pragma GCC unroll" not in rolled.source and "lu_v" not in rolled.source
    got, ref, xla = unrolled(a), rolled(a), jax.jit(f)(a)
    for g, r, x in zip(got, ref, xla):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
        np.testing.assert_allclose(np.asarray(g), np.asarray(x), rtol=0, atol=1e-12)
    assert np.any(np.asarray(got[1]) != np.arange(min(shape[-2:])))  # rows were swapped


def _special_vectors(n, rng):
    """Vectors of n floats with ties of +0 and -0 at the extremum, NaNs of either sign, infinities."""
    base = rng.standard_normal(n)
    out = [base, -np.abs(base), np.abs(base)]
    zeros = -np.abs(base)
    zeros[rng.choice(n, 3, replace=False)] = [0.0, -0.0, 0.0]
    out += [zeros, -zeros]
    signed = np.zeros(n)
    signed[::3] = -0.0
    out += [signed, -signed]
    for k in (0, n // 2, n - 1):
        v = base.copy()
        v[k] = np.nan
        v[(k + 5) % n] = -np.nan
        out.append(v)
    inf = base.copy()
    inf[n // 3] = np.inf
    inf[n // 4] = -np.inf
    out += [inf, np.full(n, -np.inf), np.full(n, np.inf)]
    return out


@pytest.mark.parametrize("shape", [(16,), (54,), (17,), (7, 9), (2, 3, 8)])
@pytest.mark.parametrize("reduce", [jnp.max, jnp.min])
def test_native_max_and_min_in_lanes_give_the_bits_of_one_accumulator(monkeypatch, shape, reduce):
    """A whole max/min taken in 8 lanes (AlgebraRules.LANE_REDUCE) against the loop of one
    accumulator, bit for bit (NaN's sign, the first of +0 and -0 at a zero extremum), and XLA's
    value (NaN where XLA gives NaN)."""
    from livens.engine.native.algebra_rules import AlgebraRules

    x0 = np.zeros(shape)
    f = lambda x: reduce(x)  # noqa: E731
    lanes = native.compile_function(f, x0)
    monkeypatch.setattr(AlgebraRules, "LANE_REDUCE", 1 << 30)
    one = native.compile_function(f, x0)
    assert lanes.source != one.source
    n = int(np.prod(shape))
    for v in _special_vectors(n, np.random.default_rng(n)):
        v = v.reshape(shape)
        got, ref = np.asarray(lanes(v)), np.asarray(one(v))
        assert got.tobytes() == ref.tobytes(), (v, got, ref)
        np.testing.assert_array_equal(got, np.asarray(jax.jit(f)(v)))


@pytest.mark.parametrize(
    "f, shapes, registers",
    [
        (lambda a, b: a.T @ b, [(12, 9), (12, 19)], True),  # the heavy top's Z^T [Y | K^T]
        (lambda a, b: a @ b, [(6, 5), (5, 8)], True),
        (lambda a, b: a @ b, [(3, 7), (7, 32)], True),
        (lambda a, b: a @ b, [(4, 3), (3, 33)], False),  # wider than REGISTER_ROW: the row updates
        (lambda a, b: a @ b.T, [(5, 6), (11, 6)], False),  # the right operand's rows not contiguous
        (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [(3, 5, 6), (3, 6, 10)], True),
        (lambda a, b: a @ b[2:, 1:12], [(4, 6), (8, 13)], True),  # a view: rows of a larger array
    ],
)
def test_native_matrix_product_rows_in_registers_give_the_same_bits(monkeypatch, f, shapes, registers):
    """Rows of a matrix product summed in vector registers (AlgebraRules.REGISTER_ROW) against the
    row updates in memory, bit for bit (signed zeros and a NaN included), and XLA's product to
    round-off."""
    from livens.engine.native.algebra_rules import AlgebraRules

    rng = np.random.default_rng(len(shapes[1]) + shapes[1][-1])
    a, b = (rng.standard_normal(s) for s in shapes)
    a.flat[::4] = -0.0
    b.flat[1::5] = 0.0
    fast = native.compile_function(f, a, b)
    monkeypatch.setattr(AlgebraRules, "REGISTER_ROW", 0)
    slow = native.compile_function(f, a, b)
    assert ("vector_size" in fast.source) == registers == (fast.source != slow.source)
    for x, y in ((a, b), (-a, b), (a * 0.0, -b)):
        got, ref = np.asarray(fast(x, y)), np.asarray(slow(x, y))
        assert got.tobytes() == ref.tobytes()
        np.testing.assert_allclose(got, np.asarray(jax.jit(f)(x, y)), rtol=0, atol=1e-13 * max(1.0, np.abs(ref).max()))
    b[0, 0] = np.nan
    np.testing.assert_array_equal(np.asarray(fast(a, b)), np.asarray(slow(a, b)))
