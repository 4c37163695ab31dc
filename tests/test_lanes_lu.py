"""LU of a small square matrix in lane kernels, written out column by column
(LaneTranslator._lu_unrolled_lanes): each lane's factors, pivots and permutation must be the
single kernel's to the bit, where every lane takes the same pivot rows (whole rows swapped at
once), where the lanes pivot differently (rows swapped lane by lane), and where some lanes meet a
zero pivot; and the factors must reproduce the matrix."""

import jax
import numpy as np
import pytest
from test_lanes import _lu_in_lanes_is_each_members_lu

from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)


@pytest.mark.parametrize("n", [2, 7, 18])
def test_lu_in_lanes_written_out_is_each_members_lu(n):
    rng = np.random.default_rng(n)
    base = rng.standard_normal((n, n))
    # every lane the same pivot rows: one matrix scaled by each lane's factor, and perturbed far
    # below the gaps between the candidates of a column
    alike = base[None] * rng.uniform(0.5, 2.0, (LANES, 1, 1)) + 1e-9 * rng.standard_normal((LANES, n, n))
    differ = rng.standard_normal((LANES, n, n))
    zero = differ.copy()
    zero[1::2, :, n // 2] = 0.0  # a zero column: a zero pivot in every other lane
    zero[0] = alike[0]
    got = _lu_in_lanes_is_each_members_lu(alike, differ, zero)
    lu, _, perm = (np.asarray(x) for x in got)
    for b in (0, 1):
        L = np.tril(lu[b], -1) + np.eye(n)
        np.testing.assert_allclose(L @ np.triu(lu[b]), zero[b][perm[b]], atol=1e-12)


def test_lanes_that_pivot_alike_swap_whole_rows():
    """The written-out LU swaps whole rows where every lane's pivot row is the same (the rows of
    one member's tangent with its neighbours' values), lane by lane otherwise."""
    source = native.trace_function(jax.lax.linalg.lu, np.zeros((6, 6)), lanes=LANES).source
    assert source.count("if (!ANY(p != p0))") == 5
    assert source.count("const dv u5 = ") == 5  # the pivot row's last element, once per column 0-4
