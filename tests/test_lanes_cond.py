"""A ``cond`` whose branch makes a large array (one in the kernel's scratch memory), in lane kernels:
the branch's array is the cond's result itself, not a copy of it, and every lane still has the
bits of its member's own kernel, whether the lanes take the same branch or different ones, step
after step of a scan that writes the branch's array again at every step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from livens.driver import LANES
from livens.engine import native
from livens.engine.native import build

pytestmark = pytest.mark.skipif(
    native.compiler() is None or not build.is_gcc(native.compiler()), reason="lane kernels need GCC"
)

N = 32  # an N x N array of LANES doubles per element: 64 KiB and more, kept in scratch memory


def _steps(m0, flags):
    """A scan whose step is a cond at a per-member flag: one branch makes a new N x N array, the
    other passes its operand on or scales it; the stacked rows read each step's result after the
    cond, and the carry reads it at the next step."""

    def step(m, f):
        made = jax.lax.cond(
            f > 0,
            lambda a: 0.5 * a.T + a * a - 0.25,  # a new array, made in the branch
            lambda a: a,  # the operand itself
            m,
        )
        other = jax.lax.cond(f > 1, lambda a: a * 0.75 + 1.0, lambda a: a - a.T, made)
        return other, made[0] + other[:, 1]

    return jax.lax.scan(step, m0, flags)


def test_a_large_array_made_in_a_branch_is_each_members_in_lanes():
    rng = np.random.default_rng(3)
    m0 = rng.uniform(-1.0, 1.0, (LANES, N, N))
    flags = rng.integers(0, 3, (LANES, 6))
    flags[:, 2] = 1  # every lane takes the same branches at one step
    flags[:, 4] = 0
    one = native.compile_function(_steps, m0[0], flags[0])
    lanes = native.compile_function(_steps, m0[0], flags[0], lanes=LANES)
    native.wait()
    got = lanes(m0, flags)
    assert len({tuple(f) for f in flags.tolist()}) > 1, "the members should take different branches"
    for b in range(LANES):
        want = one(m0[b], flags[b])
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_array_equal(np.asarray(g)[b], np.asarray(w))
    # and each member's values are those of the program (XLA's, to round-off: it may contract products)
    want = jax.vmap(_steps)(jnp.asarray(m0), jnp.asarray(flags))
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)
