"""A failed run of lv.flow: the same diagnosis as lv.simulate's wherever the flow reports it, a
throw=True failure caught by ``except lv.ConvergenceError`` wherever livens code stands between the
compiled program and the caller, and failed members of a batch masked with finite gradients for the
others (on_failure="hold") whichever code computes the derivatives.

Checked: lv.simulate's sentence on why a step failed (a tolerance below the residual's round-off
floor; a potential that is NaN at the first guess of a later step) ends the flow's message on
concrete arrays (thinned nodes included), from a throw=True run inside jax.jit (lv.raising, as a
wrapper and as a context manager about a library's compiled call, and in JAX's own runtime error
without it) or at once (jax.grad), and from F.check of a vmapped result given the call's
parameters; an error that is not a flow's passes lv.raising unchanged; with on_failure="hold" the
message says what the nodes hold, and XLA's derivatives (backend="xla", reverse and forward mode)
of a masked batch with a failed step and a failed start are those of the converged member alone.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver.ingraph import NONE, START, STEP


def _advice(call) -> str:
    """The sentence that ends lv.simulate's message of a failed step (``call`` raises it)."""
    with pytest.raises(lv.ConvergenceError) as info:
        call()
    return info.value.reason.split(" iterations (tol = ")[1].split(")", 1)[1].lstrip(". ")


def _sqrt_well():
    """A particle pulled towards x = 0 by V = 4 sqrt(x) + y^2 / 2: V is NaN for x < 0, which the
    first guess of step 7 (t = 0.6 -> 0.7) of VI-S at h = 0.1 reaches."""
    system = lv.System(mass_matrix=np.eye(2), potential=lambda q: 4.0 * jnp.sqrt(q[0]) + 0.5 * q[1] ** 2)
    return lv.Problem(system, q0=[1.0, 0.0], v0=[-1.0, 1.0], h=0.1, t_end=2.0)


def test_a_later_step_gets_simulates_diagnosis_wherever_the_flow_reports_it():
    problem = _sqrt_well()
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    sim = _advice(lambda: lv.simulate(problem, "VI-S", tol=1e-12, rescue=False, progress=False))
    assert sim == "The potential V(q) returned non-finite values or derivatives at the first guess of q^(n+1)."
    for every in (1, 2):  # thinned nodes too: the diagnosis reads the step's start inside the program
        with pytest.raises(lv.ConvergenceError, match=r"in step 7 of 20 \(t = 0.6 -> 0.7\)") as info:
            lv.flow(problem, "VI-S", n_steps=20, save_every=every)(q0, v0)
        assert str(info.value).endswith(" " + sim) and info.value.step == 6

    F = lv.flow(problem, "VI-S", n_steps=20, throw=True)
    with pytest.raises(lv.ConvergenceError) as info:
        lv.raising(jax.jit(lambda v: F(q0, v).q))(v0)
    assert str(info.value).endswith(" " + sim)
    with pytest.raises(lv.ConvergenceError) as info:  # at once: F raises it itself
        jax.grad(lambda v: F(q0, v).q[-1, 0])(v0)
    assert str(info.value).endswith(" " + sim)

    G = lv.flow(problem, "VI-S", n_steps=20)
    starts = jnp.stack([q0, jnp.array([4.0, 0.0])]), jnp.stack([v0, jnp.array([0.0, 1.0])])
    batch = jax.jit(jax.vmap(G))(*starts)  # the second member, from rest at x = 4, stays at x > 1
    with pytest.raises(lv.ConvergenceError, match=r"\(member 0 of the vmapped call\)") as info:
        G.check(batch)  # a System without parameters: nothing more to give
    assert sim in str(info.value) and str(info.value).endswith("1 of 2 members failed: [0].")


def test_a_tolerance_below_the_round_off_floor_is_named_as_simulate_names_it():
    """The issue's case: Newton stalls at its round-off floor above tol (1e-23 on the pendulum: below the floor rule's reach too)."""
    problem = lv.examples.load("pendulum-3d")
    h = problem.h
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    sim = _advice(lambda: lv.simulate(problem, "VI-S", h=h, t_end=3 * h, tol=1e-23, rescue=False, progress=False))
    assert 'use tol="roundoff"' in sim
    F = lv.flow(problem, "VI-S", h=h, n_steps=3, tol=1e-23, throw=True)
    loss = jax.jit(lambda v: F(q0, v).q[-1, 0])
    caught = None
    try:  # a library's compiled call inside the block
        with lv.raising():
            jax.block_until_ready(loss(v0))
    except lv.ConvergenceError as e:
        caught = e
    assert caught is not None and str(caught).endswith(" " + sim) and caught.step == 0 and caught.__cause__ is None
    with pytest.raises(jax.errors.JaxRuntimeError) as raw:  # without lv.raising: JAX's error, the same words
        jax.block_until_ready(loss(v0))
    assert sim in str(raw.value)

    G = lv.flow(problem, "VI-S", h=h, n_steps=3, tol=1e-23)
    lengths = jnp.array([1.0, 1.0])
    batch = jax.vmap(lambda L: G(q0, v0, {"length": L}))(lengths)
    with pytest.raises(lv.ConvergenceError) as info:
        G.check(batch, {"length": lengths})  # the call's parameters: the member's are taken
    assert sim in str(info.value)
    with pytest.raises(lv.ConvergenceError, match="Try a smaller h") as info:
        G.check(batch)  # values not given: the general advice, no guess at them
    assert sim not in str(info.value)


def test_raising_passes_other_errors_and_converged_runs(capfd):
    def fails(x):
        if x > 0:
            raise ValueError("not a flow's")

    def other(x):
        jax.debug.callback(fails, x)
        return 2 * x

    with pytest.raises(jax.errors.JaxRuntimeError, match="not a flow's"):
        with lv.raising():
            jax.jit(other)(1.0)
    with pytest.raises(jax.errors.JaxRuntimeError, match="not a flow's"):
        lv.raising(jax.jit(other))(1.0)
    capfd.readouterr()  # JAX logs the other callback's error: not livens'
    with lv.raising():
        assert float(jax.jit(other)(-1.0)) == -2.0


FALLING = jnp.array([np.sin(0.05), 0.0, np.cos(0.05)])
"""Released near the top with V0: VI-S at h = 0.15 fails in step 7; from HANGING every step converges."""
HANGING = jnp.array([0.6, 0.0, -0.8])
V0 = jnp.array([0.0, 0.5, 0.0])


def test_hold_says_what_its_nodes_hold():
    problem = lv.examples.load("pendulum-3d")
    F = lv.flow(problem, "VI-S", h=0.15, n_steps=20, on_failure="hold")
    with pytest.raises(lv.ConvergenceError, match="hold the last node reached and every derivative of the run is zero"):
        F(FALLING, V0)


def test_masked_members_have_finite_xla_gradients_for_the_others():
    """backend="xla": XLA computes the derivatives (the other test of masking runs the native ones
    where the engine makes them). Three members: the first fails in step 7, the third's start is
    off the manifold (consistent=False: a failed start); the masked loss's gradient with respect to
    the shared rod length and to each member's v0 is that of the second member alone, in reverse
    and forward mode."""
    problem = lv.examples.load("pendulum-3d")
    v0 = V0
    F = lv.flow(problem, "VI-S", h=0.15, n_steps=20, on_failure="hold", consistent=False, backend="xla")
    qs = jnp.stack([FALLING, HANGING, 1.1 * HANGING])
    vs = jnp.stack([v0, v0, v0])
    w = jnp.array([1.0, 2.0, 3.0])

    def member(q, v, L):
        r = F(q * L, v, {"length": L})
        return jnp.where(r.converged, w @ r.q[-1] + 0.5 * jnp.sum(r.p[-1] ** 2), 0.0)

    def total(L, vs):
        return jnp.sum(jax.vmap(member, in_axes=(0, 0, None))(qs, vs, L))

    res = jax.jit(jax.vmap(lambda q, v: F(q, v)))(qs, vs)
    assert np.asarray(res.failure).tolist() == [STEP, NONE, START]
    g_L, g_v = jax.jit(jax.grad(total, argnums=(0, 1)))(1.0, vs)
    alone_L, alone_v = jax.jit(jax.grad(member, argnums=(2, 1)))(HANGING, v0, 1.0)
    assert np.isfinite(float(g_L)) and float(alone_L) != 0.0
    np.testing.assert_allclose(float(g_L), float(alone_L), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(g_v[0::2]), np.zeros((2, 3)))
    np.testing.assert_allclose(np.asarray(g_v[1]), np.asarray(alone_v), rtol=1e-12)
    d = jax.jit(jax.jacfwd(lambda L: total(L, vs)))(1.0)
    np.testing.assert_allclose(float(d), float(alone_L), rtol=1e-12)
