"""AD mechanics against finite differences, VI-S on the pendulum and the heavy top, the Solution and
its files, failed runs, bad input."""

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.mechanics import mechanics

TOL = 1e-12


# --------------------------------------------------------------------------- mechanics vs FD
def _random_system(seed, d=5, m=2, q_mass=False):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    M0 = A @ A.T + d * np.eye(d)
    c = rng.normal(size=(d,))
    K = rng.normal(size=(d, d))
    B = rng.normal(size=(m, d))
    Cq = rng.normal(size=(d, d))

    def potential(q):
        return c @ q + 0.25 * jnp.sum((K @ q) ** 4) + jnp.sin(q[0] * q[1])

    def constraints(q):
        return jnp.tanh(B @ q) + 0.5 * (B @ q) ** 2 * q[0] - 0.1

    mass = (lambda q: jnp.asarray(M0) * (1.0 + 0.1 * jnp.sin(q @ q))) if q_mass else M0
    dissipation = lambda q: jnp.asarray(Cq @ Cq.T) * (1 + q[0] ** 2)  # noqa: E731
    system = lv.System(mass_matrix=mass, potential=potential, constraints=constraints, dissipation=dissipation)
    return system, rng


def _fd_grad(f, x, eps=1e-6):
    x = np.asarray(x, float)
    out = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        out.append((np.asarray(f(jnp.asarray(x + e))) - np.asarray(f(jnp.asarray(x - e)))) / (2 * eps))
    return np.stack(out, axis=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mechanics_derivatives_match_finite_differences(seed):
    system, rng = _random_system(seed)
    q = rng.normal(size=5) * 0.5
    mech = mechanics(system, q)
    assert (mech.d, mech.m) == (5, 2)
    p, v = rng.normal(size=5), rng.normal(size=5)
    gam, w = rng.normal(size=2), rng.normal(size=5)
    qj = jnp.asarray(q)
    np.testing.assert_allclose(mech.dV(qj), _fd_grad(mech.V, q), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mech.G(qj), _fd_grad(mech.g, q), rtol=1e-6, atol=1e-7)
    # sum_k gam_k D^2 g_k w  ==  d/dq (G(q)^T gam) . w
    fd_h = _fd_grad(lambda x: mech.G(x).T @ gam, q) @ w
    np.testing.assert_allclose(mech.hess_g_vec(qj, jnp.asarray(gam), jnp.asarray(w)), fd_h, rtol=1e-6, atol=1e-6)
    for k in range(2):
        np.testing.assert_allclose(mech.hess_g(qj, k), _fd_grad(lambda x: mech.G(x)[k], q), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        mech.D1gv(qj, jnp.asarray(p)), _fd_grad(lambda x: mech.gv(x, jnp.asarray(p)), q), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(
        mech.D2gv(qj, jnp.asarray(p)), _fd_grad(lambda y: mech.gv(qj, y), p), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(
        mech.D1L(qj, jnp.asarray(v)), _fd_grad(lambda x: mech.L(x, jnp.asarray(v)), q), rtol=1e-6, atol=1e-6
    )


def test_configuration_dependent_mass_derivatives():
    system, rng = _random_system(3, q_mass=True)
    q = rng.normal(size=5) * 0.5
    v = rng.normal(size=5)
    mech = mechanics(system, q)
    assert not mech.constant_mass and mech.Minv_const is None
    qj, vj = jnp.asarray(q), jnp.asarray(v)
    np.testing.assert_allclose(mech.dT_dq(qj, vj), _fd_grad(lambda x: mech.T(x, vj), q), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mech.D1L(qj, vj), _fd_grad(lambda x: mech.L(x, vj), q), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(mech.D2L(qj, vj), _fd_grad(lambda y: mech.L(qj, y), v), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="M\\^-1"):
        mech.Minv()


# --------------------------------------------------------------------------- VI-S on the examples
@pytest.fixture(scope="module")
def pendulum():
    return lv.examples.load("pendulum-3d")


@pytest.fixture(scope="module")
def top_run():
    return lv.simulate(lv.examples.load("heavy-top"), "VI-S", t_end=0.2, tol=TOL)


def test_vi_s_pendulum_constraint_and_momentum(pendulum):
    sol = lv.simulate(pendulum, "VI-S", tol=TOL)
    assert sol.n_steps == 200 and sol.velocity_kind == "leading" and sol.v.shape == (200, 3)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 10 * TOL
    J = sol.momentum_maps()["J3"]
    assert abs(J[0]) > 0.5  # non-trivial angular momentum
    assert np.max(np.abs(np.diff(J))) <= 50 * TOL
    # every step converged below tol
    assert np.all(sol.newton_residual <= TOL)


def test_vi_s_heavy_top_constraint_and_momentum(top_run):
    sol = top_run
    assert sol.q.shape == (101, 12) and sol.lam.shape == (100, 9) and sol.gam.shape == (100, 9)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 10 * TOL
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(np.diff(J))) <= 1e-14 * max(1.0, abs(J[0])) + 10 * TOL * abs(J[0])
    enforced = sol.enforced_residuals()
    assert set(enforced) == {"position g(q^{n+1})", "velocity G(q_bar) M^-1 p^{n+1}"}
    for r in enforced.values():
        assert np.max(np.abs(r)) <= 1e3 * TOL  # residual scale includes 1/E_i ~ 4e3
    nodal_v = sol.constraint_residual("velocity")
    # KBS23b §6.2 Fig 20: the nonlinear internal constraints are not met at the nodes, the linear ones are
    assert np.max(np.abs(nodal_v[1:, :6])) > 1e-3
    assert np.max(np.abs(nodal_v[:, 6:])) <= 1e3 * TOL


def test_vi_s_first_order(pendulum):
    t_end = 0.4
    ref = lv.simulate(pendulum, "VI-S", h=t_end / 4000, t_end=t_end, tol=TOL)
    hs = [t_end / 40, t_end / 80, t_end / 160]
    errs = [np.linalg.norm(lv.simulate(pendulum, "VI-S", h=h, t_end=t_end, tol=TOL).q[-1] - ref.q[-1]) for h in hs]
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert 0.85 < slope < 1.2, (slope, errs)


def test_damped_energy_balance_first_order():
    problem = lv.examples.load("pendulum-3d", dissipation=0.5)
    mism = []
    for h in (0.02, 0.01, 0.005):
        sol = lv.simulate(problem, "VI-S", h=h, t_end=1.0, tol=TOL)
        H = sol.energy()["total"]
        W = sol.dissipated_work()
        assert W[-1] > 0.05  # the damper does work
        assert H[-1] < H[0]
        mism.append(np.max(np.abs(H - H[0] + W)))
    slope = np.polyfit(np.log([0.02, 0.01, 0.005]), np.log(mism), 1)[0]
    assert 0.8 < slope < 1.3, (slope, mism)


# --------------------------------------------------------------------------- Solution files
def test_netcdf_round_trip(tmp_path, top_run):
    path = top_run.to_netcdf(tmp_path / "top.nc")
    back = lv.load(path)
    for name in ("t", "q", "p", "v", "lam", "gam", "newton_iterations", "newton_residual"):
        np.testing.assert_array_equal(getattr(back, name), getattr(top_run, name))
    assert back.scheme == "ggl-vi" and back.velocity_kind == "leading"
    assert back.meta["h"] == top_run.meta["h"] and back.meta["tol"] == TOL
    assert back.meta["example"] == "heavy-top" and back.meta["package_version"]
    np.testing.assert_allclose(back.energy()["total"], top_run.energy()["total"], rtol=0, atol=0)
    # without a system attached, the stored diagnostics are returned
    back.problem = None
    np.testing.assert_array_equal(back.energy()["total"], top_run.energy()["total"])
    np.testing.assert_array_equal(back.momentum_maps()["J3"], top_run.momentum_maps()["J3"])
    np.testing.assert_array_equal(back.constraint_residual("velocity"), top_run.constraint_residual("velocity"))


def test_csv_has_named_columns(tmp_path, pendulum):
    sol = lv.simulate(pendulum, "VI-S", t_end=0.5)
    path = sol.to_csv(tmp_path / "p.csv")
    header = open(path).readline().strip().split(",")
    assert header[:4] == ["t", "q1", "q2", "q3"]
    assert {"energy_total", "J_J3", "lambda1", "gamma1", "newton_iterations"} <= set(header)
    data = np.loadtxt(path, delimiter=",", skiprows=1)
    assert data.shape == (sol.n_steps + 1, len(header))
    np.testing.assert_array_equal(data[:, 0], sol.t)


def test_load_refuses_foreign_and_truncated_files(tmp_path):
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"not a netcdf file at all")
    with pytest.raises(lv.FileFormatError, match="not a readable livens result file"):
        lv.load(bad)
    import xarray as xr

    foreign = tmp_path / "foreign.nc"
    xr.Dataset({"x": ("a", np.arange(3.0))}).to_netcdf(foreign, engine="h5netcdf")
    with pytest.raises(lv.FileFormatError, match="not a livens result file"):
        lv.load(foreign)
    with pytest.raises(FileNotFoundError):
        lv.load(tmp_path / "missing.nc")


# --------------------------------------------------------------------------- failures
def test_convergence_error_keeps_partial_solution(pendulum):
    # a step far too large for 2 Newton iterations: the run must stop with the steps so far
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(pendulum, "VI-S", h=0.05, t_end=10.0, max_iter=3, rescue=False, guess="simple")
    err = info.value
    assert err.step is not None and err.time == pytest.approx(err.step * 0.05)
    assert err.residual > 1e-9
    assert "step" in str(err) and "residual" in str(err)
    sol = err.solution
    assert sol.n_steps == err.step
    assert np.all(sol.newton_residual <= 1e-9)
    if sol.n_steps:
        ok = lv.simulate(pendulum, "VI-S", h=0.05, t_end=sol.n_steps * 0.05)
        np.testing.assert_allclose(sol.q, ok.q, atol=1e-8)


def test_no_recompile_when_h_changes(pendulum):
    import sys

    drv = sys.modules["livens.driver.run"]
    lv.simulate(pendulum, "VI-S", h=0.01, t_end=0.1)
    runners = [
        r
        for k, r in drv._LOOPS.items()
        if k[1].name == "ggl-vi" and k[0].system is pendulum.system and k[2] == "extrapolated"
    ]
    assert len(runners) == 1
    size = runners[0]._cache_size()
    lv.simulate(pendulum, "VI-S", h=0.013, t_end=0.5, tol=1e-10, max_iter=30)
    assert runners[0]._cache_size() == size


# --------------------------------------------------------------------------- bad input
def test_off_manifold_initial_state_refused_and_projected():
    system = lv.examples.load("pendulum-3d").system
    with pytest.raises(ValueError, match=r"position level .*rod.*= 1\.005e-02"):
        lv.Problem(system, q0=[1.01, 0, 0], v0=[0, 1, 0])
    with pytest.raises(ValueError, match="velocity level"):
        lv.Problem(system, q0=[1, 0, 0], v0=[0.1, 1, 0])
    q, v = lv.consistent_initial_state(system, [1.01, 0.02, 0.0], [0.1, 1, 0])
    assert abs(q @ q - 1) < 1e-13 and abs(q @ v) < 1e-13
    lv.Problem(system, q0=q, v0=v)  # accepted


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(q0=[1, 0], v0=[0, 1, 0]), "2 entries but the mass matrix is 3 x 3"),
        (dict(q0=[1, 0, 0], v0=[0, 1]), "v0 has 2 entries"),
        (dict(q0=[[1, 0, 0]], v0=[0, 1, 0]), "vector of shape"),
        (dict(q0=[1, 0, float("nan")], v0=[0, 1, 0]), "non-finite"),
        (dict(q0=[1, 0, 0]), "Give the initial velocity v0"),
    ],
)
def test_bad_problem_input(kwargs, match):
    system = lv.examples.load("pendulum-3d").system
    with pytest.raises(ValueError, match=match):
        lv.Problem(system, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(h=0.0), "h must be positive"),
        (dict(h=-0.1), "h must be positive"),
        (dict(h=float("inf")), "finite"),
        (dict(h=0.1, t_end=0.05), "at least one step"),
        (dict(tol=-1.0), "tolerance"),
        (dict(max_iter=0), "max_iter"),
        (dict(scheme="VI-Z"), "Unknown scheme"),
        (dict(guess="clever"), "guess"),
    ],
)
def test_bad_run_arguments(pendulum, kwargs, match):
    with pytest.raises(ValueError, match=match):
        lv.simulate(pendulum, **kwargs)


def test_bad_system_functions():
    with pytest.raises(ValueError, match="potential returned shape"):
        lv.Problem(lv.System(np.eye(2), potential=lambda q: q), q0=[0, 0], v0=[0, 0])
    with pytest.raises(ValueError, match="not symmetric"):
        lv.Problem(lv.System(np.array([[1.0, 0.5], [0.0, 1.0]]), potential=lambda q: q @ q), q0=[0, 0], v0=[0, 0])
    with pytest.raises(ValueError, match="positive semi-definite"):
        lv.Problem(lv.System(np.diag([1.0, -1.0]), potential=lambda q: q @ q), q0=[0, 0], v0=[0, 0])
    with pytest.raises(
        ValueError, match=r"constraints must return a vector of shape \(m,\); got shape \(\) \(a 0-d scalar"
    ):
        lv.Problem(
            lv.System(np.eye(3), potential=lambda q: q[2], constraints=lambda q: 0.5 * (q @ q - 1.0)),
            q0=[1.0, 0, 0],
            v0=[0, 1.0, 0],
        )
    with pytest.raises(ValueError, match="constraints returned non-finite"):
        lv.Problem(
            lv.System(np.eye(2), potential=lambda q: q @ q, constraints=lambda q: jnp.log(q[:1] - 1)),
            q0=[0.0, 0],
            v0=[0, 0],
        )


def test_scheme_registry_and_aliases():
    assert "ggl-vi" in lv.schemes.names()
    sch, params = lv.schemes.get("VI-S")
    assert sch.name == "ggl-vi" and params == {}
    with pytest.raises(ValueError, match="lv.simulate: unknown keyword 'theta'.*ggl-vi takes no parameters"):
        lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", theta=0.5)
    with pytest.raises(ValueError, match="lv.simulate: unknown keyword 'steps'. lv.simulate takes h, t_end, tol"):
        lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", steps=20)
    with pytest.raises(ValueError, match="lv.simulate_ensemble: unknown keyword 'max_iters'. Did you mean 'max_iter'"):
        lv.simulate_ensemble(lv.examples.load("pendulum-3d"), "VI-S", q0s=[[0.0, 0.0, -1.0]], max_iters=3)


def test_user_defined_system_in_a_few_lines():
    pendulum = lv.System(
        mass_matrix=jnp.eye(3), potential=lambda q: 9.81 * q[2], constraints=lambda q: jnp.array([0.5 * (q @ q - 1.0)])
    )
    problem = lv.Problem(
        pendulum, q0=[1, 0, 0], v0=[0, 1, 0], symmetries=[lv.Symmetry.rotation(axis=[0, 0, 1], blocks=1)]
    )
    sol = lv.simulate(problem, scheme="VI-S", h=0.01, t_end=0.5, tol=TOL)
    assert sol.t[-1] == pytest.approx(0.5)
    J = list(sol.momentum_maps().values())[0]
    assert np.max(np.abs(J - J[0])) < 1e-10
    summary = sol.summary()
    # the rate of the 50 steps over their own time, noted as that of a short run
    assert summary["steps"] == 50 and summary["steps/s"] > 0 and "short run" in summary["steps/s note"]
