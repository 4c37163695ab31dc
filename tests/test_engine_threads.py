"""The BLAS threads of livens' compiled programs (livens.engine.threads).

XLA's CPU programs call SciPy's OpenBLAS for LU factorizations and triangular solves; with its
threads spread over every core, a time loop of small factorizations slowed down a hundredfold on
a loaded machine. Every driver therefore runs its programs on one BLAS thread: checked here from
inside a running time loop, and by the cost of the three-bar swing's loop against its own parts
while other processes keep every core busy.
"""

import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import serial_blas
from livens.engine.threads import blas_threads, current_blas_threads

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.swing import vi_lagrange_step_inputs  # noqa: E402  (the step the benchmark profiles)


def test_serial_blas_limits_and_restores(monkeypatch):
    before = current_blas_threads()
    assert before, "no BLAS library found by threadpoolctl"
    with serial_blas():
        assert current_blas_threads() == [1] * len(before)
        with serial_blas():  # nested: one limit
            assert current_blas_threads() == [1] * len(before)
        assert current_blas_threads() == [1] * len(before)
    assert current_blas_threads() == before
    monkeypatch.setenv("LIVENS_BLAS_THREADS", "0")  # off: the libraries are left as they are
    assert blas_threads() is None
    with serial_blas():
        assert current_blas_threads() == before
    monkeypatch.setenv("LIVENS_BLAS_THREADS", "two")
    with pytest.raises(ValueError, match="LIVENS_BLAS_THREADS"):
        blas_threads()


def _recording_problem(seen):
    """A pendulum whose potential records the BLAS thread counts while the time loop runs."""

    def record(x):
        seen.append(current_blas_threads())

    def V(q):
        jax.debug.callback(record, jax.lax.stop_gradient(q[0]))
        return 9.81 * q[2]

    system = lv.System(mass_matrix=jnp.eye(3), potential=V, constraints=lambda q: jnp.array([0.5 * (q @ q - 1.0)]))
    return lv.Problem(system, q0=[1.0, 0.0, 0.0], v0=[0.0, 1.0, 0.0], h=0.01, t_end=0.05)


@pytest.mark.parametrize("driver", ["simulate", "ensemble", "flow"])
def test_every_driver_runs_on_one_blas_thread(driver):
    seen = []
    problem = _recording_problem(seen)
    seen.clear()  # the Problem's checks evaluated the potential outside any run
    before = current_blas_threads()
    if driver == "simulate":
        lv.simulate(problem, "EM", backend="xla", progress=False)
    elif driver == "ensemble":
        lv.simulate_ensemble(problem, "EM", q0s=np.array([problem.q0] * 2), backend="xla")
    else:
        F = lv.flow(problem, "EM", n_steps=5)
        F(jnp.asarray(problem.q0), jnp.asarray(problem.v0))
    assert seen, "the potential was never evaluated at run time"
    assert all(counts and set(counts) == {1} for counts in seen), seen[:3]
    assert current_blas_threads() == before  # restored afterwards


def _swing_parts_ms(problem, repeats=20):
    """The parts of one vi-lagrange step of the swing, each compiled alone, best of ``repeats``
    (ms): the residual (SLO09 eq 14), its Newton matrix with its solve, the update."""
    sch, mech, s, h, x = vi_lagrange_step_inputs(problem)
    d, m = mech.d, mech.m
    R = jax.jit(lambda x, s: sch.residual(sch.unpack(x, d, m), s, h, 0.0, {}, mech))

    def newton_step(x, r, s):
        from livens.solvers import tangent_operator

        return tangent_operator(sch, sch.unpack(x, d, m), s, h, 0.0, {}, mech).solve(r)

    N = jax.jit(newton_step)
    U = jax.jit(lambda x, s: sch.update(sch.unpack(x, d, m), s, h, 0.0, {}, mech))
    r = R(x, s)
    total = 0.0
    for fn, args in ((R, (x, s)), (N, (x, r, s)), (U, (x, s))):
        jax.block_until_ready(fn(*args))
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            best = min(best, time.perf_counter() - t0)
        total += best
    return 1e3 * total


def test_swing_loop_costs_its_parts_on_a_busy_machine():
    """The three-bar swing's time loop (10 elements, vi-lagrange) while one busy process per core
    competes with it: its cost per Newton iteration stays within a few times the sum of its
    parts measured alone (residual, Newton matrix and solve, update). The competing processes
    take their share of the cores (about half of them here), never the hundredfold that the
    spinning BLAS threads cost (88 ms per step against 0.9 ms)."""
    problem = lv.examples.load("three-bar-swing")
    lv.simulate(problem, "vi-lagrange", t_end=2 * problem.h, progress=False)  # compiled quickly
    lv.engine.optimize()  # the loop measured below runs optimized from its start
    parts = _swing_parts_ms(problem)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.2)
        t0 = time.perf_counter()
        sol = lv.simulate(problem, "vi-lagrange", t_end=300 * problem.h, progress=False)
        wall = time.perf_counter() - t0
    finally:
        for p in hogs:
            p.kill()
    per_iteration = 1e3 * wall / float(sol.newton_iterations.sum())
    share = 1.0 + len(hogs) / (os.cpu_count() or 2)  # the cores' share the loop may lose to the others
    assert per_iteration <= 3.0 * share * parts, (per_iteration, parts)


def test_the_plain_backend_runs_without_the_engine_and_agrees():
    """backend="plain": jax.jit with XLA's defaults, nothing of the engine (no C, no tiers, no
    rewriting): the same run as the engine's to round-off and the Newton tolerance."""
    problem = lv.examples.load("heavy-top")
    plain = lv.simulate(problem, "VI-S", t_end=0.2, backend="plain", progress=False)
    engine_run = lv.simulate(problem, "VI-S", t_end=0.2, progress=False)
    assert plain.meta["backend"] == "xla"
    assert np.max(np.abs(plain.q - engine_run.q)) <= 1e-10
