"""How a run ended, under the same names in every result of livens.

:class:`livens.Solution` (:func:`livens.simulate`), :class:`livens.EnsembleSolution`
(:func:`livens.simulate_ensemble`) and the result of a :func:`livens.flow` function each answer:

- ``iterations``: Newton iterations per step (per member and step for an ensemble);
- ``residual``: Newton's ``||R||_inf`` at the end of each step;
- ``failed_step``: the index of the step that failed (the number of steps that converged before it;
  0 for a failed start), -1 where nothing failed; per member for an ensemble or a vmapped flow;
- ``converged``: ``failed_step < 0``;
- ``status``: a :class:`Status` (an array of its codes for an ensemble or a flow result).

A run of :func:`livens.simulate` that fails raises; the Solution its error carries (``err.solution``,
the steps before the failure) answers ``failed_step`` and ``status`` as the other results do.

The arrays behind these names are those of one :class:`~livens.run_record.RunRecord` per run: a
Solution is member 0 of its run's, ``ens[b]`` member b of the ensemble's, and
:meth:`~livens.run_record.RunRecord.of_flow` makes the record of a flow result.
"""

from __future__ import annotations

import enum

import numpy as np


class Status(enum.IntEnum):
    """How a run, or one member of it, ended. The codes are those of a :func:`livens.flow` result's
    ``failure`` field, where ``SYMMETRY_BROKEN + j`` names the j-th symmetry broken."""

    SUCCESS = 0
    """Every step converged."""
    START_FAILED = 1
    """The initial state is not on the constraint manifold, or its projection did not converge."""
    SCHEME_START_FAILED = 2
    """The scheme's own start step (a two-step scheme's first step) did not converge."""
    STEP_FAILED = 3
    """Newton's method did not converge in a time step (``failed_step`` names it)."""
    BLOWUP = 4
    """The energy left the band of ``blowup_factor`` (:func:`livens.simulate`)."""
    INTERRUPTED = 5
    """The run was interrupted (Ctrl-C) before its last step."""
    SYMMETRY_BROKEN = 10
    """A flow call's parameter values break a symmetry the scheme keeps (``failure - 10``: which)."""

    @classmethod
    def of(cls, code: int) -> Status:
        """The Status of a ``failure`` code of a flow result (``SYMMETRY_BROKEN + j`` included)."""
        code = int(code)
        return cls.SYMMETRY_BROKEN if code >= cls.SYMMETRY_BROKEN else cls(code)


class RunRecordNames:
    """``iterations``, ``residual`` and ``converged`` from a result's ``newton_iterations``,
    ``newton_residual`` and ``failed_step`` (module docstring)."""

    newton_iterations: np.ndarray
    newton_residual: np.ndarray

    @property
    def iterations(self) -> np.ndarray:
        """Newton iterations per step (the same array as ``newton_iterations``)."""
        return self.newton_iterations

    @property
    def residual(self) -> np.ndarray:
        """Newton's ``||R||_inf`` at the end of each step (the same array as ``newton_residual``)."""
        return self.newton_residual

    @property
    def failed_step(self):  # pragma: no cover - each result defines it
        raise NotImplementedError

    @property
    def converged(self):
        """Whether nothing failed (per member for an ensemble): ``failed_step < 0``."""
        failed = np.asarray(self.failed_step)
        return bool(failed < 0) if failed.ndim == 0 else failed < 0


__all__ = ["Status", "RunRecordNames"]
