"""Dependent constraint equations (livens.redundancy): redundant equations and singular starts.

A redundant equation is dependent on the others everywhere near q0; the schemes solve an independent
subset and must keep their structure with all equations holding. A singular start (rank G drops at
q0 only) keeps every equation, and the run must follow the branch of the initial velocity.
"""

import re
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.diagnostics import symplecticity_defect
from livens.redundancy import RedundantConstraintsNotice, independent_rows, rank_of

SCHEMES = [s for s in lv.schemes.names() if s != "bs99"]  # bs99: the heavy top only
ENERGY = ("ggl-em", "gonzalez-em", "livens-em")
SYMPLECTIC = ("ggl-vi", "ggl-theta-b", "rattle", "symplectic-euler")
COSTLY = {"ggl-spark"}  # ~25 s of compilation per system, ~1 min for the parallelogram: run with -m slow


def default_run(schemes):
    """The schemes of a default-suite test, those of :data:`COSTLY` marked slow."""
    return [pytest.param(s, marks=pytest.mark.slow) if s in COSTLY else s for s in schemes]


def pendulum(redundant: bool) -> lv.Problem:
    """A spherical pendulum (KBS23b's 3D pendulum, m = l = 1) whose length constraint is written twice
    (once scaled: dependent everywhere) with ``redundant``."""

    def g(q):
        c = 0.5 * (q @ q - 1.0)
        return jnp.array([c, 2.0 * c]) if redundant else jnp.array([c])

    names = ("length", "length twice") if redundant else ("length",)
    system = lv.System(np.eye(3), potential=lambda q: 9.81 * q[2], constraints=g, constraint_names=names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RedundantConstraintsNotice)
        return lv.Problem(
            system,
            q0=[1.0, 0.0, 0.0],
            v0=[0.0, 1.0, 0.5],
            h=0.02,
            t_end=1.0,
            symmetries=[lv.Symmetry.rotation(axis=[0, 0, 1], blocks=1)],
        )


def test_redundant_equations_are_reported_once_as_information():
    sys_ = lv.System(
        np.eye(3),
        potential=lambda q: q[2],
        constraints=lambda q: jnp.array([q[0], 2 * q[0], q[1]]),
        constraint_names=("x", "twice x", "y"),
    )
    with pytest.warns(
        RedundantConstraintsNotice, match=r"1 redundant constraint equation .*rank G = 2 < m = 3.*: twice x"
    ):
        problem = lv.Problem(sys_, q0=[0, 0, 1.0], v0=[0, 0, 1.0])
    rank = problem.constraint_rank
    assert (rank.m, rank.rank, rank.kept, rank.redundant, rank.singular_start) == (3, 2, (0, 2), (1,), False)
    assert problem.solved_system.constraint_names == ("x", "y")


def test_independent_rows_drop_the_later_of_dependent_rows():
    G = np.array([[1.0, 0, 0], [0, 1, 0], [2, 0, 0], [1, 1, 0], [0, 0, 1]])
    assert rank_of(G) == 3
    assert independent_rows(G, 3) == (0, 1, 4)


@pytest.mark.parametrize("scheme", default_run(SCHEMES))
def test_every_scheme_runs_redundant_equations_with_its_structure(scheme):
    """The doubled length constraint: every scheme runs; both equations hold at the nodes where the
    scheme enforces g there; the trajectory is the one of the pendulum written without the dependent
    equation (the same manifold); the multiplier of the redundant equation is zero and G^T lambda that
    of the independent system; energy schemes keep the energy and the momentum map."""
    tol = 1e-12
    sol = lv.simulate(pendulum(True), scheme, tol=tol, progress=False)
    ref = lv.simulate(pendulum(False), scheme, tol=tol, progress=False)
    assert sol.lam.shape == (sol.n_steps, 2) and np.all(sol.lam[:, 1] == 0.0)
    assert sol.meta["backend"] == ref.meta["backend"]  # native where the independent system is native
    np.testing.assert_allclose(sol.q, ref.q, atol=1e-11)
    np.testing.assert_allclose(sol.lam[:, 0], ref.lam[:, 0], atol=1e-9 * max(1.0, np.abs(ref.lam).max()))
    g = np.abs(sol.constraint_residual("position"))
    assert g.shape == (sol.n_steps + 1, 2)
    if scheme != "ggl-theta-a":  # VI-A enforces g at q^{n+1/2}, not at the nodes
        assert g.max() <= 10 * tol
    if scheme in ENERGY:
        E = sol.energy()["total"]  # the energy to the Newton tolerance
        assert np.max(np.abs(E - E[0])) <= 10 * tol * max(1.0, abs(E[0]))
        J = sol.momentum_maps()["J_rot[0,0,1]"]  # the momentum map to round-off
        assert np.max(np.abs(J - J[0])) <= 1e-13


@pytest.mark.parametrize("scheme", SYMPLECTIC)
def test_variational_schemes_stay_symplectic_with_redundant_equations(scheme):
    """The one-step map restricted to the constraint manifold (KBS23b eq 31) is symplectic to round-off,
    the manifold spanned by all equations (its tangent space does not depend on the redundant one)."""
    problem = pendulum(True)
    manifold = "constraint"
    defect = symplecticity_defect(problem, scheme, 0.02, manifold=manifold, relative=True)
    assert defect <= 1e-12


def test_ensembles_and_flow_run_redundant_equations():
    """lv.simulate_ensemble and lv.flow: multipliers per equation (zero on the redundant one), and the
    derivative of the final position equal to that of the independent system (it does not depend on the
    choice of multipliers)."""
    import jax

    red, ind = pendulum(True), pendulum(False)
    v0s = np.array([[0.0, 1.0, 0.5], [0.0, 0.8, -0.3]])
    ens = lv.simulate_ensemble(red, "EM", v0s=v0s, tol=1e-12, progress=False)
    ens_ref = lv.simulate_ensemble(ind, "EM", v0s=v0s, tol=1e-12, progress=False)
    assert ens.lam.shape[-1] == 2 and np.all(ens.lam[..., 1] == 0.0)
    np.testing.assert_allclose(ens.q, ens_ref.q, atol=1e-11)

    def final_x(problem):
        f = lv.flow(problem, "ggl-vi", h=0.02, n_steps=20)
        return lambda q0: f(q0, problem.v0).q[-1, 0]

    q0 = jnp.asarray(red.q0)
    grad_red, grad_ind = jax.grad(final_x(red))(q0), jax.grad(final_x(ind))(q0)
    assert np.all(np.isfinite(grad_red))
    np.testing.assert_allclose(grad_red, grad_ind, atol=1e-9)
    res = lv.flow(red, "ggl-vi", h=0.02, n_steps=20)(q0, red.v0)
    assert res.lam.shape[-1] == 2 and np.all(np.asarray(res.lam)[:, 1] == 0.0)


def test_consistent_initial_state_projects_onto_redundant_equations():
    problem = pendulum(True)
    q, v = lv.consistent_initial_state(problem.system, [1.1, 0.1, -0.05], [0.3, 1.0, 0.5])
    assert abs(q @ q - 1.0) <= 1e-13 and abs(q @ v) <= 1e-13


# ------------------------------------------------------------------ singular start
def coupler_direction(problem, sol):
    """The coupler's director d1 at every node (the parallelogram keeps it (1, 0))."""
    off = problem.system.layout.offsets[2]
    return sol.q[:, off + 2 : off + 4]


@pytest.mark.parametrize("scheme", default_run([s for s in SCHEMES if s not in ("vi-lagrange", "vi-nullspace")]))
def test_parallelogram_started_flattened_stays_on_its_branch(scheme):
    """The parallelogram started in its flattened position (rank 16 of 17 there) with the
    parallelogram's velocity: the coupler stays parallel to the ground (the antiparallelogram branch
    would turn it), passing the flattened positions again on the way; all 17 equations hold."""
    with pytest.warns(RedundantConstraintsNotice, match="singular configuration: rank G\\(q0\\) = 16 < 17"):
        problem = lv.examples.load("parallelogram", t_end=1.5)
    assert problem.constraint_rank.redundant == ()
    sol = lv.simulate(problem, scheme, tol=1e-12, progress=False)
    assert np.abs(coupler_direction(problem, sol) - [1.0, 0.0]).max() <= 1e-9
    crank = sol.q[:, 2:4]  # crank1's director d1: the crank angle passes 0 and pi again
    assert np.any(crank[:, 1] < -0.5) and np.any(crank[:, 0] < -0.9)
    if scheme != "ggl-theta-a":
        assert np.abs(sol.constraint_residual("position")).max() <= 1e-11
    if scheme in ENERGY:
        E = sol.energy()["total"]
        assert np.max(np.abs(E - E[0])) <= 1e-11 * max(1.0, np.abs(E).max())


@pytest.mark.parametrize("scheme", ["vi-lagrange", "vi-nullspace"])
def test_node_multiplier_schemes_refuse_a_singular_start_and_the_advice_works(scheme):
    """SLO09's schemes hold G(q_0)^T lambda_0 at the start node, which loses a direction there: they
    refuse, and the advice (start a step away, from a one-step run of another scheme) runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RedundantConstraintsNotice)
        problem = lv.examples.load("parallelogram", t_end=1.5)
    with pytest.raises(ValueError, match="cannot start at a singular configuration.*one-step run of another scheme"):
        lv.simulate(problem, scheme, progress=False)
    one = lv.simulate(problem, "rattle", t_end=problem.h, tol=1e-12, progress=False)
    moved = problem.replace(q0=one.q[1], v0=one.v[1])
    assert not moved.constraint_rank.singular_start
    sol = lv.simulate(moved, scheme, tol=1e-12, t_end=1.5 - problem.h, progress=False)
    assert np.abs(coupler_direction(problem, sol) - [1.0, 0.0]).max() <= 1e-9
    assert np.abs(sol.constraint_residual("position")).max() <= 1e-11


def test_vi_nullspace_near_dead_centres_stops_at_the_roundoff_floor_and_the_papers_rule_names_it():
    """Near the double four-bar's first dead centre (G loses rank) vi-nullspace's residual stalls at its
    round-off floor above tol = 1e-12. The default rule accepts that floor (within 1e4 tol times the size of the step's terms) and runs
    through with g at round-off; the papers' rule fails there, its message names the floor and
    tol="roundoff", which passes."""
    problem = lv.examples.load("double-four-bar", t_end=0.8)
    sol = lv.simulate(problem, "vi-nullspace", tol=1e-12, progress=False)
    assert sol.n_steps == 800 and np.abs(sol.constraint_residual("position")).max() <= 1e-12
    assert 1e-12 < np.max(sol.newton_residual) <= 100 * 1e-12  # a floor above tol was accepted
    with pytest.raises(lv.ConvergenceError, match=r"round-off floor.*tol=\"roundoff\"") as err:
        lv.simulate(problem, "vi-nullspace", tol=1e-12, progress=False, accept_floor=False)
    assert err.value.solution.n_steps > 100  # the steps before it are kept
    sol = lv.simulate(problem, "vi-nullspace", tol="roundoff", progress=False)
    assert sol.n_steps == 800 and np.abs(sol.constraint_residual("position")).max() <= 1e-12


def test_cli_summary_lists_the_redundant_equations_and_a_singular_start(capsys):
    from livens.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RedundantConstraintsNotice)
        assert main(["run", "four-bar-3d", "--scheme", "EM", "--t-end", "0.1", "--quiet"]) == 0
        out = capsys.readouterr().out
        assert "redundant equations (3 of 38, not solved, multipliers 0)" in out and "D.revolute.axis[n2]" in out
        assert main(["run", "parallelogram", "--scheme", "EM", "--t-end", "0.1", "--quiet"]) == 0
        assert "rank G(q0) = 16 < 17" in capsys.readouterr().out


# ------------------------------------------------------------------ equations whose dependency changes
def changing_dependency() -> lv.Problem:
    """A particle on the plane z = 0 written as (1 - x) z = 0 and (1 + x) z = 0: rank 1 on the plane,
    the first equation chosen at x = 0, and it loses rank at x = 1, where the particle arrives at t = 1
    (a node of h = 0.1). Beyond it the first equation alone also admits the plane x = 1."""
    system = lv.System(
        np.eye(3),
        potential=lambda q: 9.81 * q[2],
        constraints=lambda q: jnp.array([(1 - q[0]) * q[2], (1 + q[0]) * q[2]]),
        constraint_names=("a", "b"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RedundantConstraintsNotice)
        return lv.Problem(system, q0=[0.0, 0.0, 0.0], v0=[1.0, 0.3, 0.0], h=0.1, t_end=2.0)


def on_the_plane(problem, sol, t_end):
    """The particle stays on z = 0 and reaches x = 2 at t_end (it moves at v_x = 1)."""
    assert np.abs(sol.constraint_residual("position")).max() <= 1e-12
    assert abs(sol.q[-1, 0] - 2.0) <= 1e-9 and abs(sol.t[-1] - t_end) <= 1e-12


def test_redundant_equations_that_stop_holding_warn_and_the_advice_works():
    """RATTLE follows the other branch of the first equation at x = 1 (the particle falls off the plane):
    the run warns where the redundant equation stops holding, and a new run from the node the warning
    names chooses the equations anew there and stays on the plane."""
    problem = changing_dependency()
    assert problem.constraint_rank.kept == (0,)
    with pytest.warns(
        RuntimeWarning, match=r"redundant equations b stop holding at node 11 .*Start a new run from node 9"
    ):
        sol = lv.simulate(problem, "rattle", tol=1e-12, progress=False)
    moved = problem.replace(q0=sol.q[9], v0=sol.v[9])
    assert moved.constraint_rank.kept == (1,)  # near x = 1, the better conditioned equation
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        on_the_plane(moved, lv.simulate(moved, "rattle", tol=1e-12, t_end=1.1, progress=False), 1.1)


def test_a_failed_step_where_the_chosen_equations_lose_rank_says_so_and_the_advice_works():
    """ggl-vi reaches x = 1, where the equation chosen at q0 loses rank. Whether Newton fails there
    (the error says the chosen equations lose rank at q^n) or converges onto the other branch (the
    run warns where the redundant equation stops holding) depends on the last bits of x at node 10
    (0.1 summed ten times in the machine's order of operations); either way the message names a
    node, and a new run from it stays on the plane."""
    problem = changing_dependency()
    failed = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            sol = lv.simulate(problem, "ggl-vi", tol=1e-12, progress=False)
        except lv.ConvergenceError as exc:
            failed = exc
    if failed is not None:
        assert re.search(r"lose rank at q\^n.*Start a new run from a node", str(failed), re.S), str(failed)
        sol = failed.solution
        k = sol.n_steps - 2
    else:
        said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        found = [
            re.search(r"redundant equations b stop holding at node \d+ .*Start a new run from node (\d+)", m, re.S)
            for m in said
        ]
        assert any(found), said
        k = int(next(f for f in found if f).group(1))
    moved = problem.replace(q0=sol.q[k], v0=sol.v[k])
    t_end = problem.t_end - k * problem.h
    on_the_plane(moved, lv.simulate(moved, "ggl-vi", tol=1e-12, t_end=t_end, progress=False), t_end)


def test_flow_from_a_singular_start():
    """lv.flow from the flattened parallelogram: the run stays on its branch, the derivative with respect
    to v0 is finite, and so is the one with respect to q0 without the projection (consistent=False); with
    it, NaN (the manifold has no tangent space at a bifurcation point), as the guide says. The run and
    its reverse pass are native kernels, as lv.simulate's run is, and it is lv.simulate's motion."""
    import jax

    from livens.driver.native_flow import NativeDerivatives, NativeForward

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RedundantConstraintsNotice)
        problem = lv.examples.load("parallelogram")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    projected = lv.flow(problem, "ggl-em", h=0.01, n_steps=50)
    res = projected(q0, v0)
    off = problem.system.layout.offsets[2]
    assert np.abs(np.asarray(res.q)[:, off + 2 : off + 4] - [1.0, 0.0]).max() <= 1e-9
    assert np.all(np.isfinite(jax.grad(lambda v: projected(q0, v).q[-1, 0])(v0)))
    assert np.all(np.isnan(jax.grad(lambda q: projected(q, v0).q[-1, 0])(q0)))
    # 88 Newton unknowns, above EngineOptions.max_native_unknowns, in a program large enough to run
    # natively (EngineOptions.large_program_equations): the run and its reverse pass are native kernels
    # as lv.simulate's loop is, and the run is lv.simulate's to the Newton tolerance (their starts differ
    # by round-off, which the singular start amplifies)
    assert isinstance(projected._fn._native, NativeForward)
    assert isinstance(projected._fn._derivatives, NativeDerivatives)
    sol = lv.simulate(problem, "ggl-em", h=0.01, t_end=0.5, progress=False)
    assert sol.meta["backend"] == "native"
    assert np.abs(np.asarray(res.q) - sol.q).max() <= 1e-9
    plain = lv.flow(problem, "ggl-em", h=0.01, n_steps=50, consistent=False)
    assert np.all(np.isfinite(jax.grad(lambda q: plain(q, v0).q[-1, 0])(q0)))
