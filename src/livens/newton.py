"""Newton's method for one time step, jit-compiled inside the time loop (002 §6: tol 1e-9).

The tangent is the exact derivative of the residual by forward-mode AD (third derivatives of g
included where the residual holds Hessian-vector products), unless the scheme supplies a
structured tangent (tested against AD). Stops on ||R||_inf <= tol or at max_iter.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from . import _jaxconfig  # noqa: F401


class NewtonResult(NamedTuple):
    x: jax.Array
    iterations: jax.Array  # int32
    residual: jax.Array  # ||R||_inf at the returned x
    converged: jax.Array  # bool


def newton(residual: Callable, x0, tol, max_iter, tangent: Callable | None = None) -> NewtonResult:
    """Solve residual(x) = 0 from x0; ``tol`` and ``max_iter`` may be traced values.

    ``tangent(x)`` returns dR/dx; by default ``jax.jacfwd(residual)``.
    """
    jac = tangent if tangent is not None else jax.jacfwd(residual)

    def norm(r):
        return jnp.max(jnp.abs(r)) if r.size else jnp.zeros((), r.dtype)

    r0 = residual(x0)

    def cond(c):
        x, r, it = c
        n = norm(r)
        return (it < max_iter) & ~(n <= tol) & jnp.isfinite(n)

    def body(c):
        x, r, it = c
        dx = jnp.linalg.solve(jac(x), -r)
        x = x + dx
        return x, residual(x), it + 1

    x, r, it = lax.while_loop(cond, body, (x0, r0, jnp.int32(0)))
    n = norm(r)
    return NewtonResult(x, it, n, (n <= tol) & jnp.all(jnp.isfinite(x)))
