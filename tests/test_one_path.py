"""A single run and an ensemble take one path through the driver (livens.driver.run): a native
single run is the ensembles' executor (NativeMembers) with one member, over the compiled loop an
ensemble's members run one by one, so an ensemble of one member is the single run to the bit and
compiles nothing more; XLA's single run dispatches its chunks ahead (Dispatched)."""

import importlib

import numpy as np
import pytest

import livens as lv
from livens.driver import executors
from livens.engine.native import compiler

native = pytest.mark.skipif(compiler() is None, reason="no C compiler: XLA runs every loop")


@native
def test_a_native_single_run_is_an_ensemble_of_one_member(host_loops):
    """Three chunks and a partial one of the 3D pendulum: the single run's executor is NativeMembers
    with one member; an ensemble of that one member runs the same compiled loop (no new one) and
    gives the same nodes, multipliers and iterations, to the bit, as the rescued steps (none)."""
    run = importlib.import_module("livens.driver.run")
    p = lv.examples.load("pendulum-3d")
    settings = dict(h=p.h, t_end=1600 * p.h, tol=1e-12, progress=False, backend="native")
    sol = lv.simulate(p, "VI-S", **settings)
    (ex,) = host_loops
    assert type(ex) is executors.NativeMembers and ex.members == 1 and ex.lanes == 0
    assert sol.meta["backend"] == "native" and sol.n_steps == 1600
    loops = len(run._LOOPS)
    ens = lv.simulate_ensemble(p, "VI-S", q0s=np.asarray(p.q0)[None], **settings)
    assert type(host_loops[1]) is executors.NativeMembers and host_loops[1].members == 1
    assert len(run._LOOPS) == loops  # the single run's compiled loop, not one of its own
    one = ens[0]
    for name in ("q", "p", "v", "lam", "newton_iterations", "newton_residual"):
        np.testing.assert_array_equal(getattr(one, name), getattr(sol, name), err_msg=name)
    assert sol.meta["rescued_steps"] == [] and ens.meta["rescued_steps"] == {}


@native
def test_a_native_single_run_keeps_the_continuation_of_its_last_node(host_loops):
    """The member's state and predictor history after the last chunk are those the run stores for a
    resume: the continuation from the stopped run's last node takes the whole run's steps, to the bit."""
    p = lv.examples.load("pendulum-3d")
    settings = dict(h=p.h, tol=1e-12, progress=False, backend="native", chunk=100)
    whole = lv.simulate(p, "VI-S", t_end=450 * p.h, **settings)
    first = lv.simulate(p, "VI-S", t_end=250 * p.h, **settings)
    assert first.meta["guess_history"]["step"] == 250
    rest = lv.simulate(p, "VI-S", t_end=450 * p.h, resume=first, **settings)
    assert len(host_loops) == 3 and all(type(ex) is executors.NativeMembers for ex in host_loops)
    np.testing.assert_array_equal(rest.q, whole.q[250:])
    np.testing.assert_array_equal(rest.lam, whole.lam[250:])


def test_an_xla_single_run_dispatches_its_chunks_ahead(host_loops):
    """With XLA, the single run's executor is Dispatched (one member's program); its times add up."""
    p = lv.examples.load("pendulum-3d")
    sol = lv.simulate(p, "VI-S", t_end=30 * p.h, chunk=8, progress=False, backend="xla")
    (ex,) = host_loops
    assert type(ex) is executors.Dispatched and ex.members == 1
    assert sol.meta["backend"] == "xla" and sol.n_steps == 30
    m = sol.meta
    assert m["wall_time"] == pytest.approx(m["compile_time"] + m["stepping_time"], rel=1e-12)


def test_an_ensembles_start_that_fails_names_the_first_member_whose_start_failed():
    """The start of B members, compiled and finished as a single run's is: at h = 0.5 the pendulum's
    start (SLO09 eq 15) has no solution Newton finds from these states, as the single run's has not;
    the error names member 0 and the count, with its residual above the start's tolerance."""
    p = lv.examples.load("pendulum-3d")
    with pytest.raises(ValueError, match=r"did not converge: residual"):
        lv.simulate(p, "vi-lagrange", h=0.5, t_end=1.5, progress=False)
    v0s = np.asarray(p.v0)[None].repeat(3, 0) * np.array([[1.0], [1.01], [1.02]])
    with pytest.raises(ValueError, match=r"vi-lagrange: the start step \(SLO09 eq 15\) did not converge") as caught:
        lv.simulate_ensemble(p, "vi-lagrange", v0s=v0s, h=0.5, t_end=1.5, progress=False)
    message = str(caught.value)
    assert "for member 0 (3 member(s) in all)" in message
    assert float(message.split("residual ")[1].split(" ")[0]) > 1e-9
