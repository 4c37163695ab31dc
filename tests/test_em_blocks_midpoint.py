"""EM's tangent by groups where its force is the midpoint gradient (livens.schemes.ggl_em_blocks), and
the native translation's products whose every term has a known zero factor.

- Where EM's force is the discrete gradient of the potential plus the midpoint gradient of
  phi = lambda.g + gamma.G(.) w with g at most quadratic (KBS23b eq 99), the blocks F_q and F_w of
  the tangent by groups are taken from the midpoint's one linearization of g (F_w = Hm, F_q =
  dP/ddq + 1/2 sum_k lambda_k D^2 g_k) instead of a product with the whole force per colour: they
  equal the blocks of the force's own derivatives to round-off, on the chain of four rods; with g
  taken as only equivariant (the force corrected for the symmetry) the general form stays.
- A ``dot_general`` of any size whose every term has a known zero factor is a known zero (no code),
  which the operations after it fold (the force's derivative with its multipliers set to known
  zeros leaves only the potential's); its values are XLA's. A product by a table of its live terms
  skips the outputs without one, and a loop nest over a contraction of three indices is unrolled:
  each the same sums in the same order as before, bit for bit.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import perturbed_point, residual_and_tangent

import livens as lv
from livens.engine import native
from livens.schemes import get as get_scheme
from livens.schemes import ggl_em_blocks

EM = get_scheme("EM")[0]


def _blocks(T, x):
    """The group blocks of the tangent T(x) (an EMBlockTangent), as NumPy arrays."""
    return {k: np.asarray(v) for k, v in jax.jit(lambda x: T(x).blocks)(x).items()}


def test_midpoint_blocks_equal_the_force_derivatives(monkeypatch):
    sch, vals, mech, st, x = perturbed_point(lv.examples.load("chain-3d", n_bodies=4), EM, 0.01, 11, velocity=True)
    assert ggl_em_blocks.midpoint_force(mech)
    R, T = residual_and_tangent(sch, st, 0.01, 0.3, vals, mech)
    short = _blocks(T, x)
    monkeypatch.setattr(ggl_em_blocks, "midpoint_force", lambda mech: False)
    general = _blocks(T, x)
    assert set(short) == set(general)
    for name in short:
        scale = max(1.0, float(np.max(np.abs(general[name]))))
        np.testing.assert_allclose(short[name], general[name], rtol=0, atol=1e-14 * scale, err_msg=name)
    # F_w is Hm itself, and F_q holds the constraints' second derivatives weighted by lambda
    np.testing.assert_array_equal(short["Fw"], short["Hm"])
    assert np.max(np.abs(short["Fq"])) > 0.0


def test_the_corrected_force_keeps_the_general_blocks():
    sch, vals, mech, st, x = perturbed_point(lv.examples.load("chain-3d", n_bodies=4), EM, 0.01, 3)
    assert ggl_em_blocks.midpoint_force(mech)
    mech = dataclasses.replace(mech, invariant_constraints=False)  # g only equivariant: the corrected gradient
    assert not ggl_em_blocks.midpoint_force(mech)


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
def test_a_product_of_known_zero_terms_is_a_known_zero():
    def f(x, y):
        a = jnp.zeros((40, 30)).at[:, 10:].set(1.5)  # known: zeros against x's rows 0..9
        return a[:, :10] @ x[:10] * 2.0 + jnp.tanh(y), a @ x

    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((30, 40)), rng.standard_normal((40, 40))
    kernel = native.compile_function(f, x, y)
    got, want = kernel(x, y), jax.jit(f)(x, y)
    # the first product (1600 outputs, past the translator's element-wise size) is a known zero: its
    # sum with tanh(y) is tanh(y) itself, and only the second product is summed at run time
    body = kernel.source[kernel.source.index("livens_kernel_body(") :]
    assert body.count("+=") == 1 and "tanh(" in body
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=0, atol=1e-13 * np.abs(want[1]).max())
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-15)


def _colour_product(x):
    """x (20, 3, 3) times a seed of colours (3 x 12, one 1 per row): 720 outputs, three quarters
    of them without a live term."""
    seed = jnp.zeros((3, 12)).at[jnp.arange(3), jnp.array([0, 4, 8])].set(1.0)
    return x @ seed + 0.0 * x[:, :, :1]


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
def test_a_table_product_skips_its_outputs_without_terms(monkeypatch):
    from livens.engine.native.algebra_rules import AlgebraRules

    x = np.random.default_rng(4).standard_normal((20, 3, 3))
    x.flat[::7] = -0.0
    x[3, 1, 2], x[5, 0, 0] = np.nan, np.inf
    fast = native.compile_function(_colour_product, x)
    monkeypatch.setattr(AlgebraRules, "TABLE_EMPTY_SHARE", 2.0)  # never: every output in the loop
    slow = native.compile_function(_colour_product, x)
    assert "memset(" in fast.source and "memset(" not in slow.source
    got, ref = np.asarray(fast(x)), np.asarray(slow(x))
    assert got.tobytes() == ref.tobytes()
    x = np.where(np.isfinite(x), x, 1.0)  # XLA multiplies NaN and infinities by the seed's zeros
    np.testing.assert_array_equal(np.asarray(fast(x)), np.asarray(jax.jit(_colour_product)(x)))
    lanes = native.compile_function(_colour_product, x, lanes=8)
    xs = np.stack([x * (k + 1) for k in range(8)])
    for k in range(8):
        np.testing.assert_array_equal(np.asarray(lanes(xs)[k]), np.asarray(jax.jit(_colour_product)(xs[k])))


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
def test_a_short_contraction_unrolled_is_the_loop_bit_for_bit(monkeypatch):
    from livens.engine.native.algebra_rules import AlgebraRules

    def gram(D):  # the Gram matrices of six frames of 3-vectors (the rods' orthonormality conditions)
        return jnp.einsum("bik,bjk->bij", D, D)

    D = np.random.default_rng(6).standard_normal((6, 3, 3))
    D[2, 1] = -0.0
    D[4, 0, 1] = np.nan
    fast = native.compile_function(gram, D)
    monkeypatch.setattr(AlgebraRules, "UNROLL_CONTRACTION", 0)
    slow = native.compile_function(gram, D)
    assert "#pragma GCC unroll 3" in fast.source and "#pragma GCC unroll 3" not in slow.source
    assert np.asarray(fast(D)).tobytes() == np.asarray(slow(D)).tobytes()
    D = np.where(np.isfinite(D), D, 0.5)
    np.testing.assert_allclose(np.asarray(fast(D)), np.asarray(jax.jit(gram)(D)), rtol=0, atol=1e-15 * 9)
