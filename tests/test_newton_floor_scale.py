"""The scale of livens' default Newton floor, ||J(x0) x0||_inf (:func:`livens.solvers.newton.relative_floor`),
comes from the tangent the first iteration solves with (:func:`livens.solvers.newton.scaled_increment`),
not from a derivative of the residual of its own: it equals that derivative (:func:`linear_terms`) to
round-off for every form of tangent that has a product, and a step that stalls at its round-off floor
converges there as it did with the derivative, at the same iterate."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import perturbed_point

import livens as lv
from livens.solvers import tangent_operator
from livens.solvers.newton import (
    linear_terms,
    linearized_increment,
    newton,
    newton_increment,
    newton_linearized,
    scaled_increment,
    tangent_product,
)

TOL, FACTOR, NOISE = 1e-14, 1e4, 1e-9


def _noisy(x):
    """A residual with its root at c = (1000, -500) and a round-off floor of about NOISE: a term of
    that size that no derivative sees (as round-off), so that Newton's residual stalls near it."""
    A = jnp.array([[1.0, 0.3], [0.2, 2.0]])
    c = jnp.array([1000.0, -500.0])
    wobble = NOISE * jnp.sin(1e15 * jax.lax.stop_gradient(x))
    return A @ (x - c) + 0.01 * (x - c) ** 2 + wobble


X0 = jnp.array([1000.1, -500.2])


class _SolveOnly:
    """A tangent that applies its inverse only (as a scheme's block elimination): no product."""

    def __init__(self, A):
        self.A_ = A

    def solve(self, rhs):
        return jnp.linalg.solve(self.A_, rhs)


def _solve_only(x):
    return _SolveOnly(jax.jacfwd(_noisy)(x))


def test_the_first_iterations_product_is_the_derivative_of_the_residual():
    _, s = jax.jit(scaled_increment(_noisy))(X0, _noisy(X0))
    reference = float(jax.jit(functools.partial(linear_terms, _noisy))(X0))
    assert abs(float(s) - reference) <= 1e-14 * reference
    # the scale is the linear terms', not the residual's: J(x0) x0 is four decades above R(x0)
    assert reference > 1e3 * float(jnp.max(jnp.abs(_noisy(X0))))
    # a tangent without a product gives none (newton then takes the derivative where a step stalls)
    _, none = scaled_increment(_noisy, _solve_only)(X0, _noisy(X0))
    assert none is None


def test_a_stalled_iteration_converges_at_the_floor_at_the_same_iterate():
    """The residual stalls near NOISE, above tol: the papers' rule fails at max_iter, the default rule
    stops there, converged, and only the scale ||J(x0) x0|| admits it (FACTOR tol (1 + ||R(x0)||) lies
    below it). The scale taken from the first tangent, from the derivative (an increment without the
    product), and from a tangent that has no product stop at the same iteration and iterate."""
    papers = jax.jit(lambda x: newton(_noisy, x, TOL, 30))(X0)
    assert not bool(papers.converged) and int(papers.iterations) == 30
    runs = {
        "product": jax.jit(lambda x: newton(_noisy, x, TOL, 30, floor_factor=FACTOR))(X0),
        "derivative": jax.jit(
            lambda x: newton(_noisy, x, TOL, 30, linear_step=newton_increment(_noisy), floor_factor=FACTOR)
        )(X0),
        "no product": jax.jit(lambda x: newton(_noisy, x, TOL, 30, tangent=_solve_only, floor_factor=FACTOR))(X0),
    }
    ref = runs["product"]
    r0 = float(jnp.max(jnp.abs(_noisy(X0))))
    assert bool(ref.converged) and TOL < float(ref.residual) < 10 * NOISE and int(ref.iterations) < 30
    assert float(ref.residual) > FACTOR * TOL * (1.0 + r0)
    for res in runs.values():
        assert bool(res.converged) and int(res.iterations) == int(ref.iterations)
        np.testing.assert_allclose(np.asarray(res.x), np.asarray(ref.x), rtol=1e-15, atol=0)


@pytest.mark.parametrize("scale", [True, False])
def test_newton_from_one_linearization_stalls_alike(scale):
    """:func:`newton_linearized` with the scale from the linearization at x0 (``scale=True``) or from
    the caller's derivative stops where :func:`newton` does."""
    ref = jax.jit(lambda x: newton(_noisy, x, TOL, 30, floor_factor=FACTOR))(X0)
    linear = None if scale else functools.partial(linear_terms, _noisy, X0)
    inc = linearized_increment(_noisy, scale=scale)
    res = jax.jit(lambda x: newton_linearized(inc, x, TOL, 30, floor_factor=FACTOR, linear=linear))(X0)
    assert bool(res.converged) and int(res.iterations) == int(ref.iterations)
    np.testing.assert_allclose(np.asarray(res.x), np.asarray(ref.x), rtol=1e-15, atol=0)


def _product_and_derivative(sch, st, h, vals, mech, x):
    d, m = mech.d, mech.m

    def R(z):
        return sch.residual(sch.unpack(z, d, m), st, h, 0.0, vals, mech)

    def both(z):
        T = tangent_operator(sch, sch.unpack(z, d, m), st, h, 0.0, vals, mech)
        return tangent_product(T, z), jax.jvp(R, (z,), (z,))[1]

    kinds = []
    jax.eval_shape(lambda z: kinds.append(type(tangent_operator(sch, sch.unpack(z, d, m), st, h, 0.0, vals, mech))), x)
    product, derivative = jax.jit(both)(x)
    return kinds[0], np.asarray(product), np.asarray(derivative)


@pytest.mark.parametrize(
    "example, scheme, kind",
    [("pendulum-3d", "ggl-galerkin", "Dense"), ("three-bar-swing", "livens-em", "LowRankUpdate")],
)
def test_the_product_of_each_form_of_tangent_is_the_derivative(example, scheme, kind):
    """The dense tangent, and the band plus low rank of livens-em on the swing (4 elements, 142
    unknowns: the band's product, :meth:`~livens.solvers.banded.BandedTangent.matvec`, with the term of
    low rank's)."""
    problem = lv.examples.load(example, **({"n_elements": 4} if example == "three-bar-swing" else {}))
    sch, vals, mech, st, x = perturbed_point(problem, scheme, problem.h, seed=5)
    got, product, derivative = _product_and_derivative(sch, st, problem.h, vals, mech, x)
    assert got.__name__ == kind
    scale = np.max(np.abs(derivative))
    assert scale > 0 and np.max(np.abs(product - derivative)) <= 1e-13 * scale


def _branches_with(jaxpr, primitive):
    """The cond equations of ``jaxpr`` (not nested deeper) one of whose branches holds ``primitive``."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            if any(e.primitive.name == primitive for b in eqn.params["branches"] for e in b.jaxpr.eqns):
                found.append(eqn)
    return found


def test_the_product_is_formed_at_the_first_iteration_only():
    """The scale is the first iteration's: the product J x sits in a branch taken only there (none at
    the iterations after it), with the same value as without the branch and the same increment."""
    r0 = _noisy(X0)
    step = scaled_increment(_noisy)
    reference = float(jax.jit(functools.partial(linear_terms, _noisy))(X0))
    dx_first, s_first = jax.jit(step)(X0, r0, jnp.bool_(True))
    dx_later, s_later = jax.jit(step)(X0, r0, jnp.bool_(False))
    dx_plain, s_plain = jax.jit(step)(X0, r0)
    assert float(s_first) == float(s_plain) and abs(float(s_first) - reference) <= 1e-14 * reference
    assert float(s_later) == 0.0
    np.testing.assert_array_equal(np.asarray(dx_first), np.asarray(dx_plain))
    np.testing.assert_array_equal(np.asarray(dx_later), np.asarray(dx_plain))
    # in Newton's loop the product is in a branch of the loop's body (before, at its top level)
    closed = jax.make_jaxpr(lambda x: newton(_noisy, x, TOL, 30, floor_factor=FACTOR))(X0)
    loops = [e for e in closed.jaxpr.eqns if e.primitive.name == "while"]
    assert len(loops) == 1 and _branches_with(loops[0].params["body_jaxpr"].jaxpr, "dot_general")
    # the linearized iteration: the scale at it = 0 only
    inc = jax.jit(linearized_increment(_noisy, scale=True), static_argnums=(3,))
    first = inc(X0, jnp.int32(0), TOL, 30, -jnp.inf, jnp.inf)
    later = inc(X0, jnp.int32(1), TOL, 30, -jnp.inf, jnp.inf)
    assert abs(float(first[4]) - reference) <= 1e-14 * reference and float(later[4]) == 0.0
    np.testing.assert_array_equal(np.asarray(first[0]), np.asarray(later[0]))
