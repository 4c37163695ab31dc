"""Products of rows in lane kernels (livens.engine.native.member_lanes): each lane's result must be
the single member's kernel's to the bit, where the kernel of one member leaves out the terms
whose right factor is a known zero (a product ``x * 0`` taken as zero, NaN and infinite x
included), and match NumPy's product to round-off on finite values."""

import jax.numpy as jnp
import numpy as np
import pytest

from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)


def _product(x, y):
    """x (9 x 12) times a 12 x 19 matrix of y's columns and known zeros: a product of rows
    (more than 8 right columns) whose right operand has a block of known zeros."""
    return x @ jnp.concatenate([y, jnp.zeros((12, 9))], axis=1)


def _dense(x, y):
    """The same product without known zeros in its right operand."""
    return x @ jnp.concatenate([y, y[:, :9]], axis=1)


def _members(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((LANES, 9, 12)), rng.standard_normal((LANES, 12, 10))


@pytest.mark.parametrize("fn", [_product, _dense])
def test_a_product_of_rows_in_lanes_is_each_members_single_kernel(fn):
    xs, ys = _members(4)
    xs[2, 3, 5] = np.nan  # a NaN whose terms with the known zeros the single kernel leaves out
    xs[5, 0, 1] = np.inf
    lanes = native.compile_function(fn, xs[0], ys[0], lanes=LANES)
    single = native.compile_function(fn, xs[0], ys[0])
    native.wait()
    got = np.asarray(lanes(xs, ys))
    for b in range(LANES):
        np.testing.assert_array_equal(got[b], np.asarray(single(xs[b], ys[b])))
    finite = [b for b in range(LANES) if np.all(np.isfinite(xs[b]))]
    for b in finite:
        np.testing.assert_allclose(got[b], np.asarray(fn(xs[b], ys[b])), rtol=1e-13, atol=1e-13)


def test_a_product_of_rows_in_lanes_leaves_out_the_known_zero_terms():
    xs, ys = _members(5)
    source = native.trace_function(_product, xs[0], ys[0], lanes=LANES).source
    dense = native.trace_function(_dense, xs[0], ys[0], lanes=LANES).source
    # written out term by term with the known zeros, as the single kernel leaves them out: its
    # vectors of 4 columns (0-3, 4-7, 8-11 live; 12-15 not) and the last 3 columns (dead) one
    # by one, so 12 columns of 12 terms; without known zeros, one per output element of a row,
    # in a loop over the 12 terms
    assert source.count("+= ") == 12 * 12
    assert dense.count("+= ") == 19
