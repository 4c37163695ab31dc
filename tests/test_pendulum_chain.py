"""The scalable example pendulum-chain (N spherical pendulums in absolute coordinates).

Its small cases are systems of the papers in other coordinates: N = 1 is the 3D pendulum of
KBS23b §6.1, N = 2 the double spherical pendulum of SLO09 §4.1 (x1 = u1, x2 = u1 + u2). The GGL
schemes are covariant under this linear change of coordinates, so the discrete trajectories must
agree to the Newton tolerance. For larger N: consistent start, constraints at the nodes, the
momentum map J3 (KBS23b eq 98 for every body) conserved by VI-S, energy by EM (KBS23b eq 84).
"""

import numpy as np
import pytest

import livens as lv


def test_one_body_is_the_3d_pendulum():
    chain = lv.examples.load("pendulum-chain", n_bodies=1)
    pend = lv.examples.load("pendulum-3d")
    a = lv.simulate(chain, "VI-S", h=0.01, t_end=1.0, tol=1e-12)
    b = lv.simulate(pend, "VI-S", h=0.01, t_end=1.0, tol=1e-12)
    assert np.max(np.abs(a.q - b.q)) <= 1e-11


@pytest.mark.parametrize("scheme", ["VI-S", "EM"])
def test_two_bodies_are_the_double_spherical_pendulum_in_absolute_coordinates(scheme):
    chain = lv.examples.load("pendulum-chain", n_bodies=2, mass=(10.0, 5.0), length=(1.0, 1.5))
    rel = lv.examples.load("double-spherical-pendulum", m1=10.0, m2=5.0, l1=1.0, l2=1.5, gravity=9.81)
    np.testing.assert_allclose(chain.q0, np.concatenate([rel.q0[:3], rel.q0[:3] + rel.q0[3:]]), atol=1e-15)
    np.testing.assert_allclose(chain.v0, np.concatenate([rel.v0[:3], rel.v0[:3] + rel.v0[3:]]), atol=1e-15)
    a = lv.simulate(chain, scheme, h=0.01, t_end=1.5, tol=1e-12)
    b = lv.simulate(rel, scheme, h=0.01, t_end=1.5, tol=1e-12)
    x = np.concatenate([b.q[:, :3], b.q[:, :3] + b.q[:, 3:]], axis=1)
    assert np.max(np.abs(a.q - x)) <= 1e-10
    # momenta are covectors: p_u = A^T p_x, i.e. p_u1 = p_x1 + p_x2, p_u2 = p_x2
    pu = np.concatenate([a.p[:, :3] + a.p[:, 3:], a.p[:, 3:]], axis=1)
    assert np.max(np.abs(pu - b.p)) <= 1e-9


def test_chain_start_is_consistent_and_vi_s_keeps_constraints_and_momentum():
    n = 6
    problem = lv.examples.load("pendulum-chain", n_bodies=n)
    assert problem.d == 3 * n
    mech = lv.mechanics.mechanics(problem.system, problem.q0)
    assert mech.m == n
    assert np.max(np.abs(np.asarray(mech.g(problem.q0)))) <= 1e-14
    assert np.max(np.abs(np.asarray(mech.G(problem.q0)) @ problem.v0)) <= 1e-14
    sol = lv.simulate(problem, "VI-S", h=0.005, t_end=1.0, tol=1e-12)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 1e-11
    J = sol.momentum_maps()["J3"]
    assert abs(J[0]) > 1.0
    assert np.max(np.abs(J - J[0])) <= 1e-12 * len(J) * abs(J[0])
    # the chain really moves (out of the initial plane, and the links swing)
    assert np.ptp(sol.q[:, 3 * n - 1]) > 0.5


def test_chain_energy_kept_by_em():
    problem = lv.examples.load("pendulum-chain", n_bodies=4)
    sol = lv.simulate(problem, "EM", h=0.01, t_end=1.0, tol=1e-12)
    E = sol.energy()["total"]
    assert np.max(np.abs(E - E[0])) <= 1e-11 * max(1.0, abs(E[0]))


def test_default_step_follows_n_and_the_chain_of_32_runs_to_its_end():
    """h(N) = 0.01 min(1, sqrt(2/N)) (measured, see the example's docstring). With h = 0.01 VI-S
    fails at N = 32 in step 793 (t = 7.93, the chain's whip; tests/test_examples_defaults.py, slow);
    with the default h = 0.0025 it runs the whole T = 10 (4000 steps, measured energy error 0.31 %
    of the largest kinetic energy)."""
    from livens.examples.pendulum_chain import default_step

    assert default_step(1) == default_step(2) == 0.01
    assert [default_step(n) for n in (8, 32, 128)] == pytest.approx([0.005, 0.0025, 0.00125])
    problem = lv.examples.load("pendulum-chain", n_bodies=32)
    assert problem.h == pytest.approx(0.0025) and problem.t_end == 10.0
    sol = lv.simulate(problem, "VI-S")
    assert sol.n_steps == 4000
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 1e-9
    E = sol.energy()
    assert np.max(np.abs(E["total"] - E["total"][0])) <= 0.01 * np.max(E["kinetic"])


def test_chain_parameters_are_checked():
    with pytest.raises(ValueError, match="n_bodies"):
        lv.examples.load("pendulum-chain", n_bodies=0)
    with pytest.raises(ValueError, match="mass"):
        lv.examples.load("pendulum-chain", n_bodies=3, mass=(1.0, 2.0))
    with pytest.raises(ValueError, match="length"):
        lv.examples.load("pendulum-chain", n_bodies=2, length=(1.0, -1.0))
    assert "pendulum-chain" in lv.examples.names()
