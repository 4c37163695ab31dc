"""What the native backend does for a run's first call: the ``-O2`` library that nothing waits for
is compiled at a lower priority than the ``-O0`` one the first call runs. No timing is asserted
here: the benchmarks measure the time."""

from __future__ import annotations

import os
import platform
import stat

import jax
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


def _eqn(fn, *args):
    """The one equation of ``fn``'s jaxpr that is not a conversion of its arguments."""
    eqns = [e for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns if e.primitive.name != "convert_element_type"]
    return eqns[-1]


def _by_jax(eqn, vals):
    with jax.ensure_compile_time_eval():
        out = eqn.primitive.bind(*vals, **eqn.params)
    return [np.asarray(o) for o in (out if eqn.primitive.multiple_results else [out])]


RNG = np.random.default_rng(7)
ROWS = np.array([[0.0, 2.5e-3, 0.0], [0.0, 0.0, 0.0], [-7.25, 0.0, 0.0]])  # at most one term per row
EXACT = [
    ("abs", lambda x: jnp.abs(x), np.array([-1.5, 0.0, -0.0, np.inf, -np.inf, 3.0e-310])),
    ("max", lambda x: jnp.max(x, axis=1), RNG.standard_normal((4, 5))),
    ("min", lambda x: jnp.min(x), RNG.standard_normal((3, 2))),
    ("one-term sums", lambda x: jnp.sum(x, axis=1), ROWS),
    ("integer sums", lambda x: jnp.sum(x), np.array([[3.0, -4.0, 1.0e15], [2.0, 7.0, -9.0]])),
    ("lu 1x1", lambda x: jax.lax.linalg.lu(x), np.array([[0.0]])),
    ("lu of 1x1 blocks", lambda x: jax.lax.linalg.lu(x), np.array([[[2.0]], [[-0.5]]])),
    ("stop_gradient", lambda x: jax.lax.stop_gradient(x), np.array([1.0, -0.0])),
]


@pytest.mark.parametrize("case", EXACT, ids=[c[0] for c in EXACT])
def test_the_folds_by_numpy_give_xlas_bits(case):
    """Each fold of a floating-point primitive by NumPy gives, bit for bit, what JAX computes."""
    from livens.engine.native.folding import _np_elementwise

    _, fn, x = case
    eqn = _eqn(fn, x)
    ours = _np_elementwise(eqn.primitive.name, [x], eqn.params)
    assert ours is not None, eqn.primitive.name
    for a, b in zip(ours, _by_jax(eqn, [x])):
        a = np.asarray(a, b.dtype)
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        if np.issubdtype(b.dtype, np.floating):
            np.testing.assert_array_equal(np.signbit(a), np.signbit(b))


NOT_EXACT = [
    ("sum of fractions", lambda x: jnp.sum(x), RNG.standard_normal(7)),  # the order decides the round-off
    ("sum with a negative zero", lambda x: jnp.sum(x), np.array([-0.0, 0.0])),
    ("max with a NaN", lambda x: jnp.max(x), np.array([1.0, np.nan])),
    ("max of zeros of both signs", lambda x: jnp.max(x), np.array([0.0, -0.0])),
    ("a large integer sum", lambda x: jnp.sum(x), np.array([2.0**52, 1.0, 1.0])),
    ("lu 2x2", lambda x: jax.lax.linalg.lu(x), np.array([[1.0, 2.0], [3.0, 4.0]])),
]


@pytest.mark.parametrize("case", NOT_EXACT, ids=[c[0] for c in NOT_EXACT])
def test_no_fold_by_numpy_where_the_order_of_operations_could_change_a_bit(case):
    """Where XLA's order of operations could give other bits than NumPy's, the fold is left to JAX."""
    from livens.engine.native.folding import _np_elementwise

    _, fn, x = case
    eqn = _eqn(fn, x)
    assert _np_elementwise(eqn.primitive.name, [x], eqn.params) is None


def test_a_kernel_flushes_subnormals_as_xla_does_and_restores_the_control_register():
    """The kernel reads subnormal operands as zero and flushes subnormal results (as XLA on the CPU),
    and the process computes subnormals again after the call (the control register restored)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        pytest.skip("the flush is set on x86 only")

    def f(x):
        return x * 0.5, x + 1e-300 * 1e-10

    x = np.array([1e-310, 3.0e-308, 1.0])
    k = native.compile_function(f, x)
    ours = [np.asarray(o) for o in k(x)]
    xla = [np.asarray(o) for o in jax.jit(f)(x)]
    for a, b in zip(ours, xla):
        np.testing.assert_array_equal(a, b)
    assert ours[0][0] == 0.0 and ours[0][1] == 0.0  # a subnormal operand, a subnormal result
    assert np.array([1e-310])[0] * 0.5 != 0.0  # NumPy, after the call: subnormals again


def test_a_primitive_without_operands_is_left_to_jax():
    """A known primitive without operands (nothing to read a dtype from) is not folded by NumPy."""
    from livens.engine.native.folding import _np_elementwise

    assert _np_elementwise("create_token", [], {}) is None
