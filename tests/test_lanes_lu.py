"""LU in lane kernels (livens.engine.native.lane_lu) whose members pivot alike, as the members of
an ensemble or of a vmapped gradient mostly do: each lane's factors, pivots and permutation must
be its member's LU of the single kernel, to the bit, whether every lane takes the same pivot row
(rows swapped as whole vectors), some lanes take another (rows swapped lane by lane), or some
lanes meet a zero pivot (masked updates), written out, column by column and by blocks."""

import jax
import numpy as np
import pytest
from _lu_in_place import made_here
from test_lanes import _lanes_of

from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build
from livens.engine.native.member_lanes import LaneTranslator

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)


def _bits(x):
    """The bytes of an array (-0.0 and +0.0 apart)."""
    return np.ascontiguousarray(x).view(np.uint8)


def _lu(a):
    return jax.lax.linalg.lu(a)


def _batches(m, n, seed):
    """Lanes that pivot alike (one sparse matrix, each lane's entries scaled by 1 + 1e-9 k), lanes
    that part ways (two lanes with other matrices; a lane whose first column's largest is a tie,
    the first of which it takes), lanes with zero pivots, and lanes with a NaN in a pivot column."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((m, n)) * (rng.random((m, n)) < 0.3) + np.eye(m, n) * 0.5
    alike = np.stack([base * (1.0 + 1e-9 * k) for k in range(LANES)])
    parted = alike.copy()
    parted[2] = rng.standard_normal((m, n))
    parted[5] = base[::-1]
    parted[6, :, 0] = 1.0  # ties: the first of the largest is the pivot (row 2, not 5)
    parted[6, [2, 5], 0] = -5.0
    zero = alike.copy()
    zero[1, :, 3] = 0.0
    zero[4, :, min(n, m) - 2] = 0.0
    nan = alike.copy()  # a NaN pivot candidate: on the diagonal (kept), below it (passed over)
    nan[2, 0, 0] = np.nan
    nan[5, 7, 1] = np.nan
    return alike, parted, zero, nan


@pytest.mark.parametrize("shape", [(12, 12), (18, 18), (54, 54), (41, 37), (37, 41)])
def test_lanes_that_pivot_alike_factor_as_each_member(shape):
    m, n = shape
    single = native.compile_function(_lu, np.zeros((m, n)))
    blocked = m * n * 8 * LANES > LaneTranslator.LU_BLOCKED_BYTES
    assert blocked == (m * n > 500)  # both forms of the LU are checked
    for batch in _batches(m, n, seed=m + n):
        got = _lanes_of(_lu, (batch,))
        for b in range(LANES):
            for g, s in zip(got, single(batch[b])):
                np.testing.assert_array_equal(_bits(g[b]), _bits(s))
    lu_, _, perm = (np.asarray(x) for x in got)
    k = min(m, n)
    L = np.tril(lu_[0, :, :k], -1) + np.eye(m, k)
    np.testing.assert_allclose(L @ np.triu(lu_[0, :k]), batch[0][perm[0]], atol=1e-12)


@pytest.mark.parametrize("n", [6, 54])
def test_a_matrix_made_for_its_lu_is_factored_in_place_where_nothing_reads_it_after(n):
    rng = np.random.default_rng(n)
    a = np.stack([rng.standard_normal((n, n))] * LANES) * (1.0 + 1e-9 * np.arange(LANES))[:, None, None]
    a[3] = rng.standard_normal((n, n))
    kernel = native.compile_function(made_here, a[0], lanes=LANES)
    assert kernel.source.count("memcpy(v") == 1  # d copied for its LU; b factored where it is
    single = native.compile_function(made_here, a[0])
    native.wait()
    got = kernel(a)
    for b in range(LANES):
        for g, s in zip(got, single(a[b])):
            np.testing.assert_array_equal(_bits(g[b]), _bits(s))
    np.testing.assert_array_equal(np.asarray(got[3])[0], a[0] * 2.0 + 1.0)
