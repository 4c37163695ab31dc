"""The multipliers' solve of a tangent by groups (livens.solvers.groups.GroupStructure.multiplier_solver)
eliminates each group's private multipliers in batches of the groups with as many of them and as many
shared ones, unpadded, and is the dense solve of the same 2m x 2m matrix.

- A known pattern of three groups with four, two and no private multipliers makes three batches of
  their own sizes; the solve equals ``np.linalg.solve`` of the matrix summed from random blocks.
- The chain of six 3D rods (EM's tangent by bodies): the rod held at the ground has eighteen private
  multipliers (its orthonormality conditions and the ground joint, each with lambda and gamma), the
  five others twelve; the first and the last rod have six shared ones (one joint), the four between
  twelve: three batches. The shared multipliers of the five joints between rods make the largest
  block, thirty, which the engine is told. Its solve equals ``np.linalg.solve`` to round-off.
"""

import jax
import jax.numpy as jnp
import numpy as np
from _tangents import perturbed_point, residual_and_tangent

import livens as lv
from livens.engine.options import reported_blocks
from livens.schemes import get as get_scheme
from livens.solvers import groups


def _uneven_pattern():
    """Three groups of two coordinates: the first with two constraints of its own (one as if to the
    ground), the second with one, the third with none; a joint between neighbours."""
    d, m = 6, 5
    D = np.zeros((d, d), bool)
    for g in range(3):
        D[2 * g : 2 * g + 2, 2 * g : 2 * g + 2] = True
    P = np.zeros((m, d), bool)
    P[0, 0:2] = P[1, 0] = P[2, 2:4] = True
    P[3, [1, 2]] = True
    P[4, [3, 4]] = True
    return D, P


def _assert_dense_solve(gs, seed):
    """The solve of random blocks (made well conditioned) against np.linalg.solve of their sum; also
    for one right-hand side."""
    rng = np.random.default_rng(seed)
    n = 2 * gs.r
    Wg = rng.standard_normal((gs.ng, n, n)) + 3.0 * np.eye(n)
    W = np.asarray(gs.scatter_add_ll(jnp.asarray(Wg)))
    y = rng.standard_normal((2 * gs.m, 3))
    with reported_blocks() as blocks:
        x = np.asarray(jax.jit(lambda Wg, y: gs.multiplier_solver(Wg)(y))(jnp.asarray(Wg), jnp.asarray(y)))
    assert blocks == [gs.largest_block]
    exact = np.linalg.solve(W, y)
    cond = np.linalg.cond(W)
    assert cond < 1e4
    assert np.max(np.abs(x - exact)) <= 1e-12 * np.max(np.abs(exact))
    assert np.max(np.abs(W @ x - y)) <= 1e-13 * np.max(np.abs(W)) * np.max(np.abs(x))
    x1 = np.asarray(jax.jit(lambda Wg, y: gs.multiplier_solver(Wg)(y))(jnp.asarray(Wg), jnp.asarray(y[:, 0])))
    np.testing.assert_allclose(x1, x[:, 0], rtol=0, atol=1e-13 * np.max(np.abs(exact)))


def test_groups_of_different_numbers_of_private_multipliers_make_batches_of_their_own_sizes():
    D, P = _uneven_pattern()
    gs = groups.GroupStructure(D, P)
    assert gs.ng == 3 and gs.s == 2 and gs.useful
    sizes = [(b.groups.tolist(), b.lp.shape[1], b.ls.shape[1]) for b in gs.batches]
    assert sizes == [([0], 4, 2), ([1], 2, 4), ([2], 0, 2)]
    assert (gs.p, gs.ns) == (4, 4)  # the two joints' lambda and gamma are shared
    # every multiplier once: shared first, then the batches' private ones
    assert sorted(gs.order.tolist()) == list(range(2 * gs.m))
    for b in gs.batches:
        assert b.lrows.shape == b.lp.shape and np.all(b.lrows < 2 * gs.m)
    _assert_dense_solve(gs, 11)


def test_the_six_rod_chain_batches_the_ground_rod_alone_and_solves_as_the_dense_lu():
    EM = get_scheme("EM")[0]
    sch, vals, mech, st, x = perturbed_point(lv.examples.load("chain-3d", n_bodies=6), EM, 0.005, 4)
    T = residual_and_tangent(sch, st, 0.005, 0.0, vals, mech)[1]
    made = []
    jax.eval_shape(lambda x: made.append(T(x)) or x, x)
    gs = made[0].gs
    assert (mech.d, mech.m, gs.ng, gs.s) == (72, 54, 6, 12)
    sizes = [(b.groups.tolist(), b.lp.shape[1], b.ls.shape[1]) for b in gs.batches]
    # rod 0: 6 orthonormality conditions and the ground joint's 3, rods 1-5: their 6 conditions;
    # shared: the joints S1..S5 (3 each), rod 0 and rod 5 in one (6 multipliers), the others in two
    assert sizes == [([0], 18, 6), ([1, 2, 3, 4], 12, 12), ([5], 12, 6)]
    assert gs.ns == 30 and gs.largest_block == 30
    _assert_dense_solve(gs, 12)
