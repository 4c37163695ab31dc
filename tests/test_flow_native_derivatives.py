"""The derivatives of lv.flow from the run's recorded solutions as native kernels
(livens.driver.native_flow): reverse mode (the adjoint kernel) and forward mode (the tangent
kernel) are the derivatives that XLA computes from the same replay (``backend="xla"``) to
round-off, across chunk boundaries (runs of 1, 2 and 3 chunks, the last one partial), with System
parameters, under ``jax.vmap``, and for a run that fails; central differences of the forward run
check them independently; a second derivative through them is refused with the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver.native_flow import CHUNK, NativeDerivatives
from livens.engine.native import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler: the reverse pass runs in XLA")

ROUNDOFF = 1e-10  # relative: the two transposes sum the same products in other orders


def _loss(res):
    w = jnp.linspace(1.0, 2.0, res.q.shape[1])
    k = res.q.shape[0]
    return jnp.sum(w * res.q[-1]) + 0.3 * jnp.sum(res.p[k // 2] ** 2) + 0.1 * jnp.sum(res.q[1:] ** 2) / k


def _grads(problem, scheme, n_steps, parameter, backend, h=None):
    F = lv.flow(problem, scheme, n_steps=n_steps, h=h, backend=backend)
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    p0 = jnp.asarray(problem.system.parameters[parameter])

    def L(q, v, p):
        return _loss(F(q, v, {parameter: p}))

    return F, jax.jit(jax.grad(L, argnums=(0, 1, 2)))(q0, v0, p0)


def _close(a, b, rtol):
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        scale = max(np.max(np.abs(y)), 1e-300)
        assert np.all(np.isfinite(x)) and np.max(np.abs(x - y)) <= rtol * scale, (x, y)


@pytest.mark.parametrize(
    "example, scheme, n_steps",
    [("pendulum-3d", "VI-S", 1), ("pendulum-3d", "VI-A", CHUNK), ("heavy-top", "EM", 2 * CHUNK + 77)],
)
def test_native_reverse_pass_is_the_xla_transpose(example, scheme, n_steps):
    problem = lv.examples.load(example)
    parameter = next(iter(problem.system.parameters))
    F, native = _grads(problem, scheme, n_steps, parameter, "auto")
    assert isinstance(F._fn._derivatives, NativeDerivatives), "the reverse pass did not run natively"
    F_xla, xla = _grads(problem, scheme, n_steps, parameter, "xla")
    assert F_xla._fn._derivatives is False  # XLA transposed it
    _close(native, xla, ROUNDOFF)


@pytest.mark.parametrize(
    "example, scheme, n_steps",
    # the pendulum's 700 steps span two chunks already; the heavy top adds a larger state: slow
    [("pendulum-3d", "EM", 700), pytest.param("heavy-top", "VI-S", 2 * CHUNK + 3, marks=pytest.mark.slow)],
)
def test_native_forward_mode_is_xla_forward_mode(example, scheme, n_steps):
    """jax.jvp and jax.jacfwd (a vmap of tangents) with the tangent kernel against backend="xla"."""
    problem = lv.examples.load(example)
    parameter = next(iter(problem.system.parameters))
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    p0 = jnp.asarray(problem.system.parameters[parameter])
    dv = jnp.linspace(0.5, 1.5, v0.shape[0])
    out = {}
    for backend in ("auto", "xla"):
        F = lv.flow(problem, scheme, n_steps=n_steps, backend=backend)

        def L(v, p, F=F):
            return _loss(F(q0, v, {parameter: p}))

        jvp = jax.jit(lambda v, p, L=L: jax.jvp(L, (v, p), (dv, 1.0))[1])(v0, p0)
        jac = jax.jit(jax.jacfwd(L, argnums=(0, 1)))(v0, p0)
        out[backend] = (jvp, *jac)
        if backend == "auto":
            assert F._fn._derivatives.tangent_kernel is not None, "forward mode did not run natively"
    _close(out["auto"], out["xla"], ROUNDOFF)


def test_native_reverse_pass_equals_central_differences():
    """The 3D pendulum, 700 steps of VI-S (two chunks): d loss / d length against central
    differences of the forward run, Richardson-extrapolated (error O(e^4) + round-off/e)."""
    problem = lv.examples.load("pendulum-3d")
    F, (gq, gv, gl) = _grads(problem, "VI-S", 700, "length", "auto")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    L = jax.jit(lambda p: _loss(F(q0, v0, {"length": p})))
    p0, e = float(problem.system.parameters["length"]), 1e-4

    def d(e):
        return (float(L(p0 + e)) - float(L(p0 - e))) / (2 * e)

    fd = (4 * d(e / 2) - d(e)) / 3
    assert abs(float(gl) - fd) <= 1e-7 * abs(fd), (float(gl), fd)


def test_native_reverse_pass_under_vmap_is_per_member():
    problem = lv.examples.load("pendulum-3d")
    F = lv.flow(problem, "VI-S", n_steps=CHUNK + 10)
    q0 = jnp.asarray(problem.q0)
    v0s = jnp.asarray(problem.v0) * jnp.array([[1.0], [0.5], [1.5]])

    def g(v):
        return jax.grad(lambda v: _loss(F(q0, v)))(v)

    batched = jax.jit(jax.vmap(g))(v0s)
    single = np.stack([np.asarray(jax.jit(g)(v)) for v in v0s])
    assert np.max(np.abs(np.asarray(batched) - single)) <= ROUNDOFF * np.max(np.abs(single))


def test_a_failed_run_has_nan_gradients_with_the_native_reverse_pass():
    """The pendulum falling from near the top with VI-S, h = 0.15: a step fails; the gradient with
    respect to every input is NaN, not the partial run's."""
    problem = lv.examples.load("pendulum-3d")
    q0 = jnp.array([0.05, 0.0, 0.9987492177719089])
    v0 = jnp.array([0.0, 1.0, 0.0])
    F = lv.flow(problem, "VI-S", h=0.15, n_steps=20)
    g = jax.jit(jax.grad(lambda q, v: jnp.sum(F(q, v).q[3]), argnums=(0, 1)))(q0, v0)
    assert isinstance(F._fn._derivatives, NativeDerivatives)
    assert all(np.all(np.isnan(np.asarray(x))) for x in g)


def test_a_second_derivative_is_refused_natively_and_given_by_xla():
    problem = lv.examples.load("pendulum-3d")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)

    def loss(F):
        return lambda v: _loss(F(q0, v))

    F = lv.flow(problem, "VI-S", n_steps=10)
    with pytest.raises(NotImplementedError, match="backend='xla'"):
        jax.hessian(loss(F))(v0)
    F_xla = lv.flow(problem, "VI-S", n_steps=10, backend="xla")
    H = np.asarray(jax.jit(jax.hessian(loss(F_xla)))(v0))
    grad = jax.jit(jax.grad(loss(F_xla)))
    e = 1e-5
    fd = np.stack([(np.asarray(grad(v0 + e * u)) - np.asarray(grad(v0 - e * u))) / (2 * e) for u in np.eye(3)])
    assert np.max(np.abs(H - fd)) <= 1e-6 * np.max(np.abs(fd)), (H, fd)


def test_a_stop_flag_raised_during_the_replays_does_not_cut_them_short(monkeypatch):
    """The replays solve no equations and must run whole chunks: with the native kernels' stop
    flag up during the reverse and forward-mode passes (as Ctrl-C of an ensemble in another thread
    raises it), jax.grad and jax.jvp give the values they give without it, to the bit."""
    problem = lv.examples.load("pendulum-3d")
    F = lv.flow(problem, "VI-S", n_steps=CHUNK + 40)  # two chunks
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)

    def L(q, v):
        return _loss(F(q, v))

    grad = jax.jit(jax.grad(L, argnums=(0, 1)))
    jvp = jax.jit(lambda q, v: jax.jvp(L, (q, v), (jnp.ones_like(q), jnp.zeros_like(v))))
    expected = grad(q0, v0), jvp(q0, v0)
    for name in ("host_adjoint", "host_tangent"):
        real = getattr(NativeDerivatives, name)

        def flagged(self, *args, real=real):
            lv.engine.interrupt_native()
            try:
                return real(self, *args)
            finally:
                lv.engine.resume_native()

        monkeypatch.setattr(NativeDerivatives, name, flagged)
    got = grad(q0, v0), jvp(q0, v0)
    for a, b in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_reverse_pass_keeps_each_steps_state_not_its_linearization():
    """The adjoint kernel transposes each step linearized again at its start: across a chunk it
    keeps the states, not each step's tangent matrix and LU, so that its memory is less than one
    tangent matrix per step of a chunk (the heavy top's 54 x 54 under vmap: lanes of them left the
    caches). Its gradients are the XLA transpose's (above)."""
    problem = lv.examples.load("pendulum-3d")
    F, _ = _grads(problem, "VI-S", 10, "length", "auto")
    derivatives = F._fn._derivatives
    n = derivatives.run.flow.plan.unknowns
    assert derivatives.adjoint.scratch < CHUNK * n * n * 8, (derivatives.adjoint.scratch, n)
