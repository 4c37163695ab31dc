"""The derivative of a solved equation by the implicit function theorem (livens.solvers.newton.implicit):
forward and reverse mode against the closed-form derivative of small equations and against
``lax.custom_root`` (the same theorem, traced eagerly), under jit, vmap and a scan that is
differentiated after its body was traced; the caller's matrix (``jacobian=``) gives the same
derivative; and an undifferentiated trace holds no tangent solve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from livens.solvers.newton import PlainNewton, dense_tangent_solve, implicit, newton_increment


def _newton(floor_of=0.0):
    """Plain Newton with the dense AD tangent; its floor read from ``floor_of`` (a traced value the
    solve alone closes over, as the start of vi-lagrange's floor reads p0)."""
    newton = PlainNewton(floor=1e-15 * (1.0 + 0.0 * floor_of))
    return lambda f, x: newton.solve(f, x, 1e-14, 60, newton_increment(f))


def _cubic(a, b, n=0):
    """The real root of x^3 + a x - b = 0 (a > 0: one real root); ``n`` an integer the residual reads."""

    def R(x):
        return x**3 + a * x - b + 0.0 * n

    return implicit(_newton(a), R, jnp.ones((1,))).x[0]


def _cubic_derivative(a, b):
    """dx/da, dx/db from 3 x^2 dx + x da + a dx - db = 0."""
    x = _cubic(a, b)
    d = 3.0 * x**2 + a
    return -x / d, 1.0 / d


def _circle_line(r, t, jacobian=False):
    """The point x of the circle |x| = r on the line x1 = t x0 with x0 > 0: r (1, t) / sqrt(1 + t^2)."""

    def R(x):
        return jnp.stack([x[0] ** 2 + x[1] ** 2 - r**2, x[1] - t * x[0]])

    solve = _newton(r)
    if not jacobian:
        return implicit(solve, R, jnp.array([1.0, 0.0])).x
    x = solve(R, jnp.array([1.0, 0.0])).x  # the solution known: its matrix handed over
    J = jnp.array([[2.0 * x[0], 2.0 * x[1]], [-t, 1.0]])
    return implicit(lambda f, x0: solve(f, x0), R, jnp.array([1.0, 0.0]), jacobian=J).x


def _circle_line_exact(r, t):
    return r * jnp.stack([1.0, t]) / jnp.sqrt(1.0 + t**2)


def test_the_cubic_root_and_its_derivatives_are_the_closed_form():
    a, b = 1.3, 2.0
    x = float(_cubic(a, b))
    assert abs(x**3 + a * x - b) < 1e-14
    da, db = (float(v) for v in _cubic_derivative(a, b))
    for grad in (jax.grad(_cubic, (0, 1)), jax.jit(jax.grad(_cubic, (0, 1)))):
        ga, gb = (float(v) for v in grad(a, b))
        assert abs(ga - da) < 1e-12 and abs(gb - db) < 1e-12
    _, tangent = jax.jvp(_cubic, (a, b), (0.7, -0.4))
    assert abs(float(tangent) - (0.7 * da - 0.4 * db)) < 1e-12
    # central differences of the solution itself (not of the derivative rule)
    eps = 1e-6
    fd = (float(_cubic(a + eps, b)) - float(_cubic(a - eps, b))) / (2 * eps)
    assert abs(fd - da) < 1e-8


@pytest.mark.parametrize("jacobian", [False, True])
def test_the_circle_line_point_and_its_jacobian_are_the_closed_form(jacobian):
    r, t = 1.7, 0.6
    np.testing.assert_allclose(_circle_line(r, t, jacobian), _circle_line_exact(r, t), rtol=0, atol=1e-14)
    exact = jax.jacfwd(_circle_line_exact, (0, 1))(r, t)
    for jac in (jax.jacfwd, jax.jacrev):
        got = jax.jit(jac(lambda r, t: _circle_line(r, t, jacobian), (0, 1)))(r, t)
        for g, e in zip(got, exact):
            np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)


def test_the_derivatives_are_those_of_custom_root():
    """The same theorem by ``lax.custom_root`` (its tangent system solved densely)."""
    r, t = 1.7, 0.6

    def R_of(r, t):
        return lambda x: jnp.stack([x[0] ** 2 + x[1] ** 2 - r**2, x[1] - t * x[0]])

    def by_custom_root(r, t):
        solve = _newton()
        return jax.lax.custom_root(R_of(r, t), jnp.array([1.0, 0.0]), lambda f, x: solve(f, x).x, dense_tangent_solve)

    def by_implicit(r, t):
        return implicit(_newton(), R_of(r, t), jnp.array([1.0, 0.0])).x

    np.testing.assert_array_equal(by_implicit(r, t), by_custom_root(r, t))
    for jac in (jax.jacfwd, jax.jacrev):
        for g, e in zip(jac(by_implicit, (0, 1))(r, t), jac(by_custom_root, (0, 1))(r, t)):
            np.testing.assert_allclose(g, e, rtol=0, atol=1e-14)


def test_derivatives_through_a_scan_traced_before_it_is_differentiated():
    """Each step's residual reads the carry, an integer counter among it: the derivative rule,
    traced when the scan is differentiated, reads only its own arguments."""

    def run(a):
        def body(c, _):
            x, n = c
            return (_cubic(a + 0.1 * x, 2.0, n), n + 1), None

        (x, _), _ = jax.lax.scan(body, (jnp.asarray(0.0), jnp.int32(0)), None, length=3)
        return x

    a, eps = 1.3, 1e-6
    fd = (float(run(a + eps)) - float(run(a - eps))) / (2 * eps)
    assert abs(float(jax.grad(run)(a)) - fd) < 1e-8
    assert abs(float(jax.jit(jax.grad(run))(a)) - fd) < 1e-8
    _, tangent = jax.jvp(run, (a,), (1.0,))
    assert abs(float(tangent) - fd) < 1e-8


def test_derivatives_under_vmap():
    a = jnp.array([0.5, 1.3, 4.0])
    expected = np.array([float(_cubic_derivative(float(v), 2.0)[0]) for v in a])
    np.testing.assert_allclose(jax.vmap(jax.grad(_cubic), (0, None))(a, 2.0), expected, rtol=0, atol=1e-12)


def test_an_undifferentiated_trace_holds_no_tangent_solve(monkeypatch):
    """The tangent system (a ``jnp.linalg.solve``; the Newton iteration here divides) is traced only
    where something differentiates the solution: not by a plain trace, as ``lax.custom_root``
    traces it at the call."""
    calls = []
    real = jnp.linalg.solve

    def counted(a, b):
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(jnp.linalg, "solve", counted)

    def solve(f, x0):
        def body(_, x):
            return x - f(x) / (3.0 * x**2 + 1.3)

        x = jax.lax.fori_loop(0, 40, body, x0)
        return PlainNewton().solve(f, x, 1e-14, 1, lambda x, r: -r / (3.0 * x**2 + 1.3))

    def root(a):
        return implicit(solve, lambda x: x**3 + a * x - 2.0, jnp.ones((1,))).x[0]

    jax.make_jaxpr(root)(1.3)
    jax.make_jaxpr(jax.vmap(root))(jnp.array([1.3, 2.0]))
    assert not calls
    jax.make_jaxpr(jax.grad(root))(1.3)
    assert calls  # the rule's solve, once differentiated
