"""Bounded caches of compiled functions (livens._lru): a long process must not accumulate
executables until the kernel's limit of memory mappings crashes XLA (seen at ~65530 mappings in
the test suite with jax 0.10.2)."""

from __future__ import annotations

import importlib
import os

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens._lru import CompiledCache


def test_compiled_cache_drops_the_least_recently_used():
    c = CompiledCache(2)
    c["a"], c["b"] = 1, 2
    assert c.get("a") == 1  # "a" is now the most recent
    c["c"] = 3  # drops "b"
    assert list(c) == ["a", "c"] and c.get("b") is None
    assert c["a"] == 1
    c["d"] = 4  # drops "c"
    assert list(c) == ["a", "d"]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
def test_memory_mappings_stay_bounded_over_many_compiled_runs(monkeypatch):
    drv = importlib.import_module("livens.driver.run")
    monkeypatch.setattr(drv._LOOPS, "maxsize", 2)

    def maps():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    p = lv.examples.load("pendulum-3d")
    counts = []
    for chunk in (8, 9, 10, 11, 12, 13, 14, 15):  # a new compiled time loop per chunk size
        lv.simulate(p, "VI-S", t_end=0.05, chunk=chunk, rescue=False)
        counts.append(maps())
        assert len(drv._LOOPS) <= 2
    # each compiled loop maps a few hundred regions; with two kept, the count stops growing (the
    # first runs may also shrink it, evicting loops that earlier tests compiled)
    assert counts[-1] - counts[2] < 0.5 * max(counts[2] - counts[0], 0) + 200, counts


def test_binding_the_same_parameter_values_reuses_what_was_compiled():
    """A System with parameters: binding equal concrete values gives the same Mechanics, so a second
    run compiles neither the scheme's start nor the Solution's diagnostics again (each cost a
    compilation per call before); other values give another Mechanics."""
    from livens.engine import loops
    from livens.mechanics import mechanics

    p = lv.examples.load("double-spherical-pendulum")
    mech = mechanics(p.system, p.q0)
    a = mech.bind({"l1": jnp.asarray(1.0), "l2": jnp.asarray(1.5), "gravity": jnp.asarray(9.81)})
    b = mech.bind({"l1": np.float64(1.0), "l2": np.float64(1.5), "gravity": np.float64(9.81)})
    assert a is b and a.params is not None
    assert mech.bind({"l1": 1.0, "l2": 1.6, "gravity": 9.81}) is not a
    first = lv.simulate(p, "vi-lagrange", t_end=0.1, progress=False)
    n_start = len(loops._STARTS)
    second = lv.simulate(p, "vi-lagrange", t_end=0.1, progress=False)
    assert len(loops._STARTS) == n_start
    assert first.mechanics is second.mechanics
    np.testing.assert_array_equal(first.q, second.q)


def test_record_layout_is_traced_once_per_scheme_system_and_shapes(monkeypatch):
    """The layout of a run's records is found by tracing the scheme's update (longer than a short
    run of a large system): a second run of the same system and scheme reuses it, another scheme
    gets its own, and it is the layout a fresh trace gives."""
    rec = importlib.import_module("livens.driver.records")
    from livens.driver.setup import initial_state, resolve

    traced = []
    original = rec.RecordLayout.of  # called once per trace of the update
    monkeypatch.setattr(rec.RecordLayout, "of", classmethod(lambda cls, shapes: traced.append(1) or original(shapes)))
    p = lv.examples.load("pendulum-chain", n_bodies=3)
    lv.simulate(p, "vi-lagrange", t_end=0.05, progress=False)
    first = len(traced)
    lv.simulate(p, "vi-lagrange", t_end=0.08, progress=False)
    assert len(traced) == first
    lv.simulate(p, "midpoint", t_end=0.05, progress=False)
    assert len(traced) > first
    sch, vals, mech = resolve(p, "vi-lagrange", {})
    state, _ = sch.start(initial_state(p, mech, sch), p.h, vals, mech)
    cached = rec.record_layout(sch, mech, "extrapolated", state, p.h, vals)
    rec._LAYOUTS.clear()
    assert rec.record_layout(sch, mech, "extrapolated", state, p.h, vals) == cached
