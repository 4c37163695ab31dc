"""The discrete flow of a scheme as a pure, differentiable function of the initial state and the
System's parameters: a preset of the one driver (:func:`livens.driver.run` with the in-graph
executor, :mod:`livens.driver.ingraph`).

This is the discrete mechanics that parameter identification, sensitivity studies and optimal
control with the discrete equations as constraints (DMOC: Ober-Blöbaum, Junge, Marsden 2011;
Leyendecker, Ober-Blöbaum, Marsden, Ortiz 2010) differentiate.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import jax
import numpy as np

from ._lru import CompiledCache
from .driver import Arrays, Implicit, InGraph, NaNFlag, run
from .driver.flow_failure import reraise_thrown
from .driver.ingraph import FlowFunction, FlowResult
from .problem import Problem
from .validation import check_keywords


def flow(
    problem: Problem,
    scheme: str = "VI-S",
    h: float | None = None,
    n_steps: int | None = None,
    tol: float | str = 1e-12,
    max_iter: int = 40,
    guess: str | None = None,
    save_every: int = 1,
    segment: int | None = None,
    backend: str | None = None,
    consistent: bool = True,
    throw: bool = False,
    t_end: float | None = None,
    on_failure: str = "nan",
    **params: Any,
) -> FlowFunction:
    """The run of ``scheme`` on ``problem`` over ``n_steps`` steps of size ``h`` as a pure function
    ``F(q0, v0, parameters=None) -> FlowResult``; ``jax.grad``, ``jax.jvp``, ``jax.jacfwd``, ``jax.jit``
    and ``jax.vmap`` work through it.

    q0, v0: the initial state (arrays of shape (d,)). parameters: values of the System's
    parameters (a dict; missing ones take the System's defaults; traced values allowed).
    consistent (default True): (q0, v0) is first mapped onto the constraint manifold of the call's
    parameter values (:func:`livens.consistent_initial_state`, a JAX function with its implicit
    derivative), so that derivatives with respect to q0, v0 and the parameters are derivatives along
    consistent starts; False: a start off the manifold (beyond ``Problem.consistency_tol``) is
    refused with a ``ValueError`` on concrete values, and fails the run under a transformation.

    The arguments mean what they mean for :func:`livens.simulate` (same default guess, the same
    time step); the run's length is ``n_steps`` or, as for :func:`livens.simulate`, ``t_end`` (n_steps =
    round(t_end / h), with h and t_end defaulting to the problem's); ``tol`` defaults to 1e-12 (the derivative by the implicit function theorem is that
    of the solution to this tolerance). save_every: return every k-th node. segment: steps per
    checkpointed segment of the derivative (default about sqrt(n_steps)). backend: as for
    :func:`livens.simulate`; where the engine compiles the loop natively, the run itself (with or
    without a derivative) is the native kernel, and so are its derivatives in both modes
    (``jax.grad``, ``jax.vjp``; ``jax.jvp``, ``jax.jacfwd``). A second derivative (a Hessian) needs
    ``backend="xla"``: the native derivatives refuse to be differentiated. Under ``jax.vmap`` the
    native run and its derivatives take the whole batch at once, the members together in lane
    kernels (each member's values and derivatives those of its own run, to the bit). Two calls of
    ``flow`` with the same arguments (the same ``problem`` object) give the same function, whose
    compiled programs are not compiled again; flows of the same system and scheme share their
    native kernels. The symmetries an energy-momentum scheme keeps are
    decided per call: for concrete parameter values as :func:`livens.simulate` decides them; for
    traced values, those exact for every value of the traced parameters (at their defaults and at
    random values about them; :meth:`FlowFunction.kept_symmetries` names them, and a
    :class:`~livens.driver.ingraph.TracedSymmetryNotice` names one they drop).

    Each step's derivative comes from the implicit function theorem at its converged Newton solution
    (one linear solve with the step's tangent, or its transpose in reverse mode), never from
    differentiating Newton's iterations, and Newton's method is not run again for it: the run
    records every step's solution and the derivative replays the steps from them. Reverse mode
    keeps those records (one row per step) and the states at the starts of segments, and
    recomputes each segment's linearization (the rest of its memory like sqrt(n_steps)). A failed start or step makes the nodes
    after it NaN, ``converged`` False and the derivative of every output with respect to every input
    NaN; no later step is taken. Called on concrete arrays, ``F`` raises
    :class:`~livens.ConvergenceError` naming the step, its time and residual, and for a failed step
    why, in the words of :func:`livens.simulate` (a tolerance below the round-off floor, a function
    that is not finite); under a transformation check ``result.converged`` (per member under
    ``jax.vmap``) or :meth:`FlowFunction.check`, or pass ``throw=True`` to raise at run time through a
    host callback (inside the user's ``jax.jit`` JAX wraps it in its runtime error; :func:`raising`,
    about the compiled function or as ``with lv.raising():``, hands on the ``ConvergenceError``).
    ``on_failure="hold"``: a failed run's nodes after the failure hold the last node reached (finite)
    and its derivatives are zero, so that ``jnp.where(result.converged, loss, 0.0)`` masks a failed
    member of a batch with finite gradients for the others. There is no rescue: its iterations
    are not a differentiable map. A program that calls ``F`` inside the user's own ``jax.jit`` or
    ``jax.grad`` runs best inside ``with livens.engine.serial_blas():`` (one BLAS thread, as every
    livens driver).

    problem: the :class:`livens.Problem` (its system, initial state, default h and t_end).
    scheme: the scheme's name or alias, as for :func:`livens.simulate` (default "VI-S").
    h: the time step (default: the problem's).
    n_steps: the number of steps (default: round(t_end / h)).
    tol: the Newton tolerance of every step (||R||_inf), or "roundoff".
    max_iter: the most Newton iterations per step; a step that needs more fails the run.
    guess: Newton's first guess ("extrapolated", "advanced", "simple"; default: the scheme's, as
        for :func:`livens.simulate`).
    throw: raise :class:`~livens.ConvergenceError` from inside a transformation when a step fails.
    on_failure: "nan" (default: NaN nodes after a failure, NaN derivatives) or "hold" (the last node
        reached, zero derivatives: for masking with ``converged``).
    t_end: the end time where ``n_steps`` is not given (default: the problem's).
    **params: the scheme's parameters (e.g. ``theta=0.5``), checked against those the scheme takes.
    """
    n_steps = _steps(problem, h, n_steps, t_end)
    check_keywords(flow, scheme, params)
    made = run(
        problem,
        scheme,
        h=h,
        n_steps=n_steps,
        tol=tol,
        max_iter=max_iter,
        guess=guess,
        params=params,
        backend=backend,
        executor=InGraph(segment),
        output=Arrays(save_every),
        on_failure=NaNFlag(on_failure),
        adjoint=Implicit(),
    ).configured(consistent=consistent, throw=throw)
    return _shared(made)


_FLOWS = CompiledCache(32)
"""The flows made so far, by their settings (:func:`_shared`)."""


def _settings(F: FlowFunction):
    """What decides every value and program of the flow ``F`` (its problem by identity), or None
    where a part of it has no key (a parameter value that cannot be hashed)."""
    p = F.plan
    params = tuple(sorted((k, np.asarray(v).tobytes(), np.shape(v)) for k, v in p.params.items()))
    system = None if p.system is None else tuple((k, np.asarray(v).tobytes()) for k, v in sorted(p.system.items()))
    key = (id(p.problem), p.scheme, params, p.mech, p.guess, p.newton, p.tol, p.tol_num, p.max_iter, p.h, p.steps)
    key += (p.t_start, p.offset, system, p.engine, F.executor, F.output, F.on_failure, F.adjoint)
    key += (F.consistent, F.throw)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _shared(F: FlowFunction) -> FlowFunction:
    """The flow made before with the same settings where there is one (a pure function: its
    compiled programs and kernels are reused, not compiled again), else ``F``."""
    key = _settings(F)
    if key is None:
        return F
    hit = _FLOWS.get(key)
    if hit is not None and hit.problem is F.problem:
        return hit
    _FLOWS[key] = F
    return F


def _steps(problem: Problem, h, n_steps, t_end) -> int | None:
    """``n_steps``, or round(t_end / h) with h and t_end defaulting to the problem's; refuses both."""
    if t_end is None:
        return n_steps
    if n_steps is not None:
        raise ValueError(f"lv.flow: give n_steps or t_end, not both; got n_steps = {n_steps!r}, t_end = {t_end!r}.")
    h = problem.h if h is None else h
    if h is None:
        raise ValueError("lv.flow: t_end needs h (or a problem with a default h).")
    from .validation import check_step

    check_step(h, t_end, 1e-12, 1)
    return max(1, int(round(t_end / h)))


def raising(fun: Callable[..., Any] | None = None) -> Any:
    """``fun`` (typically a ``jax.jit``-compiled function that calls a flow built with
    ``throw=True``), with a failed run raised as the :class:`~livens.ConvergenceError` that the
    flow's host callback raised (its message, ``step``, ``time``, ``residual``), where JAX would
    raise its own runtime error (``jax.errors.JaxRuntimeError``) that wraps it. The call waits for
    the results (``jax.block_until_ready``), so that the error arrives inside it. Other errors pass
    unchanged. Usable as a decorator above ``@jax.jit``.

    ``lv.raising()`` without ``fun`` is the same as a context manager: ``with lv.raising():`` turns
    the runtime error of every call in the block (a compiled function of a library included) into
    the ``ConvergenceError``; the block ends waiting for the programs' callbacks
    (``jax.effects_barrier``).

    JAX makes every exception of a host callback inside a compiled program its own runtime error,
    and Python's ``except`` matches the class an exception was made with, so ``except
    lv.ConvergenceError`` catches a failure inside the user's ``jax.jit`` only through this
    function (:mod:`livens.driver.flow_failure`)."""
    if fun is None:
        return _raising(barrier=True)

    @functools.wraps(fun)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _raising(barrier=False):
            return jax.block_until_ready(fun(*args, **kwargs))

    return call


@contextlib.contextmanager
def _raising(barrier: bool):
    """The block with JAX's runtime error of a ``throw=True`` flow raised as its ConvergenceError
    (:func:`raising`); ``barrier``: wait at its end for the callbacks of the programs it started."""
    try:
        yield
        if barrier:
            jax.effects_barrier()
    except jax.errors.JaxRuntimeError as e:
        reraise_thrown(e)
        raise


__all__ = ["flow", "raising", "FlowResult", "FlowFunction"]
