"""The reverse pass of lv.flow with VI-S runs natively: its replay's transposed step holds a
primitive without operands, which the translator's constant folder must leave to the rules (it
read the first operand of every primitive whose operands were all known, and failed on none)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import native
from livens.engine.native import folding

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def test_the_folder_leaves_a_primitive_without_operands_alone():
    assert folding._np_exact("rng_uniform", [], {}) is None
    (same,) = folding._np_exact("copy", [np.float64(-0.0)], {})
    assert np.signbit(same)


def test_the_vi_s_gradient_of_a_flow_runs_natively_and_matches_xla():
    problem = lv.examples.load("pendulum-3d")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)

    def grad_of(backend):
        F = lv.flow(problem, "VI-S", h=problem.h, n_steps=40, tol=1e-12, backend=backend)
        return jax.jit(jax.grad(lambda q, v: jnp.sum(F(q, v).q[-1] ** 2), argnums=(0, 1)))(q0, v0)

    with warnings.catch_warnings():
        warnings.simplefilter("error", lv.engine.NativeFallback)
        native_grad = grad_of("auto")
    for a, b in zip(native_grad, grad_of("xla")):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
