"""livens.engine.ImmediateProgram: a function evaluated at a few points (the sparsity patterns of the
band and group tangents) by NumPy where its jaxpr allows, without an XLA compile, else by a
compiled program; the values agree with jax.jit's to round-off, also when called while another
function is traced."""

import jax
import jax.numpy as jnp
import numpy as np
from _compiles import backend_compiles

from livens.engine import ImmediateProgram


def _compiles(fn):
    """(fn's result, the XLA backend compiles it made)."""
    with backend_compiles() as seen:
        out = fn()
    return out, len(seen)


def _columns(x, E):
    """A Jacobian times seeds, as the band finder asks for them: vmap of a jvp."""

    def residual(z):
        return jnp.sin(z) * jnp.roll(z, 1) + z**3 - jnp.cumsum(z) * 0.5

    return jax.vmap(lambda v: jax.jvp(residual, (x,), (v,))[1], in_axes=1, out_axes=1)(E)


def test_a_jacobian_times_seeds_is_evaluated_by_numpy_without_a_compile_and_agrees_with_jit():
    rng = np.random.default_rng(3)
    x, E = rng.standard_normal(7), rng.standard_normal((7, 4))
    program = ImmediateProgram(_columns)
    out, compiles = _compiles(lambda: np.asarray(program(x, E)))
    assert compiles == 0
    exact = np.asarray(jax.jit(_columns)(x, E))
    np.testing.assert_allclose(out, exact, rtol=1e-13, atol=1e-13)


def test_inside_another_trace_the_numpy_evaluation_gives_concrete_values():
    rng = np.random.default_rng(4)
    x, E = rng.standard_normal(5), np.eye(5)
    program = ImmediateProgram(_columns)
    seen = {}

    def traced(y):
        seen["cols"] = np.asarray(program(x, E))  # concrete while y is a tracer
        return y * 2.0

    jax.make_jaxpr(traced)(jnp.ones(3))
    np.testing.assert_allclose(seen["cols"], np.asarray(jax.jit(_columns)(x, E)), rtol=1e-13, atol=1e-13)


def test_a_function_numpy_cannot_evaluate_is_compiled_and_gives_the_same_values():
    def solve(A, b):
        return jnp.linalg.solve(A, b)  # an LU: not among the NumPy interpreter's primitives

    rng = np.random.default_rng(5)
    A, b = rng.standard_normal((4, 4)) + 4 * np.eye(4), rng.standard_normal(4)
    out = np.asarray(ImmediateProgram(solve)(A, b))
    np.testing.assert_allclose(out, np.linalg.solve(A, b), rtol=1e-12)
