"""The native backend (livens.engine.native): a jaxpr as one C function.

Each primitive the translator handles is compared with XLA's result of the same program; whole
runs are compared with the XLA backend (same Newton iterations, states to round-off), and the
energy-momentum scheme must still conserve energy to round-off when it runs natively. Where no
C compiler is found, the module is skipped (and ``backend="auto"`` runs XLA, tested below with a
compiler that does not exist)."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import livens as lv
from livens.engine import EngineOptions, native
from livens.engine.native.runner import NativeUnavailable

MAX_UNKNOWNS = EngineOptions().max_native_unknowns

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _same(f, *args, tol=1e-13):
    """f natively and with XLA: every output equal to ``tol`` (relative to the output's size)."""
    k = native.compile_function(f, *args)
    want = jax.tree_util.tree_leaves(jax.jit(f)(*args))
    got = jax.tree_util.tree_leaves(k(*args))
    assert len(want) == len(got)
    for w, g in zip(want, got):
        w, g = np.asarray(w), np.asarray(g)
        assert w.shape == g.shape and w.dtype == g.dtype
        if np.issubdtype(w.dtype, np.floating):
            scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
            np.testing.assert_allclose(g, w, rtol=0, atol=tol * scale)
        else:
            np.testing.assert_array_equal(g, w)
    return k


RNG = np.random.default_rng(7)
A = jnp.asarray(RNG.standard_normal((5, 5)) + 3 * np.eye(5))
B = jnp.asarray(RNG.standard_normal((5, 3)))
X = jnp.asarray(RNG.standard_normal((2, 3, 4)))


def test_scan_over_known_arrays():
    """A scan whose xs are known when the code is generated (an arange, a constant table, forward
    and reversed, as jax.vjp of a scan makes them) reads them from file-level constants."""
    table = jnp.asarray(RNG.standard_normal((6, 2)))

    def f(x):
        def body(c, jt):
            j, t = jt
            c = c * 0.9 + j.astype(c.dtype) * t
            return c, c.sum()

        out = jax.lax.scan(body, x, (jnp.arange(6), table))
        back = jax.lax.scan(body, x, (jnp.arange(6), table), reverse=True)
        return out, back

    _same(f, jnp.asarray([1.0, -2.0]))


def test_gather_with_runtime_indices_in_fill_mode():
    """x[i] in fill mode: an index out of bounds (or a window partly out) reads the fill value
    (JAX's default: NaN, the most negative integer) instead of a clamped element."""
    x = jnp.asarray(RNG.standard_normal(5))
    table = jnp.arange(12, dtype=jnp.int64).reshape(4, 3)

    def f(i):
        return (
            x.at[i].get(mode="fill"),
            x.at[i].get(mode="fill", fill_value=-7.0),
            table.at[i].get(mode="fill"),
            jax.lax.dynamic_slice(x, (i,), (2,)),  # clamped, as before
            jnp.take(x, jnp.stack([i, i - 1]), mode="fill"),
        )

    for i in (0, 3, 4, 5, -1, -6):
        _same(f, jnp.asarray(i, jnp.int32))


def test_lu_and_triangular_solves_match_lapack():
    def f(a, b):
        lu, piv, perm = lax.linalg.lu(a)
        y = jax.scipy.linalg.solve_triangular(lu, b[perm], lower=True, unit_diagonal=True)
        x = jax.scipy.linalg.solve_triangular(lu, y, lower=False)
        xt = jax.scipy.linalg.solve_triangular(lu, b, lower=False, trans=1)
        xr = lax.linalg.triangular_solve(lu, b.T, left_side=False, lower=True)
        return lu, piv, perm, x, xt, xr

    _same(f, A, B, tol=1e-12)
    # a pivot that must be taken: the first column's largest entry is in the last row
    P = jnp.asarray(np.roll(np.eye(5), 1, axis=0) + 0.1 * RNG.standard_normal((5, 5)))
    _same(f, P, B, tol=1e-12)


def test_contractions_reductions_and_broadcasting():
    def f(x, a, b):
        batched = lax.dot_general(x, x, (((2,), (2,)), ((0,), (0,))))  # (2, 3, 3)
        return (
            batched,
            a @ b,
            jnp.einsum("ijk,k->ij", x, x[0, 0]),
            x.sum(axis=(0, 2)),
            x.max(axis=1),
            x.min(),
            jnp.prod(x[0], axis=1),
            jnp.argmax(x, axis=2),
            jnp.argmin(x, axis=0),
            lax.mul(x[:, :1, :], x),  # size-1 axis broadcast
            x * 2.0,
            jnp.all(x > -10),
            jnp.any(x > 10),
        )

    _same(f, X, A, B)


def test_empty_contractions():
    """Products over an axis of length zero (a system without constraints: G is 0 x d) are zeros."""
    x, e, E = jnp.asarray(RNG.standard_normal(3)), jnp.zeros((0,)), jnp.zeros((3, 0))
    _same(lambda x, e: e @ e + x[0], x, e)
    _same(lambda x, E, e: E @ e + x, x, E, e)
    _same(lambda x, E: E @ E.T + x, x, E)


def test_data_movement():
    def f(x, i):
        y = jnp.transpose(x, (2, 0, 1))
        parts = jnp.split(x, [1], axis=1)
        return (
            y,
            x[:, 1:3, ::2],
            x[::-1],
            jnp.concatenate([x, 2 * x], axis=1),
            jnp.pad(x, ((1, 0), (0, 2), (1, 1))),
            jnp.stack([x[0], x[1]], axis=1),
            parts[0],
            parts[1],
            lax.dynamic_slice(x, (i, i - i + 1, i * 0), (1, 2, 3)),
            lax.dynamic_update_slice(x, jnp.ones((1, 2, 2)), (i, i, i - i + 1)),
            jnp.broadcast_to(x[0, :, :1], (2, 3, 4)),
            x.reshape(6, 4),
            jnp.squeeze(x[:, :1]),
            jnp.expand_dims(x, 1),
            *jnp.unstack(x, axis=1),
        )

    _same(f, X, jnp.int32(1))
    _same(f, X, jnp.int32(7))  # out of range: the start is clamped, as in XLA


def test_gather_and_scatter_with_constant_indices():
    idx = np.array([[0, 2], [1, 1], [2, 0]])

    def f(x):
        g = x[0][idx[:, 0], idx[:, 1]]  # gather
        s = jnp.zeros((3, 4)).at[idx[:, 0], idx[:, 1]].add(g)  # scatter-add, a repeated index
        t = jnp.zeros((3, 4)).at[np.array([0, 2]), 1].set(g[:2])
        return g, s, t, x[:, np.array([2, 0])], jax.grad(lambda y: jnp.sum(y[np.array([1, 1, 0])] ** 2))(x[0, 0])

    _same(f, X)


def test_runtime_gather():
    def f(x, perm):
        return x[perm], x[:, perm[:2]]

    _same(f, A, jnp.asarray([4, 0, 3, 1, 2], dtype=jnp.int32))


def test_elementwise_functions():
    def f(x, n):
        y = jnp.abs(x) + 0.5
        return (
            jnp.sqrt(y),
            lax.rsqrt(y),
            jnp.exp(x),
            jnp.log(y),
            jnp.sin(x),
            jnp.cos(x),
            jnp.tan(x),
            jnp.tanh(x),
            jnp.arctan2(x, y),
            x**3,
            y**-2,
            y**x,
            jnp.sign(x),
            jnp.floor(x),
            jnp.round(x),
            jnp.maximum(x, 0),
            jnp.minimum(x, jnp.nan),
            jnp.isfinite(x / 0.0),
            jnp.where(x > 0, x, -x),
            jnp.clip(x, -0.5, 0.5),
            x.astype(jnp.int32),
            (x > 0).astype(jnp.float64),
            n % 3,
            n // 2,
            jnp.logical_not(x > 0),
            lax.select_n(jnp.clip(n, 0, 2), x, 2 * x, 3 * x),
            jnp.arange(12).reshape(3, 4) * n,
        )

    _same(f, X, jnp.int32(5))


def test_control_flow():
    def f(x, n):
        def body(c):
            k, v = c
            return k + 1, 0.5 * (v + x[0, 0] / v)

        k, root = lax.while_loop(
            lambda c: (c[0] < n) & (jnp.max(jnp.abs(c[1] * c[1] - x[0, 0])) > 1e-15), body, (jnp.int32(0), jnp.ones(4))
        )
        branch = lax.switch(jnp.clip(n - 3, 0, 2), [lambda v: v, lambda v: 2 * v, lambda v: -v], x)
        cond = lax.cond(n > 4, lambda v: jnp.sin(v), lambda v: v, x)
        carry, ys = lax.scan(lambda c, xi: (c + xi.sum(), c * xi), 0.0, x.reshape(6, 4))
        rev = lax.scan(lambda c, xi: (c * 0.5 + xi, c), jnp.zeros(4), x.reshape(6, 4), reverse=True)
        return k, root, branch, cond, carry, ys, rev

    x = jnp.abs(X) + 1.0
    _same(f, x, jnp.int32(30))
    _same(f, x, jnp.int32(4))


# --- whole runs ------------------------------------------------------------------------------------
PAIRS = [
    ("pendulum-3d", "VI-S", 300),
    ("pendulum-3d", "EM", 300),
    ("pendulum-3d", "VI-A", 300),
    ("heavy-top", "VI-S", 200),
    ("four-particle", "EM", 200),
    ("spring-pendulum-spherical", "livens-em", 100),
    ("double-spherical-pendulum", "vi-lagrange", 200),
    ("redundant-mass-spring", "livens-midpoint", 100),
    ("four-particle", "vi-nullspace", 200),  # its null-space basis from the translator's QR
    ("spring-pendulum-spherical", "vi-nullspace", 100),
    ("andrews-squeezer", "ggl-vi", 200),  # the GGL family with a configuration-dependent M(q)
    ("andrews-squeezer", "ggl-em", 200),
]  # no constraints: arrays of size 0


@pytest.mark.parametrize("example,scheme,steps", PAIRS)
def test_native_runs_match_xla(example, scheme, steps):
    """The same run with both backends: the same Newton iterations in every step, the states equal
    to round-off (only the order of summation and of LU's operations differs)."""
    p = lv.examples.load(example)
    runs = {b: lv.simulate(p, scheme, t_end=steps * p.h, progress=False, backend=b) for b in ("native", "xla")}
    assert runs["native"].meta["backend"] == "native" and runs["xla"].meta["backend"] == "xla"
    np.testing.assert_array_equal(runs["native"].newton_iterations, runs["xla"].newton_iterations)
    for name in ("q", "p"):
        a, b = getattr(runs["native"], name), getattr(runs["xla"], name)
        assert np.max(np.abs(a - b)) <= 1e-10 * max(1.0, np.max(np.abs(b))), name


def test_null_space_method_with_system_parameters_runs_natively():
    """The null space method's closest-point solve is a ``jit`` function closing over the System's
    parameters (traced values in the loop): the loop and its start still translate, and agree with
    XLA with the parameters given, which change the run."""
    p = lv.examples.load("pendulum-3d")
    given = {"length": 1.0, "gravity": 7.0}
    runs = {
        b: lv.simulate(p, "vi-nullspace", t_end=0.5, progress=False, backend=b, parameters=given)
        for b in ("native", "xla")
    }
    assert runs["native"].meta["backend"] == "native"
    np.testing.assert_array_equal(runs["native"].newton_iterations, runs["xla"].newton_iterations)
    assert np.max(np.abs(runs["native"].q - runs["xla"].q)) <= 1e-12
    default = lv.simulate(p, "vi-nullspace", t_end=0.5, progress=False, backend="native")
    assert np.max(np.abs(default.q - runs["native"].q)) > 1e-3


def test_native_energy_momentum_scheme_conserves_energy_to_roundoff():
    """EM's promise (KBS23b eq 84-91: the discrete energy balance) holds in the native kernel too:
    the heavy top's energy over 2000 steps at tol = 1e-12 to 1e-12 relative, and J3 to 1e-13."""
    p = lv.examples.load("heavy-top")
    sol = lv.simulate(p, "EM", t_end=2000 * p.h, tol=1e-12, progress=False, backend="native")
    assert sol.meta["backend"] == "native"
    e = sol.energy()["total"]
    assert np.max(np.abs(e - e[0])) <= 1e-12 * abs(e[0])
    (j,) = sol.momentum_maps().values()
    assert np.max(np.abs(j - j[0])) <= 1e-13


def test_failed_step_stops_the_same_way():
    """A step that fails in the native kernel stops the run like XLA's: the same step, every
    converged step kept."""
    p = lv.examples.load("pendulum-3d")
    errors = {}
    for b in ("native", "xla"):
        with pytest.raises(lv.ConvergenceError) as info:
            lv.simulate(p, "VI-S", h=0.2, t_end=40.0, max_iter=3, rescue=False, progress=False, backend=b)
        errors[b] = info.value
    assert errors["native"].step == errors["xla"].step
    assert errors["native"].solution.q.shape == errors["xla"].solution.q.shape
    np.testing.assert_allclose(errors["native"].solution.q, errors["xla"].solution.q, atol=1e-10)


def test_backend_choice_and_fallbacks(monkeypatch):
    p = lv.examples.load("pendulum-3d")
    with pytest.raises(ValueError, match="backend must be one of auto, native, xla, plain; got 'gpu'"):
        lv.simulate(p, "VI-S", t_end=0.1, backend="gpu")
    monkeypatch.delenv("LIVENS_BACKEND", raising=False)  # the default is "auto": native where possible
    assert lv.simulate(p, "VI-S", t_end=0.1, progress=False).meta["backend"] == "native"
    monkeypatch.setenv("LIVENS_BACKEND", "xla")
    assert lv.simulate(p, "VI-S", t_end=0.1, progress=False).meta["backend"] == "xla"
    monkeypatch.setenv("LIVENS_BACKEND", "auto")
    assert lv.simulate(p, "VI-S", t_end=0.1, progress=False).meta["backend"] == "native"
    # no C compiler: "auto" runs XLA and says why, "native" refuses with the reason
    monkeypatch.setenv("CC", "/nonexistent/cc")
    sol = lv.simulate(p, "EM", t_end=0.1, chunk=16, progress=False, backend="auto")
    assert sol.meta["backend"] == "xla" and "no C compiler" in sol.meta["native_fallback"]
    with pytest.raises(NativeUnavailable, match="no C compiler"):
        lv.simulate(p, "EM", t_end=0.1, chunk=16, progress=False, backend="native")


def test_large_systems_run_with_xla_under_auto():
    p = lv.examples.load("double-four-bar")
    sol = lv.simulate(p, "VI-S", t_end=5 * p.h, chunk=8, progress=False, backend="auto")
    assert sol.meta["backend"] == "xla"
    # VI-S's tangent is not by groups: its unknowns decide; the reason names the limit and the way past it
    reason = sol.meta["native_fallback"]
    assert f"Newton unknowns per step, more than the native limit of {MAX_UNKNOWNS}" in reason
    assert "EngineOptions.max_native_unknowns" in reason and "backend='native'" in reason


def test_a_long_c_translation_runs_with_xla_under_auto():
    """A loop whose C source is longer than EngineOptions.max_native_lines runs with XLA under "auto"
    (the C compiler's time grows far faster than the function: ggl-em4 on the squeezer did not
    compile in ten minutes), and natively where "native" is asked for."""
    from livens.engine import single_loop

    def build(**options):
        return lambda x: jnp.sin(x) * 2.0

    x = jnp.linspace(0.0, 1.0, 3)
    short = single_loop(build, 3, 3, 0, EngineOptions(max_native_lines=10**6))
    np.testing.assert_allclose(short(x), jnp.sin(x) * 2.0, rtol=1e-15)
    assert short.backend == "native"
    long = single_loop(build, 3, 3, 0, EngineOptions(max_native_lines=5))
    np.testing.assert_allclose(long(x), jnp.sin(x) * 2.0, rtol=1e-15)
    assert long.backend == "xla" and "lines, more than the native limit of 5" in long.reason
    forced = single_loop(build, 3, 3, 0, EngineOptions(backend="native", max_native_lines=5))
    forced(x)
    assert forced.backend == "native"


def test_runtime_scatter_and_batched_gather():
    """Indices computed at run time, and the batched forms that vmap makes of them."""

    def f(x, i, perm):
        upd = jnp.zeros((3, 4)).at[i].set(x[0, 0]).at[perm[:2], 1].add(x[1, :2, 0])
        dus = jax.vmap(lambda row, k: lax.dynamic_update_slice(row, jnp.ones(2), (k,)))(x[0], perm[:3])
        gat = jax.vmap(lambda row, p: row[p])(x[0], jnp.stack([perm[:4] % 4, perm[1:5] % 4, perm[:4] % 4]))
        return upd, dus, gat

    _same(f, X, jnp.int32(2), jnp.asarray([3, 1, 0, 2, 1], dtype=jnp.int32))
    _same(f, X, jnp.int32(9), jnp.asarray([3, 3, 0, 2, 1], dtype=jnp.int32))  # clamped / repeated


def test_large_sources_start_at_o0_and_switch_to_o2_without_changing_a_bit(monkeypatch, tmp_path):
    """A large source is compiled at -O0 and -O2 at once; the kernel runs the first until the
    second is ready. Both levels keep IEEE arithmetic, so the switch changes no bit; -O2 also
    vectorizes loops (the LU row updates of the heavy top's EM below), one element per lane, and
    no floating-point sum (with -fassociative-math it would, and this test fails)."""
    from livens.engine.native import build as native_build

    monkeypatch.setattr(native_build, "LARGE_SOURCE", 0)  # every source counts as large
    monkeypatch.setenv("LIVENS_COMPILATION_CACHE", str(tmp_path))  # nothing cached yet

    def f(x, y):  # transcendental functions, a solve and a loop: what a time step holds
        lu, _, perm = lax.linalg.lu(A + jnp.diag(jnp.exp(-(x[:5] ** 2))))
        b = (jnp.sin(y[:5]) * jnp.cosh(x[:5]))[perm]
        z = jax.scipy.linalg.solve_triangular(
            lu, jax.scipy.linalg.solve_triangular(lu, b, lower=True, unit_diagonal=True), lower=False
        )
        return lax.fori_loop(0, 7, lambda i, c: c + jnp.sqrt(1.0 + c * c) / (2.0 + i), z), jnp.log1p(x * x) @ y

    # the -O2 compile is held until the -O0 library has run: a small source's -O2 compile can
    # otherwise end first on a busy machine, and the kernel would never be seen at -O0
    release, load = threading.Event(), native_build._load

    def held(*args):
        if threading.current_thread().name == "livens-native-O2":
            release.wait(120)
        return load(*args)

    monkeypatch.setattr(native_build, "_load", held)
    x, y = jnp.asarray(RNG.standard_normal(8)), jnp.asarray(RNG.standard_normal(8))
    k = native.compile_function(f, x, y)
    assert k.level == "-O0"
    quick = [np.asarray(o) for o in jax.tree_util.tree_leaves(k(x, y))]
    release.set()
    native.wait()
    assert k.level == "-O2"
    full = [np.asarray(o) for o in jax.tree_util.tree_leaves(k(x, y))]
    for a, b in zip(quick, full):
        np.testing.assert_array_equal(a, b)
    _same(f, x, y)  # and both agree with XLA (the -O2 library, from the cache now)
    assert len(list(tmp_path.glob("native/*.so"))) == 2  # one library per level, nothing left behind
    assert not list(tmp_path.glob("native/*.c"))

    # a whole run: the run that starts at -O0 equals, bit for bit, a run with the -O2 library
    p = lv.examples.load("heavy-top")
    run = dict(t_end=300 * p.h, chunk=48, progress=False, backend="native")
    first = lv.simulate(p, "EM", **run)
    native.wait()
    second = lv.simulate(p, "EM", **run)
    for name in ("q", "p", "v", "lam"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def test_a_library_for_this_cpu_is_named_by_what_march_native_means_here(monkeypatch):
    """A cache shared by machines with different CPUs must never load a library built for another:
    the name of a library hashes what -march=native expands to (at -O2 and at -O0, whose quick
    compile takes the target flags too); the flags without them do not."""
    from livens.engine.native import build as native_build

    cc = native.compiler()
    if cc is None or "-march=native" not in native_build.flags(cc):
        pytest.skip("no GCC that says what -march=native means here")
    assert "-march=" in native_build.native_target(cc)
    here = native_build._library(cc, native_build.flags(cc), "int x;", "k")
    quick = native_build._library(cc, native_build.quick_flags(cc), "int x;", "k")
    plain = native_build._library(cc, native_build.QUICK_FLAGS, "int x;", "k")
    monkeypatch.setitem(native_build._TARGET, cc, "cc1 -march=another-cpu")
    assert native_build._library(cc, native_build.flags(cc), "int x;", "k") != here
    assert native_build._library(cc, native_build.quick_flags(cc), "int x;", "k") != quick
    assert native_build._library(cc, native_build.QUICK_FLAGS, "int x;", "k") == plain


def test_qr_sort_and_linear_solve():
    """QR as LAPACK (the same signs: Q and R equal XLA's to round-off, complete and reduced, and
    of a transposed operand), the stable sort of a permutation, and jnp.linalg.solve."""
    G = jnp.asarray(RNG.standard_normal((2, 5)))
    _same(lambda g: jnp.linalg.qr(g.T, mode="complete"), G, tol=1e-13)
    _same(lambda g: jnp.linalg.qr(g.T, mode="reduced"), G, tol=1e-13)
    _same(lambda a: jnp.linalg.qr(a), jnp.stack([A, A.T]), tol=1e-13)  # batched, square
    _same(lambda g: jnp.linalg.qr(jnp.zeros((4, 2)).at[:, 1].set(g[0, :4])), G)  # a zero column: tau = 0
    keys = jnp.asarray(np.array([3, 1, 4, 1, 0], dtype=np.int32))
    _same(lambda k: lax.sort((k, jnp.arange(5, dtype=jnp.int32)), num_keys=1, is_stable=True), keys)
    _same(lambda a, b: jnp.linalg.solve(a, b), A, B[:, 0], tol=1e-12)


def test_a_function_called_at_several_places_is_written_once(monkeypatch):
    """A ``jit`` function called at several places (with inputs computed, known and of size zero)
    is one C function in the source, called at each place: the results equal XLA's, and the
    source is shorter than with every call inlined."""
    from livens.engine.native import codegen

    @jax.jit
    def inner(y, a, c, empty):
        def body(_, u):
            for _ in range(20):
                u = jnp.sin(u) * a + 0.5 * u + c
            return u

        u = lax.fori_loop(0, 3, body, y)
        return u, jnp.sum(u) > 0.0, empty + 1.0

    def f(x):
        e, c = jnp.zeros((0,)), 0.1 * jnp.arange(4.0)  # known now: passed as constant arrays
        u1, s1, _ = inner(x, x[1], c, e)
        u2, s2, _ = inner(u1 * 2.0, x[0], c, e)
        u3, s3, e3 = inner(jnp.arange(4.0), 0.7, c, e)  # every input known: evaluated now
        return u1 + u2, s1 | s2, s3, u3, e3

    x = jnp.asarray(RNG.standard_normal(4))
    shared = _same(f, x)
    assert shared.source.count("__attribute__((noinline))") == 1
    monkeypatch.setattr(codegen.Translator, "SHARED_FUNCTIONS", False)
    inlined = _same(f, x)
    assert "noinline" not in inlined.source and len(shared.source) < 0.7 * len(inlined.source)


def test_large_system_compiles_natively_on_request():
    """backend="native" on a system over MAX_UNKNOWNS (the pendulum chain, 72 unknowns per step
    of vi-nullspace): its program slices arrays of more than MAX_ELEMS elements kept element by
    element, which must be read from their elements (a C compiler error before)."""
    p = lv.examples.load("pendulum-chain")
    runs = {b: lv.simulate(p, "vi-nullspace", t_end=10 * p.h, progress=False, backend=b) for b in ("native", "xla")}
    assert runs["native"].meta["backend"] == "native"
    np.testing.assert_array_equal(runs["native"].newton_iterations, runs["xla"].newton_iterations)
    assert np.max(np.abs(runs["native"].q - runs["xla"].q)) <= 1e-12


def test_arrays_beyond_the_stack_limit_live_in_scratch_memory(monkeypatch):
    """A kernel whose many mid-sized arrays (each below SCRATCH_BYTES) would hold more than
    MAX_LOCAL_ELEMENTS on the C stack in all is translated, the arrays past the limit in scratch
    memory (chain-3d's EM step, 324 unknowns, was refused with "arrays too large for one C
    function"): results equal XLA's; a limit of zero puts every array there, same results."""
    from livens.engine.native import emitter

    monkeypatch.setattr(emitter, "MAX_LOCAL_ELEMENTS", 2_000)
    a = jnp.asarray(RNG.standard_normal((30, 30)) / 30)

    def f(x):
        ys = [x]
        for k in range(8):  # 30 x 30 products, 900 elements each: 8100 in all
            ys.append(jnp.tanh(ys[-1] @ a + 0.1 * k))
        return sum(ys)

    x = jnp.asarray(RNG.standard_normal((30, 30)))
    k = _same(f, x)
    assert k.source.count("(lv_scratch + ") >= 6
    monkeypatch.setattr(emitter, "MAX_LOCAL_ELEMENTS", 0)
    assert _same(f, x).source.count("(lv_scratch + ") > k.source.count("(lv_scratch + ")


def test_a_translator_fault_falls_back_to_xla_with_a_warning(monkeypatch):
    """ "auto" must not lose a run to a fault of the translator: XLA runs it, a warning and
    meta["native_fallback"] say why; "native" refuses with the fault named."""
    from livens.engine.native import build as native_build

    def broken(closed, **_):
        raise ValueError("a translator fault")

    monkeypatch.setattr(native_build, "translate", broken)
    p = lv.examples.load("pendulum-3d")
    with pytest.warns(RuntimeWarning, match="native translator failed .*a translator fault"):
        sol = lv.simulate(p, "VI-S", t_end=0.1, chunk=24, progress=False, backend="auto")
    assert sol.meta["backend"] == "xla" and "a translator fault" in sol.meta["native_fallback"]
    with pytest.raises(NativeUnavailable, match="a translator fault"):
        lv.simulate(p, "VI-S", t_end=0.1, chunk=40, progress=False, backend="native")
