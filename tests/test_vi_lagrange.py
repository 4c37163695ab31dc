"""Variational integrators of SLO09 (eq 14-18) on the double spherical pendulum (SLO09 §4.1).

What SLO09 promises: the Lagrange-multiplier form (eq 14, 15) and the discrete null space method
(eq 16, 17) are equivalent, so they give the same trajectory; both are second order (Fig. 4); the
maximal velocity over [0, 10] is the one of Table 1; L3 (rotation about e3) is conserved (Fig. 3).
Table 1 as printed in SLO09 (all 17 digits survived in our text copy):
"""

import numpy as np
import pytest

import livens as lv

TOL = 1e-12
TABLE_1 = {  # SLO09 Table 1: h -> max_j ||u_h'(t_j)||
    1e-1: 14.437579674951671,
    1e-2: 11.992045771547241,
    1e-3: 11.979460050283279,
    1e-4: 11.979355188823591,
    1e-5: 11.979353929835233,
}
SCHEMES = ("vi-lagrange", "vi-nullspace")


@pytest.fixture(scope="module")
def pendulum():
    return lv.examples.load("double-spherical-pendulum")


@pytest.fixture(scope="module")
def runs(pendulum):
    """The Table 1 runs on [0, 10] for h = 0.1 and 0.01, both schemes."""
    return {(s, h): lv.simulate(pendulum, s, h=h, t_end=10.0, tol=TOL) for s in SCHEMES for h in (0.1, 0.01)}


def _max_velocity(sol):
    """max_i ||(u_{i+1} - u_i)/h|| over the run (the interval velocities of the scheme)."""
    assert sol.velocity_kind == "interval"
    np.testing.assert_allclose(sol.v, np.diff(sol.q, axis=0) / sol.h, rtol=0, atol=1e-12)
    return float(np.max(np.linalg.norm(sol.v, axis=1)))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("h", [0.1, 0.01])
def test_table_1_maximal_velocity(runs, scheme, h):
    vmax = _max_velocity(runs[(scheme, h)])
    assert runs[(scheme, h)].n_steps == round(10.0 / h)
    assert abs(vmax - TABLE_1[h]) <= 1e-9 * TABLE_1[h], (vmax, TABLE_1[h])


@pytest.mark.slow
@pytest.mark.parametrize(
    "scheme, h, tol", [("vi-lagrange", 1e-3, 1e-10), ("vi-nullspace", 1e-3, 1e-10), ("vi-lagrange", 1e-4, 1e-9)]
)
def test_table_1_maximal_velocity_small_steps(pendulum, scheme, h, tol):
    """Eq 14 is in momentum units with terms M (u_{i+1} - u_i)/h, whose round-off grows like 1/h
    (about 3e-12 at h = 1e-3): the Newton tolerance is set above it."""
    sol = lv.simulate(pendulum, scheme, h=h, t_end=10.0, tol=tol)
    vmax = _max_velocity(sol)
    assert abs(vmax - TABLE_1[h]) <= 1e-9 * TABLE_1[h], (vmax, TABLE_1[h])


@pytest.mark.parametrize("h", [0.1, 0.01])
def test_lagrange_and_nullspace_give_the_same_trajectory(runs, h):
    a, b = runs[("vi-lagrange", h)], runs[("vi-nullspace", h)]
    # same equations solved to the Newton tolerance; the chaotic motion amplifies differences
    # over 10 s, so compare the first 2 s tightly and the whole run loosely
    n = round(2.0 / h)
    assert np.max(np.abs(a.q[: n + 1] - b.q[: n + 1])) < 1e-10
    assert np.max(np.abs(a.p[: n + 1] - b.p[: n + 1])) < 1e-8
    assert np.max(np.abs(a.lam[:n] - b.lam[:n])) < 1e-7 * max(1.0, np.max(np.abs(a.lam)))
    assert np.max(np.abs(a.q - b.q)) < 1e-8


@pytest.mark.parametrize("scheme", SCHEMES)
def test_constraints_and_angular_momentum(runs, scheme):
    for h in (0.1, 0.01):
        sol = runs[(scheme, h)]
        assert np.max(np.abs(sol.constraint_residual("position"))) <= TOL
        J = sol.momentum_maps()["J3"]
        assert J[0] == pytest.approx(10.0 * 1.0 + 5.0 * 2.5)  # L3 = m1 (x1 x x1') + m2 (x2 x x2'), t = 0
        assert np.max(np.abs(J - J[0])) < 50 * TOL * abs(J[0]), np.max(np.abs(J - J[0]))


def test_nullspace_solves_k_unknowns(pendulum):
    from livens.schemes import get

    sch, _ = get("vi-nullspace")
    assert sch.sizes(6, 2) == [("w", 4)]
    assert get("vi-lagrange")[0].sizes(6, 2) == [("dq2", 6), ("lam", 2)]


def test_discrete_legendre_transform_start(pendulum, runs):
    """The reported p_0 is the given p0 (SLO09 eq 15); the momenta of later nodes are those of the
    constrained discrete Legendre transform, p_i = D2 L_d(q_{i-1}, q_i) + h/2 G(q_i)^T lambda_i."""
    sol = runs[("vi-lagrange", 0.01)]
    np.testing.assert_array_equal(sol.p[0], pendulum.p0)
    M = np.asarray(pendulum.system.mass_matrix)
    h, i = sol.h, 7
    u = sol.q
    d2 = M @ (u[i] - u[i - 1]) / h - 0.5 * h * np.array([0, 0, 9.81 * 15.0, 0, 0, 9.81 * 5.0])
    G = np.zeros((2, 6))
    G[0, :3], G[1, 3:] = u[i, :3], u[i, 3:]
    np.testing.assert_allclose(sol.p[i], d2 + 0.5 * h * G.T @ sol.lam[i], rtol=0, atol=1e-10)
    # the same momentum from the right: p_i = -D1 L_d(q_i, q_{i+1}) - h/2 G(q_i)^T lambda_i
    d1 = -M @ (u[i + 1] - u[i]) / h - 0.5 * h * np.array([0, 0, 9.81 * 15.0, 0, 0, 9.81 * 5.0])
    np.testing.assert_allclose(sol.p[i], -d1 - 0.5 * h * G.T @ sol.lam[i], rtol=0, atol=1e-9)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_second_order_convergence(pendulum, scheme):
    """SLO09 Fig. 4: second order against a reference run (here h_ref = h_min / 8, T = 1)."""
    T = 1.0
    hs = (0.04, 0.02, 0.01)
    ref = lv.simulate(pendulum, "vi-lagrange", h=hs[-1] / 8, t_end=T, tol=TOL)
    errs = []
    for h in hs:
        sol = lv.simulate(pendulum, scheme, h=h, t_end=T, tol=TOL)
        errs.append(np.max(np.abs(sol.q[-1] - ref.q[-1])))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert abs(slope - 2.0) < 0.15, (slope, errs)


@pytest.mark.parametrize("example", ["double-spherical-pendulum", "double-four-bar"])
def test_nullspace_pieces_against_ad(example):
    """The bases are orthonormal complements (G P = 0, P^T N = 0); the chart F(w, q) lies on g = 0,
    its tangent component is w and its normal correction lies in range N; the chart's implicit
    derivative (in y and in N) equals forward AD through its Newton iteration, at a state off the
    initial one."""
    import jax
    import jax.numpy as jnp

    from livens.mechanics import mechanics
    from livens.schemes import vi_lagrange as V

    problem = lv.examples.load(example)
    mech = mechanics(problem.system, problem.q0)
    d, m = mech.d, mech.m
    rng = np.random.default_rng(3)
    q = V.reparametrization(mech)(
        0.05 * rng.standard_normal(d - m), jnp.asarray(problem.q0), V._qr_bases(mech, jnp.asarray(problem.q0))[:2]
    )
    P, N = (np.asarray(B) for B in V._qr_bases(mech, q)[:2])
    assert P.shape == (d, d - m) and N.shape == (d, m)
    Q = np.concatenate([P, N], axis=1)
    np.testing.assert_allclose(Q.T @ Q, np.eye(d), rtol=0, atol=1e-13)
    G = np.asarray(mech.G(q))
    np.testing.assert_allclose(G @ P, 0.0, rtol=0, atol=1e-12 * (1 + np.abs(G).max()))
    w = 0.02 * rng.standard_normal(d - m)
    u = np.asarray(V.reparametrization(mech)(jnp.asarray(w), q, (jnp.asarray(P), jnp.asarray(N))))
    assert np.max(np.abs(np.asarray(mech.g(u)))) <= 1e-13
    np.testing.assert_allclose(P.T @ (u - np.asarray(q)), w, rtol=0, atol=1e-14)
    y = np.asarray(q) + P @ w
    np.testing.assert_allclose(u - y, N @ (N.T @ (u - y)), rtol=0, atol=1e-14)

    chart = V.make_chart(mech)
    dy, dN = rng.standard_normal(d), 0.1 * rng.standard_normal((d, m))
    primals = (jnp.asarray(y), jnp.asarray(N))
    _, implicit = jax.jvp(chart, primals, (jnp.asarray(dy), jnp.asarray(dN)))
    _, iterated = jax.jvp(lambda y, N: V._normal_correction(mech, y, N)[0], primals, (jnp.asarray(dy), jnp.asarray(dN)))
    np.testing.assert_allclose(implicit, iterated, rtol=0, atol=1e-12 * (1 + np.abs(iterated).max()))
    assert np.max(np.abs(np.asarray(mech.G(jnp.asarray(u))) @ np.asarray(implicit))) <= 1e-12 * (1 + np.abs(dy).max())


def test_singular_and_configuration_dependent_mass_matrices_run():
    """Neither form builds M^-1 (eq 14-17 hold M only through L_d): vi-lagrange runs the singular mass
    matrix of KB23 §6.1 (regular on the tangent space of the constraint), meets g = 0 at the nodes, keeps
    the energy (with the kinetic energy on the constraint manifold) within 1e-4 and agrees with Livens'
    energy-consistent scheme to the O(h^2) of two second-order schemes; on the configuration-dependent M
    of KB23 §6.2 it converges with order 2."""
    ms = lv.examples.load("redundant-mass-spring")
    a = lv.simulate(ms, "vi-lagrange", h=0.01, t_end=1.0, tol=TOL)
    c = lv.simulate(ms, "livens-em", h=0.01, t_end=1.0, tol=TOL)
    assert np.max(np.abs(a.constraint_residual("position"))) <= 10 * TOL
    assert np.max(np.abs(a.q - c.q)) <= 1e-3
    H = a.energy()["total"]
    assert np.max(np.abs(H - H[0])) <= 1e-4 * abs(H[0])
    sp = lv.examples.load("spring-pendulum-spherical")
    ref = lv.simulate(sp, "vi-lagrange", h=0.0025, t_end=0.5, tol=TOL).q[-1]
    errs = [np.max(np.abs(lv.simulate(sp, "vi-lagrange", h=h, t_end=0.5, tol=TOL).q[-1] - ref)) for h in (0.02, 0.01)]
    assert abs(np.log2(errs[0] / errs[1]) - 2.0) <= 0.3, errs


@pytest.mark.parametrize("scheme,eq", [("vi-lagrange", "15"), ("vi-nullspace", "17")])
def test_a_start_that_fails_stops_the_run_with_its_residual(pendulum, scheme, eq):
    """At h = 0.5 the discrete Legendre transform of the start has no solution Newton finds: the
    run stops before its first step, naming the equation, the residual and h (the time loop was
    compiled meanwhile: the start is finished after it)."""
    with pytest.raises(
        ValueError,
        match=rf"{scheme}: the start step \(SLO09 eq {eq}\) did not converge: "
        r"residual .* with h = 0\.5",
    ):
        lv.simulate(pendulum, scheme, h=0.5, t_end=1.5, progress=False)


def test_the_start_is_compiled_once_per_system(pendulum):
    """The start's program (compiled in a background thread the first time) is reused by later runs
    and gives them the same q_1 and lambda_0 to the bit."""
    from livens.engine import loops

    a = lv.simulate(pendulum, "vi-nullspace", h=0.02, t_end=0.1, progress=False)
    held = [v for k, v in loops._STARTS.items() if k[0][0] == "vi-nullspace"]
    assert held and all(v[1].done() for v in held)
    b = lv.simulate(pendulum, "vi-nullspace", h=0.02, t_end=0.1, progress=False)
    assert [v for k, v in loops._STARTS.items() if k[0][0] == "vi-nullspace"] == held
    np.testing.assert_array_equal(a.q, b.q)
    np.testing.assert_array_equal(a.lam, b.lam)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_start_in_c_agrees_with_xla(pendulum, scheme, monkeypatch):
    """Where the time loop runs natively, the start (eq 15 / 17) is solved by a C program compiled
    beside it: q_1, lambda_0 and the whole run agree with XLA's start to round-off; a fault of the
    translator leaves the start to XLA with a warning, and a failing C compiler leaves it to XLA
    too: not a lost run."""
    from livens.engine import loops, native

    def start_kinds():
        return {
            ("native" if k[1] else "xla"): type(v[1].result()).__name__
            for k, v in loops._STARTS.items()
            if k[0][0] == scheme
        }

    if native.compiler() is None:
        pytest.skip("no C compiler")
    runs = {b: lv.simulate(pendulum, scheme, h=0.01, t_end=0.5, progress=False, backend=b) for b in ("native", "xla")}
    kinds = start_kinds()
    assert kinds.get("native") == "Kernel" and kinds.get("xla") != "Kernel"
    for name in ("q", "p", "lam"):
        a, b = getattr(runs["native"], name), getattr(runs["xla"], name)
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.max(np.abs(b))), name
    assert np.max(np.abs(runs["native"].lam[0] - runs["xla"].lam[0])) <= 1e-12 * np.max(np.abs(runs["xla"].lam[0]))

    def broken(*_, **__):
        raise ValueError("a translator fault")

    loops._STARTS.clear()
    monkeypatch.setattr(native, "trace_function", broken)
    with pytest.warns(RuntimeWarning, match="failed on the start step .*a translator fault"):
        again = lv.simulate(pendulum, scheme, h=0.01, t_end=0.5, progress=False, backend="native")
    loops._STARTS.clear()
    assert np.max(np.abs(again.q - runs["xla"].q)) <= 1e-12 * max(1.0, np.max(np.abs(runs["xla"].q)))

    def no_compiler(*_, **__):
        raise native.CompileError("gcc failed: no such file")

    monkeypatch.undo()
    monkeypatch.setattr(native, "compile_traced", no_compiler)  # the C compiler fails: XLA solves the start
    third = lv.simulate(pendulum, scheme, h=0.01, t_end=0.5, progress=False, backend="native")
    kinds = start_kinds()
    assert "native" not in kinds and kinds.get("xla") not in (None, "Kernel")
    loops._STARTS.clear()
    assert np.max(np.abs(third.q - runs["xla"].q)) <= 1e-12 * max(1.0, np.max(np.abs(runs["xla"].q)))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_prepared_invariants_change_no_bit(pendulum, scheme):
    """The step's invariants that core.step prepares once (D_2 L_d(q^n, q^{n+1}); for the null space
    form also the QR bases at q^{n+1}) give the same residual and update as computed in place, and
    the update's state carries none of them (the time loop's carry keeps its structure)."""
    import jax
    import jax.numpy as jnp

    from livens.driver.setup import initial_state
    from livens.mechanics import mechanics
    from livens.schemes import get

    sch, _ = get(scheme)
    mech = mechanics(pendulum.system, pendulum.q0)
    h, t = 0.02, 0.0
    state, _ = sch.start(initial_state(pendulum, mech, sch), h, {}, mech)
    prepared = sch.prepare(state, h, t, {}, mech)
    assert set(prepared.extra) > set(state.extra)
    u = sch.guess(state, h, t, {}, mech, "advanced")
    u = jax.tree_util.tree_map(lambda a: a + 1e-3 * jnp.arange(a.size).reshape(a.shape), u)
    np.testing.assert_array_equal(
        np.asarray(sch.residual(u, prepared, h, t, {}, mech)), np.asarray(sch.residual(u, state, h, t, {}, mech))
    )
    new_p, out_p = sch.update(u, prepared, h, t, {}, mech)
    new_s, out_s = sch.update(u, state, h, t, {}, mech)
    assert set(new_p.extra) == set(state.extra)
    for a, b in zip(jax.tree_util.tree_leaves((new_p, out_p)), jax.tree_util.tree_leaves((new_s, out_s))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
