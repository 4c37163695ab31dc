"""Solution.energy() on a singular mass matrix in bounded memory, the work of external forces, and the
summary of ``livens run``:

- the kinetic energy on the constraint manifold (vi-lagrange on the three-bar swing, SLO09 §4.2) equals
  the dense saddle-point solve of :func:`livens.kinetic.manifold_kinetic_energy` node by node, whatever
  the chunk of nodes, and the chunk keeps the memory bounded;
- the work of an external force is checked against the analytic work of a sinusoidal force on a free
  particle (second order in h);
- the summary's energy figure is relative to the energy the motion exchanges, so that a system starting
  at rest (E0 = 0) with a load gives the energy balance E - E0 - W_ext, not a division by E0;
- the summary says which residuals the scheme enforces (VI-A: neither nodal one; EM: both).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import kinetic as sm


@pytest.fixture(scope="module")
def swing():
    p = lv.examples.load("three-bar-swing", n_elements=2)
    return lv.simulate(p, "vi-lagrange", t_end=0.02, guess="extrapolated", tol=1e-9, progress=False)


def test_manifold_energy_equals_the_dense_solve_in_any_chunk(swing, monkeypatch):
    mech = swing.mechanics
    assert not mech.constant_mass or mech.Minv_const is None  # singular M: the manifold path
    dense = jax.jit(lambda q, p: sm.manifold_kinetic_energy(mech, q, p))
    want = np.array([float(dense(jnp.asarray(q), jnp.asarray(p))) for q, p in zip(swing.q, swing.p)])
    assert np.max(want) > 0
    for chunk_bytes in (1, 3 * 8 * (mech.m * mech.d)):  # one node at a time; a few nodes and a padded last chunk
        monkeypatch.setattr(sm, "ENERGY_CHUNK_BYTES", chunk_bytes)
        got = sm.manifold_kinetic_energies(mech, swing.q, swing.p)
        assert np.max(np.abs(got - want)) <= 1e-12 * np.max(want), chunk_bytes


def test_the_constraint_jacobian_is_recovered_from_its_colours(swing):
    """The compressed Jacobian (one JVP per colour of its columns) equals the dense AD Jacobian, with far
    fewer products than columns for a beam."""
    mech = swing.mechanics
    values, rows, cols, width = sm._constraint_jacobians(mech, swing.q[0])
    assert width < mech.d // 3
    G = np.asarray(jax.vmap(jax.jacfwd(mech.g))(jnp.asarray(swing.q[-3:])))
    dense = np.zeros_like(G)
    dense[:, rows, cols] = values(swing.q[-3:])
    assert np.max(np.abs(dense - G)) <= 1e-13 * max(1.0, np.max(np.abs(G)))


def test_energies_are_computed_once_per_solution(swing, monkeypatch):
    first = swing.energy()
    calls = []
    monkeypatch.setattr(sm, "manifold_kinetic_energies", lambda *a: calls.append(1))
    again = swing.energy()
    assert not calls and all(np.array_equal(first[k], again[k]) for k in first)
    again["kinetic"][:] = 0.0  # a caller's change does not reach the kept energies
    assert np.array_equal(swing.energy()["kinetic"], first["kinetic"])


def _particle(amplitude=2.0):
    """A free particle of mass 3 pushed by F(t) = a sin(t) e1, from rest: v(t) = a (1 - cos t)/3,
    W(T) = int F v dt = a^2 (1 - cos T)^2 / 6."""
    sys_ = lv.System(
        mass_matrix=3.0 * jnp.eye(3),
        potential=lambda q: 0.0 * q[0],
        external_force=lambda q, v, t: jnp.array([amplitude * jnp.sin(t), 0.0, 0.0]),
    )
    return lv.Problem(sys_, q0=[0.0, 0.0, 0.0], v0=[0.0, 0.0, 0.0])


@pytest.mark.parametrize("scheme", ["vi-lagrange", "livens-em"])
def test_work_of_an_external_force_against_the_analytic_work(scheme):
    a, T = 2.0, 2.0
    exact = a**2 * (1.0 - np.cos(T)) ** 2 / 6.0
    errs = []
    for h in (0.02, 0.01):
        sol = lv.simulate(_particle(a), scheme, h=h, t_end=T, tol=1e-12, progress=False)
        errs.append(abs(sol.external_work()[-1] - exact))
    assert errs[1] < 1e-3 * exact and 3.0 < errs[0] / errs[1] < 5.0, errs  # second order


def test_summary_of_a_system_that_starts_at_rest_reports_the_energy_balance():
    """E0 = 0: the energy figure is relative to the energy the motion exchanges and the load's work is
    not counted as an error (the former figure divided by |E0| = 0 and gave 1e28 and more)."""
    sol = lv.simulate(_particle(), "livens-em", h=0.01, t_end=2.0, tol=1e-12, progress=False)
    s = sol.summary()
    E = sol.energy()["livens"]
    assert abs(E[0]) < 1e-300
    assert s["energy scale max(|E0|, range of T, range of V)"] == pytest.approx(np.ptp(sol.energy()["kinetic"]))
    assert s["work of the external forces W_ext(T)"] == pytest.approx(E[-1], rel=1e-9)
    key = "max |E - E0 - W_ext| / scale (E = p.v - L, energy balance)"
    assert s[key] < 1e-10, s


@pytest.mark.parametrize(
    "scheme, position, velocity",
    [("VI-A", "no: the scheme enforces g(q^{n+theta})", "no: the scheme enforces G(q^{n+theta}) v^{n+1}"),
     ("EM", "yes", "yes"),
     ("VI-S", "yes", "no: the scheme enforces G(q_bar) M^-1 p^{n+1}")],
)  # fmt: skip
def test_summary_says_which_residuals_the_scheme_enforces(scheme, position, velocity):
    sol = lv.simulate(lv.examples.load("heavy-top"), scheme, t_end=0.1, progress=False)
    s = sol.summary()
    assert s["enforced (position)"].startswith(position), s
    assert s["enforced (velocity)"].startswith(velocity), s
    if scheme == "VI-A":  # the nodal residuals are not small, and the summary says they are free
        assert s["max |g|"] > 1e-6 and "max |g| is free" in s["enforced (position)"]
