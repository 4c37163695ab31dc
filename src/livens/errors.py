"""Errors of a run. Each carries the Solution up to the last good step (``.solution``)."""
from __future__ import annotations


class SimulationError(RuntimeError):
    """A run stopped early; ``solution`` holds every step computed before, ``step``, ``time``,
    ``residual`` say where and why."""

    def __init__(self, message: str, solution=None, step: int | None = None, time: float | None = None,
                 residual: float | None = None):
        super().__init__(message)
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
