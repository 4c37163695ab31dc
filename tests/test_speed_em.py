"""The speed structures of the GGL energy-momentum scheme EM (KBS23b eq 84) change only the cost.

- The residual with (84b) as one scalar discrete gradient equals the row-wise form with the
  discrete derivatives as matrices (KBS23b eq 86b, c), to round-off, away from the solution.
- The structured EM tangent equals the AD tangent jax.jacfwd of the residual, and its block
  elimination equals the dense solve (to the accuracy the conditioning allows).
- Runs with the structured tangent and with the AD tangent take the same Newton iterates.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import assert_tangent_equals_ad, perturbed_point, residual_and_tangent, tangent_type

import livens as lv
from livens.schemes import get as get_scheme
from livens.schemes import ggl_em

EM = get_scheme("EM")[0]

# (example, parameters): Greenspan's gradient (heavy top, four particles: invariants declared)
# and Gonzalez's (the others); m = 1 to m = 29 constraints for d = 3 to 30
SYSTEMS = {
    "heavy-top": ("heavy-top", {}),
    "pendulum-3d": ("pendulum-3d", {}),
    "four-particle": ("four-particle", {}),
    "double-spherical-pendulum": ("double-spherical-pendulum", {}),
    "chain-3": ("pendulum-chain", {"n_bodies": 3}),
    "double-four-bar": ("double-four-bar", {}),
}


def _point(name, seed, h=0.05):
    """A state and an unknown vector away from the solution (the tangent must hold everywhere)."""
    example, kw = SYSTEMS[name]
    return (*perturbed_point(lv.examples.load(example, **kw), EM, h, seed, velocity=True), h)


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_scalar_discrete_gradient_residual_equals_rowwise_form(name):
    sch, vals, mech, st, x, h = _point(name, seed=11)
    d, m = mech.d, mech.m
    both = jax.jit(
        lambda x: [f(sch.unpack(x, d, m), st, h, 0.0, vals, mech) for f in (ggl_em._residual, ggl_em._residual_rowwise)]
    )
    for k in range(3):  # also nearly at rest, where the fade-out of Gonzalez's quotient acts
        xs = x if k == 0 else x.at[:d].set(10.0 ** (-3 * k) * x[:d])  # dq = q^{n+1} - q^n
        r, r0 = (np.asarray(a) for a in both(xs))
        # (84b) holds h times discrete gradients, whose quotients amplify the round-off of the
        # function values by 1/|q^{n+1} - q^n|
        scale = np.max(np.abs(r0)) / min(1.0, float(jnp.linalg.norm(xs[:d] - st.q)))
        assert np.max(np.abs(r - r0)) <= 1e-13 * scale, k


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_em_structured_tangent_equals_ad_tangent(name):
    sch, vals, mech, st, x, h = _point(name, seed=len(name))
    d, m = mech.d, mech.m

    R, T = residual_and_tangent(sch, st, h, 0.3, vals, mech)
    assert tangent_type(T, x) is ggl_em.EMTangent
    assert_tangent_equals_ad(R, T, x, 3 * d + 2 * m)


@pytest.mark.parametrize("example, steps", [("heavy-top", 150), ("four-particle", 100)])
def test_em_structured_and_ad_tangent_take_the_same_newton_iterates(example, steps):
    problem = lv.examples.load(example)  # a new System: not the compiled runner of another test
    h = problem.h
    ad = dataclasses.replace(EM, tangent=None)
    a = lv.simulate(problem, EM, h=h, t_end=steps * h, tol=1e-12)
    b = lv.simulate(problem, ad, h=h, t_end=steps * h, tol=1e-12)
    assert np.mean(a.newton_iterations == b.newton_iterations) >= 0.99
    assert np.max(np.abs(a.q - b.q)) <= 1e-10
    assert np.max(np.abs(a.p - b.p)) <= 1e-10 * max(1.0, np.max(np.abs(a.p)))
    # the energy stays conserved with the structured tangent (KBS23b eq 89)
    E = a.energy()["total"]
    assert np.max(np.abs(E - E[0])) <= 1e-11 * abs(E[0])
