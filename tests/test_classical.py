"""Classical comparison schemes: ggl-midpoint (KBS23b eq 30), midpoint (KBS23b eq 28), RATTLE
(Andersen 1983; SLO09 §4) and the constrained symplectic Euler method.

What the literature promises: RATTLE is second order, symplectic on the constraint manifold and keeps
g and G M^-1 p at the nodes; symplectic Euler is first order; the GGL midpoint scheme keeps both
nodal constraints (KBS23b eq 30c, d); the index-3 midpoint rule keeps g(q) at the nodes; a scheme that
needs M^-1 refuses a singular or configuration-dependent mass matrix.
"""

import numpy as np
import pytest

import livens as lv

TOL = 1e-12
T_ORDER = 1.0
H_ORDER = (0.04, 0.02, 0.01)


@pytest.fixture(scope="module")
def pendulum():
    return lv.examples.load("pendulum-3d")


@pytest.fixture(scope="module")
def reference(pendulum):
    """A RATTLE run with h = 1e-4 (its error, ~1e-8, is far below the errors measured)."""
    return lv.simulate(pendulum, "rattle", h=1e-4, t_end=T_ORDER, tol=1e-13)


def _slope(pendulum, reference, scheme):
    errs = []
    for h in H_ORDER:
        sol = lv.simulate(pendulum, scheme, h=h, t_end=T_ORDER, tol=1e-13)
        errs.append(np.max(np.abs(sol.q[-1] - reference.q[-1])))
    return np.polyfit(np.log(H_ORDER), np.log(errs), 1)[0], errs


@pytest.mark.parametrize(
    "scheme, order", [("rattle", 2), ("symplectic-euler", 1), ("midpoint", 2), ("ggl-midpoint", 2)]
)
def test_convergence_order(pendulum, reference, scheme, order):
    slope, errs = _slope(pendulum, reference, scheme)
    assert abs(slope - order) < 0.15, f"{scheme}: log-log slope {slope:.3f}, errors {errs}"


def test_rattle_keeps_both_nodal_constraints_and_momentum(pendulum):
    sol = lv.simulate(pendulum, "rattle", h=0.05, t_end=5.0, tol=TOL)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= TOL
    assert np.max(np.abs(sol.constraint_residual("velocity"))) <= TOL
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(J - J[0])) < 1e-12 * max(1.0, abs(J[0]))
    enf = sol.enforced_residuals()
    assert set(enf) == {"position g(q^{n+1})", "velocity G(q^{n+1}) M^-1 p^{n+1}"}
    assert all(np.max(np.abs(a)) <= TOL for a in enf.values())


def test_ggl_midpoint_keeps_both_nodal_constraints(pendulum):
    sol = lv.simulate(pendulum, "ggl-midpoint", h=0.05, t_end=5.0, tol=TOL)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= TOL
    assert np.max(np.abs(sol.constraint_residual("velocity"))) <= TOL
    assert sol.gam.shape == sol.lam.shape == (sol.n_steps, 1)
    # gamma enforces the velocity constraint; it is not zero in the discrete setting (KBS23b §2.3)
    assert np.max(np.abs(sol.gam)) > 1e-8


def test_midpoint_keeps_position_constraint_only(pendulum):
    sol = lv.simulate(pendulum, "midpoint", h=0.05, t_end=5.0, tol=TOL)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= TOL
    # the index-3 scheme does not impose the hidden constraint: G M^-1 p drifts off zero
    assert np.max(np.abs(sol.constraint_residual("velocity"))) > 1e-6
    assert sol.gam is None


def test_symplectic_euler_keeps_position_constraint_and_momentum(pendulum):
    sol = lv.simulate(pendulum, "symplectic-euler", h=0.05, t_end=5.0, tol=TOL)
    assert sol.velocity_kind == "interval" and sol.v.shape == (sol.n_steps, 3)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= TOL
    # p^{n+1} = M (q^{n+1} - q^n)/h: the interval velocity of the scheme
    np.testing.assert_allclose(sol.v, np.diff(sol.q, axis=0) / sol.h, rtol=0, atol=1e-12)
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(J - J[0])) < 1e-12 * max(1.0, abs(J[0]))


def test_rattle_is_symplectic_and_ggl_midpoint_is_not(pendulum):
    from livens import diagnostics

    sol = lv.simulate(pendulum, "rattle", h=0.05, t_end=1.0, tol=TOL)
    from livens.driver.setup import initial_state, resolve

    # a generic point of the trajectory, not only the initial state
    _, _, mech = resolve(pendulum, "rattle", {})
    s0 = initial_state(pendulum, mech)
    state = s0._replace(q=sol.q[10], p=sol.p[10], v=sol.v[10])
    d_rattle = diagnostics.symplecticity_defect(pendulum, "rattle", 0.05, state=state, relative=True)
    d_ggl = diagnostics.symplecticity_defect(pendulum, "ggl-midpoint", 0.05, state=state, relative=True)
    assert d_rattle < 1e-13, d_rattle
    assert d_ggl > 1e-6, d_ggl


@pytest.mark.parametrize("scheme", ["ggl-midpoint", "midpoint", "rattle", "symplectic-euler"])
def test_schemes_needing_inverse_mass_refuse_singular_and_configuration_dependent_M(scheme):
    singular = lv.examples.load("redundant-mass-spring")
    with pytest.raises(ValueError, match="singular") as info:
        lv.simulate(singular, scheme, h=0.1, t_end=1.0)
    msg = str(info.value)
    assert scheme in msg and "livens-em" in msg and "livens-midpoint" in msg and "vi-lagrange" in msg
    qdep = lv.examples.load("spring-pendulum-spherical")
    with pytest.raises(ValueError, match="configuration dependent") as info:
        lv.simulate(qdep, scheme, h=0.01, t_end=0.1)
    assert "livens-em" in str(info.value)
