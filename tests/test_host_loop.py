"""One host loop for every kind of run (livens.driver.host.run_host_loop): the native forward run
of lv.flow goes through it, with the executor of a native ensemble's members (the run its one
member, keeping the chunks' starting states) and a recorder of every step; its nodes are those of
lv.simulate's run of the same steps, to the bit, and a failed step is reported with the step and
residual that lv.simulate reports; an executor that takes no step and fails none ends the loop as
interrupted instead of spinning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver import Raise, executors, host
from livens.driver.native_flow import CHUNK
from livens.engine.native import compiler

native = pytest.mark.skipif(compiler() is None, reason="no C compiler: lv.flow's forward run is XLA's scan")


@native
def test_the_native_forward_run_of_flow_goes_through_the_host_loop(host_loops):
    """Three chunks (the last one partial); its nodes are lv.simulate's, to the bit (the same steps
    from the same state; simulate's host loop, with the rescue off, over its own kernel)."""
    p = lv.examples.load("pendulum-3d")
    n = 2 * CHUNK + 10
    F = lv.flow(p, "VI-S", n_steps=n, tol=1e-12)
    res = F(jnp.asarray(p.q0), jnp.asarray(p.v0))
    assert [type(ex) for ex in host_loops] == [executors.NativeMembers]  # the ensembles' executor
    assert host_loops[0].members == 1 and host_loops[0].starts is not None  # and the chunks' starting states
    sol = lv.simulate(p, "VI-S", h=p.h, t_end=n * p.h, tol=1e-12, rescue=False, progress=False)
    assert sol.meta["backend"] == "native"
    assert bool(res.converged) and res.q.shape == sol.q.shape == (n + 1, 3)
    np.testing.assert_array_equal(np.asarray(res.q), sol.q)
    np.testing.assert_array_equal(np.asarray(res.p), sol.p)
    np.testing.assert_array_equal(np.asarray(res.iterations), sol.iterations)


@native
def test_a_failed_step_of_the_native_flow_is_reported_as_simulate_reports_it(host_loops):
    """The pendulum released near its top with VI-S and h = 0.15: a step fails. lv.flow (concrete
    call: it raises) names the step, its time and its residual as lv.simulate does (rescue off, as
    flow has none), and the result of a traced call has that residual at that step."""
    h, n = 0.15, 20
    p = lv.examples.load("pendulum-3d").replace(q0=[0.05, 0.0, 0.9987492177719089], v0=[0.0, 1.0, 0.0])
    with pytest.raises(lv.ConvergenceError) as by_simulate:
        lv.simulate(p, "VI-S", h=h, t_end=n * h, tol=1e-12, rescue=False, progress=False)
    F = lv.flow(p, "VI-S", h=h, n_steps=n, tol=1e-12)
    q0, v0 = jnp.asarray(p.q0), jnp.asarray(p.v0)
    with pytest.raises(lv.ConvergenceError) as by_flow:
        F(q0, v0)
    assert isinstance(host_loops[-1], executors.NativeMembers)
    s, f = by_simulate.value, by_flow.value
    assert 0 < s.step < n
    assert (f.step, f.time, f.residual) == (s.step, s.time, s.residual)
    res = jax.jit(F)(q0, v0)  # traced: the result, no error
    assert not bool(res.converged) and int(res.failed_step) == s.step
    assert float(np.asarray(res.residual)[s.step]) == s.residual
    assert np.all(np.isnan(np.asarray(res.residual)[s.step + 1 :]))


class _Stalled:
    """An executor whose kernel returns at once without a step (its stop flag is up)."""

    members = 1
    calls = 0

    def advance(self, n, n_stop):
        self.calls += 1
        if self.calls > 3:
            raise AssertionError("the host loop called a stalled executor again and again")
        return n.copy(), np.zeros(1, bool), np.zeros((1, 1, 1))

    def discard(self):
        pass


class _Layout:
    def unpack(self, rows):
        return {"ok": rows[..., 0] == 0}


class _Nothing:
    def record(self, *args):
        raise AssertionError("nothing to record")

    def flush(self, done, final=False):
        pass


def test_an_executor_that_takes_no_step_ends_the_loop_as_interrupted():
    ex = _Stalled()
    out = host.run_host_loop(None, ex, _Layout(), _Nothing(), np.zeros(1, np.int64), np.array([10]), policy=Raise())
    assert out.interrupted and ex.calls == 1 and int(out.n[0]) == 0 and not out.failed[0]
