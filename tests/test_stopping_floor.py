"""livens' default Newton stopping rule accepts a residual that stalled at its round-off floor
within FLOOR_FACTOR tol (1 + s), s the size of the step's terms (:func:`livens.solvers.newton.newton`,
``floor_factor``; :func:`livens.solvers.newton.relative_floor`), so that the default settings never
fail a step for round-off; the papers' rule (``accept_floor=False``) does; and a failed step gets the
same diagnosis from :func:`livens.flow` as from :func:`livens.simulate`. The sweeps of forces that the
rule was made for: tests/test_default_tolerance_sweep.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver import Arrays, Implicit, InGraph, NaNFlag, run
from livens.solvers.newton import FLOOR_FACTOR


def _forced_double_pendulum():
    """Two unit masses on unit rods hanging at rest, a horizontal force u_k on the second mass in
    interval k of 0.1 (the optimal-control example of docs/guide/gradients.md)."""

    def rods(q, par):
        x1, x2 = q[:3], q[3:]
        return jnp.array([0.5 * (x1 @ x1 - 1.0), 0.5 * ((x2 - x1) @ (x2 - x1) - 1.0)])

    def force(q, v, t, par):
        k = jnp.clip(jnp.floor(t / 0.1 + 1e-9).astype(jnp.int32), 0, 9)
        return jnp.zeros(6).at[3].set(par["u"][k])

    system = lv.System(
        mass_matrix=np.eye(6),
        potential=lambda q, par: 9.81 * (q[2] + q[5]),
        constraints=rods,
        external_force=force,
        parameters={"u": np.zeros(10)},
    )
    return lv.Problem(system, q0=[0, 0, -1.0, 0, 0, -2.0], v0=np.zeros(6))


def test_a_residual_below_the_floor_that_still_halves_at_max_iter_is_not_converged():
    """The floor counts only where the residual stopped halving: an iteration cut short by max_iter
    while Newton still converges quadratically has not reached round-off, whatever the floor."""
    from livens.solvers.newton import newton

    def cubic(x):
        return jnp.array([x[0] ** 3 - 1.0, x[0] * x[1] - 2.0, jnp.sin(x[2] - 3.0) + x[2] - 3.0])

    x0 = jnp.array([1.03, 2.01, 3.04])
    cut = newton(cubic, x0, 1e-14, 3, floor_factor=1e6)  # floor 1e-8
    assert 1e-14 < float(cut.residual) < 1e-8 and not bool(cut.converged)
    done = newton(cubic, x0, 1e-14, 40, floor_factor=1e6)
    assert bool(done.converged) and float(done.residual) <= 1e-14


def _sweep(F, problem, forces):
    return jax.vmap(lambda u: F(problem.q0, problem.v0, {"u": jnp.full(10, u)}))(jnp.asarray(forces))


def test_a_sweep_of_forces_with_livens_em_at_default_settings_fails_no_step():
    """Small forces keep the first steps' increments q^{n+1} - q^n tiny, where the round-off of the
    discrete gradient's quotient puts the residual's floor above the flow's default tol = 1e-12: with
    the papers' rule some members fail a step, with the default rule none does, and its nodes agree
    with those of Newton iterated to round-off and meet the constraints (computed here)."""
    problem = _forced_double_pendulum()
    forces = np.geomspace(1e-4, 10.0, 50)
    forces = np.concatenate([forces, -forces])
    F = lv.flow(problem, "livens-em", h=0.01, n_steps=20)
    res = _sweep(F, problem, forces)
    assert bool(np.all(np.asarray(res.converged)))
    resid = np.asarray(res.residual)
    accepted = resid > 1e-12  # steps the floor rule accepted
    assert accepted.any() and np.all(resid <= FLOOR_FACTOR * 1e-12)

    # the papers' rule fails those members (the same flow otherwise)
    strict = run(
        problem,
        "livens-em",
        h=0.01,
        n_steps=20,
        tol=1e-12,
        executor=InGraph(None),
        output=Arrays(1),
        on_failure=NaNFlag(),
        adjoint=Implicit(),
        accept_floor=False,
    )
    failed = ~np.asarray(_sweep(strict, problem, forces).converged)
    assert failed.any() and np.all(accepted[failed].any(axis=1))

    # Newton iterated to round-off ends at a residual of the same size: the floor is real
    roundoff = _sweep(lv.flow(problem, "livens-em", h=0.01, n_steps=20, tol="roundoff"), problem, forces)
    assert np.max(np.asarray(roundoff.residual)[accepted]) > 1e-12
    np.testing.assert_allclose(np.asarray(res.q), np.asarray(roundoff.q), rtol=0, atol=1e-10)
    q = np.asarray(res.q)
    x1, x2 = q[..., :3], q[..., 3:]
    assert np.max(np.abs(np.sum(x1 * x1, -1) - 1.0)) < 1e-10
    assert np.max(np.abs(np.sum((x2 - x1) ** 2, -1) - 1.0)) < 1e-10


def test_the_rule_is_stated_in_the_metadata_and_the_papers_rule_is_kept_on_request():
    problem = lv.examples.load("pendulum-3d")
    sol = lv.simulate(problem, "VI-S", t_end=0.1, progress=False)
    assert "stopped halving at most 10000 tol (1 + s)" in sol.meta["stopping"]
    papers = lv.simulate(problem, "VI-S", t_end=0.1, progress=False, accept_floor=False)
    assert sol.meta["stopping"] != papers.meta["stopping"] and "papers' rule" in papers.meta["stopping"]
    # where every iteration halves the residual down to tol, both rules take the same iterates
    np.testing.assert_array_equal(sol.q, papers.q)
    np.testing.assert_array_equal(sol.newton_iterations, papers.newton_iterations)
    assert (
        lv.simulate(problem, "VI-S", t_end=0.1, tol="roundoff", progress=False).meta["stopping"].startswith("roundoff")
    )


def test_the_papers_reproductions_run_the_papers_rule():
    from livens.studies.runs import NEWTON, OK, RunSpec, execute

    # tol = 1e-17 lies below the pendulum's round-off floor (a few ulps), within FLOOR_FACTOR of it
    spec = RunSpec.make("pendulum-3d", "VI-S", 0.05, 0.1, tol=1e-17)
    result = execute(spec)
    assert result.status == NEWTON and "papers' rule" in spec.newton()
    assert execute(spec.with_(tol=1e-15)).status == OK
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=0.05, t_end=0.1, tol=1e-17, guess="simple")
    assert sol.n_steps == 2


def _reason(call) -> str:
    with pytest.raises(lv.ConvergenceError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize(
    "example, scheme, settings",
    [
        # a tolerance far below the round-off floor (a few ulps): beyond the floor rule's 1e4 tol (1 + s)
        ("pendulum-3d", "VI-S", dict(tol=1e-23)),
        # too few iterations: no round-off matter
        ("heavy-top", "VI-S", dict(max_iter=1, guess="simple")),
    ],
)
def test_flow_and_simulate_diagnose_a_failed_step_alike(example, scheme, settings):
    problem = lv.examples.load(example)
    h = problem.h
    sim = _reason(lambda: lv.simulate(problem, scheme, h=h, t_end=3 * h, rescue=False, progress=False, **settings))
    F = lv.flow(problem, scheme, h=h, n_steps=3, **settings)
    flo = _reason(lambda: F(jnp.asarray(problem.q0), jnp.asarray(problem.v0)))
    tail = sim.split(" iterations (tol = ")[1].split(")", 1)[1].split(" The one step")[0].split(" No step")[0]
    advice = tail.split(" The steps")[0].lstrip(". ")
    assert advice and advice in flo, (sim, flo)
    if "tol" in settings:
        assert 'use tol="roundoff"' in advice
        floor = float(advice.split("stops decreasing at about ")[1].split(",")[0])
        # the fix it suggests works
        lv.simulate(problem, scheme, h=h, t_end=3 * h, tol=floor, rescue=False, progress=False)
        F2 = lv.flow(problem, scheme, h=h, n_steps=3, tol="roundoff")
        assert bool(F2(jnp.asarray(problem.q0), jnp.asarray(problem.v0)).converged)
    else:
        assert "Try a smaller h, a larger max_iter or another guess." in flo


def test_vi_nullspace_at_its_round_off_floor_converges_with_the_default_rule():
    """vi-nullspace's residual (eq 16, Newton from one linearization per iterate) stalls near 1e-12
    on the double spherical pendulum at h = 1e-3: step 406 fails with the papers' rule at tol =
    1e-12, and passes with the default rule, at a residual within FLOOR_FACTOR tol."""
    problem = lv.examples.load("double-spherical-pendulum")
    kw = dict(h=1e-3, t_end=0.45, tol=1e-12, rescue=False, guess="simple", progress=False)
    with pytest.raises(lv.ConvergenceError, match="round-off floor"):
        lv.simulate(problem, "vi-nullspace", accept_floor=False, **kw)
    sol = lv.simulate(problem, "vi-nullspace", **kw)
    r = sol.newton_residual
    assert sol.n_steps == 450 and np.any(r > 1e-12) and np.all(r <= FLOOR_FACTOR * 1e-12)


def test_native_and_xla_accept_the_floor_alike():
    """The floor rule is part of the step's JAX program, which the native engine translates: a run
    whose steps stall at the floor (residuals above tol, which the papers' rule never accepts)
    converges with both backends, to the same nodes."""
    problem = _forced_double_pendulum()
    kw = dict(h=0.01, t_end=0.2, tol=1e-12, rescue=False, progress=False, parameters={"u": np.full(10, 1e-3)})
    runs = {b: lv.simulate(problem, "livens-em", backend=b, **kw) for b in ("native", "xla")}
    assert runs["native"].meta["backend"] == "native" and runs["xla"].meta["backend"] == "xla"
    for sol in runs.values():
        assert sol.n_steps == 20 and np.any(sol.newton_residual > 1e-12)
    np.testing.assert_allclose(runs["native"].q, runs["xla"].q, rtol=0, atol=1e-11)
