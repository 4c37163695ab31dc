"""Every elementwise primitive the native translator handles, against XLA, on edge values.

Each test traces one ``jax.lax`` primitive (checked to be in the jaxpr, so that the native kernel
computes it and no rewrite of it), compiles it natively (a single kernel, and a lane kernel of
eight members where GCC is there) and compares with ``jax.jit`` of the same function: NaN where
XLA gives NaN, the same infinities and signs, finite values to a few units in the last place
(the C library's functions and XLA's own differ by rounding). The values: zeros of both signs,
subnormals, the limits of the domains, large arguments, infinities and NaN; for integers, division
by zero and the least value divided by -1 (C raises SIGFPE there; XLA defines both); for
conversions, NaN, infinities and values out of range (XLA saturates)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from scipy import special

from livens.engine import native
from livens.engine.jaxprs import equations
from livens.engine.native import build, codegen

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
LANES = 8
LANE_KERNELS = native.compiler() is not None and build.is_gcc(native.compiler())

EDGE = np.array(
    [
        -np.inf,
        -1e308,
        -710.0,
        -30.0,
        -2.5,
        -1.0,
        -0.999,
        -0.5,
        -1e-310,  # subnormal
        -0.0,
        0.0,
        5e-324,  # the least subnormal
        1e-300,
        0.5,
        0.999,
        1.0,
        2.5,
        30.0,
        710.0,
        1e308,
        np.inf,
        np.nan,
    ]
)

UNARY = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "sqrt": lax.sqrt,
    "rsqrt": lax.rsqrt,
    "cbrt": lax.cbrt,
    "exp": lax.exp,
    "exp2": lax.exp2,
    "log": lax.log,
    "log1p": lax.log1p,
    "expm1": lax.expm1,
    "sin": lax.sin,
    "cos": lax.cos,
    "tan": lax.tan,
    "asin": lax.asin,
    "acos": lax.acos,
    "atan": lax.atan,
    "sinh": lax.sinh,
    "cosh": lax.cosh,
    "tanh": lax.tanh,
    "asinh": lax.asinh,
    "acosh": lax.acosh,
    "atanh": lax.atanh,
    "floor": lax.floor,
    "ceil": lax.ceil,
    "round": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    "erf": lax.erf,
    "erfc": lax.erfc,
    "lgamma": lax.lgamma,
    "is_finite": lax.is_finite,
    "square": lax.square,
    "logistic": lax.logistic,
    "integer_pow": lambda x: lax.integer_pow(x, -3),
}
"""The float primitives (:data:`livens.engine.native.elementwise.UNARY`) as jax.lax spells them."""

ULPS = {"cbrt": 128, "lgamma": 64, "erfc": 16, "acosh": 8, "asinh": 8, "atanh": 8, "logistic": 8, "expm1": 8}
"""Units in the last place between the C library and XLA, where their algorithms differ (XLA's
cbrt before JAX 0.10: up to 101 units at 1e-300)."""
SUBNORMAL = [-1e-310, 5e-324]
READS_BITS = {"log", "lgamma", "cbrt"}
"""Where a subnormal operand is known to give another answer: C library functions that read its
bits (log of -1e-310 is NaN, lgamma of 5e-324 is 744.4) where XLA takes it as a zero of that sign
(-inf, inf), and XLA's cbrt, which before JAX 0.10 did not flush it (cbrt of 5e-324 1.7e-108)."""
EXPONENTIAL = {"exp", "exp2", "cosh", "sinh"}
"""Functions whose relative condition number is about |x|: an error of one unit in x (XLA's
argument reduction) is an error of |x| units in the result, allowed here."""

BINARY = {
    "add": lax.add,
    "sub": lax.sub,
    "mul": lax.mul,
    "div": lax.div,
    "rem": lax.rem,
    "pow": lax.pow,
    "atan2": lax.atan2,
    "nextafter": lax.nextafter,
    "max": lax.max,
    "min": lax.min,
    "eq": lax.eq,
    "ne": lax.ne,
    "lt": lax.lt,
    "le": lax.le,
    "gt": lax.gt,
    "ge": lax.ge,
}


def test_every_handled_elementwise_primitive_has_a_test():
    handled = set(codegen.UNARY) | set(codegen.BINARY) | {"integer_pow", "round", "convert_element_type"}
    tested = set(UNARY) | set(BINARY) | {"add_any", "not", "and", "or", "xor", "convert_element_type"}
    assert handled <= tested, sorted(handled - tested)


def _close(got, want, ulps, name: str, at=None) -> None:
    """``got`` equal to ``want`` where not floats; else NaN and infinities at the same places, and
    finite values within ``ulps`` units in the last place (an array: per element), or below the
    least normal number (XLA flushes subnormal operands and results to zero; a subnormal that a
    function returns untouched stays subnormal natively)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, name
    if not np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{name}: NaN where XLA has NaN")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{name}: infinities")
    fin = ~nan & ~inf
    ulps = np.broadcast_to(ulps, want.shape)[fin]
    unit = np.spacing(np.minimum(np.abs(want[fin]), np.finfo(want.dtype).max / 2))  # no overflow at the largest
    tol = np.maximum(ulps * unit, np.finfo(want.dtype).tiny)
    bad = np.abs(got[fin] - want[fin]) > tol
    where = "" if at is None else f"at {np.asarray(at)[fin][bad]} "
    assert not bad.any(), f"{name}: {where}native {got[fin][bad]} XLA {want[fin][bad]}"


def _primitives(fn, *args) -> set:
    return {e.primitive.name for e in equations(jax.make_jaxpr(fn)(*args).jaxpr)}


def _check(fn, args, name: str, ulps: int = 2) -> None:
    if name not in _primitives(fn, *args):  # a primitive of newer JAX versions only (square)
        pytest.skip(f"{name} is not a primitive in jax {jax.__version__}: {sorted(_primitives(fn, *args))}")
    want = jax.jit(fn)(*args)
    got = native.compile_function(fn, *args)(*args)
    _close(got, want, ulps, name, at=args[0] if np.shape(args[0]) == np.shape(want) else None)
    if LANE_KERNELS:  # eight members: the edge values rotated from lane to lane
        members = [jax.tree_util.tree_map(lambda a, r=r: np.roll(np.asarray(a), r), args) for r in range(LANES)]
        stacked = jax.tree_util.tree_map(lambda *a: np.stack(a), *members)
        kernel = native.compile_function(fn, *args, lanes=LANES)
        got = kernel(*stacked)
        ulps = (
            np.stack([np.roll(np.broadcast_to(ulps, np.shape(args[0])), r) for r in range(LANES)])
            if np.ndim(ulps)
            else ulps
        )
        _close(got, jax.vmap(jax.jit(fn))(*stacked), ulps, f"{name} in lanes")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_float_primitive_against_xla(name):
    x = EDGE[~np.isin(EDGE, SUBNORMAL)] if name in READS_BITS else EDGE
    # beyond |x| = 1000 the exponentials are 0 or infinite: compared exactly
    ulps = ULPS.get(name, 2) * (np.clip(np.abs(np.nan_to_num(x)), 1.0, 1e3) if name in EXPONENTIAL else 1.0)
    if name == "lgamma":  # near its zeros (1, 2, -2.46) the error is absolute: units of 1
        with np.errstate(divide="ignore"):
            ulps = ulps * np.clip(1.0 / np.abs(special.gammaln(x)), 1.0, 1e6)
    _check(UNARY[name], (x,), name, ulps)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float_primitive_against_xla(name):
    a = np.repeat(EDGE, EDGE.size)
    b = np.tile(EDGE, EDGE.size)
    _check(BINARY[name], (a, b), name, 2)


INT_CASES = {
    np.int32: [7, -7, 0, 1, -1, 2**31 - 1, -(2**31), 5, -5, 13],
    np.int64: [7, -7, 0, 1, -1, 2**63 - 1, -(2**63), 5, -5, 13],
    np.uint32: [7, 0, 1, 2**32 - 1, 5, 13, 2**31, 3],
    np.int8: [7, -7, 0, 1, -1, 127, -128, 5],
}


@pytest.mark.parametrize("dtype", sorted(INT_CASES, key=lambda d: np.dtype(d).name))
@pytest.mark.parametrize("name", ["div", "rem"])
def test_integer_division_by_zero_and_overflow_as_xla(name, dtype):
    """``7 // k`` with k = 0 ended the interpreter with SIGFPE (exit 136); XLA gives -1 (x / 0),
    x (x % 0), and the least value for the least value / -1."""
    vals = np.asarray(INT_CASES[dtype], dtype=dtype)
    a, b = np.repeat(vals, vals.size), np.tile(vals, vals.size)
    _check(BINARY[name], (a, b), name)


def test_floor_division_of_a_user_force_by_zero():
    k = np.array([0, 3, -2, 0], np.int64)
    _check(lambda k: 7 // k + 7 % k, (k,), "div")


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_conversion_of_floats_to_integers_saturates_as_xla(dtype):
    """NaN to 0, infinities and values out of range to the limits (C's conversion gave INT_MIN)."""
    x = np.concatenate([EDGE, [2.0**31 - 0.5, -(2.0**31) - 0.9, 2.0**63, -(2.0**63), 3e9, 255.5, -128.7, 127.9]])
    _check(lambda x: lax.convert_element_type(x, dtype), (x,), "convert_element_type")


def test_a_histogram_index_of_an_out_of_range_value():
    """``clip(floor(1e10 * x).astype(int32), 0, 9)``: 9 with XLA, 0 natively before."""
    x = np.array([10.0, -10.0, np.nan, 0.35, np.inf])
    _check(lambda x: jnp.clip(jnp.floor(1e10 * x).astype(jnp.int32), 0, 9), (x,), "convert_element_type")


def test_bitwise_and_logical_primitives():
    a = np.array([0, 1, -1, 5, 2**31 - 1, -(2**31)], np.int32)
    b = np.roll(a, 1)
    for name, fn in (
        ("and", lax.bitwise_and),
        ("or", lax.bitwise_or),
        ("xor", lax.bitwise_xor),
        ("not", lax.bitwise_not),
    ):
        _check(fn if name != "not" else (lambda a, b: fn(a)), (a, b), name)
    p, q = a > 0, b < 0
    for name, fn in (("and", jnp.logical_and), ("or", jnp.logical_or), ("xor", jnp.logical_xor)):
        _check(fn, (p, q), name)
    _check(lambda p, q: jnp.logical_not(p), (p, q), "not")
    _check(lambda x, y: jax.grad(lambda x: jnp.sum(x * y + x))(x), (EDGE[10:18], EDGE[11:19]), "add_any")
