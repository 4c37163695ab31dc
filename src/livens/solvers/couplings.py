"""Scalars that couple every unknown of a residual, marked so that a tangent can keep its band.

A discrete gradient in the sense of Gonzalez (KB23 eq 26) is the midpoint gradient plus a
correction c dx, where the quotient c = (f(x1) - f(x0) - Df(x_m).dx) / |dx|^2 is computed from
the whole state. The residual of an energy-consistent scheme on a beam or a chain is otherwise
local (each equation involves a few neighbouring unknowns), but the derivative of c dx adds
dx (dc/dx)^T to its tangent: a rank-one matrix that fills the band. Written as

    R(x) = R_c(x, c(x)),   dR/dx = dR_c/dx + (dR_c/dc) (dc/dx),

the tangent is the band dR_c/dx (c held fixed) plus a matrix of rank k, the number of such
scalars: a band solve and a k x k system (Sherman-Morrison-Woodbury) give its exact inverse
(:mod:`livens.solvers.tangent`).

:func:`coupling` marks such a scalar (or array of them) where it is computed; outside
:func:`split` it is the identity and costs nothing. :func:`split` turns a residual into R_c and c.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

import jax.numpy as jnp

_LOCAL = threading.local()  # each thread traces its own residuals


def _handlers() -> list:
    if not hasattr(_LOCAL, "handlers"):
        _LOCAL.handlers = []
    return _LOCAL.handlers


def coupling(c):
    """``c``, marked as a value computed from the whole state whose derivative the tangent
    treats as a low-rank term (module docstring). The identity outside :func:`split`."""
    handlers = _handlers()
    if handlers:
        return handlers[-1](c)
    return c


@contextlib.contextmanager
def _handled(handler):
    handlers = _handlers()
    handlers.append(handler)
    try:
        yield
    finally:
        handlers.pop()


def split(residual: Callable) -> tuple[Callable, Callable]:
    """(R_c, c) for a residual ``R(x)``: ``c(x)`` the marked values of R at x, flattened into one
    vector (length k, 0 where R marks none), and ``R_c(x, c)`` R at x with the marked values
    replaced by the entries of ``c`` (module docstring). Both trace ``residual`` once per call;
    they must see the same marks in the same order (a residual whose marks depend on values,
    not on shapes, is not supported)."""

    def values(x):
        found = []

        def record(c):
            found.append(jnp.ravel(jnp.asarray(c)))
            return c

        with _handled(record):
            residual(x)
        return jnp.concatenate(found) if found else jnp.zeros((0,), x.dtype)

    def frozen(x, c):
        position = [0]

        def substitute(value):
            value = jnp.asarray(value)
            i, n = position[0], value.size
            position[0] += n
            return jnp.reshape(c[i : i + n], value.shape).astype(value.dtype)

        with _handled(substitute):
            out = residual(x)
        if position[0] != c.shape[0]:
            raise ValueError(f"the residual marked {position[0]} coupling values, {c.shape[0]} were given")
        return out

    return frozen, values
