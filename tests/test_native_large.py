"""Native kernels of systems of a few hundred Newton unknowns (livens.engine.native).

- A matrix product is written as row updates (the innermost loop along a row of the output, which
  the C compiler vectorizes); each element is the same sum in the same order as before: the
  products of every form that ``dot_general`` takes equal XLA's to round-off.
- chain-3d with two rods (108 Newton unknowns per EM step, past ``EngineOptions.max_native_unknowns``,
  so natively only on request) runs natively with XLA's Newton iterations and states to round-off.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import native

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

RNG = np.random.default_rng(11)


def _normal(*shape):
    return jnp.asarray(RNG.standard_normal(shape))


PRODUCTS = {
    "matrix": (lambda a, b: a @ b, (_normal(9, 12), _normal(12, 10))),
    "transposed operands": (lambda a, b: a.T @ b.T, (_normal(12, 9), _normal(10, 12))),
    "of a computed operand": (lambda a, b: jnp.tanh(a) @ b, (_normal(9, 12), _normal(12, 10))),
    "batched": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (_normal(3, 9, 12), _normal(3, 12, 11))),
    "batched, transposed out": (lambda a, b: jnp.einsum("bij,bjk->ikb", a, b), (_normal(3, 9, 12), _normal(3, 12, 11))),
    "two contraction axes": (lambda a, b: jnp.einsum("ijk,jklm->ilm", a, b), (_normal(4, 5, 6), _normal(5, 6, 3, 4))),
    "vmapped matrix-vector": (jax.vmap(lambda a, x: a @ x, (None, 0)), (_normal(9, 12), _normal(10, 12))),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_matrix_products_as_row_updates_equal_xla(name):
    f, args = PRODUCTS[name]
    k = native.compile_function(f, *args)
    want, got = np.asarray(jax.jit(f)(*args)), np.asarray(k(*args))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14 * np.abs(want).max())
    assert " += a" in k.source  # the row update (AlgebraRules._row_dot), not one accumulator per element


def test_matrix_products_as_row_updates_in_lane_kernels():
    """The same rule in a kernel of eight members at once (each element a vector of the members,
    :mod:`livens.engine.native.member_lanes`): each member's product equals XLA's."""
    f = lambda a, b: jnp.tanh(a) @ b.T  # noqa: E731
    a, b = _normal(8, 9, 12), _normal(8, 10, 12)
    k = native.compile_function(f, a[0], b[0], lanes=8)
    got, want = np.asarray(k(a, b)), np.asarray(jax.vmap(f)(a, b))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14 * np.abs(want).max())
    assert " += a" in k.source


def test_two_rods_run_natively_on_request_as_with_xla():
    """chain-3d, N = 2: d = 24, m = 18, 108 Newton unknowns per EM step, whose Newton matrix's
    blocks (24 x 24, 18 x 24, ...) are products of the row form."""
    problem = lv.examples.load("chain-3d", n_bodies=2, t_end=0.05)
    runs = {b: lv.simulate(problem, "EM", tol=1e-12, progress=False, backend=b) for b in ("native", "xla")}
    assert runs["native"].meta["backend"] == "native" and runs["xla"].meta["backend"] == "xla"
    np.testing.assert_array_equal(runs["native"].newton_iterations, runs["xla"].newton_iterations)
    assert np.abs(runs["native"].q - runs["xla"].q).max() <= 1e-12
    assert np.abs(runs["native"].v - runs["xla"].v).max() <= 1e-10
