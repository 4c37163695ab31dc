"""The NumPy interpreter of jaxprs that a Problem's checks use (:mod:`livens.numpy_jaxpr`): it gives
what XLA gives (to round-off) for the primitives of model functions and their derivatives, for the
papers' example systems, and refuses what it does not know, so that the caller compiles instead."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.mechanics import mechanics
from livens.numpy_jaxpr import NumpyFunction, PointFunction, Unsupported, evaluate
from livens.validation import point_function


def _primitives(fn, *args) -> set[str]:
    names: set[str] = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for p in eqn.params.values():
                for sub in p if isinstance(p, (tuple, list)) else (p,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def _compare(fn, *args, rtol=1e-13):
    want = jax.tree_util.tree_map(np.asarray, jax.jit(fn)(*args))
    got = evaluate(fn, *args)
    for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-14)


def _indexing(q):
    idx = np.array([2, 0, 3])
    a = q[idx] * q[1:4] + q[::2].sum()  # gather, slice with a stride
    b = jnp.zeros(6).at[np.array([1, 1, 4])].add(q[:3])  # scatter-add with a repeated index
    c = jnp.zeros(5).at[2].set(q[0])  # scatter
    d = jax.lax.dynamic_slice(q, (jnp.int32(2),), (3,))
    e = jnp.pad(q[:2], (1, 2), constant_values=0.5)
    m = jnp.outer(q[:3], q[2:5])[np.array([0, 2])][:, np.array([1, 2])]  # gathers of a matrix
    return jnp.concatenate([a, b, c, d, e, m.ravel()])


def _elementwise(q):
    x = q[:4]
    return jnp.stack(
        [
            jnp.sum(jnp.sin(x) * jnp.cos(x) + jnp.tan(x) + jnp.exp(-x) + jnp.log1p(x * x)),
            jnp.sum(jnp.sqrt(x * x + 1.0) + jax.lax.rsqrt(x * x + 2.0) + jnp.arctan2(x, 1.5) + jnp.tanh(x)),
            jnp.sum(x**-3 + x**5 + jnp.abs(x) ** 2.5 + jnp.cbrt(x)),
            jnp.sum(jnp.where(x > 0.5, x, -x) + jax.lax.clamp(-0.2, x, 0.4) + jnp.round(2.5 * x) + jnp.fmod(x, 0.3)),
            jnp.max(x) + jnp.min(x) + jnp.prod(x) + jnp.argmax(x) + jnp.cumsum(x)[-2] + jnp.sort(x)[1],
            jnp.linalg.norm(x) + jnp.mean(jnp.outer(x, x) @ x) + jnp.sum(jax.lax.stop_gradient(x) * x),
        ]
    )


def _control_flow(q):
    def body(carry, x):
        return carry * 0.9 + x, carry * x

    carry, ys = jax.lax.scan(body, q[0], q[1:5])
    w = jax.lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 1.1 + q[1]), (0, q[2]))[1]
    c = jax.lax.cond(q[3] > 0.0, lambda x: jnp.sin(x), lambda x: jnp.cos(x), q[4])
    return jnp.concatenate([ys, jnp.stack([carry, w, c])])


@pytest.mark.parametrize("fn, reverse", [(_indexing, True), (_elementwise, True), (_control_flow, False)])
def test_the_values_and_their_derivatives_are_xlas(fn, reverse):
    """Each function, its Jacobian by forward and (where JAX has it: not through a while loop) by
    reverse AD (gathers transposed to scatters, slices to pads), evaluated by NumPy, agrees with the
    compiled program to round-off."""
    q = np.array([0.7, -0.3, 1.2, 0.4, 0.9, -1.1])
    _compare(fn, q)
    _compare(jax.jacfwd(fn), q)
    if reverse:
        _compare(jax.jacrev(fn), q)


def test_the_tests_meet_the_primitives_they_are_meant_to():
    """The functions above hold the primitives whose rules they test (a change of how jnp writes an
    index would otherwise leave a rule untested)."""
    q = np.linspace(0.1, 0.6, 6)
    names = _primitives(_indexing, q) | _primitives(jax.jacrev(_indexing), q) | _primitives(_control_flow, q)
    names |= _primitives(_elementwise, q)
    want = {"gather", "scatter-add", "scatter", "dynamic_slice", "pad", "dot_general", "scan", "while", "cond"}
    want |= {"integer_pow", "pow", "cumsum", "sort", "argmax", "rem", "round", "clamp", "select_n", "stop_gradient"}
    assert want <= names, want - names


@pytest.mark.parametrize("name", ["heavy-top", "four-bar-3d", "andrews-squeezer", "spring-pendulum-spherical"])
def test_the_papers_point_values_are_xlas(name):
    """V, dV, g and G of example systems (rigid bodies with directors, an overconstrained linkage, a
    closed loop with trigonometric constraints, a configuration-dependent M) at q0 and near it: NumPy
    gives the compiled program's values to round-off."""
    problem = lv.examples.load(name)
    mech = mechanics(problem.system, problem.q0)
    rng = np.random.default_rng(3)
    for q in (problem.q0, problem.q0 + 0.05 * rng.standard_normal(problem.d)):
        _compare(point_function(mech), np.asarray(q))
        _compare(mech.M, np.asarray(q))


def test_an_unknown_primitive_is_refused_and_the_point_function_compiles():
    """A Cholesky factorization is not in the table: NumpyFunction refuses it when made, and
    PointFunction evaluates the function by a compiled program instead, with XLA's value."""

    def fn(q):
        return jnp.linalg.cholesky(jnp.outer(q, q) + jnp.eye(q.shape[0]))

    q = np.array([0.3, 0.1, -0.2])
    with pytest.raises(Unsupported, match="cholesky"):
        NumpyFunction(fn, q)
    point = PointFunction(fn, q)
    assert point.compiles
    np.testing.assert_array_equal(point(q), np.asarray(jax.jit(fn)(q)))


def test_a_point_function_refuses_nothing_it_traced_and_an_other_shape_compiles():
    """PointFunction evaluates by NumPy at the traced shape; an argument of another shape goes to the
    compiled program (which retraces), with the same value."""
    point = PointFunction(lambda q: jnp.sin(q) * q[0], np.zeros(3))
    assert not point.compiles
    np.testing.assert_allclose(point(np.array([0.2, 0.4, 0.6])), np.sin([0.2, 0.4, 0.6]) * 0.2, rtol=1e-15)
    np.testing.assert_allclose(point(np.array([0.2, 0.4])), np.sin([0.2, 0.4]) * 0.2, rtol=1e-15)
    assert point.compiles


def test_a_placement_of_values_is_evaluated_as_the_values():
    """``jax.device_put`` inside a function (JAX 0.7 also writes one for ``jnp.asarray`` of a NumPy
    constant) is a primitive of its jaxpr that places values: evaluated as the values themselves."""

    def fn(x):
        return jax.device_put(x) * 2.0 + jax.device_put(np.arange(3.0))

    x = np.array([1.0, -2.0, 0.5])
    assert "device_put" in {e.primitive.name for e in jax.make_jaxpr(fn)(x).jaxpr.eqns}
    np.testing.assert_array_equal(evaluate(fn, x), np.asarray(jax.jit(fn)(x)))
