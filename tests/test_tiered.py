"""Large XLA programs compiled quickly first and optimized in the background (livens.engine.tiers), and
the compile options livens gives XLA (livens._jaxconfig)."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import tiers as _tiered
from livens.engine import xla as _jaxconfig


def _program(n_terms: int):
    """A function of (x, k) with about 3 n_terms equations: a sum of sines, multiplied by k."""

    def fn(x, k):
        acc = jnp.zeros_like(x)
        for i in range(n_terms):
            acc = acc + jnp.sin(x * (i + 1)) * (1.0 / (i + 1))
        return acc * k, jnp.sum(acc)

    return fn


def _all_close(a, b, rtol):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=0)


def test_a_large_program_runs_quick_first_then_optimized(monkeypatch):
    fn = _program(200)
    x, k = jnp.linspace(0.1, 1.0, 7), jnp.float64(2.0)
    reference = jax.jit(fn)(x, k)
    # hold the optimized compile until the quick executable has run
    gate = threading.Event()
    real = _tiered.background

    def held(work, name="livens-compile"):
        return real(lambda: (gate.wait(60), work())[1], name)

    monkeypatch.setattr(_tiered, "background", held)
    tj = _tiered.TieredJit(fn, large=100)  # about 600 equations
    first = tj(x, k)
    assert tj.level(x, k) == "quick"
    _all_close(first, reference, rtol=1e-13)  # level 0 forms no fused multiply-adds: round-off apart
    gate.set()
    _tiered.wait()
    assert tj.level(x, k) == "default"
    later = tj(x, k * 3.0)  # the same signature: no new program
    assert tj._cache_size() == 1
    _all_close(later, _jaxconfig.jit(fn)(x, k * 3.0), rtol=0)  # the optimized executable is jit's program


def test_a_small_program_is_compiled_once_at_the_default_level():
    fn = _program(3)
    tj = _tiered.TieredJit(fn)
    x, k = jnp.arange(4.0), jnp.float64(1.5)
    out = tj(x, k)
    assert tj.level(x, k) == "default" and not _tiered._PENDING
    _all_close(out, _jaxconfig.jit(fn)(x, k), rtol=0)


def test_prepare_compiles_from_shapes_and_signatures_are_kept_apart():
    fn = _program(3)
    tj = _tiered.TieredJit(fn, large=1)  # every program in two tiers
    shapes = (jax.ShapeDtypeStruct((5,), jnp.float64), jax.ShapeDtypeStruct((), jnp.float64))
    tj.prepare(*shapes)
    assert tj._cache_size() == 1 and tj.level(jnp.zeros(5), jnp.float64(1.0)) is not None
    tj(jnp.ones(5), jnp.float64(2.0))
    assert tj._cache_size() == 1  # the prepared program ran
    tj(jnp.ones(6), jnp.float64(2.0))
    assert tj._cache_size() == 2
    _tiered.wait()


def test_a_failed_optimized_compile_keeps_the_quick_executable(monkeypatch):
    fn = _program(3)
    tj = _tiered.TieredJit(fn, large=1)
    x, k = jnp.arange(3.0), jnp.float64(2.0)

    real = _tiered.background

    def failing(work, name="livens-compile"):
        return real(lambda: (_ for _ in ()).throw(RuntimeError("no optimizer today")), name)

    monkeypatch.setattr(_tiered, "background", failing)
    tj(x, k)
    monkeypatch.undo()
    _tiered.wait()
    out = tj(x, k)
    assert tj.level(x, k) == "quick"
    _all_close(out, jax.jit(fn)(x, k), rtol=1e-13)


def test_a_background_compile_does_not_touch_the_persistent_cache(monkeypatch):
    """Loading a cached executable, and writing one to the cache, in the background thread while the
    main thread compiled crashed test processes: the optimized compile neither reads nor writes the
    cache; the main thread still does both."""
    assert _tiered._guard_cache()
    readers, writers = [], []
    real_read, real_write = _tiered._CACHE_READ[0], _tiered._CACHE_WRITE[0]

    def spy_read(*args, **kwargs):
        readers.append(threading.current_thread().name)
        return real_read(*args, **kwargs)

    def spy_write(*args, **kwargs):
        writers.append(threading.current_thread().name)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(_tiered, "_CACHE_READ", [spy_read])
    monkeypatch.setattr(_tiered, "_CACHE_WRITE", [spy_write])
    fn = _program(150)
    x, k = jnp.linspace(0.2, 0.9, 5), jnp.float64(1.25)
    for _ in range(2):  # the second program: the same text, so its quick tier is in the cache
        tj = _tiered.TieredJit(fn, large=100)
        tj(x, k)
        _tiered.wait()
        assert tj.level(x, k) == "default"
    if jax.config.jax_compilation_cache_dir is None:
        pytest.skip("the persistent compilation cache is off in this process")
    main = {threading.main_thread().name}
    assert readers and set(readers) == main and set(writers) <= main


def test_background_keeps_the_exception_for_its_caller():
    future = _tiered.background(lambda: 1 / 0)
    _tiered.wait()
    with pytest.raises(ZeroDivisionError):
        future.result()
    assert future not in _tiered._PENDING


def test_compile_options_fall_back_where_xla_does_not_know_them(monkeypatch):
    assert _jaxconfig._supported((("xla_no_such_option_anywhere", True),)) == {}
    monkeypatch.setattr(_jaxconfig, "XLA_OPTIONS", {"xla_no_such_option_anywhere": True})
    assert _jaxconfig.compiler_options() == {}
    f = _jaxconfig.jit(lambda x: 2 * x)
    assert float(f(1.5)) == 3.0


def test_compile_options_leave_what_xla_flags_sets(monkeypatch):
    _jaxconfig._supported.cache_clear()
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    try:
        assert "xla_cpu_use_fusion_emitters" not in _jaxconfig.compiler_options()
    finally:
        _jaxconfig._supported.cache_clear()


def test_a_beam_run_agrees_quick_and_optimized():
    """The three-bar swing (SLO09 §4.2, 4 elements): the time loop is large, so its first chunk may run
    on the quick executable; a run whose every chunk ran on the optimized one agrees with it to the
    Newton tolerance (configurations to round-off), and both hold the constraints."""
    problem = lv.examples.load("three-bar-swing", n_elements=4)
    h = problem.h
    kw = dict(h=h, t_end=40 * h, backend="xla", chunk=10, progress=False)
    first = lv.simulate(problem, "vi-lagrange", **kw)
    _tiered.wait()
    again = lv.simulate(problem, "vi-lagrange", **kw)
    np.testing.assert_allclose(first.q, again.q, rtol=0, atol=1e-12)
    # the multipliers enter eq 14 times h: Newton's tolerance (1e-9) fixes them to about tol / h
    np.testing.assert_allclose(first.lam, again.lam, rtol=0, atol=1e-9 / h)
    assert np.abs(first.constraint_residual()).max() < 1e-9
