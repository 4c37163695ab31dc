"""A JAX function evaluated at one point by NumPy, without compiling an XLA program.

JAX runs a function outside ``jit`` operation by operation, and each operation is a small XLA
program compiled on its first use; ``jit`` compiles one program for the whole function. The set-up
checks of a :class:`livens.Problem` evaluate the user's functions (and their derivatives by JAX AD)
at the initial state once, or a few times, which is less work than compiling any program for them.
Here the function is traced to its jaxpr (``jax.make_jaxpr``: no program is compiled) and the
jaxpr is evaluated equation by equation with NumPy.

The primitives known are those of model functions written with ``jax.numpy`` and of their
derivatives: elementwise arithmetic and functions, comparisons and choices, shapes, slices, gathers
and scatters, reductions, matrix products, and the calls, conditionals and loops that hold other
jaxprs. A primitive not in the table (linear algebra, say) raises :class:`Unsupported`, and the caller
evaluates the function as it would have otherwise. The values are those of XLA up to round-off
(NumPy's transcendental functions, summation orders).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from . import _jaxconfig  # noqa: F401


class Unsupported(Exception):
    """The jaxpr holds something this interpreter does not evaluate (a primitive, a dtype)."""


def _unary(f):
    return lambda x, **_: f(x)


def _binary(f):
    return lambda x, y, **_: f(x, y)


def _integer_pow(x, *, y, **_):
    """x**y by repeated squaring, in JAX's order of multiplications."""
    if y == 0:
        return np.ones_like(x)
    n, acc = abs(y), None
    while n > 0:
        if n & 1:
            acc = x if acc is None else acc * x
        n >>= 1
        if n > 0:
            x = x * x
    return np.ones_like(acc) / acc if y < 0 else acc


def _div(x, y, **_):
    if np.issubdtype(np.result_type(x, y), np.integer):  # C division: rounded towards zero
        q = np.abs(x) // np.where(y == 0, 1, np.abs(y))
        return np.where((x < 0) != (y < 0), -q, q)
    return np.true_divide(x, y)


def _round(x, *, rounding_method, **_):
    if int(rounding_method) == 1:  # to nearest even
        return np.round(x)
    ax = np.abs(x)
    f = np.floor(ax)
    return np.copysign(np.where(ax - f >= 0.5, f + 1.0, f), x)


def _select_n(which, *cases, **_):
    if np.asarray(which).dtype == bool:
        return np.where(which, cases[1], cases[0])
    return np.choose(np.asarray(which, dtype=int), np.broadcast_arrays(*cases))


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    x = np.asarray(x)
    expanded = np.expand_dims(x, tuple(i for i in range(len(shape)) if i not in broadcast_dimensions))
    return np.broadcast_to(expanded, shape)


def _iota(*, dtype, shape, dimension, **_):
    ramp = np.arange(shape[dimension], dtype=dtype).reshape([-1 if i == dimension else 1 for i in range(len(shape))])
    return np.broadcast_to(ramp, shape)


def _slice(x, *, start_indices, limit_indices, strides=None, **_):
    strides = strides or (1,) * len(start_indices)
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))]


def _starts(shape, sizes, starts):
    """Start indices clamped so that the window lies inside (XLA's rule for dynamic slices)."""
    return [min(max(int(s), 0), n - k) for s, n, k in zip(starts, shape, sizes)]


def _dynamic_slice(x, *starts, slice_sizes, **_):
    begin = _starts(x.shape, slice_sizes, starts)
    return x[tuple(slice(b, b + k) for b, k in zip(begin, slice_sizes))]


def _dynamic_update_slice(x, update, *starts, **_):
    out = np.array(x, copy=True)
    begin = _starts(x.shape, update.shape, starts)
    out[tuple(slice(b, b + k) for b, k in zip(begin, update.shape))] = update
    return out


def _pad(x, padding_value, *, padding_config, **_):
    """lax.pad written straight into one array of the padding value: along each axis, element j of x
    lands at lo + j (interior + 1) where that lies within the output (a negative edge crops)."""
    x = np.asarray(x)
    shape = [lo + n + max(n - 1, 0) * interior + hi for n, (lo, hi, interior) in zip(x.shape, padding_config)]
    out = np.full(shape, padding_value, dtype=x.dtype)
    into, taken = [], []
    for n, size, (lo, _, interior) in zip(x.shape, shape, padding_config):
        step = interior + 1
        first = max(0, -(lo // step))  # the first element at a position >= 0
        last = min(n - 1, (size - 1 - lo) // step)  # the last at a position < size
        if last < first:  # nothing of x within the output
            return out
        into.append(slice(lo + first * step, lo + last * step + 1, step))
        taken.append(slice(first, last + 1))
    out[tuple(into)] = x[tuple(taken)]
    return out


def _dot_general(lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    """dot_general: the output holds the batch dimensions, then lhs's free ones, then rhs's."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
    batch = [lhs.shape[i] for i in lb]
    nb, nc = math.prod(batch), math.prod(lhs.shape[i] for i in lc)
    a = np.transpose(lhs, list(lb) + lf + list(lc)).reshape(nb, -1, nc)
    b = np.transpose(rhs, list(rb) + list(rc) + rf).reshape(nb, nc, -1)
    out = np.matmul(a, b).reshape(batch + [lhs.shape[i] for i in lf] + [rhs.shape[i] for i in rf])
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def _mode(mode) -> str:
    return getattr(mode, "name", str(mode)).upper()


def _fill(dtype, fill_value):
    if fill_value is not None:
        return fill_value
    if np.issubdtype(dtype, np.inexact):
        return np.nan
    if np.dtype(dtype) == np.dtype(bool):
        return True
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.signedinteger) else np.iinfo(dtype).max


def _windows(shape, indices, index_dims, window_dims, sizes, clip: bool):
    """The operand index of every element of the windows of a gather or scatter, as one index array
    per operand dimension of shape batch + window (``indices``: batch + (k,), the start along the
    dimensions ``index_dims``; ``window_dims``: the operand dimensions the window spans, ``sizes`` the
    window's size along every operand dimension), and which windows lie inside the operand (all of
    them where ``clip``: their starts are then clamped, as XLA does)."""
    batch = indices.shape[:-1]
    nb, nw = len(batch), len(window_dims)
    inside = np.ones(batch, dtype=bool)
    out = []
    for d, n in enumerate(shape):
        start = np.zeros(batch, dtype=np.int64)
        if d in index_dims:
            start = indices[..., list(index_dims).index(d)].astype(np.int64)
            inside &= (start >= 0) & (start + sizes[d] <= n)
            if clip:
                start = np.clip(start, 0, n - sizes[d])
        start = start.reshape(batch + (1,) * nw)
        if d in window_dims:
            j = list(window_dims).index(d)
            start = start + np.arange(sizes[d]).reshape((1,) * nb + tuple(-1 if k == j else 1 for k in range(nw)))
        out.append(start)
    return out, inside


def _gather(operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value=None, **_):
    dn = dimension_numbers
    if getattr(dn, "operand_batching_dims", ()) or _mode(mode) not in ("CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS"):
        raise Unsupported("gather with batching dimensions or this mode")
    kept = [d for d in range(operand.ndim) if d not in dn.collapsed_slice_dims]
    fill = _mode(mode) == "FILL_OR_DROP"
    where, inside = _windows(operand.shape, indices, dn.start_index_map, kept, slice_sizes, True)
    values = operand[tuple(where)]  # batch + window
    nb = indices.ndim - 1
    if fill and not inside.all():
        mask = inside.reshape(inside.shape + (1,) * (values.ndim - nb))
        values = np.where(mask, values, np.asarray(_fill(operand.dtype, fill_value), dtype=operand.dtype))
    rank = values.ndim
    batch_axes = [i for i in range(rank) if i not in dn.offset_dims]
    source = [nb + list(dn.offset_dims).index(i) if i in dn.offset_dims else batch_axes.index(i) for i in range(rank)]
    return np.transpose(values, source)


_SCATTER = {
    "scatter": None,
    "scatter-add": np.add,
    "scatter_add": np.add,
    "scatter-sub": np.subtract,
    "scatter_sub": np.subtract,
    "scatter-mul": np.multiply,
    "scatter_mul": np.multiply,
    "scatter-min": np.minimum,
    "scatter_min": np.minimum,
    "scatter-max": np.maximum,
    "scatter_max": np.maximum,
}


def _scatter(name, operand, indices, updates, *, dimension_numbers, mode, **_):
    dn = dimension_numbers
    if tuple(dn.operand_batching_dims) or _mode(mode) not in ("CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS"):
        raise Unsupported("scatter with batching dimensions or this mode")
    nb = indices.ndim - 1
    window = np.moveaxis(updates, list(dn.update_window_dims), list(range(nb, updates.ndim)))
    window_dims = [d for d in range(operand.ndim) if d not in dn.inserted_window_dims]
    sizes = [1] * operand.ndim
    for j, d in enumerate(window_dims):
        sizes[d] = updates.shape[dn.update_window_dims[j]]
    clip = _mode(mode) == "CLIP"
    where, inside = _windows(operand.shape, indices, dn.scatter_dims_to_operand_dims, window_dims, sizes, clip)
    where = [np.broadcast_to(w, window.shape) for w in where]
    if not clip and not inside.all():  # out-of-bounds windows are dropped
        where, window = [w[inside] for w in where], window[inside]
    out = np.array(operand, copy=True)
    if _SCATTER[name] is None:
        out[tuple(where)] = window
    else:
        _SCATTER[name].at(out, tuple(where), window)
    return out


def _sort(*operands, dimension, num_keys=1, **_):
    if num_keys != 1:
        raise Unsupported("sort by several keys")
    order = np.argsort(operands[0], axis=dimension, kind="stable")
    return [np.take_along_axis(x, order, axis=dimension) for x in operands]


def _cumulative(f):
    def fn(x, *, axis, reverse=False, **_):
        if reverse:
            return np.flip(f(np.flip(x, axis), axis=axis), axis)
        return f(x, axis=axis)

    return fn


def _split(x, *, sizes, axis, **_):
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _reduction(f):
    return lambda x, *, axes, **_: f(x, axis=tuple(axes))


def _arg(f):
    return lambda x, *, axes, index_dtype, **_: f(x, axis=axes[0]).astype(index_dtype)


def _convert(x, *, new_dtype, **_):
    if np.issubdtype(np.asarray(x).dtype, np.complexfloating):
        raise Unsupported("a complex dtype")
    return np.asarray(x).astype(np.dtype(new_dtype))


BINARY: dict[str, Callable] = {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "rem": np.fmod,
    "pow": np.power,
    "max": np.maximum,
    "min": np.minimum,
    "atan2": np.arctan2,
    "nextafter": np.nextafter,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
"""The binary primitives of JAX and the NumPy functions that evaluate them elementwise (also the
native translator's constant folder's, for those it folds)."""

_RULES: dict[str, Callable] = {
    **{
        name: _unary(f)
        for name, f in {
            "neg": np.negative,
            "sign": np.sign,
            "floor": np.floor,
            "ceil": np.ceil,
            "is_finite": np.isfinite,
            "exp": np.exp,
            "exp2": np.exp2,
            "log": np.log,
            "expm1": np.expm1,
            "log1p": np.log1p,
            "tanh": np.tanh,
            "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
            "sin": np.sin,
            "cos": np.cos,
            "tan": np.tan,
            "asin": np.arcsin,
            "acos": np.arccos,
            "atan": np.arctan,
            "sinh": np.sinh,
            "cosh": np.cosh,
            "asinh": np.arcsinh,
            "acosh": np.arccosh,
            "atanh": np.arctanh,
            "sqrt": np.sqrt,
            "rsqrt": lambda x: 1.0 / np.sqrt(x),
            "cbrt": np.cbrt,
            "abs": np.abs,
            "square": lambda x: x * x,
            "not": np.invert,
            "copy": np.array,
            "copy_p": np.array,
            "stop_gradient": np.array,  # the value itself (no derivative is taken here)
        }.items()
    },
    **{name: _binary(f) for name, f in BINARY.items()},
    **{
        name: _reduction(f)
        for name, f in {
            "reduce_sum": np.sum,
            "reduce_prod": np.prod,
            "reduce_max": np.max,
            "reduce_min": np.min,
            "reduce_and": np.all,
            "reduce_or": np.any,
        }.items()
    },
    **{
        name: _cumulative(f)
        for name, f in {
            "cumsum": np.cumsum,
            "cumprod": np.cumprod,
            "cummax": np.maximum.accumulate,
            "cummin": np.minimum.accumulate,
        }.items()
    },
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "div": _div,
    "integer_pow": _integer_pow,
    "round": _round,
    "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
    "select_n": _select_n,
    "convert_element_type": _convert,
    "broadcast_in_dim": _broadcast_in_dim,
    "iota": _iota,
    "reshape": lambda x, *, new_sizes, dimensions=None, **_: np.reshape(x, new_sizes),
    "squeeze": lambda x, *, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "expand_dims": lambda x, *, dimensions, **_: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, *, permutation, **_: np.transpose(x, permutation),
    "rev": lambda x, *, dimensions, **_: np.flip(x, tuple(dimensions)),
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
    "pad": _pad,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "dot_general": _dot_general,
    "gather": _gather,
}
_MULTIPLE = {
    "sort": _sort,
    "split": _split,
    "unstack": lambda x, *, axis, **_: list(np.moveaxis(x, axis, 0)),
    "optimization_barrier": lambda *xs, **_: list(xs),
    "device_put": lambda *xs, **_: [np.array(x) for x in xs],  # a placement: the values themselves
}


def _closed(jaxpr) -> tuple[Any, list]:
    """(jaxpr, consts) of a closed or an open jaxpr."""
    inner = getattr(jaxpr, "jaxpr", None)
    return (inner, list(jaxpr.consts)) if inner is not None else (jaxpr, [])


def _call(closed, args: list) -> list:
    jaxpr, consts = _closed(closed)
    return evaluate_jaxpr(jaxpr, consts, args)


def _while(args, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **_):
    cond_consts, body_consts = args[:cond_nconsts], args[cond_nconsts : cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts :])
    while bool(_call(cond_jaxpr, cond_consts + carry)[0]):
        carry = _call(body_jaxpr, body_consts + carry)
    return carry


def _scan(args, *, jaxpr, num_consts, num_carry, length, reverse=False, **_):
    consts, carry = args[:num_consts], list(args[num_consts : num_consts + num_carry])
    xs = args[num_consts + num_carry :]
    ys: list = [None] * length
    for i in reversed(range(length)) if reverse else range(length):
        out = _call(jaxpr, consts + carry + [x[i] for x in xs])
        carry, ys[i] = out[:num_carry], out[num_carry:]
    n_ys = len(jaxpr.out_avals) - num_carry
    stacked = [
        np.stack([y[j] for y in ys]) if length else np.zeros((0,) + tuple(a.shape), a.dtype)
        for j, a in zip(range(n_ys), jaxpr.out_avals[num_carry:])
    ]
    return carry + stacked


def _cond(args, *, branches, **_):
    index = min(max(int(args[0]), 0), len(branches) - 1)
    return _call(branches[index], list(args[1:]))


def _inner(name: str, params: dict, args: list) -> list | None:
    """The outputs of an equation that holds other jaxprs (None where ``name`` is none of those)."""
    if name in ("jit", "pjit", "closed_call", "core_call", "checkpoint", "remat"):
        if "jaxpr" not in params:
            raise Unsupported(name)
        return _call(params["jaxpr"], args)
    if name in ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"):
        inner = params.get("call_jaxpr", params.get("fun_jaxpr"))
        if inner is None:
            raise Unsupported(name)
        return _call(inner, args)
    if name == "while":
        return _while(args, **params)
    if name == "scan":
        return _scan(args, **params)
    if name == "cond":
        return _cond(args, **params)
    return None


def _step(eqn) -> Callable[[list], list]:
    """The function of one equation: its input values -> its output values."""
    name, params = eqn.primitive.name, eqn.params
    if name in _RULES:
        rule = _RULES[name]
        return lambda args: [rule(*args, **params)]
    if name in _SCATTER:
        return lambda args: [_scatter(name, *args, **params)]
    if name in _MULTIPLE:
        multiple = _MULTIPLE[name]
        return lambda args: list(multiple(*args, **params))

    def inner(args):
        out = _inner(name, params, args)
        if out is None:
            raise Unsupported(f"the primitive {name!r}")
        return out

    return inner


_PLANS: dict[int, tuple[Any, list]] = {}  # id of a jaxpr -> (the jaxpr, its steps)


def _plan(jaxpr) -> list:
    """The steps of ``jaxpr``, made once per jaxpr: (function, inputs as (is a literal, value or
    variable), outputs as (variable, shape, dtype), primitive name) for each equation."""
    from jax.extend.core import Literal

    hit = _PLANS.get(id(jaxpr))
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    steps = []
    for eqn in jaxpr.eqns:
        ins = tuple(
            (True, np.asarray(v.val, dtype=v.aval.dtype)) if isinstance(v, Literal) else (False, v) for v in eqn.invars
        )
        outs = tuple((v, tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in eqn.outvars)
        steps.append((_step(eqn), ins, outs, eqn.primitive.name))
    if len(_PLANS) >= 256:
        _PLANS.clear()
    _PLANS[id(jaxpr)] = (jaxpr, steps)
    return steps


def evaluate_jaxpr(jaxpr, consts: list, args: list) -> list:
    """The outputs of ``jaxpr`` (a ``jax.extend.core.Jaxpr``) for NumPy ``args``, as NumPy arrays."""
    from jax.extend.core import Literal

    env: dict = {v: np.asarray(c) for v, c in zip(jaxpr.constvars, consts)}
    env.update((v, np.asarray(a)) for v, a in zip(jaxpr.invars, args))
    for fn, ins, outs, name in _plan(jaxpr):
        values = fn([x if literal else env[x] for literal, x in ins])
        if len(values) != len(outs):
            raise Unsupported(f"the outputs of {name!r}")
        for (v, shape, dtype), o in zip(outs, values):
            o = np.asarray(o)
            if o.shape != shape:
                raise Unsupported(f"the shape of {name!r}")
            env[v] = o if o.dtype == dtype else o.astype(dtype)
    return [np.asarray(v.val, dtype=v.aval.dtype) if isinstance(v, Literal) else env[v] for v in jaxpr.outvars]


class NumpyFunction:
    """``fn`` traced once at arguments of the shapes and dtypes of ``example`` and evaluated by
    NumPy at each call (module docstring). Raises :class:`Unsupported` when made where its jaxpr
    holds a primitive this module does not know, and at a call with arguments of other shapes."""

    def __init__(self, fn: Callable, *example: Any):
        leaves, self._tree = jax.tree_util.tree_flatten(example)
        self._avals = [(np.shape(x), np.result_type(x)) for x in leaves]
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*example)
        self._jaxpr, self._consts = closed.jaxpr, [np.asarray(c) for c in closed.consts]
        self._out_tree = jax.tree_util.tree_structure(shapes)
        names: set[str] = set()
        _primitives(self._jaxpr, names)
        unknown = sorted(n for n in names if n not in _KNOWN)
        if unknown:
            raise Unsupported(f"the primitives {unknown}")

    def __call__(self, *args: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(args)
        leaves = [np.asarray(x) for x in leaves]
        if tree != self._tree or [(x.shape, x.dtype) for x in leaves] != self._avals:
            raise Unsupported("arguments of other shapes or dtypes than those traced")
        with np.errstate(all="ignore"):
            out = evaluate_jaxpr(self._jaxpr, self._consts, leaves)
        return jax.tree_util.tree_unflatten(self._out_tree, out)


_KNOWN = (
    set(_RULES)
    | set(_SCATTER)
    | set(_MULTIPLE)
    | {"jit", "pjit", "closed_call", "core_call", "checkpoint", "remat", "custom_jvp_call", "custom_vjp_call"}
    | {"custom_vjp_call_jaxpr", "while", "scan", "cond"}
)


def _primitives(jaxpr, names: set[str]) -> None:
    """The names of the primitives of ``jaxpr`` and of the jaxprs its equations hold."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                if isinstance(sub, ClosedJaxpr):
                    _primitives(sub.jaxpr, names)
                elif isinstance(sub, Jaxpr):
                    _primitives(sub, names)


class PointFunction:
    """``fn`` of one array argument, evaluated by NumPy (:class:`NumpyFunction`, traced at the shape and
    dtype of ``example``) where it can be, else by ``compiled`` (default: ``jax.jit(fn)``), compiled at
    its first call (a primitive the interpreter does not know, an argument of another shape)."""

    def __init__(self, fn: Callable, example: Any, compiled: Callable | None = None):
        self.fn = fn
        self._compiled: Callable | None = compiled
        try:
            self._numpy: NumpyFunction | None = NumpyFunction(fn, np.asarray(example))
        except Exception:  # noqa: BLE001 - evaluated by the compiled program instead
            self._numpy = None

    @property
    def compiles(self) -> bool:
        """Whether calls go to the compiled program."""
        return self._numpy is None

    def __call__(self, q: Any) -> Any:
        if self._numpy is not None:
            try:
                return self._numpy(q)
            except Exception:  # noqa: BLE001 - the compiled program from now on
                self._numpy = None
        if self._compiled is None:
            self._compiled = jax.jit(self.fn)
        return jax.tree_util.tree_map(np.asarray, self._compiled(q))


_FUNCTIONS: dict = {}  # (id of fn, argument structure, shapes and dtypes) -> (fn, its NumpyFunction)


def evaluate(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` evaluated by NumPy (module docstring); :class:`Unsupported` where it cannot be.
    ``fn`` is traced once per argument shapes and dtypes (while it is among the last 64 kept)."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    key = (id(fn), tree, tuple((np.shape(x), np.result_type(x)) for x in leaves))
    hit = _FUNCTIONS.get(key)
    if hit is None or hit[0] is not fn:
        if len(_FUNCTIONS) >= 64:
            _FUNCTIONS.clear()
        hit = _FUNCTIONS[key] = (fn, NumpyFunction(fn, *args))
    return hit[1](*args)


__all__ = ["NumpyFunction", "PointFunction", "Unsupported", "evaluate", "evaluate_jaxpr"]
