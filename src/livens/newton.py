"""Newton's method for one time step, jit-compiled inside the time loop (002 §6: tol 1e-9).

The tangent is the exact derivative of the residual by forward-mode AD (third derivatives of g
included where the residual holds Hessian-vector products), unless the scheme supplies a
structured tangent (tested against AD). Stops on ||R||_inf <= tol or at max_iter.

A tangent is either the matrix dR/dx or an object with a ``solve(rhs)`` method that applies its
inverse (e.g. by block elimination, see :mod:`livens.schemes.ggl_vi`); both give the same Newton
iterates up to round-off. The time loop passes the update as one function ``linear_step(x, r)``
(the increment -dR/dx(x)^-1 r), so that it can be compiled as a whole (:mod:`livens._fusion`).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from . import _jaxconfig  # noqa: F401
from ._linalg import solve as _dense_solve


class NewtonResult(NamedTuple):
    x: jax.Array
    iterations: jax.Array  # int32
    residual: jax.Array  # ||R||_inf at the returned x
    converged: jax.Array  # bool


def apply_inverse(J, rhs):
    """J^-1 rhs for a tangent J: a matrix (LU with partial pivoting) or an object with ``solve``."""
    if hasattr(J, "solve"):
        return J.solve(rhs)
    return _dense_solve(J, rhs)


def newton_increment(residual: Callable, tangent: Callable | None = None) -> Callable:
    """The function (x, r) -> -dR/dx(x)^-1 r; dR/dx by ``tangent`` or by ``jax.jacfwd(residual)``."""
    jac = tangent if tangent is not None else jax.jacfwd(residual)
    return lambda x, r: apply_inverse(jac(x), -r)


def newton(residual: Callable, x0, tol, max_iter, tangent: Callable | None = None,
           linear_step: Callable | None = None) -> NewtonResult:
    """Solve residual(x) = 0 from x0; ``tol`` and ``max_iter`` may be traced values.

    ``tangent(x)`` returns dR/dx (a matrix or an object with ``solve``); by default
    ``jax.jacfwd(residual)``. ``linear_step(x, r)``, when given, returns the Newton increment
    itself and replaces ``tangent``.
    """
    step = linear_step if linear_step is not None else newton_increment(residual, tangent)

    def norm(r):
        return jnp.max(jnp.abs(r)) if r.size else jnp.zeros((), r.dtype)

    r0 = residual(x0)

    def cond(c):
        x, r, it = c
        n = norm(r)
        return (it < max_iter) & ~(n <= tol) & jnp.isfinite(n)

    def body(c):
        x, r, it = c
        x = x + step(x, r)
        return x, residual(x), it + 1

    x, r, it = lax.while_loop(cond, body, (x0, r0, jnp.int32(0)))
    n = norm(r)
    return NewtonResult(x, it, n, (n <= tol) & jnp.all(jnp.isfinite(x)))
