"""Claims of a paper beside the measured values, and the report that lists them (``report.md``).

A :class:`Claim` is one statement a paper makes about its numerical results, where it makes it
(figure, table, section), what livens measured, and the verdict: "holds", "fails",
"not reproduced" with the reason (a scheme or example that livens does not have, a horizon the
run did not reach, an empty selection), "by construction" where the measured quantity is one the
scheme enforces by its own equations (it cannot fail while Newton converges, so it is no evidence
and is counted apart from the holds), or "error" with the message of an exception raised while
evaluating it or while computing a run it depends on.

A threshold that is livens' choice rather than the paper's carries a sensitivity line in the
claim's measured text (:func:`sensitivity`): the values of the threshold tried and the verdict at
each, so that a reader sees for which range of it the verdict holds.

The thresholds that turn a measurement into a verdict are fixed here, before any run, from the
arithmetic of the runs (Newton tolerance ``TOL`` = 1e-12 for the runs behind round-off claims):
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field

from .runs import tol_text

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
#: "of the order of 10^k": within half a decade, 10^(k - 0.5) <= x <= 10^(k + 0.5)
DECADE_TOL = 0.5
#: an energy error without secular drift: its largest deviation over the last third of the run is
#: at most DRIFT_RATIO times that over the first third (a linear drift from zero gives 3), and a
#: fitted line moves by at most half the deviation over the run
DRIFT_RATIO = 2.0
#: the energy oscillation of a symplectic method is small: max |E - E0| <= SMALL_AMPLITUDE times the
#: energy the motion exchanges (the range of the kinetic energy, max T - min T: independent of the
#: potential's zero); livens' choice, the papers name no size
SMALL_AMPLITUDE = 0.1
#: the values of SMALL_AMPLITUDE each verdict's sensitivity line is given for
SMALL_AMPLITUDE_TRIED = (0.01, 0.03, 0.1, 0.3)

HOLDS, FAILS, NOT_REPRODUCED, ERROR = "holds", "fails", "not reproduced", "error"
#: the measured quantity is enforced by the scheme's own equations: true while Newton converges
BY_CONSTRUCTION = "by construction"
#: every verdict, in the order the reports count them
VERDICTS = (HOLDS, FAILS, NOT_REPRODUCED, BY_CONSTRUCTION, ERROR)


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
        return {
            "where": self.where,
            "claim": self.text,
            "measured": self.measured,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def judged(where: str, text: str, ok: bool, measured: str, reason: str = "") -> Claim:
    """A checked claim: "holds" when ``ok``, else "fails"."""
    return Claim(where, text, measured, HOLDS if ok else FAILS, reason)


def constructed(where: str, text: str, ok: bool, measured: str, equation: str) -> Claim:
    """A claim about a quantity the scheme enforces by its own ``equation`` (e.g. "KBS23b eq 82e"):
    "by construction" when it is met, else "fails" (Newton converged but the equation is not met:
    a fault of the implementation)."""
    why = f"the scheme enforces this quantity by its own equation ({equation}): true while Newton converges"
    return Claim(where, text, measured, BY_CONSTRUCTION if ok else FAILS, why)


def sensitivity(name: str, values, verdict_of, fmt_value=None) -> str:
    """The sensitivity line of a threshold that is livens' choice: ``verdict_of(value) -> bool``
    (holds) at each of ``values``, e.g. "blow-up factor: holds for 7, 10; fails for 1, 2, 3, 5"."""
    show = fmt_value or (lambda x: f"{x:g}")
    got = [(v, bool(verdict_of(v))) for v in values]
    yes = [show(v) for v, ok in got if ok]
    no = [show(v) for v, ok in got if not ok]
    parts = ([f"holds for {', '.join(yes)}"] if yes else []) + ([f"fails for {', '.join(no)}"] if no else [])
    return f"sensitivity to {name} (livens' choice): " + "; ".join(parts)


def missing(where: str, text: str, reason: str) -> Claim:
    """A claim livens cannot check, with the reason (a missing scheme or example)."""
    return Claim(where, text, "", NOT_REPRODUCED, reason)


def errored(where: str, text: str, exc: BaseException) -> Claim:
    """A claim whose evaluation raised: verdict "error" with the exception's message."""
    return Claim(where, text, "", ERROR, f"{type(exc).__name__}: {exc}")


def order_ok(order: float, claimed: float) -> bool:
    """A fitted order agrees with the claimed one within ORDER_TOL."""
    return order == order and abs(order - claimed) <= ORDER_TOL


def of_the_order(x: float, exponent: float) -> bool:
    """x is "of the order of 10^exponent": |log10 x - exponent| <= DECADE_TOL (half a decade)."""
    return bool(x == x and x > 0 and abs(math.log10(x) - exponent) <= DECADE_TOL)


def order_range(exponent: float) -> str:
    """The accepted range of "of the order of 10^exponent", e.g. "3.2e-04 ... 3.2e-03"."""
    return f"{10 ** (exponent - DECADE_TOL):.1e} ... {10 ** (exponent + DECADE_TOL):.1e}"


def fmt(x: float, digits: int = 2) -> str:
    """A number in scientific notation ("nan" for NaN or None)."""
    if x is None or x != x:
        return "nan"
    return f"{x:.{digits}e}"


def counts(claims: list) -> dict:
    """{verdict: number of claims} over every verdict of VERDICTS (zeros included)."""
    return {v: sum(c.verdict == v for c in claims) for v in VERDICTS}


def write_report(
    path: str,
    title: str,
    paper_line: str,
    claims: list,
    files: list,
    notes: list,
    settings: list,
    runs_table: list | None = None,
    sources: list | None = None,
) -> str:
    """Write ``report.md``: settings (the lines ``settings`` and the table of the runs actually
    executed, ``runs_table``: markdown lines from :func:`runs_table`), the claims table, the sources
    (``sources``: the paper's full reference and where every example's parameters come from, all
    shipped with livens), the files."""
    n = counts(claims)
    lines = [
        f"# Reproduction: {title}",
        "",
        paper_line,
        "",
        f"**{n[HOLDS]} claims hold, {n[FAILS]} fail, {n[NOT_REPRODUCED]} not reproduced, "
        f"{n[BY_CONSTRUCTION]} true by construction, {n[ERROR]} error** (of {len(claims)}).",
        "",
    ]
    if settings or runs_table:
        lines += ["## Settings", ""] + [f"- {s}" for s in settings] + [""]
        if runs_table:
            lines += list(runs_table) + [""]
    lines += [
        "## Claims",
        "",
        "| # | where | claim (the paper's words) | measured | verdict |",
        "|---|---|---|---|---|",
    ]
    for i, c in enumerate(claims, 1):
        verdict = c.verdict if not c.reason else f"{c.verdict}: {c.reason}"
        cells = [str(i), c.where, c.text, c.measured or "–", verdict]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    lines.append("")
    if sources:
        lines += ["## Sources", ""] + [f"- {s}" for s in sources] + [""]
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


def _nums(xs) -> str:
    return ", ".join(f"{x:g}" for x in xs)


def runs_table(groups: list) -> list:
    """The Settings table of a report, generated from the RunSpecs actually executed.

    ``groups``: (title, specs, note) per figure or table. Within a group, runs that share every
    setting but the scheme and h are one row; schemes with the same step sizes are listed
    together. Columns: the example (with parameters), schemes, h, T, and every Newton setting
    (tolerance, max_iter, first guess, rescue), plus what else differs (energy band, timed
    repeats) and the group's note.
    """
    head = [
        "| runs of | example | schemes | h | T | Newton tol | max_iter | guess | rescue | other |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for title, specs, note in groups:
        specs = list(dict.fromkeys(specs))
        if not specs:
            continue
        by_key: dict = {}
        for s in specs:
            key = (
                s.example,
                s.example_params,
                s.t_end,
                s.tol,
                s.max_iter,
                s.guess,
                s.rescue,
                s.blowup_factor,
                s.repeat,
            )
            by_key.setdefault(key, {}).setdefault(s.label, []).append(s.h)
        first = True
        for key, per_scheme in by_key.items():
            example, eparams, t_end, tol, max_iter, guess, rescue, band, repeat = key
            by_h: dict = {}
            for label, hs in per_scheme.items():
                by_h.setdefault(tuple(sorted(set(hs), reverse=True)), []).append(label)
            for hs, labels in by_h.items():
                ex = example + (" (" + ", ".join(f"{k}={v}" for k, v in eparams) + ")" if eparams else "")
                other = []
                if band is not None:
                    other.append(f"stops at |E - E0| > {band:g} max(|E0|, 1)")
                if repeat:
                    other.append(f"timed: fastest of {repeat} runs after a compiling one")
                if first and note:
                    other.append(note)
                cells = [
                    title if first else "",
                    ex,
                    ", ".join(labels),
                    _nums(hs),
                    f"{t_end:g}",
                    tol_text(tol),
                    str(max_iter),
                    guess,
                    "yes (damped Newton after a failed step)" if rescue else "no",
                    "; ".join(other),
                ]
                rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
                first = False
    return head + rows if rows else []
