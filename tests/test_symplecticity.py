"""Symplecticity of the one-step map by AD through the Newton solution (livens.diagnostics):
VI-S, VI-A, VI-B are symplectic (KBS23b §4, App. A.6-A.7), EM is not (KBS23b §5 claims energy and
momentum only); the same for the schemes derived for a configuration-dependent M(q) (end of file)."""

import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import spherical_pendulum

import livens as lv
from livens.diagnostics import (
    constraint_manifold_basis,
    defect_of,
    one_step_jacobian,
    symplectic_form,
    symplecticity_defect,
)
from livens.mechanics import mechanics
from livens.schemes.base import State

PROBLEMS = {name: lv.examples.load(name) for name in ("pendulum-3d", "heavy-top")}
# the heavy top (nonlinear constraints, m = 9) by default; the pendulum with -m slow
EXAMPLES = [pytest.param("pendulum-3d", marks=pytest.mark.slow), "heavy-top"]
ROUND_OFF = 1e-12  # relative defect: observed 1e-18 ... 3e-14
_JAC: dict = {}


def jac(example, scheme, state=None, tag=None):
    key = (example, scheme, tag)
    if key not in _JAC:
        pr = PROBLEMS[example]
        _JAC[key] = one_step_jacobian(pr, scheme, pr.h, state=state)
    return _JAC[key]


def defects(example, scheme, **kw):
    Psi, z, _, rn = jac(example, scheme, **kw)
    assert rn <= 1e-12
    mech = mechanics(PROBLEMS[example].system, PROBLEMS[example].q0)
    return {man: defect_of(Psi, z, mech, man, relative=True) for man in ("constraint", "full")}


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("scheme", ["VI-S", "VI-B"])
def test_vi_s_vi_b_symplectic_on_constraint_manifold(example, scheme):
    """Symplectic on the tangent space of {g = 0, G M^-1 p = 0} (KBS23b eq 31), not on the whole
    phase space: the constraint term attached to the node q^n contributes dg(q^n) ^ d lambda."""
    d = defects(example, scheme)
    assert d["constraint"] <= ROUND_OFF
    assert d["full"] > 1e-3


@pytest.mark.parametrize("example", EXAMPLES)
def test_vi_a_symplectic_on_full_phase_space(example):
    """VI-A imposes g(q^{n+1/2}) = 0 between the nodes; its nodes leave the constraint manifold,
    and its one-step map is symplectic on the whole of R^{2d} (see livens.diagnostics)."""
    d = defects(example, "VI-A")
    assert d["full"] <= ROUND_OFF
    assert d["constraint"] <= ROUND_OFF


@pytest.mark.parametrize("example", EXAMPLES)
def test_em_not_symplectic(example):
    d = defects(example, "EM")
    assert d["constraint"] > 1e-8


def test_from_another_point_of_the_manifold():
    """The same on the heavy top from a perturbed state projected onto the constraint manifold
    (not the steady-precession start)."""
    pr = PROBLEMS["heavy-top"]
    rng = np.random.default_rng(7)
    q, v = lv.consistent_initial_state(pr.system, pr.q0 + 0.05 * rng.normal(size=12), pr.v0 + 5.0 * rng.normal(size=12))
    mech = mechanics(pr.system, pr.q0)
    p = np.asarray(mech.M(jnp.asarray(q))) @ v
    z9 = jnp.zeros(9)
    state = State(q=jnp.asarray(q), p=jnp.asarray(p), v=jnp.asarray(v), lam=z9, gam=z9)
    for scheme, manifold, symplectic in [
        ("VI-S", "constraint", True),
        ("VI-B", "constraint", True),
        ("VI-A", "full", True),
        ("EM", "constraint", False),
    ]:
        Psi, z, _, rn = jac("heavy-top", scheme, state=state, tag="perturbed")
        np.testing.assert_allclose(z, np.concatenate([q, p]))
        dfc = defect_of(Psi, z, mech, manifold, relative=True)
        assert (dfc <= ROUND_OFF) if symplectic else (dfc > 1e-8), (scheme, dfc)


def test_api_and_basis():
    """symplecticity_defect is the documented entry point; P is an orthonormal basis of the
    tangent space (C P = 0, P^T P = I, 2d - 2m columns)."""
    pr = PROBLEMS["pendulum-3d"]
    d = symplecticity_defect(pr, "VI-S", pr.h)
    assert d <= 1e-13
    mech = mechanics(pr.system, pr.q0)
    z = np.concatenate([pr.q0, pr.p0])
    P = constraint_manifold_basis(mech, z)
    assert P.shape == (6, 4)
    np.testing.assert_allclose(P.T @ P, np.eye(4), atol=1e-14)
    np.testing.assert_allclose(P.T @ symplectic_form(3) @ P + (P.T @ symplectic_form(3) @ P).T, 0, atol=1e-14)
    with pytest.raises(ValueError, match="manifold"):
        symplecticity_defect(pr, "VI-S", pr.h, manifold="tangent")


# ------------------------------------------------------------------ configuration-dependent M(q)
# The GGL variational integrators derived for M(q) (livens.schemes.ggl_mass; docs/theory/ggl-mass.md):
# the same generating-function arguments, with the manifold {g = 0, G(q) M(q)^-1 p = 0} (KBS23b Remark 3).
# Measured relative defects: VI-S 7e-19 (pendulum) and 4e-15 (squeezer), VI-B 2e-18 and 2e-15 on the
# manifold, VI-A 7e-17 and 9e-15 on the whole phase space; EM 1e-5 (pendulum) and 4e-9 (squeezer).
MASS_Q = {
    "spherical-pendulum": (spherical_pendulum(), 0.05),
    "andrews-squeezer": (lv.examples.load("andrews-squeezer"), 1e-4),
}


@pytest.mark.parametrize("name", list(MASS_Q))
def test_variational_schemes_with_configuration_dependent_mass_are_symplectic(name):
    pr, h = MASS_Q[name]
    mech = mechanics(pr.system, pr.q0)
    assert not mech.constant_mass
    for scheme, manifold in (("VI-S", "constraint"), ("VI-B", "constraint"), ("VI-A", "full")):
        Psi, z, _, rn = one_step_jacobian(pr, scheme, h)
        assert rn <= 1e-12
        assert defect_of(Psi, z, mech, manifold, relative=True) <= ROUND_OFF, scheme
        if manifold == "constraint":  # the node's constraint term: not on the whole phase space
            assert defect_of(Psi, z, mech, "full", relative=True) > 1e-3, scheme


def test_em_with_configuration_dependent_mass_is_not_symplectic():
    pr, h = MASS_Q["spherical-pendulum"]
    assert symplecticity_defect(pr, "EM", h, relative=True) > 1e-8


def test_the_manifold_of_a_configuration_dependent_mass():
    """P spans the null space of the Jacobian of (g(q), G(q) M(q)^-1 p) at a point of the manifold
    (here written out by hand for the pendulum in (r, theta, phi): g = (r^2 - 1)/2, g_v = r p_r / m)."""
    pr, _ = MASS_Q["spherical-pendulum"]
    mech = mechanics(pr.system, pr.q0)
    z = np.concatenate([pr.q0, pr.p0])
    P = constraint_manifold_basis(mech, z)
    r, p_r = pr.q0[0], pr.p0[0]
    C = np.zeros((2, 6))
    C[0, 0] = r  # d g / d r
    C[1, 0], C[1, 3] = p_r, r  # d (r p_r) / d (r, p_r), m = 1
    assert P.shape == (6, 4)
    np.testing.assert_allclose(C @ P, 0.0, atol=1e-14)
    np.testing.assert_allclose(P.T @ P, np.eye(4), atol=1e-14)
