"""livens-em at default settings fails no step of a sweep of forcing values (the issue's "done when"):
livens' default stopping rule accepts a residual that has reached its round-off floor relative to the
scale of the step's terms (:func:`livens.solvers.newton.relative_floor`), and still fails a step whose
Newton iteration does not converge.

The system is the optimal-control example of docs/guide/gradients.md: two masses on unit rods hanging
at rest, a horizontal force u on the second one (here the same in every interval), swept over 400
values with ``jax.vmap`` through :func:`livens.flow` at its defaults (tol = 1e-12, max_iter = 40).
Small forces make the first steps' increments q^{n+1} - q^n about 1e-6 |q|, where livens-em's discrete
gradient divides the round-off of V(q^{n+1}) - V(q^n) by them: its residual stalls at 1e-12 to 1e-9,
above tol, the more the larger h and the heavier the masses.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver import Arrays, Implicit, InGraph, NaNFlag, run
from livens.solvers import newton as newton_module
from livens.solvers.newton import FLOOR_FACTOR, newton

TOL = 1e-12  # lv.flow's default
OLD_FLOOR = 100 * TOL  # livens' floor before this rule: a residual that stopped halving at most 100 tol


def _double_pendulum(mass: float = 1.0):
    """The docs' forced double pendulum with masses ``mass`` (the docs': 1)."""

    def rods(q, par):
        x1, x2 = q[:3], q[3:]
        return jnp.array([0.5 * (x1 @ x1 - 1.0), 0.5 * ((x2 - x1) @ (x2 - x1) - 1.0)])

    def force(q, v, t, par):  # u_k e1 on the second mass in interval k (1e-9: t = n h rounded)
        k = jnp.clip(jnp.floor(t / 0.1 + 1e-9).astype(jnp.int32), 0, 9)
        return jnp.zeros(6).at[3].set(par["u"][k])

    system = lv.System(
        mass_matrix=mass * np.eye(6),
        potential=lambda q, par: mass * 9.81 * (q[2] + q[5]),
        constraints=rods,
        external_force=force,
        parameters={"u": np.zeros(10)},
    )
    return lv.Problem(system, q0=[0, 0, -1.0, 0, 0, -2.0], v0=np.zeros(6))


def _sweep(F, problem, forces):
    call = jax.jit(jax.vmap(lambda u: F(problem.q0, problem.v0, {"u": jnp.full(10, u)})))
    return call(jnp.asarray(forces))


def _failed(result) -> np.ndarray:
    return np.flatnonzero(~np.asarray(result.converged))


def test_the_issues_sweep_fails_no_step_at_default_settings_where_the_papers_rule_fails_four():
    """The issue's case: 400 forces in [-10, 10] at h = 0.01. The papers' rule ||R|| <= tol (livens'
    rule before its floor) fails the members u = +-0.025 and u = +-0.33, whose residual stalls at
    2.2e-12 to 2.6e-12; the default rule fails none, and the nodes meet the constraints."""
    problem = _double_pendulum()
    forces = np.linspace(-10.0, 10.0, 400)
    res = _sweep(lv.flow(problem, "livens-em", h=0.01, n_steps=10), problem, forces)
    assert _failed(res).size == 0
    resid = np.asarray(res.residual)
    assert np.any(resid > TOL)  # steps that only the floor rule accepts
    q = np.asarray(res.q)
    x1, x2 = q[..., :3], q[..., 3:]
    assert np.max(np.abs(np.sum(x1 * x1, -1) - 1.0)) < 1e-10
    assert np.max(np.abs(np.sum((x2 - x1) ** 2, -1) - 1.0)) < 1e-10

    papers = run(
        problem,
        "livens-em",
        h=0.01,
        n_steps=10,
        tol=TOL,
        executor=InGraph(None),
        output=Arrays(1),
        on_failure=NaNFlag(),
        adjoint=Implicit(),
        accept_floor=False,
    )
    failed = _failed(_sweep(papers, problem, forces))
    np.testing.assert_allclose(np.sort(np.abs(forces[failed])), [0.0251, 0.0251, 0.3258, 0.3258], atol=1e-4)


@pytest.mark.parametrize(
    "mass, h, n_steps, forces",
    [
        # the docs' masses at the docs' force interval h = 0.1: floors up to 1.6e-10
        (1.0, 0.1, 10, np.geomspace(1e-5, 100.0, 200)),
        # 100 kg masses at h = 0.01: floors up to 2e-9
        (100.0, 0.01, 20, np.geomspace(1e-3, 1e4, 200)),
    ],
)
def test_a_floor_above_a_hundred_tol_is_accepted_relative_to_the_scale_of_the_terms(mass, h, n_steps, forces):
    """Where the floor lies above 100 tol, the floor absolute in tol (livens' rule before this one:
    a residual that stopped halving at most 100 tol) fails members (4 and 102 of these 400); the
    floor relative to the size s of the step's terms, 1e4 tol (1 + s) with s = max(||R(x0)||_inf,
    ||J(x0) x0||_inf), accepts every one, and the nodes agree with those of Newton iterated to
    round-off."""
    problem = _double_pendulum(mass)
    forces = np.concatenate([forces, -forces])
    res = _sweep(lv.flow(problem, "livens-em", h=h, n_steps=n_steps), problem, forces)
    assert _failed(res).size == 0
    resid = np.asarray(res.residual)
    assert np.max(resid) > OLD_FLOOR  # steps the floor of 100 tol does not accept
    roundoff = _sweep(lv.flow(problem, "livens-em", h=h, n_steps=n_steps, tol="roundoff"), problem, forces)
    ok = np.asarray(roundoff.converged)  # (the round-off rule fails some members: not the default)
    assert ok.mean() > 0.9
    np.testing.assert_allclose(np.asarray(res.q)[ok], np.asarray(roundoff.q)[ok], rtol=0, atol=1e-9)


def test_the_scale_of_a_heavy_free_body_is_its_momentum():
    """A free body of 1e6 kg pushed by a force: no constraint forces, and the residual's terms M v of
    size 1e6 (J(x0) x0 = M v^n) put its floor near 1e-9."""
    system = lv.System(
        mass_matrix=1e6 * np.eye(2),
        potential=lambda q, par: 0.0 * q[0],
        external_force=lambda q, v, t, par: jnp.array([par["u"], 0.3 * par["u"]]),
        parameters={"u": 0.0},
    )
    problem = lv.Problem(system, q0=[0.0, 0.0], v0=[1.0, 2.0])
    F = lv.flow(problem, "livens-em", h=0.01, n_steps=50)
    forces = np.geomspace(1e-1, 1e7, 40)
    res = jax.jit(jax.vmap(lambda u: F(problem.q0, problem.v0, {"u": u})))(jnp.asarray(forces))
    assert bool(np.all(np.asarray(res.converged)))
    assert np.max(np.asarray(res.residual)) > OLD_FLOOR


def test_a_step_that_newton_does_not_solve_still_fails_with_the_advice():
    """A force of 1000 at h = 0.1 is too much for Newton in step 7: its residual stays at 1e7, far
    from any round-off floor; lv.simulate and lv.flow fail the step and advise on h, max_iter and the
    guess, and the member of a sweep with that force fails while the others converge."""
    problem = _double_pendulum()
    u = np.full(10, 1000.0)
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(problem, "livens-em", h=0.1, t_end=1.0, tol=TOL, rescue=False, progress=False, parameters={"u": u})
    assert info.value.step == 6 and info.value.residual > 1.0
    assert info.value.reason.endswith("Try a smaller h, a larger max_iter or another guess.")
    F = lv.flow(problem, "livens-em", h=0.1, n_steps=10)
    with pytest.raises(lv.ConvergenceError, match="Try a smaller h, a larger max_iter or another guess."):
        F(jnp.asarray(problem.q0), jnp.asarray(problem.v0), {"u": jnp.asarray(u)})
    res = _sweep(F, problem, np.array([1.0, 1000.0, 10.0]))
    assert _failed(res).tolist() == [1] and int(np.asarray(res.failed_step)[1]) == 6


def test_an_iteration_that_runs_away_is_not_taken_for_a_floor(monkeypatch):
    """R(x) = (x_0 - 1, 5e-11 arctan(x_1)) from x = (0, 1.5): Newton's x_1 runs away (x_1 -> inf)
    while ||R|| stalls at 7.9e-11, between tol and the floor 1e4 tol (1 + s) = 2e-8 (s = ||R(x0)|| =
    1). Its increments are of the size of x_1, not below FLOOR_STEP (1 + ||x0||): the floor does not
    count, and the iteration fails; without that guard it would stop, "converged", far from any root."""

    def residual(x):
        return jnp.array([x[0] - 1.0, 5e-11 * jnp.arctan(x[1])])

    x0 = jnp.array([0.0, 1.5])
    res = jax.jit(lambda x: newton(residual, x, TOL, 40, floor_factor=FLOOR_FACTOR))(x0)
    assert not bool(res.converged)
    monkeypatch.setattr(newton_module, "FLOOR_STEP", np.inf)
    unguarded = jax.jit(lambda x: newton(residual, x, TOL, 40, floor_factor=FLOOR_FACTOR))(x0)
    assert bool(unguarded.converged) and abs(float(unguarded.x[1])) > 1.0  # the root: x_1 = 0
    assert TOL < float(unguarded.residual) < FLOOR_FACTOR * TOL * 2


def test_the_rule_and_its_scale_are_stated_in_the_metadata():
    problem = _double_pendulum()
    sol = lv.simulate(problem, "livens-em", h=0.01, t_end=0.05, progress=False)
    rule = sol.meta["stopping"]
    assert "at most 10000 tol (1 + s) after a Newton increment below 0.001 (1 + min(||x0||_inf, ||x||_inf))" in rule
    assert "s = max(||R(x0)||_inf, ||J(x0) x0||_inf)" in rule, rule
    papers = lv.simulate(problem, "livens-em", h=0.01, t_end=0.05, progress=False, accept_floor=False)
    assert papers.meta["stopping"] == "||R||_inf <= tol (the papers' rule)"
