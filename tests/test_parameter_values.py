"""One merge of a run's System parameters with the System's defaults (``livens.system.parameter_values``)
for lv.simulate and lv.flow: given the same parameters, both run the same equations, so a flow and a
simulation with the same tolerance give the same nodes bit for bit; the values flow traces equal
simulate's; and the refusals name the bad value and a fix that works."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.system import parameter_values

PARAMETERS = {"length": 1.0, "gravity": 7.3}  # the example's start is consistent for length 1


def _pendulum():
    problem = lv.examples.load("pendulum-3d")
    assert float(problem.system.parameters["gravity"]) != PARAMETERS["gravity"]
    return problem, np.asarray(problem.q0), np.asarray(problem.v0)


def test_flow_and_simulate_given_the_same_parameters_give_the_same_nodes_bit_for_bit():
    problem, q0, v0 = _pendulum()
    F = lv.flow(problem, "VI-S", h=0.01, n_steps=30)
    res = F(q0, v0, PARAMETERS)
    sol = lv.simulate(problem, "VI-S", h=0.01, t_end=0.3, tol=1e-12, parameters=PARAMETERS, progress=False)
    assert bool(res.converged) and sol.q.shape == (31, 3)
    np.testing.assert_array_equal(np.asarray(res.q), sol.q)
    # the parameters were used: the default gravity gives other nodes, in both
    default = lv.simulate(problem, "VI-S", h=0.01, t_end=0.3, tol=1e-12, progress=False)
    assert np.max(np.abs(default.q - sol.q)) > 1e-4
    assert np.max(np.abs(np.asarray(F(q0, v0).q) - np.asarray(res.q))) > 1e-4


def test_the_traced_values_are_the_concrete_ones():
    system = lv.examples.load("pendulum-3d").system
    concrete = parameter_values(system, {"gravity": 7.3})
    traced = parameter_values(system, {"gravity": 7.3}, traced=True)
    assert set(concrete) == set(traced) == {"length", "gravity"}
    for k in concrete:
        assert isinstance(traced[k], jax.Array) and traced[k].dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(traced[k]), concrete[k])
    assert float(concrete["gravity"]) == 7.3 and float(concrete["length"]) == float(system.parameters["length"])
    # under jax.jit the given value is a tracer: merged without being read
    out = jax.jit(lambda g: parameter_values(system, {"gravity": g}, traced=True)["gravity"] * 2.0)(3.0)
    assert float(out) == 6.0


def test_refusals_name_the_value_and_their_fix_works():
    problem, q0, v0 = _pendulum()
    F = lv.flow(problem, "VI-S", h=0.01, n_steps=3)
    with pytest.raises(ValueError, match=r"Unknown parameter 'gravty'\. Did you mean 'gravity'\?"):
        F(q0, v0, {"gravty": 7.3})
    with pytest.raises(ValueError, match=r"Parameter 'length' must have shape \(\)"):
        lv.simulate(problem, "VI-S", h=0.01, t_end=0.03, parameters={"length": [1.0, 2.0]}, progress=False)
    with pytest.raises(ValueError, match="parameters must be a dict name -> value; got list"):
        F(q0, v0, [7.3])
    bare = lv.System(mass_matrix=np.eye(3), potential=lambda q: q[2])
    with pytest.raises(ValueError, match=r"no parameters; got values for 'gravity'.* call without parameters"):
        parameter_values(bare, {"gravity": 1.0}, traced=True)
    assert parameter_values(bare, None, traced=True) is None and parameter_values(bare, None) is None
