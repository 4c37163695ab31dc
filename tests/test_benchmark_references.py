"""The compiled yardsticks of ``python -m benchmarks`` against livens.

- benchmarks/reference_numba.py, a VI-S (KBS23b eq 55) written by hand in Numba, computes the same
  trajectories as livens' VI-S (an independent implementation: hand-written g, G, Hessians and
  Jacobian, its own LU) at the same h, tolerance and first guess, with the same Newton iterations;
  its Jacobian is the derivative of its residual (central differences), and its initial states,
  computed from the papers' formulas, are livens' examples'.
- benchmarks/reference_exudyn.py, the same systems in Exudyn (generalized-α), moves like livens'
  VI-S to the schemes' accuracy and keeps what the papers show (the pendulum's energy, the heavy
  top's steady precession, KBS23b Fig. 17).

numba and exudyn are the optional ``bench`` extra: each part is skipped where its package is not
installed.
"""

import os
import sys

import numpy as np
import pytest

import livens as lv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

numba = pytest.importorskip("numba")

sys.path.insert(0, ROOT)
try:
    from benchmarks import reference_numba as rn
finally:
    sys.path.remove(ROOT)

CASES = [  # (livens example, its Numba system, h, steps)
    ("pendulum-3d", {}, rn.pendulum_3d, 0.01, 300),
    ("heavy-top", {}, rn.heavy_top, 0.002, 300),
    ("pendulum-chain", {"n_bodies": 4}, lambda: rn.pendulum_chain(4), 0.01, 150),
]


@pytest.mark.parametrize("example, kwargs, system, h, steps", CASES, ids=[c[0] for c in CASES])
def test_numba_vi_s_has_the_examples_initial_state(example, kwargs, system, h, steps):
    problem = lv.examples.load(example, **kwargs)
    s = system()
    np.testing.assert_allclose(s.q0, problem.q0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(s.v0, problem.v0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diag(np.asarray(problem.system.mass_matrix)), s.mdiag, rtol=1e-15)


@pytest.mark.parametrize("guess", ["simple", "advanced", "extrapolated"])
@pytest.mark.parametrize("example, kwargs, system, h, steps", CASES, ids=[c[0] for c in CASES])
def test_numba_vi_s_equals_livens_vi_s(example, kwargs, system, h, steps, guess):
    """Same equations, tolerance 1e-9 and first guess: the same iterates up to round-off."""
    problem = lv.examples.load(example, **kwargs)
    ref = rn.simulate_vis(system(), h, steps, tol=1e-9, guess=guess)
    sol = lv.simulate(problem, "VI-S", h=h, t_end=steps * h, tol=1e-9, guess=guess, progress=False)
    scale = max(1.0, float(np.max(np.abs(sol.p))))
    assert np.max(np.abs(sol.q - ref.q)) <= 1e-10
    assert np.max(np.abs(sol.p - ref.p)) <= 1e-10 * scale
    assert np.max(np.abs(sol.v - ref.v)) <= 1e-10 * max(1.0, float(np.max(np.abs(sol.v))))
    assert np.max(np.abs(sol.lam - ref.lam)) <= 1e-10 * max(1.0, float(np.max(np.abs(sol.lam))))
    assert np.max(np.abs(sol.gam - ref.gam)) <= 1e-10 * max(1.0, float(np.max(np.abs(sol.gam))))
    assert np.mean(sol.newton_iterations == ref.iterations) >= 0.99
    # and the motion is not trivial: the constraints are met along a moving trajectory
    assert np.max(np.abs(ref.q[-1] - ref.q[0])) > 0.01


@pytest.mark.parametrize(
    "system",
    [rn.pendulum_3d, rn.heavy_top, lambda: rn.pendulum_chain(3)],
    ids=["pendulum-3d", "heavy-top", "pendulum-chain"],
)
def test_numba_jacobian_is_the_derivative_of_its_residual(system):
    s = system()
    d, m = s.q0.size, s.m
    n = 3 * d + 2 * m
    rng = np.random.default_rng(5)
    x, q0, p0 = rng.standard_normal(n), rng.standard_normal(d), rng.standard_normal(d)
    h = 0.05
    c, kind = s.constants, s.kind
    G0, dV0 = np.empty((m, d)), np.empty(d)
    rn._G(kind, q0, c, G0)
    rn._dV(kind, q0, c, dV0)
    work = lambda: (np.empty(d), np.empty(d), np.empty((m, d)), np.empty((d, d)))  # noqa: E731

    def R(y):
        r = np.empty(n)
        qb, w, Gb, H = work()
        rn._residual(kind, y, q0, p0, G0, dV0, s.mdiag, h, c, d, m, r, qb, w, Gb, H)
        return r

    J = np.empty((n, n))
    qb, w, Gb, H = work()
    rn._jacobian(
        kind,
        x,
        q0,
        G0,
        s.mdiag,
        h,
        c,
        d,
        m,
        J,
        qb,
        w,
        Gb,
        np.empty((m, d)),
        H,
        np.empty((m, d)),
        np.arange(n),
        n - 1,
        n - 1,
    )
    eps = 1e-6
    fd = np.array([(R(x + eps * e) - R(x - eps * e)) / (2 * eps) for e in np.eye(n)]).T
    assert np.max(np.abs(J - fd)) <= 1e-7 * max(1.0, np.max(np.abs(J)))
    # the LU solve inverts it
    b = rng.standard_normal(n)
    y = b.copy()
    rn._lu_solve(J.copy(), y)
    np.testing.assert_allclose(J @ y, b, rtol=0, atol=1e-9 * np.max(np.abs(J)) * np.max(np.abs(y)))


def test_numba_chain_band_lu_takes_the_dense_lu_iterates():
    """The chain's Jacobian in the bodies' order is block tridiagonal: the LU over its band gives
    the iterates of the dense LU (round-off apart), and the order P is a permutation."""
    s = rn.pendulum_chain(6)
    P, kl, ku = rn._order(s, dense=False)
    assert sorted(P) == list(range(P.size)) and kl == ku == 21 < P.size - 1
    band = rn.simulate_vis(s, 0.01, 100)
    dense = rn.simulate_vis(s, 0.01, 100, dense=True)
    assert np.max(np.abs(band.q - dense.q)) <= 1e-12
    assert np.array_equal(band.iterations, dense.iterations)


def test_numba_vi_s_reports_a_failed_newton_iteration():
    with pytest.raises(RuntimeError, match="did not converge in step 0"):
        rn.simulate_vis(rn.pendulum_3d(), 0.01, 5, max_iter=1, guess="simple")
    with pytest.raises(ValueError, match="guess must be one of"):
        rn.simulate_vis(rn.pendulum_3d(), 0.01, 5, guess="linear")


def test_exudyn_models_move_like_livens_vi_s():
    """Exudyn's generalized-α (second order) and VI-S (first order) at the papers' h: the same
    motion to the schemes' accuracy; the pendulum keeps its energy, the top its precession."""
    pytest.importorskip("exudyn")
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import reference_exudyn as rx
    finally:
        sys.path.remove(ROOT)
    # pendulum, h = 0.01, 2 s
    steps, h = 200, 0.01
    ex = rx.run(rx.pendulum_3d(h, steps))
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=h, t_end=steps * h, progress=False)
    assert ex.x.shape == (steps + 1, 3) and np.allclose(ex.t, h * np.arange(steps + 1))
    assert np.max(np.abs(np.linalg.norm(ex.x, axis=1) - 1.0)) <= 1e-8  # on the rod
    energy = 0.5 * np.sum(ex.v**2, axis=1) + 9.81 * ex.x[:, 2]
    assert np.max(np.abs(energy - energy[0])) <= 0.05  # E0 = 0.5
    assert np.max(np.abs(ex.x - sol.q)) <= 0.05  # O(h) apart
    assert np.max(np.abs(ex.x[-1] - ex.x[0])) > 0.5  # it moved
    # heavy top, h = 0.002, 0.4 s: the centre of mass phi of the director formulation
    steps, h = 200, 0.002
    ex = rx.run(rx.heavy_top(h, steps))
    sol = lv.simulate(lv.examples.load("heavy-top"), "VI-S", h=h, t_end=steps * h, progress=False)
    assert np.max(np.abs(ex.x[:, 2] - 0.0375)) <= 2e-4  # KBS23b Fig. 17
    assert np.max(np.abs(ex.x - sol.q[:, 0:3])) <= 4e-3  # VI-S: phi3 - 0.0375 ~ 1.4e-3
    assert np.max(np.abs(ex.x[-1] - ex.x[0])) > 0.05  # it precessed


def test_yardsticks_measure_side_by_side_and_report_missing_packages(monkeypatch, capsys):
    """The yardstick section of python -m benchmarks: one row per code, the same steps, ratios of
    steps/s from the same run; a reference whose package is missing is a "not installed" row."""
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import yardsticks
    finally:
        sys.path.remove(ROOT)
    monkeypatch.setattr(yardsticks, "NUMPY_STEPS", 50)
    monkeypatch.setattr(yardsticks, "_exudyn", lambda: (None, "not installed (exudyn; pip install 'livens[bench]')"))
    res = yardsticks.measure_system(lv, "pendulum-3d", 0.01, 300, rounds=1)
    rows = res["rows"]
    # A second livens row with backend="xla" appears when livens' default backend is another one.
    extra = set() if res["notes"]["livens_backend"] == "xla" else {"livens (xla)"}
    assert (
        res["notes"]["livens_backend"]
        == lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=0.01, t_end=0.01, progress=False).meta["backend"]
    )
    assert set(rows) == {"livens", "numba (extrapolated)", "numba (advanced)", "exudyn", "numpy (simple)"} | extra
    assert rows["exudyn"] == {"missing": "not installed (exudyn; pip install 'livens[bench]')"}
    assert rows["livens"]["steps"] == rows["numba (advanced)"]["steps"] == 300
    assert rows["livens"]["newton_iterations"] == rows["numba (extrapolated)"]["newton_iterations"]
    assert rows["numba (advanced)"]["newton_iterations"] > rows["livens"]["newton_iterations"]
    assert res["notes"]["max_abs_q_difference_numba"] <= 1e-10
    rat = yardsticks.ratios(res)
    assert set(rat) == {"numba (extrapolated)", "numba (advanced)", "numpy (simple)"} | extra
    assert rat["numba (advanced)"] == pytest.approx(
        rows["livens"]["steps_per_s"] / rows["numba (advanced)"]["steps_per_s"], rel=5e-3
    )
    yardsticks.print_system("pendulum-3d", res)
    out = capsys.readouterr().out
    assert "Exudyn" in out and "not installed" in out and "compiled VI-S, Numba (extrapolated guess)" in out
