"""The structured Newton tangent of ggl-em with a configuration-dependent mass matrix M(q)
(:mod:`livens.schemes.mq_tangent`) changes only the cost of a step.

- Its matrix equals ``jax.jacfwd`` of the residual, block by block to ~1e-13 of each block's size,
  on Andrews' squeezer and on two more M(q) systems (the spherical pendulum in angles, a diagonal
  M(q) and a potential with cos; a bead with the full M(q) = I + q q^T / 2), away from the solution;
  its block elimination equals the dense solve.
- The comparison is sharp enough to catch an error: a change of 1e-9 of its size in any one block
  makes it fail.
- Runs with it take the same Newton iterations and nodes as with the dense AD tangent.
- ggl-vi with M(q) takes its AD tangent one named unknown at a time: the same matrix and runs.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import spherical_pendulum
from _tangents import assert_tangent_equals_ad, perturbed_point, residual_and_tangent, tangent_type

import livens as lv
from livens.schemes import get as get_scheme
from livens.schemes import ggl_em, ggl_vi, mq_tangent
from livens.schemes.stage_tangents import ad_tangent

EM = get_scheme("ggl-em")[0]
EM_AD = dataclasses.replace(
    EM, tangent=lambda u, s, h, t, prm, mech: ad_tangent(ggl_em._residual_mass, u, s, h, t, prm, mech)
)


def _bead():
    """A bead on the paraboloid z = (x^2 + y^2) / 2 with the full mass matrix M(q) = I + q q^T / 2."""
    system = lv.System(
        mass_matrix=lambda q: jnp.eye(3) + 0.5 * jnp.outer(q, q),
        potential=lambda q: 9.81 * q[2],
        constraints=lambda q: jnp.array([q[2] - 0.5 * (q[0] ** 2 + q[1] ** 2)]),
        name="bead-on-paraboloid-mq",
    )
    return lv.Problem(system, q0=[1.0, 0.0, 0.5], v0=[0.0, 1.5, 0.0], h=0.02, t_end=4.0, name="bead-mq")


def _problems():
    pendulum = dataclasses.replace(spherical_pendulum(), symmetries=())  # a symmetry keeps the AD tangent
    return {"squeezer": lv.examples.load("andrews-squeezer"), "pendulum": pendulum, "bead": _bead()}


PROBLEMS = _problems()


def _point(name, seed):
    problem = PROBLEMS[name]
    h = problem.h
    sch, vals, mech, st, x = perturbed_point(problem, EM, h, seed, velocity=True)
    return sch, vals, mech, st, x, h


def _block_errors(J, J_ad, d, m):
    """max |J - J_ad| / max |J_ad| over each block of rows and columns (dq, dp, v1, lambda, gamma)."""
    edges = np.cumsum([0, d, d, d, m, m])
    out = []
    for i in range(5):
        for j in range(5):
            ref = J_ad[edges[i] : edges[i + 1], edges[j] : edges[j + 1]]
            err = J[edges[i] : edges[i + 1], edges[j] : edges[j + 1]] - ref
            scale = np.max(np.abs(ref)) if ref.size else 0.0
            out.append(0.0 if scale == 0.0 else np.max(np.abs(err)) / scale)
            if scale == 0.0 and err.size:
                out[-1] = np.inf if np.max(np.abs(err)) > 0.0 else 0.0
    return np.array(out)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_structured_tangent_equals_ad_tangent(name):
    sch, vals, mech, st, x, h = _point(name, seed=len(name))
    d, m = mech.d, mech.m

    R, T = residual_and_tangent(sch, st, h, 0.3, vals, mech)
    assert tangent_type(T, x) is mq_tangent.EMMassTangent
    assert_tangent_equals_ad(R, T, x, 3 * d + 2 * m)
    J_ad = np.asarray(jax.jit(jax.jacfwd(R))(x))
    J = np.asarray(jax.jit(lambda x: T(x).matrix())(x))
    assert np.max(_block_errors(J, J_ad, d, m)) <= 1e-12


def test_a_changed_block_fails_the_comparison():
    """Each block of :class:`EMMassTangent`, changed by 1e-9 of its size at one entry, moves some block
    of the matrix by more than the 1e-12 the comparison allows."""
    sch, vals, mech, st, x, h = _point("squeezer", seed=5)
    d, m = mech.d, mech.m
    J_ad = np.asarray(jax.jit(jax.jacfwd(lambda x: sch.residual(sch.unpack(x, d, m), st, h, 0.0, vals, mech)))(x))
    blocks = jax.jit(lambda x: mq_tangent.em_mass_tangent(sch.unpack(x, d, m), st, h, mech).b)(x)
    matrix = jax.jit(lambda b: mq_tangent.EMMassTangent(h, b).matrix())
    assert np.max(_block_errors(np.asarray(matrix(blocks)), J_ad, d, m)) <= 1e-12
    rng = np.random.default_rng(0)
    for key, B in blocks.items():
        i = tuple(int(rng.integers(n)) for n in B.shape)
        changed = dict(blocks, **{key: B.at[i].add(1e-9 * float(jnp.max(jnp.abs(B))))})
        assert np.max(_block_errors(np.asarray(matrix(changed)), J_ad, d, m)) > 1e-12, key


def test_symmetries_keep_the_ad_tangent():
    """Where EM's force carries the orthogonality correction (symmetries) the AD tangent is used."""
    problem = spherical_pendulum()
    sch, vals, mech, st, x = perturbed_point(problem, EM, problem.h, 1, velocity=True)
    assert not mq_tangent.em_applies(mech)
    T = tangent_type(lambda x: sch.tangent(sch.unpack(x, mech.d, mech.m), st, problem.h, 0.0, vals, mech), x)
    assert T is not mq_tangent.EMMassTangent


def _noisy_ad(u, s, h, t, prm, mech):
    """The AD tangent with each entry changed by a relative 1e-15 (fixed pseudo-random): what
    round-off in the tangent alone does to a run."""
    J = ad_tangent(ggl_em._residual_mass, u, s, h, t, prm, mech)
    return J * (1.0 + 1e-15 * jnp.asarray(np.random.default_rng(0).standard_normal(J.shape)))


def _differences(a, b):
    return np.array([np.max(np.abs(x - y)) / np.max(np.abs(y)) for x, y in ((a.q, b.q), (a.p, b.p), (a.v, b.v))])


@pytest.mark.parametrize("name, steps", [("squeezer", 300), ("pendulum", 60), ("bead", 100)])
def test_runs_take_the_same_newton_iterations_and_nodes(name, steps):
    """Newton to 1e-12: the same iterations in every step, and nodes that differ from the AD
    tangent's by no more than round-off in the tangent makes them differ (a relative 1e-15 in its
    entries; Andrews' squeezer's Newton matrix has a condition number near 1e14, so that this floor
    is ~1e-12 in q and ~1e-11 in p, v over 300 steps), or than 1e-12 where it is lower. (The
    pendulum without its symmetry fails to converge near step 97 with either tangent.)"""
    problem = PROBLEMS[name]
    h, t_end = problem.h, steps * problem.h
    a = lv.simulate(problem, EM, h=h, t_end=t_end, tol=1e-12, progress=False)
    b = lv.simulate(problem, EM_AD, h=h, t_end=t_end, tol=1e-12, progress=False)
    assert a.q.shape[0] == b.q.shape[0] == steps + 1
    np.testing.assert_array_equal(a.newton_iterations, b.newton_iterations)
    noisy = dataclasses.replace(EM, tangent=_noisy_ad)
    c = lv.simulate(problem, noisy, h=h, t_end=t_end, tol=1e-12, progress=False)
    floor = np.maximum(1e-12, 3.0 * _differences(c, b))
    assert np.max(floor) <= 1e-10  # the floor itself is round-off
    assert np.all(_differences(a, b) <= floor), (_differences(a, b), floor)


VI = get_scheme("ggl-vi")[0]
VI_AD = dataclasses.replace(
    VI, tangent=lambda u, s, h, t, prm, mech: ad_tangent(ggl_vi._residual_mass, u, s, h, t, prm, mech)
)


def test_vi_s_tangent_by_blocks_equals_ad_tangent():
    """ggl-vi with M(q) takes its AD tangent one named unknown at a time: the same matrix as
    ``jax.jacfwd`` of the packed residual, and runs with the same iterations and nodes."""
    problem = PROBLEMS["squeezer"]
    h = problem.h
    sch, vals, mech, st, x = perturbed_point(problem, VI, h, 4, velocity=True)
    d, m = mech.d, mech.m
    R = jax.jit(jax.jacfwd(lambda x: sch.residual(sch.unpack(x, d, m), st, h, 0.0, vals, mech)))
    T = jax.jit(lambda x: sch.tangent(sch.unpack(x, d, m), st, h, 0.0, vals, mech))
    J_ad, J = np.asarray(R(x)), np.asarray(T(x))
    assert np.max(_block_errors(J, J_ad, d, m)) <= 1e-13
    steps = 200
    a = lv.simulate(problem, VI, h=h, t_end=steps * h, tol=1e-12, progress=False)
    b = lv.simulate(problem, VI_AD, h=h, t_end=steps * h, tol=1e-12, progress=False)
    np.testing.assert_array_equal(a.newton_iterations, b.newton_iterations)
    assert np.all(_differences(a, b) <= 1e-12)
