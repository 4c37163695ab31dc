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
