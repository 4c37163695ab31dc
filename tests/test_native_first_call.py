"""What the native backend does for a run's first call: the ``-O2`` library that nothing waits for
is compiled at a lower priority than the ``-O0`` one the first call runs. No timing is asserted
here: the benchmarks measure the time."""

from __future__ import annotations

import os
import stat

import jax.numpy as jnp
import numpy as np
import pytest

from livens.engine import native
from livens.engine.native import build as native_build
from livens.engine.native import cache as native_cache

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache directory under ``tmp_path``, checked anew (the process remembers its checks)."""
    monkeypatch.setenv("LIVENS_COMPILATION_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native_cache, "_CHECKED", {})
    monkeypatch.setattr(native_cache, "_WARNED", set())
    return tmp_path


def _logging_compiler(tmp_path, monkeypatch):
    """$CC set to a script that writes its own niceness and arguments to a log, then runs the real
    compiler: what each compile of a library ran at, as the system saw it."""
    real = native.compiler()
    log = tmp_path / "compiles.log"
    script = tmp_path / "cc.sh"
    script.write_text(f'#!/bin/sh\necho "$(nice) $*" >> "{log}"\nexec {real} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(script))
    return log


def _niceness_by_level(log) -> dict:
    """{optimization level: niceness} of the compiles of libraries in the log."""
    out = {}
    for line in log.read_text().splitlines():
        words = line.split()
        if ".so" in line and "-shared" in words:
            out[next(w for w in words if w.startswith("-O"))] = int(words[0])
    return out


def test_the_optimized_library_compiles_at_a_lower_priority_than_the_quick_one(fresh, monkeypatch):
    """A large source (every source counts as one here) compiles at -O0 with the process's priority,
    and its -O2 library, which nothing waits for, BACKGROUND_NICE lower; both libraries compute the
    same bits."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if own + native_cache.BACKGROUND_NICE > 19:
        pytest.skip("this process already runs at the lowest priority")
    log = _logging_compiler(fresh, monkeypatch)
    monkeypatch.setattr(native_build, "LARGE_SOURCE", 0)

    def f(x):
        return jnp.sin(x) * jnp.exp(-x * x) + jnp.sum(x * x) / 3.0

    x = np.linspace(-1.0, 1.0, 7)
    k = native.compile_function(f, x)
    quick = np.asarray(k(x))
    native.wait()
    assert k.level == "-O2"
    assert _niceness_by_level(log) == {"-O0": own, "-O2": own + native_cache.BACKGROUND_NICE}
    np.testing.assert_array_equal(np.asarray(k(x)), quick)


def test_a_compile_that_is_waited_for_keeps_the_priority(fresh, monkeypatch):
    """A source compiled once (a start step) or a small one is waited for: the process's priority."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    log = _logging_compiler(fresh, monkeypatch)
    k = native.compile_function(lambda x: x * x + 2.0, np.arange(3.0))
    np.testing.assert_array_equal(np.asarray(k(np.arange(3.0))), [2.0, 3.0, 6.0])
    levels = _niceness_by_level(log)
    assert levels and set(levels.values()) == {own}, levels
