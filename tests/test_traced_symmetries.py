"""Traced parameters that break a symmetry: lv.flow keeps under jax.jit, jax.grad and jax.vmap
only the symmetries exact for every value of the traced parameters, and says which it drops.

The model: a dumbbell (two unit masses on a rod of length 1) under gravity tilted by ``tilt``
(default 0) from -e3 towards e1, with four declared symmetries: the translation along e2 (Py) is
exact for every tilt, the rotation about e3 (J3) and the translation along e1 (Px) only for
tilt = 0, the translation along e3 (Pz) for no tilt. Checked, for EM and livens-em: with the tilt
traced the flow keeps Py alone and a TracedSymmetryNotice names J3 and Px (not Pz, which the
default drops too); a traced tilt of 0.3 runs (it turned the run into NaN while the defaults'
symmetries were kept) and gives the nodes of the untraced call and of lv.simulate at that value;
Py is conserved to round-off; the gradient of a loss agrees with central differences of untraced
runs and with forward mode; a vmapped batch of tilts gives each member's untraced run; and at the
default tilt the traced run is the untraced run of the problem that declares Py alone.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv

GRAVITY = 9.81
H, N = 0.02, 40
W = jnp.array([1.0, -2.0, 3.0, 0.5, 1.5, -1.0])


def _dumbbell():
    def potential(q, par):
        t = par["tilt"]
        return GRAVITY * (jnp.cos(t) * (q[2] + q[5]) + jnp.sin(t) * (q[0] + q[3]))

    system = lv.System(
        mass_matrix=np.eye(6),
        potential=potential,
        constraints=lambda q, par: jnp.array([0.5 * (jnp.sum((q[:3] - q[3:]) ** 2) - 1.0)]),
        parameters={"tilt": 0.0},
    )
    S = lv.Symmetry
    symmetries = [
        S.translation((0.0, 1.0, 0.0), blocks=2, name="Py"),
        S.rotation((0.0, 0.0, 1.0), blocks=2, name="J3"),
        S.translation((1.0, 0.0, 0.0), blocks=2, name="Px"),
        S.translation((0.0, 0.0, 1.0), blocks=2, name="Pz"),
    ]
    q0 = [0.0, 0.0, 0.0, 0.6, 0.0, 0.8]
    v0 = [0.4, 1.0, -0.3, 0.0, 0.5, 0.0]  # (x1 - x2) . (v1 - v2) = 0: on the velocity manifold
    return lv.Problem(system, q0=q0, v0=v0, symmetries=symmetries)


PROBLEM = _dumbbell()


@pytest.fixture(scope="module", params=["EM", "livens-em"])
def flow(request):
    return request.param, lv.flow(PROBLEM, request.param, h=H, n_steps=N, tol=1e-13)


def _energy(q, p, tilt):
    return 0.5 * np.sum(p**2, axis=1) + GRAVITY * (
        np.cos(tilt) * (q[:, 2] + q[:, 5]) + np.sin(tilt) * (q[:, 0] + q[:, 3])
    )


def test_a_traced_tilt_runs_keeping_only_the_symmetry_exact_for_every_tilt(flow):
    scheme, F = flow
    assert F.kept_symmetries() == ("Py", "J3", "Px")  # the default tilt: Pz is broken by gravity itself
    assert F.kept_symmetries({"tilt": 0.3}) == ("Py",)
    assert F.kept_symmetries(traced=("tilt",)) == ("Py",)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = jax.jit(lambda t: F(PROBLEM.q0, PROBLEM.v0, {"tilt": t}))(0.3)
    notices = [str(w.message) for w in caught if issubclass(w.category, lv.TracedSymmetryNotice)]
    assert len(notices) == 1
    assert "keeps the symmetries exact for every value of them ('Py')" in notices[0]
    assert "'J3': the potential is not invariant" in notices[0] and "'Px'" in notices[0]
    assert "'Pz'" not in notices[0]
    assert bool(traced.converged) and np.all(np.isfinite(np.asarray(traced.q)))
    # the untraced call and lv.simulate at the same value
    untraced = F(PROBLEM.q0, PROBLEM.v0, {"tilt": 0.3})
    np.testing.assert_allclose(np.asarray(traced.q), np.asarray(untraced.q), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(traced.p), np.asarray(untraced.p), rtol=0, atol=1e-12)
    sol = lv.simulate(PROBLEM, scheme, h=H, t_end=N * H, tol=1e-13, parameters={"tilt": 0.3}, progress=False)
    assert sol.meta["kept_symmetries"] == ["Py"]
    np.testing.assert_allclose(np.asarray(traced.q), sol.q, rtol=0, atol=1e-11)
    q, p = np.asarray(traced.q), np.asarray(traced.p)
    Py, Px = p[:, 1] + p[:, 4], p[:, 0] + p[:, 3]
    assert np.max(np.abs(Py - Py[0])) < 1e-12  # kept by construction
    assert np.max(np.abs(Px - Px[0])) > 1.0  # the tilt's force along e1 changes it
    E = _energy(q, p, 0.3)
    assert np.max(np.abs(E - E[0])) < 1e-10


def test_the_gradient_with_respect_to_a_traced_tilt_is_that_of_the_untraced_runs(flow):
    scheme, F = flow

    def loss(t):
        return F(PROBLEM.q0, PROBLEM.v0, {"tilt": t}).q[-1] @ W

    g = float(jax.jit(jax.grad(loss))(0.3))
    _, tangent = jax.jvp(loss, (0.3,), (1.0,))
    eps = 1e-6
    fd = (float(loss(0.3 + eps)) - float(loss(0.3 - eps))) / (2 * eps)  # untraced runs: concrete tilts
    assert np.isfinite(g) and abs(g) > 1e-2
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    np.testing.assert_allclose(float(tangent), g, rtol=1e-10)


def test_a_vmapped_batch_of_tilts_gives_each_untraced_run():
    F = lv.flow(PROBLEM, "EM", h=H, n_steps=N, tol=1e-13)
    tilts = jnp.array([0.3, -0.2, 0.05])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lv.TracedSymmetryNotice)
        batch = jax.vmap(lambda t: F(PROBLEM.q0, PROBLEM.v0, {"tilt": t}))(tilts)
    assert np.all(np.asarray(batch.converged))
    for b, t in enumerate(np.asarray(tilts)):
        one = F(PROBLEM.q0, PROBLEM.v0, {"tilt": float(t)})
        np.testing.assert_allclose(np.asarray(batch.q[b]), np.asarray(one.q), rtol=0, atol=1e-12)


def test_at_the_default_tilt_the_traced_run_is_the_scheme_that_keeps_py_alone():
    """Traced, the tilt 0 keeps Py alone (the run must serve every tilt): the untraced run of the
    problem that declares Py alone, not that of the default's three symmetries, which conserves J3
    and Px to round-off where the traced one conserves them only to the scheme's accuracy."""
    F = lv.flow(PROBLEM, "EM", h=H, n_steps=N, tol=1e-13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lv.TracedSymmetryNotice)
        traced = jax.jit(lambda t: F(PROBLEM.q0, PROBLEM.v0, {"tilt": t}))(0.0)
    py_alone = PROBLEM.replace(symmetries=PROBLEM.symmetries[:1])
    ref = lv.flow(py_alone, "EM", h=H, n_steps=N, tol=1e-13)(PROBLEM.q0, PROBLEM.v0, {"tilt": 0.0})
    np.testing.assert_allclose(np.asarray(traced.q), np.asarray(ref.q), rtol=0, atol=1e-13)
    three = F(PROBLEM.q0, PROBLEM.v0, {"tilt": 0.0})
    q, p = np.asarray(three.q), np.asarray(three.p)
    J3 = q[:, 0] * p[:, 1] - q[:, 1] * p[:, 0] + q[:, 3] * p[:, 4] - q[:, 4] * p[:, 3]
    assert np.max(np.abs(J3 - J3[0])) < 1e-12
