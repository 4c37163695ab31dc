"""Newton from one linearization per iterate (livens.solvers.newton.newton_linearized): the iterates, the
iteration count, the residual and the verdict of plain Newton (livens.solvers.newton.newton), on a
residual that holds an inner Newton solve with an implicit derivative (as the projection of the
null space method, SLO09 eq 16, which uses it)."""

import jax
import jax.numpy as jnp
import numpy as np

from livens.solvers.newton import linearized_increment, newton, newton_linearized


def _inner_solve(y):
    """The root of u^3 + u = y by a Newton loop (an inner solve, as the projection of the null
    space method), with its implicit derivative du/dy = 1 / (3 u^2 + 1)."""

    @jax.custom_jvp
    def root(y):
        return jax.lax.fori_loop(0, 60, lambda _, u: u - (u**3 + u - y) / (3 * u**2 + 1), y / 2)

    @root.defjvp
    def root_jvp(primals, tangents):
        u = root(primals[0])
        return u, tangents[0] / (3 * u**2 + 1)

    return root(y)


_ROOT = jnp.array([1.0, 2.0, 0.5])


def _coupled(x):
    u = _inner_solve(x)
    return x + 0.3 * u[::-1] ** 2 + 0.2 * jnp.sin(x[0] * x[1])


def _residual(x):
    """A nonlinear system through the inner solve, with the root (1, 2, 0.5)."""
    return _coupled(x) - _coupled(_ROOT)


def _both(x0, tol, max_iter, r0=None):
    plain = jax.jit(lambda x: newton(_residual, x, tol, max_iter, r0=None if r0 is None else _residual(x)))(x0)
    joint = jax.jit(
        lambda x: newton_linearized(
            linearized_increment(_residual), x, tol, max_iter, r0=None if r0 is None else _residual(x)
        )
    )(x0)
    return plain, joint


def test_same_iterates_count_and_verdict_as_plain_newton():
    x0 = jnp.array([1.2, 1.7, 0.3])
    for tol, max_iter, r0 in ((1e-12, 30, None), (1e-12, 30, True), (1e-3, 30, True), (1e-14, 2, None)):
        plain, joint = _both(x0, tol, max_iter, r0)
        assert int(joint.iterations) == int(plain.iterations) > 0
        assert bool(joint.converged) == bool(plain.converged)
        np.testing.assert_allclose(np.asarray(joint.x), np.asarray(plain.x), rtol=0, atol=1e-15)
        np.testing.assert_allclose(float(joint.residual), float(plain.residual), rtol=0, atol=1e-15)
    # the stopping rule itself: ||R|| <= tol at the end, and at most max_iter updates
    _, joint = _both(x0, 1e-12, 30)
    assert bool(joint.converged) and float(joint.residual) <= 1e-12
    assert float(np.max(np.abs(np.asarray(_residual(joint.x))))) == float(joint.residual)
    _, short = _both(x0, 1e-14, 2)
    assert int(short.iterations) == 2 and not bool(short.converged)


def test_a_first_guess_within_the_tolerance_costs_no_iteration():
    _, root = _both(jnp.array([1.2, 1.7, 0.3]), 1e-12, 30)
    _, again = _both(root.x, 1e-12, 30, r0=True)
    assert int(again.iterations) == 0 and bool(again.converged)
    assert np.array_equal(np.asarray(again.x), np.asarray(root.x))


def test_a_nan_residual_stops_unconverged():
    def bad(x):
        return _residual(x) + jnp.where(x[0] > 1.1, jnp.nan, 0.0)

    res = jax.jit(lambda x: newton_linearized(linearized_increment(bad), x, 1e-12, 30))(jnp.array([1.2, 1.7, 0.3]))
    assert not bool(res.converged) and int(res.iterations) == 0


def test_the_floor_rule_and_a_given_tangent_as_plain_newton():
    """With ``floor`` (the start of SLO09 eq 15 / 17 uses it: stop, converged, once the residual is below
    the floor and stopped halving), and with the tangent assembled from the linearization by the
    caller (the band of vi-lagrange's start), the iterates, count and verdict of plain Newton. The
    tangent here is 0.6 times the Jacobian, so that the residual shrinks by about 2/3 per iteration
    and never halves."""

    def scaled(x, lin):  # the caller's matrix from the linearization
        return 0.6 * jnp.stack([lin(e) for e in jnp.eye(x.shape[0], dtype=x.dtype)], axis=1)

    x0 = jnp.array([1.2, 1.7, 0.3])
    verdicts = {}
    for floor in (1e-6, 1e-9):
        plain = jax.jit(
            lambda x: newton(_residual, x, 1e-14, 40, tangent=lambda z: 0.6 * jax.jacfwd(_residual)(z), floor=floor)
        )(x0)
        joint = jax.jit(
            lambda x: newton_linearized(linearized_increment(_residual, scaled), x, 1e-14, 40, floor=floor)
        )(x0)
        assert int(joint.iterations) == int(plain.iterations) > 0
        assert bool(joint.converged) == bool(plain.converged)
        np.testing.assert_allclose(np.asarray(joint.x), np.asarray(plain.x), rtol=0, atol=1e-15)
        np.testing.assert_allclose(float(joint.residual), float(plain.residual), rtol=0, atol=1e-15)
        verdicts[floor] = (bool(joint.converged), int(joint.iterations), float(joint.residual))
    # a floor that the 40 iterations reach stops there, converged; one they do not reach: not converged
    assert verdicts[1e-6][0] and verdicts[1e-6][2] <= 1e-6 and verdicts[1e-6][1] < 40
    assert not verdicts[1e-9][0] and verdicts[1e-9][1] == 40
