"""BS99, the discrete Lagrange top of Bobenko and Suris (1999), on the heavy top of KBS23b §6.2.

Checked against what livens did not compute: a NumPy loop of the map's two formulas (papers
README, "BS99"), the analytic steady precession phi_3 = 0.0375 (KBS23b eq 113), and the exact identity
between the physical and the deformed energy that follows from the map,

    H^n - H^0 = -(h M g l / (2 I1)) [m^n.(e3 x d^n) - m^0.(e3 x d^0)],

(H = |m|^2/(2 I1) + (1/(2 I3) - 1/(2 I1)) (m.d)^2 + M g l e3.d; the deformed energy and m.d are
conserved), so the physical energy error is O(h) and bounded, and vanishes to first order on a
steady precession (m.(e3 x d) = -I1 e3.d' = 0): on the paper's top it is O(h^2)
(measured ratio 4.00 per halving), on a nutating top O(h).
"""

import dataclasses
import io
import os
from contextlib import redirect_stdout

import numpy as np
import pytest
from _compiles import backend_compiles

import livens as lv

# the heavy top of KBS23b §6.2 (eq 108-112), written out here
MASS, J, L, G = 0.7069, 5.3014e-4, 0.075, 9.81
ALPHA0, OMEGA_P = np.pi / 3, 10.0
I1, I3 = J + MASS * L**2, J
MGL = MASS * G * L
E3 = np.array([0.0, 0.0, 1.0])


def _hat(w):
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def numpy_bs99(d, m, h, n):
    """The README's two formulas: m+ = m + h M g l (e3 x d); d+ = cay(h m+ / I1) d."""
    ds, ms = [d], [m]
    for _ in range(n):
        m = m + h * MGL * np.cross(E3, d)
        W = _hat(h * m / I1)
        w2 = (h / I1) ** 2 * (m @ m)
        d = (np.eye(3) + 4.0 / (4.0 + w2) * (W + 0.5 * W @ W)) @ d
        ds.append(d)
        ms.append(m)
    return np.array(ds), np.array(ms)


def rest_frame(sol):
    """(d, m) at the nodes: d = d3, m = phi x p_phi + sum_i d_i x p_{d_i}."""
    Q, P = sol.q.reshape(-1, 4, 3), sol.p.reshape(-1, 4, 3)
    return Q[:, 3], np.cross(Q, P).sum(axis=1)


def steady_axis_and_momentum():
    """d0 and m0 = I_O omega0 of the paper's steady precession (KBS23b eq 109, 111, 112)."""
    c, s = np.cos(ALPHA0), np.sin(ALPHA0)
    d0 = np.array([0.0, -s, c])
    omega_s = MGL / (I3 * OMEGA_P) + (I1 - I3) / I3 * OMEGA_P * c
    omega = OMEGA_P * E3 + omega_s * d0
    m0 = I1 * (omega - (omega @ d0) * d0) + I3 * (omega @ d0) * d0
    return d0, m0


@pytest.fixture(scope="module")
def top():
    return lv.examples.load("heavy-top")


@pytest.fixture(scope="module")
def nutating(top):
    """The paper's top with half the precession rate: it nutates (phi_3 between 0.004 and 0.0375)."""
    Q = top.q0.reshape(4, 3)
    d0, _ = steady_axis_and_momentum()
    omega_s = MGL / (I3 * OMEGA_P) + (I1 - I3) / I3 * OMEGA_P * np.cos(ALPHA0)
    omega = 0.5 * OMEGA_P * E3 + omega_s * d0
    return top.replace(v0=np.cross(omega, Q).ravel())


def test_registered_with_alias_and_listed():
    sch, params = lv.schemes.get("BS99")
    assert sch.name == "bs99" and params == {} and "bs99" in lv.schemes.names()
    assert sch.about.order == 1 and sch.unknowns == ()
    from livens.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["list"])
    line = [ln for ln in buf.getvalue().splitlines() if ln.strip().startswith("bs99")]
    assert line and "BS99" in line[0] and "Bobenko" in line[0]


def test_same_d_and_m_as_a_numpy_loop_of_the_formulas(top):
    h, n = 0.002, 1000
    d0, m0 = steady_axis_and_momentum()
    sol = lv.simulate(top, "bs99", h=h, t_end=n * h)
    d, m = rest_frame(sol)
    # the node's angular momentum about the origin is I_O omega (m = phi x p_phi + sum d_i x p_di)
    np.testing.assert_allclose(m[0], m0, rtol=0, atol=1e-15)
    ds, ms = numpy_bs99(d0, m0, h, n)
    # round-off, amplified along the trajectory (measured: 1e-17 after one step, 7e-15 after 100,
    # 4e-13 in d and 2e-14 in m after 1000)
    assert np.max(np.abs(d[:2] - ds[:2])) < 1e-16 and np.max(np.abs(m[:2] - ms[:2])) < 2e-16
    assert np.max(np.abs(d[:101] - ds[:101])) < 5e-14
    assert np.max(np.abs(d - ds)) < 2e-12 and np.max(np.abs(m - ms)) < 2e-13
    # the frame follows the axis: phi = l d3 and the tip stays at the origin
    np.testing.assert_allclose(sol.q[:, 0:3], L * d, rtol=0, atol=1e-15)
    # explicit: no Newton iteration, no multipliers
    assert np.all(sol.newton_iterations == 0) and np.all(sol.newton_residual == 0)
    assert sol.lam.shape == (n, 9) and np.all(np.isnan(sol.lam)) and sol.gam is None


@pytest.mark.parametrize("which", ["steady", "nutating"])
def test_invariants_to_round_off_over_1000_steps(top, nutating, which):
    problem = top if which == "steady" else nutating
    sol = lv.simulate(problem, "bs99", h=0.002, t_end=2.0)
    assert sol.n_steps == 1000
    d, m = rest_frame(sol)
    scale = np.max(np.linalg.norm(m, axis=1))
    assert np.max(np.abs(m[:, 2] - m[0, 2])) < 1e-13 * scale
    np.testing.assert_allclose(sol.momentum_maps()["J3"], m[:, 2], rtol=0, atol=1e-16)
    md = np.einsum("ni,ni->n", m, d)
    assert np.max(np.abs(md - md[0])) < 1e-13 * scale
    assert np.max(np.abs(np.linalg.norm(d, axis=1) - 1.0)) < 1e-14
    deformed = np.einsum("ni,ni->n", m[:-1], m[1:]) / (2 * I1) + MGL * d[:-1, 2]
    assert np.max(np.abs(deformed - deformed[0])) < 2e-13 * abs(deformed[0])  # measured 2e-14, 6e-14
    for name, r in sol.enforced_residuals().items():
        assert np.max(np.abs(r)) < 5e-13, name  # measured 6e-15 (position), 6e-14 (velocity)
    # the physical energy is not conserved
    H = sol.energy()["total"]
    assert np.max(np.abs(H - H[0])) > 1e-6 * abs(H[0])


def test_physical_energy_error_is_the_exact_order_h_term(nutating):
    errs = []
    for h in (0.002, 0.001, 0.0005):
        sol = lv.simulate(nutating, "bs99", h=h, t_end=1.0)
        d, m = rest_frame(sol)
        H = sol.energy()["total"]
        # by hand from (d, m): H = |m|^2/(2 I1) + (1/(2 I3) - 1/(2 I1)) (m.d)^2 + M g l e3.d
        md = np.einsum("ni,ni->n", m, d)
        H_hand = np.einsum("ni,ni->n", m, m) / (2 * I1) + (0.5 / I3 - 0.5 / I1) * md**2 + MGL * d[:, 2]
        np.testing.assert_allclose(H, H_hand, rtol=1e-13)
        c = np.einsum("ni,ni->n", m, np.cross(E3, d))
        # exact up to the round-off of the conserved deformed energy, which walks with the number of
        # steps (measured at h = 0.0005, 2000 steps: 7e-14 |H0| with XLA, 1.1e-13 |H0| natively)
        np.testing.assert_allclose(H - H[0], -h * MGL / (2 * I1) * (c - c[0]), rtol=0, atol=3e-13 * abs(H[0]))
        errs.append(np.max(np.abs(H - H[0])) / abs(H[0]))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all((ratios > 1.8) & (ratios < 2.2)), (errs, ratios)


def test_first_order_in_phi3_against_the_steady_precession_by_a_convergence_study():
    from livens import studies

    hs = (1e-4, 5e-5, 2.5e-5, 1.25e-5)
    st = studies.ConvergenceStudy.make(
        "heavy-top", ["BS99"], hs=hs, t_end=0.001, quantities=[studies.Quantity("phi3", "q", (2,), 0.0375)]
    )
    res = studies.run_study(st)
    order = res.orders[("BS99", "phi3")]
    assert 0.97 < order < 1.03, res.table()
    _, errs = res.errors("BS99", "phi3")
    assert 5e-6 < errs[0] < 2e-5  # measured 8.66e-6 at h = 1e-4 (VI-S: 8.65e-6)


def test_file_round_trip_summary_and_plots_with_nan_multipliers(top, tmp_path):
    sol = lv.simulate(top, "bs99", h=0.002, t_end=0.2)
    path = sol.to_netcdf(tmp_path / "top.nc")
    back = lv.load(path)
    assert np.array_equal(back.q, sol.q) and np.all(np.isnan(back.lam)) and back.scheme == "bs99"
    s = sol.summary()
    assert s["mean Newton iterations"] == 0.0 and s["max |g|"] < 1e-13
    sol.to_csv(tmp_path / "top.csv")
    from livens.plots import overview_figure
    from livens.studies.trace import Trace

    assert os.path.exists(overview_figure(sol, str(tmp_path / "top.png")))
    tr = Trace.from_solution(sol)
    assert np.all(np.isnan(tr.lam))
    rest = lv.simulate(top, "bs99", h=0.002, t_end=0.4, resume=sol)
    full = lv.simulate(top, "bs99", h=0.002, t_end=0.4)
    assert np.array_equal(rest.q[-1], full.q[-1]) and np.array_equal(rest.p[-1], full.p[-1])


def test_ensemble_members_are_single_runs(top, nutating):
    q0s = np.stack([top.q0, nutating.q0])
    v0s = np.stack([top.v0, nutating.v0])
    ens = lv.simulate_ensemble(top, "bs99", q0s, v0s, h=0.002, t_end=0.2)
    for b, problem in enumerate((top, nutating)):
        single = lv.simulate(problem, "bs99", h=0.002, t_end=0.2)
        np.testing.assert_allclose(ens[b].q, single.q, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ens[b].p, single.p, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "example, why",
    [
        ("pendulum-3d", "d = 3 coordinates and m = 1 constraints"),
        ("four-particle", "d = 12 coordinates and m = 2 constraints"),
        ("double-spherical-pendulum", "coordinates"),
    ],
)
def test_refuses_other_systems(example, why):
    with pytest.raises(ValueError, match="applies only to the symmetric heavy top") as err:
        lv.simulate(lv.examples.load(example), "BS99", h=0.01, t_end=0.1)
    assert why in str(err.value)


def test_refuses_an_asymmetric_or_non_linear_heavy_top(top):
    with pytest.raises(ValueError, match=r"E1 = .* differs from E2"):
        lv.simulate(lv.examples.load("heavy-top", inertia=(4e-4, 5e-4, 6e-4)), "bs99", h=0.002, t_end=0.01)
    V = top.system.potential  # (q, params): the example declares gravity as a System parameter
    curved = dataclasses.replace(top.system, potential=lambda q, par: V(q, par) + 0.1 * q[0] ** 2)
    with pytest.raises(ValueError, match="gradient of the potential"):
        lv.simulate(top.replace(system=curved), "bs99", h=0.002, t_end=0.01)
    on_directors = dataclasses.replace(top.system, potential=lambda q, par: V(q, par) + 0.1 * q[5])
    with pytest.raises(ValueError, match="gradient of the potential"):
        lv.simulate(top.replace(system=on_directors), "bs99", h=0.002, t_end=0.01)


def test_the_applicability_check_compiles_no_program():
    """The check that a system is BS99's heavy top evaluates dV and g at q0 and three rotations of it
    by NumPy from their jaxprs (and the rotations themselves by NumPy): no XLA program is compiled for
    it, and it still accepts the heavy top and refuses a potential that is not linear in phi."""
    from livens.mechanics import mechanics
    from livens.schemes import bs99

    top = lv.examples.load("heavy-top")
    V = top.system.potential
    curved = top.replace(system=dataclasses.replace(top.system, potential=lambda q, par: V(q, par) + 0.1 * q[0] ** 2))
    with backend_compiles() as compiles:  # the uncached check (applicability caches its verdict per system and q0)
        verdicts = [bs99._applicability(np.asarray(p.q0), mechanics(p.system, p.q0)) for p in (top, curved)]
    assert compiles == []
    assert verdicts[0] is None
    assert "gradient of the potential" in verdicts[1]
