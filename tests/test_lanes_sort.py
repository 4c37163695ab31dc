"""The stable sort of a lane kernel (livens.engine.native.member_lanes, by ranks on vectors) gives
each lane what the single member's kernel (an insertion sort) and ``jax.vmap`` of ``lax.sort``
give its member: keys with ties (stability decides), a permutation's inverse (the transposed LU
solve of a reverse pass), several operands carried, a batch axis, and a sort long enough to go lane
by lane."""

import jax
import numpy as np
import pytest

from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build, member_lanes

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)


def _sorts(k, v, w, perm, kb, vb):
    """Sorts by one integer key: ties carrying floats and integers along, a permutation's inverse
    (the sort of the transposed LU solve), along the last axis of a batch of rows."""
    ties = jax.lax.sort((k, v, w), num_keys=1, is_stable=True)
    inverse = jax.lax.sort((perm, np.arange(perm.shape[0], dtype=perm.dtype)), num_keys=1, is_stable=True)
    rows = jax.lax.sort((kb, vb), dimension=1, num_keys=1, is_stable=True)
    return (*ties, *inverse, *rows)


def _members(n, seed):
    rng = np.random.default_rng(seed)
    k = rng.integers(-3, 4, (LANES, n)).astype(np.int32)  # many ties
    v = rng.standard_normal((LANES, n))
    v[0, 0] = -0.0  # a signed zero is carried, not computed
    w = rng.integers(-100, 100, (LANES, n))
    perm = np.stack([rng.permutation(n) for _ in range(LANES)]).astype(np.int32)
    perm[1] = np.arange(n)  # one lane sorted already
    kb = rng.integers(0, 3, (LANES, 2, n))
    vb = rng.standard_normal((LANES, 2, n))
    return k, v, w, perm, kb, vb


def _check(args):
    one = jax.tree_util.tree_map(lambda a: a[0], args)
    lanes = native.compile_function(_sorts, *one, lanes=LANES)
    single = native.compile_function(_sorts, *one)
    native.wait()
    got = lanes(*args)
    want = jax.vmap(_sorts)(*args)
    for b in range(LANES):
        alone = single(*(a[b] for a in args))
        for g, s, w in zip(got, alone, want):
            np.testing.assert_array_equal(np.asarray(g)[b], np.asarray(s))
            np.testing.assert_array_equal(np.asarray(g)[b], np.asarray(w)[b])
            assert np.signbit(np.asarray(g)[b]).tolist() == np.signbit(np.asarray(s)).tolist()


def test_a_lane_sort_by_ranks_gives_each_member_its_own_stable_sort():
    _check(_members(13, 0))


def test_a_long_lane_sort_lane_by_lane_gives_the_same(monkeypatch):
    monkeypatch.setattr(member_lanes.LaneTranslator, "SORT_BY_RANKS", 4)
    _check(_members(13, 1))
