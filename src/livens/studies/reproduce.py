"""``livens reproduce PAPER --out DIR``: every numerical figure and table of a paper that livens
can compute, and ``DIR/report.md`` listing each claim the paper makes about its results beside
the measured value and a verdict.

A paper is a list of :class:`Item` (a figure, a table or a group of statements), each with the
runs it needs (plain :class:`~livens.studies.runs.RunSpec`) and a ``make`` function that draws
the figures (PNG and PDF, data as CSV with named columns) and returns the checked
:class:`~livens.studies.report.Claim`. The items are data driven: a claim whose scheme or example
livens does not have is listed as "not reproduced" with that reason, and is computed as soon as
the scheme or example exists. All runs of all items are collected, de-duplicated and executed
through one executor (local by default, or a Dask cluster), so the numbers do not depend on where
they ran.

``quick=True`` gives a cheap variant (shorter end times, fewer step sizes, cheaper references)
whose claims are still checked; the report says which settings were used.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from .executors import run_specs
from .report import NOT_REPRODUCED, Claim, missing, write_claims_csv, write_report
from .runs import RunResult, RunSpec, available_example, available_scheme


@dataclass
class Item:
    """One figure, table or group of statements of a paper."""

    key: str
    title: str
    runs: list = field(default_factory=list)
    make: Callable | None = None  # make(ctx) -> list[Claim]


@dataclass
class Context:
    """What an item's ``make`` works with: the results of all runs, the output folder, the mode."""

    results: dict
    out: str
    quick: bool
    files: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def result(self, spec: RunSpec) -> RunResult:
        return self.results[spec]

    def trace(self, spec: RunSpec):
        """The run's Trace (None when the run failed before its first step)."""
        return self.results[spec].trace

    def stem(self, name: str) -> str:
        return os.path.join(self.out, name)

    def add(self, paths) -> list:
        paths = [paths] if isinstance(paths, str) else list(paths)
        self.files.extend(paths)
        return paths


@dataclass
class Paper:
    """A reproducible paper: key, number in papers/, title, ``build(quick) -> [Item]`` and
    ``settings(quick) -> [str]`` (the lines of the report's Settings section)."""

    key: str
    number: str
    title: str
    build: Callable  # build(quick) -> list[Item]
    settings: Callable  # settings(quick) -> list[str]


_PAPERS: dict[str, Paper] = {}


def register_paper(paper: Paper) -> Paper:
    """Register a paper for ``livens reproduce``."""
    _PAPERS[paper.key] = paper
    return paper


def papers() -> dict[str, Paper]:
    """The reproducible papers by key ("mubo-2023", "nody-2023", "livens-2023", "jns-2009")."""
    from . import papers as _papers  # noqa: F401  (registers them)

    return dict(_PAPERS)


def requirements(schemes=(), examples=()) -> str | None:
    """The reason a claim cannot be reproduced (missing schemes or examples), or None."""
    miss_s = [s for s in schemes if not available_scheme(s)]
    miss_e = [e for e in examples if not available_example(e)]
    parts = []
    if miss_e:
        parts.append(f"example{'s' if len(miss_e) > 1 else ''} {', '.join(miss_e)} not available")
    if miss_s:
        parts.append(f"scheme{'s' if len(miss_s) > 1 else ''} {', '.join(miss_s)} not available")
    return "; ".join(parts) or None


@dataclass
class Reproduction:
    """The outcome of :func:`reproduce`: the claims, the files written and the report."""

    paper: Paper
    claims: list
    files: list
    report: str
    wall_time: float
    quick: bool

    def summary(self) -> dict:
        out = {}
        for c in self.claims:
            out[c.verdict] = out.get(c.verdict, 0) + 1
        return out


def reproduce(paper: str, out: str, quick: bool = False, executor=None, *, scheduler=None,
              processes: int | None = None, progress: bool | None = None) -> Reproduction:
    """Reproduce ``paper`` into ``out``: figures (PNG, PDF), data (CSV), ``report.md`` and
    ``claims.csv``. See the module docstring."""
    all_papers = papers()
    if paper not in all_papers:
        import difflib

        near = difflib.get_close_matches(paper, list(all_papers), n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"Unknown paper {paper!r}.{hint} Known: {', '.join(sorted(all_papers))}.")
    p = all_papers[paper]
    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    items = p.build(quick)
    specs = [s for it in items for s in it.runs]
    results = run_specs(specs, executor, scheduler=scheduler, processes=processes, progress=progress,
                        desc=f"reproduce {paper}")
    ctx = Context(results, out, quick)
    claims: list[Claim] = []
    for it in items:
        if it.make is None:
            continue
        try:
            got = it.make(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken item must not hide the others
            import traceback

            got = [Claim(it.title, f"(item {it.key})", "", NOT_REPRODUCED,
                         f"error while evaluating: {type(exc).__name__}: {exc}")]
            ctx.notes.append(f"item {it.key}: {traceback.format_exc(limit=4)}")
        for c in got:
            if not c.where.startswith(p.number):
                c.where = f"{p.number} {c.where}"
        claims.extend(got)
    wall = time.perf_counter() - t0
    failed_runs = [r for r in results.values() if r.status == "error"]
    for r in failed_runs:
        ctx.notes.append(f"run {r.spec.example} {r.spec.label} h={r.spec.h:g} raised: {r.message.splitlines()[0]}")
    settings = p.settings(quick) + [
        f"mode: {'quick (cheap variant: shorter end times, fewer step sizes)' if quick else 'full'}; "
        f"{len(results)} distinct runs; wall time {wall:.1f} s",
    ]
    claims_csv = write_claims_csv(os.path.join(out, "claims.csv"), claims)
    report = write_report(os.path.join(out, "report.md"), f"{p.title} ({p.key}, paper {p.number})",
                          f"Reproduced with livens; verdicts are computed, not copied.", claims,
                          ctx.files + [claims_csv], ctx.notes, settings)
    return Reproduction(p, claims, ctx.files + [claims_csv, report], report, wall, quick)


def reproduce_all(out: str, quick: bool = False, executor=None, *, scheduler=None, processes: int | None = None,
                  progress: bool | None = None) -> tuple[list, str]:
    """Reproduce every registered paper, each into ``out/<key>/``, and write ``out/report.md``:
    a table of the papers with their claim counts by verdict and links to their reports.

    Returns (the :class:`Reproduction` of each paper, the path of the index report).
    """
    os.makedirs(out, exist_ok=True)
    reps = [reproduce(key, os.path.join(out, key), quick, executor, scheduler=scheduler, processes=processes,
                      progress=progress) for key in sorted(papers())]
    verdicts = sorted({v for r in reps for v in r.summary()})
    lines = [f"# livens: reproduction of every paper ({'quick' if quick else 'full'})", "",
             "| paper | " + " | ".join(verdicts) + " | wall time [s] | report |",
             "|---|" + "---|" * len(verdicts) + "---|---|"]
    for r in reps:
        counts = r.summary()
        rel = os.path.relpath(r.report, out)
        lines.append(f"| {r.paper.number} {r.paper.title} ({r.paper.key}) | "
                     + " | ".join(str(counts.get(v, 0)) for v in verdicts)
                     + f" | {r.wall_time:.1f} | [{rel}]({rel}) |")
    index = os.path.join(out, "report.md")
    tmp = index + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, index)
    return reps, index


__all__ = ["Item", "Context", "Paper", "register_paper", "papers", "requirements", "reproduce", "reproduce_all",
           "Reproduction", "missing"]
