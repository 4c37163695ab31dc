"""Memory mappings of a long process: compiled programs each hold machine code in mappings, and Linux
refuses more than ``vm.max_map_count`` of them per process (XLA then crashes in its next compile).
livens empties its caches and JAX's when the process comes close (:mod:`livens._lru`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import _lru

pytestmark = pytest.mark.skipif(_lru.mapping_count() is None, reason="counts /proc/self/maps (Linux)")


def test_relieving_the_pressure_frees_the_mappings_of_cached_programs(monkeypatch):
    """Sixty programs held only by a livens cache (and JAX's): emptying the caches frees their code,
    but for the program used last."""
    monkeypatch.setattr(_lru, "PRESSURE", 2.0)  # only the forced call below empties the caches
    cache = _lru.LRU(100)
    x = jnp.ones(3)
    before = _lru.mapping_count()
    for i in range(60):
        f = jax.jit(lambda y, i=i: jnp.sin(y * (i + 1.5)) + jnp.cos(y) ** (i + 2))
        f(x).block_until_ready()
        cache[("program", i)] = f
    grown = _lru.mapping_count()
    assert grown - before >= 60  # each executable maps its code
    assert _lru.relieve_mapping_pressure(force=True)
    assert list(cache) == [("program", 59)]
    assert _lru.mapping_count() <= before + 0.2 * (grown - before)


def test_below_the_threshold_nothing_is_emptied(monkeypatch):
    cache = _lru.LRU(4)
    cache["kept"] = 1
    monkeypatch.setattr(_lru, "_LAST_CHECK", [0.0])
    monkeypatch.setattr(_lru, "PRESSURE", 2.0)  # never reached
    cache["other"] = 2
    assert list(cache) == ["kept", "other"]


def test_a_run_whose_caches_are_emptied_at_every_new_entry_is_unchanged(monkeypatch):
    """The valve fires on every insertion during a run (also inside traces, where only livens'
    caches are emptied): the run compiles again what it needs and gives bit-identical results."""
    problem = lv.examples.load("pendulum-3d")
    kw = dict(h=0.01, t_end=0.2, progress=False, backend="xla")
    quiet = {scheme: lv.simulate(problem, scheme, **kw) for scheme in ("ggl-em", "vi-lagrange")}
    fired = []
    real = _lru.relieve_mapping_pressure

    def counting(force=False):
        emptied = real(force)
        fired.append(emptied)
        return emptied

    monkeypatch.setattr(_lru, "relieve_mapping_pressure", counting)
    monkeypatch.setattr(_lru, "PRESSURE", 0.0)
    monkeypatch.setattr(_lru, "_CHECK_EVERY", 0.0)
    for scheme, expected in quiet.items():
        real(force=True)  # the run finds nothing cached and fills the caches again
        again = lv.simulate(problem, scheme, **kw)
        np.testing.assert_array_equal(again.q, expected.q)
        np.testing.assert_array_equal(again.lam, expected.lam)
    assert sum(fired) >= 4
