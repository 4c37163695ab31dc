"""Ensembles (lv.simulate_ensemble): each member is the single run of its initial state.

The vmapped time loop must take every member through exactly the Newton iterates of its own run
(KBS23b §6, tol as given): same iteration counts, same trajectory up to round-off; a member that fails
stops where its single run stops, without stopping the others.
"""

import numpy as np
import pytest

import livens as lv
from livens.engine import native

# the two ways an ensemble runs: members through the single run's native kernel (one thread per
# core), or one vmapped XLA call per chunk for all members
BACKENDS = ["xla", pytest.param("native", marks=pytest.mark.skipif(native.compiler() is None, reason="no C compiler"))]


def _rotate_e3(x, angle, blocks):
    c, s = np.cos(angle), np.sin(angle)
    R = np.kron(np.eye(blocks), np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]))
    return R @ x


def _pendulum_states(B, seed=0):
    """Consistent states of the 3D pendulum: points of the unit sphere with tangent velocities."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, 3))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    v = rng.standard_normal((B, 3)) * 2.0
    v -= np.sum(v * q, axis=1, keepdims=True) * q
    return q, v


# the higher-order schemes (several stages per step, own unknown layouts) as ensembles too; slow:
# each compiles its step for XLA's batched loop and for the native kernel
HIGHER_ORDER = [pytest.param(s, marks=pytest.mark.slow) for s in ("ggl-galerkin", "ggl-spark", "ggl-em4")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", ["VI-S", "EM", *HIGHER_ORDER])
def test_members_equal_single_runs(scheme, backend):
    problem = lv.examples.load("pendulum-3d")
    q0s, v0s = _pendulum_states(5)
    h, t_end, chunk = 0.02, 0.7, 16  # 35 steps: three chunks, the last one partly past the end
    ens = lv.simulate_ensemble(problem, scheme, q0s, v0s, h=h, t_end=t_end, tol=1e-11, chunk=chunk, backend=backend)
    assert isinstance(ens, lv.EnsembleSolution) and ens.meta["backend"] == backend
    assert len(ens) == 5 and ens.q.shape == (5, 36, 3) and not ens.failed.any()
    assert np.all(ens.steps == 35)
    for b in range(5):
        single = lv.simulate(problem.replace(q0=q0s[b], v0=v0s[b]), scheme, h=h, t_end=t_end, tol=1e-11, chunk=chunk)
        member = ens[b]
        assert isinstance(member, lv.Solution)
        np.testing.assert_array_equal(member.newton_iterations, single.newton_iterations)
        for name in ("q", "p", "v", "lam"):
            a, c = getattr(member, name), getattr(single, name)
            assert a.shape == c.shape
            assert np.max(np.abs(a - c)) <= 1e-12 * max(1.0, np.max(np.abs(c))), name
        np.testing.assert_allclose(member.t, single.t, rtol=0, atol=1e-14)
        # the member's diagnostics work like those of a single run
        E = member.energy()["total"]
        np.testing.assert_allclose(E, single.energy()["total"], rtol=1e-12, atol=1e-12)


def test_heavy_tops_rotated_about_e3_are_rotated_copies():
    """The heavy top is symmetric about e3 (KBS23b eq 105-107): rotated initial states give rotated
    trajectories, and each member equals its single run."""
    problem = lv.examples.load("heavy-top")
    angles = [0.0, 0.7, 2.0]
    q0s = np.array([_rotate_e3(problem.q0, a, 4) for a in angles])
    v0s = np.array([_rotate_e3(problem.v0, a, 4) for a in angles])
    ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, t_end=0.1, tol=1e-12, chunk=32)
    for b, a in enumerate(angles):
        rotated = np.array([_rotate_e3(x, a, 4) for x in ens.q[0]])
        assert np.max(np.abs(ens.q[b] - rotated)) <= 1e-10
    single = lv.simulate(problem.replace(q0=q0s[2], v0=v0s[2]), "VI-S", t_end=0.1, tol=1e-12, chunk=32)
    assert np.max(np.abs(ens[2].q - single.q)) <= 1e-12
    np.testing.assert_array_equal(ens[2].newton_iterations, single.newton_iterations)


def assert_nothing_after_the_failed_step(ens, b):
    """Member b's arrays after its last converged step k: NaN, and no Newton iterations after the
    failed step k + 1 (the arrays are allocated empty and filled where no step wrote)."""
    k = int(ens.steps[b])
    assert np.all(np.isfinite(ens.q[b, : k + 1])) and np.all(np.isfinite(ens.lam[b, :k]))
    v_first = k + 1 if ens.velocity_kind == "nodal" else k
    for a, first in ((ens.q, k + 1), (ens.p, k + 1), (ens.v, v_first), (ens.lam, k), (ens.newton_residual, k + 1)):
        assert np.all(np.isnan(a[b, first:]))
    assert np.all(ens.newton_iterations[b, k + 1 :] == 0) and np.all(ens.newton_iterations[b, :k] > 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_member_stops_alone(backend):
    problem = lv.examples.load("pendulum-3d")
    q0s, v0s = _pendulum_states(3, seed=3)
    # member 1 starts near the top and falls: too fast for h = 0.05 and 6 Newton iterations after
    # a few steps (in the second chunk)
    q0s[1] = [np.sin(0.3), 0.0, np.cos(0.3)]
    v0s[1] = [0.0, 9.0, 0.0]
    kw = dict(h=0.05, t_end=1.0, tol=1e-10, max_iter=6, chunk=2)
    with pytest.warns(RuntimeWarning, match="1 of 3"):
        ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, backend=backend, **kw)
    assert ens.failed.tolist() == [False, True, False] and ens.meta["backend"] == backend
    with pytest.raises(lv.ConvergenceError) as err:
        lv.simulate(problem.replace(q0=q0s[1], v0=v0s[1]), "VI-S", **kw)
    partial = err.value.solution
    assert ens.steps[1] == partial.n_steps >= 2
    assert np.max(np.abs(ens[1].q - partial.q)) <= 1e-12
    # the failed step's Newton record is kept, as in the single run's error
    assert ens.newton_iterations[1, ens.steps[1]] == 6 and ens.newton_residual[1, ens.steps[1]] > kw["tol"]
    assert_nothing_after_the_failed_step(ens, 1)
    for b in (0, 2):
        single = lv.simulate(problem.replace(q0=q0s[b], v0=v0s[b]), "VI-S", **kw)
        assert ens.steps[b] == 20
        assert np.max(np.abs(ens[b].q - single.q)) <= 1e-12


def test_initial_states_are_checked_and_broadcast():
    problem = lv.examples.load("pendulum-3d")
    q0s, v0s = _pendulum_states(4, seed=1)
    bad = q0s.copy()
    bad[2] *= 1.01
    with pytest.raises(ValueError, match="Member 2 .* position level"):
        lv.simulate_ensemble(problem, "VI-S", bad, v0s, h=0.05, t_end=0.1)
    badv = v0s.copy()
    badv[3] += q0s[3]
    with pytest.raises(ValueError, match="Member 3 .* velocity level"):
        lv.simulate_ensemble(problem, "VI-S", q0s, badv, h=0.05, t_end=0.1)
    with pytest.raises(ValueError, match=r"shape \(B, d\)"):
        lv.simulate_ensemble(problem, "VI-S", q0s[:, :2], v0s, h=0.05, t_end=0.1)
    # only velocities given: the problem's q0 = e1 for every member
    ens = lv.simulate_ensemble(problem, "VI-S", v0s=[[0.0, 1.0, 0.0], [0.0, 2.0, 0.5]], h=0.05, t_end=0.1)
    assert ens.q.shape == (2, 3, 3)
    np.testing.assert_array_equal(ens.q[:, 0], [[1.0, 0.0, 0.0]] * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_ensemble_keeps_every_kth_node_and_streams_to_a_file(tmp_path, backend):
    """An ensemble is a run with a member dimension: save_every keeps every k-th node of every
    member (the same values as the full ensemble's), ``out`` streams it to netCDF while it runs,
    and ``lv.load`` reads the file back as the same ensemble."""
    problem = lv.examples.load("pendulum-3d")
    q0s, v0s = _pendulum_states(3, seed=5)
    kw = dict(h=0.02, t_end=0.7, tol=1e-11, chunk=16, backend=backend)
    full = lv.simulate_ensemble(problem, "EM", q0s, v0s, **kw)
    path = tmp_path / "ens.nc"
    ens = lv.simulate_ensemble(problem, "EM", q0s, v0s, save_every=5, out=path, **kw)
    assert ens.q.shape == (3, 35 // 5 + 1, 3)
    np.testing.assert_array_equal(ens.q, full.q[:, ::5])
    np.testing.assert_array_equal(ens.newton_iterations, full.newton_iterations[:, 4::5])
    np.testing.assert_array_equal(ens.t, full.t[::5])
    back = lv.load(path)
    assert isinstance(back, lv.EnsembleSolution) and len(back) == 3 and back.scheme == "ggl-em"
    for name in ("t", "q", "p", "lam", "newton_iterations", "steps"):
        np.testing.assert_array_equal(getattr(back, name), getattr(ens, name))
    member = back[1]
    np.testing.assert_array_equal(member.q, ens[1].q)
    assert member.save_every == 5 and member.problem is not None


def test_an_ensemble_rescues_a_members_failed_step_as_its_single_run_does():
    """With one Newton iteration allowed, plain Newton fails on some steps; the damped rescue
    retries each of them for the member alone, records it, and the member goes on: the same
    steps rescued and the same trajectory as the member's single run."""
    problem = lv.examples.load("pendulum-3d")
    q0s, v0s = _pendulum_states(3, seed=7)
    kw = dict(h=0.05, t_end=0.5, tol=1e-10, max_iter=2)
    ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, backend="xla", **kw)
    assert not ens.failed.any()
    rescued = ens.meta["rescued_steps"]
    assert rescued and sum(len(v) for v in rescued.values()) >= 2
    for b in range(3):
        single = lv.simulate(problem.replace(q0=q0s[b], v0=v0s[b]), "VI-S", backend="xla", progress=False, **kw)
        assert single.meta["rescued_steps"] == rescued.get(b, [])
        assert ens[b].meta["rescued_steps"] == single.meta["rescued_steps"]
        assert np.max(np.abs(ens[b].q - single.q)) <= 1e-12


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
def test_ctrl_c_stops_an_ensemble_within_a_second_with_what_it_computed():
    """Ctrl-C during a native ensemble of 32 members: the run stops at the end of the chunk under
    way (within a second, or within four times a whole call of one chunk where the machine is so
    busy that such a call takes longer than a quarter of a second), and the error carries the
    ensemble computed so far. The whole run takes hundreds of chunks."""
    import os
    import signal
    import threading
    import time

    problem = lv.examples.load("heavy-top")
    B = 32
    q0s, v0s = np.tile(problem.q0, (B, 1)), np.tile(problem.v0, (B, 1)) * np.linspace(0.9, 1.1, B)[:, None]
    lv.simulate_ensemble(problem, "VI-S", q0s, v0s, t_end=10 * problem.h)  # compiled
    lv.engine.wait()
    t0 = time.perf_counter()
    lv.simulate_ensemble(problem, "VI-S", q0s, v0s, t_end=512 * problem.h)  # one chunk, as busy as the machine is
    bound = max(1.0, 4 * (time.perf_counter() - t0))
    sent = []
    timer = threading.Timer(1.0, lambda: (sent.append(time.perf_counter()), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    try:
        with pytest.raises(lv.SimulationInterrupted) as err:
            lv.simulate_ensemble(problem, "VI-S", q0s, v0s, t_end=200.0)
        stopped = time.perf_counter()
    finally:
        timer.cancel()
    assert sent and stopped - sent[0] < bound, (stopped - sent[0], bound)
    ens = err.value.solution
    assert isinstance(ens, lv.EnsembleSolution) and ens.meta["backend"] == "native"
    # on a busy machine the members' later lane groups may not have started within the second
    assert 0 < ens.steps.max() < 200.0 / problem.h
    for b, done in enumerate(ens.steps):
        assert np.all(np.isfinite(ens.q[b, : int(done) + 1])), b
    # every member stopped before its last step says so; none reads as a finished run
    np.testing.assert_array_equal(ens.status, [lv.Status.INTERRUPTED] * B)
    assert all(ens[b].status is lv.Status.INTERRUPTED for b in (0, B - 1))
