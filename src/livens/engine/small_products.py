"""Rewrite small matrix products as fusible elementwise products and sums (speed of small systems).

XLA on a CPU launches every ``dot_general`` as an operation of its own, at a fixed cost however
small the matrices; the residual and tangent of a scheme for a system of a dozen
coordinates hold a hundred such products (AD of the users' g(q) multiplies them). Written as a
broadcast product and a sum, the same contraction is fused by XLA with the elementwise work
around it. :func:`fuse_small_dots` traces a function to its jaxpr and evaluates it again with every
floating-point ``dot_general`` whose product tensor has at most ``limit`` entries rewritten this
way; larger products stay matrix products. Only the summation order changes (round-off level).

It is applied to the residual and to the Newton update of every scheme by the time loop
(:func:`livens.engine.step_options`), not to ensembles nor to :func:`livens.flow` (batched, the matrix
products are faster). The limit, 2048 entries (``python -m benchmarks`` compares limits), takes in the
products of a heavy-top step (d = 12) and leaves those of larger systems as matrix products, where
XLA would recompute the fused sums (a chain of 32 pendulums, d = 96). Set the environment variable
``LIVENS_FUSE_DOTS=0`` to switch it off (e.g. to compare), or to an integer to choose the limit; if a
jaxpr holds something the rewrite does not know, the function is used unchanged.

The same rewrite evaluates operations on constants only at trace time, with NumPy: jnp's index
arithmetic in front of every ``x[idx]`` with a constant index array, repeated by AD for each
derivative, which XLA on a CPU runs as operations of their own at every call. :func:`fold_constants`
does only that (ensembles, where small matrix products are better kept as they are).
"""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

DEFAULT_LIMIT = 2048
_CALLS = ("pjit", "jit", "closed_call", "core_call")


def enabled() -> bool:
    """False when ``LIVENS_FUSE_DOTS`` is set to 0/false/no/off."""
    return os.environ.get("LIVENS_FUSE_DOTS", "1").strip().lower() not in ("0", "false", "no", "off")


def _env_limit(default: int) -> int:
    """``LIVENS_FUSE_DOTS`` may also give the size limit itself (an integer > 1)."""
    value = os.environ.get("LIVENS_FUSE_DOTS", "").strip()
    return int(value) if value.isdigit() and int(value) > 1 else default


def _product_size(lhs, rhs, dimension_numbers) -> int:
    (lc, rc), (lb, rb) = dimension_numbers
    lfree = [lhs.shape[i] for i in range(lhs.ndim) if i not in lc and i not in lb]
    rfree = [rhs.shape[i] for i in range(rhs.ndim) if i not in rc and i not in rb]
    return int(math.prod([lhs.shape[i] for i in lb] + lfree + [lhs.shape[i] for i in lc] + rfree))


def _dot_as_sum(lhs, rhs, dimension_numbers, preferred_element_type=None, **_):
    """dot_general(lhs, rhs) as sum(broadcast(lhs) * broadcast(rhs)) over the contracted axes."""
    (lc, rc), (lb, rb) = dimension_numbers
    lfree = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
    rfree = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
    L = jnp.transpose(lhs, list(lb) + lfree + list(lc))  # batch, lhs free, contracted
    R = jnp.transpose(rhs, list(rb) + list(rc) + rfree)  # batch, contracted, rhs free
    nb, nlf, nc, nrf = len(lb), len(lfree), len(lc), len(rfree)
    L = L.reshape(L.shape + (1,) * nrf)
    R = R.reshape(R.shape[:nb] + (1,) * nlf + R.shape[nb:])
    out = jnp.sum(L * R, axis=tuple(range(nb + nlf, nb + nlf + nc)))
    if preferred_element_type is not None:
        out = out.astype(preferred_element_type)
    return out


# --- index arithmetic on constants ------------------------------------------------------------
# jnp puts index arithmetic in front of every x[idx] with a constant index array (negative-index
# normalization: add, select_n, convert, broadcast), and AD repeats it for each derivative. XLA on
# a CPU runs these as operations of their own at every call; they are evaluated once,
# at trace time, with NumPy.


def _ufunc(f):
    return lambda *xs, **_: f(*xs)


_FOLD = {  # primitive -> NumPy implementation (operands, **primitive parameters)
    **{
        name: _ufunc(f)
        for name, f in {
            "add": np.add,
            "sub": np.subtract,
            "mul": np.multiply,
            "neg": np.negative,
            "max": np.maximum,
            "min": np.minimum,
            "rem": np.remainder,
            "lt": np.less,
            "le": np.less_equal,
            "gt": np.greater,
            "ge": np.greater_equal,
            "eq": np.equal,
            "ne": np.not_equal,
            "and": np.logical_and,
            "or": np.logical_or,
            "not": np.logical_not,
        }.items()
    },
    "select_n": lambda which, *cases, **_: np.choose(np.asarray(which, dtype=int), cases),
    "convert_element_type": lambda x, new_dtype, **_: np.asarray(x).astype(new_dtype),
    "broadcast_in_dim": lambda x, shape, broadcast_dimensions, **_: np.broadcast_to(
        np.expand_dims(x, tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)), shape
    ),
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "reshape": lambda x, new_sizes, **_: np.reshape(x, new_sizes),
    "squeeze": lambda x, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "expand_dims": lambda x, dimensions, **_: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, permutation, **_: np.transpose(x, permutation),
    "iota": lambda *, dtype, shape, dimension, **_: np.broadcast_to(
        np.arange(shape[dimension], dtype=dtype).reshape([-1 if i == dimension else 1 for i in range(len(shape))]),
        shape,
    ),
}
_FOLD_MAX = 1 << 16  # entries: fold only index-sized arrays


def _constant(x):
    """x as a NumPy array if it is a trace-time constant (not a tracer), else None."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x)
    except Exception:  # noqa: BLE001 (an abstract value)
        return None


def _fold(eqn, invals):
    """The output of an operation on constants only (index arithmetic, the identity matrices of
    AD), by NumPy (exact: no rounding in these operations); None otherwise."""
    fn = _FOLD.get(eqn.primitive.name)
    if fn is None or eqn.primitive.multiple_results:
        return None
    out = eqn.outvars[0].aval
    if math.prod(out.shape) > _FOLD_MAX:
        return None
    consts = [_constant(x) for x in invals]
    if any(c is None for c in consts):
        return None
    try:
        res = np.asarray(fn(*consts, **eqn.params)).astype(out.dtype)
    except Exception:  # noqa: BLE001 (a parameter this table does not know: leave it to JAX)
        return None
    return [res] if res.shape == tuple(out.shape) else None


def _eval(jaxpr, consts, args, limit):
    from jax.extend import core as jcore

    env = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if (
            name == "dot_general"
            and all(jnp.issubdtype(x.dtype, jnp.floating) for x in invals)
            and _product_size(invals[0], invals[1], eqn.params["dimension_numbers"]) <= limit
        ):
            outs = [_dot_as_sum(*invals, **eqn.params)]
        elif (folded := _fold(eqn, invals)) is not None:
            outs = folded
        elif name in ("pjit", "jit") and _kept_call(eqn.params.get("jaxpr"), invals):
            outs = _rewritten_call(eqn.params["jaxpr"], limit)(*invals)
        elif name in _CALLS and "jaxpr" in eqn.params:
            closed = eqn.params["jaxpr"]
            outs = _eval(closed.jaxpr, closed.consts, invals, limit)
        else:
            params = eqn.primitive.get_bind_params(eqn.params)
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*invals, **params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


_CALLED: dict = {}  # id of a called jaxpr -> (the jaxpr, its rewritten function, jitted)
_CALLED_MAX = 256
KEPT_CALL_EQUATIONS = 60
"""A ``jit`` call whose jaxpr holds at least this many equations (its sub-jaxprs' included) and
whose arguments are all traced stays a call (:func:`_rewritten_call`); a smaller one (jnp's
helpers) or one with a constant argument (an index array, which the rewrite then folds) is
evaluated in line."""


def _kept_call(closed, invals) -> bool:
    from jax.extend import core as jcore

    from .jaxprs import size

    if not isinstance(closed, jcore.ClosedJaxpr) or any(_constant(x) is not None for x in invals):
        return False
    return size(closed.jaxpr, KEPT_CALL_EQUATIONS) >= KEPT_CALL_EQUATIONS


def _rewritten_call(closed, limit: int):
    """The rewritten function of the jaxpr of a ``jit`` call, itself called through ``jax.jit``: the
    program keeps the call (the native translator writes a function called at several places
    once: :mod:`livens.engine.native.codegen`), and the same jaxpr gives the same function, whose trace
    JAX reuses, so that every call of it in the rewritten program shares one jaxpr too."""
    key = (id(closed), limit)
    hit = _CALLED.get(key)
    if hit is not None and hit[0] is closed:
        return hit[1]
    if len(_CALLED) >= _CALLED_MAX:
        _CALLED.clear()

    def call(*args):
        return _eval(closed.jaxpr, closed.consts, args, limit)

    fn = jax.jit(call)
    _CALLED[key] = (closed, fn)
    return fn


def fuse_small_dots(fn, limit: int = DEFAULT_LIMIT):
    """``fn`` with its small floating-point matrix products written as fusible sums (see module doc),
    and its index arithmetic on constants folded (:func:`fold_constants`).

    The result is the same function up to round-off; it must be called with arrays (pytrees of
    arrays) and is meant to be traced by ``jax.jit``. Off when ``LIVENS_FUSE_DOTS=0``.
    """
    if not enabled() or limit <= 0:
        return fn
    return _rewritten(fn, _env_limit(limit))


def fold_constants(fn):
    """``fn`` with integer and boolean operations on constants (jnp's index arithmetic) evaluated
    at trace time, its matrix products left as they are: the rewrite for batched (vmapped)
    steps, where small matrix products are better kept (ensembles). Off when ``LIVENS_FUSE_DOTS=0``."""
    if not enabled():
        return fn
    return _rewritten(fn, 0)


def _rewritten(fn, limit: int):
    traced: dict = {}  # the jaxpr per argument signature: a function evaluated several times in one
    # step (e.g. the residual at two first guesses and in the Newton loop) is traced once

    @functools.wraps(fn)
    def rewritten(*args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        key = (tree, tuple((jnp.shape(a), jnp.result_type(a)) for a in leaves))
        try:
            closed, shape = traced[key] if key in traced else jax.make_jaxpr(fn, return_shape=True)(*args)
        except Exception:  # let the original report its own error
            return fn(*args)
        traced[key] = (closed, shape)
        flat = jax.tree_util.tree_leaves(args)
        try:
            outs = _eval(closed.jaxpr, closed.consts, flat, limit)
        except Exception:  # an unknown construct: run the function as written
            return fn(*args)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), outs)

    return rewritten


__all__ = ["fuse_small_dots", "fold_constants", "enabled", "DEFAULT_LIMIT"]
