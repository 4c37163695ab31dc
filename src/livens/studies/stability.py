"""Stability study: long runs over step sizes, detection of an energy blow-up and its time
(KBS23b §6.3, Figs 31-33: four-particle system, T up to 1000, h = 0.01, 0.05, 0.25, 0.675).

A run is unstable when its energy leaves the band |E - E0| <= blowup_factor * max(|E0|, 1)
(``lv.simulate(..., blowup_factor=...)`` stops it with ``BlowUpError``) or when Newton's method
stops converging (``ConvergenceError``), which is how an energy blow-up ends in an implicit
scheme. The blow-up time is the time of the first step outside the band (or of the failed step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .convergence import _write_rows
from .runs import OK, RunSpec, _items, scheme_label


@dataclass(frozen=True)
class StabilityStudy:
    """Runs of ``schemes`` for each h in ``hs`` up to ``t_end``, stopped at an energy blow-up
    (KBS23b §6.3, Figs 31-33); energies kept as thinned traces for the figures."""

    example: str
    schemes: tuple
    hs: tuple
    t_end: float
    blowup_factor: float = 1.0
    tol: float = 1e-9
    max_iter: int = 40
    max_points: int = 4000
    example_params: tuple = ()
    guess: str = "simple"
    rescue: bool = False

    @classmethod
    def make(
        cls,
        example,
        schemes,
        hs,
        t_end,
        blowup_factor=1.0,
        tol=1e-9,
        max_iter=40,
        max_points=4000,
        example_params=None,
        guess="simple",
        rescue=False,
    ):
        """Newton as in the papers by default (simple guess, no rescue)."""
        sch = tuple((s, ()) if isinstance(s, str) else (s[0], _items(s[1])) for s in schemes)
        return cls(
            example,
            sch,
            tuple(float(h) for h in hs),
            float(t_end),
            float(blowup_factor),
            float(tol),
            int(max_iter),
            int(max_points),
            _items(example_params),
            guess,
            bool(rescue),
        )

    def spec(self, scheme, params, h) -> RunSpec:
        return RunSpec(
            self.example,
            scheme,
            float(h),
            self.t_end,
            params,
            self.example_params,
            self.tol,
            self.max_iter,
            guess=self.guess,
            blowup_factor=self.blowup_factor,
            record="energy",
            max_points=self.max_points,
            rescue=self.rescue,
        )

    def runs(self) -> list[RunSpec]:
        return [self.spec(s, p, h) for s, p in self.schemes for h in self.hs]

    def reduce(self, results: dict) -> "StabilityResult":
        rows, traces = [], {}
        for s, p in self.schemes:
            label = scheme_label(s, dict(p))
            for h in self.hs:
                r = results[self.spec(s, p, h)]
                rows.append(stability_row(r, label))
                if r.trace is not None:
                    traces[(label, h)] = r.trace
        return StabilityResult(self, rows, traces)


#: the columns of a stability table
COLUMNS = [
    "scheme",
    "h",
    "t_end",
    "status",
    "t_blowup",
    "fail_step",
    "t_reached",
    "max_rel_energy_error",
    "t_leaves_E0",
    "rescue",
    "rescued_steps",
    "mean_iterations",
]


def first_exit(trace, factor: float = 1.0) -> float | None:
    """The first node time with |E - E0| > factor * max(|E0|, 1), from the (possibly thinned)
    trace, or None when the energy stays inside (a thinned trace keeps every bin's extremes, so
    the time is that of the bin's extreme node)."""
    if trace is None:
        return None
    E = trace.E
    over = np.flatnonzero(np.abs(E - E[0]) > factor * max(abs(float(E[0])), 1.0))
    return float(trace.t[over[0]]) if over.size else None


def stability_row(r, label: str | None = None) -> dict:
    """One row of a stability table from a run's result (see COLUMNS); ``status`` is "stable"
    when the run reached its end time."""
    stable = r.status == OK
    return {
        "scheme": label or r.spec.label,
        "h": r.spec.h,
        "t_end": r.spec.t_end,
        "status": "stable" if stable else r.status,
        "t_blowup": None if stable else r.t_fail,
        "fail_step": r.fail_step,
        "t_reached": r.t_reached,
        "max_rel_energy_error": r.trace.max_energy_error() if r.trace is not None else float("nan"),
        "t_leaves_E0": first_exit(r.trace, 1.0),
        "rescue": bool(r.spec.rescue),
        "rescued_steps": len(r.rescued_steps),
        "mean_iterations": r.mean_iterations,
    }


@dataclass
class StabilityResult:
    """Rows (scheme, h, status, blow-up time, max energy error) and the energy traces."""

    study: StabilityStudy
    rows: list
    traces: dict

    def row(self, scheme: str, h: float) -> dict:
        for r in self.rows:
            if r["scheme"] == scheme and abs(r["h"] - h) <= 1e-12 * h:
                return r
        raise KeyError((scheme, h))

    def stable(self, scheme: str, h: float) -> bool:
        return self.row(scheme, h)["status"] == "stable"

    def to_csv(self, path: str) -> str:
        """Columns: scheme, h, t_end, status, t_blowup, fail_step, t_reached, max_rel_energy_error,
        t_leaves_E0, rescue, rescued_steps, mean_iterations."""
        return _write_rows(path, self.rows, COLUMNS)

    def energy_csv(self, path: str, h: float) -> str:
        """The (thinned) energy histories for one h: columns scheme, h, t, E."""
        rows = []
        for (s, hh), tr in self.traces.items():
            if abs(hh - h) <= 1e-12 * h:
                rows.extend({"scheme": s, "h": hh, "t": float(t), "E": float(e)} for t, e in zip(tr.t, tr.E))
        return _write_rows(path, rows, ["scheme", "h", "t", "E"])

    def figure(self, stem: str, h: float, title: str = "") -> list:
        from ..plots import stability_figure

        traces = [tr for (s, hh), tr in self.traces.items() if abs(hh - h) <= 1e-12 * h]
        status = {r["scheme"]: r for r in self.rows if abs(r["h"] - h) <= 1e-12 * h}
        return stability_figure(traces, stem, title=title or f"{self.study.example}: energy, h = {h:g}", status=status)

    def table(self) -> str:
        lines = [f"{'scheme':24s} {'h':>8s} {'status':>15s} {'t_blowup':>10s} {'max|E-E0|/E0':>13s}"]
        for r in self.rows:
            tb = "" if r["t_blowup"] is None else f"{r['t_blowup']:.4g}"
            lines.append(
                f"{r['scheme']:24s} {r['h']:8g} {r['status']:>15s} {tb:>10s} {r['max_rel_energy_error']:13.3e}"
            )
        return "\n".join(lines)
