"""Consistent initial states: :func:`consistent_initial_state` projects a given (q0, v0) onto the
constraint manifold, g(q) = 0 and G(q) v = 0 (the consistent start every scheme assumes: KBS23b
eq 29, SLO09 eq 15), by :func:`livens.manifold.project`, compiled once per Mechanics; on concrete
values, where the normal space at q0 misses the manifold, minimum-norm Gauss-Newton steps bring q0
near it first, and an overconstrained system is projected with an independent subset of its
equations (:func:`livens.redundancy.independent_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache
from .validation import _as_vector

if TYPE_CHECKING:  # annotations only: Mechanics is imported where it is used, so that this module's
    # namespace (no __all__) holds only its own functions
    from .system import System


def consistent_initial_state(
    system: System,
    q0: ArrayLike,
    v0: ArrayLike,
    tol: float = 1e-14,
    max_iter: int = 50,
    parameters: Mapping[str, ArrayLike] | None = None,
) -> tuple[np.ndarray, np.ndarray] | tuple[jax.Array, jax.Array]:
    """Project (q0, v0) onto the constraint manifold of ``system`` with the parameter values
    ``parameters`` (a dict; missing ones take the System's defaults; traced values allowed).

    q0 is moved onto g(q) = 0 along the normal space at q0 (q = q0 + G(q0)^T mu, Newton's method
    on mu to ||g||_inf <= ``tol``, or to round-off), and v0 M-orthogonally onto G(q) v = 0 where M is
    regular (Euclidean otherwise): :func:`livens.manifold.project`. A JAX function: ``jax.jit``,
    ``jax.grad`` (by the implicit function theorem) and ``jax.vmap`` work through it, and return
    JAX arrays (q, v) there, NaN where q0 is too far from the manifold for Newton's method. On
    concrete values it returns NumPy arrays (q, v); where the normal space at q0 does not reach the
    manifold, q0 first takes minimum-norm Gauss-Newton steps (the normal space renewed at each
    iterate), and ``ValueError`` is raised only if those fail too.

    system: the :class:`livens.System` whose constraints g(q) = 0 define the manifold.
    q0, v0: the configuration and the velocity to project, vectors of shape (d,).
    tol: the target ||g(q)||_inf of the projected configuration (a residual at round-off that stops
        decreasing also counts as converged).
    max_iter: the most Newton iterations of the projection (and of the Gauss-Newton steps); the
        ``ValueError`` of a projection that does not converge names it.
    parameters: values of the System's parameters (missing ones take the System's defaults).
    """
    from .manifold import project
    from .mechanics import mechanics

    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((q0, v0, parameters)))
    if traced:
        q, v = jnp.asarray(q0, jnp.float64), jnp.asarray(v0, jnp.float64)
        if q.ndim != 1 or v.shape != q.shape:
            raise ValueError(f"q0 and v0 must be vectors of the same shape (d,); got {q.shape} and {v.shape}.")
    else:
        q = _as_vector("q0", q0)
        v = _as_vector("v0", v0, q.shape[0])
    if system.constraints is None:
        return (q, v) if traced else (np.asarray(q, float), np.asarray(v, float))
    mech = mechanics(system, np.zeros(q.shape))
    if system.parameters is None and parameters:
        raise ValueError("This System has no parameters; call consistent_initial_state without parameters.")
    values = None
    if system.parameters is not None:
        values = {k: jnp.asarray(val, jnp.float64) for k, val in system.parameters.items()}
        for k, val in (parameters or {}).items():
            if k not in values:
                raise ValueError(f"Unknown parameter {k!r}; the System's parameters: {', '.join(values)}.")
            values[k] = jnp.asarray(val, jnp.float64)
    if traced:
        out = project(mech.bind(values), q, v, tol, max_iter)
        return out.q, out.v
    project_compiled = _projection(mech, float(tol), int(max_iter))
    out = project_compiled(jnp.asarray(q), jnp.asarray(v), values)
    if not bool(out.converged):
        # far from the manifold the normal space at q0 may miss it: minimum-norm Gauss-Newton steps,
        # the normal space renewed at each iterate, bring q0 near it, and the projection ends there
        near = _gauss_newton(mech.bind(values), np.asarray(q, float), max_iter)
        if near is not None:
            # an overconstrained system: the projection solves with an independent subset of g
            independent_mech = _independent_mechanics(system, mech, near, values)
            out = _projection(independent_mech, float(tol), int(max_iter))(jnp.asarray(near), jnp.asarray(v), values)
    if not bool(out.converged):
        raise ValueError(
            f"consistent_initial_state: could not project q0 onto g(q) = 0 in {max_iter} Newton iterations "
            f"(max |g| = {float(out.residual):.3e}); start closer to the constraint manifold."
        )
    return np.array(out.q), np.array(out.v)


_PROJECTIONS = CompiledCache(16)


def _independent_mechanics(system: System, mech, q: np.ndarray, values):
    """The Mechanics of ``system`` with an independent subset of its equations at ``q`` (near the
    manifold; :func:`livens.redundancy.independent_rows`), ``mech`` itself where G(q) has full rank."""
    from .mechanics import mechanics
    from .redundancy import ConstraintRank, independent, independent_rows, rank_of

    G = np.asarray(jax.jit(lambda x, par: mech.bind(par).G(x))(jnp.asarray(q), values))
    r = rank_of(G)
    if r == mech.m:
        return mech
    kept = independent_rows(G, r)
    labels = tuple(f"g[{k}]" for k in range(mech.m))
    rank = ConstraintRank(mech.m, r, r, kept, tuple(k for k in range(mech.m) if k not in kept), labels)
    return mechanics(independent(system, rank), q)


def _gauss_newton(mech, q: np.ndarray, max_iter: int) -> np.ndarray | None:
    """q moved near g(q) = 0 by minimum-norm Gauss-Newton steps q <- q - G(q)^+ g(q) (the normal
    space renewed at each iterate); None where g is not finite or the steps do not get there."""
    g, G = jax.jit(mech.g), jax.jit(mech.G)
    for _ in range(max_iter):
        r = np.asarray(g(q))
        if not np.all(np.isfinite(r)):
            return None
        if np.max(np.abs(r), initial=0.0) <= 1e-10 * (1.0 + np.max(np.abs(q))) ** 2:
            return q
        q = q - np.linalg.lstsq(np.asarray(G(q)), r, rcond=None)[0]
    return None


def _projection(mech, tol: float, max_iter: int):
    """:func:`livens.manifold.project` for ``mech`` compiled once (per Mechanics, tol and max_iter)."""
    from .manifold import project

    key = (id(mech), tol, max_iter)
    hit = _PROJECTIONS.get(key)
    if hit is not None and hit[0] is mech:
        return hit[1]
    fn = jax.jit(lambda q, v, values: project(mech.bind(values), q, v, tol, max_iter))
    _PROJECTIONS[key] = (mech, fn)
    return fn
