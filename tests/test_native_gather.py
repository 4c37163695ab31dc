"""The translator's gathers, scatters and pads on values known while translating: their element
tables come from NumPy (:func:`livens.engine.native.folding._np_gather`, ``_np_pad``), checked here against
``jax.lax``'s own semantics, clamped and out-of-bounds windows and negative padding included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from livens.engine.native import compile_function
from livens.engine.native.emitter import Unsupported
from livens.engine.native.folding import _np_gather, _np_pad

CLIP, FILL = jax.lax.GatherScatterMode.CLIP, jax.lax.GatherScatterMode.FILL_OR_DROP


def _cases():
    """(operand shape, indices, dimension numbers, slice sizes): rows, elements, windows, 3-d."""
    G = jax.lax.GatherDimensionNumbers
    yield (
        (5, 4),
        [[1], [4], [0], [7], [-2]],
        G(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,)),
        (1, 4),
    )
    yield (
        (5, 4),
        [[1, 2], [4, 3], [6, 1]],
        G(offset_dims=(), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)),
        (1, 1),
    )
    yield (6, 5), [[[1, 1]], [[4, 3]]], G(offset_dims=(2, 3), collapsed_slice_dims=(), start_index_map=(0, 1)), (2, 3)
    yield (
        (3, 4, 5),
        [[2, 1], [0, 4]],
        G(offset_dims=(1,), collapsed_slice_dims=(0, 2), start_index_map=(0, 2)),
        (1, 4, 1),
    )
    yield (7,), [[0], [3], [5], [6]], G(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,)), (2,)


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: f"{c[0]}-{len(c[1])}")
def test_np_gather_is_lax_gather(case):
    shape, indices, dn, sizes = case
    operand = np.arange(np.prod(shape), dtype=np.int64).reshape(shape) + 1
    indices = np.asarray(indices)
    np.testing.assert_array_equal(
        _np_gather(operand, indices, dn, sizes, CLIP),
        np.asarray(jax.lax.gather(operand, indices, dn, sizes, mode=CLIP)),
    )
    filled = np.asarray(jax.lax.gather(operand, indices, dn, sizes, mode=FILL, fill_value=0))
    ours = _np_gather(operand, indices, dn, sizes, FILL)
    if np.any(filled == 0):  # a window out of bounds: NumPy says None, the translator refuses or asks JAX
        assert ours is None
    else:
        np.testing.assert_array_equal(ours, filled)


def test_scatter_at_known_indices_out_of_bounds():
    """A scatter-add whose constant indices leave the operand: clipped (mode "clip") it is
    translated and agrees with XLA; dropped (the default) the translator refuses it."""
    idx = jnp.array([[0], [2], [5], [2]])

    def clipped(x, u):
        return x.at[idx[:, 0]].add(u, mode="clip")

    def dropped(x, u):
        return x.at[idx[:, 0]].add(u, mode="drop")

    x, u = jnp.arange(4.0), jnp.array([1.0, 10.0, 100.0, 1000.0])
    np.testing.assert_array_equal(compile_function(clipped, x, u)(x, u), jax.jit(clipped)(x, u))
    with pytest.raises(Unsupported, match="out of bounds"):
        compile_function(dropped, x, u)


@pytest.mark.parametrize(
    "config",
    [
        [(1, 2, 0)],
        [(0, 0, 2)],
        [(-1, 3, 1)],
        [(2, -2, 0)],
        [(-3, -1, 2)],
        [(1, 0, 0), (0, 2, 1)],
        [(-1, 1, 0), (2, -1, 3)],
        [(0, 0, 0), (0, 0, 0)],
    ],
)
def test_np_pad_is_lax_pad(config):
    shape = (4,) if len(config) == 1 else (3, 4)
    x = np.arange(1, np.prod(shape) + 1, dtype=np.int64).reshape(shape)
    np.testing.assert_array_equal(_np_pad(x, np.int64(-7), config), np.asarray(jax.lax.pad(x, np.int64(-7), config)))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_np_unstack_is_lax_unstack(axis):
    """``unstack`` (linearize and vmap write it) on known values: NumPy, the same pieces as JAX's."""
    from jax._src.lax import lax as lax_internals

    unstack_p = getattr(lax_internals, "unstack_p", None)
    if unstack_p is None:
        pytest.skip("this JAX has no unstack primitive")

    from livens.engine.native.folding import _np_move

    x = np.arange(24.0).reshape(2, 3, 4)
    got = _np_move("unstack", [x], {"axis": axis})
    want = unstack_p.bind(jnp.asarray(x), axis=axis)
    assert len(got) == len(want) == x.shape[axis]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))
