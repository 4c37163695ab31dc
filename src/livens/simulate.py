"""One run of a scheme on a problem: a preset of the one driver (:func:`livens.driver.run` with
one member, its nodes in memory or streamed to a file, and a failure that stops the run)."""

from __future__ import annotations

import os
from typing import Any

from .driver import DEFAULT_CHUNK, Memory, Raise, Single, Stream, run
from .problem import Problem
from .solution import Solution
from .validation import check_keywords


def simulate(
    problem: Problem,
    scheme: str = "VI-S",
    h: float | None = None,
    t_end: float | None = None,
    tol: float | str = 1e-9,
    max_iter: int = 40,
    guess: str | None = None,
    progress: bool | None = None,
    blowup_factor: float | None = None,
    chunk: int = DEFAULT_CHUNK,
    out: str | os.PathLike | None = None,
    save_every: int = 1,
    resume: Solution | None = None,
    rescue: bool = True,
    final_iteration: bool = False,
    parameters: dict | None = None,
    backend: str | None = None,
    accept_floor: bool = True,
    **params: Any,
) -> Solution:
    """Integrate ``problem`` with ``scheme`` from t = 0 to ``t_end`` with step ``h``; returns a
    :class:`~livens.Solution`.

    problem: a :class:`~livens.Problem` (e.g. ``lv.examples.load("heavy-top")``).
    scheme: canonical name or paper alias (``lv.schemes.names()``), e.g. "VI-S", "ggl-theta-a".
    h, t_end: step size and end time; default to the problem's (the paper's) values.
    tol, max_iter: Newton stops on ||R||_inf <= tol (default 1e-9), or, where the residual stops
        halving at most 1e4 tol (1 + s), s the size of the step's terms
        (:data:`livens.solvers.newton.FLOOR_FACTOR`, :func:`livens.solvers.newton.relative_floor`), on
        that residual: it has reached its round-off floor (``solution.meta["stopping"]`` states the rule); a step that needs
        more than max_iter iterations stops the run with :class:`~livens.ConvergenceError`.
        ``tol="roundoff"`` iterates until the Newton increment stops decreasing or is a few ulps of
        the state (:func:`livens.solvers.newton.newton`): no bias from stopping on one side of the root,
        the setting for long runs at the round-off limit (the rescue then stops at 1e-12).
    final_iteration: with a numeric tol, one more Newton iteration after ||R|| <= tol.
    accept_floor: False: the papers' rule ||R||_inf <= tol alone (a step whose residual stalls at a
        round-off floor above tol then fails), as the papers' reproductions run.
    guess: Newton's first guess: "extrapolated" (:mod:`livens.guess`: the last five steps' solutions
        extrapolated where that has the smaller residual), or KBS23b Table 2's "simple" (the unknowns of
        step n) or "advanced" (q^n + h v^n); None: the scheme's own (``scheme.solving.guess``). Same
        equations and tolerance: results equal to the tolerance.
    progress: a progress bar (default: on a terminal, for runs longer than 2 s).
    blowup_factor: stop with :class:`~livens.BlowUpError` when |E - E0| exceeds blowup_factor * max(|E0|, 1).
    chunk: steps per compiled chunk (fixed, so that h and t_end never recompile).
    out: a netCDF path; the kept nodes are appended while the run goes (at least once a second), so a
        failure or Ctrl-C leaves every kept step in it; a finished run rewrites it with its diagnostics.
    save_every: keep every k-th node (and the step ending there); memory and file stay bounded.
    resume: a Solution (e.g. ``lv.load(path)``) to continue from its last saved node up to ``t_end``
        (the continuation only; bit for bit the long run where the file ends at its last step).
    rescue: retry a failed step once with the damped least-squares method (recorded in
        ``solution.meta["rescued_steps"]``); False: stop at the first failed step (KBS23b's setting).
    parameters: values of the System's parameters in place of its defaults (runtime values).
    backend: the engine's switch (:mod:`livens.engine.options`): "auto" (default, ``$LIVENS_BACKEND``),
        "native", "xla" or "plain"; ``solution.meta["backend"]`` says what ran.
    **params: the scheme's parameters, e.g. ``theta=0.5``.

    A failed run raises :class:`~livens.ConvergenceError`, :class:`~livens.BlowUpError` or
    :class:`~livens.SimulationInterrupted`, each with ``.solution`` holding every kept step.
    """
    check_keywords(simulate, scheme, params)
    output = Stream(save_every=save_every, path=out) if out is not None else Memory(save_every)
    return run(
        problem,
        scheme,
        h=h,
        t_end=t_end,
        tol=tol,
        max_iter=max_iter,
        guess=guess,
        parameters=parameters,
        params=params,
        final_iteration=final_iteration,
        backend=backend,
        accept_floor=accept_floor,
        executor=Single(chunk),
        output=output,
        on_failure=Raise(rescue),
        progress=progress,
        blowup_factor=blowup_factor,
        resume=resume,
    )


__all__ = ["simulate"]
