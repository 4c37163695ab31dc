"""The Galerkin GGL variational integrator ``ggl-galerkin`` (docs/theory/ggl-galerkin.md): its Lobatto
tables, its residual against the gradient of its discrete Lagrangian, the orders 2s = 4 and 6 against
SciPy's DOP853 on minimal coordinates (the 3D pendulum in Cartesian coordinates; the spherical pendulum
in spherical coordinates, a configuration-dependent M(q); the heavy top, slow), symplecticity on the
constraint manifold, the momentum map J3 and the constraints at the nodes."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import cartesian_pendulum_reference, pendulum_reference, spherical_pendulum
from _index1_reference import index1_reference

import livens as lv
from livens.diagnostics import defect_of, one_step_jacobian
from livens.mechanics import mechanics
from livens.schemes.base import State
from livens.schemes.ggl_galerkin import discrete_lagrangian, lobatto, stationarity

SCHEME = "ggl-galerkin"
PENDULUM = lv.examples.load("pendulum-3d")
ROUND_OFF = 1e-12


def _slope(hs, errors):
    return np.polyfit(np.log(hs), np.log(errors), 1)[0]


def test_lobatto_tables():
    """The points and weights of Gauss-Lobatto with 3 and 4 points; D differentiates polynomials of
    degree s exactly; the weights integrate degree 2s - 1 exactly."""
    c, b, D = lobatto(2)
    np.testing.assert_allclose(c, [0.0, 0.5, 1.0], atol=1e-15)
    np.testing.assert_allclose(b, [1 / 6, 2 / 3, 1 / 6], atol=1e-15)
    c, b, D = lobatto(3)
    r = 1 / np.sqrt(5)
    np.testing.assert_allclose(c, [0.0, (1 - r) / 2, (1 + r) / 2, 1.0], atol=1e-15)
    np.testing.assert_allclose(b, [1 / 12, 5 / 12, 5 / 12, 1 / 12], atol=1e-15)
    for s in (2, 3):
        c, b, D = lobatto(s)
        for k in range(s + 1):
            np.testing.assert_allclose(D @ c**k, k * c ** max(k - 1, 0) if k else 0 * c, atol=1e-12)
        for k in range(2 * s):
            assert b @ c**k == pytest.approx(1 / (k + 1), abs=1e-14)


@pytest.mark.parametrize("problem", [PENDULUM, spherical_pendulum()], ids=["constant-M", "M(q)"])
@pytest.mark.parametrize("s", [2, 3])
def test_stationarity_is_the_gradient_of_the_discrete_lagrangian(problem, s):
    """D_{q_j} L_d of the residual (sum_i b_i D_ij p_i + h b_j f_j) equals the AD gradient of
    L_d = h sum_i b_i [L(q_i, v_i) - lambda_i . g(q_i)] at random points and multipliers."""
    mech = mechanics(problem.system, problem.q0)
    rng = np.random.default_rng(s)
    q0 = jnp.asarray(problem.q0, dtype=float)
    X = jnp.asarray(0.1 * rng.standard_normal((s + 1, mech.d))).at[0].set(0.0)
    lams, gams = (jnp.asarray(rng.standard_normal((s + 1, mech.m))) for _ in range(2))
    h = 0.05
    grad = jax.jit(jax.grad(lambda X: discrete_lagrangian(mech, X, q0, h, lams, gams, s)))(X)
    ours = jax.jit(lambda X: stationarity(mech, X, q0, h, lams, gams, s)[0])(X)
    np.testing.assert_allclose(ours, grad, rtol=1e-12, atol=1e-12)


# the step sizes sit in the asymptotic range of each order (errors 1e-5 ... 1e-10 at T = 0.5)
PENDULUM_STEPS = {2: [0.05, 0.025, 0.0125], 3: [0.1, 0.05, 0.025]}


def test_orders_four_and_six_on_the_3d_pendulum():
    """Cartesian 3D pendulum (KBS23b §6.1), T = 0.5: the errors of q and p fall like h^4 (s = 2) and
    h^6 (s = 3), fitted slopes within 0.2, against the minimal-coordinate solution; g at the nodes."""
    T = 0.5
    q_ref, p_ref = cartesian_pendulum_reference(T)
    for s, hs in PENDULUM_STEPS.items():
        eq, ep = [], []
        for h in hs:
            sol = lv.simulate(PENDULUM, SCHEME, h=h, t_end=T, tol=1e-13, progress=False, stages=s)
            eq.append(np.max(np.abs(sol.q[-1] - q_ref)))
            ep.append(np.max(np.abs(sol.p[-1] - p_ref)))
            assert np.max(np.abs(sol.constraint_residual("position"))) <= 1e-13
        assert abs(_slope(hs, eq) - 2 * s) <= 0.2, (s, eq)
        assert abs(_slope(hs, ep) - 2 * s) <= 0.2, (s, ep)


def test_orders_with_a_configuration_dependent_mass_matrix():
    """The spherical pendulum in spherical coordinates, M(q) = diag(1, r^2, r^2 sin^2 theta), T = 0.5:
    orders 4 and 6 in q and p against the minimal-coordinate solution (the same equations as for
    constant M)."""
    T = 0.5
    q_ref, v_ref = pendulum_reference(T)
    p_ref = np.array([1.0, q_ref[0] ** 2, (q_ref[0] * np.sin(q_ref[1])) ** 2]) * v_ref  # M(q) v, m = 1
    problem = spherical_pendulum()
    hs = [0.05, 0.025, 0.0125]
    for s in (2, 3):
        eq, ep = [], []
        for h in hs:
            sol = lv.simulate(problem, SCHEME, h=h, t_end=T, tol=1e-13, progress=False, stages=s)
            eq.append(np.max(np.abs(sol.q[-1] - q_ref)))
            ep.append(np.max(np.abs(sol.p[-1] - p_ref)))
        assert abs(_slope(hs, eq) - 2 * s) <= 0.2, (s, eq)
        assert abs(_slope(hs, ep) - 2 * s) <= 0.2, (s, ep)


def _perturbed_pendulum_state():
    """A consistent state of the 3D pendulum away from the start (tilted, with a vertical speed)."""
    mech = mechanics(PENDULUM.system, PENDULUM.q0)
    q, v = lv.consistent_initial_state(PENDULUM.system, np.array([0.6, 0.3, -0.7]), np.array([0.4, 1.1, 0.5]))
    return State(
        q=jnp.asarray(q),
        p=mech.M(jnp.asarray(q)) @ jnp.asarray(v),
        v=jnp.asarray(v),
        lam=jnp.zeros(1),
        gam=jnp.zeros(1),
    )


@pytest.mark.parametrize("s", [2, 3])
def test_symplectic_on_the_constraint_manifold(s):
    """The one-step Jacobian (implicit function theorem through the Newton solution) preserves the
    symplectic form on the tangent space of {g = 0, G M^-1 p = 0}, at round-off, from the start and from
    another state; not on the whole phase space (the split of lambda at the node)."""
    mech = mechanics(PENDULUM.system, PENDULUM.q0)
    for state in (None, _perturbed_pendulum_state()):
        Psi, z, _, rn = one_step_jacobian(PENDULUM, SCHEME, 0.05, state=state, stages=s)
        assert rn <= 1e-12
        assert defect_of(Psi, z, mech, "constraint", relative=True) <= ROUND_OFF
        assert defect_of(Psi, z, mech, "full", relative=True) > 1e-3


def test_symplectic_with_a_configuration_dependent_mass_matrix():
    problem = spherical_pendulum()
    mech = mechanics(problem.system, problem.q0)
    Psi, z, _, rn = one_step_jacobian(problem, SCHEME, 0.05, stages=2)
    assert rn <= 1e-12
    assert defect_of(Psi, z, mech, "constraint", relative=True) <= ROUND_OFF


@pytest.mark.parametrize("s", [2, 3])
def test_momentum_map_and_constraints_at_the_nodes(s):
    """The paper's pendulum run (h = 0.05, T = 10, tol 1e-12): J3 = (q x p).e3 kept to 1e-11, g(q^n) and
    G(q^n) M^-1 p^n at the Newton tolerance."""
    sol = lv.simulate(PENDULUM, SCHEME, tol=1e-12, progress=False, stages=s)
    J3 = np.asarray(sol.momentum_maps()["J3"])
    assert np.max(np.abs(J3 - J3[0])) <= 1e-11
    assert abs(J3[0]) > 0.5  # the pendulum does turn about e3
    for name, residual in sol.enforced_residuals().items():
        assert np.max(np.abs(residual)) <= 1e-11, name
    assert "velocity G(q^{n+1}) M(q^{n+1})^-1 p^{n+1}" in sol.enforced_residuals()


def test_stages_refused_outside_two_and_three():
    """stages must be 2 or 3; the message names the values that run, and they do."""
    with pytest.raises(ValueError, match=r"stages=2 or stages=3"):
        lv.simulate(PENDULUM, SCHEME, h=0.05, t_end=0.1, progress=False, stages=2.5)
    with pytest.raises(ValueError, match=r"outside its range \[2, 3\]"):
        lv.simulate(PENDULUM, SCHEME, h=0.05, t_end=0.1, progress=False, stages=4)


def test_reported_order_and_properties():
    """lv.schemes and ``livens list`` report it with its order and what it keeps."""
    sch, _ = lv.schemes.get(SCHEME)
    assert SCHEME in lv.schemes.names()
    assert sch.about.order == 4 and "order 2s" in sch.about.keeps and "symplectic" in sch.about.keeps
    assert [(p.name, p.default) for p in sch.params] == [("stages", 2.0)]
    assert sch.capabilities.configuration_mass and not sch.capabilities.external_force


def test_external_forces_refused():
    """Damping and external forces are not in its equations: the driver refuses them and names the
    schemes that apply them."""
    system = dataclasses.replace(PENDULUM.system, external_force=lambda q, v, t, par: jnp.zeros(3), name="forced")
    forced = PENDULUM.replace(system=system, symmetries=())
    with pytest.raises(ValueError, match="no external force term"):
        lv.simulate(forced, SCHEME, h=0.05, t_end=0.1, progress=False)


# ------------------------------------------------------------------ the heavy top (slow: its compilation)
@pytest.mark.slow
def test_orders_four_and_six_on_the_heavy_top():
    """The heavy top (12 coordinates, 9 constraints), T = 0.1, Newton to round-off: slopes 4 and 6
    within 0.2 in q and p."""
    problem = lv.examples.load("heavy-top")
    T = 0.1
    q_ref, p_ref = index1_reference(problem, T)
    hs = [0.0025, 0.00125, 0.000625]
    for s in (2, 3):
        eq, ep = [], []
        for h in hs:
            sol = lv.simulate(problem, SCHEME, h=h, t_end=T, tol="roundoff", progress=False, stages=s)
            eq.append(np.max(np.abs(sol.q[-1] - q_ref)))
            ep.append(np.max(np.abs(sol.p[-1] - p_ref)))
        assert abs(_slope(hs, eq) - 2 * s) <= 0.2, (s, eq)
        assert abs(_slope(hs, ep) - 2 * s) <= 0.2, (s, ep)
