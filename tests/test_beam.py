"""Geometrically exact beams in director form (livens.bodies.Beam; Betsch and Steinmann 2002, SLO09 §4.2)
against values livens does not compute: frame indifference of the stored energy, the energy of a
circular arc (EI kappa^2 L / 2), the first bending frequency of a cantilever (Euler-Bernoulli,
1.875^2 sqrt(EI / (rho A L^4)) / 2 pi), the static tip deflection P L^3 / (3 EI), the kinetic energy of
a rigid motion, and the joints and loads that attach to beam nodes.

Measured (this file's cantilever: steel, 0.01 m square section, L = 1 m; relative errors):
first bending frequency vs Euler-Bernoulli 1.13e-3 (10 elements), 2.25e-4 (20), -3.5e-6 (40; the
Timoshenko and rotary-inertia corrections, about -5e-5, take over there); tip deflection vs
P L^3 / (3 EI) -2.42e-3 (10), -5.47e-4 (20), -7.8e-5 (40), i.e. about -1/(4 n^2) plus the shear
compliance P L / (kappa G A) (+7.8e-5).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import livens as lv
from livens import bodies as lb

RNG = np.random.default_rng(20240607)

# a steel cantilever with a square section: E, nu, edge b, length L, density rho
E_, NU, B_, L_, RHO = 2.1e11, 0.3, 0.01, 1.0, 7850.0
A_, I_ = B_**2, B_**4 / 12.0
G_ = E_ / (2.0 * (1.0 + NU))
STIFF = (5 / 6 * G_ * A_, 5 / 6 * G_ * A_, E_ * A_, E_ * I_, E_ * I_, G_ * 0.1406 * B_**4)
INERT = (RHO * A_, RHO * I_, RHO * I_)
F_EB = 1.875104068711961**2 * np.sqrt(E_ * I_ / (RHO * A_ * L_**4)) / (2.0 * np.pi)  # 8.355 Hz


def _rotation(w):
    """exp of the skew matrix of w (Rodrigues)."""
    th = np.linalg.norm(w)
    if th == 0:
        return np.eye(3)
    k = np.asarray(w) / th
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K


def cantilever(n, load=None):
    """The cantilever along e1, clamped at node 0, d1 = e2, d2 = e3; optionally a tip load -load e3."""
    beam = lb.Beam("beam", (0, 0, 0), (L_, 0, 0), STIFF, INERT, n_elements=n, d1=(0, 1, 0))
    forces = [] if load is None else [lb.PointLoad("tip", beam.node(n), (0.0, 0.0, -load))]
    return lb.Assembly(
        [beam], joints=[lb.Clamp("root", beam.node(0), lb.ground((0, 0, 0)))], forces=forces, name="cantilever"
    )


# ---------------------------------------------------------------- the stored energy
def test_frame_indifference_of_the_stored_energy():
    """W(R phi + c, R d_i) = W(phi, d_i) for a deformed beam and any rigid motion (R, c) (Betsch and
    Steinmann 2002: the strains are objective); the deformed energy is far from zero."""
    beam = lb.Beam(
        "b", (0, 0, 0), (1.0, 0.2, -0.1), (3.0, 2.0, 10.0, 0.5, 0.3, 0.4), (1.0, 0.1, 0.1), n_elements=7, d1=(0, 0, 1)
    )
    Y = beam.reference_nodes().copy()
    for k in range(beam.n_nodes):  # perturb every node: position and an independent rotation of its frame
        Y[k, 0] += 0.05 * RNG.standard_normal(3)
        Y[k, 1:] = Y[k, 1:] @ _rotation(0.3 * RNG.standard_normal(3)).T
    q = Y.reshape(-1)
    W = float(beam.strain_energy(jnp.asarray(q)))
    assert W > 1e-2
    for _ in range(4):
        R, c = _rotation(RNG.standard_normal(3) * 2.0), RNG.standard_normal(3)
        Z = Y.copy()
        Z[:, 0] = Y[:, 0] @ R.T + c
        Z[:, 1:] = Y[:, 1:] @ R.T
        W2 = float(beam.strain_energy(jnp.asarray(Z.reshape(-1))))
        assert abs(W2 - W) <= 1e-13 * W, (W, W2)
    # the reference configuration stores nothing (to round-off)
    assert float(beam.strain_energy(jnp.asarray(beam.reference_nodes().reshape(-1)))) <= 1e-28


@pytest.mark.parametrize("n", [10, 20, 40])
def test_circular_arc_stores_the_pure_bending_energy(n):
    """Nodes on a circular arc of curvature kappa, frames turning with the tangent (bending about d2):
    W = EI_2 kappa^2 L / 2 up to the discretization error, which is (kappa L_e)^2 / 3 to leading order
    (K_2 = sin(kappa L_e)/L_e per element; the chords also shorten, an axial strain -(kappa L_e)^2/6).
    Measured relative errors: -7.9e-3 (10 elements), -2.0e-3 (20), -5.1e-4 (40) (the energy is below
    EI kappa^2 L / 2 by about (kappa L_e)^2 / 3). No shear, no torsion, no bending about d1."""
    EI2, kappa, L = 2.0, np.pi / 2, 1.0  # a quarter circle
    beam = lb.Beam(
        "b", (0, 0, 0), (L, 0, 0), (40.0, 40.0, 100.0, 3.0, EI2, 1.5), (1.0, 0.1, 0.1), n_elements=n, d1=(0, 1, 0)
    )
    th = kappa * np.linspace(0.0, L, n + 1)
    Y = np.zeros((n + 1, 4, 3))
    Y[:, 0] = np.stack([np.sin(th), 1 - np.cos(th), 0 * th], axis=1) / kappa
    Y[:, 1] = np.stack([-np.sin(th), np.cos(th), 0 * th], axis=1)  # d1, initially e2
    Y[:, 2] = [0.0, 0.0, 1.0]  # d2 = e3: the bending axis
    Y[:, 3] = np.stack([np.cos(th), np.sin(th), 0 * th], axis=1)  # d3, the tangent
    q = Y.reshape(-1)
    W = float(beam.strain_energy(jnp.asarray(q)))
    exact = EI2 * kappa**2 * L / 2
    err = (W - exact) / exact
    delta = kappa * L / n
    assert abs(err) <= 0.4 * delta**2, (n, err, delta**2 / 3)
    r = beam.stress_resultants(q)
    for k in ("N1", "N2", "M1", "M3"):
        assert np.max(np.abs(r[k])) <= 1e-12, (k, r[k])
    np.testing.assert_allclose(r["M2"], EI2 * np.sin(delta) / (L / n), rtol=1e-12)  # K_2 = sin(kappa L_e) / L_e


def test_uniform_stretch_and_twist_give_their_resultants():
    """A straight beam stretched uniformly by eps carries N3 = EA eps in every element (and W = EA eps^2 L/2);
    twisted uniformly by an angle theta about its axis, M3 = GJ sin(theta/n)/L_e (exactly what K_3 gives
    for frames turned by theta/n per element); no other resultant."""
    C = (3.0, 2.0, 10.0, 0.5, 0.3, 0.4)
    beam = lb.Beam("b", (0, 0, 0), (2.0, 0, 0), C, (1.0, 0.1, 0.1), n_elements=4, d1=(0, 1, 0))
    Y = beam.reference_nodes().copy()
    Y[:, 0] *= 1.01
    r = beam.stress_resultants(Y.reshape(-1))
    np.testing.assert_allclose(r["N3"], 10.0 * 0.01, rtol=1e-12)
    np.testing.assert_allclose(r["n"], np.tile([0.1, 0.0, 0.0], (4, 1)), atol=1e-14)
    assert float(beam.strain_energy(Y.reshape(-1))) == pytest.approx(10.0 * 0.01**2 * 2.0 / 2, rel=1e-12)
    Z = beam.reference_nodes().copy()
    th = 0.3
    for k in range(beam.n_nodes):
        Z[k, 1:] = Z[k, 1:] @ _rotation([th * k / 4, 0.0, 0.0]).T  # about the axis e1 = d3
    r = beam.stress_resultants(Z.reshape(-1))
    np.testing.assert_allclose(r["M3"], 0.4 * np.sin(th / 4) / 0.5, rtol=1e-12)
    for k in ("N1", "N2", "N3", "M1", "M2"):
        assert np.max(np.abs(r[k])) <= 1e-14, k


# ---------------------------------------------------------------- mass
def test_consistent_mass_gives_the_rigid_body_kinetic_energy():
    """For a rigid motion (phi_k' = v + omega x (phi_k - phi_0), d_i' = omega x d_i) the consistent mass
    matrix integrates the linear velocity field exactly: T = 1/2 m |v_c|^2 + 1/2 omega.J_c omega with the
    centroid's velocity and the inertia of a slender rod plus its cross-section (rho I_1 + rho I_2 about
    the axis, rho I_alpha about the transverse axes), computed here by hand."""
    L, Arho, M1, M2 = 2.0, 3.0, 0.05, 0.02
    w, v = RNG.standard_normal(3), RNG.standard_normal(3)
    beam = lb.Beam(
        "b",
        (0, 0, 0),
        (L, 0, 0),
        (1, 1, 1, 1, 1, 1),
        (Arho, M1, M2),
        n_elements=5,
        d1=(0, 1, 0),
        velocity=v,
        angular_velocity=w,
        point_masses=((2, 0.7),),
    )
    q0, v0 = beam.initial_state()
    T = 0.5 * v0 @ beam.mass_block() @ v0
    m = Arho * L
    vc = v + np.cross(w, [L / 2, 0, 0])
    # axis e1 = d3, d1 = e2, d2 = e3; rho I_1 = M1 about d1 (e2), rho I_2 = M2 about d2 (e3)
    J = np.diag([(M1 + M2) * L, m * L**2 / 12 + M1 * L, m * L**2 / 12 + M2 * L])
    x_pm = q0[24:27]
    T_hand = 0.5 * m * vc @ vc + 0.5 * w @ J @ w + 0.5 * 0.7 * np.sum((v + np.cross(w, x_pm)) ** 2)
    assert T == pytest.approx(T_hand, rel=1e-13)
    # d3 carries no inertia: M has exactly 3 (n + 1) zero eigenvalues, the others positive
    ev = np.linalg.eigvalsh(beam.mass_block())
    assert np.sum(np.abs(ev) <= 1e-14 * ev.max()) == 3 * beam.n_nodes and ev.min() > -1e-14
    np.testing.assert_allclose(beam.node_masses().sum(), m + 0.7, rtol=1e-14)


# ---------------------------------------------------------------- the cantilever: vibration and statics
def _first_frequency(n) -> float:
    """The first eigenfrequency of the semi-discrete cantilever linearized at rest (lambda = 0 there):
    P^T K P x = omega^2 P^T M P x with K = D^2 V by AD and P a basis of ker G(q0)."""
    asm = cantilever(n)
    sysm = asm.system()
    q0 = jnp.asarray(asm.initial_state()[0])
    beam = asm.bodies[0]
    K = np.asarray(jax.jit(jax.hessian(beam.strain_energy))(q0))
    P = sl.null_space(np.asarray(jax.jacfwd(sysm.constraints)(q0)))
    w2 = sl.eigh(P.T @ K @ P, P.T @ sysm.mass_matrix @ P, eigvals_only=True)
    assert w2[0] > 0  # clamped: no rigid-body mode is left
    return float(np.sqrt(w2[0]) / (2 * np.pi))


@pytest.mark.parametrize("n, bound", [(10, 1.5e-3), (20, 3.5e-4), pytest.param(40, 6e-5, marks=pytest.mark.slow)])
def test_cantilever_first_bending_frequency_approaches_euler_bernoulli(n, bound):
    """f_1 of the small-amplitude free vibration vs 1.875^2 sqrt(EI/(rho A L^4)) / 2 pi = 8.3552 Hz:
    relative error 1.13e-3 (10 elements), 2.25e-4 (20), -3.5e-6 (40), converging like n^-2."""
    f1 = _first_frequency(n)
    err = (f1 - F_EB) / F_EB
    assert abs(err) <= bound, (n, f1, F_EB, err)


def _static_tip_deflection(n, P):
    """The equilibrium of the cantilever under the tip load -P e3: Newton on D(V - f.q + lambda.g) = 0,
    g = 0 (AD, the KKT system), from the reference configuration."""
    asm = cantilever(n, P)
    sysm = asm.system()
    q0 = jnp.asarray(asm.initial_state()[0])
    d, m = q0.shape[0], sysm.constraints(q0).shape[0]
    f = sysm.external_force(q0, jnp.zeros(d), 0.0)

    def R(x):
        q, lam = x[:d], x[d:]
        return jnp.concatenate(
            [jax.grad(lambda y: sysm.potential(y) - f @ y + lam @ sysm.constraints(y))(q), sysm.constraints(q)]
        )

    Rj, Jj = jax.jit(R), jax.jit(jax.jacfwd(R))
    x = jnp.concatenate([q0, jnp.zeros(m)])
    for _ in range(8):
        dx = jnp.linalg.solve(Jj(x), Rj(x))
        x = x - dx
        if float(jnp.max(jnp.abs(dx[:d]))) <= 1e-15:
            break
    assert float(jnp.max(jnp.abs(sysm.constraints(x[:d])))) <= 1e-13
    return float(-x[12 * n + 2])


@pytest.mark.parametrize("n, bound", [(10, 3e-3), (20, 7e-4), pytest.param(40, 1.2e-4, marks=pytest.mark.slow)])
def test_cantilever_static_tip_deflection(n, bound):
    """Tip deflection under a small tip load vs P L^3 / (3 EI): relative error -2.42e-3 (10 elements),
    -5.47e-4 (20), -7.8e-5 (40): about -1/(4 n^2) plus the shear compliance P L / (kappa G A) (+7.8e-5)."""
    P = 0.01  # N: the deflection is 1.9e-5 m, deep in the linear range
    w = _static_tip_deflection(n, P)
    exact = P * L_**3 / (3 * E_ * I_)
    err = (w - exact) / exact
    assert abs(err) <= bound, (n, w, exact, err)


@pytest.mark.slow
def test_cantilever_free_vibration_in_time():
    """A run of the small-amplitude free vibration (vi-lagrange, 10 elements, started with the
    velocity of the first mode, 100 steps per period): the frequency of the tip's oscillation, from its
    zero crossings, is the modal frequency of the same semi-discrete model shifted as the midpoint rule
    shifts it, (2/h) atan(omega h / 2), to 1e-6 (measured 1.6e-7), and within 1.5e-3 of Euler-Bernoulli
    (measured 8.0e-4: 1.13e-3 of the spatial discretization, -3.3e-4 of the time step)."""
    n = 10
    asm = cantilever(n)
    sysm = asm.system()
    q0 = jnp.asarray(asm.initial_state()[0])
    beam = asm.bodies[0]
    K = np.asarray(jax.hessian(beam.strain_energy)(q0))
    P = sl.null_space(np.asarray(jax.jacfwd(sysm.constraints)(q0)))
    w2, X = sl.eigh(P.T @ K @ P, P.T @ sysm.mass_matrix @ P)
    k = 0  # the first bending mode (one of the two of the square section)
    v0 = P @ X[:, k]
    v0 *= 1e-2 / np.max(np.abs(v0))  # tip speed 1e-2 m/s: amplitude ~2e-4 m = 2e-4 L
    f_modal = np.sqrt(w2[k]) / (2 * np.pi)
    h = 1.0 / f_modal / 100
    problem = asm.problem().replace(v0=v0)
    sol = lv.simulate(problem, "vi-lagrange", h=h, t_end=2.2 / f_modal, tol=1e-10, progress=False)
    tip = sol.q[:, 12 * n + 1 : 12 * n + 3]
    z = tip[:, int(np.argmax(np.max(np.abs(tip), axis=0)))]
    s = np.sign(z)
    i = np.flatnonzero(s[:-1] * s[1:] < 0)
    tc = sol.t[i] - z[i] * (sol.t[i + 1] - sol.t[i]) / (z[i + 1] - z[i])
    period = 2 * np.mean(np.diff(tc))
    f_run = 1.0 / period
    omega = 2 * np.pi * f_modal
    f_discrete = 2.0 / h * np.arctan(omega * h / 2) / (2 * np.pi)  # the midpoint rule's frequency
    assert abs(f_run - f_discrete) / f_modal <= 1e-6, (f_run, f_discrete, f_modal)
    assert abs(f_run - F_EB) / F_EB <= 1.5e-3


# ---------------------------------------------------------------- joints and loads on beam nodes
def test_hinge_and_clamp_constraints_on_beam_nodes():
    """A 3D revolute joint (axis e3) between a beam node and a rigid body: x_A - x_B and
    (n_alpha . D_A) . a_B as written by hand; a rotation of the body about the hinge axis is tangent to
    the constraints (G v = 0), a rotation about a normal axis is not. A clamp allows neither."""
    beam = lb.Beam("beam", (0, 0, 0), (1, 0, 0), (1, 1, 1, 1, 1, 1), (1, 0.1, 0.1), n_elements=2, d1=(0, 1, 0))
    body = lb.RigidBody("arm", 1.0, (0.1, 0.1, 0.1), position=(1.0, 0.0, 0.5), directors=np.eye(3))
    joint = lb.Revolute("R", beam.node(2), body.point((0, 0, -0.5)), axis=(0, 0, 1))
    asm = lb.Assembly([beam, body], joints=[joint], name="hinge")
    sysm = asm.system()
    q0, _ = asm.initial_state()
    qj = jnp.asarray(q0 + 0.01 * RNG.standard_normal(q0.size))
    g = np.asarray(sysm.constraints(qj))[-5:]
    Y = np.asarray(qj[:36]).reshape(3, 4, 3)[2]
    phi_b, D_b = np.asarray(qj[36:39]), np.asarray(qj[39:48]).reshape(3, 3)
    # axis e3 = d2 of the beam node (d1 = e2, d3 = e1) and d3 of the arm
    n1, n2 = lb.joints._normals(np.array([0.0, 1.0, 0.0]), 3)
    hand = np.concatenate([Y[0] - (phi_b - 0.5 * D_b[2]), [(n1 @ Y[1:]) @ D_b[2], (n2 @ Y[1:]) @ D_b[2]]])
    np.testing.assert_allclose(g, hand, atol=1e-15)
    assert sysm.constraint_names[-2:] == ("R.revolute.axis[n1]", "R.revolute.axis[n2]")
    G = np.asarray(jax.jacfwd(sysm.constraints)(jnp.asarray(q0)))

    def turn(axis):  # the arm turning about its hinge point
        v = np.zeros(q0.size)
        w = np.asarray(axis, float)
        v[36:39] = np.cross(w, [0.0, 0.0, 0.5])
        for i in range(3):
            v[39 + 3 * i : 42 + 3 * i] = np.cross(w, np.eye(3)[i])
        return v

    assert np.max(np.abs(G @ turn((0, 0, 1)))) <= 1e-15
    assert np.max(np.abs(G @ turn((1, 0, 0)))) >= 0.1
    clamp = lb.Assembly([beam, body], joints=[lb.Clamp("C", beam.node(2), body.point((0, 0, -0.5)))])
    Gc = np.asarray(jax.jacfwd(clamp.system().constraints)(jnp.asarray(q0)))
    assert np.max(np.abs(Gc @ turn((0, 0, 1)))) >= 0.1
    assert np.linalg.matrix_rank(Gc) == Gc.shape[0]
    with pytest.raises(ValueError, match="director frames"):
        lb.Assembly(
            [lb.PointMass("p", 1.0, (1, 0, 0)), beam],
            joints=[lb.Revolute("X", beam.node(0), lb.PointMass("p", 1.0, (1, 0, 0)).point(), axis=(0, 0, 1))],
        )


def test_point_load_gravity_and_pulse():
    """A point load's generalized force is S^T f(t) (S the node's placement matrix), gravity on a beam
    is -m_total b . phi_centroid, and the triangular pulse is 0 -> 1 -> 0 (SLO09 §4.2)."""
    pulse = lb.triangular_pulse(0.125, 0.25)
    np.testing.assert_allclose(
        [float(pulse(t)) for t in (-1.0, 0.0, 0.0625, 0.125, 0.2, 0.25, 0.3)], [0, 0, 0.5, 1, 0.4, 0, 0], atol=1e-15
    )
    beam = lb.Beam(
        "b",
        (0, 0, 0),
        (2, 0, 0),
        (1, 1, 1, 1, 1, 1),
        (3.0, 0.1, 0.1),
        n_elements=4,
        d1=(0, 1, 0),
        point_masses=((2, 5.0),),
    )
    f = (0.0, 10.0, -3.0)
    X = (0.0, 0.2, 0.1)
    asm = lb.Assembly(
        [beam], forces=[lb.PointLoad("F", beam.node(3, X), f, time_function=pulse), lb.Gravity((0.0, 0.0, -9.81))]
    )
    sysm = asm.system()
    q = jnp.asarray(asm.initial_state()[0] + 0.01 * RNG.standard_normal(beam.size))
    S = beam.placement_matrix((3.0,) + X)
    np.testing.assert_allclose(sysm.external_force(q, q * 0, 0.0625), 0.5 * S.T @ np.asarray(f), atol=1e-15)
    np.testing.assert_allclose(sysm.external_force(q, q * 0, 0.3), 0.0, atol=0)
    q0 = jnp.asarray(asm.initial_state()[0])
    assert float(sysm.potential(q0)) == pytest.approx(0.0, abs=1e-12)  # centroid at z = 0
    up = q0.at[np.arange(beam.n_nodes) * 12 + 2].add(0.3)  # lift every node by 0.3
    assert float(sysm.potential(up)) == pytest.approx((3.0 * 2 + 5.0) * 9.81 * 0.3, rel=1e-14)
    # gravity along e3 leaves the conservative part J3, L1, L2; the load along (0, 10, -3) breaks L2
    # and J3 too: only L1 is conserved
    assert [s.name for s in asm.symmetries()] == ["J3", "L1", "L2"]
    assert [s.name for s in asm.symmetries(conserved=True)] == ["L1"]


def test_drawings_of_a_beam_in_3d_and_projected(tmp_path):
    """snapshot and animate draw beams (centre lines, elements coloured by a stress resultant) in 3D and
    projected onto a coordinate plane; bad options are refused with the valid ones named."""
    from types import SimpleNamespace

    beam = lb.Beam(
        "b",
        (0, 0, 0),
        (1, 0, 0),
        (3.0, 2.0, 10.0, 0.5, 0.3, 0.4),
        (1.0, 0.1, 0.1),
        n_elements=4,
        d1=(0, 1, 0),
        point_masses=((2, 1.0),),
    )
    asm = lb.Assembly([beam], joints=[lb.Clamp("root", beam.node(0), lb.ground((0, 0, 0)))])
    problem = asm.problem()
    Y = beam.reference_nodes()
    qs = []
    for a in np.linspace(0.0, 0.3, 5):  # the centre line bent towards d1 = e2, the frames kept: shear
        Z = Y.copy()
        Z[:, 0, 1] = a * Z[:, 0, 0] ** 2
        qs.append(Z.reshape(-1))
    run = SimpleNamespace(t=np.linspace(0, 1, 5), q=np.array(qs), problem=problem, scheme="by hand")
    r = lb.stress_resultants(run)
    assert r["N1"].shape == (5, 4) and np.max(np.abs(r["N1"][-1])) > np.max(np.abs(r["N1"][1])) > 0
    p1 = lb.draw.snapshot(run, path=tmp_path / "a.png", color_by="N1")
    p2 = lb.draw.snapshot(run, path=tmp_path / "b.png", view="xy", color_by="stress", color_range=(0, 1))
    p3 = lb.draw.animate(run, tmp_path / "c.gif", view="xy", color_by="stress")
    for p in (p1, p2, p3):
        assert (tmp_path / p).stat().st_size > 5_000
    with pytest.raises(ValueError, match="color_range"):
        lb.draw.snapshot(run, path=tmp_path / "d.png", color_by="stress", color_range=(1, 0))
    with pytest.raises(ValueError, match="beams"):
        lb.stress_resultants(SimpleNamespace(q=run.q, problem=lv.examples.load("heavy-top")))
