"""Large XLA programs compiled quickly first and optimized once their runs have paid for it
(livens.engine.tiers), and the compile options livens gives XLA (livens._jaxconfig)."""

import threading
import weakref

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


def test_a_large_program_runs_quick_first_then_optimized_once_paid_for(monkeypatch):
    fn = _program(200)
    x, k = jnp.linspace(0.1, 1.0, 7), jnp.float64(2.0)
    reference = jax.jit(fn)(x, k)
    monkeypatch.setattr(_tiered, "PAYBACK", float("inf"))  # the runs never pay for the optimization
    tj = _tiered.TieredJit(fn, large=100)  # about 600 equations
    for _ in range(3):
        first = tj(x, k)
        assert tj.level(x, k) == "quick"
    _all_close(first, reference, rtol=1e-13)  # level 0 forms no fused multiply-adds: round-off apart
    program = tj._programs[_jaxconfig.signature((x, k))]
    assert program.compile_seconds > 0 and program.run_seconds > 0  # the rent is measured
    monkeypatch.setattr(_tiered, "PAYBACK", 0.0)  # they have paid for it: the next call optimizes
    later = tj(x, k * 3.0)  # the same signature: no new program
    assert tj.level(x, k) == "default" and tj._cache_size() == 1
    _all_close(later, _jaxconfig.jit(fn)(x, k * 3.0), rtol=0)  # the optimized executable is jit's program


def test_the_optimizing_compile_waits_for_runs_worth_its_cost(monkeypatch):
    """The rent-or-buy rule: with the runs' time below PAYBACK quick compiles, no second compile."""
    tj = _tiered.TieredJit(_program(200), large=100)
    x, k = jnp.linspace(0.1, 1.0, 7), jnp.float64(2.0)
    tj(x, k)
    program = tj._programs[_jaxconfig.signature((x, k))]
    program.compile_seconds = 1e6  # a compile that no run here pays for
    for _ in range(3):
        tj(x, k)
    assert tj.level(x, k) == "quick"
    program.run_seconds = _tiered.PAYBACK * program.compile_seconds  # paid
    tj(x, k)
    assert tj.level(x, k) == "default"


def _compile_threads(monkeypatch) -> list:
    """The (thread, level) of every XLA compile of a tiered program from now on."""
    threads = []
    real = _tiered._compile

    def spy(lowered, level):
        threads.append((threading.current_thread(), level))
        return real(lowered, level)

    monkeypatch.setattr(_tiered, "_compile", spy)
    return threads


def test_optimize_compiles_every_quick_program_now_in_the_calling_thread(monkeypatch):
    """engine.optimize: the optimized executable in use from the next call, whatever the runs have cost."""
    # the programs of earlier tests still alive at level 0 are left out (optimizing them all took minutes),
    # and so are the compiles they left running in the background (waiting for them took minutes too)
    monkeypatch.setattr(_tiered, "_QUICK", weakref.WeakSet())
    monkeypatch.setattr(lv.engine, "wait", lambda timeout=None: None)
    threads = _compile_threads(monkeypatch)
    monkeypatch.setattr(_tiered, "PAYBACK", float("inf"))  # the runs never pay for it themselves
    fn = _program(200)
    tj = _tiered.TieredJit(fn, large=100)
    x, k = jnp.linspace(0.1, 1.0, 7), jnp.float64(2.0)
    tj(x, k)
    assert tj.level(x, k) == "quick"
    lv.engine.optimize()
    assert tj.level(x, k) == "default" and tj._cache_size() == 1
    assert [level for _, level in threads] == ["quick", "default"]
    assert {thread for thread, _ in threads} == {threading.current_thread()}
    _all_close(tj(x, k), _jaxconfig.jit(fn)(x, k), rtol=0)  # jit's program
    lv.engine.optimize()  # nothing left at level 0: no compile
    assert len(threads) == 2


def test_a_small_program_is_compiled_once_at_the_default_level():
    fn = _program(3)
    tj = _tiered.TieredJit(fn)
    x, k = jnp.arange(4.0), jnp.float64(1.5)
    out = tj(x, k)
    assert tj.level(x, k) == "default"
    _all_close(out, _jaxconfig.jit(fn)(x, k), rtol=0)


def test_prepare_compiles_from_shapes_and_signatures_are_kept_apart():
    fn = _program(3)
    tj = _tiered.TieredJit(fn)
    tj.prepare(jax.ShapeDtypeStruct((5,), jnp.float64), jax.ShapeDtypeStruct((), jnp.float64))
    assert tj._cache_size() == 1 and tj.level(jnp.zeros(5), jnp.float64(1.0)) is not None
    tj(jnp.zeros(3), jnp.float64(1.0))
    assert tj._cache_size() == 2


def test_a_failed_optimized_compile_keeps_the_quick_executable(monkeypatch):
    fn = _program(3)
    tj = _tiered.TieredJit(fn, large=1)
    x, k = jnp.arange(3.0), jnp.float64(2.0)
    tj(x, k)
    real = _tiered._compile

    def failing(lowered, level):
        if level == "default":
            raise RuntimeError("no optimizer today")
        return real(lowered, level)

    monkeypatch.setattr(_tiered, "_compile", failing)
    monkeypatch.setattr(_tiered, "PAYBACK", 0.0)
    out = tj(x, k)
    assert tj.level(x, k) == "quick"
    _all_close(out, jax.jit(fn)(x, k), rtol=1e-13)


def test_the_tiers_and_a_start_not_compiled_beside_compile_in_the_calling_thread(monkeypatch):
    """XLA compiles beside one another crashed test processes (segmentation faults and aborts in the
    compiler and the persistent cache): both tiers compile where called, and so does an XLA start
    step unless the driver asks for it beside the loop's trace (``beside=True``, one compile at a
    time under the compile lock: tests/test_cold_start_beside.py)."""
    threads = _compile_threads(monkeypatch)
    monkeypatch.setattr(_tiered, "PAYBACK", 0.0)
    tj = _tiered.TieredJit(_program(150), large=100)
    x, k = jnp.linspace(0.2, 0.9, 5), jnp.float64(1.25)
    tj(x, k)
    tj(x, k)
    assert [level for _, level in threads] == ["quick", "default"]
    assert {thread for thread, _ in threads} == {threading.current_thread()}
    from livens.engine import EngineOptions, start_program

    before = threading.active_count()
    shapes, finish = start_program("doubling", lambda y: 2 * y, (x,), EngineOptions(backend="xla"), native=False)
    assert threading.active_count() == before  # no thread was started for the compile
    _all_close(finish(), 2 * x, rtol=0)


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


def test_a_beam_run_agrees_quick_and_optimized(monkeypatch):
    """The three-bar swing (SLO09 §4.2, 4 elements): the time loop is large. A run whose every chunk
    ran on the quick executable agrees with one whose every chunk ran on the optimized one to the
    Newton tolerance (configurations to round-off), and both hold the constraints."""
    levels = []
    real = _tiered._compile

    def spy(lowered, level):
        levels.append(level)
        return real(lowered, level)

    monkeypatch.setattr(_tiered, "_compile", spy)
    problem = lv.examples.load("three-bar-swing", n_elements=4)
    h = problem.h
    kw = dict(h=h, t_end=40 * h, backend="xla", chunk=10, progress=False)
    monkeypatch.setattr(_tiered, "PAYBACK", float("inf"))
    first = lv.simulate(problem, "vi-lagrange", **kw)
    assert "quick" in levels and "default" not in levels
    monkeypatch.setattr(_tiered, "PAYBACK", 0.0)  # the same loop, optimized at its first call
    again = lv.simulate(problem, "vi-lagrange", **kw)
    assert levels[-1] == "default"
    np.testing.assert_allclose(first.q, again.q, rtol=0, atol=1e-12)
    # the multipliers enter eq 14 times h: Newton's tolerance (1e-9) fixes them to about tol / h
    np.testing.assert_allclose(first.lam, again.lam, rtol=0, atol=1e-9 / h)
    assert np.abs(first.constraint_residual()).max() < 1e-9
