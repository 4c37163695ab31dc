"""``livens reproduce PAPER --out DIR``: every numerical figure and table of a paper that livens
can compute, and ``DIR/report.md`` listing each claim the paper makes about its results beside
the measured value and a verdict.

A paper (:mod:`livens.studies.paper_registry`) is a list of :class:`Item` (a figure, a table or a
group of statements), each with the runs it needs (plain :class:`~livens.studies.runs.RunSpec`)
and a ``make`` function that draws the figures (PNG and PDF, data as CSV with named columns) and
returns the checked :class:`~livens.studies.report.Claim`. The items are data driven: a claim whose scheme or example
livens does not have is listed as "not reproduced" with that reason, and is computed as soon as
the scheme or example exists. All runs of all items are collected, de-duplicated and executed
through one executor (local by default, or a Dask cluster), so the numbers do not depend on where
they ran.

``quick=True`` gives a cheap variant (shorter end times, fewer step sizes, cheaper references)
whose claims are still checked, except those about a horizon the quick runs do not reach
("not reproduced (quick run: T = 40 of 1000)").

The runs use the papers' Newton (:class:`~livens.studies.runs.RunSpec` defaults: no rescue). A run
whose Newton iteration fails is executed a second time with livens' rescue (damped Newton after a
failed step), and the claims that depend on it report both outcomes (the paper's settings' verdict
counts). The report's Settings table is generated from the specs actually executed, its Sources
section gives the paper's full reference and every example's parameters with the module that names
their source.

A crash is never evidence about a paper: a run that raised (an exception in a user function, a
scheme or the engine) gives every claim that rests on it the verdict "error", and an item whose
check raised is listed claim by claim, each "error" with the exception's message (its ``make`` is
run once more on results in which every run raised, so that each claim takes the path of a run that
cannot be used and keeps its own row). :func:`reproduce` never raises for one; the CLI exits 1.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .executors import run_specs
from .paper_registry import _PAPERS, Context, Item, Paper, register_paper, requirements  # noqa: F401
from .report import (
    ERROR,
    NOT_REPRODUCED,
    VERDICTS,
    Claim,
    counts,
    errored,
    missing,
    runs_table,
    write_claims_csv,
    write_report,
)
from .runs import NEWTON, RunResult, RunSpec, available_example, available_scheme  # noqa: F401


def papers() -> dict[str, Paper]:
    """The reproducible papers by key ("mubo-2023", "nody-2023", "livens-2023", "jns-2009")."""
    from . import papers as _papers  # noqa: F401  (registers them)

    return dict(_PAPERS)


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
        """{verdict: count} over every verdict ("holds", "fails", "not reproduced", "error")."""
        return counts(self.claims)

    @property
    def errors(self) -> list:
        """The claims whose evaluation raised."""
        return [c for c in self.claims if c.verdict == ERROR]


def reproduce(
    paper: str,
    out: str,
    quick: bool = False,
    executor=None,
    *,
    scheduler=None,
    processes: int | None = None,
    progress: bool | None = None,
    sections: list | None = None,
) -> Reproduction:
    """Reproduce ``paper`` into ``out``: figures (PNG, PDF), data (CSV), ``report.md`` and
    ``claims.csv``. ``sections``: only the items with these keys (e.g. ``["4.1"]``; the report
    says which); None for all. See the module docstring."""
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
    if sections is not None:
        keys = [it.key for it in items]
        unknown = [k for k in sections if k not in keys]
        if unknown or not sections:
            raise ValueError(
                f"Unknown section(s) {', '.join(map(repr, unknown)) or '(none given)'} of {paper}; "
                f"its sections: {', '.join(keys)}."
            )
        items = [it for it in items if it.key in sections]
    specs = [s for it in items for s in it.runs]
    kw = dict(scheduler=scheduler, processes=processes, progress=progress)
    results = run_specs(specs, executor, desc=f"reproduce {paper}", **kw)
    # the runs whose (papers') Newton failed, once more with livens' rescue
    twins = [r.spec.with_(rescue=True) for r in results.values() if r.status == NEWTON and not r.spec.rescue]
    rescue_results = run_specs(twins, executor, desc=f"reproduce {paper} (rescue)", **kw) if twins else {}
    ctx = Context(results, out, quick, rescue_results=rescue_results)
    claims: list[Claim] = []
    for it in items:
        if it.make is None:
            continue
        try:
            got = it.make(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken item must not hide the others
            import traceback

            got = _claims_of_a_raising_item(it, ctx, exc)
            ctx.notes.append(f"item {it.key} raised while checking its claims: {traceback.format_exc(limit=6)}")
        for c in got:
            if not c.where.startswith(p.cite):
                c.where = f"{p.cite} {c.where}"
        claims.extend(got)
    wall = time.perf_counter() - t0
    failed_runs = [r for r in list(results.values()) + list(rescue_results.values()) if r.status == "error"]
    for r in failed_runs:
        ctx.notes.append(f"run {r.spec.example} {r.spec.label} h={r.spec.h:g} raised: {r.message.splitlines()[0]}")
    groups = [(f"{it.key}: {it.title}", it.runs, it.note) for it in items]
    if twins:
        groups.append(
            (
                "re-runs with rescue",
                twins,
                "the runs above whose Newton iteration failed, once more "
                "with livens' damped least-squares Newton after a failed step",
            )
        )
    settings = p.settings(quick, [it.key for it in items]) + [
        f"mode: {'quick (cheap variant: shorter end times, fewer step sizes)' if quick else 'full'}; "
        f"{len(results) + len(rescue_results)} distinct runs; wall time {wall:.1f} s; the runs:",
    ]
    if sections is not None:
        settings.insert(
            -1,
            "sections: only "
            + ", ".join(it.key for it in items)
            + " (the paper's other sections are not part of this report)",
        )
    claims_csv = write_claims_csv(os.path.join(out, "claims.csv"), claims)
    sources = _sources(p, specs)
    report = write_report(
        os.path.join(out, "report.md"),
        f"{p.title} ({p.key}, [{p.cite}])",
        "Reproduced with livens; verdicts are computed, not copied.",
        claims,
        ctx.files + [claims_csv],
        ctx.notes,
        settings,
        runs_table(groups),
        sources,
    )
    return Reproduction(p, claims, ctx.files + [claims_csv, report], report, wall, quick)


def _sources(paper: Paper, specs: list) -> list:
    """The report's Sources: the paper's full reference (:mod:`livens.bibliography`) and, for every
    example the runs use, its parameters and the module whose docstring says where each value comes
    from (all inside the installed package)."""
    import inspect

    from .. import examples
    from ..bibliography import cite

    try:
        out = [f"[{paper.cite}] {cite(paper.cite)}"]
    except KeyError:
        out = [f"[{paper.cite}] {paper.title}"]
    for name in sorted({s.example for s in specs}):
        try:
            module = inspect.getmodule(examples._get(name))
            params = examples.parameters(name)
        except ValueError:
            continue
        first = (module.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        values = ", ".join(f"{k} = {v!r}" for k, v in params.items()) or "none"
        out.append(
            f"example '{name}' ({module.__name__}; `help({module.__name__})` gives the source of every value): "
            f"{first} Parameters: {values}."
        )
    return out


class _EveryRunRaised(dict):
    """The results of a dry run of an item's claims: every run "raised" (the message names why)."""

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def get(self, spec, default=None):
        return RunResult(spec, ERROR, self.message)

    def __getitem__(self, spec):
        return self.get(spec)

    def __contains__(self, spec):
        return True


def _claims_of_a_raising_item(item: Item, ctx: Context, exc: BaseException) -> list:
    """Each claim of an item whose check raised, in its own row with the verdict "error": the item's
    claims are listed again by running its ``make`` on results in which every run raised (each claim
    then takes the path of a run that cannot be used), the reason naming the exception. Falls back
    to one row for the item where that dry run raises too."""
    import tempfile

    why = f"{type(exc).__name__} while checking the claims of item {item.key}: {exc}"
    with tempfile.TemporaryDirectory() as tmp:
        dry = Context(_EveryRunRaised(why), tmp, ctx.quick, rescue_results=_EveryRunRaised(why))
        try:
            got = item.make(dry)
        except Exception:  # noqa: BLE001 - the one-row fallback below
            got = None
    if not got:
        return [errored(item.title, f"(every claim of item {item.key})", exc)]
    out = []
    for c in got:
        if c.verdict == NOT_REPRODUCED and "not available" in (c.reason or ""):
            out.append(c)  # a scheme or example livens lacks: unaffected by the exception
        else:
            out.append(Claim(c.where, c.text, "", ERROR, why))
    return out


def reproduce_all(
    out: str,
    quick: bool = False,
    executor=None,
    *,
    scheduler=None,
    processes: int | None = None,
    progress: bool | None = None,
) -> tuple[list, str]:
    """Reproduce every registered paper, each into ``out/<key>/``, and write ``out/report.md``:
    a table of the papers with their claim counts by verdict and links to their reports.

    Returns (the :class:`Reproduction` of each paper, the path of the index report).
    """
    os.makedirs(out, exist_ok=True)
    reps = [
        reproduce(
            key, os.path.join(out, key), quick, executor, scheduler=scheduler, processes=processes, progress=progress
        )
        for key in sorted(papers())
    ]
    verdicts = list(VERDICTS)
    lines = [
        f"# livens: reproduction of every paper ({'quick' if quick else 'full'})",
        "",
        "| paper | " + " | ".join(verdicts) + " | wall time [s] | report |",
        "|---|" + "---|" * len(verdicts) + "---|---|",
    ]
    for r in reps:
        counts = r.summary()
        rel = os.path.relpath(r.report, out)
        lines.append(
            f"| {r.paper.cite} {r.paper.title} ({r.paper.key}) | "
            + " | ".join(str(counts.get(v, 0)) for v in verdicts)
            + f" | {r.wall_time:.1f} | [{rel}]({rel}) |"
        )
    index = os.path.join(out, "report.md")
    tmp = index + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, index)
    return reps, index


__all__ = [
    "Item",
    "Context",
    "Paper",
    "register_paper",
    "papers",
    "requirements",
    "reproduce",
    "reproduce_all",
    "Reproduction",
    "missing",
]
