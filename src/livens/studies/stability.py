"""Stability study: long runs over step sizes, detection of an energy blow-up and its time
(KBS23b §6.3, Figs 31-33: four-particle system, T up to 1000, h = 0.01, 0.05, 0.25, 0.675).

A run is unstable when its energy leaves the band |E - E0| <= blowup_factor * max(|E0|, 1)
(``lv.simulate(..., blowup_factor=...)`` stops it with ``BlowUpError``) or when Newton's method
stops converging (``ConvergenceError``), which is how an energy blow-up ends in an implicit
scheme. The blow-up time is the time of the first step outside the band (or of the failed step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .convergence import _write_rows
from .runs import OK, RunSpec, _items, newton_tol, scheme_label, tol_text


@dataclass(frozen=True)
class StabilityStudy:
    """Runs of ``schemes`` for each h in ``hs`` up to ``t_end``, stopped at an energy blow-up
    (KBS23b §6.3, Figs 31-33); energies kept as thinned traces for the figures."""

    example: str
    schemes: tuple
    hs: tuple
    t_end: float
    blowup_factor: float = 1.0
    tol: float | str = 1e-9
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
            newton_tol(tol),
            int(max_iter),
            int(max_points),
            _items(example_params),
            guess,
            bool(rescue),
        )

    def spec(self, scheme: str, params: tuple[tuple[str, Any], ...], h: float) -> RunSpec:
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

    def figure(self, stem: str, h: float, title: str = "") -> list:
        """The energy of every run with step ``h`` over time (KBS23b Figs 31-33): the whole horizon on
        the left and, where a run stopped early, the interval up to its stop on the right (a blow-up
        at t = 53 of a T = 1000 run is visible); the end of a run that stopped is marked by how it
        ended: x an energy blow-up (the band left), o Newton failing after the energy grew, s Newton
        failing with the energy still conserved. The title says h and the Newton tolerance."""
        traces = [(s, tr) for (s, hh), tr in self.traces.items() if abs(hh - h) <= 1e-12 * h]
        status = {r["scheme"]: r for r in self.rows if abs(r["h"] - h) <= 1e-12 * h}
        return stability_figure(
            traces,
            status,
            stem,
            title=(title or f"{self.study.example}: energy, h = {h:g}")
            + f"\nNewton tol {tol_text(self.study.tol)}, max_iter {self.study.max_iter}, {self.study.guess} guess, "
            + ("rescue" if self.study.rescue else "no rescue")
            + (f"; band |E - E0| <= {self.study.blowup_factor:g} max(|E0|, 1)" if self.study.blowup_factor else ""),
        )

    def table(self) -> str:
        lines = [f"{'scheme':24s} {'h':>8s} {'status':>15s} {'t_blowup':>10s} {'max|E-E0|/E0':>13s}"]
        for r in self.rows:
            tb = "" if r["t_blowup"] is None else f"{r['t_blowup']:.4g}"
            lines.append(
                f"{r['scheme']:24s} {r['h']:8g} {r['status']:>15s} {tb:>10s} {r['max_rel_energy_error']:13.3e}"
            )
        return "\n".join(lines)


#: how a stopped run ended, its marker and words in the legend of :func:`stability_figure`
_ENDS = {
    "blow-up": ("x", "energy blow-up (left the band)"),
    "grew": ("o", "Newton failed after the energy grew"),
    "newton": ("s", "Newton failed, energy conserved"),
    "error": ("D", "raised"),
}


def how_it_ended(row) -> str | None:
    """ "blow-up", "grew" (Newton failed after |E - E0| grew beyond E0/2), "newton" (Newton failed with
    the energy conserved), "error", or None for a run that reached its end."""
    if row["status"] == "stable":
        return None
    if row["status"] == "blow-up":
        return "blow-up"
    if row["status"] == "newton failure":
        return "grew" if row["max_rel_energy_error"] > 0.5 else "newton"
    return "error"


def stability_figure(traces, status: dict, stem: str, title: str = "") -> list:
    """Energy over time of ``traces`` [(label, Trace)] with the end of each stopped run marked by how it
    ended (:data:`_ENDS`): left the whole horizon, right the interval up to the last early stop (only
    where a run stopped early). PNG, PDF and a CSV of the plotted curves (series, t, E)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import save_figure, write_curves_csv

    stops = [
        float(status[s]["t_blowup"])
        for s, _ in traces
        if s in status and how_it_ended(status[s]) is not None and status[s]["t_blowup"] is not None
    ]
    zoom = bool(stops) and max(stops) < 0.5 * max(float(tr.t[-1]) for _, tr in traces)
    fig, axes = plt.subplots(1, 2 if zoom else 1, figsize=(11 if zoom else 6.4, 4.2), constrained_layout=True)
    axes = np.atleast_1d(axes)
    mags = np.concatenate([np.abs(tr.E) for _, tr in traces]) if traces else np.ones(1)
    log = bool(mags.min() > 0 and mags.max() / mags.min() > 10)
    curves, seen = [], set()
    for k, ax in enumerate(axes):
        for i, (label, tr) in enumerate(traces):
            y = np.abs(tr.E) if log else tr.E
            (line,) = ax.plot(tr.t, y, lw=max(2.2 - 0.4 * i, 0.9), label=label if k == 0 else None)
            if k == 0:
                curves.append((label, tr.t, tr.E))
            end = how_it_ended(status[label]) if label in status else None
            if end is not None and status[label]["t_blowup"] is not None:
                marker, words = _ENDS[end]
                ax.plot(
                    [status[label]["t_blowup"]],
                    [y[-1]],
                    marker,
                    color=line.get_color(),
                    ms=9,
                    mew=2,
                    mfc="none",
                    label=words if (k == 0 and end not in seen) else None,
                )
                seen.add(end)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("time $t$")
        ax.set_ylabel("energy $|E|$" if log else "energy $E$")
        ax.grid(True, alpha=0.3)
    if zoom:
        right = 1.2 * max(stops)
        axes[1].set_xlim(0.0, right)
        axes[1].set_title(f"t = 0 ... {right:.3g} (the runs that stopped)", fontsize=9)
        axes[0].set_title("whole horizon", fontsize=9)
    axes[0].legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    paths = save_figure(fig, stem)
    paths.append(write_curves_csv(stem + ".csv", curves, "t", "E"))
    return paths
