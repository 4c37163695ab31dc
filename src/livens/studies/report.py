"""Claims of a paper beside the measured values, and the report that lists them (``report.md``).

A :class:`Claim` is one statement a paper makes about its numerical results, where it makes it
(figure, table, section), what livens measured, and the verdict: "holds", "fails", or
"not reproduced" with the reason (a scheme or example that livens does not have, or a statement
about the look of a figure that no number decides).

The thresholds that turn a measurement into a verdict are fixed here, before any run, from the
arithmetic of the runs (Newton tolerance ``TOL`` = 1e-12 for the runs behind round-off claims):
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field

#: Newton tolerance of the runs behind round-off claims (the papers use 1e-9; 1e-12 makes a
#: conservation claim a statement about round-off rather than about the stopping tolerance).
TOL = 1e-12
#: a per-step change of a conserved quantity, relative to its scale, counted as round-off
ROUNDOFF = 1e-11
#: a change counted as clearly not conserved (a thousand times the round-off band)
NOT_CONSERVED = 1e-8
#: a constraint residual counted as met: a few Newton tolerances
MET = 10 * TOL
#: a constraint residual counted as violated: far above the Newton tolerance
VIOLATED = 1e3 * TOL
#: a fitted order p agrees with a claimed order q when |p - q| <= ORDER_TOL
ORDER_TOL = 0.3

HOLDS, FAILS, NOT_REPRODUCED = "holds", "fails", "not reproduced"


@dataclass
class Claim:
    """One statement of a paper and its check."""

    where: str
    text: str
    measured: str = ""
    verdict: str = NOT_REPRODUCED
    reason: str = ""
    files: list = field(default_factory=list)

    def as_row(self) -> dict:
        return {"where": self.where, "claim": self.text, "measured": self.measured, "verdict": self.verdict,
                "reason": self.reason}


def judged(where: str, text: str, ok: bool, measured: str, reason: str = "") -> Claim:
    """A checked claim: "holds" when ``ok``, else "fails"."""
    return Claim(where, text, measured, HOLDS if ok else FAILS, reason)


def missing(where: str, text: str, reason: str) -> Claim:
    """A claim livens cannot check, with the reason (a missing scheme or example)."""
    return Claim(where, text, "", NOT_REPRODUCED, reason)


def order_ok(order: float, claimed: float) -> bool:
    """A fitted order agrees with the claimed one within ORDER_TOL."""
    return order == order and abs(order - claimed) <= ORDER_TOL


def fmt(x: float, digits: int = 2) -> str:
    """A number in scientific notation ("nan" for NaN or None)."""
    if x is None or x != x:
        return "nan"
    return f"{x:.{digits}e}"


def write_report(path: str, title: str, paper_line: str, claims: list, files: list, notes: list,
                 settings: list) -> str:
    """Write ``report.md``: settings, the claims table, the files written."""
    n = {v: sum(c.verdict == v for c in claims) for v in (HOLDS, FAILS, NOT_REPRODUCED)}
    lines = [f"# Reproduction: {title}", "", paper_line, "",
             f"**{n[HOLDS]} claims hold, {n[FAILS]} fail, {n[NOT_REPRODUCED]} not reproduced** "
             f"(of {len(claims)}).", ""]
    if settings:
        lines += ["## Settings", ""] + [f"- {s}" for s in settings] + [""]
    lines += ["## Claims", "", "| # | where | claim (the paper's words) | measured | verdict |",
              "|---|---|---|---|---|"]
    for i, c in enumerate(claims, 1):
        verdict = c.verdict if not c.reason else f"{c.verdict}: {c.reason}"
        cells = [str(i), c.where, c.text, c.measured or "–", verdict]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    lines.append("")
    if notes:
        lines += ["## Notes", ""] + [f"- {s}" for s in notes] + [""]
    if files:
        base = os.path.dirname(os.path.abspath(path))
        lines += ["## Files", ""]
        for f in files:
            rel = os.path.relpath(f, base)
            lines.append(f"- [{rel}]({rel})")
        lines.append("")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def write_claims_csv(path: str, claims: list) -> str:
    """The claims as CSV with columns where, claim, measured, verdict, reason."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["where", "claim", "measured", "verdict", "reason"])
        w.writeheader()
        for c in claims:
            w.writerow(c.as_row())
    return path
