"""Rewrite small matrix products as fusible elementwise products and sums (issue 7: speed).

XLA on a CPU launches every ``dot_general`` as an operation of its own, at a cost of about
0.2 us, however small the matrices; the residual and tangent of a scheme for a system of a dozen
coordinates hold a hundred such products (AD of the users' g(q) multiplies them). Written as a
broadcast product and a sum, the same contraction is fused by XLA with the elementwise work
around it. :func:`fuse_small_dots` traces a function to its jaxpr and evaluates it again with every
floating-point ``dot_general`` whose product tensor has at most ``limit`` entries rewritten this
way; larger products stay matrix products. Only the summation order changes (round-off level).

It is applied to the residual and to the Newton update of every scheme by the time loop
(:func:`livens.simulate._make_runner`), not to ensembles (batched, the matrix products are
faster). The limit of 2048 entries is measured: it halves the cost of a heavy-top step (d = 12)
and leaves larger systems as they were, while 4096 made a chain of 32 pendulums (d = 96) six
times slower (XLA recomputes fused sums). Set the environment variable ``LIVENS_FUSE_DOTS=0`` to
switch it off (e.g. to compare), or to an integer to choose the limit; if a jaxpr holds something
the rewrite does not know, the function is used unchanged.
"""
from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp

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


def fuse_small_dots(fn, limit: int = DEFAULT_LIMIT):
    """``fn`` with its small floating-point matrix products written as fusible sums (see module doc).

    The result is the same function up to round-off; it must be called with arrays (pytrees of
    arrays) and is meant to be traced by ``jax.jit``. Off when ``LIVENS_FUSE_DOTS=0``.
    """
    if not enabled() or limit <= 0:
        return fn
    limit = _env_limit(limit)

    traced: dict = {}  # the jaxpr per argument signature: a function evaluated several times in one
    # step (e.g. the residual at two first guesses and in the Newton loop) is traced once

    @functools.wraps(fn)
    def fused(*args):
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

    return fused


__all__ = ["fuse_small_dots", "enabled", "DEFAULT_LIMIT"]
