"""Errors of a run. Each carries the Solution up to the last good step (``.solution``)."""

from __future__ import annotations


class SimulationError(RuntimeError):
    """A run stopped early; ``solution`` holds every step computed before, ``step``, ``time``,
    ``residual`` say where and why (``step``: the index of the step, the step from node n to n + 1
    having index n); ``reason`` is the message without the sentence on where the steps are kept
    (a command line names its own file instead)."""

    def __init__(
        self,
        message: str,
        solution=None,
        step: int | None = None,
        time: float | None = None,
        residual: float | None = None,
        reason: str | None = None,
    ):
        super().__init__(message)
        self.reason = message if reason is None else reason
        self.solution = solution
        self.step = step
        self.time = time
        self.residual = residual


class ConvergenceError(SimulationError):
    """Newton's method did not converge within max_iter iterations (or produced NaN)."""


class BlowUpError(SimulationError):
    """The energy left the band set by ``blowup_factor``."""


class SimulationInterrupted(SimulationError):
    """The run was interrupted (Ctrl-C); the steps so far are kept."""


class FileFormatError(ValueError):
    """A file is not a livens result file, is truncated, or has an unknown format version."""
