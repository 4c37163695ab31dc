"""The Livens energy-consistent scheme (KB23 eq 28-31) and its midpoint contrast, on the examples of
KB23 §6: the mass-spring system with a singular mass matrix (§6.1) and the spring pendulum in
spherical coordinates with a configuration-dependent, singular-at-the-poles mass matrix (§6.2).

What KB23 promises: the discrete generalized energy E^n = p.v - 1/2 v.M(q)v + V (eq 31) is conserved
(Prop. 5.4, Fig. 3 and 8), g(q^{n+1}) = 0 holds (eq 28d, Fig. 4); for a configuration-dependent M,
p^n != M(q^n)v^n (Prop. 5.5) and the total energy (eq 35) changes by increments "of order 1e-4"
(Fig. 7); the scheme works without M^-1. The midpoint rule does not conserve E for the nonlinear
springs. livens-em also keeps the momentum maps of the declared symmetries (the cyclic p_phi here;
loads and beams in tests/test_momentum_balance.py).
"""

import numpy as np
import pytest

import livens as lv

TOL = 1e-12


@pytest.fixture(scope="module")
def mass_spring():
    return lv.examples.load("redundant-mass-spring")


@pytest.fixture(scope="module")
def spring_pendulum():
    return lv.examples.load("spring-pendulum-spherical")


@pytest.fixture(scope="module")
def runs(mass_spring, spring_pendulum):
    """The papers' runs (KB23 Tables 1, 2: h = 0.1, T = 10 and h = 0.01, T = 1)."""
    out = {}
    for name, pb in (("mass-spring", mass_spring), ("spring-pendulum", spring_pendulum)):
        for s in ("livens-em", "livens-midpoint"):
            out[(name, s)] = lv.simulate(pb, s, tol=TOL)
    return out


def _increments(E):
    return np.abs(np.diff(E)) / max(1.0, abs(E[0]))


def test_examples_have_the_papers_mass_matrices(mass_spring, spring_pendulum):
    M = np.asarray(mass_spring.system.mass_matrix)
    assert np.linalg.matrix_rank(M) == 2  # KB23 eq 40: singular
    Mq = spring_pendulum.system.mass_matrix
    assert np.linalg.matrix_rank(np.asarray(Mq(np.array([1.0, 0.0, 0.0])))) == 2  # eq 45 at theta = 0
    assert mass_spring.h == 0.1 and mass_spring.t_end == 10.0
    assert spring_pendulum.h == 0.01 and spring_pendulum.t_end == 1.0


@pytest.mark.parametrize("example", ["mass-spring", "spring-pendulum"])
def test_livens_em_conserves_the_generalized_energy(runs, example):
    sol = runs[(example, "livens-em")]
    E = sol.energy()["livens"]
    assert np.max(_increments(E)) < 1e-11, np.max(_increments(E))
    assert np.max(np.abs(E - E[0])) / max(1.0, abs(E[0])) < 1e-10


def test_livens_em_keeps_the_constraint_with_singular_mass(runs):
    sol = runs[("mass-spring", "livens-em")]
    assert sol.n_steps == 100
    g = sol.constraint_residual("position")
    assert np.max(np.abs(g)) <= TOL
    assert set(sol.enforced_residuals()) == {"position g(q^{n+1})"}
    # constant M: p^n = M v^n holds at every node (KB23 Prop. 5.5), so E equals the total energy
    M = np.asarray(sol.problem.system.mass_matrix)
    np.testing.assert_allclose(sol.p, sol.v @ M.T, rtol=0, atol=1e-11)
    E = sol.energy()
    np.testing.assert_allclose(E["livens"], E["total"], rtol=0, atol=1e-11)


def test_livens_em_spring_pendulum_total_energy_and_fibre_derivative(runs):
    sol = runs[("spring-pendulum", "livens-em")]
    mech = sol.mechanics
    Mv = np.einsum("nij,nj->ni", sol._vmap(mech.M, sol.q), sol.v)
    # Prop. 5.5: the discrete fibre derivative does not give p = M(q) v at the nodes
    assert np.max(np.abs(sol.p - Mv)) > 1e-8
    # Fig. 7: increments of the total energy (eq 35) of order 1e-4 (within a factor 10)
    dEtot = np.abs(np.diff(sol.energy()["total"]))
    assert 1e-5 < np.max(dEtot) < 1e-3, np.max(dEtot)


@pytest.mark.parametrize("example", ["mass-spring", "spring-pendulum"])
def test_livens_midpoint_does_not_conserve_the_generalized_energy(runs, example):
    sol = runs[(example, "livens-midpoint")]
    E = sol.energy()["livens"]
    assert np.max(_increments(E)) > 1e-7, np.max(_increments(E))
    assert np.max(np.abs(sol.constraint_residual("position")), initial=0.0) <= TOL


def test_both_schemes_keep_the_cyclic_momentum(runs, spring_pendulum):
    """p_phi is conserved by the midpoint rule (phi cyclic: D_1 L has no phi component) and by
    livens-em, whose partitioned discrete gradient (KB23 eq 29) is corrected to be orthogonal to the
    shift of phi (KBS23b eq 85; KB23 §7: the scheme "aims at the preservation of momentum maps").
    Without the symmetry declared, Gonzalez's quotients along q^{n+1} - q^n have a phi component and
    p_phi drifts."""
    J = runs[("spring-pendulum", "livens-midpoint")].momentum_maps()["p_phi"]
    assert np.max(np.abs(J - J[0])) < 1e-13
    sol = runs[("spring-pendulum", "livens-em")]
    assert sol.meta["kept_symmetries"] == ["p_phi"]
    J = sol.p[:, 2]  # p_phi, from the momenta themselves
    assert np.max(np.abs(J - J[0])) < 1e-11 * abs(J[0])
    plain = lv.simulate(spring_pendulum.replace(symmetries=()), "livens-em", tol=TOL)
    J = plain.p[:, 2]
    assert np.max(np.abs(J - J[0])) > 1e-6 * abs(J[0])


def test_livens_em_is_second_order(mass_spring):
    """KB23 §7: the scheme is second-order accurate (midpoint-type)."""
    T = 1.0
    hs = (0.1, 0.05, 0.025)
    # At h = 0.003125 the residual's round-off floor is about 1.4e-12 (it carries terms divided
    # by h), so the reference runs at 1e-10: far below the smallest error measured (about 1e-5).
    ref = lv.simulate(mass_spring, "livens-em", h=hs[-1] / 8, t_end=T, tol=1e-10)
    errs = []
    for h in hs:
        sol = lv.simulate(mass_spring, "livens-em", h=h, t_end=T, tol=TOL)
        errs.append(np.max(np.abs(sol.q[-1] - ref.q[-1])))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert abs(slope - 2.0) < 0.15, (slope, errs)


def test_livens_em_through_the_pole_of_the_spherical_coordinates(spring_pendulum):
    """M(q) is singular at theta = 0 (KB23 eq 45): a run through the pole keeps E and needs no M^-1."""
    pb = spring_pendulum.replace(q0=np.array([1.05, 0.2, 0.0]), v0=np.array([0.0, -2.0, 0.0]))
    sol = lv.simulate(pb, "livens-em", h=0.01, t_end=0.3, tol=TOL)
    assert np.min(sol.q[:, 1]) < 0.0  # theta crossed 0
    E = sol.energy()["livens"]
    assert np.max(_increments(E)) < 1e-11


def test_livens_em_equals_conservative_energy_on_regular_mass():
    """On a regular constant M (the 3D pendulum) E is the Hamiltonian (KB23 Remark 3.6): conserved."""
    pb = lv.examples.load("pendulum-3d")
    sol = lv.simulate(pb, "livens-em", h=0.05, t_end=2.0, tol=TOL)
    H = sol.energy()["total"]
    assert np.max(_increments(H)) < 1e-11
    assert np.max(np.abs(sol.constraint_residual("position"))) <= TOL


def test_singular_mass_refused_by_inverse_mass_schemes_with_clear_message(mass_spring):
    with pytest.raises(ValueError) as info:
        lv.simulate(mass_spring, "VI-S")
    msg = str(info.value)
    assert "needs M^-1" in msg and "singular" in msg
    assert "livens-em" in msg and "livens-midpoint" in msg
