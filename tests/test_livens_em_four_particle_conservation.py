"""``livens-em`` on the four-particle system (KBS23b §6.3) keeps the energy and its six momentum maps to
round-off where Newton is iterated to round-off: at tol = 1e-12, E = 1/2 v.M v + V (p = M v at the nodes for
a constant M; KB23 Prop. 5.4, 5.5) and the total linear and angular momentum (KBS23b eq 118-121, the
corrected discrete gradients of KBS23b eq 85) stay within 5e-12 of their initial values over 200 steps
(measured: 1.3e-12 for E relative, 2.2e-12 for the angular momentum, 6e-15 for the linear one).

The momentum maps are computed here from the nodes (sum of p_i and of x_i x p_i), independently of the
library's :meth:`livens.Solution.momentum_maps`, which must agree with them. The figures are not
trivial: the angular momentum is 2 and the springs exchange energy with the motion."""

import numpy as np
import pytest

import livens as lv

BOUND = 5e-12
MASSES = np.array([1.0, 3.0, 2.3, 1.7])


@pytest.fixture(scope="module")
def run():
    problem = lv.examples.load("four-particle")
    return lv.simulate(problem, "livens-em", h=problem.h, t_end=200 * problem.h, tol=1e-12, progress=False)


def _springs(x):
    def spring(a, b, k):
        r = x[:, b] - x[:, a]
        return 0.5 * k * (np.sum(r * r, axis=1) - 1.0) ** 2

    return spring(0, 2, 50.0) + spring(1, 3, 500.0)


def _maps(sol):
    """The total linear and angular momentum at the nodes, shape (nodes, 6)."""
    x = np.asarray(sol.q).reshape(-1, 4, 3)
    P = np.asarray(sol.p).reshape(-1, 4, 3)
    return np.concatenate([P.sum(axis=1), np.cross(x, P).sum(axis=1)], axis=1)


def test_energy_kept_to_round_off(run):
    x = np.asarray(run.q).reshape(-1, 4, 3)
    v = np.asarray(run.v)
    springs = _springs(x)
    energy = 0.5 * np.einsum("nk,k,nk->n", v, np.repeat(MASSES, 3), v) + springs
    assert np.max(np.abs(energy - energy[0])) <= BOUND * abs(energy[0])
    assert np.ptp(springs) > 1e-3 * abs(energy[0])  # energy moves between the springs and the motion


def test_six_momentum_maps_kept_to_round_off(run):
    J = _maps(run)
    assert J.shape[1] == 6
    assert np.max(np.abs(J[0, 3:])) > 1.0  # the angular momentum is not zero
    assert np.max(np.abs(J - J[0]), axis=0).max() <= BOUND * (1.0 + np.max(np.abs(J[0])))


def test_library_momentum_maps_are_the_same_six(run):
    maps = run.momentum_maps()
    assert len(maps) == 6
    ours = _maps(run)
    theirs = np.stack([maps[k] for k in maps], axis=1)
    # the same six functions up to the order of the columns and their sign (xi q or q x xi)
    for column in theirs.T:
        err = np.min([np.max(np.abs(column - s * c)) for c in ours.T for s in (1.0, -1.0)])
        assert err <= 1e-12 * (1.0 + np.max(np.abs(column)))
        assert np.max(np.abs(column - column[0])) <= BOUND * (1.0 + np.max(np.abs(column)))
