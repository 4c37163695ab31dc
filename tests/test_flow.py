"""lv.flow: the run as a pure, differentiable function (implicit function theorem per step).

Checked: the flow is the simulation (same nodes as lv.simulate); derivatives with respect to the
initial state (along directions that keep it consistent) and to a System parameter equal central
differences to 1e-6 relative for VI-S, EM and vi-lagrange on the pendulum and the heavy top;
jvp, grad, jacfwd and vmap work through it; a failed step gives NaN nodes and a clear error;
reverse-mode memory stays bounded (slow).
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver.ingraph import SCHEME_START, STEP

RTOL = 1e-6


def _rotation(axis, angle):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _rotated(q, R):
    """Every 3-block of q rotated by R (a rigid rotation keeps the pendulum's rod and the top's
    directors, fixed point and velocities consistent)."""
    return (q.reshape(-1, 3) @ R.T).reshape(-1)


def _loss(res):
    w = jnp.linspace(1.0, 2.0, res.q.shape[1])
    return jnp.sum(w * res.q[-1]) + 0.3 * jnp.sum(w * res.p[-1]) + 0.1 * jnp.sum(res.q[len(res.q) // 2] ** 2)


def _check_gradients(example, scheme, n_steps):
    problem = lv.examples.load(example)
    F = lv.flow(problem, scheme, n_steps=n_steps)
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    L = lambda q, v, g: _loss(F(q, v, {"gravity": g}))  # noqa: E731
    g0 = float(problem.system.parameters["gravity"])
    # (1) initial configuration and velocity rotated rigidly about a horizontal axis (consistent)
    axis = np.array([1.0, 0.3, 0.0]) / np.hypot(1.0, 0.3)
    xi = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    dq = jnp.asarray(_rotated(np.asarray(q0), xi))
    dv = jnp.asarray(_rotated(np.asarray(v0), xi))
    ad = jax.jvp(lambda e: L(q0 + e * dq, v0 + e * dv, g0), (0.0,), (1.0,))[1]
    eps = 1e-6
    fd = (
        L(
            jnp.asarray(_rotated(np.asarray(q0), _rotation(axis, eps))),
            jnp.asarray(_rotated(np.asarray(v0), _rotation(axis, eps))),
            g0,
        )
        - L(
            jnp.asarray(_rotated(np.asarray(q0), _rotation(axis, -eps))),
            jnp.asarray(_rotated(np.asarray(v0), _rotation(axis, -eps))),
            g0,
        )
    ) / (2 * eps)
    assert abs(float(ad) - float(fd)) <= RTOL * abs(float(fd)), ("q0", float(ad), float(fd))
    # (2) the velocity along a direction tangent to the constraint manifold (G(q0) dv = 0), by grad
    from livens.mechanics import mechanics

    G = np.asarray(mechanics(problem.system, problem.q0).G(q0))
    null = np.linalg.svd(G)[2][G.shape[0] :]
    dv = jnp.asarray(null.T @ np.linspace(1.0, 2.0, null.shape[0]))
    grad_v = jax.grad(lambda v: L(q0, v, g0))(v0)
    fd = (L(q0, v0 + eps * dv, g0) - L(q0, v0 - eps * dv, g0)) / (2 * eps)
    assert abs(float(grad_v @ dv) - float(fd)) <= RTOL * abs(float(fd)), ("v0", float(grad_v @ dv), float(fd))
    # (3) the gravity parameter
    dg = jax.grad(lambda g: L(q0, v0, g))(g0)
    fd = (L(q0, v0, g0 * (1 + 1e-6)) - L(q0, v0, g0 * (1 - 1e-6))) / (2e-6 * g0)
    assert abs(float(dg) - float(fd)) <= RTOL * abs(float(fd)), ("gravity", float(dg), float(fd))


FAST = [("pendulum-3d", "VI-S"), ("heavy-top", "EM")]
ALL = [(e, s) for e in ("pendulum-3d", "heavy-top") for s in ("VI-S", "EM", "vi-lagrange")]


@pytest.mark.parametrize("example, scheme", FAST)
def test_gradients_equal_central_differences(example, scheme):
    _check_gradients(example, scheme, 40)


@pytest.mark.slow
@pytest.mark.parametrize("example, scheme", [c for c in ALL if c not in FAST])
def test_gradients_equal_central_differences_all(example, scheme):
    _check_gradients(example, scheme, 100)


def test_flow_is_the_simulation_and_vmaps():
    problem = lv.examples.load("pendulum-3d")
    F = lv.flow(problem, "EM", h=0.01, n_steps=120)
    res = F(problem.q0, problem.v0)
    sol = lv.simulate(problem, "EM", h=0.01, t_end=1.2, tol=1e-12, progress=False)
    assert bool(res.converged) and int(res.failed_step) == -1
    np.testing.assert_allclose(np.asarray(res.q), sol.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(res.p), sol.p, rtol=0, atol=1e-12)
    # another length at run time, without a new System: the rod constraint follows it
    q1 = np.array([1.2, 0.0, 0.0])
    res2 = F(q1, problem.v0, {"length": 1.2})
    assert abs(float(jnp.max(jnp.abs(jnp.linalg.norm(res2.q, axis=1) - 1.2)))) <= 1e-11
    # vmap over initial velocities and jacfwd of the final node
    v0s = jnp.stack([jnp.asarray(problem.v0) * s for s in (0.9, 1.0, 1.1)])
    batch = jax.vmap(lambda v: F(problem.q0, v).q[-1])(v0s)
    assert batch.shape == (3, 3)
    np.testing.assert_allclose(np.asarray(batch[1]), sol.q[-1], atol=1e-12)
    J = jax.jacfwd(lambda v: F(problem.q0, v).q[-1])(jnp.asarray(problem.v0))
    assert J.shape == (3, 3) and np.all(np.isfinite(np.asarray(J)))


def _falling_pendulum():
    """The pendulum released just off the top: with VI-S at h = 0.15 Newton fails in step 7."""
    problem = lv.examples.load("pendulum-3d")
    q0 = jnp.array([np.sin(0.05), 0.0, np.cos(0.05)])
    return problem, q0, jnp.array([0.0, 0.5, 0.0]), lv.flow(problem, "VI-S", h=0.15, n_steps=20)


def test_failed_step_is_an_error_and_nan_under_transformations():
    problem, q0, v0, F = _falling_pendulum()
    with pytest.raises(lv.ConvergenceError, match=r"Newton did not converge in step 7 of 20 .* lv\.flow") as err:
        F(q0, v0)
    assert err.value.step == 6 and abs(err.value.time - 0.9) < 1e-12 and err.value.residual > 1.0
    res = jax.jit(F._fn)(q0, v0)  # traced: no exception
    assert not bool(res.converged) and int(res.failed_step) == 6 and int(res.failure) == STEP
    assert np.all(np.isnan(np.asarray(res.q[7:]))) and np.all(np.isfinite(np.asarray(res.q[:7])))
    # the failed step is not taken again by later segments: no iterations, no residual after it
    its, resid = np.asarray(res.iterations), np.asarray(res.residual)
    assert np.all(its[7:] == 0) and np.all(np.isnan(resid[7:])) and resid[6] > 1.0 and np.all(resid[:6] <= 1e-12)
    with pytest.raises(ValueError, match="Unknown parameter 'lenght'"):
        lv.flow(problem, "VI-S", n_steps=5)(problem.q0, problem.v0, {"lenght": 1.0})


def test_a_failed_run_has_nan_gradients_with_respect_to_every_input():
    """The loss of a run with a failed step is NaN, and so is its gradient with respect to q0, v0 and
    the parameters, in reverse and forward mode, even for a loss of the nodes before the failure
    (which are finite): an optimizer that reads only gradients is not misled."""
    _, q0, v0, F = _falling_pendulum()
    w = jnp.array([1.0, 2.0, 3.0])

    def losses(q, v, L):
        res = F(q, v, {"length": L})
        return w @ res.q[-1], jnp.sum(res.q[:3])

    last, early = jax.jit(losses)(q0, v0, 1.0)
    assert np.isnan(float(last)) and np.isfinite(float(early))
    for k in (0, 1):
        g = jax.jit(jax.grad(lambda q, v, L: losses(q, v, L)[k], argnums=(0, 1, 2)))(q0, v0, 1.0)
        assert all(np.all(np.isnan(np.asarray(x))) for x in g), g
    d = jax.jit(lambda v: jax.jvp(lambda v: losses(q0, v, 1.0)[1], (v,), (v,))[1])(v0)
    assert np.isnan(float(d))


def test_vmapped_runs_fail_per_member():
    """Under vmap, converged and failed_step are per member; the failed member's gradient is NaN,
    the other's is that of its own run; F.check names the failed members; throw=True raises at
    run time inside jit."""
    problem, q0, v0, F = _falling_pendulum()
    q_ok = jnp.array([0.6, 0.0, -0.8])  # swinging below the suspension: every step converges
    qs, vs = jnp.stack([q0, q_ok]), jnp.stack([v0, v0])
    res = jax.jit(jax.vmap(F._fn))(qs, vs)
    assert np.asarray(res.converged).tolist() == [False, True]
    assert np.asarray(res.failed_step).tolist() == [6, -1]
    with pytest.raises(lv.ConvergenceError, match=r"member 0 .* 1 of 2 members failed: \[0\]"):
        F.check(res)
    loss = lambda q, v: jnp.sum(F(q, v).q[-1] * jnp.array([1.0, 2.0, 3.0]))  # noqa: E731
    g = jax.jit(jax.vmap(jax.grad(loss, argnums=1)))(qs, vs)
    assert np.all(np.isnan(np.asarray(g[0])))
    np.testing.assert_allclose(np.asarray(g[1]), np.asarray(jax.grad(loss, argnums=1)(q_ok, vs[1])), rtol=1e-12)
    Ft = lv.flow(problem, "VI-S", h=0.15, n_steps=20, throw=True)
    with pytest.raises(Exception, match=r"Newton did not converge in step 7 of 20"):
        jax.block_until_ready(jax.jit(lambda v: Ft(q0, v).q)(v0))
    np.testing.assert_allclose(np.asarray(jax.jit(lambda v: Ft(q_ok, v).q)(vs[1])), np.asarray(res.q[1]), atol=1e-13)


def test_a_failed_start_fails_the_run():
    """The start of vi-lagrange (SLO09 eq 15) that Newton cannot solve fails the run as a failed step
    does: NaN nodes after node 0, failed_step 0, a message naming the start and its residual."""
    problem = lv.examples.load("pendulum-3d")
    F = lv.flow(problem, "vi-lagrange", h=1.0, n_steps=5)
    q0, v0 = jnp.asarray(problem.q0), 10 * jnp.asarray(problem.v0)
    res = jax.jit(F._fn)(q0, v0)
    assert not bool(res.converged) and int(res.failed_step) == 0 and int(res.failure) == SCHEME_START
    assert np.all(np.isnan(np.asarray(res.q[1:]))) and float(res.residual[0]) > 1.0
    assert np.all(np.asarray(res.iterations[1:]) == 0)
    with pytest.raises(lv.ConvergenceError, match=r"start step \(SLO09 eq 15, 17\) did not converge: residual"):
        F(q0, v0)


def _peak_mib_of_a_gradient(n_steps: int) -> float:
    """Peak resident memory (VmHWM: that of the process itself; ru_maxrss would report the
    parent's size at the fork on Linux) of jax.grad through n_steps of the heavy top (EM), in a
    fresh process."""
    code = textwrap.dedent(f"""
        import jax, jax.numpy as jnp, livens as lv
        pb = lv.examples.load("heavy-top")
        F = lv.flow(pb, "EM", n_steps={n_steps})
        g = jax.grad(lambda v: jnp.sum(F(pb.q0, v).q[-1] ** 2))(jnp.asarray(pb.v0))
        assert bool(jnp.all(jnp.isfinite(g)))
        print([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1]) / 1024


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_reverse_mode_memory_for_ten_thousand_heavy_top_steps():
    """jax.grad through 10^4 steps of the heavy top (EM): peak memory < 1 GiB, and at most 128 MiB
    more than through 10^2 steps (the records of the steps and the segments' states, not the
    linearization of every step)."""
    small, large = _peak_mib_of_a_gradient(100), _peak_mib_of_a_gradient(10_000)
    print(f"peak memory: 100 steps {small:.0f} MiB, 10^4 steps {large:.0f} MiB")
    assert large < 1024 and large - small < 128, (small, large)


def test_flow_takes_t_end_as_simulate_does_and_names_its_keywords():
    problem = lv.examples.load("pendulum-3d")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    by_time = lv.flow(problem, "VI-S", h=0.01, t_end=0.2)(q0, v0)
    by_steps = lv.flow(problem, "VI-S", h=0.01, n_steps=20)(q0, v0)
    assert by_time.q.shape == (21, 3)
    np.testing.assert_array_equal(np.asarray(by_time.q), np.asarray(by_steps.q))
    with pytest.raises(
        ValueError, match="unknown keyword 'max_iters'. Did you mean 'max_iter'.*lv.flow takes h, n_steps"
    ):
        lv.flow(problem, "VI-S", h=0.01, n_steps=5, max_iters=3)
    with pytest.raises(ValueError, match="give n_steps or t_end, not both"):
        lv.flow(problem, "VI-S", h=0.01, n_steps=5, t_end=1.0)
