"""The results of simulate, simulate_ensemble and flow answer under the same names
(:mod:`livens.run_status`): the same failed step, status and iterations for the same run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv

H, STEPS = 0.01, 60


def _falling_pendulum(nan_below: bool = True):
    """A spherical pendulum released from the horizontal; with ``nan_below`` its potential's gradient
    is NaN below q3 = -0.5, and Newton's iteration fails in the step that crosses it."""

    def potential(q):
        return 9.81 * q[2] + (0.0 * jnp.sqrt(q[2] + 0.5) if nan_below else 0.0)

    system = lv.System(np.eye(3), potential=potential, constraints=lambda q: jnp.array([0.5 * (q @ q - 1.0)]))
    return lv.Problem(system, q0=np.array([1.0, 0.0, 0.0]), v0=np.zeros(3), h=H, t_end=STEPS * H)


def _first_node_below(q3_of_nodes) -> int:
    """The first node below q3 = -0.5 in the run without the NaN: the step ending there or the one
    starting there (a scheme that evaluates grad V at the step's start) is the first to meet it."""
    return int(np.argmax(np.asarray(q3_of_nodes) < -0.5))


def test_simulate_ensemble_and_flow_name_the_same_failed_step():
    problem = _falling_pendulum()
    kw = dict(h=H, tol=1e-10, max_iter=20, backend="xla")
    with pytest.raises(lv.ConvergenceError) as err:
        lv.simulate(problem, "ggl-vi", t_end=STEPS * H, rescue=False, progress=False, **kw)
    kept = err.value.solution
    k = err.value.step
    plain = lv.simulate(_falling_pendulum(nan_below=False), "ggl-vi", t_end=STEPS * H, progress=False, **kw)
    assert 0 < k and k in (_first_node_below(plain.q[:, 2]) - 1, _first_node_below(plain.q[:, 2]))
    assert kept.failed_step == k and kept.status is lv.Status.STEP_FAILED and not kept.converged
    assert len(kept.iterations) == k and kept.iterations is kept.newton_iterations
    assert plain.failed_step == -1 and plain.status is lv.Status.SUCCESS and plain.converged

    F = lv.flow(problem, "ggl-vi", n_steps=STEPS, **kw)
    with pytest.raises(lv.ConvergenceError) as flow_err:  # a concrete call checks its result
        F(problem.q0, problem.v0)
    assert flow_err.value.step == k
    result = jax.jit(F)(problem.q0, problem.v0)  # a compiled call returns it
    assert int(result.failed_step) == k and lv.Status.of(result.status) is lv.Status.STEP_FAILED
    assert not bool(result.converged)
    np.testing.assert_array_equal(np.asarray(result.iterations)[:k], kept.iterations)

    q0s = np.array([problem.q0, [0.0, 0.0, 1.0]])  # the second member rests at the upper equilibrium
    with pytest.warns(RuntimeWarning, match=rf"member 0 in step {k + 1}, counted from 1"):
        ens = lv.simulate_ensemble(
            problem, "ggl-vi", q0s=q0s, v0s=np.zeros((2, 3)), t_end=STEPS * H, rescue=False, **kw
        )
    np.testing.assert_array_equal(ens.failed_step, [k, -1])
    np.testing.assert_array_equal(ens.status, [lv.Status.STEP_FAILED, lv.Status.SUCCESS])
    np.testing.assert_array_equal(ens.converged, [False, True])
    assert ens[0].failed_step == k and ens[0].status is lv.Status.STEP_FAILED
    assert ens[1].converged and ens.iterations is ens.newton_iterations
    np.testing.assert_array_equal(ens[0].iterations, kept.iterations)


def test_status_codes_are_the_flow_failure_codes():
    from livens.driver import flow_failure

    assert (flow_failure.NONE, flow_failure.START, flow_failure.SCHEME_START, flow_failure.STEP) == (
        lv.Status.SUCCESS,
        lv.Status.START_FAILED,
        lv.Status.SCHEME_START_FAILED,
        lv.Status.STEP_FAILED,
    )
    assert lv.Status.of(flow_failure.SYMMETRY + 2) is lv.Status.SYMMETRY_BROKEN
