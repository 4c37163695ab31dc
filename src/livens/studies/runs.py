"""One run of a study: a plain-data specification (:class:`RunSpec`) and its execution.

A study is a list of independent runs plus a reducer. A run is
described by plain data only (example name and parameters, scheme name and parameters, h, t_end,
every Newton setting: tolerance, max_iter, first guess, rescue; what to record), so that it can be
hashed (identical runs are executed once),
pickled and sent to a process pool or a Dask cluster. :func:`execute` turns a spec into a
:class:`RunResult` (numbers and a :class:`~livens.studies.trace.Trace`), never raising for a
failed simulation: blow-up, Newton failure and refusals are results with a status.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .trace import Trace

#: status of a run
OK, BLOWUP, NEWTON, REFUSED, ERROR = "ok", "blow-up", "newton failure", "refused", "error"


def _items(d) -> tuple:
    if d is None:
        return ()
    if isinstance(d, tuple):
        return d
    return tuple(sorted((str(k), _hashable(v)) for k, v in dict(d).items()))


def _hashable(v):
    if isinstance(v, (list, np.ndarray)):
        return tuple(_hashable(x) for x in np.asarray(v).tolist())
    if isinstance(v, tuple):
        return tuple(_hashable(x) for x in v)
    return v


@dataclass(frozen=True)
class RunSpec:
    """What to run and what to keep (plain, hashable data).

    record: "final" (always: the last node and step), "trace" (a full :class:`Trace`), "energy"
    (a Trace with energies and momentum maps only). max_points thins the trace. repeat > 0 re-runs
    the simulation that many times after a first (compiling) run and reports the fastest wall time
    (KBS23b Table 2).

    Newton settings: ``tol``, ``max_iter``, ``guess`` and ``rescue``. The defaults are the papers'
    Newton (KBS23b §6: tolerance 1e-9, the unknowns of step n as first guess, no damping), not those
    of :func:`livens.simulate` ("extrapolated" guess, rescue on); ``max_iter`` = 40 is livens'
    choice (the papers print none). Every run stops Newton by the papers' rule ||R||_inf <= tol
    alone (``accept_floor=False`` of :func:`livens.simulate`: a residual stalled at its round-off
    floor above tol fails the step, as it would in the papers' setting). ``rescue=True`` retries a failed step with livens' damped
    least-squares Newton; the steps so rescued are listed in :attr:`RunResult.rescued_steps`.
    """

    example: str
    scheme: str
    h: float
    t_end: float
    scheme_params: tuple = ()
    example_params: tuple = ()
    tol: float | str = 1e-9
    max_iter: int = 40
    guess: str = "simple"
    blowup_factor: float | None = None
    record: str = "final"
    max_points: int | None = None
    repeat: int = 0
    rescue: bool = False
    system_params: tuple = ()

    @classmethod
    def make(
        cls,
        example: str,
        scheme: str,
        h: float,
        t_end: float,
        params: dict | None = None,
        example_params: dict | None = None,
        system_params: dict | None = None,
        **kw,
    ) -> "RunSpec":
        """A spec from dicts of scheme parameters, example parameters (they build the example's
        Problem: one compilation per set) and values of the System's parameters
        (``System(parameters=...)``: runtime values, so a sweep over them compiles once)."""
        return cls(
            example=example,
            scheme=scheme,
            h=float(h),
            t_end=float(t_end),
            scheme_params=_items(params),
            example_params=_items(example_params),
            system_params=_items(system_params),
            **kw,
        )

    @property
    def label(self) -> str:
        """The scheme with its parameters, e.g. "ggl-theta-b(theta=0.5, vartheta=0.5)"."""
        return scheme_label(self.scheme, dict(self.scheme_params))

    def with_(self, **changes: Any) -> RunSpec:
        return replace(self, **changes)

    def newton(self) -> str:
        """The Newton settings in words, e.g. "tol 1e-09 (papers' rule), max_iter 40, simple guess, no rescue"."""
        rule = "" if isinstance(self.tol, str) else " (papers' rule)"
        rescue = "rescue (damped Newton)" if self.rescue else "no rescue"
        return f"tol {tol_text(self.tol)}{rule}, max_iter {self.max_iter}, {self.guess} guess, {rescue}"


def newton_tol(tol: float | str) -> float | str:
    """A study's Newton tolerance: a positive number, or "roundoff" (iterate until the Newton
    increment stops decreasing, as ``tol="roundoff"`` of :func:`livens.simulate`)."""
    if isinstance(tol, str):
        if tol.strip().lower() != "roundoff":
            raise ValueError(f'tol must be a positive number or "roundoff"; got {tol!r}.')
        return "roundoff"
    if not float(tol) > 0:
        raise ValueError(f'tol must be a positive number or "roundoff"; got {tol!r}.')
    return float(tol)


def tol_text(tol: float | str) -> str:
    """A Newton tolerance as the studies' tables and titles print it: "1e-09" or "roundoff"."""
    return tol if isinstance(tol, str) else f"{tol:g}"


def scheme_label(scheme: str, params: dict | None = None) -> str:
    if not params:
        return scheme
    return f"{scheme}(" + ", ".join(f"{k}={v:g}" for k, v in sorted(params.items())) + ")"


def parse_scheme(text: str) -> tuple[str, dict]:
    """ "ggl-theta-b(theta=0.5, vartheta=0.5)" or "ggl-theta-b:theta=0.5,vartheta=0.5" -> (name, params)."""
    text = text.strip()
    if "(" in text and text.endswith(")"):
        name, rest = text[:-1].split("(", 1)
    elif ":" in text:
        name, rest = text.split(":", 1)
    else:
        return text, {}
    params = {}
    for part in rest.split(","):
        if part.strip():
            if "=" not in part:
                raise ValueError(f"Scheme parameter {part!r} in {text!r} must read NAME=VALUE.")
            k, v = part.split("=", 1)
            params[k.strip()] = float(v)
    return name.strip(), params


@dataclass
class RunResult:
    """The outcome of one run: status and the numbers a reducer needs.

    status: "ok", "blow-up" (energy left the band of blowup_factor), "newton failure",
    "refused" (the scheme refuses the problem, e.g. singular M), or "error". fail_step is the
    index n of the failed or blown-up step n -> n+1; t_fail is t^n for a Newton failure and
    t^{n+1} (the first node outside the energy band) for a blow-up.
    rescued_steps: the indices of the steps that plain Newton failed and damped Newton rescued
    (only with ``spec.rescue``; empty otherwise). final: t, q, p (last node), v, lam, gam (last
    step). wall_time and compile_time in seconds (wall_time is the fastest of the repeats when
    repeat > 0; wall_times and cpu_times hold every timed repeat's wall-clock and process CPU time).
    """

    spec: RunSpec
    status: str
    message: str = ""
    t_fail: float | None = None
    steps: int = 0
    wall_time: float = float("nan")
    compile_time: float = float("nan")
    mean_iterations: float = float("nan")
    final: dict = field(default_factory=dict)
    velocity_bound: float = float("nan")
    trace: Trace | None = None
    rescued_steps: tuple = ()
    fail_step: int | None = None
    wall_times: tuple = ()
    cpu_times: tuple = ()

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def t_reached(self) -> float:
        return self.steps * self.spec.h

    def numbers(self) -> dict:
        """Everything but timings (identical on every executor)."""
        out = {
            "status": self.status,
            "t_fail": self.t_fail,
            "fail_step": self.fail_step,
            "steps": self.steps,
            "rescued_steps": list(self.rescued_steps),
            "mean_iterations": self.mean_iterations,
            "velocity_bound": self.velocity_bound,
        }
        for k, v in self.final.items():
            out[f"final_{k}"] = None if v is None else np.asarray(v).tolist()
        return out


_PROBLEMS: dict = {}


def problem_for(example: str, example_params: tuple = ()):
    """The example's Problem, one object per (example, parameters) and process, so that the
    compiled time loop is reused across step sizes and end times (the runner cache is keyed on
    the System object)."""
    key = (example, example_params)
    hit = _PROBLEMS.get(key)
    if hit is None:
        from .. import examples

        hit = examples.load(example, **dict(example_params))
        _PROBLEMS[key] = hit
    return hit


def available_scheme(name: str) -> bool:
    """True when a scheme of that name or alias is registered."""
    from .. import schemes

    try:
        schemes.get(name)
    except ValueError:
        return False
    return True


def available_example(name: str) -> bool:
    from .. import examples

    return name in examples.names()


def _final(sol) -> dict:
    n = sol.n_steps
    out = {"t": float(sol.t[-1]), "q": np.asarray(sol.q[-1]), "p": np.asarray(sol.p[-1])}
    if n > 0:
        out["lam"] = np.asarray(sol.lam[-1]) if sol.lam.ndim == 2 else None
        out["gam"] = None if sol.gam is None else np.asarray(sol.gam[-1])
        out["v"] = np.asarray(sol.v[-1])
    return out


def _velocity_bound(sol) -> float:
    """max_i ||(q_{i+1} - q_i) / h|| (SLO09 Tables 1, 2): from the interval velocities where the
    scheme reports them (vi-lagrange, vi-nullspace: (q_{i+1} - q_i)/h from the increments, without
    the round-off ulp(q)/h of a difference of stored nodes), else from the nodes."""
    if sol.n_steps == 0:
        return float("nan")
    if sol.velocity_kind == "interval":
        return float(np.max(np.linalg.norm(sol.v, axis=1)))
    return float(np.max(np.linalg.norm(np.diff(sol.q, axis=0), axis=1)) / sol.h)


def execute(spec: RunSpec) -> RunResult:
    """Run one spec in this process. Never raises for a failed simulation (see RunResult.status)."""
    from ..errors import BlowUpError, ConvergenceError, SimulationError
    from ..simulate import simulate

    try:
        problem = problem_for(spec.example, spec.example_params)
    except Exception as exc:  # noqa: BLE001 - reported as a result
        return RunResult(spec, ERROR, f"example {spec.example!r}: {type(exc).__name__}: {exc}")
    kw: dict[str, Any] = dict(
        h=spec.h,
        t_end=spec.t_end,
        tol=spec.tol,
        max_iter=spec.max_iter,
        guess=spec.guess,
        blowup_factor=spec.blowup_factor,
        rescue=bool(spec.rescue),
        accept_floor=False,  # the papers' stopping rule ||R||_inf <= tol (RunSpec's docstring)
        progress=False,
        **dict(spec.scheme_params),
    )
    if spec.system_params:
        kw["parameters"] = {k: np.asarray(v) for k, v in spec.system_params}
    status, message, t_fail, fail_step = OK, "", None, None
    try:
        sol = simulate(problem, spec.scheme, **kw)
    except BlowUpError as exc:
        sol, status, message, t_fail, fail_step = exc.solution, BLOWUP, str(exc), exc.time, exc.step
    except ConvergenceError as exc:
        sol, status, message, t_fail, fail_step = exc.solution, NEWTON, str(exc), exc.time, exc.step
    except SimulationError as exc:
        sol, status, message, t_fail, fail_step = exc.solution, ERROR, str(exc), exc.time, exc.step
    except ValueError as exc:
        return RunResult(spec, REFUSED, str(exc))
    except Exception as exc:  # noqa: BLE001
        return RunResult(spec, ERROR, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    wall = float(sol.meta.get("wall_time", float("nan")))
    times: list = []
    cpu: list = []
    if spec.repeat > 0 and status == OK:
        for _ in range(spec.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            simulate(problem, spec.scheme, **kw)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        wall = min(times)
    res = RunResult(
        spec,
        status,
        message,
        t_fail,
        steps=sol.n_steps,
        wall_time=wall,
        compile_time=float(sol.meta.get("compile_time", float("nan"))),
        mean_iterations=float(np.mean(sol.newton_iterations)) if sol.n_steps else float("nan"),
        final=_final(sol),
        velocity_bound=_velocity_bound(sol),
        rescued_steps=tuple(int(i) for i in sol.meta.get("rescued_steps", ())),
        fail_step=fail_step,
        wall_times=tuple(times),
        cpu_times=tuple(cpu),
    )
    if spec.record in ("trace", "energy") and sol.n_steps > 0:
        include = "all" if spec.record == "trace" else "energy"
        res.trace = Trace.from_solution(sol, label=spec.label, max_points=spec.max_points, include=include)
    return res
