"""The record of a run: the one set of member-first arrays that every result of livens is a view of.

A :class:`RunRecord` holds, for each of a run's B members (B = 1 for :func:`livens.simulate`), the
kept nodes and the steps that end there, and how the member ended:

- ``t`` (K+1,): the kept nodes' times, shared by the members;
- ``q``, ``p`` (B, K+1, d); ``v`` (B, K+1, d) for nodal velocities, else (B, K, d);
- ``lam``, ``gam`` (B, K, m) (``gam`` None for the schemes without it);
- ``iterations`` (B, K) int32, ``residual`` (B, K) float64: Newton's iterations and ``||R||_inf``;
- ``steps`` (B,): the steps each member took; ``status`` (B,) int32: the codes of
  :class:`~livens.Status`; ``failed_step`` (B,): the global index of the step that failed, -1 where
  none did (:mod:`livens.run_status`);
- ``index`` (K,): the global index of the step that ends at each kept node (the step from node n to
  n + 1 has index n; a resumed run starts at ``offset``).

The host loop (:func:`livens.driver.host.run_host_loop`) fills it through its recorder
(:meth:`livens.driver.host.Recorder.run_record`) for every executor; :class:`livens.Solution` is
member b of it (:meth:`livens.Solution.from_record`: its arrays are slices of the record's, no copy),
:class:`livens.EnsembleSolution` holds its arrays, ``ens[b]`` being member b's Solution view, and a
result of :func:`livens.flow` answers the same fields under the same names
(:meth:`RunRecord.of_flow`). A member's kept rows after its last step are NaN (zero iterations),
except its failed step's iterations and residual.

:class:`Failure` is the record of how a run, or one member of it, stopped early: every message of a
failed run is built from one (:mod:`livens.driver.failure`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .run_status import Status


@dataclass(eq=False)
class RunRecord:
    """The member-first arrays of a run (module docstring)."""

    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray | None
    iterations: np.ndarray
    residual: np.ndarray
    steps: np.ndarray
    status: np.ndarray
    failed_step: np.ndarray
    index: np.ndarray
    nodal_v: bool
    offset: int = 0

    @property
    def members(self) -> int:
        return int(self.q.shape[0])

    @property
    def converged(self) -> np.ndarray:
        """Per member: nothing failed (``failed_step < 0``)."""
        return np.asarray(self.failed_step) < 0

    def kept(self, b: int) -> int:
        """The kept steps of member b: those up to its last step (``offset + steps[b] - 1``)."""
        return int(np.searchsorted(self.index, self.offset + int(self.steps[b]) - 1, side="right"))

    def member(self, b: int) -> dict:
        """Member b's arrays up to its last kept step, as slices of the record's (no copy): t, q, p,
        v, lam, gam (None where the scheme has none), iterations, residual, index; and its
        ``status`` (a :class:`~livens.Status`) and ``failed_step``."""
        c = self.kept(b)
        return {
            "t": self.t[: c + 1],
            "q": self.q[b, : c + 1],
            "p": self.p[b, : c + 1],
            "v": self.v[b, : c + 1] if self.nodal_v else self.v[b, :c],
            "lam": self.lam[b, :c],
            "gam": None if self.gam is None else self.gam[b, :c],
            "iterations": self.iterations[b, :c],
            "residual": self.residual[b, :c],
            "index": self.index[:c],
            "status": Status.of(int(self.status[b])),
            "failed_step": int(self.failed_step[b]),
        }

    @classmethod
    def of_flow(cls, result, flow) -> RunRecord:
        """The record of a concrete result of the :func:`livens.flow` function ``flow`` (a
        :class:`~livens.driver.ingraph.FlowResult`; of a ``jax.vmap``-ped call: with the members'
        axis first; else one member). Its arrays are NumPy copies of the result's, the per-step ones
        (which a flow keeps for every step) at the kept nodes only where ``flow.save_every`` > 1;
        ``steps``: those each member took (up to its failed step, or all).

        The result itself stays what a pure function returns, a pytree of JAX arrays that
        ``jax.jit``, ``jax.vmap`` and the derivatives trace through; it answers the record's fields
        under the same names with the same shapes and dtypes (those of one member)."""
        velocity_kind, save_every = flow.plan.scheme.capabilities.velocity_kind, flow.save_every
        nodal = velocity_kind == "nodal"
        conv = np.asarray(result.converged)
        one = conv.ndim == 0

        def arr(x):
            if x is None:
                return None
            x = np.asarray(x)
            return x[None] if one else x

        t = np.asarray(result.t)
        t = t if t.ndim == 1 else t.reshape(-1, t.shape[-1])[0]  # every member's grid is the same
        iterations = arr(result.iterations)
        n_steps = iterations.shape[1]
        failed = np.atleast_1d(np.asarray(result.failed_step)).astype(np.int64)
        status = np.atleast_1d(np.asarray(result.failure if result.failure is not None else np.where(failed < 0, 0, 3)))
        steps = np.where(failed < 0, n_steps, np.maximum(failed, 0))
        q = arr(result.q)
        k = int(save_every)
        per_step = (lambda x: x) if k == 1 else (lambda x: None if x is None else x[:, k - 1 :: k])
        return cls(
            t=t,
            q=q,
            p=arr(result.p),
            v=arr(result.v) if nodal else per_step(arr(result.v)),
            lam=per_step(arr(result.lam)),
            gam=per_step(arr(result.gam)),
            iterations=per_step(iterations),
            residual=per_step(arr(result.residual)),
            steps=steps.astype(np.int64),
            status=status.astype(np.int32),
            failed_step=failed,
            index=np.arange(k - 1, n_steps, k, dtype=np.int64),
            nodal_v=nodal,
        )


@dataclass(frozen=True)
class Failure:
    """How a run, or one member of it, stopped early: the record every failure message is built from.

    status: the :class:`~livens.Status` (START_FAILED, SCHEME_START_FAILED, STEP_FAILED, BLOWUP,
        INTERRUPTED, SYMMETRY_BROKEN).
    step: the run-local index of the step concerned (the step from node n to n + 1 has index n):
        the failed step, the step whose energy left the band, the steps done before an interrupt.
    residual: the figure that failed (Newton's ``||R||_inf``; ``|E - E0|`` for a blow-up; NaN for an
        interrupt).
    iterations: Newton's iterations of the failed step.
    member: the member that failed (0 for a single run); None for a call of :func:`livens.flow` that is
        not vmapped.
    symmetry: the j of SYMMETRY_BROKEN + j (which symmetry a flow call's parameters break).
    """

    status: Status
    step: int
    residual: float = float("nan")
    iterations: int = 0
    member: int | None = None
    symmetry: int = 0

    @classmethod
    def of_code(cls, code: int, step: int, residual: float, member: int | None = None) -> Failure:
        """The Failure of a :func:`livens.flow` result's ``failure`` code (``SYMMETRY_BROKEN + j`` included)."""
        status = Status.of(code)
        j = int(code) - int(Status.SYMMETRY_BROKEN) if status is Status.SYMMETRY_BROKEN else 0
        return cls(status, int(step), float(residual), 0, member, j)


__all__ = ["RunRecord", "Failure"]
