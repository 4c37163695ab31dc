"""``jax.vmap`` of lv.flow and of its native derivatives (livens.driver.native_flow): the members of
a batch go to one host call, which runs them together in lane kernels (each lane computes the
single kernel's operations); every member's values and derivatives must be those of its own
separate run, to the bit: the forward run's FlowResult, the gradient (reverse mode: the adjoint
kernel), a jvp (forward mode: the tangent kernel), runs of two chunks with System parameters per
member, and a member that fails under ``on_failure="hold"`` and ``"nan"``. The flows take their
starts as given (``consistent=False``): the projection onto the manifold is XLA's, whose batched
program may sum in another order than the single one (round-off, checked once)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver.native_flow import CHUNK
from livens.engine.native import build, compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler: no native kernels to batch")
GCC = compiler() is not None and build.is_gcc(compiler())
"""Lane kernels need GCC; elsewhere the members run one by one through the single kernels."""

MEMBERS = 3


def _loss(res):
    w = jnp.linspace(1.0, 2.0, res.q.shape[1])
    k = res.q.shape[0]
    return jnp.sum(w * res.q[-1]) + 0.3 * jnp.sum(res.p[k // 2] ** 2) + 0.1 * jnp.sum(res.q[1:] ** 2) / k


def _members(problem):
    """Three members: the problem's start with other speeds, under other gravities."""
    q0 = jnp.asarray(problem.q0)
    v0s = jnp.asarray(problem.v0) * jnp.array([[1.0], [0.5], [1.5]])
    gravities = jnp.array([9.81, 9.0, 11.0])
    return jnp.broadcast_to(q0, (MEMBERS, q0.shape[0])), v0s, gravities


def _same(batched, singles):
    """Every leaf of the batched tree equals the stacked leaves of the members' trees, to the bit
    (NaN where NaN)."""
    for b, s in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(singles)):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(s))


def _stack(trees):
    return jax.tree_util.tree_map(lambda *a: np.stack([np.asarray(x) for x in a]), *trees)


def _lanes_ran(kernels):
    """Whether a lane kernel of these member kernels was made (it ran the batch), where GCC can
    make one."""
    return not GCC or (kernels is not None and kernels.lanes > 0)


def test_a_lane_kernel_sorts_each_lane_by_its_own_integer_key():
    """The transposed LU solve of a reverse pass inverts its pivot permutation by a sort on an
    integer key with the positions carried along; in a lane kernel each lane sorts its own (against
    ``jax.vmap``, to the bit), and a float key is still refused."""
    from livens.driver import LANES
    from livens.engine import native

    if not GCC:
        pytest.skip("lane kernels need GCC")

    def inverse(perm, x):
        _, ind = jax.lax.sort_key_val(perm, jnp.arange(perm.shape[0], dtype=perm.dtype))
        return ind, jax.lax.sort((perm, x), num_keys=1)[1], x[ind]

    rng = np.random.default_rng(3)
    perms = np.stack([rng.permutation(6) for _ in range(LANES)]).astype(np.int32)
    xs = rng.standard_normal((LANES, 6))
    kernel = native.compile_function(inverse, perms[0], xs[0], lanes=LANES)
    _same(kernel(perms, xs), jax.vmap(inverse)(perms, xs))
    with pytest.raises(native.Unsupported, match="sort in lanes"):
        native.compile_function(jnp.sort, xs[0], lanes=LANES)


@pytest.fixture(scope="module")
def pendulum():
    return lv.examples.load("pendulum-3d")


@pytest.mark.parametrize("scheme", ["VI-S", "EM"])
def test_vmap_of_the_forward_run_and_the_gradient_are_the_members_runs(pendulum, scheme):
    F = lv.flow(pendulum, scheme, n_steps=CHUNK + 10, consistent=False)
    qs, vs, ls = _members(pendulum)

    def run(q, v, gravity):
        return F(q, v, {"gravity": gravity})

    def grad(q, v, length):
        return jax.grad(lambda q, v, length: _loss(run(q, v, length)), argnums=(0, 1, 2))(q, v, length)

    batched = jax.jit(jax.vmap(run))(qs, vs, ls)
    singles = _stack([jax.jit(run)(q, v, p) for q, v, p in zip(qs, vs, ls)])
    assert bool(np.all(np.asarray(batched.converged)))
    _same(batched, singles)
    assert _lanes_ran(F._fn._native.kernel), "the batched forward run did not run in lane kernels"

    batched = jax.jit(jax.vmap(grad))(qs, vs, ls)
    singles = _stack([jax.jit(grad)(q, v, p) for q, v, p in zip(qs, vs, ls)])
    assert all(np.all(np.isfinite(np.asarray(g))) and np.any(np.asarray(g) != 0) for g in batched)
    _same(batched, singles)
    assert _lanes_ran(F._fn._derivatives.adjoint_members), "the batched reverse pass did not run in lane kernels"

    projected = lv.flow(pendulum, scheme, n_steps=CHUNK + 10)  # starts projected: XLA's batched program

    def grad_projected(q, v, gravity):
        return jax.grad(lambda q, v, g: _loss(projected(q, v, {"gravity": g})), argnums=(0, 1, 2))(q, v, gravity)

    batched = jax.jit(jax.vmap(grad_projected))(qs, vs, ls)
    singles = _stack([jax.jit(grad_projected)(q, v, p) for q, v, p in zip(qs, vs, ls)])
    for b, s in zip(batched, singles):
        np.testing.assert_allclose(np.asarray(b), s, rtol=0, atol=1e-14 * np.max(np.abs(s)))


def test_vmap_of_forward_mode_is_the_members_jvps(pendulum):
    F = lv.flow(pendulum, "VI-S", n_steps=CHUNK + 10, consistent=False)
    qs, vs, ls = _members(pendulum)
    dv = jnp.linspace(0.5, 1.5, vs.shape[1])

    def jvp(q, v, gravity):
        return jax.jvp(lambda v, p: _loss(F(q, v, {"gravity": p})), (v, gravity), (dv, 1.0))

    batched = jax.jit(jax.vmap(jvp))(qs, vs, ls)
    singles = _stack([jax.jit(jvp)(q, v, p) for q, v, p in zip(qs, vs, ls)])
    assert np.all(np.asarray(batched[1]) != 0)
    _same(batched, singles)
    assert _lanes_ran(F._fn._derivatives.tangent_members), "batched forward mode did not run in lane kernels"


@pytest.mark.parametrize("on_failure", ["hold", "nan"])
def test_a_failing_member_under_vmap_fails_alone(pendulum, on_failure):
    """The pendulum falling from near the top with VI-S, h = 0.15, fails at a step (the first
    member); the others, small swings about the bottom, converge. Under vmap the failed member holds its last node with zero
    derivatives ("hold", so that a masked loss has finite gradients) or has NaN nodes after its
    failure and NaN derivatives ("nan"); every member equals its own run."""
    F = lv.flow(pendulum, "VI-S", h=0.15, n_steps=20, on_failure=on_failure, consistent=False)
    top = jnp.array([0.05, 0.0, 0.9987492177719089])
    down = jnp.array([0.0, 0.0, -1.0])  # small swings about the bottom: these converge
    qs = jnp.stack([top, down, down])
    vs = jnp.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.3, 0.0]])

    def masked(q, v):
        res = F(q, v)
        return jnp.where(res.converged, jnp.sum(res.q[-1] * jnp.array([1.0, 2.0, 3.0])), 0.0)

    res = jax.jit(jax.vmap(F))(qs, vs)
    assert np.asarray(res.converged).tolist() == [False, True, True]
    k = int(res.failed_step[0])
    assert 0 < k < 20
    grads = jax.jit(jax.vmap(jax.grad(masked, argnums=(0, 1))))(qs, vs)
    singles = [jax.jit(F)(q, v) for q, v in zip(qs, vs)]
    _same(res, _stack(singles))
    _same(grads, _stack([jax.jit(jax.grad(masked, argnums=(0, 1)))(q, v) for q, v in zip(qs, vs)]))
    if on_failure == "hold":
        np.testing.assert_array_equal(np.asarray(res.q[0, k + 1 :]), np.broadcast_to(res.q[0, k], (20 - k, 3)))
        assert all(np.all(np.asarray(g[0]) == 0) and np.all(np.isfinite(np.asarray(g))) for g in grads)
    else:
        assert np.all(np.isnan(np.asarray(res.q[0, k + 1 :])))
        assert all(np.all(np.isnan(np.asarray(g[0]))) and np.all(np.isfinite(np.asarray(g[1:]))) for g in grads)


def test_a_second_flow_with_the_same_settings_compiles_nothing(monkeypatch, pendulum):
    """lv.flow with the same arguments again is the same function (its programs compiled once);
    a flow of another length compiles its own program but shares the native kernels of the first
    (forward run and reverse pass), counted where JAX compiles and where the engine traces a kernel."""
    from jax._src import compiler as jax_compiler

    from livens.engine import native

    q0, v0 = jnp.asarray(pendulum.q0), jnp.asarray(pendulum.v0)
    F = lv.flow(pendulum, "EM", n_steps=40)
    first = F(q0, v0)
    jax.jit(jax.grad(lambda v: _loss(F(q0, v))))(v0)
    compiled = []

    def counted(real, what):
        def call(*args, **kwargs):
            compiled.append(what)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(jax_compiler, "compile_or_get_cached", counted(jax_compiler.compile_or_get_cached, "xla"))
    monkeypatch.setattr(native, "trace_function", counted(native.trace_function, "native"))
    again = lv.flow(pendulum, "EM", n_steps=40)
    _same(again(q0, v0), first)
    assert again is F and compiled == [], compiled
    longer = lv.flow(pendulum, "EM", n_steps=50)
    assert longer is not F
    res = longer(q0, v0)
    grad = jax.jit(jax.grad(lambda v: _loss(longer(q0, v))))(v0)
    assert "xla" in compiled and "native" not in compiled, compiled
    np.testing.assert_array_equal(np.asarray(res.q[:41]), np.asarray(first.q))  # the same steps
    assert np.all(np.isfinite(np.asarray(grad)))


def test_ensembles_and_batched_flows_share_one_pool_of_member_threads(pendulum):
    """The members of a native ensemble and of a batched flow (its forward run and reverse pass) run
    on one pool of threads (livens.driver.executors.spread), kept from one run to the next: every
    such thread is named by the pool's prefix, there is at most one per core, and those the ensemble
    ran on are still there after the flow ran on them."""
    import os
    import threading

    from livens.driver import LANES, executors

    def member_threads():
        return {t for t in threading.enumerate() if "member" in t.name}

    B = LANES + 1  # more than one group of members, in lanes or one by one
    rng = np.random.default_rng(5)
    qs = rng.standard_normal((B, 3))
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    vs = rng.standard_normal((B, 3))
    vs -= np.sum(vs * qs, axis=1, keepdims=True) * qs
    ens = lv.simulate_ensemble(pendulum, "VI-S", qs, vs, h=0.02, t_end=0.2, progress=False, backend="native")
    assert ens.meta["backend"] == "native" and not ens.failed.any()
    after_ensemble = member_threads()
    F = lv.flow(pendulum, "VI-S", h=0.02, n_steps=10, consistent=False)
    grads = jax.jit(jax.vmap(jax.grad(lambda q, v: _loss(F(q, v)), argnums=(0, 1))))(jnp.asarray(qs), jnp.asarray(vs))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
    after_flow = member_threads()
    cores = os.cpu_count() or 1
    assert all(t.name.startswith(executors.THREAD_PREFIX) for t in after_flow), sorted(t.name for t in after_flow)
    assert len(after_flow) <= cores
    assert after_ensemble <= after_flow
    if cores >= 2:
        assert after_ensemble, "the ensemble's members ran on no thread of the pool"


class _FakeLanes:
    """A lane kernel of ``lanes`` lanes that returns its members' indices (member-first) times 10."""

    def __init__(self, lanes):
        self.lanes, self.calls = lanes, []

    def __call__(self, idx, buffers=None):
        self.calls.append(np.asarray(idx).tolist())
        return np.asarray(idx) * 10


class _FakeSingle:
    """A single kernel whose scratch arrays hold ``scratch`` bytes, returning its member's index times 10."""

    def __init__(self, scratch):
        self.scratch, self.calls = scratch, []

    def __call__(self, b):
        self.calls.append(int(b))
        return 10 * int(b)


@pytest.mark.parametrize("members", [3, 8, 9])
@pytest.mark.parametrize("heavy", [False, True])
def test_a_kernel_bound_by_memory_runs_its_members_one_by_one(members, heavy):
    """A batch runs in lane kernels (groups of the lanes, the last one filled up with its last
    member) unless their scratch arrays, the single kernel's times the lanes, would pass
    SizePolicy.lane_scratch_bytes: the single kernel then runs each member (spread over the cores); either way each
    member's outputs go to it."""
    from livens.driver import executors

    scratch = lv.engine.size_policy().lane_scratch_bytes // 8 + (1 if heavy else 0)
    single, lanes = _FakeSingle(scratch), _FakeLanes(8)
    kernel = executors.MemberKernel(single, make_lanes=lambda: lanes, lanes_from=2, max_lanes=8)
    got = np.full(members, -1)

    def take(idx, out):
        got[idx] = out

    kernel.run(np.arange(members), lambda idx: (idx,), take)
    np.testing.assert_array_equal(got, 10 * np.arange(members))
    assert kernel.memory_bound == heavy
    if heavy:
        assert sorted(single.calls) == list(range(members)) and not lanes.calls and kernel.lanes == 0
    else:
        assert not single.calls and kernel.lanes == 8
        assert len(lanes.calls) == -(-members // 8) and all(len(c) == 8 for c in lanes.calls)


def test_without_buffer_callback_the_host_calls_copy_and_give_the_same_bits(monkeypatch, pendulum):
    """The host callbacks write into XLA's buffers (jax.experimental.buffer_callback); where JAX
    lacks it they go through jax.pure_callback, which copies their arguments and results: the same
    forward runs, gradients and jvps, batched and not, to the bit."""
    from livens.driver import native_flow

    F = lv.flow(pendulum, "VI-S", n_steps=CHUNK + 12, consistent=False)
    qs, vs, _ = _members(pendulum)

    def values():
        grad = jax.grad(lambda q, v: _loss(F(q, v)), argnums=(0, 1))

        def jvp(q, v):
            return jax.jvp(lambda v: _loss(F(q, v)), (v,), (v,))

        batched = jax.jit(jax.vmap(F))(qs, vs), jax.jit(jax.vmap(grad))(qs, vs), jax.jit(jax.vmap(jvp))(qs, vs)
        return *batched, jax.jit(F)(qs[1], vs[1]), jax.jit(grad)(qs[1], vs[1]), jax.jit(jvp)(qs[1], vs[1])

    with_buffers = values()
    copies, real = [], jax.pure_callback

    def pure_callback(*args, **kwargs):
        copies.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(native_flow, "_buffer_callback", None)
    monkeypatch.setattr(jax, "pure_callback", pure_callback)
    jax.clear_caches()  # the flow's programs traced again
    _same(values(), with_buffers)
    assert copies, "the host callbacks did not go through jax.pure_callback"
    assert np.all(np.isfinite(np.asarray(with_buffers[1][1]))) and np.any(np.asarray(with_buffers[1][1]) != 0)
