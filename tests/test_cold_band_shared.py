"""vi-lagrange's start (SLO09 eq 15) and step (eq 14) share one band structure
(livens.solvers.banded.same_pattern): found once per system, it is the structure each would find
alone, and the run keeps its bits."""

from __future__ import annotations

import sys

import jax
import numpy as np

import livens as lv
import livens.driver.run  # noqa: F401 - the module, not the function livens.driver exports under its name
import livens.schemes.vi_lagrange  # noqa: F401 - its declaration of the shared pattern made before the test
from livens.engine import loops
from livens.solvers import banded


def _fresh():
    """Nothing traced or found yet: the driver's compiled loops and starts, JAX's traces, the structures."""
    sys.modules["livens.driver.run"]._LOOPS.clear()
    loops._STARTS.clear()
    banded._STRUCTURES.clear()
    jax.clear_caches()


def _run(problem):
    return lv.simulate(problem, "vi-lagrange", h=problem.h, t_end=3 * problem.h, backend="xla", progress=False)


def test_the_start_and_the_step_of_vi_lagrange_find_one_band_structure(monkeypatch):
    """The three-bar swing (SLO09 §4.2): each residual's own search, with nothing shared, finds the
    same order, block size, colouring and assembly index; shared, the structure is searched once, and
    the run's q, p, multipliers and Newton iterations are those of the unshared run to the bit."""
    problem = lv.examples.load("three-bar-swing", n_elements=8)
    _fresh()
    monkeypatch.setattr(banded, "_SAME_PATTERN", {})
    alone = _run(problem)
    found = [s for s in banded._STRUCTURES.values() if s is not None]
    assert len(found) == 2, len(found)  # the start's and the step's, each searched
    first, second = found
    assert (first.n, first.b, first.nnz, first.ncolors) == (second.n, second.b, second.nnz, second.ncolors)
    for name in ("perm", "colors", "index"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    monkeypatch.undo()
    _fresh()
    searches = []
    real = banded.find_structure
    monkeypatch.setattr(banded, "find_structure", lambda *a, **k: searches.append(a[0]) or real(*a, **k))
    shared = _run(problem)
    assert len(searches) == 1, searches
    for a, b in ((alone.q, shared.q), (alone.p, shared.p), (alone.lam, shared.lam)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(alone.newton_iterations, shared.newton_iterations)
