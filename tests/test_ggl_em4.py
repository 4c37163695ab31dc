"""The GGL energy-momentum scheme of order 4 ``ggl-em4`` (docs/theory/ggl-em4.md): its quadrature
tables, the energy and momentum balances its corrected force meets (and the Galerkin force alone does
not), the order 4 against SciPy's DOP853 (the 3D pendulum from its minimal coordinates; the
four-particle system, nonlinear springs and six symmetries, from its index-1 equations), the energy to
the Newton tolerance over 10^4 steps, the momentum map J3 and both constraints at the
nodes, and the refusal of a configuration-dependent mass matrix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import cartesian_pendulum_reference, spherical_pendulum
from _index1_reference import index1_reference

import livens as lv
from livens.driver.setup import resolve
from livens.schemes.ggl_em4 import step_terms, tables

SCHEME = "ggl-em4"
PENDULUM = lv.examples.load("pendulum-3d")
FOUR = lv.examples.load("four-particle")


def _slope(hs, errors):
    return np.polyfit(np.log(hs), np.log(errors), 1)[0]


def test_tables():
    """Gauss-Legendre with 4 points integrates degree 7 exactly on [0, 1]; W projects onto the
    orthonormal tests 1, sqrt(3) (2 tau - 1); the Lagrange polynomials on 0, 1/2, 1 and their
    derivatives reproduce a quadratic."""
    tab = tables()
    c, w, W = tab["c"], tab["w"], tab["W"]
    for k in range(8):
        assert w @ c**k == pytest.approx(1 / (k + 1), abs=1e-15)
    phi = np.stack([np.ones_like(c), np.sqrt(3.0) * (2 * c - 1)])
    np.testing.assert_allclose(W @ phi.T, np.eye(2), atol=1e-15)
    x = 0.3 + 1.7 * c - 2.2 * c**2  # x(0) = 0.3, x(1/2) = 0.3 + 0.85 - 0.55, x(1) = 0.3 + 1.7 - 2.2
    np.testing.assert_allclose(0.3 + tab["lm"] * 0.3 + tab["l1"] * (-0.5), x, atol=1e-15)
    np.testing.assert_allclose(tab["dlm"] * 0.3 + tab["dl1"] * (-0.5), 1.7 - 4.4 * c, atol=1e-15)


def _random_step(problem, seed, h=0.05):
    """step_terms at a consistent state of ``problem`` and random increments and multipliers of the
    size of a step h, with the exact symmetries of the problem, as a run resolves them."""
    mech = resolve(problem, SCHEME, {})[2]
    rng = np.random.default_rng(seed)
    q0, v0 = jnp.asarray(problem.q0, dtype=float), jnp.asarray(problem.v0, dtype=float)
    p0 = mech.M_const @ v0

    def r(scale, n):
        return jnp.asarray(scale * rng.standard_normal(n))

    dq, qm = h * v0 + r(h**2, mech.d), 0.5 * h * v0 + r(h**2, mech.d)
    dp, pm = r(h, mech.d), r(h, mech.d)
    lams, gams = r(1.0, (2, mech.m)), r(0.1, (2, mech.m))
    st = jax.jit(lambda *a: step_terms(mech, *a))(q0, p0, dq, qm, dp, pm, lams, gams)
    tab = tables()
    Q = q0[None, :] + tab["lm"][:, None] * qm + tab["l1"][:, None] * dq
    P = p0[None, :] + tab["lm"][:, None] * pm + tab["l1"][:, None] * dp
    Z = np.einsum("ik,kdr->idr", tab["W"], np.stack([mech.generators(q) for q in Q]))
    cot = np.stack([mech.cotangent_generators(p) for p in tab["W"] @ P])
    target_e = float(mech.V(q0 + dq) - mech.V(q0) - np.sum(st["b"] * st["Gam"]))
    target_j = -np.einsum("idr,id->r", cot, st["Gam"])
    return st, Z, target_e, target_j


@pytest.mark.parametrize("seed", [0, 1])
def test_the_corrected_force_meets_the_energy_and_momentum_balances(seed):
    """Four-particle system (nonlinear springs; L1-L3, J1-J3): at random increments and multipliers the
    corrected force F meets sum_i a_i . F_i = V^{n+1} - V^n - sum_i b_i . Gamma_i and
    sum_i F_i . <xi(q)>_i = sum_i (A^T P_i) . Gamma_i for all six symmetries to round-off, while the
    Galerkin projection F^0 misses them by far more than round-off (away from a solution of the step the
    multipliers' work does not vanish; at a solution F - F^0 is O(h^4), which the order tests see)."""
    st, Z, target_e, target_j = _random_step(FOUR, seed)
    F, F0, a = np.asarray(st["F"]), np.asarray(st["F0"]), np.asarray(st["a"])
    scale = np.sum(np.abs(a * F)) + abs(target_e)
    assert abs(np.sum(a * F) - target_e) <= 1e-14 * max(scale, 1.0)
    np.testing.assert_allclose(np.einsum("id,idr->r", F, Z), target_j, rtol=0, atol=1e-13)
    assert abs(np.sum(a * F0) - target_e) > 1e-9 or np.max(np.abs(np.einsum("id,idr->r", F0, Z) - target_j)) > 1e-9


def _order(problem, q_ref, p_ref, hs, T):
    eq, ep = [], []
    for h in hs:
        sol = lv.simulate(problem, SCHEME, h=h, t_end=T, tol="roundoff", progress=False)
        eq.append(np.max(np.abs(sol.q[-1] - q_ref)))
        ep.append(np.max(np.abs(sol.p[-1] - p_ref)))
        assert np.max(np.abs(sol.constraint_residual("position"))) <= 1e-13
    return _slope(hs, eq), _slope(hs, ep), eq, ep


def test_order_four_on_the_3d_pendulum():
    """Cartesian 3D pendulum (KBS23b §6.1), T = 0.5: the errors of q and p fall like h^4 (fitted slopes
    within 0.2) against the minimal-coordinate solution; g at the nodes."""
    T = 0.5
    q_ref, p_ref = cartesian_pendulum_reference(T)
    sq, sp, eq, ep = _order(PENDULUM, q_ref, p_ref, [0.05, 0.025, 0.0125], T)
    assert abs(sq - 4) <= 0.2 and abs(sp - 4) <= 0.2, (sq, sp, eq, ep)


@pytest.mark.slow
def test_order_four_on_the_four_particle_system():
    """Four-particle system (KBS23b §6.3; nonlinear springs, where the energy-momentum correction acts),
    T = 0.2: order 4 in q and p against its index-1 equations by DOP853."""
    T = 0.2
    q_ref, p_ref = index1_reference(FOUR, T)
    sq, sp, eq, ep = _order(FOUR, q_ref, p_ref, [0.02, 0.01, 0.005], T)
    assert abs(sq - 4) <= 0.2 and abs(sp - 4) <= 0.2, (sq, sp, eq, ep)


def _long_run(n_steps):
    """The 3D pendulum over n_steps steps of h = 0.05 at tol = "roundoff": the relative drift of
    E = T + V, the drift of J3 and the worst nodal constraint residuals."""
    sol = lv.simulate(PENDULUM, SCHEME, h=0.05, t_end=0.05 * n_steps, tol="roundoff", progress=False)
    assert sol.n_steps == n_steps
    E = sol.energy()["total"]
    J3 = sol.momentum_maps()["J3"]
    worst = {name: float(np.max(np.abs(r))) for name, r in sol.enforced_residuals().items()}
    return float(np.max(np.abs(E - E[0])) / abs(E[0])), float(np.max(np.abs(J3 - J3[0]))), worst


def _check_long_run(n_steps):
    drift, dJ, worst = _long_run(n_steps)
    assert drift <= 1e-12, drift
    assert dJ <= 1e-12, dJ
    assert all(r <= 1e-13 for r in worst.values()), worst


def test_energy_momentum_and_constraints_over_ten_thousand_steps():
    """3D pendulum, 10^4 steps of h = 0.05 at tol = "roundoff": relative energy drift <= 1e-12, J3 kept
    to 1e-12, g and G M^-1 p at the nodes to 1e-13."""
    _check_long_run(10_000)


def test_a_configuration_dependent_mass_matrix_is_refused():
    """ggl-em4 needs the constant M^-1 (Capabilities.mass_inverse): the spherical pendulum in spherical
    coordinates, M(q) = diag(1, r^2, r^2 sin^2 theta), is refused before any step."""
    assert SCHEME in lv.schemes.names()
    with pytest.raises(ValueError, match=r"needs M\^-1"):
        lv.simulate(spherical_pendulum(), SCHEME, h=0.01, t_end=0.05, progress=False)
