"""The four-particle system (KBS23b §6.3): EM against Gonzalez's EM-G (Figs 23-27), and the GGL
variational integrators' constraints and momentum maps on it."""

import numpy as np
import pytest

import livens as lv

TOL = 1e-12
PROBLEM = lv.examples.load("four-particle")
_RUNS: dict = {}


def run(scheme, t_end=10.0, **params):
    key = (scheme, t_end, tuple(sorted(params.items())))
    if key not in _RUNS:
        _RUNS[key] = lv.simulate(PROBLEM, scheme, h=0.01, t_end=t_end, tol=TOL, **params)
    return _RUNS[key]


def phase_scale(sol):
    return float(np.max(np.sum(np.abs(sol.q), axis=1) + np.sum(np.abs(sol.p), axis=1)))


def energy_scale(sol):
    E = sol.energy()
    return float(np.max(E["kinetic"]) + np.max(np.abs(E["potential"])))


def test_example_data():
    """Masses, bars, springs at rest length, consistent initial state (KBS23b eq 116-117, 127)."""
    sys_ = PROBLEM.system
    np.testing.assert_allclose(np.diag(sys_.mass_matrix), np.repeat([1.0, 3.0, 2.3, 1.7], 3))
    assert PROBLEM.h == 0.01 and PROBLEM.t_end == 10.0
    pi, pots = sys_.invariants
    np.testing.assert_allclose(pi(PROBLEM.q0), [1.0, 1.0])  # springs 1-3, 2-4 at rest
    assert float(sys_.potential(PROBLEM.q0)) == 0.0
    np.testing.assert_allclose(sys_.constraints(PROBLEM.q0), [0.0, 0.0])
    np.testing.assert_allclose(PROBLEM.p0[9:12], [0.0, 0.0, 2.0])
    # V declared through the invariants equals the spring potential of eq 116 (springs 1-3, 2-4)
    q = np.random.default_rng(1).normal(size=12)
    d13, d24 = q[6:9] - q[0:3], q[9:12] - q[3:6]
    V = 25.0 * (d13 @ d13 - 1) ** 2 + 250.0 * (d24 @ d24 - 1) ** 2
    np.testing.assert_allclose(float(sys_.potential(q)), V, rtol=1e-13)
    np.testing.assert_allclose(float(np.sum(pots(pi(q)))), V, rtol=1e-13)
    assert [s.name for s in PROBLEM.symmetries] == ["L1", "L2", "L3", "J1", "J2", "J3"]


def test_em_energy_and_momentum_every_step():
    """EM with h = 0.01, T = 10 (KBS23b Figs 24-27): energy E = p.v - L and all six momentum maps
    (linear and angular momentum) conserved at every step including the first, both constraints
    at the nodes."""
    sol = run("EM")
    assert sol.n_steps == 1000
    E = sol.energy()["livens"]
    dE = np.abs(np.diff(E))
    assert dE[0] <= 1e-12 * energy_scale(sol)  # the first step, where pi_1 barely changes
    assert np.max(dE) <= 1e-12 * energy_scale(sol)
    assert np.max(np.abs(E - E[0])) <= 1e-11 * energy_scale(sol)
    bound = 5 * TOL * phase_scale(sol)
    for name, J in sol.momentum_maps().items():
        assert np.max(np.abs(np.diff(J))) <= bound, name
    # the motion is not trivial: the springs store energy and the momentum maps are not all zero
    assert np.max(np.abs(sol.energy()["potential"])) > 1e-3
    assert abs(sol.momentum_maps()["J1"][0]) > 1.0
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 2 * TOL
    assert np.max(np.abs(sol.constraint_residual("velocity"))) <= 2 * TOL


def test_em_g_conserves_energy_and_momentum_but_not_velocity_constraint():
    """Gonzalez's EM-G conserves H and the momentum maps and meets g(q) = 0, but not the secondary
    constraint G(q) M^-1 p = 0 (KBS23b Fig 23), which EM meets (Fig 24)."""
    sol = run("EM-G")
    E = sol.energy()["total"]
    assert np.max(np.abs(np.diff(E))) <= 1e-12 * energy_scale(sol)
    bound = 5 * TOL * phase_scale(sol)
    for name, J in sol.momentum_maps().items():
        assert np.max(np.abs(np.diff(J))) <= bound, name
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 2 * TOL
    gv = np.max(np.abs(sol.constraint_residual("velocity")))
    assert gv > 1e-7 > 1e4 * TOL
    em = run("EM")
    assert np.max(np.abs(em.constraint_residual("velocity"))) <= 2 * TOL
    # both second order and close to each other (KBS23b §6.3: "comparable ... accuracy")
    assert np.max(np.abs(sol.q[:101] - em.q[:101])) < 1e-3


@pytest.mark.parametrize(
    "scheme", [pytest.param("VI-S", marks=pytest.mark.slow), "VI-A", pytest.param("VI-B", marks=pytest.mark.slow)]
)
def test_variational_integrators_on_four_particle(scheme):
    """VI-S, VI-A, VI-B meet their own constraints to the Newton tolerance and conserve the six
    momentum maps per step to round-off (KBS23b App. A.6-A.7). (VI-S and VI-B are checked on the
    pendulum and the heavy top by default; here with -m slow, to save compilations.)"""
    sol = run(scheme, t_end=1.0)
    for name, r in sol.enforced_residuals().items():
        assert np.max(np.abs(r)) <= 2 * TOL + 1e-14, name
    bound = 5 * TOL * phase_scale(sol)
    for name, J in sol.momentum_maps().items():
        assert np.max(np.abs(np.diff(J))) <= bound, name


def test_vi_a_nodal_constraints_not_met():
    sol = run("VI-A", t_end=1.0)
    assert np.max(np.abs(sol.constraint_residual("position"))) > 1e-6
