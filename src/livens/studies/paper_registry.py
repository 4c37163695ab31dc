"""The papers ``livens reproduce`` knows, and what a paper is made of: :class:`Item` (a figure, a
table or a group of statements, with the runs it needs and the function that checks its claims),
:class:`Context` (what that function works with) and :class:`Paper`. Each module of
:mod:`livens.studies.papers` registers its paper here (:func:`register_paper`);
:mod:`livens.studies.reproduce` runs them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from .runs import RunResult, RunSpec, available_example, available_scheme


@dataclass
class Item:
    """One figure, table or group of statements of a paper. ``note``: what the Settings table
    says about these runs beyond their specs (e.g. a run added to the paper's plan)."""

    key: str
    title: str
    runs: list = field(default_factory=list)
    make: Callable | None = None  # make(ctx) -> list[Claim]
    note: str = ""


@dataclass
class Context:
    """What an item's ``make`` works with: the results of all runs (and of the re-runs with
    rescue, :meth:`rescued`), the output folder, the mode."""

    results: dict
    out: str
    quick: bool
    files: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    rescue_results: dict = field(default_factory=dict)

    def result(self, spec: RunSpec) -> RunResult:
        """The result of a planned run or of a re-run with rescue (KeyError for a spec never run)."""
        hit = self.results.get(spec)
        return hit if hit is not None else self.rescue_results[spec]

    def rescued(self, spec: RunSpec) -> RunResult | None:
        """The re-run of ``spec`` with livens' rescue, where the papers' Newton failed in it."""
        if spec.rescue:
            return None
        return self.rescue_results.get(spec.with_(rescue=True))

    def trace(self, spec: RunSpec):
        """The run's Trace (None when the run failed before its first step)."""
        return self.result(spec).trace

    def stem(self, name: str) -> str:
        return os.path.join(self.out, name)

    def add(self, paths) -> list:
        paths = [paths] if isinstance(paths, str) else list(paths)
        self.files.extend(paths)
        return paths


@dataclass
class Paper:
    """A reproducible paper: key (its name on the command line), cite (its key in
    :mod:`livens.bibliography`), title, ``build(quick) -> [Item]`` and ``settings(quick, sections)
    -> [str]`` (the lines of the report's Settings section for the items with the keys
    ``sections``: the items reproduced, so that the Settings describe exactly those runs)."""

    key: str
    cite: str
    title: str
    build: Callable  # build(quick) -> list[Item]
    settings: Callable  # settings(quick, sections) -> list[str]


_PAPERS: dict[str, Paper] = {}


def register_paper(paper: Paper) -> Paper:
    """Register a paper for ``livens reproduce``."""
    _PAPERS[paper.key] = paper
    return paper


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
