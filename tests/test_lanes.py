"""Lane kernels (livens.engine.native.member_lanes): one member per lane of a vector.

Each lane must compute exactly the IEEE operations of the single member's kernel, so the tests
compare bits: a lane kernel against ``jax.vmap`` of the same program on the primitives that differ
per lane (while loops that stop at different iterations, conds, gathers, scatters and dynamic
slices at computed indices, LU with different pivot rows), against the single member's native kernel on the
papers' systems, and an ensemble in lanes against the single runs of its members.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_ensemble import _pendulum_states, assert_nothing_after_the_failed_step

import livens as lv
from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)


def _lanes_of(fn, args, L=LANES):
    """fn compiled as a lane kernel, called on the member-first ``args``."""
    one = jax.tree_util.tree_map(lambda a: a[0], args)
    kernel = native.compile_function(fn, *one, lanes=L)
    native.wait()
    return kernel(*args)


def _program(x, k, A):
    """Control flow and indexing that differ by member: a Newton-like while loop with a
    data-dependent trip count, a cond, a gather and a dynamic slice at computed indices, an LU
    solve with pivoting, and elementwise functions of masks and signs."""

    def cond(c):
        y, i = c
        return (jnp.abs(y - jnp.sqrt(x[0])) > 1e-14) & (i < 50)

    def body(c):
        y, i = c
        return 0.5 * (y + x[0] / y), i + 1

    root, iters = jax.lax.while_loop(cond, body, (jnp.maximum(x[0], 1.0), 0))
    branch = jax.lax.cond(x[1] > 0, lambda v: jnp.sin(v) * 2.0, lambda v: jnp.cos(v) - 1.0, x)
    picked = x[jnp.clip(k, 0, 3)]
    window = jax.lax.dynamic_slice(x, (k % 3,), (2,))
    solved = jnp.linalg.solve(A, x)
    flags = (x > 0) ^ (x < 0.5)
    misc = jnp.sign(x) + flags.astype(x.dtype) + jnp.where(x > 0.2, x, -x) + jnp.max(x)
    return root, iters, branch, picked, window, solved, misc, jnp.all(flags)


def test_a_lane_kernel_computes_what_vmap_computes_lane_by_lane():
    rng = np.random.default_rng(1)
    x = rng.uniform(-2.0, 9.0, (LANES, 4))
    x[:, 0] = rng.uniform(0.1, 1e4, LANES)  # square roots of very different sizes: different trip counts
    k = rng.integers(-2, 7, LANES)
    A = rng.standard_normal((LANES, 4, 4))  # pivot rows differ by member
    got = _lanes_of(_program, (x, k, A))
    want = jax.vmap(_program)(x, k, A)
    assert len(set(np.asarray(want[1]).tolist())) > 1, "the members should take different trip counts"
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        if k == 5:  # the LU solve: XLA's LAPACK may order its sums otherwise
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)
        else:
            np.testing.assert_array_equal(g, w)


def _scatters(x, i, perm, y):
    """Scatters at indices computed per member: a set and adds at repeated indices (each lane's
    sum in its member's order), a window (a row), clamped and dropped indices, and the transpose
    of a gather at a permutation (a reverse pass's scatter-add)."""
    put = jnp.zeros((3, 4)).at[i].set(x[0, 0]).at[perm[:3], 1].add(x[1, :3, 0])
    rows = jnp.zeros((4, 4)).at[perm[1]].add(x[1, 0], mode="clip").at[perm[:2]].add(x[0, :2])
    dropped = jnp.zeros(4).at[i + perm[:3]].add(y[:3], mode="drop")
    _, transpose = jax.vjp(lambda v: v[perm % 4] * y, x[0, 0])
    return put, rows, dropped, transpose(y)[0]


def test_scatters_at_indices_computed_per_lane():
    rng = np.random.default_rng(2)
    # terms of very different sizes: a sum in another order would change its bits
    x = rng.standard_normal((LANES, 2, 4, 4)) * 10.0 ** rng.integers(-8, 8, (LANES, 2, 4, 4))
    i = rng.integers(-1, 5, LANES)  # out of bounds in some members: clamped by set, dropped by add
    perm = rng.integers(0, 4, (LANES, 5))  # repeated indices in most members
    y = rng.standard_normal((LANES, 5)) * 10.0 ** rng.integers(-8, 8, (LANES, 5))
    args = (x, i, perm, y)
    got = _lanes_of(_scatters, args)
    single = native.compile_function(_scatters, *jax.tree_util.tree_map(lambda a: a[0], args))
    want = jax.vmap(_scatters)(*args)
    for b in range(LANES):
        one = single(*jax.tree_util.tree_map(lambda a: a[b], args))
        for g, s in zip(got, one):
            np.testing.assert_array_equal(g[b], s)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))


def _lu_in_lanes_is_each_members_lu(*batches):
    """Check that LU in lanes of each batch is each member's LU of the single kernel, to the bit;
    returns the lanes' factors of the last batch."""

    def lu(a):
        return jax.lax.linalg.lu(a)

    single = native.compile_function(lu, batches[0][0])
    for batch in batches:
        got = _lanes_of(lu, (batch,))
        for b in range(LANES):
            for g, s in zip(got, single(batch[b])):
                np.testing.assert_array_equal(g[b], s)
    return got


def test_lu_in_lanes_where_some_lanes_meet_a_zero_pivot():
    """LU in lanes is each member's LU of the single kernel, to the bit, where every lane's pivots
    are nonzero and where some lanes meet a zero column (those lanes skip that elimination, the
    others go on): a batch of each kind."""
    rng = np.random.default_rng(4)
    A = rng.standard_normal((LANES, 5, 5))
    singular = A.copy()
    singular[1::2, :, 2] = 0.0  # a zero pivot in every other lane
    singular[3, :, 0] = 0.0

    _lu_in_lanes_is_each_members_lu(A, singular)


@pytest.mark.parametrize("shape", [(40, 40), (37, 45), (45, 37)])
def test_lu_in_lanes_by_blocks_is_each_members_lu(shape):
    """A matrix whose lanes leave the first-level cache is factored by blocks of columns
    (LaneTranslator._lu_blocked): each member's factors, pivots and permutation are the single
    kernel's column by column LU's, to the bit: with pivoting in every lane (random matrices), with
    zero pivots in some lanes (a zero column inside a block, one at a block's first column, a
    repeated row that leaves a zero on the diagonal), square and rectangular."""
    from livens.engine.native.member_lanes import LaneTranslator

    m, n = shape
    assert m * n * 8 * LANES > LaneTranslator.LU_BLOCKED_BYTES and min(m, n) > LaneTranslator.LU_BLOCK
    rng = np.random.default_rng(7)
    A = rng.standard_normal((LANES, m, n))
    singular = A.copy()
    singular[1::2, :, 11] = 0.0  # inside the second block
    singular[2, :, 16] = 0.0  # a block's first column
    singular[3, 5] = singular[3, 2]  # a repeated row: a zero pivot once the other is eliminated
    singular[3, :, 0] = 0.0

    got = _lu_in_lanes_is_each_members_lu(A, singular)
    lu_, _, perm = (np.asarray(x) for x in got)
    k = min(m, n)
    L = np.tril(lu_[0, :, :k], -1) + np.eye(m, k)
    np.testing.assert_allclose(L @ np.triu(lu_[0, :k]), singular[0][perm[0]], atol=1e-12)


@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_a_transposed_triangular_solve_in_lanes_is_each_members(unit_diagonal):
    """U^T x = b in lanes (the first solve of a transposed LU solve: the reverse pass's), taken by
    U's rows (LaneTranslator.p_triangular_solve), is each member's solve of the single kernel, to
    the bit; so are the other forms the single kernel's code takes in lanes too (L^T, L, U), and
    U^T x = b solves it."""
    rng = np.random.default_rng(9)
    n = 23
    A = rng.standard_normal((LANES, n, n)) + 4.0 * np.eye(n)
    b = rng.standard_normal((LANES, n, 1))

    def solves(a, b):
        def tri(lower, transpose_a):
            return jax.lax.linalg.triangular_solve(
                a, b, left_side=True, lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal
            )

        return tri(False, True), tri(True, True), tri(True, False), tri(False, False)

    single = native.compile_function(solves, A[0], b[0])
    got = _lanes_of(solves, (A, b))
    for m in range(LANES):
        for g, s in zip(got, single(A[m], b[m])):
            np.testing.assert_array_equal(g[m], s)
    U = np.triu(A[0], 1) + (np.eye(n) if unit_diagonal else np.diag(np.diag(A[0])))
    np.testing.assert_allclose(U.T @ np.asarray(got[0])[0], b[0], atol=1e-12)


def test_a_gather_at_the_same_indices_in_every_lane_takes_whole_vectors():
    """Rows gathered by a permutation that every lane shares (an LU solve's pivots, alike across
    members) are taken as whole vectors, lane 0's indices for all; a batch where one lane's
    permutation differs is taken lane by lane: each lane's rows are its own either way."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((LANES, 6, 6))
    perm = np.tile(np.array([3, 0, 5, 1, 2, 4], np.int32), (LANES, 1))
    mixed = perm.copy()
    mixed[LANES - 1] = mixed[LANES - 1, ::-1]

    def rows(a, p):
        return a[p], a[:, p[:3]]

    for ps in (perm, mixed):
        got = _lanes_of(rows, (a, ps))
        for b in range(LANES):
            np.testing.assert_array_equal(np.asarray(got[0])[b], a[b][ps[b]])
            np.testing.assert_array_equal(np.asarray(got[1])[b], a[b][:, ps[b, :3]])


def _loop_args(problem, scheme, members):
    from livens.driver.setup import newton_options, resolve
    from livens.guess import GuessHistory
    from livens.schemes.base import State
    from livens.timestep import make_loop

    sch, vals, mech = resolve(problem, scheme, {}, None)
    loop = make_loop(mech, sch, sch.solving.guess, 64, None, newton_options(1e-10))
    jp = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
    sets = []
    for q0, v0 in members:
        q0, v0 = jnp.asarray(q0), jnp.asarray(v0)
        z = jnp.zeros(mech.m)
        p0 = (jnp.asarray(mech.M_const) if mech.constant_mass else mech.M(q0)) @ v0
        st = State(q=q0, p=p0, v=v0, lam=z, gam=z)
        if sch.increments:
            st = st._replace(comp=(jnp.zeros_like(q0), jnp.zeros_like(p0)))
        nx = sch.pack(sch.guess(st, problem.h, 0.0, jp, mech, "simple"), mech.d, mech.m).shape[0]
        hist = GuessHistory.empty(nx)
        sets.append(
            jax.tree_util.tree_map(np.asarray, (st, hist, 0.0, 0, 50, problem.h, 1e-10, np.int32(40), jp, None))
        )
    return loop, sets


@pytest.mark.parametrize(
    "example,scheme", [("pendulum-3d", "VI-S"), ("pendulum-3d", "EM"), ("double-spherical-pendulum", "livens-em")]
)
def test_each_lane_has_the_bits_of_the_single_members_kernel(example, scheme):
    problem = lv.examples.load(example)
    rng = np.random.default_rng(2)
    members = [(problem.q0, np.asarray(problem.v0) * rng.uniform(0.5, 1.5)) for _ in range(LANES)]
    loop, sets = _loop_args(problem, scheme, members)
    stacked = jax.tree_util.tree_map(lambda *a: np.stack(a), *sets)
    got = jax.tree_util.tree_leaves(_lanes_of(loop, stacked))
    single = native.compile_function(loop, *sets[0])
    native.wait()
    for lane, args in enumerate(sets):
        want = jax.tree_util.tree_leaves(single(*args))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g[lane], w)


def test_an_ensemble_in_lanes_is_its_members_single_runs_to_the_bit():
    problem = lv.examples.load("pendulum-3d")
    B = 2 * LANES + 3  # the last group of lanes is filled up with copies
    q0s, v0s = _pendulum_states(B)
    kw = dict(h=0.02, t_end=0.7, tol=1e-11, chunk=16)
    ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, **kw)
    assert ens.meta["backend"] == "native" and ens.meta["lanes"] == LANES
    assert np.all(ens.steps == 35) and not ens.failed.any()
    for b in (0, LANES + 1, B - 1):
        single = lv.simulate(problem.replace(q0=q0s[b], v0=v0s[b]), "VI-S", backend="native", **kw)
        np.testing.assert_array_equal(ens[b].q, single.q)
        np.testing.assert_array_equal(ens[b].lam, single.lam)
        np.testing.assert_array_equal(ens[b].newton_iterations, single.newton_iterations)


def test_a_failing_member_in_lanes_stops_alone():
    problem = lv.examples.load("pendulum-3d")
    q0s, v0s = _pendulum_states(2 * LANES, seed=3)
    # member 5 starts near the top and falls: too fast for h = 0.05 and 6 Newton iterations
    q0s[5] = [np.sin(0.3), 0.0, np.cos(0.3)]
    v0s[5] = [0.0, 9.0, 0.0]
    kw = dict(h=0.05, t_end=1.0, tol=1e-10, max_iter=6, chunk=2)
    with pytest.warns(RuntimeWarning, match=f"1 of {2 * LANES}"):
        ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, **kw)
    assert ens.meta["lanes"] == LANES
    assert np.flatnonzero(ens.failed).tolist() == [5]
    with pytest.raises(lv.ConvergenceError) as err:
        lv.simulate(problem.replace(q0=q0s[5], v0=v0s[5]), "VI-S", **kw)
    partial = err.value.solution
    assert ens.steps[5] == partial.n_steps >= 2
    np.testing.assert_array_equal(ens[5].q, partial.q)
    assert ens.newton_iterations[5, ens.steps[5]] == 6 and ens.newton_residual[5, ens.steps[5]] > kw["tol"]
    assert_nothing_after_the_failed_step(ens, 5)
    for b in (4, 6):  # its neighbours in the same group of lanes go on to the end
        assert ens.steps[b] == 20
        single = lv.simulate(problem.replace(q0=q0s[b], v0=v0s[b]), "VI-S", **kw)
        np.testing.assert_array_equal(ens[b].q, single.q)


def test_what_lanes_do_not_handle_falls_back_to_one_member_per_kernel():
    def sorts(x):
        return jnp.sort(x)

    with pytest.raises(native.Unsupported, match="sort in lanes"):
        native.compile_function(sorts, np.zeros(4), lanes=LANES)
