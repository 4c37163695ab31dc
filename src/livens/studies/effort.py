"""Computational effort: mean Newton iterations per step and computing time normalized to VI-S,
for the simple (q^n) and the advanced (q^n + h v^n) initial guess (KBS23b §6.3, Table 2).

Each run is executed once to compile, then ``repeat`` more times; the fastest of those is its
computing time (timings on a shared machine are noisy; the minimum is the usual robust figure),
both wall-clock and process CPU time (which other processes' load disturbs less).
Compilation is never counted. The normalization is by the run of ``normalize_to`` with the same
initial guess, as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .convergence import _write_rows
from .runs import OK, RunSpec, _items, newton_tol, scheme_label


@dataclass(frozen=True)
class EffortStudy:
    """Runs of ``schemes`` with each initial guess at one h (KBS23b Table 2)."""

    example: str
    schemes: tuple
    h: float
    t_end: float
    guesses: tuple = ("simple", "advanced")
    repeat: int = 3
    normalize_to: str = "VI-S"
    tol: float | str = 1e-9
    max_iter: int = 40
    example_params: tuple = ()
    rescue: bool = False

    @classmethod
    def make(
        cls,
        example,
        schemes,
        h,
        t_end,
        guesses=("simple", "advanced"),
        repeat=3,
        normalize_to="VI-S",
        tol=1e-9,
        max_iter=40,
        example_params=None,
        rescue=False,
    ):
        sch = tuple((s, ()) if isinstance(s, str) else (s[0], _items(s[1])) for s in schemes)
        for g in guesses:
            if g not in ("simple", "advanced"):
                raise ValueError(f"guess must be 'simple' or 'advanced'; got {g!r}.")
        return cls(
            example,
            sch,
            float(h),
            float(t_end),
            tuple(guesses),
            int(repeat),
            normalize_to,
            newton_tol(tol),
            int(max_iter),
            _items(example_params),
            bool(rescue),
        )

    def spec(self, scheme: str, params: tuple[tuple[str, Any], ...], guess: str) -> RunSpec:
        return RunSpec(
            self.example,
            scheme,
            self.h,
            self.t_end,
            params,
            self.example_params,
            self.tol,
            self.max_iter,
            guess=guess,
            repeat=self.repeat,
            rescue=self.rescue,
        )

    def runs(self) -> list[RunSpec]:
        return [self.spec(s, p, g) for s, p in self.schemes for g in self.guesses]

    def reduce(self, results: dict) -> "EffortResult":
        rows = []
        base_label = None
        for s, p in self.schemes:
            if scheme_label(s, dict(p)) == self.normalize_to or s == self.normalize_to:
                base_label = (s, p)
                break
        if base_label is None and self.schemes:
            base_label = self.schemes[0]
        for s, p in self.schemes:
            for g in self.guesses:
                r = results[self.spec(s, p, g)]
                base = results[self.spec(*base_label, g)]
                norm = r.wall_time / base.wall_time if (r.ok and base.ok) else float("nan")
                cpu, bcpu = min(r.cpu_times, default=float("nan")), min(base.cpu_times, default=float("nan"))
                rows.append(
                    {
                        "scheme": scheme_label(s, dict(p)),
                        "guess": g,
                        "status": r.status,
                        "mean_iterations": r.mean_iterations if r.status == OK else float("nan"),
                        "time_s": r.wall_time,
                        "normalized_time": norm,
                        "cpu_s": cpu,
                        "normalized_cpu": cpu / bcpu if (r.ok and base.ok) else float("nan"),
                        "steps": r.steps,
                    }
                )
        return EffortResult(self, rows, scheme_label(base_label[0], dict(base_label[1])) if base_label else "")


@dataclass
class EffortResult:
    """Rows (scheme, guess, mean iterations, time, normalized time)."""

    study: EffortStudy
    rows: list
    normalized_to: str

    def row(self, scheme: str, guess: str) -> dict:
        for r in self.rows:
            if r["scheme"] == scheme and r["guess"] == guess:
                return r
        raise KeyError((scheme, guess))

    def to_csv(self, path: str) -> str:
        """Columns: scheme, guess, status, mean_iterations, time_s, normalized_time (wall-clock),
        cpu_s, normalized_cpu (process CPU time, fastest repeat), steps."""
        return _write_rows(
            path,
            self.rows,
            [
                "scheme",
                "guess",
                "status",
                "mean_iterations",
                "time_s",
                "normalized_time",
                "cpu_s",
                "normalized_cpu",
                "steps",
            ],
        )

    def table(self) -> str:
        """Table 2 of KBS23b: one row per scheme, columns per guess (t_comp / t_comp(VI-S), n_iter)."""
        gs = self.study.guesses
        head = f"{'scheme':24s}" + "".join(f" {g + ' t/t0':>15s} {g + ' n_iter':>16s}" for g in gs)
        lines = [head]
        for s in dict.fromkeys(r["scheme"] for r in self.rows):
            cells = []
            for g in gs:
                r = self.row(s, g)
                cells.append(f" {r['normalized_time']:15.3f} {r['mean_iterations']:16.3f}")
            lines.append(f"{s:24s}" + "".join(cells))
        lines.append(f"(times normalized to {self.normalized_to} with the same guess)")
        return "\n".join(lines)
