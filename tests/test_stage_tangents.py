"""The structured Newton tangents of the stage systems of ``ggl-galerkin`` and ``ggl-spark``
(livens.schemes.stage_tangents): assembled from the Jacobians of the per-point terms and the method's
coefficients, they are the AD Jacobian of the step residual, and they change Newton's iterates only
by round-off.

- ``stage_tangent`` (the assembly; ``ggl-galerkin`` takes it from
  ``size_policy().stage_unknowns`` unknowns on, ``ggl-spark`` keeps the dense AD tangent), at states and
  unknowns away from any solution (a tangent must hold everywhere), for s = 2 and 3, on
  the 3D pendulum (constant M, m = 1), Andrews' squeezer (a configuration-dependent M(q), m = 6) and
  the heavy top (constant M, m = 9): the assembled matrix equals ``jax.jacfwd`` of the residual to
  1e-12 of its largest entry (each s with its own layout of unknowns).
- Steps with the structured tangent take the dense AD tangent's Newton iterations, and their nodes
  agree to round-off (the 3D pendulum; Andrews' squeezer, slow; both stage counts).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import perturbed_point

import livens as lv
from livens.driver.setup import initial_state, resolve
from livens.schemes import get as get_scheme
from livens.schemes import ggl_galerkin, ggl_spark, stage_tangents
from livens.timestep import step

SCHEMES = ["ggl-galerkin", "ggl-spark"]
FAST = ["pendulum-3d", "andrews-squeezer"]
MODULES = {"ggl-galerkin": ggl_galerkin, "ggl-spark": ggl_spark}


def _jacobians(problem, scheme, seed):
    """(the structured tangent, jax.jacfwd of the residual) for s = 2 and 3 at one perturbed point."""
    h = 10 * problem.h
    assemble = MODULES[scheme].stage_tangent
    out = []
    for s in (2, 3):
        sch, vals, mech, st, x = perturbed_point(problem, scheme, h, seed, params={"stages": s})
        d, m = mech.d, mech.m

        def R(x, vals, sch=sch, st=st, mech=mech, d=d, m=m):
            return sch.residual(sch.unpack(x, d, m), st, h, 0.0, vals, mech)

        def T(x, vals, sch=sch, st=st, mech=mech, d=d, m=m):
            return assemble(sch.unpack(x, d, m), st, h, 0.0, vals, mech)

        out.append((s, np.asarray(jax.jit(T)(x, vals)), np.asarray(jax.jit(jax.jacfwd(R))(x, vals))))
    return out


def _assert_equal(problem, scheme, seed=3):
    for s, J, J_ad in _jacobians(problem, scheme, seed):
        assert J.shape == J_ad.shape
        scale = np.max(np.abs(J_ad))
        err = np.max(np.abs(J - J_ad))
        assert err <= 1e-12 * scale, f"s = {s}: |J - J_AD| = {err:.3e} of {scale:.3e}"


@pytest.mark.parametrize("name", FAST)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_structured_tangent_is_the_ad_jacobian(scheme, name):
    """The assembled tangent equals jax.jacfwd of the residual (constant M and M(q), s = 2, 3)."""
    _assert_equal(lv.examples.load(name), scheme)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_structured_tangent_is_the_ad_jacobian_heavy_top(scheme):
    """The same on the heavy top (d = 12, m = 9: 120 and 117 unknowns)."""
    _assert_equal(lv.examples.load("heavy-top"), scheme, seed=5)


def _steps(problem, scheme, n):
    """n steps with Newton from the advanced guess for s = 2 and 3, with the structured tangent
    (``stage_tangent``, whatever the size) and with the AD tangent (the same scheme with ``tangent=None``): their nodes and Newton
    iterations."""
    out = {}
    for s in (2, 3):
        sch, vals, mech = resolve(problem, scheme, {"stages": s})
        structured = dataclasses.replace(sch, tangent=MODULES[scheme].stage_tangent)
        for variant in (structured, dataclasses.replace(sch, tangent=None)):

            @jax.jit
            def one(state, t, variant=variant, mech=mech, vals=vals):
                new, _, res, _ = step(mech, variant, "advanced", state, t, problem.h, 1e-9, 30, vals)
                return new, res.iterations, res.converged

            state, qs, its = initial_state(problem, mech, variant), [], []
            for k in range(n):
                state, it, ok = one(state, k * problem.h)
                assert bool(ok)
                qs.append(np.asarray(state.q))
                its.append(int(it))
            out.setdefault(s, []).append((np.array(qs), its))
    return out


def _assert_same_run(problem, scheme):
    for s, ((q, its), (q_ad, its_ad)) in _steps(problem, scheme, 8).items():
        assert its == its_ad, f"s = {s}"
        assert np.max(np.abs(q - q_ad)) <= 1e-12 * (1.0 + np.max(np.abs(q_ad))), f"s = {s}"
        assert np.max(np.abs(q[-1] - q[0])) > 1e-6  # the system moved


@pytest.mark.parametrize("scheme", SCHEMES)
def test_run_with_structured_tangent_matches_dense(scheme):
    """Newton with the structured tangent takes the AD tangent's iterations on the 3D pendulum: same
    counts, nodes to round-off (s = 2, 3)."""
    _assert_same_run(lv.examples.load("pendulum-3d"), scheme)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_run_with_structured_tangent_matches_dense_mass(scheme):
    """The same on Andrews' squeezer (a configuration-dependent M(q))."""
    _assert_same_run(lv.examples.load("andrews-squeezer"), scheme)


def test_which_schemes_take_the_structured_tangent():
    """ggl-galerkin takes the assembly from size_policy().stage_unknowns on (the heavy top: 120),
    the dense AD Jacobian below (the 3D pendulum: 20); ggl-spark keeps a dense AD tangent (of all its
    unknowns at once, stage_tangents.ad_tangent_at_once)."""
    assert get_scheme("ggl-spark")[0].tangent.at_once
    assert get_scheme("ggl-galerkin")[0].tangent is not None
    assert stage_tangents.use_structured({"x": jnp.zeros(120)})
    assert not stage_tangents.use_structured({"x": jnp.zeros(20)})
