"""Triangular solves with several right-hand sides in a lane kernel
(livens.engine.native.member_lanes, each row of x held in registers) give each lane what the single
member's kernel gives its member, to the bit: lower and upper, a and its transpose, unit diagonal,
a batch of matrices, and more right-hand sides than the registers hold (the row by row form)."""

import jax
import numpy as np
import pytest
from jax.lax import linalg

from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build, member_lanes

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)


def _solves(a, b, ab, bb):
    out = []
    for lower in (True, False):
        for transpose_a in (False, True):
            for unit in (False, True):
                out.append(
                    linalg.triangular_solve(
                        a, b, left_side=True, lower=lower, transpose_a=transpose_a, unit_diagonal=unit
                    )
                )
    out.append(linalg.triangular_solve(ab, bb, left_side=True, lower=True))
    return out


def _check(cols, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((LANES, 7, 7)) + 3.0 * np.eye(7)
    a[0, 2, 1] = 0.0  # a zero multiplier (its product still subtracted)
    b = rng.standard_normal((LANES, 7, cols))
    b[1, 3, 0] = -0.0
    ab = rng.standard_normal((LANES, 2, 5, 5)) + 3.0 * np.eye(5)
    bb = rng.standard_normal((LANES, 2, 5, cols))
    args = (a, b, ab, bb)
    one = jax.tree_util.tree_map(lambda x: x[0], args)
    lanes = native.compile_function(_solves, *one, lanes=LANES)
    single = native.compile_function(_solves, *one)
    native.wait()
    got = lanes(*args)
    for m in range(LANES):
        alone = single(*(x[m] for x in args))
        for g, s in zip(got, alone):
            g, s = np.asarray(g)[m], np.asarray(s)
            np.testing.assert_array_equal(g, s)
            assert np.array_equal(np.signbit(g), np.signbit(s))
    return lanes


def test_lane_triangular_solves_with_rows_in_registers_are_the_single_kernels():
    kernel = _check(5, 0)
    assert "const dv *y" in kernel.source  # the rows in registers


def test_lane_triangular_solves_with_more_right_hand_sides_than_registers(monkeypatch):
    monkeypatch.setattr(member_lanes.LaneTranslator, "TRIANGULAR_IN_REGISTERS", 3)
    kernel = _check(5, 1)
    assert "const dv *y" not in kernel.source
