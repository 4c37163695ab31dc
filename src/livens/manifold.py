"""The projection of an initial state onto the constraint manifold, as a JAX function with its
derivative by the implicit function theorem.

Every scheme starts from a consistent state: g(q_0) = 0 and G(q_0) v_0 = 0 (KBS23b eq 29, SLO09
eq 15 hold them at the first node). :func:`project` maps a given (q0, v0) to such a state:

- q = q0 + G(q0)^T mu with g(q) = 0: the correction along the normal space at q0 (the
  minimum-norm direction of a Gauss-Newton step), mu found by Newton's method in its m unknowns
  (matrix G(q) G(q0)^T) and differentiated implicitly (:func:`livens.solvers.newton.implicit`:
  one m x m solve per derivative, never the iterations);
- v the point of G(q) v = 0 nearest to v0 in the metric A: the saddle-point system
  [A G^T; G 0] [v; nu] = [A v0; 0] with A = M(q) where M is regular (the M-orthogonal projection,
  which changes the kinetic energy least), else A = I, solved as v = v0 - A^-1 G^T nu with nu of least
  norm, so that a singular configuration (rank G(q) < m) keeps a consistent v0.

At a consistent (q0, v0) the projection is the identity, and its derivative is the projection of
a direction onto the tangent space of the manifold (q) and the matching change of v: derivatives of
a run through it are derivatives along consistent starts. The System's parameters enter through
``mech.bind`` (traced values allowed), so the manifold is that of the values of the call.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import _jaxconfig  # noqa: F401
from .solvers.newton import PlainNewton, implicit, newton_increment

PINV_RTOL = 1e-12
"""Eigenvalues of G A^-1 G^T below PINV_RTOL times the largest count as zero in the velocity projection
(a singular configuration: zero up to round-off; a configuration a step h away: about h^2)."""

FLOOR = 1e-12
"""A residual ||g(q)||_inf below FLOOR (1 + |q0|_inf)^2 that Newton's iteration no longer halves
counts as converged (the round-off of g, which may exceed ``tol``)."""


class Projection(NamedTuple):
    """The consistent state (q, v), whether the position projection converged, ||g(q)||_inf and
    ||G(q) v||_inf, and Newton's iterations."""

    q: jax.Array
    v: jax.Array
    converged: jax.Array
    residual: jax.Array
    velocity_residual: jax.Array
    iterations: jax.Array


def regular_mass(mech, q):
    """The metric of the velocity projection: M(q) where M is regular, else the identity. Static
    for a constant M (``mech.Minv_const``); for a configuration-dependent M decided by its
    eigenvalues at q (smallest above 1e-12 times the largest), as a traced choice."""
    d = mech.d
    eye = jnp.eye(d, dtype=q.dtype)
    if mech.constant_mass:
        return jnp.asarray(mech.M_const, q.dtype) if mech.Minv_const is not None else eye
    M = mech.M(q)
    w = jnp.linalg.eigvalsh(jax.lax.stop_gradient(M))
    regular = w[0] > 1e-12 * jnp.maximum(1.0, jnp.max(jnp.abs(w)))
    return jnp.where(regular, M, eye)


def project(mech, q0, v0, tol=1e-14, max_iter: int = 50) -> Projection:
    """(q0, v0) projected onto g(q) = 0, G(q) v = 0 (module docstring); pure and traceable
    (``jit``, ``grad``, ``vmap``). ``mech``: a Mechanics bound to the parameter values of the call.
    ``tol``: the target ||g(q)||_inf (a residual at round-off that stops decreasing also counts,
    :data:`FLOOR`); ``max_iter``: Newton iterations. Where the iteration does not converge (q0 too
    far from the manifold), ``converged`` is False and q, v are NaN."""
    q0 = jnp.asarray(q0, jnp.float64)
    v0 = jnp.asarray(v0, jnp.float64)
    m = mech.m
    if m == 0:
        z = jnp.zeros((), q0.dtype)
        return Projection(q0, v0, jnp.bool_(True), z, z, jnp.int32(0))
    normal = mech.G(q0).T  # (d, m): the directions of the correction, fixed at q0

    def residual(mu):
        return mech.g(q0 + normal @ mu)

    floor = FLOOR * (1.0 + jnp.max(jnp.abs(jax.lax.stop_gradient(q0)))) ** 2
    newton = PlainNewton(floor=floor)

    def solve(f, mu0):
        return newton.solve(f, mu0, tol, max_iter, newton_increment(f))

    res = implicit(solve, residual, jnp.zeros((m,), q0.dtype))
    q = q0 + normal @ res.x
    ok = res.converged & jnp.all(jnp.isfinite(q))
    G = mech.G(q)
    A = regular_mass(mech, q)
    # v = v0 - A^-1 G^T y with G A^-1 G^T y = G v0: the saddle-point system's solution, with y of least
    # norm where G(q) loses rank (a singular configuration, :mod:`livens.redundancy`)
    AiGT = jnp.linalg.solve(A, G.T)
    y = jnp.linalg.pinv(G @ AiGT, rtol=PINV_RTOL, hermitian=True) @ (G @ v0)
    v = v0 - AiGT @ y
    nan = jnp.asarray(jnp.nan, q.dtype)
    q, v = jnp.where(ok, q, nan), jnp.where(ok, v, nan)
    resid = jnp.max(jnp.abs(mech.g(q)))
    return Projection(q, v, ok, jnp.where(ok, resid, res.residual), jnp.max(jnp.abs(G @ v)), res.iterations)


__all__ = ["Projection", "project", "regular_mass"]
