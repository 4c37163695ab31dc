"""The Newton tangent of ``ggl-em4`` for a constant mass matrix (livens.schemes.ggl_em4_tangent): assembled
from the Jacobians of the system's functions at the quadrature points and the end node and the step's
coefficients, it is the derivative of the step residual, and it changes Newton's iterates only by
round-off.

- At states and unknowns away from any solution (a tangent must hold everywhere) it equals
  ``jax.jacfwd`` of the residual to 1e-13 of its largest entry, and its solve is the dense solve: the
  heavy top (m = 9, one symmetry), the four-particle system (nonlinear springs, six symmetries), a
  particle on an ellipse (a constraint and no symmetry), a particle without constraints, and the double
  four-bar (29 constraints, no symmetry) with the band form switched off.
- The band form keeps its place from ``SizePolicy.banded_unknowns`` unknowns on (the double four-bar),
  and an M(q) keeps the AD tangent (the spherical pendulum in angles): both equal ``jax.jacfwd`` too.
- Steps with it take the AD tangent's Newton iterations on the heavy top, and their nodes agree to
  round-off.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import spherical_pendulum
from _tangents import assert_tangent_equals_ad, newton_steps, perturbed_point, residual_and_tangent, tangent_type

import livens as lv
from livens.driver.setup import resolve
from livens.solvers import Dense, LowRankUpdate

SCHEME = "ggl-em4"


def _ellipse():
    """A particle in the plane on the ellipse q1^2 + 4 q2^2 = 1, M = diag(1, 2), V = q1 + q2^3 + q1 q2:
    one constraint and no symmetry."""
    system = lv.System(
        mass_matrix=np.diag([1.0, 2.0]),
        potential=lambda q: q[0] + q[1] ** 3 + q[0] * q[1],
        constraints=lambda q: jnp.array([q[0] ** 2 + 4.0 * q[1] ** 2 - 1.0]),
        name="ellipse",
    )
    return lv.Problem(system, q0=[0.6, 0.4], v0=[-0.8, 0.3], h=0.05, t_end=1.0, name="ellipse")


def _free():
    """A particle in space without constraints, M = diag(1, 2, 3), V = |q|^2 + q1^4 / 10."""
    system = lv.System(mass_matrix=np.diag([1.0, 2.0, 3.0]), potential=lambda q: q @ q + 0.1 * q[0] ** 4, name="free")
    return lv.Problem(system, q0=[0.1, 0.2, 0.3], v0=[0.0, 0.1, 0.2], h=0.05, t_end=1.0, name="free")


def _check(problem, seed=3, kind=Dense):
    sch, vals, mech, st, x = perturbed_point(problem, SCHEME, problem.h, seed)
    R, T = residual_and_tangent(sch, st, problem.h, 0.0, vals, mech)
    assert tangent_type(T, x) is kind
    assert_tangent_equals_ad(R, T, x, x.shape[0])
    return mech


@pytest.mark.parametrize("seed", [3, 4])
def test_the_assembled_tangent_is_the_jacobian_on_the_heavy_top(seed):
    mech = _check(lv.examples.load("heavy-top"), seed)
    assert (mech.d, mech.m, len(mech.symmetries), mech.constant_mass) == (12, 9, 1, True)


@pytest.mark.parametrize(
    ("problem", "m", "r"),
    [(lv.examples.load("four-particle"), 2, 6), (_ellipse(), 1, 0), (_free(), 0, 0)],
    ids=["four-particle", "ellipse", "free-particle"],
)
def test_the_assembled_tangent_is_the_jacobian_with_and_without_constraints_and_symmetries(problem, m, r):
    mech = _check(problem)
    assert (mech.m, len(mech.symmetries)) == (m, r)


def test_the_band_form_keeps_its_place_and_the_assembly_stands_in_without_it():
    """The double four-bar (236 unknowns): the band form with low-rank couplings, as the solvers'
    default; with the band form switched off, the assembled tangent (29 constraints, no symmetry)."""
    problem = lv.examples.load("double-four-bar")
    _check(problem, kind=LowRankUpdate)
    with lv.engine.sizes_replaced(banded_unknowns=10**6):
        _check(problem)


def test_a_configuration_dependent_mass_keeps_the_ad_tangent():
    """The spherical pendulum in angles, M(q): the dense AD tangent of the solvers, the Jacobian."""
    mech = _check(spherical_pendulum())
    assert not mech.constant_mass


def test_steps_take_the_ad_tangents_iterations_on_the_heavy_top():
    """Six steps at tol 1e-12 from the advanced guess with the assembled tangent and with the solvers'
    AD tangent: the same Newton iterations, the nodes to round-off."""
    problem = lv.examples.load("heavy-top")
    sch, vals, mech = resolve(problem, SCHEME, {})
    assert sch.tangent is not None
    runs = [newton_steps(problem, mech, s, vals, 6, 1e-12) for s in (sch, dataclasses.replace(sch, tangent=None))]
    (states, its), (states0, its0) = runs
    assert its == its0
    q, q0 = np.array([s.q for s in states]), np.array([s.q for s in states0])
    p, p0 = np.array([s.p for s in states]), np.array([s.p for s in states0])
    assert np.max(np.abs(q - q0)) <= 1e-13 * (1.0 + np.max(np.abs(q0)))
    assert np.max(np.abs(p - p0)) <= 1e-13 * (1.0 + np.max(np.abs(p0)))
    assert np.max(np.abs(q[-1] - q[0])) > 1e-3  # the top moved
