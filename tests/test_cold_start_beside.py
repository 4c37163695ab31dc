"""A first call's XLA start step compiled in a background thread while the time loop is traced
(livens.engine.tiers.compile_beside), never beside another XLA compile, and lax.pad evaluated by
NumPy (livens.numpy_jaxpr) as XLA evaluates it: what shortens a large system's cold first call."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import livens as lv
from livens.engine import EngineOptions, loops, start_program, xla
from livens.numpy_jaxpr import NumpyFunction, _pad


def test_a_start_compiled_beside_waits_while_another_compile_holds_the_lock():
    x = jnp.linspace(0.0, 1.0, 6)
    options = EngineOptions(backend="xla")
    key = ("test_cold_start_beside", "lock")
    with xla.COMPILE_LOCK:  # another compile in progress
        shapes, finish = start_program(key, lambda y: 3.0 * y + 1.0, (x,), options, native=False, beside=True)
        future = loops._STARTS[(key, False, options)][1]
        time.sleep(0.3)
        assert not future.done()  # it has not compiled beside the one holding the lock
    assert shapes.shape == x.shape
    np.testing.assert_array_equal(np.asarray(finish()), np.asarray(3.0 * x + 1.0))


def _spy_compiles(monkeypatch) -> list:
    """(thread name, start, end) of every XLA compile or persistent-cache read from now on."""
    compiler = pytest.importorskip("jax._src.compiler")
    real = compiler.compile_or_get_cached
    seen = []

    def spy(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            seen.append((threading.current_thread().name, start, time.perf_counter()))

    monkeypatch.setattr(compiler, "compile_or_get_cached", spy)
    return seen


def test_a_large_systems_start_compiles_beside_the_loop_trace_one_compile_at_a_time(monkeypatch):
    """The three-bar swing (SLO09 §4.2) with XLA: its start (SLO09 eq 15) compiles in the background
    thread while the loop is traced, and no two XLA compiles (or cache reads) overlap; the run
    agrees to the bit with one whose start compiled in the calling thread."""
    problem = lv.examples.load("three-bar-swing", n_elements=6)
    h = problem.h
    kw = dict(h=h, t_end=3 * h, backend="xla", progress=False)
    seen = _spy_compiles(monkeypatch)
    beside = lv.simulate(problem, "vi-lagrange", **kw)
    assert "livens-start-xla" in {name for name, _, _ in seen}
    spans = sorted((start, end) for _, start, end in seen)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end  # one at a time
    # the same run with the start compiled where it is called
    loops._STARTS.clear()
    real = loops.start_program
    monkeypatch.setattr(lv.engine, "start_program", lambda *a, beside=False, **k: real(*a, **k))
    here = lv.simulate(problem, "vi-lagrange", **kw)
    pairs = [(beside.q, here.q), (beside.p, here.p), (beside.lam, here.lam)]
    for a, b in pairs + [(beside.newton_iterations, here.newton_iterations)]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "shape, config",
    [
        ((5,), [(1, 2, 0)]),
        ((5,), [(-1, 2, 1)]),
        ((5,), [(-3, -2, 2)]),
        ((3,), [(-3, 0, 0)]),  # nothing of x left
        ((0,), [(2, 1, 0)]),
        ((4, 3), [(0, -1, 1), (2, -2, 0)]),
        ((2, 3, 4), [(1, 0, 0), (-1, -1, 3), (0, 2, 1)]),
    ],
)
def test_pad_evaluated_by_numpy_is_lax_pad(shape, config):
    x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    value = np.float64(-0.5)
    expected = np.asarray(lax.pad(jnp.asarray(x), value, config))
    got = _pad(x, value, padding_config=config)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    fn = NumpyFunction(lambda a: lax.pad(a, value, config), x)  # the interpreter's rule
    np.testing.assert_array_equal(fn(x), expected)


def test_pad_of_a_jvp_of_slices_agrees_with_jax():
    """Slices' derivatives are pads: the Jacobian of a function built of slices, by NumPy and by JAX."""

    def f(v):
        return jnp.concatenate([v[1:] * v[:-1], v[::2] ** 2, v[-3:]])

    v = np.linspace(0.3, 1.7, 9)
    J = np.asarray(jax.jacfwd(f)(v))
    jac = NumpyFunction(jax.jacfwd(f), v)
    np.testing.assert_array_equal(jac(v), J)
