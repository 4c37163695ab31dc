"""The chain of 3D rigid bodies on spherical joints (``chain-3d``, livens' own test system).

- EM (KBS23b eq 84-91) on the six-rod chain keeps the total energy, the momentum map about the
  vertical axis (gravity along e3, the ground joint on the axis) and both constraints at the
  nodes to the Newton tolerance; the momentum map's value is the chain's I_33 omega, computed here
  from the rods' geometry, not by livens.
- One rod is a heavy symmetric top with its pivot at the rod's end (a Lagrange top): its axis u(t)
  from EM agrees with SciPy's integration of the top's Euler equations in vector form, and the
  error falls as h^2 (EM's order 2).
- The six rods' EM step (324 Newton unknowns, past EngineOptions.max_native_unknowns) runs as
  native code by default: its tangent by bodies factorizes dense blocks within the limit. Slow: on
  request too, with XLA's Newton iterations and states to round-off.
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import livens as lv
from livens.engine import native
from livens.examples.chain_3d import directions

TOL = 1e-12


def _rod_inertia(mass, length, radius):
    """(J about the axis, J transverse about the centre) of a solid rod."""
    return 0.5 * mass * radius**2, mass * (length**2 / 12.0 + radius**2 / 4.0)


def _vertical_momentum(par) -> float:
    """omega I_33 of the rigidly turning chain at its start, from the rods' geometry (steiner)."""
    n, l, m, r, w = par["n_bodies"], par["length"], par["mass"], par["radius"], par["omega"]
    Ja, Jt = _rod_inertia(m, l, r)
    top, total = np.zeros(3), 0.0
    for u in directions(n, par["tilt"], par["twist"]):
        c = top + 0.5 * l * u
        # I_33 of the rod about the vertical through its centre: Jt + (Ja - Jt) u_z^2
        total += w * (m * (c[0] ** 2 + c[1] ** 2) + Jt + (Ja - Jt) * u[2] ** 2)
        top = top + l * u
    return total


def test_em_keeps_energy_momentum_and_constraints_of_the_six_rod_chain():
    problem = lv.examples.load("chain-3d", t_end=0.25)
    par = lv.examples.parameters("chain-3d")
    assert par["n_bodies"] == 6 and len(problem.q0) == 72
    sol = lv.simulate(problem, "EM", tol=TOL, progress=False)
    assert sol.n_steps == 50
    assert sol.meta["backend"] == ("xla" if native.compiler() is None else "native")
    energy = sol.energy()
    H, T = energy["total"], energy["kinetic"]
    assert T.max() > 2 * T[0]  # the chain falls: energy moves from V to T
    assert np.abs(H - H[0]).max() <= 1e-12 * np.abs(energy["potential"]).max()
    J = sol.momentum_maps()["J3"]
    assert J[0] == pytest.approx(_vertical_momentum(par), rel=1e-13)
    assert np.abs(J - J[0]).max() <= 1e-12 * abs(J[0])
    for where in ("position", "velocity"):
        assert np.abs(sol.constraint_residual(where)).max() <= 10 * TOL, where


def _lagrange_top(par, t_end: float):
    """The axis u(t_end) of one rod on a spherical joint at its end, by SciPy (DOP853): a symmetric
    top, L = I_t' omega + (J_a - I_t') (omega.u) u about the pivot (I_t' = J_t + m (l/2)^2),
    dL/dt = (l/2) u x (-m g e3), du/dt = omega x u."""
    l, m, g = par["length"], par["mass"], par["gravity"]
    Ja, Jt = _rod_inertia(m, l, par["radius"])
    It = Jt + m * (0.5 * l) ** 2

    def omega_of(L, u):
        along = (L @ u) / Ja
        return (L - (L @ u) * u) / It + along * u

    def rhs(_, y):
        L, u = y[:3], y[3:]
        w = omega_of(L, u)
        return np.concatenate([0.5 * l * np.cross(u, [0.0, 0.0, -m * g]), np.cross(w, u)])

    u0 = directions(1, par["tilt"], par["twist"])[0]
    w0 = np.array([0.0, 0.0, par["omega"]])
    L0 = It * w0 + (Ja - It) * (w0 @ u0) * u0
    out = solve_ivp(rhs, (0.0, t_end), np.concatenate([L0, u0]), method="DOP853", rtol=1e-12, atol=1e-13)
    return out.y[3:, -1]


def test_one_rod_is_the_lagrange_top_of_scipy():
    t_end = 0.5
    par = dict(lv.examples.parameters("chain-3d"), n_bodies=1)
    reference = _lagrange_top(par, t_end)
    errors = []
    for h in (0.01, 0.005):
        problem = lv.examples.load("chain-3d", n_bodies=1, h=h, t_end=t_end)
        sol = lv.simulate(problem, "EM", tol=TOL, progress=False)
        errors.append(np.abs(sol.q[-1, 3:6] - reference).max())  # d1 = u, the rod's axis
    assert errors[1] < 1e-3
    assert 3.0 < errors[0] / errors[1] < 5.0  # order 2


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="n_bodies must be a positive integer; got 0"):
        lv.examples.load("chain-3d", n_bodies=0)
    with pytest.raises(ValueError, match="radius must be positive"):
        lv.examples.load("chain-3d", radius=0.0)


@pytest.mark.slow
def test_six_rods_run_natively_on_request_as_with_xla():
    """backend="native" past the native size limit (324 unknowns; the translator keeps the arrays
    past the C stack's limit in scratch memory): the same Newton iterations and states to
    round-off as XLA."""
    if native.compiler() is None:
        pytest.skip("no C compiler")
    problem = lv.examples.load("chain-3d", t_end=0.1)
    runs = {b: lv.simulate(problem, "EM", tol=TOL, progress=False, backend=b) for b in ("native", "xla")}
    assert runs["native"].meta["backend"] == "native" and runs["xla"].meta["backend"] == "xla"
    np.testing.assert_array_equal(runs["native"].newton_iterations, runs["xla"].newton_iterations)
    assert np.abs(runs["native"].q - runs["xla"].q).max() <= 1e-12
