"""The double four-bar linkage (KBS23a §5.2) with VI-S: through the singular (horizontal)
configurations, constraints (Figs 18-21), bounded energy error (Figs 14, 16), dampers (Figs 22-23),
and the pictures of livens.bodies.draw."""

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.examples.double_four_bar import double_four_bar
from livens.mechanics import mechanics

H = 1e-3  # KBS23a §5.2
TOL = 1e-9  # KBS23a §5: Newton tolerance
G_ACC = 9.81


def _exact_crossing_times(v0=1.0, mass=1.0, length=1.0, n=20001):
    """Times of the first two horizontal configurations of the exact one-degree-of-freedom motion.

    With the lower bars at angle theta (pi/2 upright) and rotating at theta', the upper bars translate
    at speed l theta', so T = 1/2 (3 m l^2/3 + 2 m l^2) theta'^2 = 3/2 m l^2 theta'^2 and
    V = m g l (3/2 + 2) sin(theta); energy conservation gives theta'(theta) and
    t = int dtheta / |theta'| from pi/2 down to 0 and on to -pi (Simpson's rule; the integrand is smooth).
    """
    inertia = 1.5 * mass * length**2
    E = inertia * (v0 / length) ** 2 + 3.5 * mass * G_ACC * length

    def duration(a, b):
        th = np.linspace(a, b, n)
        f = 1.0 / np.sqrt((E - 3.5 * mass * G_ACC * length * np.sin(th)) / inertia)
        w = np.ones(n)
        w[1:-1:2], w[2:-1:2] = 4.0, 2.0
        return abs(b - a) / (n - 1) / 3.0 * (w @ f)

    t1 = duration(0.0, np.pi / 2)
    return t1, t1 + duration(-np.pi, 0.0), duration(-1.5 * np.pi, 0.5 * np.pi)


def _crossings(sol):
    """Interpolated times where bar B1 is horizontal: its d1 = (cos theta, sin theta) has d1_y = 0."""
    y, t = sol.q[:, 3], sol.t
    k = np.flatnonzero(np.sign(y[1:]) != np.sign(y[:-1]))
    return t[k] + (t[k + 1] - t[k]) * y[k] / (y[k] - y[k + 1])


@pytest.fixture(scope="module")
def problem():
    return double_four_bar()


@pytest.fixture(scope="module")
def run(problem):
    """VI-S, h = 1e-3, over 2 s: one full revolution (period 1.94 s) and two singular configurations."""
    return lv.simulate(problem, "VI-S", h=H, t_end=2.0, tol=TOL, progress=False)


def test_dimensions_names_and_singular_configuration(problem, run):
    """d = 30 coordinates, m = 5 x 3 + 7 x 2 = 29 constraints (KBS23a §5.2), rank 29 at the start;
    G loses rank in the horizontal configuration."""
    mech = mechanics(problem.system, problem.q0)
    assert (mech.d, mech.m) == (30, 29)
    names = problem.system.constraint_names
    assert names[0] == "B1.orthonormal[d1.d1]" and "P4.revolute.x" in names and len(set(names)) == 29
    s0 = np.linalg.svd(np.asarray(mech.G(jnp.asarray(problem.q0))), compute_uv=False)
    assert s0.min() > 0.1
    first = int(np.argmin(np.abs(run.q[: int(1.0 / H), 3])))  # closest node to the first horizontal state
    s1 = np.linalg.svd(np.asarray(mech.G(jnp.asarray(run.q[first]))), compute_uv=False)
    assert s1.min() < 0.05 * s0.min()
    assert problem.symmetries == ()  # gravity and ground pins: no symmetry
    assert (problem.h, problem.t_end) == (1e-3, 10.0)


def test_runs_through_singular_configurations_on_time(run):
    """No Newton failure through the horizontal configurations; they come when the exact
    one-degree-of-freedom motion says (first-order scheme: within a few h)."""
    assert run.n_steps == 2000
    assert run.newton_iterations.max() < 40
    t1, t2, period = _exact_crossing_times()
    crossings = _crossings(run)
    assert len(crossings) == 2
    np.testing.assert_allclose(crossings, [t1, t2], atol=3 * H)


def test_constraints_figs_18_to_21(problem, run):
    """Position constraints at every node to the Newton tolerance (Figs 18, 20); the linear joint
    constraints also at velocity level at the nodes (Fig 21), the nonlinear internal ones only at
    q_bar = q^n + h v^n (Fig 19, KBS23a eq 41e)."""
    names = problem.system.constraint_names
    joint = [i for i, n in enumerate(names) if ".revolute." in n]
    internal = [i for i, n in enumerate(names) if ".orthonormal[" in n]
    assert len(joint) == 14 and len(internal) == 15
    assert np.abs(run.constraint_residual("position")).max() <= TOL
    gv = run.constraint_residual("velocity")
    assert np.abs(gv[:, joint]).max() <= TOL  # met at the nodes, to the Newton tolerance (a step may take
    # no Newton iteration when the extrapolated guess already meets it)
    assert np.abs(gv[:, internal]).max() > 1e3 * TOL  # not met at the nodes ...
    enforced = run.enforced_residuals()["velocity G(q_bar) M^-1 p^{n+1}"]
    assert np.abs(enforced).max() <= TOL  # ... but at q_bar


def test_energy_error_bounded(run):
    """The total energy oscillates (symplectic, first order: ~ h) and does not drift: one period
    later it repeats itself (Figs 14, 16)."""
    E = run.energy()["total"]
    E0 = E[0]
    assert E0 == pytest.approx(1.5 + 3.5 * G_ACC, rel=1e-14)
    dev = np.abs(E - E0)
    print(f"max |H - H0| / H0 = {dev.max() / E0:.3e}; max |H^(n+1) - H^n| = {np.abs(np.diff(E)).max():.3e}")
    assert 1e-5 < dev.max() / E0 < 5e-3
    assert np.abs(np.diff(E)).max() < 2e-3  # increments of order 1e-3 (Fig 16)
    _, _, period = _exact_crossing_times()
    t = run.t[run.t <= 2.0 - period]
    later = np.interp(t + period, run.t, E)
    assert np.max(np.abs(later - E[: len(t)])) < 0.01 * dev.max()


@pytest.mark.slow
def test_full_paper_run():
    """The paper's run, h = 1e-3 and T = 10: ten singular configurations, bounded energy error."""
    sol = lv.simulate(double_four_bar(), "VI-S", tol=TOL, progress=False)
    t1, t2, period = _exact_crossing_times()
    crossings = _crossings(sol)
    assert len(crossings) == 10
    expect = np.sort(np.concatenate([t1 + period * np.arange(5), t2 + period * np.arange(5)]))
    np.testing.assert_allclose(crossings, expect, atol=10 * H)
    E = sol.energy()["total"]
    windows = [np.abs(E[i : i + 2000] - E[0]).max() for i in range(0, 10000, 2000)]
    print("max |H - H0| per 2 s:", windows)
    assert max(windows) < 5e-3 * E[0] and max(windows) < 1.05 * min(windows)
    assert np.abs(sol.constraint_residual("position")).max() <= TOL


def test_dampers_energy_decay_and_balance():
    """With the dampers of KBS23a eq 77-78 the energy decays, and the energy lost per step matches the
    dissipated work h v^n.C v^n of that step up to O(h) per unit time (Figs 22-23): halving h halves
    the mismatch. Span 1.2 s, through the first singular configuration."""
    damped = double_four_bar(dampers=True)
    mismatch, power = [], []
    for h in (2e-3, 1e-3):
        sol = lv.simulate(damped, "VI-S", h=h, t_end=1.2, tol=TOL, progress=False)
        E, W = sol.energy()["total"], sol.dissipated_work()
        assert len(_crossings(sol)) == 1
        assert np.all(np.diff(W) >= 0) and W[-1] > 1.0
        assert E[-1] < E[0] - 0.9 * W[-1]
        mismatch.append(np.abs(np.diff(E) + np.diff(W)).max() / h)
        power.append(np.diff(W).max() / h)
    print(f"max |dH + dW| / h = {mismatch}; max dissipated power = {power}")
    slope = np.log2(mismatch[0] / mismatch[1])
    assert 0.8 < slope < 1.25
    assert mismatch[1] < 0.05 * power[1]


def test_animation_and_snapshot(run, tmp_path):
    from PIL import Image

    from livens.bodies import draw

    gif = draw.animate(run, tmp_path / "linkage.gif", fps=10, max_frames=8)
    with Image.open(gif) as im:
        assert im.format == "GIF" and im.n_frames == 8
        im.seek(0)
        first = np.asarray(im.convert("RGB"), dtype=float)
        im.seek(3)
        middle = np.asarray(im.convert("RGB"), dtype=float)
    assert np.abs(first - middle).mean() > 0.5  # the linkage moved between frames
    png = draw.snapshot(run, [0.0, 0.5, 0.714, 1.0], tmp_path / "linkage.png")
    with Image.open(png) as im:
        assert im.format == "PNG" and min(im.size) > 100
    with pytest.raises(ValueError, match=r"times must lie in"):
        draw.snapshot(run, [5.0], tmp_path / "bad.png")
