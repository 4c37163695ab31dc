"""Consistent starts, differentiably, and the symmetries of each call (lv.flow).

Checked against closed forms: the projection of a point onto the pendulum's sphere of radius L is
L q0/|q0| (the normal direction at q0 is radial), of a velocity the removal of its radial part;
their derivatives follow. lv.flow maps an off-manifold start onto the manifold of the call's
parameter values (node 0 on it to round-off, the same run as lv.simulate from the projected state),
so that the gradient in q0 has no normal part and a parameter derivative with q0 held fixed is
that of a consistent start (EM's energy error, zero to round-off for every rod length, has zero
derivative). With consistent=False an inconsistent start is refused or fails the run. A parameter
value that breaks a declared symmetry is run without it (concrete values, as lv.simulate does; traced
values: tests/test_flow_optimisers.py), and a traced value that breaks one only away from the values
at which it was checked fails the run with a message naming it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver.ingraph import START, SYMMETRY


def _pendulum():
    return lv.examples.load("pendulum-3d")


def test_consistent_initial_state_is_the_closed_form_projection_under_jit_grad_vmap():
    system = _pendulum().system
    rng = np.random.default_rng(0)
    q0s = jnp.asarray(rng.standard_normal((5, 3)))
    v0s = jnp.asarray(rng.standard_normal((5, 3)))
    Ls = jnp.asarray(rng.uniform(0.5, 2.0, 5))

    def project(q, v, L):
        return lv.consistent_initial_state(system, q, v, parameters={"length": L})

    q, v = jax.jit(jax.vmap(project))(q0s, v0s, Ls)
    r = np.linalg.norm(np.asarray(q0s), axis=1, keepdims=True)
    q_exact = np.asarray(Ls)[:, None] * np.asarray(q0s) / r
    u = q_exact / np.linalg.norm(q_exact, axis=1, keepdims=True)
    v_exact = np.asarray(v0s) - np.sum(np.asarray(v0s) * u, axis=1, keepdims=True) * u
    np.testing.assert_allclose(np.asarray(q), q_exact, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(v), v_exact, rtol=0, atol=1e-13)
    # derivatives: dq/dL = q0/|q0|, dq/dq0 = L/|q0| (I - u u^T)
    q0, v0, L = q0s[0], v0s[0], float(Ls[0])
    for jac in (jax.jacfwd, jax.jacrev):
        dL = jac(lambda L: project(q0, v0, L)[0])(L)
        dq = jac(lambda q: project(q, v0, L)[0])(q0)
        np.testing.assert_allclose(np.asarray(dL), q_exact[0] / L, atol=1e-13)
        np.testing.assert_allclose(np.asarray(dq), L / r[0, 0] * (np.eye(3) - np.outer(u[0], u[0])), atol=1e-13)
    # concrete values: NumPy-like input accepted, a hopeless start refused with the residual
    q, v = lv.consistent_initial_state(system, [1.01, 0.02, 0.0], [0.1, 1, 0])
    assert abs(float(q @ q) - 1) < 1e-13 and abs(float(q @ v)) < 1e-13
    with pytest.raises(ValueError, match="could not project q0 onto g"):
        lv.consistent_initial_state(system, [0.0, 0.0, 0.0], [0.0, 1.0, 0.0])


def test_a_singular_mass_matrix_projects_the_velocity_euclidean():
    """KB23 §6.1's redundant mass-spring system (singular M): v0 is projected orthogonally onto
    G(q) v = 0 (M is not a metric there): v - v0 lies in the range of G(q)^T."""
    problem = lv.examples.load("redundant-mass-spring")
    q, v = lv.consistent_initial_state(problem.system, [0.1, 1.3, 0.2], [1.0, 0.5, -1.0])
    G = np.array([[-(q[1] - q[0]), q[1] - q[0], 0.0]])
    assert abs(0.5 * ((q[1] - q[0]) ** 2 - 1.1**2)) < 1e-14 and abs(float(G[0] @ v)) < 1e-14
    dv = np.asarray(v) - np.array([1.0, 0.5, -1.0])
    assert np.linalg.norm(dv - G[0] * (G[0] @ dv) / (G[0] @ G[0])) < 1e-14


def test_flow_projects_an_off_manifold_start_or_refuses_it():
    problem = _pendulum()
    q_off = jnp.array([1.0014, 0.0, 0.0])  # off the sphere by 1.4e-3
    v0 = jnp.asarray(problem.v0)
    F = lv.flow(problem, "VI-A", h=0.05, n_steps=40)
    res = F(q_off, v0)
    assert bool(res.converged) and abs(0.5 * (float(res.q[0] @ res.q[0]) - 1.0)) < 1e-14
    q, v = lv.consistent_initial_state(problem.system, q_off, v0)
    sol = lv.simulate(problem.replace(q0=np.asarray(q), v0=np.asarray(v)), "VI-A", h=0.05, t_end=2.0, tol=1e-12)
    np.testing.assert_allclose(np.asarray(res.q), sol.q, rtol=0, atol=1e-12)
    strict = lv.flow(problem, "VI-A", h=0.05, n_steps=40, consistent=False)
    with pytest.raises(ValueError, match=r"off the constraint manifold .* rod"):
        strict(q_off, v0)
    traced = jax.jit(strict._fn)(q_off, v0)
    assert not bool(traced.converged) and int(traced.failure) == START and np.all(np.isnan(np.asarray(traced.q[1:])))
    with pytest.raises(lv.ConvergenceError, match="initial state is not on the constraint manifold"):
        strict.check(traced)


@pytest.mark.parametrize("scheme", ["VI-A", "EM"])
def test_q0_derivatives_are_along_consistent_starts(scheme):
    """The gradient in q0 has no component along the normal G(q0)^T (moving q0 off the sphere
    moves nothing), and moving q0 alone along the sphere (v0 held: its projection follows) is
    the derivative of the runs from those consistent starts (central differences)."""
    problem = _pendulum()
    F = lv.flow(problem, scheme, h=0.05, n_steps=40, tol="roundoff")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray([0.0, 1.0, 0.5])  # v0 off the tangent plane, projected

    def loss(q):
        res = F(q, v0)
        return jnp.sum(res.q[-1] * jnp.array([1.0, 2.0, 3.0])) + 0.3 * jnp.sum(res.p[-1])

    g = np.asarray(jax.grad(loss)(q0))
    normal = np.asarray(q0) / np.linalg.norm(np.asarray(q0))
    assert abs(g @ normal) <= 1e-12 * np.linalg.norm(g)
    tangent = jnp.array([0.0, 0.6, 0.8])

    def along(e):  # q0 rotated on the sphere by e about the axis normal x tangent
        return loss(jnp.cos(e) * q0 + jnp.sin(e) * tangent)

    d = lambda e: (along(e) - along(-e)) / (2 * e)  # noqa: E731
    fd = float((4 * d(5e-4) - d(1e-3)) / 3)
    assert abs(float(g @ np.asarray(tangent)) - fd) <= 1e-8 * abs(fd)


def test_a_parameter_derivative_with_q0_held_is_that_of_consistent_starts():
    """EM conserves the energy to round-off for every rod length, so d(H_N - H_0)/dL vanishes, with
    q0 = (1, 0, 0) held while L moves (projected onto the sphere of radius L each time)."""
    problem = _pendulum()
    F = lv.flow(problem, "EM", h=0.05, n_steps=40, tol="roundoff")
    q0, v0 = jnp.array([1.0, 0.0, 0.0]), jnp.array([0.0, 1.0, 0.0])

    def energy_error(L):
        res = F(q0, v0, {"length": L})
        H = 0.5 * jnp.sum(res.p**2, axis=1) + 9.81 * res.q[:, 2]
        return H[-1] - H[0]

    assert abs(float(energy_error(1.3))) < 1e-12
    assert abs(float(jax.grad(energy_error)(1.3))) < 1e-10
    assert abs(float(jax.jvp(energy_error, (1.3,), (1.0,))[1])) < 1e-10


def _tilted_pendulum():
    """The 3D pendulum under gravity tilted by the angle ``tilt`` from -e3: the rotation about e3
    (J3) is a symmetry only for tilt = 0."""
    system = lv.System(
        mass_matrix=np.eye(3),
        potential=lambda q, par: 9.81 * (jnp.cos(par["tilt"]) * q[2] + jnp.sin(par["tilt"]) * q[0]),
        constraints=lambda q, par: jnp.array([0.5 * (q @ q - 1.0)]),
        parameters={"tilt": 0.0},
    )
    symmetries = [lv.Symmetry.rotation([0, 0, 1], blocks=1, name="J3")]
    return lv.Problem(system, q0=[0.0, 0.6, -0.8], v0=[1.0, 0.0, 0.0], symmetries=symmetries)


def test_symmetries_are_decided_for_the_parameter_values_of_each_call():
    problem = _tilted_pendulum()
    F = lv.flow(problem, "EM", h=0.02, n_steps=100, tol="roundoff")
    res = F(problem.q0, problem.v0, {"tilt": 0.1})  # concrete: J3 dropped for these values
    sol = lv.simulate(problem, "EM", h=0.02, t_end=2.0, tol="roundoff", parameters={"tilt": 0.1})
    np.testing.assert_allclose(np.asarray(res.q), sol.q, rtol=0, atol=1e-12)
    H = 0.5 * np.sum(np.asarray(res.p) ** 2, axis=1) + 9.81 * (np.cos(0.1) * res.q[:, 2] + np.sin(0.1) * res.q[:, 0])
    assert np.max(np.abs(H - H[0])) < 1e-12
    # a tilt that acts only beyond 1 rad: J3 is exact at the values the traced call checks (about the
    # default 0), so it is kept, and a traced value beyond 1 fails the run naming it
    late = problem.replace(
        system=lv.System(
            mass_matrix=np.eye(3),
            potential=lambda q, par: 9.81 * (q[2] + jnp.where(par["tilt"] > 1.0, par["tilt"], 0.0) * q[0]),
            constraints=lambda q, par: jnp.array([0.5 * (q @ q - 1.0)]),
            parameters={"tilt": 0.0},
        )
    )
    G = lv.flow(late, "EM", h=0.02, n_steps=100, tol="roundoff")
    traced = jax.jit(lambda t: G(late.q0, late.v0, {"tilt": t}))
    assert bool(traced(0.5).converged)
    assert G.kept_symmetries(traced=("tilt",)) == ("J3",)
    broken = traced(1.5)
    assert not bool(broken.converged) and int(broken.failure) == SYMMETRY
    assert np.all(np.isnan(np.asarray(broken.q[1:])))
    with pytest.raises(lv.ConvergenceError, match="break the symmetry 'J3'"):
        G.check(broken)


def test_a_start_whose_normal_space_misses_the_manifold_is_still_projected():
    """Three particles: x1 on the unit sphere, x2 = 2 x1, and a non-quadratic distance constraint
    r + r^2 / 5 = 1.2 with r = |x3 - x2|^2. From this q0 the line q0 + G(q0)^T mu does not meet the
    manifold (the fixed-normal Newton iteration, checked here, does not converge); on concrete
    values consistent_initial_state then takes Gauss-Newton steps with the normal space renewed,
    and the result is on the manifold (g and G v computed here)."""
    from livens.consistent_start import _projection
    from livens.mechanics import mechanics

    def g(q):
        x1, x2, x3 = q[:3], q[3:6], q[6:]
        r = (x3 - x2) @ (x3 - x2)
        return jnp.concatenate([jnp.array([0.5 * (x1 @ x1 - 1.0)]), x2 - 2.0 * x1, jnp.array([r + 0.2 * r**2 - 1.2])])

    system = lv.System(mass_matrix=jnp.eye(9), potential=lambda q: 0.0 * q[0], constraints=g)
    q0 = np.array([0.61, -0.6, 0.23, 1.31, 0.27, -1.09, 0.99, 0.94, -0.73])
    v0 = np.linspace(-1.0, 1.0, 9)
    fixed_normal = _projection(mechanics(system, np.zeros(9)), 1e-14, 50)(jnp.asarray(q0), jnp.asarray(v0), None)
    assert not bool(fixed_normal.converged)
    q, v = lv.consistent_initial_state(system, q0, v0)
    assert isinstance(q, np.ndarray)
    assert np.max(np.abs(np.asarray(g(jnp.asarray(q))))) < 1e-14
    G = np.asarray(jax.jacfwd(g)(jnp.asarray(q)))
    assert np.max(np.abs(G @ v)) < 1e-14
