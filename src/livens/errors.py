"""Errors of a run. Each carries the Solution up to the last good step (``.solution``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: livens.solution imports this module
    from .solution import EnsembleSolution, Solution


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
    (a command line names its own file instead)."""


class ConvergenceError(SimulationError):
    """Newton's method did not converge within max_iter iterations (or produced NaN)."""


class BlowUpError(SimulationError):
    """The energy left the band set by ``blowup_factor``."""


class SimulationInterrupted(_Stopped, KeyboardInterrupt):
    """The run was interrupted (Ctrl-C); it carries what :class:`SimulationError` carries
    (``solution`` with the steps so far, ``step``, ``time``, ``residual``, ``reason``).

    A :class:`KeyboardInterrupt`, not an :class:`Exception`: ``except Exception`` (or ``except
    SimulationError``) in a loop over runs does not swallow it, so Ctrl-C stops the program as it
    stops any Python program; ``except lv.SimulationInterrupted as e`` still reads ``e.solution``."""


class FileFormatError(ValueError):
    """A file is not a livens result file, is truncated, or has an unknown format version."""
