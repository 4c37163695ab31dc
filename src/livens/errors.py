"""Errors of a run. Each carries the Solution up to the last good step (``.solution``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the errors need no code of the results
    from .ensemble_solution import EnsembleSolution
    from .solution import Solution


class _Stopped:
    """What a stopped run carries (:class:`SimulationError`, :class:`SimulationInterrupted`)."""

    def __init__(
        self,
        message: str,
        solution: Solution | EnsembleSolution | None = None,
        step: int | None = None,
        time: float | None = None,
        residual: float | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason
        self.solution = solution
        self.step = step
        self.time = time
        self.residual = residual


class SimulationError(_Stopped, RuntimeError):
    """A run stopped early; ``solution`` holds every step computed before, ``step``, ``time``,
    ``residual`` say where and why (``step``: the index of the step, the step from node n to n + 1
    having index n); ``reason`` is the message without the sentence on where the steps are kept
    (a command line names its own file instead).

    solution: the :class:`livens.Solution` (an :class:`livens.EnsembleSolution` for an ensemble) of
        the steps computed before the failure; None where nothing was kept (``lv.flow``).
    step: the index of the failing step (0-based; the step from node n to n + 1 has index n).
    time: where the failure happened, in the run's time (for each subclass as it says).
    residual: the figure that failed (for each subclass as it says).
    reason: the message without the sentence on where the steps are kept.
    """


class ConvergenceError(SimulationError):
    """Newton's method did not converge within max_iter iterations (or produced NaN).

    ``time`` is the start t^n of the failing step, ``residual`` the residual's infinity norm
    ||R||_inf after its last iteration; the message names the tolerance, max_iter and what to try."""


class BlowUpError(SimulationError):
    """The energy left the band set by ``blowup_factor``: |E - E0| > blowup_factor * max(|E0|, 1).

    ``time`` is the end t^{n+1} of the step whose energy left the band, ``residual`` that |E - E0|;
    ``solution`` holds the steps up to and including it."""


class SimulationInterrupted(_Stopped, KeyboardInterrupt):
    """The run was interrupted (Ctrl-C); it carries what :class:`SimulationError` carries
    (``solution`` with the steps so far, ``step``, ``time``, ``residual``, ``reason``).

    A :class:`KeyboardInterrupt`, not an :class:`Exception`: ``except Exception`` (or ``except
    SimulationError``) in a loop over runs does not swallow it, so Ctrl-C stops the program as it
    stops any Python program; ``except lv.SimulationInterrupted as e`` still reads ``e.solution``."""


class FileFormatError(ValueError):
    """A file is not a livens result file, is truncated, or has an unknown format version. It has no
    fields beyond its message, which names the file and what is wrong with it."""
