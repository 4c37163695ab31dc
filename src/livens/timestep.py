"""One time step of a scheme, and the loop of a chunk of steps that every run executes.

:func:`step` is one time step: the scheme's invariants of the step (``prepare``), the first guess,
Newton's method on the scheme's residual with the tangent chosen by :mod:`livens.solvers.tangent`,
the state update, and for schemes in increment form the compensated summation of q and p.
:func:`make_loop` builds a ``lax.scan`` of ``length`` such steps; the driver
(:mod:`livens.driver`) compiles it through the engine and runs it chunk by chunk, maps it over an
ensemble's members with ``jax.vmap``, or runs it inside a differentiable program (:func:`livens.flow`),
recording each step's solution. :func:`make_replay` takes the steps again from those solutions,
each carrying the implicit derivative of its solution (:func:`livens.solvers.newton.implicit`),
never the derivative of Newton's iterations: what :func:`livens.flow` differentiates.

A step inside the loop is taken while ``n < n_stop`` and no step has failed; afterwards the loop
passes its state through unchanged (a ``lax.cond`` skips the work; under ``vmap`` a stopped member
takes no Newton iteration), so that one compiled loop of fixed length serves runs of any length.
h, t, the tolerance, max_iter and the scheme's and System's parameters are runtime values.

What the engine may change is passed in as plain values (:func:`livens.engine.step_options`):
``fuse``, a rewrite applied to the residual and the Newton update (small matrix products as
fusible sums), and ``residual_written_once`` for the extrapolated guess. Nothing here imports the
engine.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _jaxconfig  # noqa: F401
from . import guess as _guess
from .schemes.base import Scheme, State, compensated_add
from .solvers import batched_systems, tangent_operator
from .solvers.newton import (
    DampedLeastSquares,
    LinearizedNewton,
    NewtonResult,
    PlainNewton,
    implicit,
)

NEWTON_DEFAULT = ("tol", False, None)
"""(stopping rule, final iteration, floor factor) of :class:`livens.solvers.newton.PlainNewton`: the
papers' ||R|| <= tol (a run's own options: :func:`livens.driver.setup.newton_options`)."""


def scheme_mode(mode: str) -> str:
    """The scheme's own guess behind ``mode``: "extrapolated" starts from (and compares with) "advanced"."""
    return "advanced" if mode == "extrapolated" else mode


def _identity(fn):
    return fn


def step(
    mech,
    scheme: Scheme,
    mode: str,
    state: State,
    t,
    h,
    tol,
    max_iter,
    params,
    sys_params=None,
    fuse=None,
    robust: bool = False,
    history=None,
    newton_opts: tuple = NEWTON_DEFAULT,
    residual_written_once: bool = False,
    solution=None,
):
    """One time step: the first guess, Newton on the scheme's residual, the state update.
    Returns (new state, outputs, Newton result, history).

    ``sys_params``: values of the System's parameters (``mech.bind``). ``robust=True`` solves with
    :class:`~livens.solvers.newton.DampedLeastSquares` (the rescue of a failed step) instead of
    Newton with the scheme's tangent. ``mode="extrapolated"`` needs ``history`` (a
    :class:`~livens.guess.GuessHistory`; returned with the guess's bookkeeping updated, the
    solution not yet pushed: the caller does that once it knows the step is kept).
    ``newton_opts``: (stopping rule, final iteration, floor factor) of :class:`~livens.solvers.newton.PlainNewton`
    (a floor factor: a floor relative to the size of the step's terms, :func:`~livens.solvers.newton.relative_floor`).
    ``solution``: the step's converged unknowns, known from a run already made
    (:func:`make_replay`): no guess and no Newton iteration, only the solution's derivative by the
    implicit function theorem (:func:`~livens.solvers.newton.implicit`), with the scheme's
    structured tangent where it has one. ``fuse``, ``residual_written_once``: the engine's plain
    options (module docstring).

    For a scheme in increment form (``scheme.increments``) q and p are accumulated by compensated
    summation (:func:`~livens.schemes.base.compensated_add`), the carries in ``state.comp``.
    """
    mech = mech.bind(sys_params)
    d, m = mech.d, mech.m
    if scheme.prepare is not None:  # the step's invariants, once (not per residual)
        state = scheme.prepare(state, h, t, params, mech)

    def R(x):
        return scheme.residual(scheme.unpack(x, d, m), state, h, t, params, mech)

    if solution is not None:  # the solution is known: only its derivative by the implicit function theorem
        known = lambda res_fn, x: NewtonResult(x, jnp.int32(0), jnp.zeros((), x.dtype), jnp.bool_(True))  # noqa: E731
        J = None
        if scheme.tangent is not None:  # the scheme's structured dR/dx at the solution, assembled
            T = tangent_operator(scheme, scheme.unpack(solution, d, m), state, h, t, params, mech)
            J = T.matrix() if hasattr(T, "matrix") else None
        res = implicit(known, R, solution, J)
        return _advance(scheme, res, state, h, t, params, mech) + (history,)
    u0 = scheme.guess(state, h, t, params, mech, scheme_mode(mode))
    x0 = scheme.pack(u0, d, m)

    f = fuse if fuse is not None else _identity
    fR = f(R)
    r0 = None
    if mode == "extrapolated" and not robust:
        x0, r0, history = _guess.extrapolated_guess(fR, x0, history, written_once=residual_written_once)

    def tangent(x):  # the scheme's own, the band form or the dense AD matrix (livens.solvers.tangent)
        return tangent_operator(scheme, scheme.unpack(x, d, m), state, h, t, params, mech)

    def solve(res_fn, x_start, r_start):
        if robust:
            return DampedLeastSquares().solve(res_fn, x_start, tol, max_iter)
        if scheme.solving.linearize_once and scheme.tangent is None and newton_opts[:2] == NEWTON_DEFAULT[:2]:
            return LinearizedNewton(rewrite=f, floor_factor=newton_opts[2]).solve(R, x_start, tol, max_iter, r0=r_start)
        # the residual and the whole Newton update rewritten by ``fuse`` where the engine asks
        newton = PlainNewton(*newton_opts)
        return newton.solve(res_fn, x_start, tol, max_iter, f(newton.increment(R, tangent)), r0=r_start)

    res = solve(fR, x0, r0)
    return _advance(scheme, res, state, h, t, params, mech) + (history,)


def _advance(scheme: Scheme, res, state: State, h, t, params, mech):
    """(new state, outputs, res): the state update from Newton's solution ``res.x``, for schemes in
    increment form with the compensated summation of q and p."""
    u = scheme.unpack(res.x, mech.d, mech.m)
    new_state, out = scheme.update(u, state, h, t, params, mech)
    if scheme.increments:
        dq, dp = scheme.increments(u)
        cq, cp = state.comp if state.comp is not None else (jnp.zeros_like(state.q), jnp.zeros_like(state.p))
        q, cq = compensated_add(state.q, cq, dq)
        p, cp = compensated_add(state.p, cp, dp)
        new_state = new_state._replace(q=q, p=p, comp=(cq, cp))
    return new_state, out, res


class LoopOutput(NamedTuple):
    """What a loop of steps returns: the state after the last kept step, the guess history, the
    number of nodes reached (n), whether a step failed, and one record per step (a row of the
    layout, or a dict of arrays)."""

    state: State
    history: object
    n: jax.Array
    failed: jax.Array
    records: object


def make_loop(
    mech,
    scheme: Scheme,
    mode: str,
    length: int,
    layout=None,
    newton_opts: tuple = NEWTON_DEFAULT,
    fuse=None,
    batched: bool = False,
    residual_written_once: bool = False,
    record_solution: bool = False,
):
    """The loop of ``length`` steps: a function

        (state, history, t_start, n0, n_stop, h, tol, max_iter, params, sys_params) -> LoopOutput

    where node n is at time t_start + n h, the loop starts at node n0 and takes steps while
    n < n_stop and no step has failed. Each step's record (q, p, Newton iterations and residual,
    "ok", and the scheme's outputs v, lambda, gamma) is one row of ``layout`` (a
    :class:`livens.driver.records.RecordLayout`) or, without a layout, a dict of arrays. A failed
    step (Newton not converged, or NaN) is recorded with ok = False and not kept; steps past the
    stop are records of zeros with ok = True. ``batched=True`` builds the loop to be ``vmap``-ped
    over members (a select instead of a ``lax.cond`` around the step: both are computed under vmap
    anyway, and a stopped member takes no Newton iteration; linear systems solved whole,
    :func:`livens.solvers.batched_systems`). ``record_solution=True`` adds each step's converged
    unknowns to its record (field "x"), from which :func:`make_replay` differentiates the run. The
    caller compiles it.
    """

    def one(state, history, t, h, tol, max_iter, params, sys_params):
        return step(
            mech,
            scheme,
            mode,
            state,
            t,
            h,
            tol,
            max_iter,
            params,
            sys_params,
            fuse,
            history=history,
            newton_opts=newton_opts,
            residual_written_once=residual_written_once,
        )

    def loop(state, history, t_start, n0, n_stop, h, tol, max_iter, params, sys_params=None):
        def taken(carry, iters=max_iter):
            state, history, n, failed = carry
            t = t_start + n.astype(t_start.dtype) * h
            new, out, res, hist = one(state, history, t, h, tol, iters, params, sys_params)
            ok = res.converged & jnp.all(jnp.isfinite(new.q)) & jnp.all(jnp.isfinite(new.p))
            if mode == "extrapolated":
                hist = _guess.push(hist, res.x, ok)
            kept = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, b, a), state, new)
            rec = {"q": new.q, "p": new.p, "iterations": res.iterations, "residual": res.residual, "ok": ok, **out}
            if record_solution:
                rec["x"] = res.x
            return (kept, hist, n + ok.astype(n.dtype), failed | ~ok), rec

        def body(carry, _):
            state, history, n, failed = carry
            active = (n < n_stop) & ~failed
            if batched:  # vmapped: a stopped member computes a step of zero iterations, then keeps its state
                new_carry, rec = taken(carry, jnp.where(active, max_iter, 0))
                new_carry = jax.tree_util.tree_map(lambda a, b: jnp.where(active, b, a), carry, new_carry)
                rec = {**rec, "ok": rec["ok"] | ~active}
            elif layout is not None:
                # the row is packed inside the branch: the skipped branch's row (zeros, "ok" true) then
                # has the layout's known width, and the step is traced once, not once more for its shapes
                skipped = np.zeros(layout.width)
                skipped[layout.column("ok")] = 1.0

                def taken_row(c):
                    new_carry, rec = taken(c)
                    return new_carry, layout.pack(rec)

                new_carry, row = lax.cond(active, taken_row, lambda c: (c, jnp.asarray(skipped)), carry)
                return new_carry, row
            else:
                rec_shape = jax.eval_shape(lambda c: taken(c)[1], carry)
                zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), rec_shape)
                zeros["ok"] = jnp.ones((), bool)
                new_carry, rec = lax.cond(active, taken, lambda c: (c, zeros), carry)
            row = layout.pack(rec) if layout is not None else rec
            return new_carry, row

        if batched:
            with batched_systems():
                (state, history, n, failed), recs = lax.scan(
                    body, (state, history, n0, jnp.bool_(False)), None, length=length
                )
        else:
            (state, history, n, failed), recs = lax.scan(
                body, (state, history, n0, jnp.bool_(False)), None, length=length
            )
        return LoopOutput(state, history, n, failed, recs)

    return loop


def make_replay(mech, scheme: Scheme, length: int):
    """The replay of ``length`` steps whose converged unknowns are known (the records "x" of a loop
    of :func:`make_loop` with ``record_solution``): a function

        (state, xs, t_start, n0, n_stop, h, params, sys_params) -> (state, records)

    that takes step n0 + j from its solution xs[j], with no guess and no Newton iteration, while
    n0 + j < n_stop (later steps pass the state through and record zeros), and returns the state
    after the last step and, per step, the records q, p, the scheme's outputs (v, lambda, gamma)
    and x. Its values are those of the run that found xs; its derivative with respect to the state
    and the scheme's and System's parameters is that of the run, each step's by the implicit
    function theorem at its solution (:func:`livens.solvers.newton.implicit`). This is what
    :func:`livens.flow` differentiates: Newton's method is not re-run for a derivative.
    """

    one = replay_step(mech, scheme)

    def replay(state, xs, t_start, n0, n_stop, h, params, sys_params=None):
        def body(state, jx):
            return one(state, *jx, t_start, n0, n_stop, h, params, sys_params)

        return lax.scan(body, state, (jnp.arange(length, dtype=jnp.asarray(n0).dtype), xs))

    return replay


def replay_step(mech, scheme: Scheme):
    """Step j of :func:`make_replay`'s scan, a function

        (state, j, x, t_start, n0, n_stop, h, params, sys_params) -> (state, records)

    that takes step n0 + j from its solution x while n0 + j < n_stop (else it passes the state
    through and records zeros). The replay is a scan of it; the native reverse pass of
    :func:`livens.flow` transposes it step by step (:mod:`livens.driver.native_flow`)."""

    def one(state, j, x, t_start, n0, n_stop, h, params, sys_params=None):
        def take(state):
            t = t_start + (n0 + j).astype(t_start.dtype) * h
            new, out, res, _ = step(mech, scheme, "simple", state, t, h, None, None, params, sys_params, solution=x)
            return new, {"q": new.q, "p": new.p, **out, "x": res.x}

        shapes = jax.eval_shape(lambda s: take(s)[1], state)
        zeros = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
        return lax.cond(n0 + j < n_stop, take, lambda s: (s, zeros), state)

    return one
