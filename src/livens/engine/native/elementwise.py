"""C expressions of the elementwise primitives for :mod:`livens.engine.native.codegen`: each rule
maps the C expressions of the operands (and the dtype) to the C expression of the result, with
XLA's semantics where C's differ (division, remainder, conversions to integers)."""

from __future__ import annotations

import numpy as np

from .emitter import _ctype, _is_float, c_literal


def _maxmin(op):
    def f(a, b, dt):
        if _is_float(dt):  # NaN propagates, as in XLA
            return f"(({a} {op} {b}) || isnan({a}) ? {a} : {b})"
        return f"(({a} {op} {b}) ? {a} : {b})"

    return f


def _unary(fn):
    return lambda a, dt: f"{fn}({a})"


def _sign(a, dt):
    if _is_float(dt):
        return f"(isnan({a}) ? {a} : (({a} > 0) - ({a} < 0)) * 1.0)"
    return f"(({a} > 0) - ({a} < 0))"


def _abs(a, dt):
    return f"fabs({a})" if _is_float(dt) else f"(({a}) < 0 ? -({a}) : ({a}))"


def _not(a, dt):
    return f"(!{a})" if np.dtype(dt) == np.bool_ else f"(~{a})"


def _int_literal(x: int, dtype) -> str:
    """A C literal of the integer x of ``dtype`` (the least int64 too, which C cannot write as one)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "i" and x == np.iinfo(dtype).min:
        return f"(({_ctype(dtype)}) ({x + 1}LL - 1))"
    return f"(({_ctype(dtype)}) {x}{'ULL' if dtype.kind == 'u' else 'LL'})"


def _div(a, b, dt):
    """``lax.div`` as XLA computes it: integers rounded toward zero, x / 0 = -1 (the largest value
    where unsigned), the least value / -1 = itself (no SIGFPE, which C's division raises)."""
    if _is_float(dt):
        return f"({a} / {b})"
    dt = np.dtype(dt)
    if dt.kind == "u":
        return f"({b} == 0 ? {_int_literal(np.iinfo(dt).max, dt)} : {a} / {b})"
    neg = f"(({_ctype(dt)}) (0 - (u{_ctype(dt)}) {a}))"  # wraps: the least value stays
    return f"({b} == 0 ? (({_ctype(dt)}) -1) : ({b} == -1 ? {neg} : {a} / {b}))"


def _rem(a, b, dt):
    """``lax.rem`` as XLA computes it: the sign of the dividend, x % 0 = x, x % -1 = 0 (no SIGFPE)."""
    if _is_float(dt):
        return f"fmod({a}, {b})"
    if np.dtype(dt).kind == "u":
        return f"({b} == 0 ? {a} : {a} % {b})"
    return f"({b} == 0 ? {a} : ({b} == -1 ? 0 : {a} % {b}))"


def saturation(dst) -> tuple:
    """(lo, hi, least, largest) of a conversion of floats to the integer type ``dst``, as XLA
    converts: values at or below ``lo`` give the least value, at or above ``hi`` the largest
    (``hi`` is the first power of two out of range), NaN gives 0."""
    info = np.iinfo(dst)
    lo = float(info.min)
    hi = float(2 ** (8 * info.dtype.itemsize - (1 if info.dtype.kind == "i" else 0)))
    return lo, hi, int(info.min), int(info.max)


def _to_integer(dst):
    """A saturating conversion of floats to the integer type ``dst`` (:func:`saturation`), where C's
    conversion of NaN or an out-of-range value is undefined (INT_MIN on x86)."""
    lo, hi, least, largest = saturation(dst)
    ct = _ctype(dst)

    def fn(a, dt):
        return (
            f"(isnan({a}) ? (({ct}) 0) : ({a} <= {c_literal(lo, np.float64)} ? {_int_literal(least, dst)} : "
            f"({a} >= {c_literal(hi, np.float64)} ? {_int_literal(largest, dst)} : (({ct}) {a}))))"
        )

    return fn


def _round(a, dt, rounding_method=0):
    return f"rint({a})" if int(rounding_method) == 1 else f"round({a})"


def _integer_pow(a, dt, y):
    y = int(y)
    if y == 0:
        return "1.0"
    base = a
    n = abs(y)
    # exponentiation by squaring, as an expression
    result, sq = None, base
    while n:
        if n & 1:
            result = sq if result is None else f"({result} * {sq})"
        n >>= 1
        if n:
            sq = f"({sq} * {sq})"
    return f"(1.0 / {result})" if y < 0 else result


UNARY = {
    "neg": lambda a, dt: f"(-{a})",
    "abs": _abs,
    "sign": _sign,
    "not": _not,
    "sqrt": _unary("sqrt"),
    "rsqrt": lambda a, dt: f"(1.0 / sqrt({a}))",
    "cbrt": _unary("cbrt"),
    "exp": _unary("exp"),
    "exp2": _unary("exp2"),
    "log": _unary("log"),
    "log1p": _unary("log1p"),
    "expm1": _unary("expm1"),
    "sin": _unary("sin"),
    "cos": _unary("cos"),
    "tan": _unary("tan"),
    "asin": _unary("asin"),
    "acos": _unary("acos"),
    "atan": _unary("atan"),
    "sinh": _unary("sinh"),
    "cosh": _unary("cosh"),
    "tanh": _unary("tanh"),
    "asinh": _unary("asinh"),
    "acosh": _unary("acosh"),
    "atanh": _unary("atanh"),
    "floor": _unary("floor"),
    "ceil": _unary("ceil"),
    "erf": _unary("erf"),
    "erfc": _unary("erfc"),
    "lgamma": _unary("lgamma"),
    "is_finite": lambda a, dt: f"isfinite({a})",
    "square": lambda a, dt: f"({a} * {a})",
    "logistic": lambda a, dt: f"(1.0 / (1.0 + exp(-{a})))",
}

BINARY = {
    "add": lambda a, b, dt: f"({a} + {b})",
    "add_any": lambda a, b, dt: f"({a} + {b})",
    "sub": lambda a, b, dt: f"({a} - {b})",
    "mul": lambda a, b, dt: f"({a} * {b})",
    "div": _div,
    "rem": _rem,
    "pow": lambda a, b, dt: f"pow({a}, {b})",
    "atan2": lambda a, b, dt: f"atan2({a}, {b})",
    "nextafter": lambda a, b, dt: f"nextafter({a}, {b})",
    "max": _maxmin(">"),
    "min": _maxmin("<"),
    "and": lambda a, b, dt: f"({a} & {b})",
    "or": lambda a, b, dt: f"({a} | {b})",
    "xor": lambda a, b, dt: f"({a} ^ {b})",
    "eq": lambda a, b, dt: f"({a} == {b})",
    "ne": lambda a, b, dt: f"({a} != {b})",
    "lt": lambda a, b, dt: f"({a} < {b})",
    "le": lambda a, b, dt: f"({a} <= {b})",
    "gt": lambda a, b, dt: f"({a} > {b})",
    "ge": lambda a, b, dt: f"({a} >= {b})",
}
