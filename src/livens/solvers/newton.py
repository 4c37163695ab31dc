"""Newton's method for one time step, jit-compiled inside the time loop (KBS23b §6: tol 1e-9).

The tangent is the exact derivative of the residual by forward-mode AD (third derivatives of g
included where the residual holds Hessian-vector products), unless the scheme supplies a
structured tangent (tested against AD). Stops on ||R||_inf <= tol (livens' default rule also on a
residual that stalled at its round-off floor: within :data:`FLOOR_FACTOR` tol times the scale of the
step's terms, :func:`relative_floor`) or at max_iter.

A tangent is either the matrix dR/dx or an object with a ``solve(rhs)`` method that applies its
inverse (e.g. by block elimination, see :mod:`livens.schemes.ggl_vi`); both give the same Newton
iterates up to round-off. The time loop passes the update as one function ``linear_step(x, r)``
(the increment -dR/dx(x)^-1 r), so that it can be compiled as a whole (:mod:`livens.engine.small_products`).
:func:`newton_linearized` is the same iteration for residuals whose derivative repeats their own
work (the null space method's projection): R and dR/dx from one linearization per iterate.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as _jcore

from .. import _jaxconfig  # noqa: F401
from .dense import solve as _dense_solve
from .tangent import Dense, LowRankUpdate


class NewtonResult(NamedTuple):
    x: jax.Array
    iterations: jax.Array  # int32
    residual: jax.Array  # ||R||_inf at the returned x
    converged: jax.Array  # bool


def _norm_inf(r):
    """||r||_inf (0 for an empty residual)."""
    return jnp.max(jnp.abs(r)) if r.size else jnp.zeros((), r.dtype)


def apply_inverse(J, rhs):
    """J^-1 rhs for a tangent J: a matrix (LU with partial pivoting) or an object with ``solve``."""
    if hasattr(J, "solve"):
        return J.solve(rhs)
    return _dense_solve(J, rhs)


def newton_increment(residual: Callable, tangent: Callable | None = None) -> Callable:
    """The function (x, r) -> -dR/dx(x)^-1 r; dR/dx by ``tangent`` or by ``jax.jacfwd(residual)``."""
    jac = tangent if tangent is not None else jax.jacfwd(residual)
    return lambda x, r: apply_inverse(jac(x), -r)


def has_product(J) -> bool:
    """Whether :func:`tangent_product` gives J v for the tangent J (not None), known without forming it."""
    if isinstance(J, LowRankUpdate):
        return has_product(J.base)
    return isinstance(J, Dense) or hasattr(J, "matvec") or not hasattr(J, "solve")


def tangent_product(J, v):
    """J v for a tangent J as :func:`apply_inverse` takes it: a matrix, a dense or band tangent, or a
    band plus a term of low rank (:mod:`livens.solvers.tangent`); None for a tangent that applies its
    inverse only (a scheme's block elimination), where the product would cost a program of its own."""
    if not has_product(J):
        return None
    if isinstance(J, LowRankUpdate):
        return tangent_product(J.base, v) + J.U @ (J.Vt @ v)
    if isinstance(J, Dense):
        return J.A @ v
    if hasattr(J, "matvec"):
        return J.matvec(v)
    return J @ v


def scaled_increment(residual: Callable, tangent: Callable | None = None) -> Callable:
    """:func:`newton_increment` that also gives the scale of livens' default floor: the function
    (x, r, first=True) -> (-dR/dx(x)^-1 r, ||dR/dx(x) x||_inf), the norm from the tangent the increment
    solves with (:func:`tangent_product`, one product with the matrix, no derivative of its own), or None
    in its place where the tangent has no product. ``first`` (a traced bool): the norm is computed only
    where it holds (a branch), else 0: :func:`newton` keeps the first iteration's, at x0, the scale
    ||J(x0) x0||_inf of :func:`relative_floor`, as :func:`linear_terms` gives it to round-off, and asks
    for no product at the iterations after it."""
    jac = tangent if tangent is not None else jax.jacfwd(residual)

    def step(x, r, first=True):
        J = jac(x)
        dx = apply_inverse(J, -r)
        if not has_product(J):
            return dx, None
        if first is True:
            return dx, _norm_inf(tangent_product(J, x))
        return dx, lax.cond(first, lambda: _norm_inf(tangent_product(J, x)), lambda: jnp.zeros((), x.dtype))

    return step


ROUNDOFF = "roundoff"
"""The stopping rule without a tolerance (:func:`newton` with ``stopping=ROUNDOFF``)."""

ULPS = 4
"""An increment below ULPS units in the last place of the state ends the round-off iteration."""

ACCEPT = 1e-10
"""An increment that stops decreasing ends the round-off iteration only once the increments are
below ACCEPT (1 + |x|_inf): earlier, Newton's increments need not decrease monotonically."""


FLOOR_FACTOR = 1e4
"""livens' default stopping rule (``floor_factor`` of :func:`newton`): a residual that stopped halving
at most FLOOR_FACTOR tol (1 + s), s the size of the step's terms (:func:`relative_floor`), after an
increment below the guard :data:`FLOOR_STEP`, has reached its round-off floor and counts as converged.
In sweeps of livens-em on a forced double pendulum (h from 1e-4 to 1, masses from 1 kg to 10 t) its
floor reached 190 tol (1 + s) at the flow's tol = 1e-12 (its discrete gradient divides round-off by
increments of about 1e-6 |q|); a stall that is not round-off lay at 6e5 tol (1 + s) and above (and
moved the unknowns by far more than the guard)."""

FLOOR_STEP = 1e-3
"""The default rule's guard (:func:`relative_floor`): the floor counts only after a Newton increment
below FLOOR_STEP (1 + min(||x0||_inf, ||x||_inf)), x0 the first guess and x the iterate it reached.
At a round-off floor the increments are round-off of the unknowns (at most about 2e-6 of their size
in sweeps of livens-em on a forced double pendulum, h from 1e-4 to 1, masses from 1 kg to 10 t); an
iteration that does not halve the residual far from the root moves them by 2e-2 of their size and
more, and so does one whose unknowns run away (x) or come back from a first guess that had run away
(x0: the multipliers after a step where the constraints lost rank)."""


def linear_terms(residual: Callable, x0):
    """||J(x0) x0||_inf, J = dR/dx: the size of the residual's terms that are linear in the unknowns
    (M v, h G^T lambda, ...) at the first guess x0, one forward-mode derivative. Where the constraints
    lose rank the multipliers may be huge while G^T lambda is not: the product, not x0, is the scale."""
    return _norm_inf(jax.jvp(residual, (x0,), (x0,))[1])


def relative_floor(dx_norm, tol, factor, scale, x_scale):
    """The residual norm below which livens' default rule takes a stalled iteration as converged,
    after an increment of norm ``dx_norm``: ``factor`` tol (1 + ``scale``), a tolerance relative to the
    size s = ``scale`` of the step's terms, max(||R(x0)||_inf, ||J(x0) x0||_inf) (:func:`linear_terms`),
    or -inf (no floor) where the increment was not below :data:`FLOOR_STEP` (1 + ``x_scale``),
    ``x_scale`` = min(||x0||_inf, ||x||_inf) at the iterate x it reached. The size of the terms is the
    step's start's, never the iterates': unknowns that run away must not raise the floor; a first guess
    that ran away (huge multipliers after a step where the constraints lost rank) raises it, and the
    increments that bring it back are not below the guard.

    The residual of a time step sums terms of the size of its momenta, forces and constraint forces;
    its round-off floor is a multiple of eps times them, and more where the residual divides by a
    small difference (livens-em's discrete gradient at increments of about 1e-6 |q| reaches about
    1e-10 of its terms: KB23 eq 26 made smooth in :mod:`livens.discrete_gradients`). A floor absolute
    in tol (a fixed multiple of it) fails such steps for heavy bodies, a large h or large forces: a
    forced double pendulum of 100 kg masses at the flow's tol = 1e-12 stalls at 2e-9.
    R(x0) stands for the forces where the first guess holds none (the multipliers of the first
    step, zero)."""
    guarded = dx_norm <= FLOOR_STEP * (1.0 + x_scale)
    bound = factor * tol * (1.0 + scale)
    return jnp.where(guarded, bound, jnp.asarray(-jnp.inf, jnp.result_type(bound)))


class _Relative(NamedTuple):
    """livens' default floor (:func:`relative_floor`): the tolerance, the factor, and a function that
    gives ||J(x0) x0||_inf (:func:`linear_terms`) where the iteration's increment does not give it
    (:func:`scaled_increment`), evaluated only where an iteration stalled below tol's reach (the floor
    is then needed; a step that meets tol never pays for it); R(x0) and x0 complete the scales where
    the iteration has them."""

    tol: object
    factor: float
    linear: Callable


def _floor_at(floor, x0, r0):
    """(||dx||, x, linear) -> the floor at the iterate x that an increment of that norm reached, for an
    iteration from x0 with R(x0) = r0: :func:`relative_floor` for a :class:`_Relative` floor (``linear``:
    ||J(x0) x0||_inf where the iteration has it, else None: the floor's own :func:`linear_terms`), else
    the number ``floor`` itself (an absolute floor), or -inf (none)."""
    if isinstance(floor, _Relative):

        def at(dxn, x, linear=None):
            scale = jnp.maximum(_norm_inf(r0), floor.linear() if linear is None else linear)
            return relative_floor(dxn, floor.tol, floor.factor, scale, jnp.minimum(_norm_inf(x0), _norm_inf(x)))

        return at
    value = jnp.asarray(-jnp.inf if floor is None else floor, x0.dtype)
    return lambda dxn, x, linear=None: value


def newton(
    residual: Callable,
    x0,
    tol,
    max_iter,
    tangent: Callable | None = None,
    linear_step: Callable | None = None,
    r0=None,
    stopping: str = "tol",
    final_iteration: bool = False,
    floor=None,
    floor_factor: float | None = None,
    scaled_step: bool = False,
) -> NewtonResult:
    """Solve residual(x) = 0 from x0; ``tol`` and ``max_iter`` may be traced values.

    ``tangent(x)`` returns dR/dx (a matrix or an object with ``solve``); by default
    ``jax.jacfwd(residual)``. ``linear_step(x, r)``, when given, returns the Newton increment
    itself and replaces ``tangent``; with ``scaled_step=True`` it returns the pair of
    :func:`scaled_increment` (the increment and ||dR/dx(x) x||_inf, or None), called with a third
    argument, whether the iteration is the first (the norm is needed only there). ``r0``: residual(x0),
    where the caller has it already.

    Stopping rules (static choices):

    - ``stopping="tol"`` (the papers'): stop as soon as ||R||_inf <= tol. The iterate then lies on
      the side of the root the iteration came from, the same side step after step: a bias of
      the size of the tolerance that adds up linearly over a long run. ``final_iteration=True``
      takes one more Newton step after that (its error is of the order of tol^2).
    - ``stopping="roundoff"``: no tolerance; iterate until the increment is below ULPS units in
      the last place of x, or stops decreasing once below ACCEPT (1 + |x|_inf) (that increment is
      round-off and is not applied): the rule used for long-time studies with implicit symplectic
      methods (Hairer, Lubich, Wanner, Geometric Numerical Integration, VIII.6; Hairer, McLachlan,
      Razakarivony 2008). Not converged at max_iter. ``tol`` is not used.

    ``floor`` (with ``stopping="tol"``): a residual norm that counts as converged where the
    iteration cannot do better: the iteration also stops, converged, as soon as ||R||_inf <= floor
    and an iteration did not halve ||R||_inf (it has reached the residual's round-off, which may
    exceed ``tol``, instead of iterating to ``max_iter``); a residual below the floor that still
    halves when ``max_iter`` ends the iteration is not converged. ``floor_factor`` (a static number, e.g.
    :data:`FLOOR_FACTOR`, livens' default for a time step) in place of ``floor``: a floor relative to
    the size s of the step's terms, ``floor_factor * tol * (1 + s)`` with s = max(||R(x0)||_inf,
    ||J(x0) x0||_inf), that counts only after an increment below :data:`FLOOR_STEP` (1 + min(||x0||_inf,
    ||x||_inf)) (:func:`relative_floor`). ||J(x0) x0||_inf is the product of the first iteration's
    tangent with x0 where the increment gives it (:func:`scaled_increment`: so without ``linear_step``),
    else :func:`linear_terms`, a derivative of the residual taken only where an iteration stalled.
    Near a regular root Newton's iteration more than halves the residual at each iteration (it
    converges quadratically) until the residual reaches its round-off floor, where it stops
    decreasing: an iteration that meets ||R||_inf <= tol while each iteration halves the residual
    takes the same iterates and stops where the papers' rule stops; the floor rule stops earlier
    only at an iteration that did not halve a residual already at most ``floor``, where the papers'
    rule would iterate on (and fail at ``max_iter`` if the round-off floor lies above tol). With
    ``final_iteration=True`` the one more Newton step follows either stop.
    """
    if linear_step is None:
        scaled_step = stopping == "tol" and floor is None and floor_factor is not None
        linear_step = (scaled_increment if scaled_step else newton_increment)(residual, tangent)
    step = (lambda x, r: linear_step(x, r)[0]) if scaled_step else linear_step

    r0 = residual(x0) if r0 is None else r0
    if stopping == ROUNDOFF:
        return _newton_roundoff(residual, step, x0, r0, max_iter)
    if stopping != "tol":
        raise ValueError(f"stopping must be 'tol' or {ROUNDOFF!r}; got {stopping!r}.")
    if floor is None and floor_factor is not None:
        floor = _Relative(tol, floor_factor, lambda: linear_terms(residual, x0))
    if floor is not None:
        scaled = linear_step if scaled_step else None
        return _newton_floor(residual, step, x0, r0, tol, max_iter, floor, final_iteration, scaled)

    def cond(c):
        x, r, it = c
        n = _norm_inf(r)
        return (it < max_iter) & ~(n <= tol) & jnp.isfinite(n)

    def body(c):
        x, r, it = c
        x = x + step(x, r)
        return x, residual(x), it + 1

    x, r, it = lax.while_loop(cond, body, (x0, r0, jnp.int32(0)))
    n = _norm_inf(r)
    converged = (n <= tol) & jnp.all(jnp.isfinite(x))
    if final_iteration:
        return _final_iteration(residual, step, x, r, it, converged)
    return NewtonResult(x, it, n, converged)


def newton_linearized(
    increment: Callable, x0, tol, max_iter, r0=None, floor=None, floor_factor=None, linear: Callable | None = None
) -> NewtonResult:
    """Newton's method that takes the residual and the increment at each iterate from one
    linearization: ``increment(x, it, tol, max_iter[, floor, last]) -> (x_next, R(x), it_next, stop)`` (see
    :func:`linearized_increment`; with its ``scale`` a fifth output). The papers' stopping rule
    (||R||_inf <= tol, at most ``max_iter`` updates) and the same iterates as :func:`newton`; ``r0``:
    R(x0) where the caller has it (a first guess that already satisfies the tolerance then costs
    nothing more); ``floor``: as for :func:`newton`, also stop, converged, once ||R||_inf <= floor did
    not halve (and only then: a residual below the floor that still halves at ``max_iter`` is not
    converged); ``floor_factor``: livens' default floor relative to the size of the step's terms, as
    for :func:`newton`, with ||J(x0) x0||_inf the increment's fifth output at the first pass (x = x0),
    else ``linear()`` (:func:`linear_terms`, the caller's: this function has no residual of its own;
    called only where an iteration stalls above tol), else 0.

    For residuals whose derivative repeats work of the residual itself (an inner Newton solve, as
    the projection of the null space method, whose implicit derivative needs its solution), where
    :func:`newton` evaluates the residual at x_{k+1} and then linearizes it there again."""
    inf = jnp.asarray(jnp.inf, x0.dtype)
    if floor is None and floor_factor is not None:
        floor = _Relative(tol, floor_factor, (lambda: jnp.zeros((), x0.dtype)) if linear is None else linear)
    if r0 is None:
        r0, stop0 = jnp.zeros_like(x0), jnp.bool_(False)
    else:
        n0 = _norm_inf(r0)
        stop0 = (max_iter <= 0) | (n0 <= tol) | ~jnp.isfinite(n0)

    # ``last``: ||R|| at the iterate before x; ``dxn``: the norm of the increment that reached x;
    # ``r_first``: R(x0) (from the first pass where the caller has none); ``stalled``: the latest pass
    # stopped at the floor. The increment judges tol and max_iter; the floor is judged here, after it
    # (its scale is the increment's fifth output, or a derivative taken only where the residual stopped
    # halving above tol: such a pass also computes an increment that is not taken)
    def body(c):
        x, r, it, _, last, dxn, r_first, _, linear = c
        if floor is None:
            x_next, r, it_next, stop = increment(x, it, tol, max_iter)[:4]
            stalled = jnp.bool_(False)
        else:  # arrays only: the engine may rewrite ``increment`` from its traced program
            x_next, r, it_next, stop, *s = increment(x, it, tol, max_iter, -inf, last)
            r_first = jnp.where(it == 0, r, r_first)
            if s:  # the scale from the linearization at x0
                linear = jnp.where(it == 0, s[0], linear)
            at = _floor_at(floor, x0, r_first)
            stalled = _stall(at, _norm_inf(r), last, tol, dxn, x, linear if s else None)
            x_next, it_next, stop = jnp.where(stalled, x, x_next), jnp.where(stalled, it, it_next), stop | stalled
        dxn = jnp.where(stop, dxn, _norm_inf(x_next - x))
        return x_next, r, it_next, stop, _norm_inf(r), dxn, r_first, stalled, linear

    start = (x0, r0, jnp.int32(0), stop0, inf, inf, r0, jnp.bool_(False), jnp.zeros((), x0.dtype))
    x, r, it, _, _, _, _, stalled, _ = lax.while_loop(lambda c: ~c[3], body, start)
    n = _norm_inf(r)
    converged = ((n <= tol) | stalled) & jnp.all(jnp.isfinite(x))
    return NewtonResult(x, it, n, converged)


def linearized_jacobian(x, lin):
    """The dense dR/dx at x from the linearization ``lin`` of R there (``lin`` applied to the unit vectors)."""
    return jax.vmap(lin, out_axes=1)(jnp.eye(x.shape[0], dtype=x.dtype))


def linearized_increment(residual: Callable, tangent: Callable | None = None, scale: bool = False) -> Callable:
    """The iteration of :func:`newton_linearized` for ``residual``: R(x) and its linearization from
    one ``jax.linearize``; the tangent dR/dx and its solve only where the iteration goes on.
    ``tangent(x, lin)``: dR/dx at x from the linearization ``lin`` (a matrix or an object with
    ``solve``, as a band assembled from a few products); by default ``lin`` applied to the unit
    vectors. The iteration's ``floor`` and ``last`` (arrays: ||R||_inf before the latest iteration)
    add the floor's rule of :func:`newton`. ``scale=True``: a fifth output, ||dR/dx(x) x||_inf at the
    first iteration (``it`` 0) where it goes on (0 where it stops, and at the iterations after it), the
    product of the tangent with x (:func:`tangent_product`) or ``lin(x)`` where the tangent has none:
    the relative floor's scale."""

    tangent = linearized_jacobian if tangent is None else tangent

    def increment(x, it, tol, max_iter, floor=None, last=None):
        r, lin = jax.linearize(residual, x)
        n = _norm_inf(r)
        stop = (it >= max_iter) | (n <= tol) | ~jnp.isfinite(n)
        if floor is not None:
            stop = stop | _stalled(n, last, floor)
        it_next = it + (~stop).astype(it.dtype)
        if not scale:
            x_next = lax.cond(stop, lambda: x, lambda: x + apply_inverse(tangent(x, lin), -r))
            return x_next, r, it_next, stop

        def go():
            J = tangent(x, lin)

            def norm():  # the first iteration's only (newton_linearized keeps it)
                return _norm_inf(tangent_product(J, x) if has_product(J) else lin(x))

            return x + apply_inverse(J, -r), lax.cond(it == 0, norm, lambda: jnp.zeros((), x.dtype))

        x_next, s = lax.cond(stop, lambda: (x, jnp.zeros((), x.dtype)), go)
        return x_next, r, it_next, stop, s

    return increment


def _stalled(n, last, floor):
    """The floor's rule (:func:`newton`'s ``floor``): ||R||_inf = n is below the floor and did not
    halve from ``last``, the norm before the latest iteration."""
    return (n <= floor) & ~(n < 0.5 * last)


def _stall(floor_at, n, last, tol, dxn, x, linear=None):
    """:func:`_stalled` at the iterate x (reached by an increment of norm ``dxn``, a number or a
    function that gives it) with the floor ``floor_at(dxn, x, linear)`` (:func:`_floor_at`), evaluated
    only where ||R||_inf = n lies above tol and did not halve: where the iteration has no ``linear``,
    the relative floor's scale costs a derivative that a converging step never pays, and a function
    ``dxn`` is called there only."""
    candidate = (n > tol) & ~(n < 0.5 * last) & jnp.isfinite(n)
    norm = dxn if callable(dxn) else (lambda: dxn)
    return lax.cond(candidate, lambda: n <= floor_at(norm(), x, linear), lambda: jnp.bool_(False))


def _newton_floor(residual, step, x0, r0, tol, max_iter, floor, final_iteration=False, scaled=None) -> NewtonResult:
    """Newton to ||R||_inf <= tol, or to a residual below ``floor`` that stopped halving
    (:func:`newton` with ``floor``: a number, or a :class:`_Relative` floor, relative to the scale
    of the step's terms and guarded by the increment); ``final_iteration``: one more step after
    either stop. ``scaled``: the increment with the scale (:func:`scaled_increment`) in place of
    ``step``; the first iteration's, at x0, is the floor's ||J(x0) x0||_inf."""
    floor_at = _floor_at(floor, x0, r0)

    # the loop carries ||R||_inf of its residual (each residual's norm is taken once, where it is
    # evaluated), and the increment's norm is taken only where the floor is judged
    def cond(c):
        _, _, n, it, stalled, _ = c
        return (it < max_iter) & ~(n <= tol) & jnp.isfinite(n) & ~stalled

    def body(c):
        x, r, last, it, _, linear = c
        dx, s = (step(x, r), None) if scaled is None else scaled(x, r, it == 0)
        if s is not None:  # the first iteration's, at x0 (0 at the iterations after it)
            linear = jnp.where(it == 0, s, linear)
        x = x + dx
        r = residual(x)
        n = _norm_inf(r)
        stalled = _stall(floor_at, n, last, tol, lambda: _norm_inf(dx), x, None if s is None else linear)
        return x, r, n, it + 1, stalled, linear

    start = (x0, r0, _norm_inf(r0), jnp.int32(0), jnp.bool_(False), jnp.zeros((), x0.dtype))
    x, r, n, it, stalled, _ = lax.while_loop(cond, body, start)
    # a residual below the floor counts only where it stopped halving: not at max_iter while it halves
    converged = ((n <= tol) | stalled) & jnp.all(jnp.isfinite(x))
    if final_iteration:
        return _final_iteration(residual, step, x, r, it, converged)
    return NewtonResult(x, it, n, converged)


def _final_iteration(residual, step, x, r, it, converged) -> NewtonResult:
    """One more Newton update after a converged iteration (``final_iteration=True`` of :func:`newton`):
    its error is of the order of tol^2."""
    x = jnp.where(converged, x + step(x, r), x)
    r = residual(x)
    it = it + converged.astype(it.dtype)
    n = _norm_inf(r)
    return NewtonResult(x, it, n, converged & jnp.isfinite(n) & jnp.all(jnp.isfinite(x)))


def _newton_roundoff(residual, step, x0, r0, max_iter) -> NewtonResult:
    """Newton iterated to round-off (:func:`newton` with ``stopping="roundoff"``)."""
    eps = jnp.finfo(x0.dtype).eps

    def cond(c):
        x, r, it, last, stop = c
        return (it < max_iter) & ~stop

    def body(c):
        x, r, it, last, _ = c
        dx = step(x, r)
        n = _norm_inf(dx)
        scale = _norm_inf(x)
        # an increment that stopped decreasing at round-off level is round-off: not applied
        stalled = ~(n < last) & (last <= ACCEPT * (1.0 + scale))
        tiny = n <= ULPS * eps * scale
        x = jnp.where(stalled, x, x + dx)
        r = residual(x)
        return x, r, it + 1, jnp.where(stalled, last, n), stalled | tiny

    inf = jnp.asarray(jnp.inf, x0.dtype)
    x, r, it, last, stop = lax.while_loop(cond, body, (x0, r0, jnp.int32(0), inf, jnp.bool_(False)))
    n = _norm_inf(r)
    converged = stop & jnp.isfinite(n) & jnp.all(jnp.isfinite(x))
    return NewtonResult(x, it, n, converged)


def damped_newton(residual: Callable, x0, tol, max_iter, rcond: float = 1e-12, max_halvings: int = 40) -> NewtonResult:
    """Newton's method made robust: least-squares steps and backtracking on ||R||_2.

    The rescue of a time step whose plain Newton iteration failed (:func:`livens.simulate`).
    Each increment is dx = -J^+ R with J = dR/dx by forward-mode AD and J^+ its pseudo-inverse
    truncated below ``rcond`` times the largest singular value, so that it is defined where J is
    singular (e.g. the double four-bar passing its dead-centre position, where the constraint
    Jacobian loses rank) and equals the Newton increment where J is well conditioned. The step
    length a = 1, 1/2, 1/4, ... is the first with ||R(x + a dx)||_2 < (1 - 1e-4 a) ||R(x)||_2
    (Armijo's condition; dx is a descent direction of ||R||^2), which keeps an iteration started
    too far from the root (large h, e.g. KBS23b §6.3 Fig. 33 at h = 0.675) from diverging. Stops on
    ||R||_inf <= tol, at ``max_iter`` iterations, or when no step length decreases ||R||_2.
    """
    jac = jax.jacfwd(residual)

    def increment(x, r):
        U, S, Vt = jnp.linalg.svd(jac(x), full_matrices=False)
        keep = S > rcond * S[0]
        s_inv = jnp.where(keep, 1.0 / jnp.where(keep, S, 1.0), 0.0)
        return -(Vt.T @ (s_inv * (U.T @ r)))

    def cond(c):
        x, r, it, stalled = c
        n = _norm_inf(r)
        return (it < max_iter) & ~(n <= tol) & jnp.isfinite(n) & ~stalled

    def body(c):
        x, r, it, _ = c
        dx = increment(x, r)
        n2 = jnp.linalg.norm(r)

        # the full step a = 1 is the loop's first pass (k = 0; a = 2 before it): the residual is one
        # program in the backtracking, not two
        def bt_cond(b):
            a, _, rn, k = b
            ok = jnp.linalg.norm(rn) < (1.0 - 1e-4 * a) * n2
            return (k < 0) | (~ok & (k < max_halvings))

        def bt_body(b):
            a, _, _, k = b
            a = 0.5 * a
            xa = x + a * dx
            return a, xa, residual(xa), k + 1

        start = (jnp.full((), 2.0, x.dtype), x, r, jnp.int32(-1))
        _, xa, ra, _ = lax.while_loop(bt_cond, bt_body, start)
        decreased = jnp.linalg.norm(ra) < n2
        x_new = jnp.where(decreased, xa, x)
        r_new = jnp.where(decreased, ra, r)
        return x_new, r_new, it + 1, ~decreased

    r0 = residual(x0)
    x, r, it, _ = lax.while_loop(cond, body, (x0, r0, jnp.int32(0), jnp.bool_(False)))
    n = _norm_inf(r)
    return NewtonResult(x, it, n, (n <= tol) & jnp.all(jnp.isfinite(x)))


# ------------------------------------------------------------------ the strategies a time step chooses from
class PlainNewton:
    """Newton's method with an increment ``linear_step(x, r)`` (the tangent's solve applied to -r,
    :func:`newton_increment`) and one stopping rule: ``stopping`` "tol" (the papers',
    ||R||_inf <= tol; ``final_iteration``: one more update after it) or "roundoff"
    (:data:`ROUNDOFF`), or, with ``floor`` (a residual norm) or ``floor_factor`` (the floor as a
    multiple of tol relative to the scale of the step's terms: livens' default rule,
    :data:`FLOOR_FACTOR`, :func:`relative_floor`), the tolerance or a residual below the floor that
    stopped halving (:func:`newton`)."""

    def __init__(self, stopping: str = "tol", final_iteration: bool = False, floor_factor=None, floor=None):
        self.stopping, self.final_iteration = stopping, final_iteration
        self.floor_factor, self.floor = floor_factor, floor

    def scaled(self) -> bool:
        """Whether the increment gives the relative floor's scale (:func:`scaled_increment`)."""
        return self.stopping == "tol" and self.floor is None and self.floor_factor is not None

    def increment(self, residual, tangent=None) -> Callable:
        """The increment that :meth:`solve` takes as ``linear_step``: :func:`scaled_increment` where
        the floor is relative to the size of the step's terms (its scale from the first iteration's
        tangent), else :func:`newton_increment`."""
        return (scaled_increment if self.scaled() else newton_increment)(residual, tangent)

    def solve(self, residual, x0, tol, max_iter, linear_step, r0=None) -> NewtonResult:
        """``linear_step``: :meth:`increment`'s (rewritten by the engine where it asks)."""
        return newton(
            residual,
            x0,
            tol,
            max_iter,
            linear_step=linear_step,
            r0=r0,
            stopping=self.stopping,
            final_iteration=self.final_iteration,
            floor=self.floor,
            floor_factor=self.floor_factor,
            scaled_step=self.scaled(),
        )


class LinearizedNewton:
    """Newton's method that takes the residual and its tangent at each iterate from one
    linearization (:func:`newton_linearized`), for residuals whose derivative repeats their own work;
    the papers' stopping rule, or with ``floor`` (or ``floor_factor``: livens' default floor relative
    to the scale of the step's terms, :func:`relative_floor`) also a residual below it that stopped halving."""

    def __init__(self, floor=None, rewrite=None, floor_factor=None):
        self.floor, self.rewrite, self.floor_factor = floor, rewrite, floor_factor

    def solve(self, residual, x0, tol, max_iter, tangent=None, r0=None) -> NewtonResult:
        """``tangent(x, lin)``: dR/dx from the linearization (default: ``lin`` of the unit vectors);
        the increment is rewritten by ``rewrite`` where the engine asked for it."""
        relative = self.floor is None and self.floor_factor is not None
        increment = linearized_increment(residual, tangent, scale=relative)
        if self.rewrite is not None:
            increment = self.rewrite(increment)
        if relative:  # the floor's scale from the linearization at x0 (linearized_increment's scale)
            return newton_linearized(increment, x0, tol, max_iter, r0=r0, floor_factor=self.floor_factor)
        return newton_linearized(increment, x0, tol, max_iter, r0=r0, floor=self.floor)


class DampedLeastSquares:
    """The rescue of a failed step: least-squares increments and backtracking (:func:`damped_newton`)."""

    def solve(self, residual, x0, tol, max_iter) -> NewtonResult:
        return damped_newton(residual, x0, tol, max_iter)


def dense_tangent_solve(g, y):
    """The tangent system of ``lax.custom_root``: ``g`` is the residual linearized at the root;
    its AD matrix solved densely."""
    J = jax.jacfwd(g)(y)
    return jnp.linalg.solve(J, y)


def _hoisted(fun: Callable, *example):
    """``fun`` traced once at the shapes of ``example`` (arrays): ``(call, values)``, where
    ``call(*args, *values)`` evaluates the trace (a list of ``fun``'s flat outputs) and ``values``
    are the traced values ``fun`` closes over (tracers of the enclosing transformations, of any
    dtype), made explicit arguments; concrete constants stay inside. Like ``jax.closure_convert``,
    which keeps integer tracers inside: a derivative rule traced later must not read those."""
    closed = jax.make_jaxpr(fun)(*example)
    traced = [isinstance(c, jax.core.Tracer) for c in closed.consts]
    values = [c for c, t in zip(closed.consts, traced) if t]
    n = len(example)

    def call(*args):
        hoisted = iter(args[n:])
        consts = [next(hoisted) if t else c for c, t in zip(closed.consts, traced)]
        return _jcore.jaxpr_as_fun(_jcore.ClosedJaxpr(closed.jaxpr, consts))(*args[:n])

    return call, values


def _float0_zeros(x):
    return np.zeros(jnp.shape(x), jax.dtypes.float0)


def implicit(solve: Callable, residual: Callable, x0, jacobian=None) -> NewtonResult:
    """``solve(residual, x0) -> NewtonResult`` with the derivative of its solution x defined by the
    implicit function theorem at R(x) = 0: dx = -(dR/dx)^-1 (dR/dtheta dtheta) for the values
    theta that R closes over, one linear solve with the tangent (its transpose in reverse mode),
    never by differentiating the iterations (what ``lax.custom_root`` defines; here a
    ``jax.custom_jvp`` whose rule is traced only where something differentiates the solution, so
    that an undifferentiated trace holds the solve alone). The residual is traced once, and
    ``solve`` calls that trace; the values ``solve`` alone closes over carry no derivative, nor
    does ``x0``. The iteration count, residual and convergence flag carry no derivative.
    ``jacobian``: the matrix dR/dx at the solution, where the caller knows the solution (a
    scheme's structured tangent, assembled), solved by LU (transposed in reverse mode), carrying
    no derivative itself; else the dense AD matrix of R at the solution."""
    x0 = lax.stop_gradient(x0)
    f_call, theta = _hoisted(residual, x0)
    n_theta = len(theta)

    def f(x, *th):
        return f_call(x, *th)[0]

    def run(x_start, *th):
        res = solve(lambda x: f(x, *th), x_start)
        it, resid, ok = jnp.asarray(res.iterations, jnp.int32), jnp.asarray(res.residual, x_start.dtype), res.converged
        return res.x, it, resid, jnp.asarray(ok, jnp.bool_)

    run_call, fixed = _hoisted(run, x0, *theta)
    matrix = () if jacobian is None else (jacobian,)
    n_matrix = len(matrix)

    # the arguments: x0, the residual's values theta, then the matrix and what the solve alone reads
    @jax.custom_jvp
    def root(x_start, *args):
        th, rest = args[:n_theta], args[n_theta + n_matrix :]
        return tuple(run_call(x_start, *th, *rest))

    @root.defjvp
    def root_jvp(primals, tangents):
        x_start, *args = primals
        th, dth = tuple(args[:n_theta]), tuple(tangents[1 : 1 + n_theta])
        out = root(x_start, *args)
        x = out[0]
        _, rhs = jax.jvp(lambda *t: f(x, *t), th, dth)
        A = args[n_theta] if n_matrix else jax.jacfwd(lambda y: f(y, *th))(x)
        dx = -jnp.linalg.solve(A, rhs)
        return out, (dx, _float0_zeros(out[1]), jnp.zeros_like(out[2]), _float0_zeros(out[3]))

    x, iterations, resid, converged = root(x0, *theta, *matrix, *fixed)
    return NewtonResult(x, iterations, resid, converged)
