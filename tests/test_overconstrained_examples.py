"""The overconstrained examples against references that do not use livens.

four-bar-3d (a planar four-bar built with four 3D hinges, 38 equations of rank 35): the crank angle
read from the crank's director d1 at t_end converges to that of an independent planar model in three
link angles integrated by SciPy (tests/_planar_four_bar.py) at the order of each scheme (EM, VI-S,
RATTLE, Livens' EM) for h, h/2, h/4; all 38 equations hold at every node; EM's energy is constant,
and the 3D model starts with the planar model's energy.

bennett-linkage (a spatial 4R loop, 38 equations of rank 35): along a livens run through a full turn
of the loop, the joint angles read from the links' directors satisfy Bennett's closed-form relation
tan(theta1/2) tan(theta2/2) = sin((beta + alpha)/2) / sin((beta - alpha)/2) and theta3 = -theta1,
theta4 = -theta2 (written here from the literature, not taken from the example module), and livens
reports the three redundant equations.
"""

import warnings

import numpy as np
import pytest
from _planar_four_bar import FourBar

import livens as lv

# ------------------------------------------------------------------------------------------ four-bar-3d
T_END = 0.4
H = 0.02  # and H/2, H/4
ORDERS = {"ggl-em": 2, "ggl-vi": 1, "rattle": 2, "livens-em": 2}
TOL = 1e-12


def _wrap(x):
    """An angle difference in (-pi, pi]."""
    return (np.asarray(x) + np.pi) % (2 * np.pi) - np.pi


def _planar_angles(q):
    """The angles of crank, coupler and rocker from e1, atan2 of each body's d1 (q rows, 36 coordinates:
    phi, d1, d2, d3 per body)."""
    q = np.atleast_2d(q)
    return np.stack([np.arctan2(q[:, 12 * k + 4], q[:, 12 * k + 3]) for k in range(3)], axis=1)


@pytest.fixture(scope="module")
def four_bar_runs():
    """{scheme: [Solution for H, H/2, H/4]}, one Problem (compiled once per scheme)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lv.RedundantConstraintsNotice)
        problem = lv.examples.load("four-bar-3d", h=H, t_end=T_END)
    runs = {s: [lv.simulate(problem, s, h=H / 2**k, tol=TOL, progress=False) for k in range(3)] for s in ORDERS}
    return problem, runs


@pytest.fixture(scope="module")
def planar_reference():
    """The planar model with the example's defaults: angles at 0 and T_END, the closure drift, the energy."""
    model = FourBar()
    th, w, drift = model.solve(np.pi / 3, 2.0, np.linspace(0.0, T_END, 41))
    energy = np.array([model.energy(a, b) for a, b in zip(th, w)])
    return model, th, drift, energy


def test_planar_reference_is_sound(planar_reference):
    """The reference closes its loop and keeps its energy (a wrong velocity term would not)."""
    _, _, drift, energy = planar_reference
    assert drift < 1e-10
    assert np.max(np.abs(energy - energy[0])) < 1e-10 * abs(energy[0])


def test_four_bar_3d_starts_with_the_planar_models_state_and_energy(planar_reference):
    model, th, _, energy = planar_reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lv.RedundantConstraintsNotice)
        problem = lv.examples.load("four-bar-3d")
    q0, v0 = np.asarray(problem.q0), np.asarray(problem.v0)
    assert np.max(np.abs(_wrap(_planar_angles(q0)[0] - th[0]))) < 1e-14
    # the 3D model's energy from its own coordinates: T = 1/2 v.M v (M diagonal), V = m g phi_y
    M = np.concatenate([b.mass_diagonal() for b in problem.system.layout.bodies])
    masses = [b.mass for b in problem.system.layout.bodies]
    E3d = 0.5 * v0 @ (M * v0) + 9.81 * sum(m * q0[12 * k + 1] for k, m in enumerate(masses))
    assert E3d == pytest.approx(energy[0], rel=1e-13)
    # G(q0) v0 = 0: the coupler's and rocker's angular velocities are the planar model's
    w3d = np.array([np.cross(q0[12 * k + 3 : 12 * k + 6], v0[12 * k + 3 : 12 * k + 6])[2] for k in range(3)])
    assert np.max(np.abs(w3d - model.initial_state(np.pi / 3, 2.0)[1])) < 1e-13


@pytest.mark.parametrize("scheme", list(ORDERS))
def test_four_bar_3d_converges_to_the_planar_reference_at_the_schemes_order(scheme, four_bar_runs, planar_reference):
    _, th_ref, _, _ = planar_reference
    _, runs = four_bar_runs
    errors = []
    for sol in runs[scheme]:
        assert float(sol.t[-1]) == pytest.approx(T_END, abs=1e-12)
        errors.append(abs(float(_wrap(_planar_angles(np.asarray(sol.q)[-1])[0, 0] - th_ref[-1, 0]))))
    hs = H / 2.0 ** np.arange(3)
    slope = np.polyfit(np.log(hs), np.log(errors), 1)[0]
    order = ORDERS[scheme]
    assert abs(slope - order) < 0.3, (scheme, errors, slope)
    assert errors[-1] < (1e-2 if order == 1 else 1e-4), (scheme, errors)
    # the coupler and rocker follow the crank: their angles at t_end within the same error
    finest = _planar_angles(np.asarray(runs[scheme][-1].q)[-1])[0]
    assert np.max(np.abs(_wrap(finest - th_ref[-1]))) < 10 * errors[-1], (scheme, finest, th_ref[-1])


OTHER_SCHEMES = [s for s in lv.schemes.names() if s not in ORDERS and s != "bs99"]  # bs99: the heavy top only


@pytest.mark.slow
@pytest.mark.parametrize("scheme", OTHER_SCHEMES)
def test_four_bar_3d_converges_with_every_other_scheme(scheme, planar_reference):
    """The same convergence study with each remaining scheme that takes the four-bar's mass matrix, at the
    order its paper gives (``Scheme.about.order``)."""
    _, th_ref, _, _ = planar_reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lv.RedundantConstraintsNotice)
        problem = lv.examples.load("four-bar-3d", h=H, t_end=T_END)
    sols = [lv.simulate(problem, scheme, h=H / 2**k, tol=TOL, progress=False) for k in range(3)]
    errors = [abs(float(_wrap(_planar_angles(np.asarray(sol.q)[-1])[0, 0] - th_ref[-1, 0]))) for sol in sols]
    slope = np.polyfit(np.log(H / 2.0 ** np.arange(3)), np.log(errors), 1)[0]
    assert abs(slope - lv.schemes.get(scheme)[0].about.order) < 0.3, (scheme, errors, slope)


def test_four_bar_3d_keeps_all_38_equations_at_every_node(four_bar_runs):
    problem, runs = four_bar_runs
    assert problem.constraint_rank.m == 38 and problem.constraint_rank.rank == 35
    assert len(problem.constraint_rank.redundant) == 3
    for scheme, sols in runs.items():
        for sol in sols:
            g = np.asarray(sol.constraint_residual("position"))
            assert g.shape == (sol.n_steps + 1, 38)
            assert np.max(np.abs(g)) < 1e-10, (scheme, sol.h, np.max(np.abs(g)))
            lam = np.asarray(sol.lam)
            assert lam.shape[-1] == 38 and np.all(lam[:, list(problem.constraint_rank.redundant)] == 0.0)


def test_four_bar_3d_em_conserves_energy(four_bar_runs):
    _, runs = four_bar_runs
    for sol in runs["ggl-em"]:
        E = np.asarray(sol.energy()["total"])
        assert np.max(np.abs(E - E[0])) < 1e-12 * abs(E[0]), (sol.h, np.max(np.abs(E - E[0])) / abs(E[0]))


# ----------------------------------------------------------------------------------------- Bennett linkage
ALPHA, BETA = np.pi / 6, np.pi / 3  # the example's defaults


def _joint_angles(q):
    """theta_i about z_{i-1} from x_{i-1} to x_i (DH): x_0 = x_4 = e1 and z_0 = e3 for the ground, (x_i, z_i)
    = (d1, d3) of link i."""
    n = len(q)
    e1, e3 = np.broadcast_to([1.0, 0.0, 0.0], (n, 3)), np.broadcast_to([0.0, 0.0, 1.0], (n, 3))
    X = [e1] + [q[:, 12 * k + 3 : 12 * k + 6] for k in range(3)] + [e1]
    Z = [e3] + [q[:, 12 * k + 9 : 12 * k + 12] for k in range(3)]
    dot = lambda a, b: np.einsum("ni,ni->n", a, b)
    return np.stack([np.arctan2(dot(np.cross(X[i], X[i + 1]), Z[i]), dot(X[i], X[i + 1])) for i in range(4)], 1)


def test_bennett_linkage_follows_bennetts_relation_through_a_full_turn():
    with pytest.warns(lv.RedundantConstraintsNotice):
        # omega0 = 6 rad/s: the loop turns fully (through the folded configurations theta1 = 0, pi)
        problem = lv.examples.load("bennett-linkage", h=0.02, t_end=2.0, omega0=6.0)
    rank = problem.constraint_rank
    assert (rank.m, rank.rank, len(rank.redundant)) == (38, 35, 3)
    sol = lv.simulate(problem, "EM", tol=TOL, progress=False)
    q = np.asarray(sol.q)
    th = _joint_angles(q)
    turn = np.unwrap(th[:, 0])
    assert turn[-1] - turn[0] > 2 * np.pi  # a full turn
    # tan(theta1/2) tan(theta2/2) = sin((beta + alpha)/2) / sin((beta - alpha)/2), multiplied out
    rel = np.sin((BETA - ALPHA) / 2) * np.sin(th[:, 0] / 2) * np.sin(th[:, 1] / 2) - np.sin(
        (BETA + ALPHA) / 2
    ) * np.cos(th[:, 0] / 2) * np.cos(th[:, 1] / 2)
    assert np.max(np.abs(rel)) < 1e-9
    assert np.max(np.abs(_wrap(th[:, 2] + th[:, 0]))) < 1e-9
    assert np.max(np.abs(_wrap(th[:, 3] + th[:, 1]))) < 1e-9
    g = np.asarray(sol.constraint_residual("position"))
    assert g.shape == (sol.n_steps + 1, 38) and np.max(np.abs(g)) < 1e-10
    E = np.asarray(sol.energy()["total"])
    assert np.max(np.abs(E - E[0])) < 1e-12 * np.max(np.asarray(sol.energy()["kinetic"]))


def test_bennett_linkages_solved_equations_stay_independent_through_a_full_turn():
    """The equations livens chose at set-up (by its walk of the manifold) keep their rank along a whole turn
    of the loop: their 35th singular value stays above 0.1 (the order-keeping choice, J4's three
    out-of-plane equations left out, falls to 0.006 at theta1 = 0, pi), while all 38 equations keep 0.27."""
    import jax

    with pytest.warns(lv.RedundantConstraintsNotice):
        problem = lv.examples.load("bennett-linkage", h=0.02, t_end=2.0, omega0=6.0)
    rank = problem.constraint_rank
    order_keeping = [
        k
        for k in range(rank.m)
        if rank.labels[k] not in ("J4.revolute.z", "J4.revolute.axis[n1]", "J4.revolute.axis[n2]")
    ]
    sol = lv.simulate(problem, "EM", tol=TOL, progress=False)
    G = np.asarray(jax.vmap(jax.jacfwd(problem.system.constraints))(np.asarray(sol.q)))

    def sigma35(rows):
        return np.array([np.linalg.svd(Gn[rows], compute_uv=False)[34] for Gn in G])

    assert np.min(sigma35(list(rank.kept))) > 0.1
    assert np.min(sigma35(order_keeping)) < 0.01  # the choice the walk avoided would have come near losing rank
    assert np.min(sigma35(list(range(rank.m)))) > 0.25
