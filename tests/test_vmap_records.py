"""The records no output of lv.flow reads (each step's solution "x", the replays' linearization
point) carry no derivative through the native derivatives: the reverse pass's kernel is given
zero cotangents for them by the host, not arrays of zeros that XLA makes and hands over, and
forward mode returns no tangent for them. Every output's derivatives stay those of XLA's
derivatives of the same replay (backend="xla"), in both modes, for every field of the result.
The forward run's records are copied into XLA's buffers beside the next chunk's kernel: a failed
copy fails the call, which returns only once every copy has ended; under jax.vmap the records
copied are views of the lane kernel's outputs, and a copy that lags behind still copies its own
chunk's."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver import native_flow
from livens.driver.native_flow import CHUNK, UNDIFFERENTIATED
from livens.engine.native import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler: no native derivatives")

STEPS = CHUNK + 20
"""Two chunks: the reverse pass carries a cotangent from the second to the first."""


def _loss(r):
    """Reads every field of the result that carries a derivative."""
    k = r.q.shape[0]
    return (
        jnp.sum(r.q[-1] ** 2)
        + 0.1 * jnp.sum(r.p**2) / k
        + 0.01 * jnp.sum(r.v**2) / k
        + 0.3 * jnp.sum(r.lam) / k
        + 0.2 * jnp.sum(r.gam) / k
    )


@pytest.fixture(scope="module")
def flows():
    problem = lv.examples.load("pendulum-3d")
    native = lv.flow(problem, "EM", n_steps=STEPS, consistent=False)
    xla = lv.flow(problem, "EM", n_steps=STEPS, consistent=False, backend="xla")
    return problem, native, xla


def test_the_reverse_pass_is_given_no_cotangent_of_the_solutions(flows, monkeypatch):
    problem, F, F_xla = flows
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    given = []
    host_adjoint = native_flow.NativeDerivatives.host_adjoint

    def spy(self, out, starts, xs, n, ct_recs, sysp):
        given.append(sorted(ct_recs))
        return host_adjoint(self, out, starts, xs, n, ct_recs, sysp)

    monkeypatch.setattr(native_flow.NativeDerivatives, "host_adjoint", spy)
    grad = jax.jit(jax.grad(lambda q, v: _loss(F(q, v)), argnums=(0, 1)))(q0, v0)
    assert given, "the native reverse pass did not run"
    assert all(k not in keys for keys in given for k in UNDIFFERENTIATED)
    assert {"q", "p", "v", "lam", "gam"} <= set(given[0])
    expected = jax.jit(jax.grad(lambda q, v: _loss(F_xla(q, v)), argnums=(0, 1)))(q0, v0)
    for g, e in zip(grad, expected):
        assert np.all(np.asarray(g) != 0)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-9, atol=1e-12)


def test_forward_mode_gives_every_fields_tangent(flows):
    problem, F, F_xla = flows
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    dq, dv = jnp.zeros_like(q0), jnp.linspace(0.5, 1.5, v0.shape[0])

    def tangents(flow):
        _, t = jax.jit(lambda q, v: jax.jvp(flow, (q, v), (dq, dv)))(q0, v0)
        return {k: np.asarray(getattr(t, k)) for k in ("q", "p", "v", "lam", "gam")}

    got, expected = tangents(F), tangents(F_xla)
    for k, e in expected.items():
        assert np.any(e != 0), k
        np.testing.assert_allclose(got[k], e, rtol=1e-9, atol=1e-12 * np.max(np.abs(e)), err_msg=k)


def test_a_failed_copy_of_the_records_fails_the_call_after_every_copy_ended(flows, monkeypatch):
    """The forward run's records are copied into XLA's buffers in a thread of their own, beside
    the next chunk's kernel: an exception there reaches the caller, and the host call returns
    only once no copy is under way (none writes into XLA's buffers after it)."""
    from livens.driver import host

    problem, _, _ = flows
    F = lv.flow(problem, "EM", n_steps=2 * CHUNK + 5, consistent=False)  # its own programs, compiled here
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    record, calls, running, threads = host.EveryStep.record, [], [], []

    def failing(self, members, a, e, rec):
        running.append(1)
        try:
            calls.append(a)
            threads.append(threading.current_thread().name)
            if a > 0:
                raise RuntimeError("the records' copy failed")
            return record(self, members, a, e, rec)
        finally:
            running.pop()

    monkeypatch.setattr(host.EveryStep, "record", failing)
    monkeypatch.setattr(native_flow, "ASYNC_COPY_BYTES", 0)  # every chunk's copy in the copying thread
    with pytest.raises(Exception, match="the records' copy failed"):
        jax.block_until_ready(jax.jit(F)(q0, v0))
    assert calls[:2] == [0, CHUNK] and not running
    assert all(name.startswith("livens-records") for name in threads)


def test_records_copied_behind_the_lane_kernel_are_each_members_own(flows, monkeypatch):
    """Under jax.vmap every member runs in one call of the lane kernel per chunk, whose records are
    views of the kernel's outputs, and the call after next overwrites them: a copy that lags
    behind the kernels (slowed here) must still copy each chunk's own records, so each member's
    results are those of its own run, to the bit (fails where a chunk's rows are copied after
    a later chunk overwrote them)."""
    import time

    from livens.driver import host

    problem, _, _ = flows
    F = lv.flow(problem, "EM", n_steps=4 * CHUNK + 5, consistent=False)
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    Q = jnp.stack([q0] * 8)
    V = jnp.stack([v0 * (1 + 0.05 * k) for k in range(8)])  # on the manifold: G(q0) v0 = 0
    own = [F(Q[k], V[k]) for k in range(8)]
    record = host.EveryStep.record

    def slow(self, members, a, e, rec):
        if threading.current_thread().name.startswith("livens-records"):
            time.sleep(0.05)
        return record(self, members, a, e, rec)

    monkeypatch.setattr(host.EveryStep, "record", slow)
    monkeypatch.setattr(native_flow, "ASYNC_COPY_BYTES", 0)  # every chunk's copy in the copying thread
    batched = jax.jit(jax.vmap(F))
    for _ in range(2):  # the first call makes the lane kernel, the second runs every chunk in it
        got = batched(Q, V)
    for field in ("q", "p", "v", "lam", "gam", "iterations", "residual"):
        expected = np.stack([np.asarray(getattr(r, field)) for r in own])
        assert np.asarray(getattr(got, field)).tobytes() == expected.tobytes(), field
