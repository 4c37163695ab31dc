"""A failed Newton step says why, where livens can tell (the driver's failure policy): a user
function that returned non-finite values names itself and the iterate where it did; a tolerance
below the round-off floor of the residual names the floor and the fix. The message is checked
against what the test computes itself: where the function is not finite, and how small the
residual of the step can get."""

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv


def _pendulum(potential):
    system = lv.System(
        mass_matrix=jnp.eye(3), potential=potential, constraints=lambda q: jnp.array([0.5 * (q @ q - 1.0)])
    )
    return lv.Problem(system, q0=[1.0, 0.0, 0.0], v0=[0.0, 1.0, 0.0])


def test_a_potential_that_returns_nan_is_named():
    """log(x + 1/2) is NaN for x < -1/2: the pendulum swings there, EM's first guess of the step
    crosses it, and the error names the potential instead of suggesting a smaller h."""
    problem = _pendulum(lambda q: 9.81 * q[2] + 0.1 * jnp.log(q[0] + 0.5))
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(problem, "EM", h=0.01, t_end=5.0, progress=False, rescue=False)
    err = info.value
    assert "The potential V(q) returned non-finite values" in err.reason, err.reason
    assert "smaller h" not in err.reason
    # the kept steps end where the pendulum is about to cross x = -1/2
    x = err.solution.q[:, 0]
    assert np.all(x > -0.5) and x[-1] < -0.4


def test_a_tolerance_below_the_round_off_floor_says_so():
    """At tol = 1e-17 with the papers' rule (accept_floor=False) no step of the pendulum converges
    (|R| is a sum of terms of size 1 in double precision); the message names the floor, which is a
    few ulps, and suggests tol="roundoff"."""
    problem = lv.examples.load("pendulum-3d")
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(problem, "VI-S", t_end=0.1, tol=1e-17, progress=False, rescue=False, accept_floor=False)
    reason = info.value.reason
    assert 'use tol="roundoff"' in reason, reason
    floor = float(reason.split("stops decreasing at about ")[1].split(",")[0])
    assert 1e-17 < floor < 1e3 * np.finfo(float).eps
    # the suggested tolerance is one the failed step (the first) meets
    assert info.value.step == 0
    sol = lv.simulate(problem, "VI-S", t_end=0.05, tol=1.01 * floor, progress=False, rescue=False, accept_floor=False)
    assert sol.n_steps == 1
    # livens' default rule accepts that floor: it lies within FLOOR_FACTOR tol (1 + s), s the size of the terms
    sol = lv.simulate(problem, "VI-S", t_end=0.1, tol=1e-17, progress=False, rescue=False)
    assert sol.n_steps == 2 and np.all(sol.newton_residual <= 1e-15)


def test_a_failure_with_a_finite_residual_above_the_floor_keeps_the_advice():
    """A step too large for Newton (max_iter = 1 from the simple guess) is not a round-off matter:
    the message keeps its advice on h, max_iter and the guess."""
    problem = lv.examples.load("heavy-top")
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(problem, "VI-S", t_end=0.05, max_iter=1, guess="simple", progress=False, rescue=False)
    assert "Try a smaller h, a larger max_iter or another guess." in info.value.reason


def test_a_damper_that_no_scheme_takes_with_this_mass_matrix_points_to_the_force():
    """A singular M with a dissipation matrix: ggl-vi, the only scheme that treats C(q), needs a
    regular M, so the refusal names no scheme but the way round (the damping as a force)."""

    def damped(mass):
        system = lv.System(
            mass_matrix=mass,
            potential=lambda q: 9.81 * q[1] + q[2] ** 2,
            constraints=lambda q: jnp.array([0.5 * (q[0] ** 2 + q[1] ** 2 - 1.0)]),
            dissipation=lambda q: 0.1 * jnp.eye(3),
        )
        return lv.Problem(system, q0=[1.0, 0.0, 0.0], v0=[0.0, 0.0, 0.0])

    problem = damped(jnp.diag(jnp.array([1.0, 1.0, 0.0])))
    with pytest.raises(ValueError, match=r"no scheme treats both C\(q\) and this system's mass matrix.*-C\(q\) v"):
        lv.simulate(problem, "livens-em", h=0.01, t_end=0.02, progress=False)
    # with a regular M, the refusal names the scheme that treats C(q)
    regular = damped(jnp.eye(3))
    with pytest.raises(ValueError, match=r"schemes that do, with this system's mass matrix: ggl-vi\."):
        lv.simulate(regular, "livens-em", h=0.01, t_end=0.02, progress=False)


def test_a_fault_in_a_scheme_is_not_blamed_on_the_native_translator(monkeypatch):
    """A residual that raises while it is traced fails the native translation and XLA's alike: that
    error reaches the caller, and no warning calls it a bug of livens' native code (the warning is
    given only once XLA has run the loop the translator could not)."""
    import dataclasses
    import warnings

    from livens import schemes

    schemes._load()
    good = schemes._SCHEMES["ggl-em"]

    def broken(*args, **kw):
        raise RuntimeError("injected fault in the EM residual")

    monkeypatch.setitem(schemes._SCHEMES, "ggl-em", dataclasses.replace(good, residual=broken))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="injected fault"):
            lv.simulate(lv.examples.load("pendulum-3d"), "EM", t_end=0.1, progress=False)
    assert not [w for w in caught if "bug in livens" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize(
    "example",
    # the spherical spring pendulum runs every scheme of the GGL family, higher orders included: slow
    ["redundant-mass-spring", pytest.param("spring-pendulum-spherical", marks=pytest.mark.slow)],
)
def test_every_scheme_a_mass_refusal_names_runs_the_system(example):
    """A scheme that needs M^-1 refuses a singular (or configuration-dependent) M and names the schemes
    that accept it: each of them runs a step of the system (the GGL family, which solves with M(q),
    is named for a regular M(q) only)."""
    import re

    problem = lv.examples.load(example)
    with pytest.raises(ValueError, match="Schemes that accept it: ") as err:
        lv.simulate(problem, "rattle", t_end=problem.h, progress=False)
    named = re.search(r"Schemes that accept it: (.*)\.$", str(err.value)).group(1).split(", ")
    assert len(named) >= 4
    for scheme in named:
        sol = lv.simulate(problem, scheme, t_end=problem.h, progress=False)
        assert sol.n_steps == 1, scheme


def _interrupt_in_chunk(monkeypatch, k: int) -> None:
    """Send SIGINT (Ctrl-C) to this process while a single run computes its k-th chunk."""
    import os
    import signal

    from livens.driver import executors

    calls = {"n": 0}

    def interrupting(advance):
        def advance_then_interrupt(self, n, n_stop):
            calls["n"] += 1
            if calls["n"] == k:
                os.kill(os.getpid(), signal.SIGINT)
            return advance(self, n, n_stop)

        return advance_then_interrupt

    # a single run's executor: its one member through a native kernel, or XLA's program
    for cls in (executors.NativeMembers, executors.Dispatched):
        monkeypatch.setattr(cls, "advance", interrupting(cls.advance))


def test_an_interrupted_run_says_how_to_continue_it_and_the_continuation_meets_an_uninterrupted_run(monkeypatch):
    p = lv.examples.load("pendulum-3d")
    settings = dict(h=0.01, t_end=2.0, tol=1e-12, chunk=20, progress=False)
    _interrupt_in_chunk(monkeypatch, 3)
    with pytest.raises(lv.SimulationInterrupted) as caught:
        lv.simulate(p, "VI-S", **settings)
    monkeypatch.undo()
    err = caught.value
    assert "resume=err.solution" in str(err)
    assert 0 < len(err.solution.t) - 1 < 200
    continued = lv.simulate(p, "VI-S", **settings, resume=err.solution)  # the nodes from the last kept one on
    whole = lv.simulate(p, "VI-S", **settings)
    n0 = len(err.solution.t) - 1
    assert continued.t[-1] == pytest.approx(2.0) and continued.q.shape == whole.q[n0:].shape
    np.testing.assert_allclose(continued.q, whole.q[n0:], rtol=0, atol=1e-11)


def test_an_interrupted_run_of_a_scheme_with_a_start_step_says_it_cannot_be_continued(monkeypatch):
    p = lv.examples.load("pendulum-3d")
    settings = dict(h=0.01, t_end=2.0, chunk=20, progress=False)
    _interrupt_in_chunk(monkeypatch, 3)
    with pytest.raises(lv.SimulationInterrupted) as caught:
        lv.simulate(p, "vi-lagrange", **settings)
    monkeypatch.undo()
    assert "cannot be continued" in str(caught.value) and "resume=" not in str(caught.value)
    with pytest.raises(ValueError, match="cannot be resumed"):
        lv.simulate(p, "vi-lagrange", **settings, resume=caught.value.solution)
