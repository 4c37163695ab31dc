"""The GGL family with a configuration-dependent mass matrix M(q) (docs/theory/ggl-mass.md): VI-S,
the one-stage theta schemes (VI-A, VI-B) and EM derived for L(q, v) = 1/2 v.M(q)v - V(q) with the
secondary constraint g_v(q, p) = G(q) M(q)^-1 p (KBS23b Remark 3).

Checked against what livens did not compute (tests/_configuration_mass.py):
- the derivation itself: the variational schemes' steps are stationary points of their discrete
  action sums (KBS23b eq 52, 56 with M(q)), whose gradient JAX takes here from the action written
  out in the test; the derivative of g_v against jax.grad of G(q) M(q)^-1 p;
- orders from log-log slopes of the error against SciPy's DOP853 (rtol = atol = 1e-13) on the
  index-1 equations of Andrews' squeezing mechanism (the Test Set's published M, f, G; also the
  higher-order ggl-galerkin and ggl-spark in q and p, slow) and on the
  minimal-coordinate equations of the spherical pendulum; that reference against the Test Set's
  published solution;
- VI-S with dissipation and an external force against the minimal-coordinate equations of the
  forced, damped pendulum;
- EM's generalized energy E(q, v, p) = p.v - L (KB23 eq 31) per step at round-off (Newton to
  round-off), the momentum map p_phi of the pendulum's cyclic angle and J3 of a rotation that moves v
  (a bead on a paraboloid with M(q) = I + q q^T / 2), the constraints each scheme enforces;
- the refusal of a singular M, naming the schemes that accept it.
Symplecticity with M(q): tests/test_symplecticity.py. Longer studies: ``-m slow``.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import (
    TEST_SET_Q,
    TEST_SET_T,
    TEST_SET_V,
    pendulum_reference,
    spherical_pendulum,
    squeezer_parts,
    squeezer_reference,
)

import livens as lv
from livens.mechanics import mechanics
from livens.schemes import ggl_mass

SQUEEZER = lv.examples.load("andrews-squeezer")
PENDULUM = spherical_pendulum()
ORDERS = {"VI-S": 1, "VI-A": 2, "VI-B": 1, "EM": 2}
_RUNS: dict = {}


def run(problem, scheme, h, t_end, tol=1e-12, **params):
    key = (problem.name, scheme, h, t_end, str(tol), tuple(sorted(params.items())))
    if key not in _RUNS:
        _RUNS[key] = lv.simulate(problem, scheme, h=h, t_end=t_end, tol=tol, progress=False, **params)
    return _RUNS[key]


# ------------------------------------------------------------------ the references themselves
def test_the_squeezer_of_livens_is_the_published_one():
    """The example's M(q), g and forces are those printed in the Test Set (MM08; HW96 §VII.7): at
    random states M and G agree, and the published force f(q, v) is the force of Lagrange's
    equations of L = 1/2 v.M(q)v - V(q), -(d/dt D_2 L - D_1 L) + M(q) a = ... i.e. f = D_1 L - (D_q(M v)) v."""
    mech = mechanics(SQUEEZER.system, SQUEEZER.q0)
    rng = np.random.default_rng(3)
    for _ in range(3):
        q = SQUEEZER.q0 + rng.normal(size=7)
        v = 300.0 * rng.normal(size=7)
        M, f, G, _ = squeezer_parts(q, v)
        jq, jv = jnp.asarray(q), jnp.asarray(v)
        np.testing.assert_allclose(np.asarray(mech.M(jq)), M, rtol=1e-14, atol=1e-20)
        np.testing.assert_allclose(np.asarray(mech.G(jq)), G, rtol=1e-13, atol=1e-17)
        # Lagrange: d/dt (M(q) v) - D_1 L = 0 reads M a = D_1 L - (D M(q)[v]) v =: f
        dMv = jax.jvp(lambda y: mech.M(y) @ jv, (jq,), (jv,))[1]
        f_lagrange = np.asarray(mech.D1L(jq, jv) - dMv)
        np.testing.assert_allclose(f_lagrange, f, rtol=1e-12, atol=1e-12 * np.max(np.abs(f)))


def test_the_scipy_reference_meets_the_test_set_solution():
    """Our index-1 reference at t = 0.03 against the Test Set's published q and v (its own accuracy,
    1.4e-9 in q, is what the comparison measures)."""
    q, v = squeezer_reference(TEST_SET_T)
    assert np.max(np.abs(q - TEST_SET_Q)) <= 3e-9
    assert np.max(np.abs(v - TEST_SET_V)) <= 1e-9 * np.max(np.abs(TEST_SET_V))


# ------------------------------------------------------------------ the derivation
def test_secondary_constraint_derivative_is_that_of_g_v():
    """D_1 g_v(q, p)^T gamma = sum_k gamma_k D^2 g_k w - D_q[a.M(q)w] (docs/theory/ggl-mass.md) equals
    jax.grad of gamma.G(q) M(q)^-1 p, and D_2 g_v^T gamma = M(q)^-1 G(q)^T gamma, on the squeezer."""
    mech = mechanics(SQUEEZER.system, SQUEEZER.q0)
    rng = np.random.default_rng(0)
    q = jnp.asarray(SQUEEZER.q0 + 0.3 * rng.normal(size=7))
    p, gam = jnp.asarray(rng.normal(size=7)), jnp.asarray(rng.normal(size=6))

    def psi(q, p):
        return gam @ (mech.G(q) @ jnp.linalg.inv(mech.M(q)) @ p)

    a, w = ggl_mass.solve_at(mech, q, gam, p)
    d1 = ggl_mass.secondary_q_term(mech, q, gam, w, a)
    np.testing.assert_allclose(d1, jax.grad(psi, 0)(q, p), rtol=1e-9, atol=1e-9 * np.max(np.abs(d1)))
    np.testing.assert_allclose(a, jax.grad(psi, 1)(q, p), rtol=1e-9, atol=1e-9 * np.max(np.abs(a)))
    np.testing.assert_allclose(ggl_mass.secondary(mech, q, p), mech.G(q) @ jnp.linalg.inv(mech.M(q)) @ p, rtol=1e-9)


def _vi_s_action(mech, h, q, v, p, lam, gam):
    """KBS23b eq 52 with g_v(q, p) = G(q) M(q)^-1 p (KBS23b Remark 3), over N steps: q^0..q^N, v^n and
    p^{n+1}, gamma^{n+1} (n = 0..N-1), lambda^1..lambda^{N-1} (the last one belongs to the next step)."""

    def g_v(y, pp):
        return mech.G(y) @ jnp.linalg.solve(mech.M(y), pp)

    S = 0.0
    for n in range(q.shape[0] - 1):
        qbar = q[n] + h * v[n]
        S = S + h * mech.L(q[n], v[n]) + p[n] @ (q[n + 1] - q[n] - h * v[n]) - h * gam[n] @ g_v(qbar, p[n])
        if n + 1 < q.shape[0] - 1:
            S = S - h * lam[n] @ mech.g(q[n + 1])
    return S


def _assert_stationary(dq, dv, dp, h, sol, mech):
    """The gradient blocks of an action sum at the scheme's steps, each against the size of its terms:
    in q (interior nodes) h |G^T lambda|, in the velocities h |p|, in the momenta (the kinematic
    equation) |q|; Newton was run to round-off."""
    GTlam = jax.vmap(mech.GT_mul)(jnp.asarray(sol.q[:-1]), jnp.asarray(sol.lam))
    for name, grad, size in (
        ("q", dq, h * float(np.max(np.abs(GTlam)))),
        ("v", dv, h * float(np.max(np.abs(sol.p)))),
        ("p", dp, float(np.max(np.abs(sol.q)))),
    ):
        worst = float(np.max(np.abs(np.asarray(grad))))
        assert worst <= 1e-12 * size, (name, worst / size)


def test_vi_s_is_a_stationary_point_of_its_discrete_action():
    """The steps of ggl-vi on the squeezer make the gradient of the discrete action (written out
    above, differentiated by JAX) vanish in every interior variable: the scheme is the discrete
    Euler-Lagrange equations of KBS23b eq 52 with M(q) (livens' derivation, docs/theory/ggl-mass.md).
    (The gradients in lambda and gamma are the constraints, checked with the enforced residuals.)"""
    h, N = 2e-5, 6
    sol = run(SQUEEZER, "VI-S", h, N * h, tol="roundoff")
    mech = mechanics(SQUEEZER.system, SQUEEZER.q0)
    q, v, p = jnp.asarray(sol.q), jnp.asarray(sol.v), jnp.asarray(sol.p[1:])
    lam, gam = jnp.asarray(sol.lam[1:]), jnp.asarray(sol.gam)
    dq, dv, dp = jax.grad(_vi_s_action, argnums=(2, 3, 4))(mech, h, q, v, p, lam, gam)
    _assert_stationary(dq[1:-1], dv, dp, h, sol, mech)
    # and it is not stationary for a perturbed trajectory (the check can fail)
    bad = jax.grad(_vi_s_action, argnums=2)(mech, h, q.at[2, 0].add(1e-9), v, p, lam, gam)
    with pytest.raises(AssertionError):
        _assert_stationary(bad[1:-1], dv, dp, h, sol, mech)


def _theta_action(mech, h, theta, option, vartheta, q, v, p, P, lam, gam):
    """KBS23b eq 56 with L_d = h L(q^{n+theta}, v^{n+1}), f_d = h v^{n+1} + h M(q^{n+theta})^-1
    G(q^{n+theta})^T gamma^n (eq 58, 66 with M at q^{n+theta}) and g_d of option A (eq 77) or B (eq 80),
    with Q^n = q^{n+1} (eq 61): q^0..q^N, v^{n+1}, p^{n+1}, P^n, lambda^n, gamma^n (n = 0..N-1)."""
    S = 0.0
    for n in range(q.shape[0] - 1):
        qt = (1.0 - theta) * q[n] + theta * q[n + 1]
        fd = h * v[n] + h * jnp.linalg.solve(mech.M(qt), mech.G(qt).T @ gam[n])
        if option == "A":
            gd = h * mech.g(qt)
        else:
            gd = h * ((1.0 - vartheta) * mech.g(q[n]) + vartheta * mech.g(q[n + 1]))
        S = S + h * mech.L(qt, v[n]) - lam[n] @ gd + (p[n] + P[n]) @ (q[n + 1] - q[n] - fd)
    return S


@pytest.mark.parametrize(
    "scheme,option,params",
    [
        ("ggl-theta-a", "A", {"theta": 0.5}),
        ("ggl-theta-a", "A", {"theta": 0.3}),
        ("ggl-theta-b", "B", {"theta": 1.0, "vartheta": 0.5}),
        ("ggl-theta-b", "B", {"theta": 0.5, "vartheta": 0.3}),
    ],
)
def test_theta_schemes_are_stationary_points_of_their_discrete_action(scheme, option, params):
    """As for VI-S, for the one-stage family (KBS23b eq 56-76 with M(q)): the auxiliary momentum is
    P^n = M(q^{n+theta}) v^{n+1} - p^{n+1} (eq 70 with M(q^{n+theta})); every partial derivative of the
    action sum vanishes at the scheme's steps (Q^n = q^{n+1} by eq 61, so the variations in q^{n+1}
    collect the Q^n terms)."""
    h, N = 2e-5, 6
    sol = run(SQUEEZER, scheme, h, N * h, tol="roundoff", **params)
    mech = mechanics(SQUEEZER.system, SQUEEZER.q0)
    theta, vt = params["theta"], params.get("vartheta", 0.5)
    q, v, p = jnp.asarray(sol.q), jnp.asarray(sol.v), jnp.asarray(sol.p[1:])
    qt = (1.0 - theta) * q[:-1] + theta * q[1:]
    P = jax.vmap(lambda y, w: mech.M(y) @ w)(qt, v) - p
    lam, gam = jnp.asarray(sol.lam), jnp.asarray(sol.gam)
    args = (mech, h, theta, option, vt)
    dq, dv, dp, dP = jax.grad(_theta_action, argnums=(5, 6, 7, 8))(*args, q, v, p, P, lam, gam)
    # p^{n+1} and P^n multiply the same kinematic equation (Q^n = q^{n+1}): one check serves both
    _assert_stationary(dq[1:-1], dv, jnp.concatenate([dp, dP]), h, sol, mech)
    bad = jax.grad(_theta_action, argnums=5)(*args, q.at[3, 1].add(1e-9), v, p, P, lam, gam)
    with pytest.raises(AssertionError):
        _assert_stationary(bad[1:-1], dv, dp, h, sol, mech)


def _constant_as_function(problem):
    """The same problem with its constant M given as a function that formally depends on q: the
    configuration-dependent code path (livens.mechanics.constant_mass_value is conservative)."""
    M = np.asarray(problem.system.mass_matrix)
    if problem.system.parameters:
        system = dataclasses.replace(problem.system, mass_matrix=lambda q, par: jnp.asarray(M) + 0.0 * q[0])
    else:
        system = dataclasses.replace(problem.system, mass_matrix=lambda q: jnp.asarray(M) + 0.0 * q[0])
    return problem.replace(system=system)


@pytest.mark.parametrize("scheme", ["VI-S", "VI-A", "VI-B", "EM"])
def test_the_configuration_path_reduces_to_the_constant_one(scheme):
    """With a constant M given as a function of q (taken for configuration dependent), the M(q)
    equations give the constant-M scheme's trajectory to round-off (3D pendulum, KBS23b §6.1, 40 steps)."""
    pr = lv.examples.load("pendulum-3d")
    fn = _constant_as_function(pr)
    assert not mechanics(fn.system, fn.q0).constant_mass
    a = lv.simulate(pr, scheme, t_end=40 * pr.h, tol=1e-13, progress=False)
    b = lv.simulate(fn, scheme, t_end=40 * pr.h, tol=1e-13, progress=False)
    assert np.max(np.abs(a.q - b.q)) <= 1e-12
    assert np.max(np.abs(a.p - b.p)) <= 1e-12
    assert np.max(np.abs(a.lam - b.lam)) <= 1e-10 * np.max(np.abs(a.lam))


# ------------------------------------------------------------------ physics against SciPy
def _order(problem, scheme, hs, t_end, reference):
    errors = [np.max(np.abs(run(problem, scheme, h, t_end).q[-1] - reference)) for h in hs]
    return float(np.polyfit(np.log(hs), np.log(errors), 1)[0]), errors


@pytest.mark.parametrize("scheme", list(ORDERS))
def test_orders_on_the_squeezer_against_scipy(scheme):
    """Errors of q at t = 0.002 (200 steps of 1e-5 at the finest) against the index-1 reference:
    VI-S 1, VI-A 2, VI-B 1, EM 2 (measured slopes 0.999-2.000)."""
    q_ref, _ = squeezer_reference(0.002)
    order, errors = _order(SQUEEZER, scheme, [4e-5, 2e-5, 1e-5], 0.002, q_ref)
    assert abs(order - ORDERS[scheme]) <= 0.05, (order, errors)
    assert errors[-1] >= 1e3 * 1e-12  # well above the reference's own error


HIGHER_ORDERS = {
    # scheme, stages: (order, step sizes in the asymptotic range where the error stays 100x above
    # the reference's: measured slopes 4.00, 5.86-5.93, 4.00)
    ("ggl-galerkin", 2): (4, [2e-4, 1e-4, 5e-5]),
    ("ggl-galerkin", 3): (6, [5e-4, 4e-4, 2.5e-4]),
    ("ggl-spark", 3): (4, [2e-4, 1e-4, 5e-5]),
}


@pytest.mark.slow  # each scheme's step compiles for minutes on a 2-core machine
@pytest.mark.parametrize(("scheme", "stages"), list(HIGHER_ORDERS))
def test_higher_orders_on_the_squeezer_against_scipy(scheme, stages):
    """The higher-order GGL schemes on the closed-loop squeezer with its M(q) (three loops, six
    closure equations): q and p at t = 0.002 against the index-1 reference (p = M(q) v with M as
    printed in MM08, not livens' M), Newton to round-off, slopes within 0.2 of 2s (ggl-galerkin)
    and 2s - 2 (ggl-spark)."""
    order, hs = HIGHER_ORDERS[scheme, stages]
    refs = {}
    for rtol in (1e-13, 3e-14):  # the second: how far the reference itself can be trusted
        q_ref, v_ref = squeezer_reference(0.002, rtol)
        refs[rtol] = {"q": q_ref, "p": squeezer_parts(q_ref, v_ref)[0] @ v_ref}
    runs = [run(SQUEEZER, scheme, h, 0.002, tol="roundoff", stages=stages) for h in hs]
    for name in ("q", "p"):
        ref = refs[1e-13][name]
        errors = [np.max(np.abs(getattr(sol, name)[-1] - ref)) for sol in runs]
        slope = float(np.polyfit(np.log(hs), np.log(errors), 1)[0])
        assert abs(slope - order) <= 0.2, (name, slope, errors)
        # p is small at t = 0.002 (the squeezer starts at rest: |p| ~ 7e-5), so the errors' floor
        # is the two references' disagreement (q 2e-16, p 3e-19), not a fixed number
        floor = np.max(np.abs(ref - refs[3e-14][name]))
        assert errors[-1] >= 100 * max(floor, 1e-16 * np.max(np.abs(ref))), (name, errors, floor)


@pytest.mark.parametrize("scheme", list(ORDERS))
def test_orders_on_the_spherical_pendulum_against_scipy(scheme):
    """The same on the pendulum in (r, theta, phi) against its minimal-coordinate equations, t = 0.5."""
    q_ref, _ = pendulum_reference(0.5)
    order, errors = _order(PENDULUM, scheme, [0.01, 0.005, 0.0025], 0.5, q_ref)
    assert abs(order - ORDERS[scheme]) <= 0.1, (order, errors)


DAMPING = 0.3


def _forced_pendulum():
    """The pendulum with the Rayleigh dissipation matrix C = c I and the torque F_phi = cos 2t about the
    vertical: the terms VI-S adds at (q^n, v^n, t^n) (KBS23a eq 57b)."""
    system = dataclasses.replace(
        PENDULUM.system,
        dissipation=lambda q: DAMPING * jnp.eye(3),
        external_force=lambda q, v, t: jnp.array([0.0, 0.0, jnp.cos(2.0 * t)]),
        name="forced-damped-pendulum-in-angles",
    )
    return PENDULUM.replace(system=system, symmetries=(), name="forced-damped-pendulum-in-angles")


def _forced_pendulum_reference(t_end):
    """Lagrange's equations in (theta, phi) with the same forces (m = l = 1):
    theta'' = sin cos phi'^2 + g sin - c theta',  sin^2 phi'' = -2 sin cos theta' phi' - c phi' + cos 2t."""
    from _configuration_mass import GRAVITY
    from scipy.integrate import solve_ivp

    def rhs(t, y):
        th, ph, dth, dph = y
        s, c = np.sin(th), np.cos(th)
        return [
            dth,
            dph,
            s * c * dph**2 + GRAVITY * s - DAMPING * dth,
            (-2.0 * s * c * dth * dph - DAMPING * dph + np.cos(2.0 * t)) / s**2,
        ]

    sol = solve_ivp(rhs, (0.0, t_end), [np.pi / 2, 0.0, 0.0, 1.0], method="DOP853", rtol=1e-13, atol=1e-13)
    return np.array([1.0, sol.y[0, -1], sol.y[1, -1]])


def test_vi_s_damping_and_external_force_with_configuration_dependent_mass():
    """VI-S is the GGL scheme with dissipation and external forces: with M(q) it converges with order 1
    to the forced, damped pendulum of the minimal-coordinate equations (SciPy), t = 0.5."""
    problem = _forced_pendulum()
    order, errors = _order(problem, "VI-S", [0.01, 0.005, 0.0025], 0.5, _forced_pendulum_reference(0.5))
    assert abs(order - 1.0) <= 0.1, (order, errors)
    # the forces matter: the undamped, unforced pendulum is far from this reference
    assert np.max(np.abs(run(PENDULUM, "VI-S", 0.0025, 0.5).q[-1] - _forced_pendulum_reference(0.5))) > 10 * errors[-1]


@pytest.mark.parametrize("problem", [SQUEEZER, PENDULUM], ids=["squeezer", "pendulum"])
@pytest.mark.parametrize("scheme", list(ORDERS))
def test_enforced_constraints_at_the_newton_tolerance(problem, scheme):
    """Each scheme meets what it enforces (VI-S g(q^{n+1}), G(q_bar) M(q_bar)^-1 p^{n+1}; VI-A g and
    G v at q^{n+1/2}; VI-B g(q^{n+1}), G(q^{n+1}) v^{n+1}; EM g and G M^-1 p at q^{n+1}) to the Newton
    tolerance."""
    h = 1e-5 if problem is SQUEEZER else 0.01
    sol = run(problem, scheme, h, 100 * h)
    enforced = sol.enforced_residuals()
    assert len(enforced) == 2
    scale = 1.0 if problem is PENDULUM else 10.0  # the squeezer's rows are sums of terms of size ~1e1
    for name, r in enforced.items():
        assert np.max(np.abs(r)) <= scale * 1e-12, (name, np.max(np.abs(r)))


# ------------------------------------------------------------------ what EM and the VIs keep
def _energy_increments(sol):
    """|E^{n+1} - E^n| of E(q, v, p) = p.v - T + V, and the size of its terms, max_n |p.v| + |T| + |V|
    (the scale of its round-off: near the pendulum's bottom p.v ~ 20 while E = 0.5)."""
    energy = sol.energy()
    E = np.asarray(energy["livens"])
    pv = np.einsum("ni,ni->n", sol.p, sol.v)
    size = np.max(np.abs(pv) + np.abs(energy["kinetic"]) + np.abs(energy["potential"]))
    return np.abs(np.diff(E)), size


def test_em_generalized_energy_per_step_at_round_off():
    """EM with Newton to round-off: |E^{n+1} - E^n| of E(q, v, p) = p.v - L(q, v) (KB23 eq 31) stays at
    a few ulps of the size of its terms over 2000 steps of the squeezer (h = 1e-5) and 1000 of the
    pendulum (h = 0.01); VI-A, not energy-consistent, changes T + V by far more."""
    for problem, h, n in ((SQUEEZER, 1e-5, 2000), (PENDULUM, 0.01, 1000)):
        dE, size = _energy_increments(run(problem, "EM", h, n * h, tol="roundoff"))
        assert np.max(dE) <= 50 * np.finfo(float).eps * size, (problem.name, np.max(dE) / size)
    sol = run(PENDULUM, "VI-A", 0.01, 10.0)
    T = np.asarray(sol.energy()["total"])
    assert np.max(np.abs(np.diff(T))) > 1e-6


@pytest.mark.parametrize("scheme", list(ORDERS))
def test_cyclic_momentum_map_is_conserved(scheme):
    """p_phi of the pendulum's cyclic angle (the translation phi -> phi + alpha, an exact symmetry
    of V, g and M(q)) over 1000 steps: to round-off for the variational schemes (discrete Noether,
    KBS23b App. A.6-A.7) and for EM (its discrete gradients orthogonal to the generator)."""
    sol = run(PENDULUM, scheme, 0.01, 10.0)
    J = sol.momentum_maps()["p_phi"]
    assert np.max(np.abs(J - J[0])) <= 1e-13 * abs(J[0])
    # the motion is not trivial: phi turns and theta swings
    assert np.ptp(sol.q[:, 2]) > 1.0 and np.ptp(sol.q[:, 1]) > 1.0


def _bead(symmetric=True):
    """A bead on the paraboloid z = (x^2 + y^2) / 2 under gravity with the rotation-invariant mass
    matrix M(q) = m I + c q q^T (M(Rq) = R M(q) R^T for every rotation R about e3): a rotation whose
    generator moves v (xi v != 0), unlike the pendulum's cyclic angle."""
    system = lv.System(
        mass_matrix=lambda q: jnp.eye(3) + 0.5 * jnp.outer(q, q),
        potential=lambda q: 9.81 * q[2],
        constraints=lambda q: jnp.array([q[2] - 0.5 * (q[0] ** 2 + q[1] ** 2)]),
        name="bead-on-paraboloid",
    )
    sym = [lv.Symmetry.rotation([0.0, 0.0, 1.0], name="J3")] if symmetric else []
    return lv.Problem(system, q0=[1.0, 0.0, 0.5], v0=[0.0, 1.5, 0.0], h=0.02, t_end=4.0, symmetries=sym, name="bead")


@pytest.mark.parametrize("scheme", list(ORDERS))
def test_rotation_momentum_map_with_configuration_dependent_mass(scheme):
    """J3 = x p_y - y p_x of the bead over 200 steps with Newton to round-off: the variational
    schemes by discrete Noether (g_v(Rq, R p) = g_v(q, p) makes their discrete actions invariant), EM by
    its symmetric correction with the target D^G_v L . xi v^{n+1/2} + gamma . D^G_p g_v xi^T p^{n+1/2}
    (docs/theory/ggl-mass.md); EM also keeps E(q, v, p) per step. Without the declared symmetry EM's J3
    drifts (the check can fail)."""
    sol = run(_bead(), scheme, 0.02, 4.0, tol="roundoff")
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(J - J[0])) <= 1e-14 * abs(J[0]), np.max(np.abs(J - J[0]))
    assert np.ptp(np.hypot(sol.q[:, 0], sol.q[:, 1])) > 0.3  # the bead climbs and falls: M(q) changes
    if scheme == "EM":
        dE, size = _energy_increments(sol)
        assert np.max(dE) <= 50 * np.finfo(float).eps * size, np.max(dE) / size
        plain = lv.simulate(_bead(False), "EM", tol="roundoff", progress=False)
        J_plain = plain.q[:, 0] * plain.p[:, 1] - plain.q[:, 1] * plain.p[:, 0]
        assert np.max(np.abs(J_plain - J_plain[0])) > 1e-9


def test_em_with_the_potential_in_invariants_and_configuration_dependent_mass():
    """The same with a potential declared in invariants (Greenspan's discrete gradient for V, KBS23b
    eq 122-126, the other terms corrected around it): V = g z + 0.3 (x^2 + y^2)^2 with the invariants
    z and x^2 + y^2. E(q, v, p) per step and J3 to round-off."""
    bead = _bead()
    system = dataclasses.replace(
        bead.system,
        potential=lambda q: 9.81 * q[2] + 0.3 * (q[0] ** 2 + q[1] ** 2) ** 2,
        invariants=(
            lambda q: jnp.array([q[2], q[0] ** 2 + q[1] ** 2]),
            lambda pi: jnp.array([9.81 * pi[0], 0.3 * pi[1] ** 2]),
        ),
    )
    problem = bead.replace(system=system)
    assert mechanics(system, problem.q0).invariants is not None
    sol = lv.simulate(problem, "EM", tol="roundoff", progress=False)
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(J - J[0])) <= 1e-14 * abs(J[0]), np.max(np.abs(J - J[0]))
    dE, size = _energy_increments(sol)
    assert np.max(dE) <= 50 * np.finfo(float).eps * size, np.max(dE) / size


def test_em_keeps_the_generalized_energy_not_the_total_energy():
    """For M(q), p^n = M(q^n) v^n does not hold (KB23 Prop. 5.5): E(q, v, p) is conserved, T + V only
    to O(h^2) (KB23 Fig. 7)."""
    sol = run(PENDULUM, "EM", 0.01, 10.0)
    E = sol.energy()
    assert np.max(np.abs(E["livens"] - E["livens"][0])) <= 1e-10
    assert np.max(np.abs(E["total"] - E["total"][0])) > 1e-8
    Mv = np.asarray(jax.vmap(lambda q, v: mechanics(PENDULUM.system, PENDULUM.q0).M(q) @ v)(sol.q, sol.v))
    assert np.max(np.abs(Mv - sol.p)) > 1e-8


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("scheme", ["ggl-vi", "ggl-theta-a", "ggl-theta-b", "ggl-em"])
def test_singular_mass_is_refused_naming_the_schemes_that_accept_it(scheme):
    """g_v = G M^-1 p needs M^-1: a singular M (KB23 §6.1) is refused before any step, naming the
    schemes that run it; so is an M(q) singular at q0 (the spring pendulum at the pole)."""
    singular = lv.examples.load("redundant-mass-spring")
    with pytest.raises(ValueError, match=r"needs M\^-1, but the mass matrix of this system is singular") as info:
        lv.simulate(singular, scheme, h=0.1, t_end=0.2, progress=False)
    msg = str(info.value)
    assert all(n in msg for n in ("livens-em", "livens-midpoint", "vi-lagrange", "vi-nullspace"))
    assert "ggl-" not in msg.split("accept it:")[1]
    pole = lv.examples.load("spring-pendulum-spherical", q0=(1.05, 0.0, 0.0), v0=(0.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="singular at q0"):
        lv.simulate(pole, scheme, h=0.01, t_end=0.02, progress=False)


@pytest.mark.parametrize("scheme", ["VI-S", "EM"])
def test_gradients_through_the_flow_with_configuration_dependent_mass(scheme):
    """jax.grad of theta after 20 steps with respect to the initial velocity, through ``lv.flow``
    (the implicit derivative of every step's Newton solution), against central differences of the
    same function (the start is projected onto the manifold, so only directions along it count)."""
    F = lv.flow(PENDULUM, scheme, n_steps=20)
    q0 = jnp.asarray(PENDULUM.q0)

    def theta(v0):
        return F(q0, v0).q[-1, 1]

    v0 = jnp.asarray(PENDULUM.v0)
    grad = np.asarray(jax.grad(theta)(v0))
    for k in (1, 2):  # the tangent directions theta-dot, phi-dot
        e = np.zeros(3)
        e[k] = 1e-6
        fd = (float(theta(v0 + e)) - float(theta(v0 - e))) / 2e-6
        assert abs(grad[k] - fd) <= 1e-6 * max(abs(fd), 1e-2), (k, grad[k], fd)


def test_the_example_runs_from_the_command_line(tmp_path):
    """``livens run andrews-squeezer`` with a GGL scheme writes its file; the run's E(q, v, p) is
    EM's conserved quantity."""
    from livens.cli import main

    out = tmp_path / "run"
    assert main(["run", "andrews-squeezer", "--scheme", "EM", "--t-end", "0.0005", "--out", str(out), "--quiet"]) == 0
    sol = lv.load(out / "andrews-squeezer_EM.nc")
    assert sol.n_steps == 50
    E = np.asarray(sol.energy()["livens"])
    assert np.max(np.abs(E - E[0])) <= 1e-8 * abs(E[0])


# ------------------------------------------------------------------ slow: the whole interval
@pytest.mark.slow
@pytest.mark.parametrize("scheme", list(ORDERS))
def test_orders_on_the_squeezer_over_hw96s_interval(scheme):
    """Over the whole interval t = 0.03 (6000 steps of 5e-6 at the finest): the same orders against
    the Test Set's published solution (measured slopes 1.025, 2.000, 0.974, 2.000; with 4e-5 as the
    coarsest step VI-S and VI-B are still at 1.05 and 0.95)."""
    order, errors = _order(SQUEEZER, scheme, [2e-5, 1e-5, 5e-6], TEST_SET_T, TEST_SET_Q)
    assert abs(order - ORDERS[scheme]) <= 0.05, (order, errors)


@pytest.mark.slow
def test_em_generalized_energy_over_ten_thousand_steps():
    """10^4 steps of the squeezer (h = 3e-6 over HW96's interval) with Newton to round-off: every
    increment of E(q, v, p) at a few ulps, and no drift beyond the sum of them."""
    sol = run(SQUEEZER, "EM", 3e-6, 0.03, tol="roundoff")
    assert sol.n_steps == 10000
    dE, size = _energy_increments(sol)
    assert np.max(dE) <= 50 * np.finfo(float).eps * size, np.max(dE) / size
    E = np.asarray(sol.energy()["livens"])
    assert np.max(np.abs(E - E[0])) <= 1e-11 * size
