"""Momentum maps of systems loaded for a while: the discrete momentum balance.

The symmetries of the conservative part of a system (V, g and M invariant) need not be symmetries
of its loads. For them the schemes that keep momentum maps meet the discrete balance

    J^{n+1} - J^n = I^n,   I^n = h F(q^{n+1/2}, v^{n+1/2}, t^n + h/2) . xi q^{n+1/2},

so that the momenta are constant whenever the loads vanish: ``livens-em`` by discrete gradients
orthogonal to the generators (KBS23b eq 85), the variational schemes by the discrete Noether theorem
with forcing (SLO09 §4), the midpoint rule for invariant V and g. Checked here with momenta and
energies computed from q, v and p in the tests themselves (not with the Solution's diagnostics),
against the analytic linear impulse of a triangular pulse (the midpoint rule integrates it exactly
where its kinks lie on the grid) and against the impulse of the loads computed here from the load
points' placements:

- the free flight of a geometrically exact beam (Simo and Vu-Quoc's test of energy-momentum
  schemes; Betsch and Steinmann's director beams), loaded at one end by a force and two couples for
  5 s: energy, linear and angular momentum constant after the load, the balance during it;
- a free rigid body carrying a particle on a spring, hit by a force pulse;
- the spring pendulum in spherical coordinates (configuration-dependent M, KB23 §6.2) driven by an
  azimuthal torque pulse: p_phi's balance and energy;
- the Solution's impulse and balance against the ones computed here, and the overview figure.
- a damper C(q) = c I and a force under VI-S, which applies both at the left node (leading
  velocities).

Measured (the free beam below: 10 elements, h = 0.05, tol 1e-10, t_end = 15 s; drifts after the
load, momenta from q and p): livens-em energy 1.2e-13 relative, linear momentum 8.5e-14, angular
momentum 5.7e-11 (|J| = 243); vi-lagrange and livens-midpoint linear 5e-14, 1.5e-13, angular
3.3e-11 both; livens-midpoint's energy drifts by 4.9e-5. Before the correction livens-em drifted by
1.8e-3 (linear) and 7.8e-3 (angular). Balance residual per step during the load: at most 2.4e-11
(angular) and 2.2e-14 (linear) for all three schemes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import bodies as lb
from livens.mechanics import mechanics
from livens.symmetries import symmetry_defect

T_LOAD = 5.0  # the pulses of the beam end at 5 s
FORCE = np.array([20.0, 0.0, 0.0])
COUPLE = 100.0  # forces of the two couples, at +-0.5 along d1 and d2 of the loaded end


# ----------------------------------------------------------------------------- the free beam
def free_beam(n=10):
    """A free beam of length 10 from (6, 0, 8) to the origin (EA = GA = 1e4, EI = GJ = 500, A_rho = 1,
    M_rho = 10), no supports, no gravity; at the lower end (node n) a force and two couples whose
    time function is the triangular pulse 0 -> 1 -> 0 over [0, 5] s (peak at 2.5 s)."""
    beam = lb.Beam(
        "beam",
        (6.0, 0.0, 8.0),
        (0.0, 0.0, 0.0),
        (1e4, 1e4, 1e4, 500.0, 500.0, 500.0),
        (1.0, 10.0, 10.0),
        n_elements=n,
        d1=(0.0, 1.0, 0.0),
    )
    pulse = lb.triangular_pulse(0.5 * T_LOAD, T_LOAD)
    a = 0.5
    loads = [
        ("F", (0.0, 0.0, 0.0), FORCE),
        ("C1+", (a, 0.0, 0.0), (0.0, 0.0, COUPLE)),
        ("C1-", (-a, 0.0, 0.0), (0.0, 0.0, -COUPLE)),
        ("C2+", (0.0, a, 0.0), (-COUPLE, 0.0, 0.0)),
        ("C2-", (0.0, -a, 0.0), (COUPLE, 0.0, 0.0)),
    ]
    forces = [lb.PointLoad(name, beam.node(n, X), f, time_function=pulse) for name, X, f in loads]
    return lb.Assembly([beam], forces=forces, name="free-beam"), beam, loads, pulse


def _blocks(x):
    return np.asarray(x).reshape(x.shape[0], -1, 3)


def linear_momentum(q, p):
    """sum over the nodes of the momentum of phi (every 4th 3-block of a director beam)."""
    return _blocks(p)[:, 0::4].sum(axis=1)


def angular_momentum(q, p):
    """sum over every 3-block (positions and directors) of x_b x p_b."""
    return np.cross(_blocks(q), _blocks(p)).sum(axis=1)


def beam_energy(asm, beam, q, v, p):
    """E = p.v - 1/2 v.M v + W(q) (KB23 eq 31), W the beam's stored energy."""
    M = asm.mass_matrix()
    W = np.asarray(jax.vmap(beam.strain_energy)(jnp.asarray(q)))
    return np.einsum("ni,ni->n", p, v) - 0.5 * np.einsum("ni,ij,nj->n", v, M, v) + W


def load_impulse(beam, loads, pulse, q, t, h):
    """(linear, angular) impulse per step of the dead loads by the midpoint rule, computed from the
    load points' placements x = phi_n + X_i d_i at q^{n+1/2}: h s(t^n + h/2) sum f and
    h s(t^n + h/2) sum x x f."""
    Y = beam.nodes(0.5 * (q[:-1] + q[1:]))[:, -1]  # the loaded end node at the midpoints: (N, 4, 3)
    s = np.asarray(jax.vmap(pulse)(jnp.asarray(t[:-1] + 0.5 * h)))
    lin = np.zeros((len(s), 3))
    ang = np.zeros((len(s), 3))
    for _, X, f in loads:
        x = Y[:, 0] + sum(X[i] * Y[:, 1 + i] for i in range(3))
        lin += h * s[:, None] * np.asarray(f)
        ang += h * s[:, None] * np.cross(x, np.asarray(f))
    return lin, ang


@pytest.fixture(scope="module")
def beam_runs():
    asm, beam, loads, pulse = free_beam()
    problem = asm.problem(h=0.05, t_end=10.0)
    runs = {
        s: lv.simulate(problem, s, tol=1e-10, progress=False) for s in ("livens-em", "vi-lagrange", "livens-midpoint")
    }
    return asm, beam, loads, pulse, runs


def test_the_free_beam_declares_the_euclidean_group_and_conserves_only_L2():
    asm, _, _, _ = free_beam()
    assert [s.name for s in asm.symmetries()] == ["J1", "J2", "J3", "L1", "L2", "L3"]
    # the loads lie in the (e1, e3) plane: they keep L2 and break the rest
    assert [s.name for s in asm.symmetries(conserved=True)] == ["L2"]
    problem = asm.problem()
    assert [s.name for s in problem.symmetries] == ["J1", "J2", "J3", "L1", "L2", "L3"]


@pytest.mark.parametrize("scheme", ["livens-em", "vi-lagrange", "livens-midpoint"])
def test_free_beam_keeps_both_momenta_after_the_load(beam_runs, scheme):
    """After the load: linear and angular momentum constant to the Newton tolerance; during it the
    linear momentum grows by the pulse's integral, 1/2 * 5 s * (20, 0, 0) = (50, 0, 0)."""
    *_, runs = beam_runs
    sol = runs[scheme]
    L, J = linear_momentum(sol.q, sol.p), angular_momentum(sol.q, sol.p)
    np.testing.assert_allclose(L[0], 0.0, atol=1e-14)  # starts at rest
    end = int(round(T_LOAD / sol.h))
    np.testing.assert_allclose(L[end] - L[0], 0.5 * T_LOAD * FORCE, rtol=0, atol=1e-11)
    after = slice(end, None)
    assert np.max(np.abs(L[after] - L[end])) <= 1e-12 * np.linalg.norm(L[end]), scheme
    assert np.linalg.norm(J[end]) > 100.0  # the couples spun it up
    assert np.max(np.abs(J[after] - J[end])) <= 2e-12 * np.linalg.norm(J[end]), scheme


def test_free_beam_livens_em_keeps_its_energy_after_the_load(beam_runs):
    """livens-em conserves E = p.v - L (KB23 eq 31) in free flight; livens-midpoint does not."""
    asm, beam, _, _, runs = beam_runs
    end = int(round(T_LOAD / 0.05))
    E = beam_energy(asm, beam, runs["livens-em"].q, runs["livens-em"].v, runs["livens-em"].p)[end:]
    assert E[0] > 100.0
    assert np.max(np.abs(E - E[0])) <= 1e-12 * E[0]
    mid = runs["livens-midpoint"]
    E = beam_energy(asm, beam, mid.q, mid.v, mid.p)[end:]
    assert np.max(np.abs(E - E[0])) > 1e-6 * E[0]


@pytest.mark.parametrize("scheme", ["livens-em", "vi-lagrange", "livens-midpoint"])
def test_free_beam_momentum_balance_during_the_load(beam_runs, scheme):
    """J^{n+1} - J^n (from q, p) equals the loads' impulse computed from the load points' placements,
    step by step; the Solution's external_impulse and momentum_balance say the same."""
    _, beam, loads, pulse, runs = beam_runs
    sol = runs[scheme]
    h = sol.h
    lin, ang = load_impulse(beam, loads, pulse, sol.q, sol.t, h)
    dL = np.diff(linear_momentum(sol.q, sol.p), axis=0)
    dJ = np.diff(angular_momentum(sol.q, sol.p), axis=0)
    assert np.max(np.abs(ang)) > 1.0  # a real impulse, far above the tolerance
    assert np.max(np.abs(dL - lin)) <= 1e-13
    assert np.max(np.abs(dJ - ang)) <= 1e-10
    impulse, balance = sol.external_impulse(), sol.momentum_balance()
    for i in range(3):
        np.testing.assert_allclose(impulse[f"L{i + 1}"], lin[:, i], rtol=0, atol=1e-13)
        np.testing.assert_allclose(impulse[f"J{i + 1}"], ang[:, i], rtol=0, atol=1e-12)
        assert np.max(np.abs(balance[f"L{i + 1}"])) <= 1e-13
        assert np.max(np.abs(balance[f"J{i + 1}"])) <= 1e-10
    free = sol.t[1:] > T_LOAD + 1e-9
    assert all(np.all(impulse[k][free] == 0.0) for k in impulse)  # the pulse is over


def test_free_beam_without_the_symmetric_correction_livens_em_loses_both_momenta(beam_runs):
    """The contrast (what the test above would catch): Gonzalez's discrete gradient alone, its
    correction along q^{n+1} - q^n, drifts both momenta after the load."""
    asm, *_ = beam_runs
    plain = asm.problem(h=0.05, t_end=7.5, symmetries=[])
    sol = lv.simulate(plain, "livens-em", tol=1e-10, progress=False)
    end = int(round(T_LOAD / sol.h))
    L, J = linear_momentum(sol.q, sol.p)[end:], angular_momentum(sol.q, sol.p)[end:]
    assert np.max(np.abs(L - L[0])) > 1e-4
    assert np.max(np.abs(J - J[0])) > 1e-4


# ------------------------------------------------------------------------ a rigid body hit by a pulse
HIT = np.array([3.0, -1.0, 2.0])
T_HIT = 0.5


def hit_pair():
    """A free rigid body (director form) with a particle on a spring (potential not polynomial in q),
    hit at a body point by the force HIT times a triangular pulse over [0, 0.5] s."""
    R = np.linalg.qr(np.random.default_rng(3).normal(size=(3, 3)))[0]
    R[:, 0] *= np.sign(np.linalg.det(R))
    body = lb.RigidBody(
        "body",
        mass=2.0,
        inertia=(0.3, 0.5, 0.7),
        position=(0.5, -0.2, 1.0),
        directors=R.T,
        velocity=(0.1, 0.0, 0.2),
        angular_velocity=(0.5, -1.0, 2.0),
    )
    X = (0.4, 0.0, 0.0)
    x_tip = np.asarray(body.place(np.asarray(body.initial_state()[0]), X))
    v_tip = np.cross(body.angular_velocity, x_tip - np.asarray(body.position)) + np.asarray(body.velocity)
    ball = lb.PointMass("ball", 0.8, position=x_tip + np.array([0.0, 0.3, 0.0]), velocity=v_tip)
    forces = [
        lb.Spring("k", body.point(X), ball.point(), 400.0, 0.2),
        lb.PointLoad("hit", body.point((0.0, 0.1, -0.2)), tuple(HIT), time_function=lb.triangular_pulse(0.25, T_HIT)),
    ]
    return lb.Assembly([body, ball], forces=forces, name="hit-pair"), body, ball, X


def pair_momenta(q, p):
    """Linear momentum (the position blocks: body phi, ball x) and angular momentum (every block)."""
    B, P = _blocks(q), _blocks(p)
    return P[:, [0, 4]].sum(axis=1), np.cross(B, P).sum(axis=1)


def pair_energy(asm, body, X, q, v):
    """1/2 v.M v + 1/2 k (|x_ball - x_tip| - 0.2)^2, with x_tip = phi + X_i d_i."""
    M = asm.mass_matrix()
    B = _blocks(q)
    tip = B[:, 0] + sum(X[i] * B[:, 1 + i] for i in range(3))
    spring = 0.5 * 400.0 * (np.linalg.norm(B[:, 4] - tip, axis=1) - 0.2) ** 2
    return 0.5 * np.einsum("ni,ij,nj->n", v, M, v) + spring


@pytest.mark.parametrize("scheme", ["livens-em", "livens-midpoint", "vi-lagrange", "VI-S"])
def test_rigid_body_hit_by_a_pulse_keeps_its_momenta_afterwards(scheme):
    """The linear momentum changes by the pulse's integral, 1/2 * 0.5 s * HIT; after it both momenta
    are constant to round-off (tol 1e-12), and the Solution's balance closes step by step (for VI-S
    with the force at the left node, where it applies it)."""
    asm, body, ball, X = hit_pair()
    problem = asm.problem(h=0.01, t_end=1.5)
    sol = lv.simulate(problem, scheme, tol=1e-12, progress=False)
    L, J = pair_momenta(sol.q, sol.p)
    end = int(round(T_HIT / sol.h))
    np.testing.assert_allclose(L[end] - L[0], 0.5 * T_HIT * HIT, rtol=0, atol=1e-12)
    assert np.max(np.abs(L[end:] - L[end])) <= 1e-13
    assert np.max(np.abs(J[end] - J[0])) > 1e-2  # the hit is off the centre of mass
    assert np.max(np.abs(J[end:] - J[end])) <= 1e-11
    for name, b in sol.momentum_balance().items():
        assert np.max(np.abs(b)) <= 1e-11, (scheme, name)


def test_rigid_body_hit_by_a_pulse_livens_em_energy_and_the_contrast():
    """livens-em keeps the energy after the hit (computed here); without the symmetries declared
    (Gonzalez's gradient alone) the same run loses the angular momentum."""
    asm, body, ball, X = hit_pair()
    problem = asm.problem(h=0.01, t_end=1.5)
    end = int(round(T_HIT / problem.h))
    sol = lv.simulate(problem, "livens-em", tol=1e-12, progress=False)
    assert sol.meta["kept_symmetries"] == ["J1", "J2", "J3", "L1", "L2", "L3"]
    E = pair_energy(asm, body, X, sol.q, sol.v)[end:]
    assert np.max(np.abs(E - E[0])) <= 1e-12 * E[0]
    plain = lv.simulate(problem.replace(symmetries=()), "livens-em", tol=1e-12, progress=False)
    J = pair_momenta(plain.q, plain.p)[1][end:]
    assert np.max(np.abs(J - J[0])) > 1e-4


# ------------------------------------------------------- configuration-dependent M: the spring pendulum
TORQUE = 0.7


def driven_pendulum():
    """The spring pendulum in spherical coordinates (KB23 §6.2; M(q) = m diag(1, r^2, r^2 sin^2 theta))
    with a generalized force TORQUE s(t) on phi, s the triangular pulse over [0, 0.5] s."""
    base = lv.examples.load("spring-pendulum-spherical")
    pulse = lb.triangular_pulse(0.25, 0.5)

    def force(q, v, t):
        return jnp.array([0.0, 0.0, TORQUE]) * pulse(t)

    system = lv.System(
        mass_matrix=base.system.mass_matrix, potential=base.system.potential, external_force=force, name="driven"
    )
    return base.replace(system=system, t_end=1.0)


def test_configuration_dependent_mass_balance_of_the_cyclic_momentum():
    """p_phi grows by TORQUE * 0.25 (the pulse's integral) and is constant afterwards; its increments
    equal h TORQUE s(t^n + h/2) step by step; E = p.v - 1/2 v.M(q)v + V is constant after the pulse."""
    problem = driven_pendulum()
    sol = lv.simulate(problem, "livens-em", tol=1e-12, progress=False)
    assert sol.meta["kept_symmetries"] == ["p_phi"]
    h = sol.h
    pphi = sol.p[:, 2]
    s = np.asarray(jax.vmap(lb.triangular_pulse(0.25, 0.5))(jnp.asarray(sol.t[:-1] + 0.5 * h)))
    assert np.max(np.abs(np.diff(pphi) - h * TORQUE * s)) <= 1e-12
    end = int(round(0.5 / h))
    np.testing.assert_allclose(pphi[end] - pphi[0], 0.25 * TORQUE, rtol=0, atol=1e-11)
    assert np.max(np.abs(pphi[end:] - pphi[end])) <= 1e-12
    base = lv.examples.load("spring-pendulum-spherical").system
    M = jax.vmap(base.mass_matrix)(jnp.asarray(sol.q))
    V = jax.vmap(base.potential)(jnp.asarray(sol.q))
    E = np.einsum("ni,ni->n", sol.p, sol.v) - 0.5 * np.einsum("ni,nij,nj->n", sol.v, M, sol.v) + np.asarray(V)
    assert np.max(np.abs(E[end:] - E[end])) <= 1e-11 * abs(E[end])
    np.testing.assert_allclose(sol.momentum_balance()["p_phi"], 0.0, atol=1e-12)
    # without the symmetry (the partitioned gradient of KB23 eq 29 alone) p_phi is not kept
    plain = lv.simulate(problem.replace(symmetries=()), "livens-em", tol=1e-12, progress=False)
    assert np.max(np.abs(plain.p[end:, 2] - plain.p[end, 2])) > 1e-6


# ------------------------------------------------------------------------------ declarations, checks
def test_symmetry_checks_for_a_configuration_dependent_mass():
    """The kinetic energy 1/2 v.M(q)v must be invariant under the tangent lift: DM[xi q] + xi^T M + M xi = 0."""
    xi3 = lv.Symmetry.rotation((0.0, 0.0, 1.0), name="J3")
    V = lambda q: jnp.sin(q[2]) + (q @ q) ** 2  # noqa: E731
    q0 = [0.3, -0.2, 0.5]
    invariant = lv.System(mass_matrix=lambda q: (1.0 + q @ q) * jnp.eye(3) + jnp.outer(q, q), potential=V)
    assert symmetry_defect(mechanics(invariant, q0), xi3, np.asarray(q0)) is None
    broken = lv.System(mass_matrix=lambda q: jnp.diag(jnp.array([1.0 + q[0] ** 2, 1.0, 1.0])), potential=V)
    why = symmetry_defect(mechanics(broken, q0), xi3, np.asarray(q0))
    assert why is not None and "kinetic energy is not invariant" in why
    pendulum = lv.examples.load("spring-pendulum-spherical")
    mech = mechanics(pendulum.system, pendulum.q0)
    assert symmetry_defect(mech, pendulum.symmetries[0], pendulum.q0) is None
    tilt = lv.Symmetry.translation((0.0, 1.0, 0.0), blocks=1, name="theta shift")  # M depends on theta
    assert "kinetic energy is not invariant" in symmetry_defect(mech, tilt, pendulum.q0)


def test_symmetries_compare_by_name_and_generator():
    a = lv.Symmetry.rotation((0.0, 0.0, 1.0), blocks=2, name="J3")
    b = lv.Symmetry.rotation((0.0, 0.0, 1.0), blocks=2, name="J3")
    c = lv.Symmetry.rotation((0.0, 1.0, 0.0), blocks=2, name="J3")
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c}) == 2
    q, f = np.random.default_rng(0).normal(size=(2, 6))
    assert a.moment(q, f) == pytest.approx(np.cross(q[:3], f[:3])[2] + np.cross(q[3:], f[3:])[2], rel=1e-14)
    t = lv.Symmetry.translation((1.0, 0.0, 0.0), blocks=2)
    assert t.moment(q, f) == pytest.approx(f[0] + f[3], rel=1e-14)
    np.testing.assert_array_equal(np.asarray(t.tangent_generator(jnp.asarray(q))), 0.0)


def test_impulse_needs_consecutive_steps_and_is_zero_without_loads():
    asm, body, ball, X = hit_pair()
    problem = asm.problem(h=0.01, t_end=0.1)
    sol = lv.simulate(problem, "livens-em", tol=1e-12, progress=False, save_every=2)
    with pytest.raises(ValueError, match="save_every"):
        sol.external_impulse()
    free = lv.Problem(
        lv.System(mass_matrix=np.eye(3), potential=lambda q: (q @ q) ** 2),
        q0=[1.0, 0.0, 0.0],
        v0=[0.0, 1.0, 0.0],
        symmetries=[lv.Symmetry.rotation((0.0, 0.0, 1.0), name="J3")],
    )
    sol = lv.simulate(free, "livens-em", h=0.05, t_end=0.5, tol=1e-12, progress=False)
    np.testing.assert_array_equal(sol.external_impulse()["J3"], 0.0)
    J = sol.momentum_maps()["J3"]
    np.testing.assert_array_equal(sol.momentum_balance()["J3"], np.diff(J))
    assert np.max(np.abs(np.diff(J))) <= 1e-14  # quartic V: kept by the symmetric gradient


def test_overview_figure_draws_the_momentum_balance_under_loads(tmp_path):
    """The overview's third panel shows J^{n+1} - J^n - I^n where the system is loaded (the values
    drawn are the balance, not the increments, which the load makes large)."""
    from livens import plots

    asm, *_ = hit_pair()
    sol = lv.simulate(asm.problem(h=0.01, t_end=0.6), "livens-em", tol=1e-12, progress=False)
    fig = plots.overview(sol)
    ax = fig.axes[2]
    assert "momentum balance" in ax.get_title()
    drawn = np.concatenate([np.asarray(line.get_ydata(), float) for line in ax.lines if line.get_label() in ("J1",)])
    np.testing.assert_allclose(drawn, sol.momentum_balance()["J1"], rtol=0, atol=0)
    assert np.max(np.abs(np.diff(sol.momentum_maps()["J1"]))) > 1e-3  # the increments would differ
    assert plots.overview_figure(sol, str(tmp_path / "o.png")).endswith("o.png")


def test_damper_and_force_enter_the_balance_of_the_variational_scheme():
    """VI-S applies F(q^n, v^n, t^n) - C(q^n) v^n at the left node (KBS23a eq 53-54): J3 = q1 p2 - q2 p1
    (from q and p here) changes per step by h (q1 f2 - q2 f1) at q^n, v^n, with C = c I and a force
    along e1 computed here; the Solution's impulse and balance say the same."""
    c = 0.3

    def force(q, v, t):
        return jnp.array([jnp.sin(3.0 * t), 0.0, 0.0])

    system = lv.System(
        mass_matrix=np.diag([2.0, 2.0, 1.0]),
        potential=lambda q: (q @ q - 1.0) ** 2 + q[2] ** 3,
        dissipation=lambda q: c * jnp.eye(3),
        external_force=force,
    )
    problem = lv.Problem(
        system,
        q0=[1.2, 0.0, 0.1],
        v0=[0.0, 0.8, 0.2],
        symmetries=[lv.Symmetry.rotation((0.0, 0.0, 1.0), name="J3")],
        h=0.01,
        t_end=1.0,
    )
    sol = lv.simulate(problem, "VI-S", tol=1e-13, progress=False)
    assert sol.velocity_kind == "leading"
    q, p, h = sol.q, sol.p, sol.h
    n = sol.n_steps
    v, t = sol.v[:n], sol.t[:n]
    f = -c * v
    f[:, 0] += np.sin(3.0 * t)
    impulse = h * (q[:n, 0] * f[:, 1] - q[:n, 1] * f[:, 0])
    dJ = np.diff(q[:, 0] * p[:, 1] - q[:, 1] * p[:, 0])
    assert np.max(np.abs(impulse)) > 1e-3  # the damper and the force change J3
    assert np.max(np.abs(dJ - impulse)) <= 1e-13
    np.testing.assert_allclose(sol.external_impulse()["J3"], impulse, rtol=0, atol=1e-15)
    assert np.max(np.abs(sol.momentum_balance()["J3"])) <= 1e-13
