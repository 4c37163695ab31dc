"""A mass matrix given as a function of q that does not depend on q is treated as the constant
array (so that schemes needing M^-1 accept it); the test is structural, on the function's jaxpr."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.mechanics import constant_mass_value, mechanics

Q0 = jnp.array([1.0, 0.0, 0.0])


def _pendulum(mass_matrix):
    s = lv.System(
        mass_matrix=mass_matrix, potential=lambda q: 9.81 * q[2], constraints=lambda q: jnp.array([0.5 * (q @ q - 1.0)])
    )
    return lv.Problem(
        s, q0=[1.0, 0.0, 0.0], v0=[0.0, 1.0, 0.0], h=0.01, t_end=0.5, symmetries=[lv.Symmetry.rotation([0, 0, 1])]
    )


M2 = 2.0 * np.eye(3)


@pytest.mark.parametrize(
    "fn",
    [
        lambda q: M2,  # a NumPy constant
        lambda q: jnp.diag(jnp.full(3, 2.0)),  # built with jnp, q unused
        lambda q: 2.0 * jnp.eye(q.shape[0]),  # q's shape only (static)
        lambda q: jnp.diag(2.0 * jnp.ones_like(q)),  # ones_like(q) carries no value of q
    ],
)
def test_constant_function_of_q_is_the_constant_array(fn):
    np.testing.assert_array_equal(constant_mass_value(fn, Q0), M2)
    a = lv.simulate(_pendulum(M2), "VI-S", tol=1e-12, progress=False)
    b = lv.simulate(_pendulum(fn), "VI-S", tol=1e-12, progress=False)  # refused before: "needs M^-1"
    np.testing.assert_array_equal(b.q, a.q)
    np.testing.assert_array_equal(b.p, a.p)
    mech = mechanics(_pendulum(fn).system, Q0)
    assert mech.constant_mass and mech.Minv_const is not None


@pytest.mark.parametrize(
    "fn",
    [
        lambda q: jnp.eye(3) * (1.0 + q @ q),
        jax.jit(lambda q: jnp.eye(3) * (2.0 + q[0] ** 2)),  # q through an inner jit
        lambda q: jax.lax.cond(q[0] > 0, lambda: 2.0 * jnp.eye(3), lambda: 3.0 * jnp.eye(3)),  # through a branch
        # equal to 2 I at q0, at every point of the unit sphere, and with a zero Jacobian there: values
        # and derivatives at points of the manifold would call it constant; it is not
        lambda q: jnp.eye(3) * (2.0 + (q @ q - 1.0) ** 2),
        lambda q: jnp.eye(3) * 2.0 + 0.0 * q[0],  # conservative: q reaches M
    ],
)
def test_function_reached_by_q_stays_configuration_dependent(fn):
    assert constant_mass_value(fn, Q0) is None
    with pytest.raises(ValueError, match="needs M\\^-1, but the mass matrix of this system is configuration dependent"):
        lv.simulate(_pendulum(fn), "rattle", progress=False)


def test_livens_scheme_same_with_constant_function():
    a = lv.simulate(_pendulum(M2), "livens-em", tol=1e-12, progress=False)
    b = lv.simulate(_pendulum(lambda q: jnp.asarray(M2)), "livens-em", tol=1e-12, progress=False)
    np.testing.assert_array_equal(a.q, b.q)
