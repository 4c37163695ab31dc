"""Interruptible kernels (livens.engine.native.interrupt): a chunk's steps stop after the step
under way, and the carry holds exactly the steps done (the same bits as a kernel of that many
steps)."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from livens.engine import native

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _chunk(length):
    def chunk(c, n):
        def step(carry, _):
            c, n = carry
            return (jnp.sqrt(c * c + 1.0), n + 1), None  # IEEE square roots: the same bits everywhere

        return jax.lax.scan(step, (c, n), None, length=length)[0]

    return chunk


def test_an_interrupted_kernel_returns_at_once_with_the_steps_done():
    c0, n0 = np.linspace(0.0, 1.0, 8), np.int64(0)
    length = 2_000_000_000  # minutes of steps
    kernel = native.compile_function(_chunk(length), c0, n0, interruptible=True)
    timer = threading.Timer(0.3, native.interrupt)
    t0 = time.perf_counter()
    timer.start()
    try:
        c, n = kernel(c0, n0)
        took = time.perf_counter() - t0
        again = kernel(c0, n0)  # until resume(), a call stops at once
    finally:
        native.resume()
    assert took < 1.0, took
    assert 0 < int(n) < length
    assert int(again[1]) == 0
    done = native.compile_function(_chunk(int(n)), c0, n0)(c0, n0)  # a kernel of exactly those steps
    np.testing.assert_array_equal(c, done[0])
    assert int(done[1]) == int(n)


def test_kernels_not_asked_to_be_interruptible_ignore_the_flag():
    c0, n0 = np.zeros(3), np.int64(0)
    kernel = native.compile_function(_chunk(1000), c0, n0)
    native.interrupt()
    try:
        _, n = kernel(c0, n0)
    finally:
        native.resume()
    assert int(n) == 1000


def test_a_sigint_the_watcher_hears_late_does_not_stop_later_native_runs(monkeypatch):
    """Ctrl-C reaches the SIGINT watcher thread through a socket; under load the thread can read it
    after the run has ended and let native kernels run again. Its interrupt() must not come after
    that: the flag would stay up, and every later native run would stop before its first step."""
    import os
    import signal

    from livens.driver import host
    from livens.engine.native import build

    real = host.engine.interrupt_native

    def late_in_the_watcher():
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)  # the watcher thread descheduled
        real()

    monkeypatch.setattr(host.engine, "interrupt_native", late_in_the_watcher)
    state = host.sigint_flag()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # Python's handler runs in the main thread
        assert state["flag"]
    finally:
        state["restore"]()
    time.sleep(0.5)
    assert build._STOP[0] == 0


def test_a_native_flow_with_the_stop_flag_up_stops_with_an_error_instead_of_spinning():
    """A native flow whose kernel stops before its first step (the stop flag of Ctrl-C is up) raises
    instead of calling the kernel again and again without progress."""
    import jax.numpy as jnp

    import livens as lv
    from livens.engine.native import build

    p = lv.examples.load("pendulum-3d")
    F = lv.flow(p, "VI-S", h=0.01, n_steps=5)
    q0, v0 = jnp.asarray(p.q0), jnp.asarray(p.v0)
    assert np.all(np.isfinite(np.asarray(F(q0, v0).q)))
    build.interrupt()
    try:
        with pytest.raises(Exception, match="interrupted"):
            F(q0, v0)
    finally:
        build.resume()
    assert np.all(np.isfinite(np.asarray(F(q0, v0).q)))
