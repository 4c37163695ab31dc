"""Convergence study: errors against a reference run (or an analytic value) over step sizes, and
the orders fitted as log-log slopes (KBS23b Figs 18-19, 28-30; KBS23a Fig 9; SLO09 Fig 4).

The errors are relative norms of a selected quantity at the end time t:

    e = ||x_h(t) - x_ref(t)|| / ||x_ref(t)||      (KBS23b eq 113, 114, 128; KBS23a eq 69)

with x one of q, p (selected components) or the multipliers lambda of the last step, and x_ref
either the analytic value (the heavy top's phi_3 = 0.0375, KBS23b eq 113) or a run of a reference
scheme with a much smaller step (KBS23b: EM with h = 5e-7 for the top, 1e-5 for the four particles;
004: h_ref = 1e-5).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .runs import RunResult, RunSpec, _items, newton_tol, scheme_label


@dataclass(frozen=True)
class Quantity:
    """A quantity whose error is measured: ``field`` "q", "p" or "lam"; ``indices`` the selected
    components (None: all); ``exact`` an analytic value (else the reference run)."""

    name: str
    field: str = "q"
    indices: tuple | None = None
    exact: tuple | float | None = None
    label: str = ""

    def select(self, final: dict) -> np.ndarray | None:
        x = final.get(self.field)
        if x is None:
            return None
        x = np.atleast_1d(np.asarray(x, dtype=float))
        return x if self.indices is None else x[list(self.indices)]


def fit_order(hs: ArrayLike, errors: ArrayLike) -> float:
    """Least-squares slope of log(error) over log(h); NaN with fewer than two usable points."""
    h = np.asarray(hs, float)
    e = np.asarray(errors, float)
    ok = np.isfinite(e) & (e > 0) & np.isfinite(h) & (h > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(h[ok]), np.log(e[ok]), 1)[0])


@dataclass(frozen=True)
class ConvergenceStudy:
    """Runs of ``schemes`` (names or (name, params) pairs) with every h in ``hs`` up to ``t_end``,
    plus the reference run (a RunSpec, or None when every quantity has an exact value)."""

    example: str
    schemes: tuple
    hs: tuple
    t_end: float
    quantities: tuple
    reference: RunSpec | None = None
    tol: float | str | tuple = 1e-12
    max_iter: int = 40
    example_params: tuple = ()
    record: str = "final"
    max_points: int | None = None
    guess: str = "simple"
    rescue: bool = False

    @classmethod
    def make(
        cls,
        example,
        schemes,
        hs,
        t_end,
        quantities,
        reference=None,
        tol=1e-12,
        max_iter=40,
        example_params=None,
        record="final",
        max_points=None,
        guess="simple",
        rescue=False,
    ):
        """``tol`` is one Newton tolerance (or "roundoff"), or a function h -> tolerance (evaluated
        here, stored per h);
        ``reference`` a RunSpec or a dict(scheme=, h=, params=); ``record``/``max_points`` as in
        RunSpec (so that the runs can be shared with other items); ``guess``/``rescue`` Newton's
        first guess and rescue, for every run (default: the papers' simple guess, no rescue)."""
        sch = tuple((s, ()) if isinstance(s, str) else (s[0], _items(s[1])) for s in schemes)
        hs = tuple(float(h) for h in hs)
        tols = tuple(newton_tol(tol(h)) for h in hs) if callable(tol) else newton_tol(tol)
        ref = reference
        if isinstance(reference, dict):
            rtol = newton_tol(tol(reference["h"])) if callable(tol) else newton_tol(tol)
            ref = RunSpec.make(
                example,
                reference["scheme"],
                reference["h"],
                t_end,
                params=reference.get("params"),
                example_params=example_params,
                tol=rtol,
                max_iter=max_iter,
                record=record,
                max_points=max_points,
                guess=guess,
                rescue=bool(rescue),
            )
        return cls(
            example,
            sch,
            hs,
            float(t_end),
            tuple(quantities),
            ref,
            tols,
            int(max_iter),
            _items(example_params),
            record,
            max_points,
            guess,
            bool(rescue),
        )

    def tol_for(self, h: float) -> float | str:
        if isinstance(self.tol, tuple):
            return self.tol[self.hs.index(float(h))]
        return self.tol

    def spec(self, scheme: str, params: tuple[tuple[str, Any], ...], h: float) -> RunSpec:
        return RunSpec(
            self.example,
            scheme,
            float(h),
            self.t_end,
            params,
            self.example_params,
            self.tol_for(h),
            self.max_iter,
            guess=self.guess,
            record=self.record,
            max_points=self.max_points,
            rescue=self.rescue,
        )

    def runs(self) -> list[RunSpec]:
        out = [self.spec(s, p, h) for s, p in self.schemes for h in self.hs]
        if self.reference is not None and any(q.exact is None for q in self.quantities):
            out.append(self.reference)
        return out

    def reduce(self, results: dict) -> "ConvergenceResult":
        ref = results.get(self.reference) if self.reference is not None else None
        rows, orders, notes = [], {}, []
        if self.reference is not None and any(q.exact is None for q in self.quantities):
            if ref is None or not ref.ok:
                how = "raised" if ref is not None and ref.status in ("error", "refused") else "failed"
                notes.append(
                    f"reference run {self.reference.label} h={self.reference.h:g} {how}: "
                    f"{ref.status if ref else 'missing'} {' '.join((ref.message or '').splitlines()[:1]) if ref else ''}"
                )
        for s, p in self.schemes:
            label = scheme_label(s, dict(p))
            for qty in self.quantities:
                hs, errs = [], []
                for h in self.hs:
                    r: RunResult = results[self.spec(s, p, h)]
                    err = float("nan")
                    if not r.ok and qty is self.quantities[0]:  # the run's own failure, once per run
                        notes.append(f"run {label} h={h:g} {r.status}: {' '.join((r.message or '').splitlines()[:1])}")
                    if r.ok:
                        x = qty.select(r.final)
                        if qty.exact is not None:
                            x_ref = np.atleast_1d(np.asarray(qty.exact, float))
                        elif ref is not None and ref.ok:
                            x_ref = qty.select(ref.final)
                        else:
                            x_ref = None
                        if x is not None and x_ref is not None:
                            err = float(np.linalg.norm(x - x_ref) / max(np.linalg.norm(x_ref), 1e-300))
                    rows.append({"scheme": label, "quantity": qty.name, "h": h, "error": err, "status": r.status})
                    hs.append(h)
                    errs.append(err)
                orders[(label, qty.name)] = fit_order(hs, errs)
        ref_label = None if self.reference is None else f"{self.reference.label}, h = {self.reference.h:g}"
        return ConvergenceResult(self, rows, orders, ref_label, notes)


@dataclass
class ConvergenceResult:
    """Errors per (scheme, quantity, h), fitted orders, the reference used, and notes."""

    study: ConvergenceStudy
    rows: list
    orders: dict
    reference: str | None
    notes: list = field(default_factory=list)

    def errors(self, scheme: str, quantity: str) -> tuple[np.ndarray, np.ndarray]:
        r = [x for x in self.rows if x["scheme"] == scheme and x["quantity"] == quantity]
        return np.array([x["h"] for x in r]), np.array([x["error"] for x in r])

    def order(self, scheme: str, quantity: str) -> float:
        return self.orders[(scheme, quantity)]

    def reference_for(self, quantity: str) -> str:
        """What the errors of ``quantity`` are measured against: "the analytic value 0.0375" where the
        quantity has an exact value, else "the reference run EM, h = 5e-07"."""
        qobj = next(q for q in self.study.quantities if q.name == quantity)
        if qobj.exact is not None:
            return "the analytic value " + ", ".join(f"{x:g}" for x in np.atleast_1d(qobj.exact))
        return f"the reference run {self.reference}" if self.reference else "no reference"

    def to_csv(self, path: str) -> str:
        """Columns: scheme, quantity, h, error, status; then one row per fitted order (h empty)."""
        _write_rows(path, self.rows, ["scheme", "quantity", "h", "error", "status"])
        return path

    def orders_csv(self, path: str) -> str:
        rows = [{"scheme": s, "quantity": q, "order": o} for (s, q), o in self.orders.items()]
        _write_rows(path, rows, ["scheme", "quantity", "order"])
        return path

    def figure(self, stem: str, quantity: str | None = None, title: str = "", ylabel: str | None = None) -> list:
        from ..plots import convergence_figure

        qty = quantity or self.study.quantities[0].name
        qobj = next(q for q in self.study.quantities if q.name == qty)
        series = {}
        for (s, q), o in self.orders.items():
            if q == qty:
                h, e = self.errors(s, q)
                series[s] = (h, e, o)
        return convergence_figure(
            series,
            stem,
            title=title or f"{self.study.example}: error in {qty}",
            ylabel=ylabel or qobj.label or f"relative error in {qty}",
        )

    def table(self) -> str:
        lines = [f"{'scheme':28s} {'quantity':10s} {'order':>7s}   errors (h: e)"]
        for (s, q), o in self.orders.items():
            h, e = self.errors(s, q)
            errs = ", ".join(f"{hh:g}: {ee:.3e}" for hh, ee in zip(h, e))
            lines.append(f"{s:28s} {q:10s} {o:7.3f}   {errs}")
        for qobj in self.study.quantities:
            lines.append(f"reference of {qobj.name}: {self.reference_for(qobj.name)}")
        lines.extend(self.notes)
        return "\n".join(lines)


def _write_rows(path: str, rows: list, columns: list) -> str:
    """Rows (dicts) as CSV with the named columns."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    k: ("" if v is None or (isinstance(v, float) and math.isnan(v) and k == "h") else v)
                    for k, v in r.items()
                }
            )
    return path
