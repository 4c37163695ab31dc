"""Folds of the native translator that compile no XLA program: the LU factorization of a known
matrix and a triangular solve by JAX's own LAPACK and BLAS routines, a linear solve
(``custom_linear_solve``) of known operands, the QR factorization of an empty matrix, and a
scatter-add of known values whose every target sums at most one element not zero
(:mod:`livens.engine.native.folding`). Each gives, bit for bit, what JAX computes."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from _compiles import backend_compiles

from livens.engine import native
from livens.engine.jaxprs import equations
from livens.engine.native.codegen import translate
from livens.engine.native.folding import _np_exact, _np_lapack


def _eqn(fn, *args, name):
    """The equation of primitive ``name`` in ``fn``'s jaxpr."""
    return next(e for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns if e.primitive.name == name)


def _by_jax(eqn, vals):
    with jax.ensure_compile_time_eval():
        out = eqn.primitive.bind(*vals, **eqn.params)
    return [np.asarray(o) for o in (out if eqn.primitive.multiple_results else [out])]


def _same_bits(ours, ref):
    assert ours is not None
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        a = np.asarray(a)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        if np.issubdtype(b.dtype, np.floating):
            np.testing.assert_array_equal(np.signbit(a), np.signbit(b))


RNG = np.random.default_rng(11)


def _matrices():
    out = []
    for shape in [(2, 2), (6, 6), (12, 12), (3, 5), (5, 3), (4, 7, 7), (2, 3, 4, 4)]:
        for dtype in (np.float64, np.float32):
            a = RNG.standard_normal(shape).astype(dtype)
            out.append((f"{shape}-{np.dtype(dtype).name}", a))
    sparse = RNG.standard_normal((12, 12))
    sparse[RNG.random((12, 12)) < 0.7] = 0.0
    out.append(("mostly zeros", sparse + np.diag(np.full(12, 1e-3))))
    singular = RNG.standard_normal((6, 6))
    singular[:, 2] = 0.0
    out.append(("singular", singular))
    scaled = RNG.standard_normal((9, 9)) * 10.0 ** RNG.integers(-8, 8, (9, 9))
    out.append(("badly scaled", scaled))
    return out


@pytest.mark.parametrize("case", _matrices(), ids=lambda c: c[0])
def test_the_lu_of_a_known_matrix_is_jaxs_bit_for_bit(case):
    """The factors, pivots and permutation of the fold are JAX's own (its LAPACK routine, pivots
    to a permutation by the same swaps)."""
    _, a = case
    eqn = _eqn(jax.lax.linalg.lu, a, name="lu")
    _same_bits(_np_lapack("lu", [a], eqn.params), _by_jax(eqn, [a]))


TRIANGULAR = list(itertools.product([True, False], repeat=4))


@pytest.mark.parametrize("flags", TRIANGULAR, ids=lambda f: "left%d-lower%d-trans%d-unit%d" % f)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_triangular_solve_of_known_matrices_is_jaxs_bit_for_bit(flags, dtype):
    """Each side, triangle, transposition and diagonal, batched too, as JAX's BLAS call computes it."""
    left, lower, trans, unit = flags
    for shape in [(5, 7), (2, 5, 3)]:
        m = shape[-2] if left else shape[-1]
        a = (RNG.standard_normal(shape[:-2] + (m, m)) + 3.0 * np.eye(m)).astype(dtype)
        b = RNG.standard_normal(shape).astype(dtype)
        eqn = _eqn(
            lambda a, b: jax.lax.linalg.triangular_solve(
                a, b, left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit
            ),
            a,
            b,
            name="triangular_solve",
        )
        _same_bits(_np_lapack("triangular_solve", [a, b], eqn.params), _by_jax(eqn, [a, b]))


def test_a_linear_solve_of_known_operands_is_jaxs_bit_for_bit():
    """``custom_linear_solve`` (an LU solve of several right-hand sides, as jax.scipy writes it):
    its solve evaluated equation by equation gives JAX's bits."""
    K = RNG.standard_normal((6, 6)) + 2.0 * np.eye(6)
    B = RNG.standard_normal((6, 4))

    def f(k, b):
        lu, piv, _ = jax.lax.linalg.lu(k)
        perm = jax.lax.linalg.lu_pivots_to_permutation(piv, 6)
        return jax.lax.custom_linear_solve(
            lambda x: k @ x, b, lambda _, r: jax.scipy.linalg.lu_solve((lu, piv), r), symmetric=False
        ), perm

    closed = jax.make_jaxpr(f)(K, B)
    env = {}
    for v, x in zip(closed.jaxpr.invars, (K, B)):
        env[v] = x
    for eqn in closed.jaxpr.eqns:  # the known operands of the solve, computed by JAX
        vals = [v.val if isinstance(v, jax.extend.core.Literal) else env[v] for v in eqn.invars]
        if eqn.primitive.name == "custom_linear_solve":
            _same_bits(_np_lapack("custom_linear_solve", vals, eqn.params), _by_jax(eqn, vals))
            return
        for v, o in zip(eqn.outvars, _by_jax(eqn, vals)):
            env[v] = o
    raise AssertionError("no custom_linear_solve in the program")


def test_a_linear_solve_with_floating_point_arithmetic_besides_is_left_to_jax():
    """A solve whose jaxpr computes with floating-point numbers other than by LAPACK or BLAS (here a
    scaling): XLA could round it otherwise, so JAX evaluates it."""
    K, b = np.eye(3) * 2.0, np.arange(3.0)
    eqn = _eqn(
        lambda k, b: jax.lax.custom_linear_solve(lambda x: k @ x, b, lambda _, r: r * 0.5),
        K,
        b,
        name="custom_linear_solve",
    )
    assert _np_lapack("custom_linear_solve", [K, b], eqn.params) is None


def test_other_primitives_and_empty_matrices_are_left_to_jax():
    assert _np_lapack("lu", [np.zeros((0, 0))], {}) is None
    assert _np_lapack("lu", [np.zeros((3, 3), np.int32)], {}) is None
    assert _np_lapack("cholesky", [np.eye(3)], {}) is None


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("shape", [(3, 0), (2, 4, 0), (0, 3)])
def test_the_qr_of_an_empty_matrix_is_jaxs(shape, full):
    x = np.zeros(shape)
    eqn = _eqn(lambda a: jax.lax.linalg.qr(a, full_matrices=full), x, name="qr")
    _same_bits(_np_exact("qr", [x], eqn.params), _by_jax(eqn, [x]))


ROWS = jax.lax.ScatterDimensionNumbers(
    update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)
"""Each update row added to the operand's row at its index."""


def _scatter_fold(operand, rows, updates):
    """(the fold's result, JAX's) of the scatter-add of ``updates`` at ``rows`` of ``operand``."""
    indices = np.asarray(rows, np.int32).reshape(-1, 1)
    eqn = _eqn(lambda o, i, u: jax.lax.scatter_add(o, i, u, ROWS), operand, indices, updates, name="scatter-add")
    vals = [np.asarray(operand), indices, np.asarray(updates)]
    return _np_exact("scatter-add", vals, eqn.params), lambda: _by_jax(eqn, vals)


SCATTERS = [
    ("one term per target", np.zeros((5, 3)), [1, 3], np.array([[1.5, 0.0, -2.0], [0.0, 7.0, 0.0]])),
    ("a repeated target, one term", np.zeros((4, 2)), [2, 2], np.array([[0.25, 0.0], [0.0, -3.0]])),
    ("into a known operand", np.array([[0.0, 1.0], [2.0, 0.0]]), [0, 1], np.array([[4.0, 0.0], [0.0, 5.0]])),
    ("integers", np.arange(6).reshape(3, 2), [0, 0, 2], np.array([[1, 2], [3, 4], [5, 6]])),
]


@pytest.mark.parametrize("case", SCATTERS, ids=[c[0] for c in SCATTERS])
def test_an_exact_scatter_add_is_jaxs(case):
    ours, jaxs = _scatter_fold(*case[1:])
    _same_bits(ours, jaxs())


NOT_EXACT = [
    ("two terms on one target", np.zeros((3, 2)), [1, 1], np.array([[0.1, 0.0], [0.2, 0.0]])),
    ("a term onto a known element", np.ones((2, 2)), [0], np.array([[0.1, 0.0]])),
    ("a negative zero", np.zeros((2, 2)), [0], np.array([[-0.0, 1.0]])),
    ("a NaN", np.zeros((2, 2)), [1], np.array([[np.nan, 1.0]])),
    ("out of bounds", np.zeros((3, 2)), [1, 5], np.array([[1.0, 0.0], [2.0, 0.0]])),
]


@pytest.mark.parametrize("case", NOT_EXACT, ids=[c[0] for c in NOT_EXACT])
def test_no_scatter_add_fold_where_the_order_of_the_sums_could_change_a_bit(case):
    """Left to JAX: several terms on one target (the order of the sums decides the round-off), a
    negative zero, a NaN, an update out of bounds (XLA drops it)."""
    ours, _ = _scatter_fold(*case[1:])
    assert ours is None


def _compiles_while(fn):
    """(fn(), the number of XLA programs compiled meanwhile)."""
    with backend_compiles() as compiles:
        out = fn()
    return out, len(compiles)


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
def test_a_kernel_with_a_known_lu_compiles_no_xla_program_and_computes_xlas_solution():
    """A solve with a known matrix: its LU (and the permutation of its pivots) is folded while the
    kernel is translated, no XLA program compiled, and the kernel's solution is XLA's to round-off."""
    K = RNG.standard_normal((7, 7)) + 4.0 * np.eye(7)
    K[np.abs(K) < 0.5] = 0.0

    def f(b):
        return jax.scipy.linalg.lu_solve(jax.scipy.linalg.lu_factor(K), b)

    b = RNG.standard_normal(7)
    closed = jax.make_jaxpr(f)(b)
    assert any(e.primitive.name == "lu" for e in equations(closed.jaxpr))
    source, compiles = _compiles_while(lambda: translate(closed))
    assert compiles == 0
    assert "livens_kernel" in source
    kernel = native.compile_function(f, b)
    np.testing.assert_allclose(np.asarray(kernel(b)), np.asarray(jax.jit(f)(b)), rtol=1e-13, atol=1e-13)
