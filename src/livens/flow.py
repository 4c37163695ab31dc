"""The discrete flow of a scheme as a pure, differentiable function of the initial state and the
System's parameters.

``F = lv.flow(problem, "VI-S", h=0.01, n_steps=1000)`` is a function ``F(q0, v0, params=None)``
that runs the whole simulation with the step loop of :mod:`livens.core` (the loop
:func:`livens.simulate` runs) and returns a :class:`FlowResult` of nodal arrays. It is pure and
jit-able, and ``jax.grad``, ``jax.jvp``, ``jax.jacfwd`` and ``jax.vmap`` work through it: the
derivative of each step comes from the implicit function theorem at the step's converged Newton
solution (``lax.custom_root``: one linear solve with the step's tangent, or its transpose in
reverse mode), never from differentiating Newton's iterations. Reverse mode stores only the
states at the ends of segments of about sqrt(n_steps) steps and recomputes each segment when it
is differentiated (``jax.checkpoint``), so memory grows like sqrt(n_steps), not n_steps.

This is the discrete mechanics that parameter identification, sensitivity studies and optimal
control with the discrete equations as constraints (DMOC: Ober-Blöbaum, Junge, Marsden 2011;
Leyendecker, Ober-Blöbaum, Marsden, Ortiz 2010) differentiate.

Failures. A step whose Newton iteration does not converge stops the flow there: the nodes after
it are NaN (so a loss computed from them is NaN, never silently wrong) and ``converged`` is
False. Called on concrete arrays, ``F`` raises :class:`~livens.ConvergenceError` naming the step,
its time and residual; under a transformation (jit, grad) it cannot raise, so check
``result.converged`` (or call :meth:`FlowFunction.check`). The damped least-squares rescue of
:func:`livens.simulate` is not part of the flow: its iterations are not a differentiable map, so a
step that plain Newton cannot solve is an error here.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _jaxconfig  # noqa: F401
from .checks import check_step
from .engine import serial_blas
from .core import make_loop
from .errors import ConvergenceError
from .newton import ROUNDOFF
from .schemes.base import State
from .simulate import check_guess, new_history, newton_options, resolve
from .system import Problem


class FlowResult(NamedTuple):
    """The nodes of a run of :func:`flow`: t (N+1,), q, p (N+1, d), v (the scheme's velocities:
    (N+1, d) nodal, else (N, d)), lam (N, m), gam (N, m) or None, iterations (N,) Newton
    iterations per step, converged (a bool: every step converged), failed_step (the index of the
    first failed step, -1 if none). With ``save_every = k`` the node arrays hold every k-th node."""

    t: Any
    q: Any
    p: Any
    v: Any
    lam: Any
    gam: Any
    iterations: Any
    converged: Any
    failed_step: Any


class FlowFunction:
    """``F(q0, v0, params=None) -> FlowResult``: the run as a pure function (see :func:`flow`)."""

    def __init__(self, fn, problem, scheme, h, n_steps, tol):
        self._fn = fn
        self.problem, self.scheme, self.h, self.n_steps, self.tol = problem, scheme, h, n_steps, tol
        self._jit = jax.jit(fn)

    def __call__(self, q0, v0, params=None) -> FlowResult:
        with serial_blas():  # runs at once where called on concrete values (livens.engine.threads)
            res = self._jit(q0, v0, params)
            if not _traced(res.converged):
                jax.block_until_ready(res)
        if not _traced(res.converged):
            self.check(res)
        return res

    def check(self, result: FlowResult) -> FlowResult:
        """Raise :class:`~livens.ConvergenceError` if a step of ``result`` did not converge."""
        if not bool(result.converged):
            k = int(result.failed_step)
            raise ConvergenceError(
                f"Newton did not converge in step {k + 1} of {self.n_steps} (t = {k * self.h:.6g} -> "
                f"{(k + 1) * self.h:.6g}) of {self.scheme} in lv.flow with h = {self.h:g} (tol = {self.tol}): the "
                "nodes after it are NaN. The flow has no rescue (its iterations are not differentiable): use a "
                "smaller h, a larger max_iter, or other initial values.", step=k, time=k * self.h)
        return result

    def __repr__(self):
        return f"FlowFunction({self.scheme}, h={self.h:g}, n_steps={self.n_steps})"


def _traced(*xs) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for x in xs for leaf in jax.tree_util.tree_leaves(x))


def flow(problem: Problem, scheme: str = "VI-S", h: float | None = None, n_steps: int | None = None,
         tol: float | str = 1e-12, max_iter: int = 40, guess: str | None = None, save_every: int = 1,
         segment: int | None = None, **scheme_params) -> FlowFunction:
    """The run of ``scheme`` on ``problem`` over ``n_steps`` steps of size ``h`` as a pure,
    differentiable function ``F(q0, v0, params=None) -> FlowResult`` (module docstring).

    q0, v0: the initial state (arrays of shape (d,)); for a consistent run they lie on the
    constraint manifold, and derivatives are meaningful along directions that keep them there
    (the flow does not project). params: values of the System's parameters (a dict; missing
    ones take the System's defaults). tol, max_iter: Newton's stopping rule (default 1e-12, or
    "roundoff"): the derivative by the implicit function theorem is that of the solution to this
    tolerance. guess: Newton's first guess (default "advanced", q^n + h v^n: the program to
    differentiate stays smaller than with livens' extrapolation); it changes no result.
    save_every: return every k-th node. segment: steps per checkpointed segment (default about
    sqrt(n_steps)). scheme_params: e.g. theta for ggl-theta-a. The symmetries an
    energy-momentum scheme respects are checked once, with the System's default parameter values
    (``params`` may be traced); ``lv.simulate`` checks them with each run's values.
    """
    h = problem.h if h is None else h
    if h is None or n_steps is None:
        raise ValueError("Give h (or a problem with a default h) and n_steps.")
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive integer; got {n_steps!r}.")
    n_steps = int(n_steps)
    check_step(h, n_steps * h, tol, max_iter)
    check_guess(guess)
    if isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1:
        raise ValueError(f"save_every must be a positive integer; got {save_every!r}.")
    sch, vals, mech = resolve(problem, scheme, scheme_params)
    mode = "advanced" if guess is None else guess
    nopts = newton_options(tol)
    tol_num = 0.0 if nopts[0] == ROUNDOFF else float(tol)
    seg = int(segment) if segment is not None else max(1, int(math.isqrt(n_steps)))
    if seg < 1:
        raise ValueError(f"segment must be a positive integer; got {segment!r}.")
    n_seg = -(-n_steps // seg)
    # no rewriting of small products and the plain advanced guess: the program to differentiate
    # stays small (compilation of the gradient needs less time and memory than with them)
    loop = make_loop(mech, sch, mode, seg, None, nopts, None, differentiable=True)
    segment_fn = jax.checkpoint(loop)
    jparams = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
    defaults = problem.system.parameters
    d, m = mech.d, mech.m
    f64 = jnp.float64

    def run(q0, v0, params=None):
        if params is not None and defaults is None:
            raise ValueError("This System has no parameters; call F(q0, v0) without params.")
        sysp = None
        if defaults is not None:
            sysp = {k: jnp.asarray(v, f64) for k, v in defaults.items()}
            for k, v in (params or {}).items():
                if k not in sysp:
                    raise ValueError(f"Unknown parameter {k!r}; the System's parameters: {', '.join(sysp)}.")
                sysp[k] = jnp.asarray(v, f64)
        bound = mech.bind(sysp)
        q0 = jnp.asarray(q0, f64)
        v0 = jnp.asarray(v0, f64)
        if q0.shape != (d,) or v0.shape != (d,):
            raise ValueError(f"q0 and v0 must have shape ({d},); got {q0.shape} and {v0.shape}.")
        p0 = bound.M(q0) @ v0
        z = jnp.zeros((m,), f64)
        comp = (jnp.zeros_like(q0), jnp.zeros_like(p0)) if sch.increments else None
        state = State(q=q0, p=p0, v=v0, lam=z, gam=z, comp=comp)
        start_ok = jnp.bool_(True)
        if sch.start is not None:
            if sch.pure_start is None:
                raise ValueError(f"Scheme {sch.name!r} has a start step that is not traceable; lv.flow cannot run it.")
            state, start_ok = sch.pure_start(state, jnp.asarray(h, f64), jparams, bound, True)
        history = new_history(sch, mech, state, h, jparams)

        def body(carry, _):
            state, history, n, failed = carry
            out = segment_fn(state, history, jnp.asarray(0.0, f64), n, jnp.asarray(n_steps, n.dtype),
                             jnp.asarray(h, f64), jnp.asarray(tol_num, f64), jnp.asarray(max_iter, jnp.int32),
                             jparams, sysp)
            return (out.state, out.history, out.n, failed | out.failed), out.records

        init = (state, history, jnp.asarray(0, jnp.int64), ~start_ok)
        (state, _, n, failed), recs = jax.lax.scan(body, init, None, length=n_seg)
        recs = jax.tree_util.tree_map(lambda a: a.reshape((n_seg * seg,) + a.shape[2:])[:n_steps], recs)
        step_ok = recs["ok"] & (jnp.arange(n_steps) < n)
        converged = ~failed & (n == n_steps)
        nan = jnp.asarray(jnp.nan, f64)

        def nodes(first, steps):  # nodal array: the first node, then the node each kept step ends at
            steps = jnp.where(step_ok.reshape((-1,) + (1,) * (steps.ndim - 1)), steps, nan)
            return jnp.concatenate([first[None], steps], axis=0)

        q = nodes(q0, recs["q"])
        p = nodes(p0, recs["p"])
        if sch.velocity_kind == "nodal":
            v = nodes(v0, recs["v"])
        else:
            v = jnp.where(step_ok[:, None], recs["v"], nan)
        lam = jnp.where(step_ok[:, None], recs["lam"], nan) if "lam" in recs else None
        gam = jnp.where(step_ok[:, None], recs["gam"], nan) if "gam" in recs else None
        t = jnp.arange(n_steps + 1, dtype=f64) * h
        failed_step = jnp.where(converged, -1, n).astype(jnp.int64)
        k = save_every
        return FlowResult(t[::k], q[::k], p[::k], v[::k] if sch.velocity_kind == "nodal" else v, lam, gam,
                          recs["iterations"], converged, failed_step)

    return FlowFunction(run, problem, sch.name, float(h), n_steps, tol)


__all__ = ["flow", "FlowResult", "FlowFunction"]
