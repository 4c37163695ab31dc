"""The GGL energy-momentum scheme of order 4 ``ggl-em4`` (docs/theory/ggl-em4.md): its quadrature
tables, the energy and momentum balances its corrected force meets (and the Galerkin force alone does
not), with a constant M and with M(q), the order 4 against SciPy's DOP853 (the 3D pendulum from its
minimal coordinates, also in spherical coordinates with M(q); the four-particle system, nonlinear
springs and six symmetries, the heavy top and Andrews' squeezer, a closed loop with M(q), from their
index-1 equations), the energy to the Newton tolerance over 10^4 steps, the momentum maps and both
constraints at the nodes (with M(q) too), and the refusal of a singular mass matrix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _configuration_mass import (
    cartesian_pendulum_reference,
    pendulum_reference,
    spherical_pendulum,
    squeezer_parts,
    squeezer_reference,
)
from _index1_reference import index1_reference

import livens as lv
from livens.driver.setup import resolve
from livens.schemes.ggl_em4 import step_terms, tables

SCHEME = "ggl-em4"
PENDULUM = lv.examples.load("pendulum-3d")
FOUR = lv.examples.load("four-particle")
SPHERICAL = spherical_pendulum()


def _paraboloid():
    """A particle on the paraboloid q3 = (q1^2 + q2^2) / 2 with the configuration-dependent mass matrix
    M(q) = (1 + |q|^2) I + q q^T and V = 9.81 q3 + (q1^2 + q2^2)^2 / 4: M(Rq) = R M(q) R^T, V and g are
    invariant under the rotations R about e3, so J3 = p . (e3 x q) is a momentum map whose balance has
    the kinetic term sum_i (A^T P_i) . Pi_i, which vanishes only for a constant M."""
    system = lv.System(
        mass_matrix=lambda q: (1.0 + q @ q) * jnp.eye(3) + jnp.outer(q, q),
        potential=lambda q: 9.81 * q[2] + 0.25 * (q[0] ** 2 + q[1] ** 2) ** 2,
        constraints=lambda q: jnp.array([q[2] - 0.5 * (q[0] ** 2 + q[1] ** 2)]),
        name="paraboloid-with-mass-matrix",
    )
    return lv.Problem(
        system,
        q0=[0.6, 0.0, 0.18],
        v0=[0.3, 1.0, 0.18],  # G(q0) v0 = -0.6 * 0.3 + 0.18 = 0
        h=0.02,
        t_end=1.0,
        symmetries=[lv.Symmetry.rotation([0.0, 0.0, 1.0], name="J3")],
        name="paraboloid-with-mass-matrix",
    )


PARABOLOID = _paraboloid()


def _slope(hs, errors):
    return np.polyfit(np.log(hs), np.log(errors), 1)[0]


def test_tables():
    """Gauss-Legendre with 4 points integrates degree 7 exactly on [0, 1]; W projects onto the
    orthonormal tests 1, sqrt(3) (2 tau - 1); the Lagrange polynomials on 0, 1/2, 1 and their
    derivatives reproduce a quadratic."""
    tab = tables()
    c, w, W = tab["c"], tab["w"], tab["W"]
    for k in range(8):
        assert w @ c**k == pytest.approx(1 / (k + 1), abs=1e-15)
    phi = np.stack([np.ones_like(c), np.sqrt(3.0) * (2 * c - 1)])
    np.testing.assert_allclose(W @ phi.T, np.eye(2), atol=1e-15)
    x = 0.3 + 1.7 * c - 2.2 * c**2  # x(0) = 0.3, x(1/2) = 0.3 + 0.85 - 0.55, x(1) = 0.3 + 1.7 - 2.2
    np.testing.assert_allclose(0.3 + tab["lm"] * 0.3 + tab["l1"] * (-0.5), x, atol=1e-15)
    np.testing.assert_allclose(tab["dlm"] * 0.3 + tab["dl1"] * (-0.5), 1.7 - 4.4 * c, atol=1e-15)


# ------------------------------------------------------------------ the balances of one step
def _mass(problem, q):
    M = problem.system.mass_matrix
    return np.asarray(M(jnp.asarray(q)) if callable(M) else M, dtype=float)


def _hamiltonian(problem, q, p):
    """H = 1/2 p.M(q)^-1 p + V(q) from the System's own functions and NumPy's solve."""
    return 0.5 * p @ np.linalg.solve(_mass(problem, q), p) + float(problem.system.potential(jnp.asarray(q)))


def _random_step(problem, seed, h=0.05):
    """step_terms at a consistent state of ``problem`` and random increments and multipliers of the
    size of a step h, with the exact symmetries of the problem, as a run resolves them; and the
    targets of the balances computed here from the System's functions (M(q), V, G = Dg by JAX's
    jacfwd of g, NumPy's solves): Pi_i = <M^-1 p>_i, Gamma_i = <M^-1 G^T gamma>_i,
    H^{n+1} - H^n - sum_i b_i . (Pi_i + Gamma_i) and sum_i (A^T P_i) . (Pi_i + Gamma_i)."""
    mech = resolve(problem, SCHEME, {})[2]
    assert len(mech.symmetries) == len(problem.symmetries)  # all exact
    rng = np.random.default_rng(seed)
    q0, v0 = np.asarray(problem.q0, dtype=float), np.asarray(problem.v0, dtype=float)
    p0 = _mass(problem, q0) @ v0

    def r(scale, n):
        return scale * rng.standard_normal(n)

    dq, qm = h * v0 + r(h**2, mech.d), 0.5 * h * v0 + r(h**2, mech.d)
    dp, pm = r(h, mech.d), r(h, mech.d)
    lams, gams = r(1.0, (2, mech.m)), r(0.1, (2, mech.m))
    args = [jnp.asarray(x) for x in (q0, p0, dq, qm, dp, pm, lams, gams)]
    st = jax.jit(lambda *a: step_terms(mech, *a))(*args)
    tab = tables()
    W, lin = tab["W"], tab["lin"]
    Q = q0[None, :] + tab["lm"][:, None] * qm + tab["l1"][:, None] * dq
    P = p0[None, :] + tab["lm"][:, None] * pm + tab["l1"][:, None] * dp
    b = W @ (tab["dlm"][:, None] * pm + tab["dl1"][:, None] * dp)
    jac = jax.jacfwd(problem.system.constraints)
    lam_k, gam_k = lin.T @ lams, lin.T @ gams
    Pi = W @ np.stack([np.linalg.solve(_mass(problem, q), p) for q, p in zip(Q, P)])
    GTg = [np.asarray(jac(jnp.asarray(q))).T @ g for q, g in zip(Q, gam_k)]
    Gam = W @ np.stack([np.linalg.solve(_mass(problem, q), x) for q, x in zip(Q, GTg)])
    xi = np.stack([[np.asarray(s.generator(q)) for s in problem.symmetries] for q in Q])  # (n, r, d)
    Z = np.einsum("ik,krd->idr", W, xi)
    AtP = -np.stack([[np.asarray(s.cotangent_generator(p)) for s in problem.symmetries] for p in W @ P])
    target_e = _hamiltonian(problem, q0 + dq, p0 + dp) - _hamiltonian(problem, q0, p0) - np.sum(b * (Pi + Gam))
    target_j = np.einsum("ird,id->r", AtP, Pi + Gam)
    return st, Z, target_e, target_j, (Q, P, lam_k, gam_k)


def _check_balances(problem, seed):
    st, Z, target_e, target_j, _ = _random_step(problem, seed)
    F, F0, a = np.asarray(st["F"]), np.asarray(st["F0"]), np.asarray(st["a"])
    scale = np.sum(np.abs(a * F)) + abs(target_e)
    assert abs(np.sum(a * F) - target_e) <= 1e-14 * max(scale, 1.0), (np.sum(a * F), target_e)
    np.testing.assert_allclose(np.einsum("id,idr->r", F, Z), target_j, rtol=0, atol=1e-13)
    miss_e = abs(np.sum(a * F0) - target_e)
    assert miss_e > 1e-9 or np.max(np.abs(np.einsum("id,idr->r", F0, Z) - target_j)) > 1e-9
    return st


@pytest.mark.parametrize("seed", [0, 1])
def test_the_corrected_force_meets_the_energy_and_momentum_balances(seed):
    """Four-particle system (nonlinear springs; L1-L3, J1-J3): at random increments and multipliers the
    corrected force F meets sum_i a_i . F_i = H^{n+1} - H^n - sum_i b_i . (Pi_i + Gamma_i) and
    sum_i F_i . <xi(q)>_i = sum_i (A^T P_i) . (Pi_i + Gamma_i) for all six symmetries to round-off (with
    a constant M the scheme evaluates them as V^{n+1} - V^n - sum_i b_i . Gamma_i and
    sum_i (A^T P_i) . Gamma_i, equal in exact arithmetic), while the Galerkin projection F^0 misses them
    by far more than round-off (away from a solution of the step the multipliers' work does not vanish;
    at a solution F - F^0 is O(h^4), which the order tests see)."""
    _check_balances(FOUR, seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_corrected_force_meets_the_balances_with_a_configuration_dependent_mass(seed):
    """A particle on a paraboloid with M(q) = (1 + |q|^2) I + q q^T and the rotation about e3: the same
    balances, whose right-hand sides now hold the change of the kinetic energy and
    sum_i (A^T P_i) . Pi_i (nonzero with M(q)), to round-off; and the Galerkin force F^0 is the
    projection of grad_q [H(q, p) + lambda . g(q) + gamma . G(q) M(q)^-1 p], differentiated here by JAX
    through jnp.linalg.solve (livens differentiates with M(q)^-1 p and M(q)^-1 G^T gamma held fixed)."""
    st = _check_balances(PARABOLOID, seed)
    _, _, _, target_j, (Q, P, lam_k, gam_k) = _random_step(PARABOLOID, seed)
    assert abs(target_j[0]) > 1e-3  # the kinetic term is there
    sysm = PARABOLOID.system

    def phi(q, p, lam, gam):
        w = jnp.linalg.solve(sysm.mass_matrix(q), p)
        gq, Gw = jax.jvp(sysm.constraints, (q,), (w,))
        return 0.5 * p @ w + sysm.potential(q) + lam @ gq + gam @ Gw

    grads = np.stack([np.asarray(jax.grad(phi)(*map(jnp.asarray, x))) for x in zip(Q, P, lam_k, gam_k)])
    np.testing.assert_allclose(np.asarray(st["F0"]), tables()["W"] @ grads, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ orders
def _order(problem, q_ref, p_ref, hs, T, gtol=1e-13):
    eq, ep = [], []
    for h in hs:
        sol = lv.simulate(problem, SCHEME, h=h, t_end=T, tol="roundoff", progress=False)
        eq.append(np.max(np.abs(sol.q[-1] - q_ref)))
        ep.append(np.max(np.abs(sol.p[-1] - p_ref)))
        assert np.max(np.abs(sol.constraint_residual("position"))) <= gtol
    return _slope(hs, eq), _slope(hs, ep), eq, ep


def test_order_four_on_the_3d_pendulum():
    """Cartesian 3D pendulum (KBS23b §6.1), T = 0.5: the errors of q and p fall like h^4 (fitted slopes
    within 0.2) against the minimal-coordinate solution; g at the nodes."""
    T = 0.5
    q_ref, p_ref = cartesian_pendulum_reference(T)
    sq, sp, eq, ep = _order(PENDULUM, q_ref, p_ref, [0.05, 0.025, 0.0125], T)
    assert abs(sq - 4) <= 0.2 and abs(sp - 4) <= 0.2, (sq, sp, eq, ep)


def test_order_four_on_the_spherical_pendulum_with_configuration_dependent_mass():
    """The same pendulum in spherical coordinates (r, theta, phi), M(q) = diag(1, r^2, r^2 sin^2 theta),
    T = 0.5: order 4 in q and p (p = M(q) v of the minimal-coordinate solution, slopes within 0.2)."""
    T = 0.5
    q_ref, v_ref = pendulum_reference(T)
    p_ref = _mass(SPHERICAL, q_ref) @ v_ref
    sq, sp, eq, ep = _order(SPHERICAL, q_ref, p_ref, [0.025, 0.0125, 0.00625], T)
    assert abs(sq - 4) <= 0.2 and abs(sp - 4) <= 0.2, (sq, sp, eq, ep)


@pytest.mark.slow
def test_order_four_on_the_four_particle_system():
    """Four-particle system (KBS23b §6.3; nonlinear springs, where the energy-momentum correction acts),
    T = 0.2: order 4 in q and p against its index-1 equations by DOP853."""
    T = 0.2
    q_ref, p_ref = index1_reference(FOUR, T)
    sq, sp, eq, ep = _order(FOUR, q_ref, p_ref, [0.02, 0.01, 0.005], T)
    assert abs(sq - 4) <= 0.2 and abs(sp - 4) <= 0.2, (sq, sp, eq, ep)


@pytest.mark.slow
def test_order_four_on_the_heavy_top():
    """The heavy top (KBS23b §6.2; 12 coordinates, 9 constraints), T = 0.1, Newton to round-off: order
    4 in q and p against its index-1 equations by DOP853 (slopes within 0.2)."""
    problem = lv.examples.load("heavy-top")
    T = 0.1
    q_ref, p_ref = index1_reference(problem, T)
    sq, sp, eq, ep = _order(problem, q_ref, p_ref, [0.0025, 0.00125, 0.000625], T)
    assert abs(sq - 4) <= 0.2 and abs(sp - 4) <= 0.2, (sq, sp, eq, ep)


@pytest.mark.slow
def test_order_four_on_the_squeezer():
    """Andrews' squeezer (HW96 §VII.7; M(q), three closed loops, a driving torque in V): q and p
    (p = M(q) v with the published M) at t = 0.002 against the index-1 reference, Newton to
    round-off, slopes within 0.2 of 4; H and both
    constraints at the nodes to round-off. XLA runs it (backend="xla"): the C compiler takes longer
    than its time limit on this scheme's native kernel here, and falls back to XLA after it."""
    problem = lv.examples.load("andrews-squeezer")
    T = 0.002
    q_ref, v_ref = squeezer_reference(T)
    p_ref = squeezer_parts(q_ref, v_ref)[0] @ v_ref
    hs = [2e-4, 1e-4, 5e-5]
    runs = [lv.simulate(problem, SCHEME, h=h, t_end=T, tol="roundoff", progress=False, backend="xla") for h in hs]
    for name, ref in (("q", q_ref), ("p", p_ref)):
        errors = [np.max(np.abs(getattr(sol, name)[-1] - ref)) for sol in runs]
        assert abs(_slope(hs, errors) - 4) <= 0.2, (name, _slope(hs, errors), errors)
    E = runs[-1].energy()["total"]
    assert np.max(np.abs(E - E[0])) <= 1e-13 * abs(E[0])
    assert all(np.max(np.abs(r)) <= 1e-13 for r in runs[-1].enforced_residuals().values())


# ------------------------------------------------------------------ long runs
def _long_run(problem, h, n_steps):
    """``problem`` over n_steps steps of h at tol = "roundoff": the drift of E = T + V relative to E^0
    and relative to the size of its terms (max |T| + |V|), the drifts of the momentum maps and the
    worst nodal constraint residuals."""
    sol = lv.simulate(problem, SCHEME, h=h, t_end=h * n_steps, tol="roundoff", progress=False)
    assert sol.n_steps == n_steps
    en = sol.energy()
    E = en["total"]
    drift = float(np.max(np.abs(E - E[0])))
    size = float(np.max(np.abs(en["kinetic"]) + np.abs(en["potential"])))
    dJ = {name: float(np.max(np.abs(J - J[0]))) for name, J in sol.momentum_maps().items()}
    worst = {name: float(np.max(np.abs(r))) for name, r in sol.enforced_residuals().items()}
    return drift / abs(E[0]), drift / size, dJ, worst


def test_energy_momentum_and_constraints_over_ten_thousand_steps():
    """3D pendulum, 10^4 steps of h = 0.05 at tol = "roundoff": relative energy drift <= 1e-12, J3 kept
    to 1e-12, g and G M^-1 p at the nodes to 1e-13."""
    drift, _, dJ, worst = _long_run(PENDULUM, 0.05, 10_000)
    assert drift <= 1e-12, drift
    assert dJ["J3"] <= 1e-12, dJ
    assert all(r <= 1e-13 for r in worst.values()), worst


@pytest.mark.parametrize(
    ("problem", "h", "n_steps", "name"),
    [(SPHERICAL, 0.05, 2000, "p_phi"), (PARABOLOID, 0.02, 1000, "J3")],
    ids=["spherical-pendulum", "paraboloid"],
)
def test_energy_momentum_and_constraints_with_configuration_dependent_mass(problem, h, n_steps, name):
    """M(q) systems at tol = "roundoff", over 2000 steps of h = 0.05 (the spherical pendulum) and 1000 of
    h = 0.02 (the paraboloid): H = 1/2 p.M(q)^-1 p + V kept to 1e-13 of the size of its terms
    max |T| + |V| (round-off: the pendulum's T and V reach 10, its E is 0.5), the momentum map (p_phi of
    the cyclic angle; J3 of the rotation of the paraboloid) to 1e-12, g and G(q) M(q)^-1 p at the
    nodes to 1e-13."""
    _, drift, dJ, worst = _long_run(problem, h, n_steps)
    assert drift <= 1e-13, drift
    assert set(dJ) == {name} and dJ[name] <= 1e-12, dJ
    assert set(worst) == {"position g(q^{n+1})", "velocity G(q^{n+1}) M(q^{n+1})^-1 p^{n+1}"}
    assert all(r <= 1e-13 for r in worst.values()), worst


def test_a_singular_mass_matrix_is_refused():
    """ggl-em4 needs M(q)^-1 (its secondary constraint G(q) M(q)^-1 p): a singular M (KB23 §6.1) is
    refused before any step, naming the schemes that run it, none of the GGL family."""
    assert SCHEME in lv.schemes.names()
    singular = lv.examples.load("redundant-mass-spring")
    with pytest.raises(ValueError, match=r"needs M\^-1, but the mass matrix of this system is singular") as info:
        lv.simulate(singular, SCHEME, h=0.1, t_end=0.2, progress=False)
    assert "ggl-" not in str(info.value).split("accept it:")[1]
