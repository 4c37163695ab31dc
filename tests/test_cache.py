"""Bounded caches of compiled functions (livens._cache): a long process must not accumulate
executables until the kernel's limit of memory mappings crashes XLA (seen at ~65530 mappings in
the test suite with jax 0.10.2)."""
from __future__ import annotations

import importlib
import os

import pytest

import livens as lv
from livens._cache import CompiledCache


def test_compiled_cache_drops_the_least_recently_used():
    c = CompiledCache(2)
    c["a"], c["b"] = 1, 2
    assert c.get("a") == 1          # "a" is now the most recent
    c["c"] = 3                      # drops "b"
    assert list(c) == ["a", "c"] and c.get("b") is None
    assert c["a"] == 1
    c["d"] = 4                      # drops "c"
    assert list(c) == ["a", "d"]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
def test_memory_mappings_stay_bounded_over_many_compiled_runs(monkeypatch):
    sim = importlib.import_module("livens.simulate")
    monkeypatch.setattr(sim._RUNNERS, "maxsize", 2)

    def maps():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    p = lv.examples.load("pendulum-3d")
    counts = []
    for chunk in (8, 9, 10, 11, 12, 13, 14, 15):  # a new compiled time loop per chunk size
        lv.simulate(p, "VI-S", t_end=0.05, chunk=chunk, rescue=False)
        counts.append(maps())
        assert len(sim._RUNNERS) <= 2
    # each compiled loop maps a few hundred regions; with two kept, the count stops growing
    assert counts[-1] - counts[2] < 0.5 * (counts[2] - counts[0]) + 200
