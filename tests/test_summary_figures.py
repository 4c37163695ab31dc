"""The figures of Solution.summary and repr: times that add up, a rate that is never NaN for a run
that took steps, and counts of the steps computed beside the nodes kept.

Checked: wall time = compile time + stepping time in the metadata and the summary; the time loop
is compiled before the first step, so that a fresh system's compile lands in the compile time and
not in the stepping time (for schemes with and without a start step); "steps/s" is the steps over
the stepping time, with a note only where the stepping took under SHORT_RUN seconds; a thinned run
(save_every) states the steps computed and the nodes kept (steps_computed, nodes_kept, the repr,
the summary) while n_steps counts the kept intervals; a file of an older livens, without the
stepping time, keeps its former rate (that of the chunks after the first).
"""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.solution import SHORT_RUN


def _fresh_pendulum():
    """A pendulum of its own functions: its programs are compiled anew in this process."""
    system = lv.System(
        mass_matrix=np.eye(3),
        potential=lambda q: 9.81 * q[2],
        constraints=lambda q: jnp.array([0.5 * (q @ q - 1.0)]),
    )
    return lv.Problem(system, q0=[1.0, 0.0, 0.0], v0=[0.0, 1.0, 0.0])


@pytest.mark.parametrize("scheme", ["EM", "vi-lagrange"])  # without and with a start step
def test_the_times_add_up_and_the_compiles_come_before_the_first_step(scheme):
    sol = lv.simulate(_fresh_pendulum(), scheme, h=0.01, t_end=0.1, progress=False)
    m = sol.meta
    assert m["wall_time"] == pytest.approx(m["compile_time"] + m["stepping_time"], rel=1e-12)
    assert 0 < m["stepping_time"] < 0.5 * m["compile_time"]  # a new system: seconds of compiles, ms of steps
    s = sol.summary()
    assert s["wall time [s]"] == m["wall_time"] and s["compile time [s]"] == m["compile_time"]
    assert s["stepping time [s]"] == m["stepping_time"]
    assert s["compile time [s]"] <= s["wall time [s]"]
    assert s["steps"] == 10 and s["steps/s"] == pytest.approx(10 / m["stepping_time"])
    assert math.isfinite(s["steps/s"])


def test_the_rate_of_a_short_run_is_noted_and_that_of_a_longer_one_is_not():
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=0.01, t_end=0.5, progress=False)

    def timed(stepping):
        meta = {**sol.meta, "stepping_time": stepping, "compile_time": 1.0, "wall_time": 1.0 + stepping}
        return dataclasses.replace(sol, meta=meta).summary()

    short = timed(0.5 * SHORT_RUN)
    assert short["steps/s"] == pytest.approx(50 / (0.5 * SHORT_RUN))
    assert short["steps/s note"].startswith("a short run (50 steps in 50 ms)")
    long = timed(2.0)
    assert long["steps/s"] == pytest.approx(25.0) and "steps/s note" not in long
    # a continued run is timed for the steps of its continuation
    resumed = dataclasses.replace(sol, meta={**sol.meta, "stepping_time": 2.0, "resumed": {"steps": 30}})
    assert resumed.summary()["steps/s"] == pytest.approx(10.0)


def test_a_thinned_run_counts_the_steps_computed_and_the_nodes_kept():
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=0.001, t_end=2.0, save_every=8, progress=False)
    assert sol.steps_computed == 2000 and sol.nodes_kept == 251 and sol.n_steps == 250
    assert "steps_computed=2000, nodes_kept=251, save_every=8" in repr(sol)
    s = sol.summary()
    assert s["steps"] == 2000 and s["nodes kept"] == 251
    assert s["steps/s"] == pytest.approx(2000 / s["stepping time [s]"])


def test_a_file_of_an_older_livens_keeps_its_former_rate():
    """Without a stepping time the compile time included the first chunk: the rate is that of the
    other chunks, NaN where every step ran in the first."""
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=0.01, t_end=0.5, progress=False)
    old = {k: v for k, v in sol.meta.items() if k != "stepping_time"}
    s = dataclasses.replace(sol, meta={**old, "wall_time": 3.0, "compile_time": 1.0, "chunk": 10}).summary()
    assert "stepping time [s]" not in s and s["steps/s"] == pytest.approx(20.0)
    s = dataclasses.replace(sol, meta={**old, "chunk": 512}).summary()
    assert math.isnan(s["steps/s"])
