"""The whole max/min of doubles in two vectors of 4 lanes (AlgebraRules._vector_lanes, the residual
norm of every Newton iteration of a native kernel): the bits of the loop of one accumulator for a NaN
at every position (in either vector, in the scalar tail), ties of +0 and -0, infinities, and inputs
read through views (an offset, a transpose, the absolute values of elements); other types keep the
array of 8 lanes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from livens.engine import native
from livens.engine.native.algebra_rules import AlgebraRules

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _pair(monkeypatch, f, x0):
    """Native kernels of f with the reductions in lanes and in the loop of one accumulator."""
    lanes = native.compile_function(f, x0)
    with monkeypatch.context() as m:
        m.setattr(AlgebraRules, "LANE_REDUCE", 1 << 30)
        one = native.compile_function(f, x0)
    return lanes, one


def _vectors(n, rng):
    """Random vectors, one with a NaN of either sign at each position, zeros of both signs at the
    extremum, infinities."""
    base = rng.standard_normal(n)
    out = [base, -base, np.abs(base), -np.abs(base), np.zeros(n), -np.zeros(n)]
    for k in range(n):
        v = base.copy()
        v[k] = np.nan if k % 2 else -np.nan
        out.append(v)
    for k in range(0, n, 5):
        v = -np.abs(base)
        v[k], v[(k + 9) % n] = 0.0, -0.0
        out += [v, -v]
        w = base.copy()
        w[k] = np.inf if k % 2 else -np.inf
        out.append(w)
    return out


@pytest.mark.parametrize("n", [16, 23, 54, 64, 71])
@pytest.mark.parametrize("reduce", [jnp.max, jnp.min])
def test_top_vector_lanes_give_the_bits_of_one_accumulator(monkeypatch, n, reduce):
    f = lambda x: reduce(x)  # noqa: E731
    lanes, one = _pair(monkeypatch, f, np.zeros(n))
    assert "vector_size(32)" in lanes.source and "vector_size" not in one.source
    for v in _vectors(n, np.random.default_rng(n)):
        got, ref = np.asarray(lanes(v)), np.asarray(one(v))
        assert got.tobytes() == ref.tobytes(), (v, got, ref)
        np.testing.assert_array_equal(got, np.asarray(jax.jit(f)(v)))


@pytest.mark.parametrize(
    "f, shape",
    [
        (lambda x: jnp.max(jnp.abs(x)), (54,)),  # a residual's norm
        (lambda x: jnp.max(jnp.abs(x[3:60])), (64,)),  # read at an offset
        (lambda x: jnp.min(x.T), (6, 9)),  # a transpose
        (lambda x: jnp.max(jnp.abs(jnp.concatenate([x * 2.0, -x]))), (20,)),  # elements of a concatenation
    ],
)
def test_top_vector_lanes_read_views_and_elements(monkeypatch, f, shape):
    lanes, one = _pair(monkeypatch, f, np.zeros(shape))
    assert "vector_size(32)" in lanes.source
    n = int(np.prod(shape))
    for v in _vectors(n, np.random.default_rng(7 * n))[:: max(1, n // 16)]:
        v = v.reshape(shape)
        got, ref = np.asarray(lanes(v)), np.asarray(one(v))
        assert got.tobytes() == ref.tobytes(), (v, got, ref)
        np.testing.assert_array_equal(got, np.asarray(jax.jit(f)(v)))


def test_top_single_precision_keeps_the_array_of_lanes(monkeypatch):
    f = lambda x: jnp.max(x)  # noqa: E731
    x0 = np.zeros(40, np.float32)
    lanes, one = _pair(monkeypatch, f, x0)
    assert "vector_size" not in lanes.source and lanes.source != one.source
    for v in _vectors(40, np.random.default_rng(3))[::3]:
        v = v.astype(np.float32)
        got, ref = np.asarray(lanes(v)), np.asarray(one(v))
        assert got.tobytes() == ref.tobytes(), (v, got, ref)
