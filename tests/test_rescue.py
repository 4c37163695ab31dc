"""The rescue of a failed Newton step: damped least-squares Newton
(:func:`livens.solvers.newton.damped_newton`) retries a step whose plain Newton iteration failed.

Two failures it must cure, both found while reproducing the papers: EM on the four-particle
system at h = 0.675 (KBS23b §6.3, Fig. 33: plain Newton from the simple guess diverges at step 120,
t = 81) and VI-S on the damped double four-bar at h = 1e-3 (its Newton matrix is singular to
working precision at t = 1.342, where the constraint Jacobian loses rank).
"""

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.solvers.newton import damped_newton, newton


def test_damped_newton_converges_where_plain_newton_diverges():
    # arctan: plain Newton from |x0| > 1.39 diverges; Armijo backtracking brings it home
    R = lambda x: jnp.arctan(x)  # noqa: E731
    x0 = jnp.array([3.0])
    plain = newton(R, x0, 1e-12, 40)
    assert not bool(plain.converged)
    res = damped_newton(R, x0, 1e-12, 40)
    assert bool(res.converged) and abs(float(res.x[0])) <= 1e-12


def test_damped_newton_solves_a_consistent_singular_system():
    # a rank-deficient Jacobian everywhere (the second equation repeats the first): LU fails,
    # the truncated least-squares step finds the root
    R = lambda x: jnp.array([x[0] ** 3 + x[1] - 2.0, 2.0 * (x[0] ** 3 + x[1] - 2.0)])  # noqa: E731
    x0 = jnp.array([0.5, 0.5])
    assert not bool(newton(R, x0, 1e-12, 40).converged)
    res = damped_newton(R, x0, 1e-12, 40)
    assert bool(res.converged)
    assert float(jnp.max(jnp.abs(R(res.x)))) <= 1e-12


@pytest.fixture(scope="module")
def four_particle():
    return lv.examples.load("four-particle")


def test_em_at_h_0675_is_rescued_and_conserves_energy(four_particle):
    """KBS23b §6.3: "EM keeps stable even for quite large time steps of h = 0.675"."""
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(four_particle, "EM", h=0.675, t_end=120.0, tol=1e-11, rescue=False)
    first = info.value.step
    sol = lv.simulate(four_particle, "EM", h=0.675, t_end=120.0, tol=1e-11)
    rescued = sol.meta["rescued_steps"]
    assert rescued and rescued[0] == first
    E = sol.energy()["total"]
    assert np.max(np.abs(E - E[0])) <= 1e-9 * abs(E[0])
    for name, r in sol.enforced_residuals().items():
        assert np.max(np.abs(r)) <= 1e-10, name
    # a rescued step counts the iterations of both attempts
    assert np.all(sol.newton_iterations[rescued] > 40)
    assert sol.summary()["steps rescued by damped Newton"] == len(rescued)


def test_four_bar_through_its_singular_position_is_rescued(tmp_path):
    problem = lv.examples.load("double-four-bar", dampers=True)
    with pytest.raises(lv.ConvergenceError):
        lv.simulate(problem, "VI-S", h=1e-3, t_end=1.4, rescue=False)
    sol = lv.simulate(problem, "VI-S", h=1e-3, t_end=1.4, out=tmp_path / "fb.nc")
    assert sol.n_steps == 1400 and sol.meta["rescued_steps"]
    for name, r in sol.enforced_residuals().items():
        assert np.max(np.abs(r)) <= 1e-9, name
    assert lv.load(tmp_path / "fb.nc").meta["rescued_steps"] == sol.meta["rescued_steps"]
