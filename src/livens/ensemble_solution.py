"""EnsembleSolution: the member-first arrays of :func:`livens.simulate_ensemble` (those of its
:class:`~livens.run_record.RunRecord`), each member a view as a :class:`~livens.Solution`, and their
netCDF file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _jaxconfig  # noqa: F401
from .result_files import node_arrays, result_attrs, write_netcdf_arrays
from .run_record import RunRecord
from .run_status import RunRecordNames, Status
from .solution import Solution


@dataclass(eq=False)
class EnsembleSolution(RunRecordNames):
    """The result of :func:`simulate_ensemble`: member-first arrays on a common time grid.

    t (K+1,): the kept nodes' times; q, p (B, K+1, d); v (B, K+1, d) for nodal velocities, else
    (B, K, d); lam, gam (B, K, m) (gam None for schemes without it); newton_iterations,
    newton_residual (B, K): the kept nodes and the steps that end there (every ``save_every``-th).
    ``steps[b]``: the steps member b took (its run-local node); a member whose Newton iteration
    failed keeps its converged steps and NaN after them; ``failed[b]`` says so (its failed step
    keeps its iterations and residual). ``ens[b]`` is member b as a :class:`~livens.Solution`
    whose arrays are slices of the ensemble's (no copy). ``iterations``, ``residual``,
    ``failed_step``, ``converged`` and ``status`` (per member) answer under the names every result
    of livens shares (:mod:`livens.run_status`); :attr:`record` is the ensemble as the
    :class:`~livens.run_record.RunRecord` its arrays belong to.
    """

    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray | None
    newton_iterations: np.ndarray
    newton_residual: np.ndarray
    steps: np.ndarray
    failed: np.ndarray
    velocity_kind: str
    scheme: str
    params: dict
    meta: dict
    problem: Any = None
    _scheme_obj: Any = field(default=None, repr=False)
    _mech: Any = field(default=None, repr=False)
    _record: Any = field(default=None, repr=False)

    @classmethod
    def from_record(cls, record: RunRecord, scheme, params, meta, problem, mech) -> "EnsembleSolution":
        """The ensemble of the run's :class:`~livens.run_record.RunRecord` (its arrays, no copy);
        ``scheme``: the Scheme object, ``mech``: the run's Mechanics."""
        meta = dict(meta, index=np.asarray(record.index).tolist())
        return cls(
            t=record.t,
            q=record.q,
            p=record.p,
            v=record.v,
            lam=record.lam,
            gam=record.gam,
            newton_iterations=record.iterations,
            newton_residual=record.residual,
            steps=record.steps,
            failed=np.isin(record.status, (int(Status.STEP_FAILED), int(Status.BLOWUP))),
            velocity_kind=scheme.capabilities.velocity_kind,
            scheme=scheme.name,
            params=dict(params),
            meta=meta,
            problem=problem,
            _scheme_obj=scheme,
            _mech=mech,
            _record=record,
        )

    @property
    def record(self) -> RunRecord:
        """The :class:`~livens.run_record.RunRecord` whose arrays the ensemble's are: the run's, or
        for an ensemble read from a file one made of its arrays (a file records which members
        failed, so its status codes are STEP_FAILED or SUCCESS)."""
        if self._record is None:
            self._record = RunRecord(
                t=self.t,
                q=self.q,
                p=self.p,
                v=self.v,
                lam=self.lam,
                gam=self.gam,
                iterations=self.newton_iterations,
                residual=self.newton_residual,
                steps=np.asarray(self.steps, np.int64),
                status=np.where(self.failed, int(Status.STEP_FAILED), int(Status.SUCCESS)).astype(np.int32),
                failed_step=np.where(self.failed, self.steps, -1).astype(np.int64),
                index=self._index(),
                nodal_v=self.velocity_kind == "nodal",
            )
        return self._record

    def __len__(self) -> int:
        return int(self.q.shape[0])

    @property
    def h(self) -> float:
        return float(self.meta["h"])

    @property
    def save_every(self) -> int:
        return int(self.meta.get("save_every", 1))

    def _index(self) -> np.ndarray:
        """The global index of each kept step (the step ending at each kept node after node 0)."""
        index = self.meta.get("index")
        return np.asarray(index, np.int64) if index is not None else np.arange(self.t.size - 1)

    @property
    def failed_step(self) -> np.ndarray:
        """Per member: the index of its failed step (the steps it kept), -1 where none failed."""
        return self.record.failed_step

    @property
    def status(self) -> np.ndarray:
        """Per member: the code of its :class:`~livens.Status`: SUCCESS, STEP_FAILED, or
        INTERRUPTED for a member that Ctrl-C stopped before its last step (:attr:`record`)."""
        return self.record.status

    def __getitem__(self, b: int):
        """Member b as the :class:`~livens.Solution` of its single run (its converged steps)."""
        B = len(self)
        if not isinstance(b, (int, np.integer)) or not -B <= b < B:
            raise IndexError(f"member index {b!r} out of range for an ensemble of {B}")
        b = int(b) % B
        n = int(self.steps[b])
        problem = self.problem.replace(q0=self.q[b, 0], v0=self.meta["v0s"][b]) if self.problem is not None else None
        meta = {k: v for k, v in self.meta.items() if k not in ("v0s", "members", "index", "rescued_steps", "lanes")}
        meta.update(
            steps=n,
            ensemble_member=b,
            t_end=float(self.t[0] + n * self.h),
            rescued_steps=list(self.meta.get("rescued_steps", {}).get(b, [])),
        )
        return Solution.from_record(self.record, b, problem, self._scheme_obj, self.params, meta)

    def solutions(self) -> list:
        """Every member as a :class:`~livens.Solution`."""
        return [self[b] for b in range(len(self))]

    def to_netcdf(self, path: str | os.PathLike) -> str:
        """Write the ensemble to a netCDF4 file (atomically), with a ``member`` dimension;
        ``lv.load`` reads it back as an EnsembleSolution."""
        return write_netcdf_arrays(os.fspath(path), *self._file_contents())

    def _file_contents(self) -> tuple[dict, dict, dict]:
        """The variables, the dimension coordinates and the attributes of the ensemble's file."""
        vdim = "time" if self.velocity_kind == "nodal" else "step"
        data = {
            "q": (("member", "time", "coord"), self.q),
            "p": (("member", "time", "coord"), self.p),
            "v": (("member", vdim, "coord"), self.v),
            "lam": (("member", "step", "constraint"), self.lam),
            "newton_iterations": (("member", "step"), self.newton_iterations),
            "newton_residual": (("member", "step"), self.newton_residual),
            "steps": (("member",), self.steps),
            "failed": (("member",), self.failed.astype(np.int8)),
            "v0s": (("member", "coord"), np.asarray(self.meta["v0s"])),
        }
        if self.gam is not None:
            data["gam"] = (("member", "step", "constraint"), self.gam)
        meta = {k: v for k, v in self.meta.items() if k not in ("v0s", "index")}
        d, m = self.q.shape[2], self.lam.shape[2]
        attrs = result_attrs(self.scheme, self.velocity_kind, self.params, meta, d, m, members=len(self), complete=1)
        return data, {"time": np.asarray(self.t), "step": np.asarray(self._index())}, attrs

    @classmethod
    def from_dataset(cls, ds, problem=None) -> "EnsembleSolution":
        """The ensemble of a file written by :meth:`to_netcdf` or streamed by a running ensemble
        (its rows so far; members not yet written are NaN). The scheme and system are reattached
        where the file names a known example (or from ``problem``)."""
        from .mechanics import mechanics
        from .schemes import get as get_scheme

        meta = json.loads(ds.attrs["meta"])
        B = int(ds.attrs["members"])
        meta["v0s"] = np.asarray(ds["v0s"].values) if "v0s" in ds else np.asarray(meta.get("v0s", np.nan))
        meta["index"] = np.asarray(ds["step"].values).tolist()
        steps = np.asarray(ds["steps"].values) if "steps" in ds else np.full(B, ds.sizes["step"])
        failed = np.asarray(ds["failed"].values).astype(bool) if "failed" in ds else np.zeros(B, bool)
        scheme = get_scheme(str(ds.attrs["scheme"]))[0]
        mech = mechanics(problem.system, problem.q0) if problem is not None else None
        return cls(
            **node_arrays(ds),
            steps=steps,
            failed=failed,
            velocity_kind=str(ds.attrs["velocity_kind"]),
            scheme=scheme.name,
            params=json.loads(ds.attrs["params"]),
            meta=meta,
            problem=problem,
            _scheme_obj=scheme,
            _mech=mech,
        )
