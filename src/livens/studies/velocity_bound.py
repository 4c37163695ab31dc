"""Velocity bound: max_i ||(q_{i+1} - q_i) / h|| over a run, per step size (SLO09 Tables 1, 2).

Theorem 3.4 of SLO09 assumes discrete velocities bounded independently of h; SLO09 §4 checks it for the
double spherical pendulum (Table 1, h = 1e-1 ... 1e-5, T = 10) and the three-bar swing (Table 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from .convergence import _write_rows
from .runs import RunSpec, _items, newton_tol, scheme_label


@dataclass(frozen=True)
class VelocityBoundStudy:
    """Runs of one scheme over step sizes; the maximal discrete velocity of each (SLO09 Tables 1, 2)."""

    example: str
    scheme: str
    hs: tuple
    t_end: float
    scheme_params: tuple = ()
    tol: float | str = 1e-12
    max_iter: int = 40
    example_params: tuple = ()
    guess: str = "simple"
    rescue: bool = False

    @classmethod
    def make(
        cls,
        example,
        scheme,
        hs,
        t_end,
        scheme_params=None,
        tol=1e-12,
        max_iter=40,
        example_params=None,
        guess="simple",
        rescue=False,
    ):
        """Newton as in the papers by default (simple guess, no rescue)."""
        return cls(
            example,
            scheme,
            tuple(float(h) for h in hs),
            float(t_end),
            _items(scheme_params),
            newton_tol(tol),
            int(max_iter),
            _items(example_params),
            guess,
            bool(rescue),
        )

    def spec(self, h: float) -> RunSpec:
        return RunSpec(
            self.example,
            self.scheme,
            float(h),
            self.t_end,
            self.scheme_params,
            self.example_params,
            self.tol,
            self.max_iter,
            guess=self.guess,
            rescue=self.rescue,
        )

    def runs(self) -> list[RunSpec]:
        return [self.spec(h) for h in self.hs]

    def reduce(self, results: dict) -> "VelocityBoundResult":
        rows = []
        for h in self.hs:
            r = results[self.spec(h)]
            rows.append(
                {
                    "h": h,
                    "max_velocity": r.velocity_bound if r.ok else float("nan"),
                    "status": r.status,
                    "steps": r.steps,
                }
            )
        return VelocityBoundResult(self, rows, scheme_label(self.scheme, dict(self.scheme_params)))


@dataclass
class VelocityBoundResult:
    """Rows (h, max velocity, status, steps)."""

    study: VelocityBoundStudy
    rows: list
    scheme: str

    def to_csv(self, path: str) -> str:
        """Columns: h, max_velocity, status, steps."""
        return _write_rows(path, self.rows, ["h", "max_velocity", "status", "steps"])

    def table(self) -> str:
        lines = [f"{'h':>10s}  max ||(q_(i+1) - q_i)/h||   ({self.study.example}, {self.scheme})"]
        for r in self.rows:
            lines.append(f"{r['h']:10g}  {r['max_velocity']:.15f}")
        return "\n".join(lines)
