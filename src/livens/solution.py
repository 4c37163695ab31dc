"""Solution: the arrays of a run, its diagnostics, and lossless export (netCDF, CSV).

Arrays: t (N+1,), q and p (N+1, d), v (N+1, d) for nodal velocities or
(N, d) for "interval"/"leading" ones (see ``velocity_kind``), lam and gam (N, m), newton_iterations
and newton_residual (N,).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache
from .kinetic import manifold_kinetic_energies, vmapped
from .result_files import (
    csv_name,
    dataset,
    livens_version,
    result_attrs,
    thinned_nodes,
    write_netcdf_arrays,
)
from .run_record import RunRecord
from .run_status import RunRecordNames, Status

if TYPE_CHECKING:  # xarray is an optional dependency (the io extra), imported where it is used
    import xarray as xr


SHORT_RUN = 0.1
"""Seconds of stepping under which :meth:`Solution.summary` notes that its "steps/s" is that of a
short run (the host loop's per-call overhead, a millisecond or so, weighs in it)."""

_ENERGY_NAME = {"livens": "E = p.v - L", "total": "E = T + V"}
"""The energy a summary's drift line measures: the generalized energy function (KB23 eq 12) where the
scheme has nodal velocities, else the Hamiltonian."""


@dataclass(eq=False)
class Solution(RunRecordNames):
    """The result of :func:`livens.simulate` (or of :func:`livens.load`): the nodes and the per-step
    unknowns of a run, with the diagnostics computed from them (:meth:`energy`, :meth:`momentum_maps`,
    :meth:`constraint_residual`, :meth:`summary`) and lossless export (:meth:`to_netcdf`, :meth:`to_csv`).

    With N the steps kept (every ``save_every``-th node), d the coordinates and m the constraint
    equations, the fields are:

    t: the node times, shape (N+1,).
    q: the configurations q^n at the nodes, shape (N+1, d).
    p: the momenta p^n at the nodes, shape (N+1, d).
    v: the velocities, shape (N+1, d) where ``velocity_kind`` is "nodal", else (N, d): one per step.
    lam: the multipliers lambda of the position constraints, one row per step, shape (N, m).
    gam: the multipliers gamma of the secondary constraint (the GGL schemes, RATTLE, the GGL
        midpoint rule), shape (N, m); None for the schemes without one.
    newton_iterations: Newton iterations per step, shape (N,) (0 where the first guess already met the
        tolerance).
    newton_residual: the residual's infinity norm at the end of each step's Newton iteration, shape (N,).
        ``iterations``, ``residual``, ``failed_step``, ``converged`` and ``status`` answer under the
        names every result of livens shares (:mod:`livens.run_status`).
    velocity_kind: which velocity ``v`` holds: "nodal" (v^n at t^n), "interval" (v^{n+1} of the step
        from t^n to t^{n+1}) or "leading" (v^n of that step).
    scheme: the scheme's name, e.g. "ggl-vi".
    params: the scheme's parameters of the run (e.g. ``theta``); empty for schemes without any.
    meta: the run's settings and records: ``h``, ``tol``, ``max_iter``, ``guess``, ``backend``,
        ``save_every``, ``t_start``, ``t_end``, ``steps``, ``rescued_steps``, ``example`` and
        ``problem_parameters``, ``package_version``, ...
    problem: the Problem that was run; None after loading a file whose system cannot be rebuilt.
    stored: diagnostics read from a file (:func:`livens.load`), used where no problem is attached;
        empty for a fresh run.

    A run's Solution is member 0 of its :class:`~livens.run_record.RunRecord` (:meth:`from_record`:
    the arrays are slices of the record's), an ensemble member's is member b of the ensemble's;
    :attr:`record` gives the Solution back as a record of one member.
    """

    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray | None
    newton_iterations: np.ndarray
    newton_residual: np.ndarray
    velocity_kind: str
    scheme: str
    params: dict
    meta: dict
    problem: Any = None  # the Problem (None after loading a file whose system cannot be rebuilt)
    stored: dict = field(default_factory=dict)  # diagnostics read from a file

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_record(cls, record: RunRecord, b: int, problem, scheme, params, meta: dict) -> "Solution":
        """Member b of the :class:`~livens.run_record.RunRecord` ``record`` as a Solution: its arrays
        are slices of the record's (no copy) up to the member's last kept step. ``meta``: the run's
        (the problem's name and parameters and the package version are added; how the member
        stopped, where it did, as ``status`` and ``failed_step``); ``scheme``: the Scheme object."""
        arrays = record.member(b)
        meta = dict(meta)
        if arrays["status"] is not Status.SUCCESS:
            meta.update(status=arrays["status"].name, failed_step=arrays["failed_step"])
        if problem is not None:
            meta.update(example=problem.name, problem_parameters=dict(problem.parameters))
        meta.update(package_version=livens_version())
        return cls(
            t=arrays["t"],
            q=arrays["q"],
            p=arrays["p"],
            v=arrays["v"],
            lam=arrays["lam"],
            gam=arrays["gam"] if scheme.capabilities.gamma else None,
            newton_iterations=arrays["iterations"],
            newton_residual=arrays["residual"],
            velocity_kind=scheme.capabilities.velocity_kind,
            scheme=scheme.name,
            params=dict(params),
            meta=meta,
            problem=problem,
        )

    @property
    def record(self) -> RunRecord:
        """The Solution as a :class:`~livens.run_record.RunRecord` of one member, whose arrays are
        views of the Solution's (``record.member(0)`` gives them back)."""
        return RunRecord(
            t=self.t,
            q=self.q[None],
            p=self.p[None],
            v=self.v[None],
            lam=self.lam[None],
            gam=None if self.gam is None else self.gam[None],
            iterations=self.newton_iterations[None],
            residual=self.newton_residual[None],
            steps=np.array([self.steps_computed], np.int64),
            status=np.array([int(self.status)], np.int32),
            failed_step=np.array([self.failed_step], np.int64),
            index=self._step_index(),
            nodal_v=self._nodal_v,
            offset=int(self.meta.get("step_offset", 0)),
        )

    # ------------------------------------------------------------------ basic properties
    @property
    def failed_step(self) -> int:
        """The index of the step whose Newton iteration failed (the steps kept before it), -1 where
        none did: a Solution carried by :class:`~livens.ConvergenceError` answers the error's step."""
        return int(self.meta.get("failed_step", -1))

    @property
    def status(self) -> Status:
        """How the run ended (:class:`~livens.Status`): SUCCESS for a run that returned."""
        return Status[self.meta["status"]] if "status" in self.meta else Status.SUCCESS

    @property
    def h(self) -> float:
        return float(self.meta["h"])

    @property
    def n_steps(self) -> int:
        """The intervals between the kept nodes, len(t) - 1: the steps computed only where
        ``save_every`` is 1 (:attr:`steps_computed` counts those in any case)."""
        return int(self.q.shape[0] - 1)

    @property
    def steps_computed(self) -> int:
        """The steps the run computed (``meta["steps"]``): ``save_every`` times :attr:`n_steps` for
        a thinned run that reached its end; for a file left by a stopped run, which does not
        record them, the steps its kept nodes span."""
        return int(self.meta.get("steps", self.n_steps * self.save_every))

    @property
    def nodes_kept(self) -> int:
        """The nodes stored, len(t): the initial one and every ``save_every``-th after it."""
        return int(self.t.shape[0])

    @property
    def save_every(self) -> int:
        return int(self.meta.get("save_every", 1))

    def _consecutive(self, what: str):
        if self.save_every != 1:
            raise ValueError(
                f"{what} needs consecutive steps, but this run kept every {self.save_every}th node "
                "(save_every); rerun with save_every=1 for it."
            )

    @property
    def mechanics(self):
        from .mechanics import mechanics

        if self.problem is None:
            raise ValueError(
                "This Solution has no system attached (it was loaded from a file of a user-defined system); "
                "diagnostics stored in the file are available, others need lv.load(path, problem=...)."
            )
        mech = mechanics(self.problem.system, self.problem.q0)
        values = self.meta.get("parameters")  # the System's parameters of this run
        if values is not None:
            mech = mech.bind({k: jnp.asarray(v) for k, v in values.items()})
        return mech

    def _vmap(self, fn, *arrays):
        return np.asarray(vmapped(fn)(*[jnp.asarray(a) for a in arrays]))

    def _stored(self, key):
        if self.problem is None and key in self.stored:
            return self.stored[key]
        return None

    def _step_index(self) -> np.ndarray:
        """Global index of each stored step (the step that ends at each stored node after the first)."""
        k = self.save_every
        first = int(round(self.t[0] / self.h)) if self.h > 0 else 0
        return first + k * np.arange(1, self.n_steps + 1) - 1

    @property
    def _nodal_v(self) -> bool:
        return self.velocity_kind == "nodal"

    # ------------------------------------------------------------------ diagnostics
    def energy(self) -> dict[str, np.ndarray]:
        """Energies at the nodes: "kinetic", "potential", "total"; "livens" E(q, v, p) = p.v - L
        (KBS23b eq 4, KB23 eq 31) where the scheme has nodal velocities.

        The kinetic energy is 1/2 v.M(q)v for nodal velocities, else 1/2 p.M^-1 p (KBS23b eq 7). Where M
        is singular (or configuration dependent) and the scheme has no nodal velocities (``vi-lagrange``,
        ``vi-nullspace`` on the beams of SLO09 §4.2), it is 1/2 w.M(q)w for the velocity w on the
        constraint manifold whose momentum has the same tangential part as p: G(q) w = 0 and
        M(q) w - p in the range of G(q)^T (:func:`manifold_kinetic_energy`; equal to 1/2 p.M^-1 p
        where M is regular and G M^-1 p = 0), computed in bounded memory and sparse per node
        (:func:`manifold_kinetic_energies`). The energies of a Solution are computed once and kept
        (its arrays are not expected to change).
        """
        keys = [k for k in ("kinetic", "potential", "total", "livens") if f"energy_{k}" in self.stored]
        if self.problem is None and keys:
            return {k: self.stored[f"energy_{k}"] for k in keys}
        return self._kept("energy", self._energy)

    def _kept(self, name: str, compute):
        """``compute()``, computed once per Solution and kept (a copy of its arrays each time): the
        summary, the files and the figure of one run ask for the same diagnostics in turn. The key
        is the identity of the arrays, the problem and the parameters: new ones are seen."""
        key = (self.q, self.p, self.v, self.problem, self.meta.get("parameters"))
        kept = self.__dict__.setdefault("_diagnostics", {})
        hit = kept.get(name)
        if hit is None or any(a is not b for a, b in zip(hit[0], key)):
            hit = kept[name] = (key, compute())
        return _copy(hit[1])

    def _energy(self) -> dict[str, np.ndarray]:
        mech = self.mechanics
        V = self._vmap(mech.V, self.q)
        if self._nodal_v:
            T = self._vmap(mech.T, self.q, self.v)
        elif mech.Minv_const is not None:
            T = 0.5 * np.einsum("ni,ij,nj->n", self.p, np.asarray(mech.Minv()), self.p)
        else:
            T = manifold_kinetic_energies(mech, self.q, self.p)
        out = {"kinetic": T, "potential": V, "total": T + V}
        if self._nodal_v:
            out["livens"] = self._vmap(mech.E, self.q, self.v, self.p)
        return out

    def energy_increments(self, kind: str = "total") -> np.ndarray:
        """E^{n+1} - E^n per step, shape (N,)."""
        return np.diff(self.energy()[kind])

    def momentum_maps(self) -> dict[str, np.ndarray]:
        """J_xi = p . xi q (KBS23b eq 45) at the nodes for each of the problem's symmetries."""
        if self.problem is None:
            return {k[len("J:") :]: v for k, v in self.stored.items() if k.startswith("J:")}
        return {s.name: np.asarray(s.momentum_map(self.q, self.p)) for s in self.problem.symmetries}

    def _force_points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, v, t) per step where the scheme evaluates the external force: the left node for
        schemes whose velocity leads the step (``ggl-vi``), else the midpoint (nodal or interval
        velocities)."""
        n = self.n_steps
        if self.velocity_kind == "leading":
            return self.q[:-1], self.v[:n], self.t[:-1]
        q = 0.5 * (self.q[:-1] + self.q[1:])
        v = 0.5 * (self.v[:-1] + self.v[1:]) if self._nodal_v else self.v[:n]
        return q, v, self.t[:-1] + 0.5 * self.h

    def external_impulse(self) -> dict[str, np.ndarray]:
        """The impulse I^n of the external force and the dampers over each step along each of the
        problem's symmetries, shape (N,) per symmetry: I^n = h f^n . xi_Q(q^*) (:meth:`Symmetry.moment`)
        with the force of the step as the schemes apply it,

        - nodal and interval velocities: f^n = F(q^{n+1/2}, v^{n+1/2}, t^n + h/2) - C(q^{n+1/2}) v^{n+1/2}
          at q^* = q^{n+1/2}, with v^{n+1/2} the mean of the nodal velocities or the velocity of the
          interval -- the midpoint quadrature of ``livens-em``, ``livens-midpoint`` (KB23 eq 28, 21),
          the midpoint rules, and of ``vi-lagrange``, ``vi-nullspace``, whose discrete forces
          f^-_d = f^+_d = h/2 F (SLO09 §4) give f^-_d . xi q^n + f^+_d . xi q^{n+1} = h F . xi q^{n+1/2};
        - leading velocities (``ggl-vi``): f^n = F(q^n, v^n, t^n) - C(q^n) v^n at q^* = q^n.

        A scheme that keeps the momentum maps (the energy-momentum and the variational ones) meets
        J^{n+1} - J^n = I^n (:meth:`momentum_balance`) to the Newton tolerance; zero where the system
        has neither an external force nor dampers."""
        syms = self.problem.symmetries if self.problem is not None else ()
        mech = self.mechanics
        self._consecutive("external_impulse()")
        n = self.n_steps
        if not syms or not (mech.has_external_force or mech.has_dissipation):
            return {s.name: np.zeros(n) for s in syms}
        q, v, t = self._force_points()
        f = self._vmap(_applied_force(mech), q, v, t)
        return {s.name: self.h * np.asarray(s.moment(q, f)) for s in syms}

    def momentum_balance(self) -> dict[str, np.ndarray]:
        """J^{n+1} - J^n - I^n per step and symmetry, shape (N,): the change of each momentum map
        (KBS23b eq 45) less the impulse of the external force and dampers along it
        (:meth:`external_impulse`). Zero to the Newton tolerance for the schemes that keep momentum
        maps, whether or not the loads respect the symmetry; without loads it is J^{n+1} - J^n."""
        impulse = self.external_impulse()
        return {name: np.diff(J) - impulse[name] for name, J in self.momentum_maps().items()}

    def constraint_residual(self, level: str = "position") -> np.ndarray:
        """Nodal constraint residuals, shape (N+1, m).

        "position": g(q^n); "velocity": G(q^n) M^-1 p^n (KBS23b eq 29), or G(q^n) v^n where M is
        singular or configuration dependent and the scheme has nodal velocities.
        """
        if level not in ("position", "velocity"):
            raise ValueError(f"level must be 'position' or 'velocity'; got {level!r}.")
        hit = self._stored(f"residual_{level}")
        if hit is not None:
            return hit
        return self._kept(f"residual_{level}", lambda: self._constraint_residual(level))

    def _constraint_residual(self, level: str) -> np.ndarray:
        mech = self.mechanics
        if mech.m == 0:
            return np.zeros((self.q.shape[0], 0))
        if level == "position":
            return self._vmap(mech.g, self.q)
        if mech.Minv_const is not None:
            w = self.p @ np.asarray(mech.Minv()).T
        elif self._nodal_v:
            w = self.v
        else:
            raise ValueError("The velocity-level residual needs M^-1 or nodal velocities; this run has neither.")
        return np.einsum("nij,nj->ni", self._vmap(mech.G, self.q), w)

    def enforced_residuals(self) -> dict[str, np.ndarray]:
        """Residuals of the constraints the scheme is built to satisfy, per step, named after
        where they are evaluated (e.g. VI-S: "velocity G(q_bar) M^-1 p^{n+1}"); of an overconstrained
        system, those of the independent equations it solves (``problem.constraint_rank.kept``)."""
        if self.problem is None:
            return {k[len("enforced:") :]: v for k, v in self.stored.items() if k.startswith("enforced:")}
        self._consecutive("enforced_residuals()")
        return self._kept("enforced", self._enforced_residuals)

    def _enforced_residuals(self) -> dict:
        from .schemes import get
        from .schemes.enforced import residuals

        sch, _ = get(self.scheme)
        out = residuals(sch.about.enforced, self)
        rank = getattr(self.problem, "constraint_rank", None)
        if rank is None or not rank.redundant:
            return out
        # an overconstrained system: the scheme solves the independent equations only (livens.redundancy)
        return {k: rank.restrict(v) if np.shape(v)[-1:] == (rank.m,) else v for k, v in out.items()}

    def dissipated_work(self) -> np.ndarray:
        """Work W_diss(t_n) done by the viscous forces, shape (N+1,), W(0) = 0 (KBS23a eq 55).

        Quadrature per step: h v.C(q)v with the scheme's velocity of that step, C at the node where
        that velocity lives ("leading": q^n, "interval": q^{n+1/2}, "nodal": trapezoidal).
        """
        hit = self._stored("dissipated_work")
        if hit is not None:
            return hit
        mech = self.mechanics
        if not mech.has_dissipation:
            return np.zeros(self.q.shape[0])
        self._consecutive("dissipated_work()")
        h = self.h

        def power(q, v):
            return v @ (mech.C(q) @ v)

        if self.velocity_kind == "leading":
            P = self._vmap(power, self.q[:-1], self.v)
        elif self.velocity_kind == "interval":
            P = self._vmap(power, 0.5 * (self.q[:-1] + self.q[1:]), self.v)
        else:
            Pn = self._vmap(power, self.q, self.v)
            P = 0.5 * (Pn[:-1] + Pn[1:])
        return np.concatenate([[0.0], np.cumsum(h * P)])

    def summary(self) -> dict:
        """Figures for the CLI: steps, times, the energy error, momentum drift, residuals, iterations,
        and the number of steps whose plain Newton iteration failed and was rescued
        (``lv.simulate(..., rescue=True)``). "steps" counts the steps computed, "nodes kept" the
        nodes stored (one in every ``save_every``; a file left by a stopped run counts the steps its
        kept nodes span). The times add up: "wall time" = "compile time" (set-up, the start step and
        the compiles before the first step) + "stepping time" (the steps with their records, a compile
        needed during them included); "steps/s" is the steps over the stepping time, and where that
        is under :data:`SHORT_RUN` seconds a line "steps/s note" says that per-call overhead weighs
        in it. A run continued from a file (``meta["resumed"]``) is timed for the continuation; a
        file from a livens that did not record the stepping time gives the rate of the chunks after
        the first (which it timed with the compiles), NaN where there were none. The maxima are over
        the kept nodes.

        The energy error is relative to the energy scale max(|E0|, max T - min T, max V - min V), so
        that it means something for a system that starts at rest (E0 = 0); where the system has an
        external force or dampers it is the energy balance max_n |E^n - E^0 - W_ext^n + W_diss^n|
        (:meth:`external_work`, :meth:`dissipated_work`), not the change of E, which the loads make.
        The constraint residuals are the nodal ones, g(q^n) and G(q^n) M^-1 p^n (or G(q^n) v^n); the
        lines "enforced (position)" and "enforced (velocity)" say whether the scheme enforces that
        residual by its own equations or another one (named, with its largest value)."""
        out: dict = {
            "steps": self.steps_computed,
            "nodes kept": len(self.t),
            "wall time [s]": float(self.meta.get("wall_time", float("nan"))),
            "compile time [s]": float(self.meta.get("compile_time", float("nan"))),
        }
        out.update(self._rate_lines(out["steps"]))
        E = self.energy()
        key = "livens" if "livens" in E else "total"
        name = _ENERGY_NAME[key]
        En = np.asarray(E[key])
        scale = max(abs(float(En[0])), *(float(np.ptp(E[k])) if len(E[k]) else 0.0 for k in ("kinetic", "potential")))
        scale = scale if scale > 0 else 1.0
        out["energy scale max(|E0|, range of T, range of V)"] = scale
        mech = self.mechanics if self.problem is not None else None
        loads = mech is not None and (mech.has_external_force or mech.has_dissipation)
        if loads and self.save_every == 1:
            balance, terms = En - En[0], ""
            if mech.has_external_force:
                W = self.external_work()
                out["work of the external forces W_ext(T)"] = float(W[-1])
                balance, terms = balance - W, terms + " - W_ext"
            if mech.has_dissipation:
                D = self.dissipated_work()
                out["dissipated work W_diss(T)"] = float(D[-1])
                balance, terms = balance + D, terms + " + W_diss"
            out[f"max |E - E0{terms}| / scale ({name}, energy balance)"] = float(np.max(np.abs(balance)) / scale)
        else:
            label = f"max |E - E0| / scale ({name})"
            if loads:
                label += f" (includes the loads' work: one node in every {self.save_every} kept)"
            out[label] = float(np.max(np.abs(En - En[0])) / scale)
        for name, J in self.momentum_maps().items():
            out[f"max drift {name}"] = float(np.max(np.abs(J - J[0])))
        if loads and self.save_every == 1:
            for name, b in self.momentum_balance().items():
                out[f"max |J^(n+1) - J^n - I^n| {name} (momentum balance)"] = float(np.max(np.abs(b), initial=0.0))
        if self.lam.ndim == 2 and self.lam.shape[1]:
            out.update(self._residual_lines())
        out["mean Newton iterations"] = float(np.mean(self.newton_iterations)) if self.n_steps else 0.0
        out["steps rescued by damped Newton"] = len(self.meta.get("rescued_steps", ()))
        return out

    def _rate_lines(self, steps: int) -> dict:
        """The stepping time, "steps/s" over it, and for a short run a note (:meth:`summary`)."""
        ran = steps - int((self.meta.get("resumed") or {}).get("steps", 0))  # those of this session
        stepping = self.meta.get("stepping_time")
        if stepping is None:  # a file of an older livens: its compile time includes the first chunk
            run = float(self.meta.get("wall_time", float("nan"))) - float(self.meta.get("compile_time", float("nan")))
            timed = ran - min(int(self.meta.get("chunk", ran)), ran)
            return {"steps/s": timed / run if (run > 0 and timed > 0) else float("nan")}
        stepping = float(stepping)
        out: dict = {"stepping time [s]": stepping}
        out["steps/s"] = ran / stepping if (stepping > 0 and ran > 0) else 0.0
        if 0 < ran and stepping < SHORT_RUN:
            out["steps/s note"] = (
                f"a short run ({ran} steps in {1e3 * stepping:.3g} ms): per-call overhead weighs in "
                "this rate; time a longer run for the speed of the steps"
            )
        return out

    def _residual_lines(self) -> dict:
        """The nodal residuals of :meth:`summary` and whether the scheme enforces them."""
        out: dict = {}
        names = {}
        for level, sym in (("position", "g"), ("velocity", "g_v")):
            try:
                out[f"max |{sym}|"] = float(np.max(np.abs(self.constraint_residual(level)), initial=0.0))
                names[level] = sym
            except ValueError:
                continue
        out.update(self._redundant_lines())
        try:
            enforced = self.enforced_residuals()
        except (ValueError, AttributeError):
            enforced = None
        for level, sym in names.items():
            if enforced is None:
                out[f"enforced ({level})"] = "not known (one node in every save_every kept, or no scheme)"
                continue
            own = [k for k in enforced if k.startswith(level)]
            if not own:
                out[f"enforced ({level})"] = (
                    f"no: the scheme does not enforce max |{sym}| (its equations leave it free)"
                )
                continue
            name = own[0]
            at_nodes = "q^{n+1}" in name and (level == "position" or "p^{n+1}" in name or "v^{n+1}" in name)
            if level == "velocity" and at_nodes:
                # the nodal residual is G M^-1 p where M^-1 is constant, else G v: the same quantity?
                nodal_p = self.problem is not None and self.mechanics.Minv_const is not None
                at_nodes = ("p^{n+1}" in name) == nodal_p
            if at_nodes:
                out[f"enforced ({level})"] = f"yes: max |{sym}| is the scheme's own {name.split(' ', 1)[1]} = 0"
            else:
                top = float(np.max(np.abs(np.asarray(enforced[name])), initial=0.0))
                out[f"enforced ({level})"] = (
                    f"no: the scheme enforces {name.split(' ', 1)[1]} = 0 instead (max {top:.3e}); max |{sym}| is free"
                )
        return out

    def _redundant_lines(self) -> dict:
        """The summary's lines of an overconstrained system (:mod:`livens.redundancy`): the redundant
        equations, which the scheme does not solve, and their largest residuals along the run."""
        rank = getattr(self.problem, "constraint_rank", None)
        if rank is None:
            return {}
        out = {}
        if rank.singular_start:
            out["singular start"] = f"rank G(q0) = {rank.rank_q0} < {rank.rank} = rank G near q0"
        if not rank.redundant:
            return out
        g = np.abs(self.constraint_residual("position"))[:, list(rank.redundant)]
        worst = np.max(g, axis=0, initial=0.0)
        listed = ", ".join(f"{rank.labels[k]} {w:.1e}" for k, w in zip(rank.redundant, worst))
        out[f"redundant equations ({len(rank.redundant)} of {rank.m}, not solved, multipliers 0): max |g|"] = listed
        return out

    def external_work(self) -> np.ndarray:
        """Work W_ext(t_n) of the external force F(q, v, t), shape (N+1,), W_ext(0) = 0, by the
        quadrature of the step the schemes apply F with: F(q^{n+1/2}, v, t^n + h/2) . (q^{n+1} - q^n)
        (midpoint; v the mean of the nodal velocities or the velocity of the interval), or
        F(q^n, v^n, t^n) . (q^{n+1} - q^n) for leading velocities (``ggl-vi``). Zero without a force."""
        mech = self.mechanics
        n = self.n_steps
        if not mech.has_external_force or n == 0:
            return np.zeros(self.q.shape[0])
        self._consecutive("external_work()")
        q, v, t = self._force_points()
        F = self._vmap(mech.F, q, v, t)
        return np.concatenate([[0.0], np.cumsum(np.einsum("ni,ni->n", F, np.diff(self.q, axis=0)))])

    # ------------------------------------------------------------------ export
    def to_dataset(self) -> xr.Dataset:
        """An xarray Dataset with every array, the diagnostics and the metadata."""
        return dataset(*self._file_contents())

    def _file_contents(self) -> tuple[dict, dict, dict]:
        """The variables, the dimension coordinates and the attributes of the Solution's file."""
        d = self.q.shape[1]
        m = self.lam.shape[1] if self.lam.ndim == 2 else 0
        vdim = "time" if self._nodal_v else "step"
        data = {
            "q": (("time", "coord"), self.q),
            "p": (("time", "coord"), self.p),
            "v": ((vdim, "coord"), self.v),
            "lam": (("step", "constraint"), self.lam.reshape(len(self.newton_iterations), m)),
            "newton_iterations": (("step",), self.newton_iterations),
            "newton_residual": (("step",), self.newton_residual),
        }
        if self.gam is not None:
            data["gam"] = (("step", "constraint"), self.gam.reshape(len(self.newton_iterations), m))
        diag = self._diagnostics_for_file()
        for k, (dims, arr) in diag.items():
            data[k] = (dims, arr)
        meta = dict(self.meta)
        hist = meta.pop("guess_history", None)
        if hist is not None:  # the predictor's history (livens.simulate, resume): a variable, not an attribute
            data["guess_history"] = (
                ("history", "unknown"),
                np.asarray(hist["x"], dtype=float),
                {k: hist[k] for k in ("step", "k", "advanced", "since") if k in hist},
            )
        names = None
        if self.problem is not None:
            names = self.problem.system.constraint_names
        attrs = result_attrs(self.scheme, self.velocity_kind, self.params, meta, d, m)
        if names:
            attrs["constraint_names"] = json.dumps(list(names))
        return data, {"time": np.asarray(self.t), "step": self._step_index()}, attrs

    def _diagnostics_for_file(self) -> dict:
        return self._kept("file", self._file_diagnostics)

    def _file_diagnostics(self) -> dict:
        out: dict = {}
        try:
            for k, arr in self.energy().items():
                out[f"energy_{k}"] = (("time",), np.asarray(arr))
            for k, arr in self.momentum_maps().items():
                out[f"J:{k}"] = (("time",), np.asarray(arr))
            for level in ("position", "velocity"):
                try:
                    out[f"residual_{level}"] = (("time", "constraint"), self.constraint_residual(level))
                except ValueError:
                    pass
            if self.save_every == 1:
                for k, arr in self.enforced_residuals().items():
                    arr = np.asarray(arr)
                    out[f"enforced:{k}"] = (
                        ("step", "constraint"),
                        arr.reshape(self.n_steps, arr.size // max(self.n_steps, 1)),
                    )
                out["dissipated_work"] = (("time",), self.dissipated_work())
        except ValueError:
            pass
        return out

    def to_netcdf(self, path: str | os.PathLike) -> str:
        """Write the Solution to a netCDF4 file (atomically: temporary file, then rename)."""
        return write_netcdf_arrays(os.fspath(path), *self._file_contents())

    def to_csv(self, path: str | os.PathLike, rows: int | None = None, columns: str = "all") -> str:
        """Write nodal data as CSV with named columns (pgfplots, spreadsheets); returns the path.

        One row per stored node t^n. ``columns="all"``: t, q_i, p_i, v_i, energies, momentum maps,
        every constraint residual (nodal and where the scheme enforces it), lambda_j, gamma_j and
        the Newton iterations; ``"summary"``: t, q_i, energies, momentum maps, the largest
        |residual| over the constraints at each level (``max_abs_residual_position``, ...) and the
        Newton iterations. Per-step quantities (v for non-nodal schemes, lam, gam, enforced
        residuals, Newton iterations) are written in the row of the step's end node t^{n+1}
        ("leading" velocities in the row of t^n); the remaining row holds NaN.

        ``rows``: at most this many rows, the nodes 0, k, 2k, ... and the last one (k the smallest
        step that fits); None writes every stored node. The file is replaced atomically and gets
        the permissions of any new file (0666 less the umask).
        """
        if columns not in ("all", "summary"):
            raise ValueError(f"columns must be 'all' or 'summary'; got {columns!r}.")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 2):
            raise ValueError(f"rows must be an integer of at least 2 (or None for every node); got {rows!r}.")
        path = os.fspath(path)
        n1 = self.q.shape[0]
        sel = thinned_nodes(n1, rows)
        summary = columns == "summary"
        cols: dict[str, np.ndarray] = {"t": self.t[sel]}

        def steps(arr, leading=False):
            out = np.full((n1,) + arr.shape[1:], np.nan)
            if leading:
                out[:-1] = arr
            else:
                out[1:] = arr
            return out[sel]

        for i in range(self.q.shape[1]):
            cols[f"q{i + 1}"] = self.q[sel, i]
        if not summary:
            for i in range(self.p.shape[1]):
                cols[f"p{i + 1}"] = self.p[sel, i]
            v = self.v[sel] if self._nodal_v else steps(self.v, self.velocity_kind == "leading")
            for i in range(self.v.shape[1]):
                cols[f"v{i + 1}"] = v[:, i]
        for k, (dims, arr) in self._diagnostics_for_file().items():
            arr = np.asarray(arr)
            arr = steps(arr) if dims[0] == "step" else arr[sel]
            if arr.ndim == 1:
                cols[csv_name(k)] = arr
            elif summary:
                if arr.shape[1]:
                    name = k.split(":", 1)[-1]
                    prefix = "max_abs_" + ("enforced_" if k.startswith("enforced:") else "")
                    cols[prefix + csv_name(name)] = np.max(np.abs(arr), axis=1)
            else:
                for j in range(arr.shape[1]):
                    cols[f"{csv_name(k)}_{j + 1}"] = arr[:, j]
        if not summary:
            for j in range(self.lam.shape[1] if self.lam.ndim == 2 else 0):
                cols[f"lambda{j + 1}"] = steps(self.lam[:, j])
                if self.gam is not None:
                    cols[f"gamma{j + 1}"] = steps(self.gam[:, j])
        cols["newton_iterations"] = steps(self.newton_iterations.astype(float))
        header = ",".join(cols)
        table = np.column_stack([np.asarray(c, dtype=float) for c in cols.values()])
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
        try:
            # a new file with mode 0666 less the umask, as open() gives (mkstemp would give 0600)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            with os.fdopen(fd, "w") as f:
                np.savetxt(f, table, delimiter=",", header=header, comments="", fmt="%.17g")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path

    def __repr__(self) -> str:
        return (
            f"Solution(scheme={self.scheme!r}, params={self.params}, steps_computed={self.steps_computed}, "
            f"nodes_kept={self.nodes_kept}, save_every={self.save_every}, h={self.h:g}, d={self.q.shape[1]}, "
            f"m={self.lam.shape[1] if self.lam.ndim == 2 else 0})"
        )


def _copy(x):
    """A copy of the arrays in ``x`` (an array, or a dict or tuple of them), the rest as it is."""
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    return x.copy() if isinstance(x, np.ndarray) else x


_APPLIED = CompiledCache(16)


def _applied_force(mech):
    """(q, v, t) -> F(q, v, t) - C(q) v, the external and viscous forces of ``mech`` (one function per
    Mechanics, so that :meth:`Solution.external_impulse` compiles its vmapped program once)."""
    fn = _APPLIED.get(mech)
    if fn is None:

        def fn(q, v, t):
            f = mech.F(q, v, t)
            return f - mech.C(q) @ v if mech.has_dissipation else f

        _APPLIED[mech] = fn
    return fn
