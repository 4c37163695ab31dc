"""A finding on ``livens-em`` with a configuration-dependent mass matrix: [KB23] eq 28a and 28c fix only
the averages v^{n+1/2} and p^{n+1/2} of the nodal velocities and momenta, so a two-step oscillation of
the nodal v^n is left to the partitioned discrete derivative of T(q, v), which with M(q) couples it to
the motion. On Andrews' squeezer ([HW96] §VII.7, livens' h = 1e-5) it is small over the test set's
interval and grows until Newton fails near t = 0.29, ten times that interval, while the averaged
velocity keeps (q^{n+1} - q^n)/h. The figures of docs/theory/livens.md come from this run."""

from __future__ import annotations

import numpy as np
import pytest

import livens as lv


def _sawtooth(v: np.ndarray, n: int) -> float:
    """max |v^n - (v^{n-1} + v^{n+1})/2|: the two-step oscillation of the nodal velocities at node n."""
    return float(np.abs(v[n] - 0.5 * (v[n - 1] + v[n + 1])).max())


def test_the_nodal_velocities_two_step_mode_grows_on_the_squeezer_until_newton_fails():
    problem = lv.examples.load("andrews-squeezer")
    h = problem.h
    with pytest.raises(lv.ConvergenceError) as err:
        lv.simulate(problem, "livens-em", h=h, t_end=0.3, progress=False)
    assert 25_000 < err.value.step < 30_000, err.value.step
    sol = err.value.solution
    q, v = np.asarray(sol.q), np.asarray(sol.v)
    assert _sawtooth(v, 1_000) < 0.1 and _sawtooth(v, 10_000) < 1.0
    assert _sawtooth(v, 28_000) > 1e3 > 10 * _sawtooth(v, 20_000)
    # what the scheme fixes holds throughout: the averaged velocity is the step's (28a)
    mean = 0.5 * (v[:-1] + v[1:])
    np.testing.assert_allclose(mean, np.diff(q, axis=0) / h, rtol=0, atol=1e-7)
    # the GGL energy-momentum scheme, whose velocity is no independent field, runs through t = 0.3
    ggl = lv.simulate(problem, "ggl-em", h=h, t_end=0.3, progress=False)
    assert ggl.n_steps == round(0.3 / h) and np.all(np.isfinite(np.asarray(ggl.q)))
