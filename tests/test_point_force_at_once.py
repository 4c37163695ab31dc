"""The point terms of ``ggl-spark`` and ``ggl-galerkin`` from one gradient (livens.schemes.ggl_mass.point_force).

Every trace but that of a native kernel of one member takes a point's force terms, G(q)^T gamma and
its constraints g(q), G(q) v from one gradient of V + lambda.g + gamma.G w (minus a.M w + 1/2 w.M w
for M(q)), whose forward pass gives g and G w; the native kernel keeps the separate forms (and its
bits). Checked here:

- ``point_force`` against the separate forms of livens.mechanics (G^T lambda, the Hessian-vector
  product of g, D_q T and the solves with M(q)), and against finite differences of g, at random
  points of the heavy top (constant M) and of Andrews' squeezer (M(q));
- the residuals and tangents of both schemes, traced as for XLA and as for a native kernel, agree
  to round-off away from any solution, and the XLA trace holds fewer equations (the point of it);
- ``ggl-em4``'s tangent for M(q) (one jacfwd of all the unknowns) is the Jacobian of its residual.
No timing is asserted: the benchmarks measure the first calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import assert_tangent_equals_ad, perturbed_point, residual_and_tangent

import livens as lv
from livens.driver.setup import resolve
from livens.engine.jaxprs import size
from livens.engine.native.target import native_trace
from livens.schemes import ggl_mass
from livens.solvers import Dense


def _random_point(problem, seed):
    _, _, mech = resolve(problem, "ggl-spark", {})
    rng = np.random.default_rng(seed)
    q = jnp.asarray(problem.q0) + 0.05 * rng.standard_normal(mech.d)
    lam, gam = (jnp.asarray(rng.standard_normal(mech.m)) for _ in range(2))
    w = jnp.asarray(rng.standard_normal(mech.d))
    return mech, q, lam, gam, w


@pytest.mark.parametrize("example", ["heavy-top", "andrews-squeezer"])
def test_point_force_is_the_separate_forms(example):
    mech, q, lam, gam, w = _random_point(lv.examples.load(example), 5)
    G = mech.G(q)
    if mech.constant_mass:
        f, gt, g, gw = ggl_mass.point_force(mech, q, lam, gam, w, dw=True)
        expected = mech.dV(q) + mech.GT_mul(q, lam) + mech.hess_g_vec(q, gam, w)
        np.testing.assert_allclose(gt, G.T @ gam, rtol=1e-13, atol=1e-13 * float(jnp.max(jnp.abs(gt))))
    else:
        a = ggl_mass.mass_solve(mech, q, G.T @ gam)
        f, g, gw = ggl_mass.point_force(mech, q, lam, gam, w, a=a)
        # -f is the force of the schemes' separate forms: D_q T(q, w) - D_1 g_v^T gamma - DV - G^T lambda
        kinetic = jax.grad(ggl_mass.secondary_potential(mech, gam, w, a, kinetic=w))(q)
        expected = -(kinetic - mech.dV(q) - mech.GT_mul(q, lam))
    scale = float(jnp.max(jnp.abs(expected)))
    np.testing.assert_allclose(f, expected, rtol=0, atol=1e-12 * scale)
    np.testing.assert_array_equal(g, mech.g(q))
    np.testing.assert_allclose(gw, G @ w, rtol=0, atol=1e-13 * float(jnp.max(jnp.abs(G @ w))))
    # and independently of AD: G w by central differences of g
    eps = 1e-6
    fd = (mech.g(q + eps * w) - mech.g(q - eps * w)) / (2 * eps)
    np.testing.assert_allclose(gw, fd, rtol=0, atol=1e-7 * (1.0 + float(jnp.max(jnp.abs(fd)))))


def _traced(fn, x, native: bool):
    """The jaxpr of fn at x, traced as for a native kernel of one member or as for XLA (a function of
    its own each time, so that JAX does not hand back another trace)."""
    with native_trace(native):
        return jax.make_jaxpr(lambda z: fn(z))(x)


def _value(jaxpr, x):
    """The jaxpr's value at x, compiled as one program (evaluated operation by operation, each new
    operation compiled alone, the four traces took minutes)."""
    return jax.jit(lambda z: jax.core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, z))(x)[0]


@pytest.mark.parametrize(
    "example, scheme, stages",
    [
        ("heavy-top", "ggl-spark", 3),
        ("heavy-top", "ggl-galerkin", 2),
        ("andrews-squeezer", "ggl-spark", 2),
        ("andrews-squeezer", "ggl-galerkin", 2),
    ],
)
def test_xla_and_native_traces_agree_and_xla_holds_fewer_equations(example, scheme, stages):
    problem = lv.examples.load(example)
    sch, vals, mech, st, x = perturbed_point(problem, scheme, problem.h, 7, params={"stages": stages})
    R, T = residual_and_tangent(sch, st, problem.h, 0.0, vals, mech)

    def matrix(z):
        t = T(z)
        return t.matrix() if hasattr(t, "matrix") else t

    for fn in (R, matrix):
        native, xla = _traced(fn, x, True), _traced(fn, x, False)
        assert size(xla.jaxpr) < size(native.jaxpr)
        a, b = _value(native, x), _value(xla, x)
        assert a.shape == b.shape
        assert float(jnp.max(jnp.abs(a - b))) <= 1e-12 * float(jnp.max(jnp.abs(a)))
    # the XLA form's tangent is the Jacobian of its residual
    assert_tangent_equals_ad(R, lambda z: Dense(matrix(z)), x, x.shape[0])


def test_em4_tangent_with_configuration_mass_is_the_jacobian():
    """Andrews' squeezer (52 unknowns, above block_jacobian_unknowns): one jacfwd of all the unknowns."""
    problem = lv.examples.load("andrews-squeezer")
    sch, vals, mech, st, x = perturbed_point(problem, "ggl-em4", problem.h, 11)
    assert not mech.constant_mass and x.shape[0] >= lv.engine.size_policy().block_jacobian_unknowns
    R, T = residual_and_tangent(sch, st, problem.h, 0.0, vals, mech)
    assert_tangent_equals_ad(R, T, x, x.shape[0])
