"""EM's Newton tangent by groups of coordinates (livens.schemes.ggl_em_blocks, livens.solvers.groups)
changes only the cost.

- The groups, colours and index tables of a known pattern take every entry out of the compressed
  Jacobians; the two-level solve of the multipliers' matrix (private multipliers group by group, then
  the shared ones) is the dense solve.
- The tangent by groups, with the discrete gradient's coupling values as a low-rank term, equals
  ``jax.jacfwd`` of the EM residual (KBS23b eq 84) to round-off and solves as the dense LU: on chains
  of 3D rods (the midpoint gradient; with the gradient corrected for the symmetry, three coupling
  values as a matrix of rank three), and on a chain of particles (its x, y, z coordinates are three
  groups). A pattern that couples every coordinate makes no groups.
- A run with it takes the same Newton iterates as one with the dense elimination
  (:class:`livens.schemes.ggl_em.EMTangent`), and keeps the energy; by default the run by groups is
  native code (its blocks within EngineOptions.max_native_unknowns), and so is the dense one of as many
  unknowns (a large program within EngineOptions.large_program_unknowns).
- The largest block the tangent reports to the engine (GroupStructure.largest_block,
  livens.engine.tangent_by_groups) is the largest LU in its solve's program; the papers' mechanisms,
  whose tangent is dense, report none.
"""

import contextlib
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import assert_tangent_equals_ad, perturbed_point, residual_and_tangent, tangent_type

import livens as lv
from livens.engine import EngineOptions, native, sizes_replaced
from livens.engine.options import reported_blocks
from livens.schemes import get as get_scheme
from livens.schemes.ggl_em_blocks import EMBlockTangent
from livens.solvers import groups
from livens.solvers.tangent import LowRankUpdate

EM = get_scheme("EM")[0]


def _chain_pattern():
    """Three groups of two coordinates, a constraint private to each, two joints between neighbours."""
    d, m = 6, 5
    D = np.zeros((d, d), bool)
    for g in range(3):
        D[2 * g : 2 * g + 2, 2 * g : 2 * g + 2] = True
    P = np.zeros((m, d), bool)
    P[0, 0:2] = P[1, 2:4] = P[2, 4:6] = True
    P[3, [1, 2]] = True
    P[4, [3, 4]] = True
    return D, P


def test_groups_of_a_known_pattern_take_every_entry_from_the_compressed_jacobians():
    D, P = _chain_pattern()
    gs = groups.GroupStructure(D, P)
    assert gs.ng == 3 and gs.s == 2 and gs.r == 3 and gs.useful
    assert [sorted(gs.gidx[g][gs.gvalid[g]]) for g in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert gs.ns == 4 and gs.p == 2  # the joints' (lambda, gamma) are shared; each group's own two
    rng = np.random.default_rng(3)
    Add = np.where(D, rng.standard_normal(D.shape), 0.0)
    Amd = np.where(P, rng.standard_normal(P.shape), 0.0)
    Adm = np.where(P.T, rng.standard_normal(P.T.shape), 0.0)
    Ed, Em = gs.seeds_d(), gs.seeds_m()
    assert Ed.shape[1] < 6 and Em.shape[1] < 5  # fewer products than columns
    np.testing.assert_array_equal(gs.dense_dd(gs.take(jnp.asarray(Add @ Ed), gs.index_dd())), Add)
    np.testing.assert_array_equal(gs.dense_md(gs.take(jnp.asarray(Amd @ Ed), gs.index_md())), Amd)
    np.testing.assert_array_equal(gs.dense_dm(gs.take(jnp.asarray(Adm @ Em), gs.index_dm())), Adm)
    # an entry outside the pattern is noticed
    assert not groups.missed(gs, [Add], [Amd])
    Add[0, 5] = 1.0
    assert groups.missed(gs, [Add], [Amd])
    # one group: nothing to gain
    assert not groups.GroupStructure(D | np.eye(6, k=2, dtype=bool), P).useful


def test_multiplier_solve_by_groups_is_the_dense_solve():
    D, P = _chain_pattern()
    gs = groups.GroupStructure(D, P)
    rng = np.random.default_rng(5)
    n = 2 * gs.r
    Wg = rng.standard_normal((gs.ng, n, n)) + 3.0 * np.eye(n)
    W = np.asarray(gs.scatter_add_ll(jnp.asarray(Wg)))
    assert np.count_nonzero(W) < W.size  # private multipliers of different groups do not meet
    y = rng.standard_normal((2 * gs.m, 2))
    with reported_blocks() as blocks:
        x = np.asarray(gs.multiplier_solver(jnp.asarray(Wg))(jnp.asarray(y)))
    # groups of 2 coordinates, each with its constraint's 2 multipliers; 4 shared (2 joints' lambda, gamma)
    assert (gs.s, gs.p, gs.ns) == (2, 2, 4) and blocks == [gs.largest_block] == [4]
    exact = np.linalg.solve(W, y)
    assert np.max(np.abs(x - exact)) <= 1e-14 * np.linalg.cond(W) * np.max(np.abs(exact))
    x1 = np.asarray(gs.multiplier_solver(jnp.asarray(Wg))(jnp.asarray(y[:, 0])))
    np.testing.assert_allclose(x1, x[:, 0], rtol=0, atol=1e-14 * np.max(np.abs(exact)))


# (example, parameters, how, size threshold lowered, the tangent's type): chains of rods (four rods,
# 216 unknowns, by default), whose joints
# are affine and whose orthonormality conditions are invariant under the rotation about e3, so that
# EM's force is the midpoint gradient (KBS23b eq 99: no coupling values); the same with g taken as
# only equivariant ("corrected": Gonzalez's gradient corrected for the symmetry, three coupling
# values, a matrix of rank three); a chain of particles, whose joints' constraints |x_i - x_{i-1}|^2 couple
# the particles' x (y, z) coordinates among themselves: three groups, every constraint shared
SYSTEMS = {
    "chain-3d-2": ("chain-3d", {"n_bodies": 2}, None, True, EMBlockTangent),
    "chain-3d-4": ("chain-3d", {"n_bodies": 4}, None, False, EMBlockTangent),
    "chain-3d-2-corrected": ("chain-3d", {"n_bodies": 2}, "corrected", True, LowRankUpdate),
    "chain-3d-3-corrected": ("chain-3d", {"n_bodies": 3}, "corrected", True, LowRankUpdate),
    "pendulum-chain-3": ("pendulum-chain", {"n_bodies": 3}, None, True, EMBlockTangent),
}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_tangent_by_groups_equals_ad_tangent(name):
    example, kw, how, lowered, kind = SYSTEMS[name]
    h = 0.01
    sch, vals, mech, st, x = perturbed_point(lv.examples.load(example, **kw), EM, h, len(name), velocity=True)
    if how == "corrected":
        assert mech.symmetries and mech.invariant_constraints
        mech = dataclasses.replace(mech, invariant_constraints=False)
    R, T = residual_and_tangent(sch, st, h, 0.3, vals, mech)
    with sizes_replaced(em_group_unknowns=0) if lowered else contextlib.nullcontext():
        assert tangent_type(T, x) is kind
        assert_tangent_equals_ad(R, T, x, 3 * mech.d + 2 * mech.m)


def _lu_orders(jaxpr, out):
    """The orders of the matrices LU-factorized in ``jaxpr`` and the programs within it."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "lu":
            out.append(eqn.invars[0].aval.shape[-1])
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    _lu_orders(getattr(inner, "jaxpr", inner), out)
    return out


@pytest.mark.parametrize("name", ["chain-3d-4", "chain-3d-3-corrected", "pendulum-chain-3"])
def test_the_block_reported_to_the_engine_is_the_largest_lu_of_the_solve(name):
    example, kw, how, lowered, _ = SYSTEMS[name]
    sch, vals, mech, st, x = perturbed_point(lv.examples.load(example, **kw), EM, 0.01, 2)
    if how == "corrected":
        mech = dataclasses.replace(mech, invariant_constraints=False)
    T = residual_and_tangent(sch, st, 0.01, 0.0, vals, mech)[1]
    with sizes_replaced(em_group_unknowns=0) if lowered else contextlib.nullcontext(), reported_blocks() as blocks:
        closed = jax.make_jaxpr(lambda x: T(x).solve(x))(x)
    lus = _lu_orders(closed.jaxpr, [])
    assert len(blocks) == 1 and len(lus) >= 2
    assert blocks[0] == max(lus) < 3 * mech.d + 2 * mech.m


def test_runs_by_groups_and_by_dense_elimination_take_the_same_newton_iterates():
    runs = {}
    for how, threshold in (("groups", 0), ("dense", 10**6)):
        problem = lv.examples.load("chain-3d", n_bodies=3, t_end=0.1)  # a new System: its own compiled loop
        with sizes_replaced(em_group_unknowns=threshold):
            runs[how] = lv.simulate(problem, "EM", tol=1e-12, progress=False)
    a, b = runs["groups"], runs["dense"]
    # 162 unknowns, past EngineOptions.max_native_unknowns: by groups, native code where there is a C
    # compiler; the dense elimination too, its program large (EngineOptions.large_program_unknowns)
    natively = "xla" if native.compiler() is None else "native"
    assert 162 <= EngineOptions().large_program_unknowns
    assert a.meta["backend"] == natively and b.meta["backend"] == natively
    np.testing.assert_array_equal(a.newton_iterations, b.newton_iterations)
    assert np.abs(a.q - b.q).max() <= 1e-12
    assert np.abs(a.p - b.p).max() <= 1e-12 * np.abs(b.p).max()
    energy = a.energy()
    H = energy["total"]
    assert np.abs(H - H[0]).max() <= 1e-12 * np.abs(energy["potential"]).max()


@pytest.mark.parametrize("example", ["double-four-bar", "four-bar-3d"])
def test_the_papers_mechanisms_keep_the_dense_elimination(example):
    """Below SizePolicy.em_group_unknowns (these have 148 and 178 Newton unknowns, and would make
    groups) EM keeps EMTangent: their results stay bit for bit."""
    from livens.schemes.ggl_em import EMTangent

    sch, vals, mech, st, x = perturbed_point(lv.examples.load(example), EM, 0.01, 1)
    assert 3 * mech.d + 2 * mech.m < 200
    with reported_blocks() as blocks:
        assert tangent_type(residual_and_tangent(sch, st, 0.01, 0.0, vals, mech)[1], x) is EMTangent
    assert blocks == []  # nothing reported: the engine judges them by their unknowns
