"""The discrete flow of a scheme as a pure, differentiable function of the initial state and the
System's parameters: a preset of the one driver (:func:`livens.driver.run` with the in-graph
executor, :mod:`livens.driver.ingraph`).

This is the discrete mechanics that parameter identification, sensitivity studies and optimal
control with the discrete equations as constraints (DMOC: Ober-Blöbaum, Junge, Marsden 2011;
Leyendecker, Ober-Blöbaum, Marsden, Ortiz 2010) differentiate.
"""

from __future__ import annotations

from .driver import Arrays, Implicit, InGraph, NaNFlag, run
from .driver.ingraph import FlowFunction, FlowResult
from .system import Problem


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
    **params,
) -> FlowFunction:
    """The run of ``scheme`` on ``problem`` over ``n_steps`` steps of size ``h`` as a pure function
    ``F(q0, v0, parameters=None) -> FlowResult``; ``jax.grad``, ``jax.jvp``, ``jax.jacfwd``, ``jax.jit``
    and ``jax.vmap`` work through it.

    q0, v0: the initial state (arrays of shape (d,)); for a consistent run they lie on the
    constraint manifold, and derivatives are meaningful along directions that keep them there (the
    flow does not project). parameters: values of the System's parameters (a dict; missing ones
    take the System's defaults; traced values allowed).

    The arguments mean what they mean for :func:`livens.simulate`; two defaults differ on purpose:
    ``tol`` is 1e-12 (the derivative by the implicit function theorem is that of the solution to
    this tolerance), and ``guess`` is "advanced" (q^n + h v^n; the program to differentiate stays
    smaller than with livens' extrapolation; it changes no result). save_every: return every k-th
    node. segment: steps per checkpointed segment (default about sqrt(n_steps)). backend: as for
    :func:`livens.simulate`; in-graph runs are XLA programs. The symmetries an energy-momentum scheme
    respects are checked once, with the System's default parameter values.

    Each step's derivative comes from the implicit function theorem at its converged Newton solution
    (one linear solve with the step's tangent, or its transpose in reverse mode), never from
    differentiating Newton's iterations; reverse mode stores only the states at the ends of segments
    and recomputes each segment (memory like sqrt(n_steps)). A step that does not converge makes the
    nodes after it NaN and ``converged`` False; called on concrete arrays, ``F`` raises
    :class:`~livens.ConvergenceError` naming the step; under a transformation check
    ``result.converged`` (or :meth:`FlowFunction.check`). There is no rescue: its iterations are not a
    differentiable map. A program that calls ``F`` inside the user's own ``jax.jit`` or ``jax.grad``
    runs best inside ``with livens.engine.serial_blas():`` (one BLAS thread, as every livens driver).
    """
    return run(
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
        on_failure=NaNFlag(),
        adjoint=Implicit(),
        default_guess="advanced",
    )


__all__ = ["flow", "FlowResult", "FlowFunction"]
