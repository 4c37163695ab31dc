"""The speed structures (structured tangents, small-product rewrites, small solves) change nothing but the cost.

- The structured VI-S tangent (KBS23b eq 55, damped KBS23a eq 57), dense and matrix-free, equals the AD
  tangent jax.jacfwd of the residual, and its block-elimination solve equals the dense solve.
- The pure-NumPy VI-S with hand-written derivatives (benchmarks/reference_numpy.py) and livens
  take the same steps.
- Runs with the structured tangent and with the AD tangent take the same Newton iterates.
- Rewriting small matrix products as fused sums (livens.engine.small_products) keeps the values.
- The small dense solvers (livens.solvers.dense) are exact solves, with pivoting.
- The compiled chunk runner is not recompiled when h, t_end, tol or max_iter change, and the
  persistent compilation cache is switched on unless the user opts out.
"""

import dataclasses
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _compiles import backend_compiles
from _tangents import assert_tangent_equals_ad, perturbed_point, tangent_type

import livens as lv
from livens.driver.records import record_layout
from livens.driver.run import _single_loop
from livens.driver.setup import initial_state, plan, resolve
from livens.engine import options as _options
from livens.engine import small_products as _fusion
from livens.schemes import get as get_scheme
from livens.schemes import ggl_vi
from livens.solvers import dense as _linalg


def _sizes(monkeypatch, **changes):
    """Replace thresholds of the size policy in force (:class:`livens.engine.SizePolicy`) for one test."""
    monkeypatch.setattr(_options, "SIZES", dataclasses.replace(_options.SIZES, **changes))


VI_S = get_scheme("VI-S")[0]


def _forced_double_pendulum():
    """Non-diagonal M (SLO09 §4.1, relative coordinates) with a velocity-dependent external force."""
    p = lv.examples.load("double-spherical-pendulum")
    s = p.system
    drag = jnp.array([0.3, 0.1, 0.2, 0.05, 0.4, 0.1])
    system = dataclasses.replace(s, external_force=lambda q, v, t, par: -drag * v * jnp.abs(v) + jnp.sin(t) * q)
    return p.replace(system=system)


SYSTEMS = {
    "pendulum-3d": lambda: lv.examples.load("pendulum-3d"),
    "pendulum-3d damped": lambda: lv.examples.load("pendulum-3d", dissipation=0.7),
    "heavy-top": lambda: lv.examples.load("heavy-top"),
    "chain-3": lambda: lv.examples.load("pendulum-chain", n_bodies=3),
    "double pendulum, forced": _forced_double_pendulum,
}


def _point(problem, h, seed):
    return perturbed_point(problem, VI_S, h, seed)


@pytest.mark.parametrize("form", ["dense", "dense, block elimination", "matrix-free", "matrix-free, LU fallback"])
@pytest.mark.parametrize("name", list(SYSTEMS))
def test_vis_structured_tangent_equals_ad_tangent(name, form, monkeypatch):
    sizes = {}
    if "block" in form:  # the 2m x 2m system by block elimination (large m), here on small ones
        sizes["vis_block_constraints"] = 1
    if not form.startswith("dense"):  # the form large systems get (d >= vis_matrix_free_coordinates), on small ones
        sizes["vis_matrix_free_coordinates"] = 0
    if sizes:
        _sizes(monkeypatch, **sizes)
    if form.endswith("fallback"):  # S^-1 by LU where the fixed-point iteration does not converge
        monkeypatch.setattr(ggl_vi.VISTangentMF, "NEUMANN_MAX", 0)
    problem = SYSTEMS[name]()
    h, t = 0.05, 0.3
    sch, vals, mech, st, x = _point(problem, h, seed=len(name))
    d, m = mech.d, mech.m

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    def T(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, t, vals, mech)

    assert issubclass(tangent_type(T, x), ggl_vi.VISTangent if form.startswith("dense") else ggl_vi.VISTangentMF)
    assert_tangent_equals_ad(R, T, x, 3 * d + 2 * m)


@pytest.mark.parametrize(
    "example, steps, matrix_free", [("heavy-top", 150, False), ("pendulum-3d", 150, False), ("heavy-top", 60, True)]
)
def test_structured_and_ad_tangent_take_the_same_newton_iterates(example, steps, matrix_free, monkeypatch):
    if matrix_free:
        _sizes(monkeypatch, vis_matrix_free_coordinates=0)
    problem = lv.examples.load(example)  # a new System: not the compiled runner of another test
    h = problem.h
    ad = dataclasses.replace(VI_S, tangent=None)
    a = lv.simulate(problem, VI_S, h=h, t_end=steps * h, tol=1e-12)
    b = lv.simulate(problem, ad, h=h, t_end=steps * h, tol=1e-12)
    # exact Newton both times: the same iteration counts and the same trajectory up to round-off
    # (both meet ||R|| <= 1e-12; the differences stay far below the step-to-step change)
    assert np.mean(a.newton_iterations == b.newton_iterations) >= 0.99
    assert np.max(np.abs(a.q - b.q)) <= 1e-10
    assert np.max(np.abs(a.p - b.p)) <= 1e-10 * max(1.0, np.max(np.abs(a.p)))


@pytest.mark.parametrize(
    "example, scheme",
    [
        ("double-four-bar", "ggl-theta-b"),
        ("double-four-bar", "vi-lagrange"),
        ("heavy-top", "ggl-theta-a"),
        ("double-four-bar", "livens-em"),
        ("four-particle", "midpoint"),
    ],
)
def test_jacobian_by_blocks_equals_the_ad_jacobian(example, scheme):
    """The AD tangent of schemes without a structured one, built block by block from
    block_jacobian_unknowns (SizePolicy) unknowns on (at once below: four-particle midpoint, 26
    unknowns), is jax.jacfwd of the packed residual, away from the solution."""
    from livens.solvers.tangent import ad_jacobian

    problem = lv.examples.load(example)
    sch, vals, mech = resolve(problem, get_scheme(scheme)[0], {})
    st = initial_state(problem, mech)
    if sch.start is not None:
        st, _ = sch.start(st, problem.h, vals, mech)
    d, m = mech.d, mech.m
    rng = np.random.default_rng(11)
    x = sch.pack(sch.guess(st, problem.h, 0.0, vals, mech, "advanced"), d, m)
    x = x + 0.05 * rng.standard_normal(x.shape[0]) * (1.0 + jnp.abs(x))
    assert (x.shape[0] >= _options.SIZES.block_jacobian_unknowns) == (example != "four-particle")

    def Ru(u):
        return sch.residual(u, st, problem.h, 0.1, vals, mech)

    J_ad = np.asarray(jax.jit(jax.jacfwd(lambda x: Ru(sch.unpack(x, d, m))))(x))
    J = np.asarray(jax.jit(lambda x: ad_jacobian(Ru, x, lambda z: sch.unpack(z, d, m)))(x))
    assert J.shape == J_ad.shape == (x.shape[0], x.shape[0])
    assert np.max(np.abs(J - J_ad)) <= 1e-13 * np.max(np.abs(J_ad))


def _count_equations(fn, which, *args) -> int:
    """Equations of fn's jaxpr, sub-jaxprs included, for which ``which(eqn)`` holds."""

    def count(jp):
        n = 0
        for eqn in jp.eqns:
            n += bool(which(eqn))
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else [value]:
                    sub = getattr(sub, "jaxpr", sub)
                    if hasattr(sub, "eqns"):
                        n += count(sub)
        return n

    return count(jax.make_jaxpr(fn)(*args).jaxpr)


def _integer_or_boolean(eqn) -> bool:
    dt = eqn.outvars[0].aval.dtype if eqn.outvars else None
    return dt is not None and (jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_)


def test_fuse_small_dots_keeps_values_and_rewrites_only_small_products():
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.standard_normal((3, 3)))
    B = jnp.asarray(rng.standard_normal((100, 100)))
    Bt = jnp.asarray(rng.standard_normal((4, 5, 3)))

    def f(x, y):
        small = A @ x[:3] + jnp.einsum("bij,j->bi", Bt, x[3:6]).sum(0)[:3]
        big = B @ y
        return jnp.concatenate([small, jnp.tanh(big[:3])]), jax.jacfwd(lambda z: jnp.sin(A @ z) @ A)(x[:3])

    fused = _fusion.fuse_small_dots(f)
    x = jnp.asarray(rng.standard_normal(6))
    y = jnp.asarray(rng.standard_normal(100))
    for u, v in zip(jax.tree_util.tree_leaves(f(x, y)), jax.tree_util.tree_leaves(fused(x, y))):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-14, atol=1e-14)

    def dots(fn):
        return _count_equations(fn, lambda eqn: eqn.primitive.name == "dot_general", x, y)

    assert dots(f) >= 4
    assert dots(fused) == 1  # only the 100 x 100 product stays a matrix product


@pytest.mark.parametrize("rewrite", ["fuse_small_dots", "fold_constants"])
def test_index_arithmetic_on_constants_is_folded_and_values_kept(rewrite):
    """jnp's index normalization for q[idx] with constant (also negative) indices, and that of its
    derivatives, is evaluated at trace time: no integer or boolean operation is left to run,
    and the function, its gradient and its Hessian keep their values."""
    idx = np.array([[3, 4, 5], [6, -5, -4], [9, 10, -1]])
    I, J = np.array([0, 1, 2, 0, 0, 1]), np.array([0, 1, 2, 1, 2, 2])

    def g(q):
        D = q[idx]
        gram = D @ D.T
        return jnp.concatenate([gram[I, J], jnp.take(q, np.array([0, 2])) * q[-3:-1]])

    def f(q):
        return g(q), jax.jacfwd(g)(q), jax.hessian(lambda y: jnp.sum(jnp.sin(g(y))))(q)

    q = jnp.asarray(np.random.default_rng(1).standard_normal(12))
    rewritten = getattr(_fusion, rewrite)(f)
    for u, v in zip(jax.tree_util.tree_leaves(f(q)), jax.tree_util.tree_leaves(rewritten(q))):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-13, atol=1e-13)
    assert _count_equations(f, _integer_or_boolean, q) > 10
    assert _count_equations(rewritten, _integer_or_boolean, q) == 0


def test_fuse_small_dots_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("LIVENS_FUSE_DOTS", "0")

    def f(x):
        return x

    assert _fusion.fuse_small_dots(f) is f


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 30])
def test_dense_solvers_are_exact_and_pivot(n):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((n, n))
    if n > 1:
        A[0, 0] = 0.0  # elimination without row exchanges would divide by zero
        A[1, 0] = 1.0
    B = rng.standard_normal((n, 3))
    X_ref = np.linalg.solve(A, B)
    cond = np.linalg.cond(A)
    for X in (_linalg.solve(jnp.asarray(A), jnp.asarray(B)), jax.jit(_linalg.solve)(jnp.asarray(A), jnp.asarray(B))):
        assert np.max(np.abs(np.asarray(X) - X_ref)) <= 1e-14 * cond * np.max(np.abs(X_ref))
    x = _linalg.solver(jnp.asarray(A))(jnp.asarray(B[:, 0]))
    assert x.shape == (n,)
    assert np.max(np.abs(np.asarray(x) - X_ref[:, 0])) <= 1e-14 * cond * np.max(np.abs(X_ref))


@pytest.mark.parametrize("m", [1, 3, 20])
def test_block_solve_is_exact(m):
    rng = np.random.default_rng(m)
    A = rng.standard_normal((2 * m, 2 * m))
    b = rng.standard_normal(2 * m)
    x1, x2 = jax.jit(_linalg.block_solve)(A[:m, :m], A[:m, m:], A[m:, :m], A[m:, m:], b[:m], b[m:])
    x = np.concatenate([x1, x2])
    ref = np.linalg.solve(A, b)
    cond = np.linalg.cond(A) * np.linalg.cond(A[:m, :m])  # block elimination pivots on A11
    assert np.max(np.abs(x - ref)) <= 1e-14 * cond * np.max(np.abs(ref))
    assert np.max(np.abs(A @ x - b)) <= 1e-12 * np.max(np.abs(A)) * np.max(np.abs(x)) * np.linalg.cond(A[:m, :m])


def test_block_solve_inside_whole_systems_factorizes_the_whole_system():
    rng = np.random.default_rng(5)
    m = 4
    A = rng.standard_normal((2 * m, 2 * m))
    A[:m, :m] = 0.0  # singular A11: block elimination would fail, the whole LU (pivoting) does not
    b = rng.standard_normal(2 * m)
    with _linalg.batched_systems():
        x1, x2 = jax.jit(_linalg.block_solve)(A[:m, :m], A[:m, m:], A[m:, :m], A[m:, m:], b[:m], b[m:])
    np.testing.assert_allclose(np.concatenate([x1, x2]), np.linalg.solve(A, b), rtol=1e-10, atol=1e-12)
    x1, _ = _linalg.block_solve(A[:m, :m], A[:m, m:], A[m:, :m], A[m:, m:], b[:m], b[m:])
    assert not np.all(np.isfinite(np.asarray(x1)))


def test_double_four_bar_ensemble_equals_single_runs():
    """Single runs of the double four-bar (m = 29) solve with block elimination, the ensemble's
    batched steps with whole factorizations: the same Newton iterates."""
    problem = lv.examples.load("double-four-bar")
    h, steps = problem.h, 12
    q0s, v0s = np.tile(problem.q0, (2, 1)), np.array([problem.v0, 0.9 * problem.v0])
    ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, h=h, t_end=steps * h, tol=1e-11)
    for b in range(2):
        single = lv.simulate(problem.replace(v0=v0s[b]), "VI-S", h=h, t_end=steps * h, tol=1e-11)
        np.testing.assert_array_equal(ens[b].newton_iterations, single.newton_iterations)
        assert np.max(np.abs(ens[b].q - single.q)) <= 1e-11


def test_runner_not_recompiled_when_h_t_end_tol_max_iter_change():
    problem = lv.examples.load("pendulum-3d")
    lv.simulate(problem, "VI-S", h=0.01, t_end=0.05)  # compile once
    p = plan(problem, "VI-S", h=0.01, t_end=0.05)
    layout = record_layout(p.scheme, p.mech, "extrapolated", initial_state(problem, p.mech, p.scheme), 0.01, p.params)
    runner = _single_loop(p, layout, 512)  # the default guess's runner
    size = runner._cache_size()
    with backend_compiles() as compiles:
        for h, t_end, tol, max_iter in [(0.02, 0.1, 1e-9, 40), (0.005, 3.0, 1e-11, 25), (0.05, 0.05, 1e-6, 7)]:
            sol = lv.simulate(problem, "VI-S", h=h, t_end=t_end, tol=tol, max_iter=max_iter)
            assert sol.q.shape[0] == int(round(t_end / h)) + 1
        n_sim = len(compiles)
        c = float(np.random.default_rng().uniform(2.0, 3.0))  # a new program: the listener must see it
        jax.jit(lambda x: jnp.sin(x) * c)(jnp.arange(3.0)).block_until_ready()
    assert runner._cache_size() == size
    assert _single_loop(p, layout, 512) is runner
    assert n_sim == 0
    assert len(compiles) >= 1


def test_persistent_compilation_cache_is_on_and_can_be_switched_off(tmp_path):
    from livens.engine import xla as _jaxconfig

    lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", t_end=0.1, progress=False)  # a first run sets it
    if os.environ.get("LIVENS_COMPILATION_CACHE", "").lower() in ("0", "off", "false", "no", "none"):
        assert _jaxconfig.compilation_cache_dir() is None
    else:
        assert jax.config.jax_compilation_cache_dir
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    # importing livens changes no process-wide setting but float64: the cache is set by its first run
    imported = subprocess.run(
        [sys.executable, "-c", "import jax, livens; print(repr(jax.config.jax_compilation_cache_dir))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() in ("None", "''")
    code = (
        "import jax, livens as lv; lv.simulate(lv.examples.load('pendulum-3d'), 'VI-S', t_end=0.1, progress=False); "
        "print(repr(jax.config.jax_compilation_cache_dir))"
    )
    off = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "LIVENS_COMPILATION_CACHE": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert off.stdout.strip() in ("None", "''")
    there = tmp_path / "cache"
    on = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "LIVENS_COMPILATION_CACHE": str(there)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert on.stdout.strip() == repr(str(there))
    assert there.is_dir()


def test_livens_vi_s_equals_the_numpy_reference_with_hand_derivatives():
    """An independent implementation of KBS23b eq 55 for the pendulum (hand-written Jacobian)."""
    sys.path.insert(0, str(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        from benchmarks.reference_numpy import jacobian, residual, simulate_pendulum_vis
    finally:
        sys.path.pop(0)
    problem = lv.examples.load("pendulum-3d")
    h, n = 0.02, 300
    q, p, its, _ = simulate_pendulum_vis(problem.q0, problem.v0, h, n, tol=1e-12)
    sol = lv.simulate(problem, "VI-S", h=h, t_end=n * h, tol=1e-12, guess="simple")  # the reference's guess
    assert np.max(np.abs(sol.q - q)) <= 1e-11
    assert np.max(np.abs(sol.p - p)) <= 1e-11
    assert np.mean(sol.newton_iterations == its) >= 0.99
    # the hand-written Jacobian is the derivative of the hand-written residual (central differences)
    rng = np.random.default_rng(3)
    x, q0, p0 = rng.standard_normal(11), rng.standard_normal(3), rng.standard_normal(3)
    J = jacobian(x, q0, p0, 0.05, 1.3, 1.1, 9.81)
    eps = 1e-6
    fd = np.array(
        [
            (residual(x + eps * e, q0, p0, 0.05, 1.3, 1.1, 9.81) - residual(x - eps * e, q0, p0, 0.05, 1.3, 1.1, 9.81))
            / (2 * eps)
            for e in np.eye(11)
        ]
    ).T
    assert np.max(np.abs(J - fd)) <= 1e-8


def test_record_layout_packs_a_step_into_one_row_exactly():
    """The time loop writes each step's record as one float64 row; unpacking gives back every
    field with its shape and dtype, iteration counts and flags exactly."""
    from livens.driver.records import RecordLayout

    rng = np.random.default_rng(3)
    recs = [
        {
            "q": rng.standard_normal(4),
            "iterations": np.int32(k),
            "ok": np.bool_(k % 2),
            "lam": rng.standard_normal((2, 3)),
            "residual": np.float64(10.0**-k),
        }
        for k in range(5)
    ]
    layout = RecordLayout.of({k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype) for k, v in recs[0].items()})
    assert layout.width == 4 + 1 + 1 + 6 + 1 and layout.column("ok") == 5
    rows = np.stack([np.asarray(layout.pack({k: jnp.asarray(v) for k, v in r.items()})) for r in recs])
    back = layout.unpack(rows)
    for k in recs[0]:
        want = np.stack([np.asarray(r[k]) for r in recs])
        assert back[k].dtype == want.dtype and back[k].shape == want.shape
        np.testing.assert_array_equal(back[k], want)
