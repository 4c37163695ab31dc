"""The Newton tangent of ``ggl-spark``: the dense AD Jacobian of all its unknowns at
once (:func:`livens.schemes.stage_tangents.ad_tangent_at_once`, one ``jax.jacfwd`` of the packed
unknowns), at every size, in place of the solvers' default AD tangent (one ``jacfwd`` per named block
of unknowns from ``SizePolicy.block_jacobian_unknowns`` on, after a search for a band from
``SizePolicy.banded_unknowns`` on), whose many copies of the step's residual took most of a cold
first call's compile. The matrix is the same: Newton's iterates change by round-off only.

- Below ``block_jacobian_unknowns`` (the 3D pendulum) the solvers' default is the same single
  ``jacfwd``: a run gives the same bits as before.
- Above it (the four-particle system: 82 unknowns) a run takes the default tangent's Newton
  iterations, its nodes to round-off.
- ``ggl-em4`` has its own tangent, assembled from point Jacobians (tests/test_ggl_em4_tangent.py).
No timing is asserted here: the benchmarks measure the first calls.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from _tangents import newton_steps

import livens as lv
from livens.driver.setup import resolve
from livens.engine import size_policy
from livens.schemes import get as get_scheme
from livens.schemes import stage_tangents

SCHEMES = ["ggl-spark"]


def _steps(problem, scheme, n, default_tangent: bool):
    """n steps of ``scheme`` from the advanced guess, jitted with XLA, with the scheme's tangent or
    (``default_tangent``) the solvers' default AD tangent: the nodes q, p and the Newton iterations."""
    sch, vals, mech = resolve(problem, scheme, {})
    if default_tangent:
        sch = dataclasses.replace(sch, tangent=None)

    states, its = newton_steps(problem, mech, sch, vals, n, 1e-10)
    return np.array([x.q for x in states]), np.array([x.p for x in states]), its


def test_which_schemes_take_the_tangent_at_once():
    """ggl-spark names the at-once AD tangent; ggl-galerkin keeps its own (assembled from the stages
    from SizePolicy.stage_unknowns on), and so does ggl-em4 (assembled from its point Jacobians)."""
    for name in SCHEMES:
        assert getattr(get_scheme(name)[0].tangent, "at_once", False), name
    assert not getattr(get_scheme("ggl-galerkin")[0].tangent, "at_once", False)
    em4 = get_scheme("ggl-em4")[0].tangent
    assert em4 is not None and not getattr(em4, "at_once", False)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_below_the_block_size_a_run_gives_the_same_bits(scheme):
    """The 3D pendulum (23 unknowns): the default AD tangent is the same single
    jacfwd there, and the runs are identical to the bit."""
    problem = lv.examples.load("pendulum-3d")
    sch, _, mech = resolve(problem, scheme, {})
    assert sum(n for _, n in sch.sizes(mech.d, mech.m)) < size_policy().block_jacobian_unknowns
    q, p, its = _steps(problem, scheme, 6, default_tangent=False)
    q0, p0, its0 = _steps(problem, scheme, 6, default_tangent=True)
    assert its == its0
    assert np.array_equal(q, q0) and np.array_equal(p, p0)
    assert np.max(np.abs(q[-1] - q[0])) > 1e-6  # the system moved


@pytest.mark.parametrize("scheme", SCHEMES)
def test_above_the_block_size_a_run_agrees_with_the_block_tangent(scheme):
    """The four-particle system (82 unknowns): the default AD tangent is built
    block by block there; the runs take the same Newton iterations and agree to round-off."""
    problem = lv.examples.load("four-particle")
    sch, _, mech = resolve(problem, scheme, {})
    assert sum(n for _, n in sch.sizes(mech.d, mech.m)) >= size_policy().block_jacobian_unknowns
    q, p, its = _steps(problem, scheme, 4, default_tangent=False)
    q0, p0, its0 = _steps(problem, scheme, 4, default_tangent=True)
    assert its == its0
    assert np.max(np.abs(q - q0)) <= 1e-12 * (1.0 + np.max(np.abs(q0)))
    assert np.max(np.abs(p - p0)) <= 1e-12 * (1.0 + np.max(np.abs(p0)))
    assert np.max(np.abs(q[-1] - q[0])) > 1e-6


def test_the_tangent_at_once_is_the_jacobian_of_the_packed_residual():
    """At a point away from any solution (ggl-spark on the four-particle system, 82 unknowns), the
    tangent is jax.jacfwd of the residual of the packed unknowns (in the scheme's packing)."""
    from _tangents import perturbed_point

    problem = lv.examples.load("four-particle")
    h = 10 * problem.h
    sch, vals, mech, st, x = perturbed_point(problem, "ggl-spark", h, 5)
    d, m = mech.d, mech.m

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, 0.0, vals, mech)

    def T(x):
        return stage_tangents.ad_tangent_at_once(sch.residual)(sch.unpack(x, d, m), st, h, 0.0, vals, mech)

    J, J_ad = np.asarray(jax.jit(T)(x)), np.asarray(jax.jit(jax.jacfwd(R))(x))
    assert J.shape == J_ad.shape == (x.shape[0], x.shape[0])
    assert np.max(np.abs(J - J_ad)) <= 1e-13 * np.max(np.abs(J_ad))
