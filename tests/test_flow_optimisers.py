"""lv.flow inside optimisers: a catchable throw, failed members masked, traced parameters that break
a symmetry.

Checked: with throw=True a failed run raises lv.ConvergenceError (its step, time and residual) from
jax.grad and jax.vmap at once and from a jax.jit-compiled function through lv.raising, with nothing
on stderr; with on_failure="hold" a failed member of a vmapped loss masked by jnp.where(converged,
loss, 0) leaves the gradients of the others equal to those computed without it (the default NaN
policy does not); a tilt of gravity, traced, runs EM and livens-em without the rotation it breaks,
with the pendulum's energy (computed here) kept to round-off and a gradient equal to central
differences, while a parameter that keeps the rotation (the gravity's size) keeps it.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv

W = jnp.array([1.0, 2.0, 3.0])


def _falling_pendulum(**kw):
    """The pendulum released just off the top: with VI-S at h = 0.15 Newton fails in step 7; from
    Q_OK (below the suspension) every step converges."""
    problem = lv.examples.load("pendulum-3d")
    q0 = jnp.array([np.sin(0.05), 0.0, np.cos(0.05)])
    return problem, q0, jnp.array([0.0, 0.5, 0.0]), lv.flow(problem, "VI-S", h=0.15, n_steps=20, **kw)


Q_OK = jnp.array([0.6, 0.0, -0.8])


def test_throw_is_a_convergence_error_under_jit_and_grad(capfd):
    _, q0, v0, F = _falling_pendulum(throw=True)
    run = lv.raising(jax.jit(lambda v: F(q0, v).q))
    with pytest.raises(lv.ConvergenceError, match=r"Newton did not converge in step 7 of 20") as err:
        run(v0)
    assert err.value.step == 6 and abs(err.value.time - 0.9) < 1e-12 and err.value.residual > 1.0
    assert err.value.__cause__ is None
    with pytest.raises(lv.ConvergenceError, match=r"step 7 of 20"):  # jax.grad runs the flow at once
        jax.grad(lambda v: F(q0, v).q[-1] @ W)(v0)
    with pytest.raises(lv.ConvergenceError, match=r"step 7 of 20"):
        lv.raising(jax.jit(jax.grad(lambda v: F(q0, v).q[-1] @ W)))(v0)
    with pytest.raises(lv.ConvergenceError, match=r"step 7 of 20"):  # jax.vmap too: the failed member
        jax.vmap(lambda q: F(q, v0).q)(jnp.stack([Q_OK, q0]))
    # without lv.raising, jax.jit raises JAX's runtime error, which carries the message
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"ConvergenceError: Newton did not converge in step 7"):
        jax.block_until_ready(jax.jit(lambda v: F(q0, v).q)(v0))
    assert "Traceback" not in capfd.readouterr().err  # JAX's log of the callback's error is left out
    ok = lv.raising(jax.jit(lambda v: F(Q_OK, v).q))(v0)  # a converged run passes unchanged
    np.testing.assert_array_equal(np.asarray(ok), np.asarray(jax.jit(lambda v: F(Q_OK, v).q)(v0)))


def _member(F):
    def member(q, v, L):
        r = F(q, v, {"length": L})
        return jnp.where(r.converged, W @ r.q[-1] + 0.5 * jnp.sum(r.p[-1] ** 2), 0.0)

    return member


def test_failed_members_are_masked_with_finite_gradients_for_the_others():
    """Three members: the first fails in step 7, the third starts from a NaN velocity (an optimiser's
    NaN: its run's linearization is NaN). With on_failure="hold" the first one's nodes after the
    failure hold node 6 (that of the default run), every output is finite, and the masked loss's
    gradient with respect to the shared rod length and to each member's v0 is that of the second
    member alone (zero for the failed members' v0), in reverse and forward mode; the default policy
    makes the shared gradient NaN."""
    problem, q0, v0, F = _falling_pendulum(on_failure="hold")
    qs, vs = jnp.stack([q0, Q_OK, Q_OK]), jnp.stack([v0, v0, jnp.array([jnp.nan, 0.5, 0.0])])
    res = jax.jit(jax.vmap(lambda q, v: F(q, v)))(qs, vs)
    assert np.asarray(res.converged).tolist() == [False, True, False] and int(res.failed_step[0]) == 6
    nan_run = jax.jit(lv.flow(problem, "VI-S", h=0.15, n_steps=20)._fn)(q0, v0)
    assert all(np.all(np.isfinite(np.asarray(a))) for a in (res.q, res.p, res.lam))
    np.testing.assert_array_equal(np.asarray(res.q[0, :7]), np.asarray(nan_run.q[:7]))
    np.testing.assert_array_equal(np.asarray(res.q[0, 7:]), np.broadcast_to(np.asarray(nan_run.q[6]), (14, 3)))

    member = _member(F)

    def total(L, vs):
        return jnp.sum(jax.vmap(member, in_axes=(0, 0, None))(qs, vs, L))

    g_L, g_v = jax.jit(jax.grad(total, argnums=(0, 1)))(1.0, vs)
    alone_L, alone_v = jax.jit(jax.grad(member, argnums=(2, 1)))(Q_OK, v0, 1.0)
    assert np.isfinite(float(g_L)) and float(alone_L) != 0.0
    np.testing.assert_allclose(float(g_L), float(alone_L), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(g_v[0::2]), np.zeros((2, 3)))
    np.testing.assert_allclose(np.asarray(g_v[1]), np.asarray(alone_v), rtol=1e-12)
    d = jax.jit(lambda L: jax.jvp(lambda L: total(L, vs), (L,), (1.0,))[1])(1.0)
    np.testing.assert_allclose(float(d), float(alone_L), rtol=1e-12)

    _, _, _, F_nan = _falling_pendulum()
    member_nan = _member(F_nan)
    g_nan = jax.jit(jax.grad(lambda L: jnp.sum(jax.vmap(member_nan, in_axes=(0, 0, None))(qs, vs, L))))(1.0)
    assert np.isnan(float(g_nan))  # the default: a failed member makes every derivative NaN


def test_on_failure_is_checked():
    problem = lv.examples.load("pendulum-3d")
    with pytest.raises(ValueError, match=r"on_failure must be one of 'nan', 'hold'; got 'mask'"):
        lv.flow(problem, "VI-S", n_steps=5, on_failure="mask")
    assert lv.flow(problem, "VI-S", n_steps=5, on_failure="hold").hold


def _tilted_pendulum():
    """The 3D pendulum (unit mass and rod) under gravity 9.81 tilted by ``tilt`` from -e3 towards
    e1: the rotation about e3 (J3) is a symmetry only for tilt = 0."""
    system = lv.System(
        mass_matrix=np.eye(3),
        potential=lambda q, par: 9.81 * (jnp.cos(par["tilt"]) * q[2] + jnp.sin(par["tilt"]) * q[0]),
        constraints=lambda q, par: jnp.array([0.5 * (q @ q - 1.0)]),
        parameters={"tilt": 0.0},
    )
    symmetries = [lv.Symmetry.rotation([0, 0, 1], blocks=1, name="J3")]
    return lv.Problem(system, q0=[0.0, 0.6, -0.8], v0=[1.0, 0.0, 0.0], symmetries=symmetries)


@pytest.mark.parametrize("scheme", ["EM", "livens-em"])
def test_a_traced_tilt_of_gravity_runs_without_the_symmetry_it_breaks(scheme):
    problem = _tilted_pendulum()
    F = lv.flow(problem, scheme, h=0.02, n_steps=50, tol=1e-13)

    def loss(t):
        return F(problem.q0, problem.v0, {"tilt": t}).q[-1] @ W

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = jax.jit(lambda t: F(problem.q0, problem.v0, {"tilt": t}))(0.3)
        g = float(jax.jit(jax.grad(loss))(0.3))
    notices = [w for w in caught if issubclass(w.category, lv.TracedSymmetryNotice)]
    assert len(notices) == 1 and "drops 'J3'" in str(notices[0].message)
    assert F.kept_symmetries() == ("J3",) and F.kept_symmetries(traced=("tilt",)) == ()
    assert bool(res.converged)
    q, p = np.asarray(res.q), np.asarray(res.p)
    energy = 0.5 * np.sum(p**2, axis=1) + 9.81 * (np.cos(0.3) * q[:, 2] + np.sin(0.3) * q[:, 0])
    assert np.max(np.abs(energy - energy[0])) < 1e-11  # kept by the scheme without J3 imposed
    J3 = q[:, 0] * p[:, 1] - q[:, 1] * p[:, 0]
    assert np.max(np.abs(J3 - J3[0])) > 1e-3  # the tilt's torque changes it
    eps = 1e-6
    fd = (float(loss(0.3 + eps)) - float(loss(0.3 - eps))) / (2 * eps)
    assert np.isfinite(g) and abs(g) > 1e-3
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_a_traced_parameter_that_keeps_a_symmetry_keeps_it():
    """The gravity's size does not break the rotation about e3: traced, J3 is kept (and conserved)."""
    problem = lv.examples.load("pendulum-3d")
    F = lv.flow(problem, "EM", h=0.02, n_steps=50, tol=1e-13)
    res = jax.jit(lambda g: F(problem.q0, problem.v0, {"gravity": g}))(5.0)
    assert F.kept_symmetries(traced=("gravity",)) == ("J3",)
    q, p = np.asarray(res.q), np.asarray(res.p)
    J3 = q[:, 0] * p[:, 1] - q[:, 1] * p[:, 0]
    assert bool(res.converged) and np.max(np.abs(J3 - J3[0])) < 1e-12
