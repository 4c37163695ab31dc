"""livens.bodies: assembled M, g, G, V and C against hand-written expressions (KBS23a §5, eq 58-61,
70-74, 77-78; KBS23b eq 100-104, 116-117), symmetries (KBS23b eq 41, 45), names and refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import bodies as lb
from livens.examples.heavy_top import heavy_top, spin_rate
from livens.mechanics import mechanics

RNG = np.random.default_rng(20230705)


# ---------------------------------------------------------------- heavy top: blocks == hand-written
def _hand_written_top(mass=0.7069, inertia=(5.3014e-4,) * 3, length=0.075, gravity=9.81):
    """The heavy top as written by hand before the blocks existed (KBS23b eq 100-104)."""
    I1, I2, I3 = inertia
    E = (0.5 * (I2 + I3 - I1), 0.5 * (I3 + I1 - I2), 0.5 * (I1 + I2 - I3))
    M = np.diag([mass] * 3 + [E[0]] * 3 + [E[1]] * 3 + [E[2]] * 3)
    b = jnp.array([0.0, 0.0, -gravity])

    def g(q):
        phi, d1, d2, d3 = q[0:3], q[3:6], q[6:9], q[9:12]
        return jnp.concatenate(
            [
                jnp.array(
                    [0.5 * (d1 @ d1 - 1.0), 0.5 * (d2 @ d2 - 1.0), 0.5 * (d3 @ d3 - 1.0), d1 @ d2, d1 @ d3, d2 @ d3]
                ),
                phi / length - d3,
            ]
        )

    return M, (lambda q: -mass * b @ q[0:3]), g


def test_heavy_top_from_blocks_equals_hand_written():
    problem = heavy_top()
    system = problem.system
    assert isinstance(system, lb.AssembledSystem)
    M, V, g = _hand_written_top()
    np.testing.assert_array_equal(system.mass_matrix, M)
    V_, g_ = system.bound("potential"), system.bound("constraints")
    ours = jax.jit(lambda q: (V_(q), g_(q), jax.jacfwd(g_)(q)))
    hand = jax.jit(lambda q: (V(q), g(q), jax.jacfwd(g)(q)))
    for _ in range(5):
        q = jnp.asarray(RNG.normal(size=12))
        (V1, g1, G1), (V2, g2, G2) = ours(q), hand(q)
        np.testing.assert_allclose(V1, V2, rtol=1e-14, atol=1e-16)
        np.testing.assert_allclose(g1, g2, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(G1, G2, rtol=1e-14, atol=1e-14)
    # same initial state as KBS23b eq 108-112 and the one symmetry, rotation about e3 (eq 105-107)
    assert abs(problem.q0[2] - 0.0375) < 1e-15
    assert [s.name for s in problem.symmetries] == ["J3"]
    xi = problem.symmetries[0].xi
    e3 = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(xi, np.kron(np.eye(4), e3))
    assert system.constraint_names[6:] == ("tip.fixed.x", "tip.fixed.y", "tip.fixed.z")
    assert spin_rate(0.7069, (5.3014e-4,) * 3, 0.075, 9.81, 10.0, np.pi / 3) == pytest.approx(135.6, abs=0.05)


def test_rigid_body_euler_tensor_and_director_velocities():
    """E_i = 1/2 (J_j + J_k - J_i) (KBS23a eq 60) and d_i' = omega x d_i (KBS23a eq 68b)."""
    J = (2.0, 3.0, 4.0)
    R = np.linalg.qr(RNG.normal(size=(3, 3)))[0]
    w = RNG.normal(size=3)
    body = lb.RigidBody("b", mass=1.5, inertia=J, directors=R.T, angular_velocity=w)
    np.testing.assert_allclose(body.euler, (2.5, 1.5, 0.5))
    np.testing.assert_allclose(body.mass_diagonal(), np.repeat([1.5, 2.5, 1.5, 0.5], 3))
    q0, v0 = body.initial_state()
    G = jax.jacfwd(body.internal_constraints)(jnp.asarray(q0))
    np.testing.assert_allclose(G @ v0, 0.0, atol=1e-14)
    # rotational kinetic energy 1/2 sum E_i |d_i'|^2 = 1/2 w.J w in the body frame
    Tdir = 0.5 * sum(E * np.sum(np.cross(w, d) ** 2) for E, d in zip(body.euler, R.T))
    wb = R.T @ w
    assert Tdir == pytest.approx(0.5 * wb @ np.diag(J) @ wb, rel=1e-13)
    with pytest.raises(ValueError, match="not physical"):
        lb.RigidBody("bad", mass=1.0, inertia=(1.0, 1.0, 3.0))
    with pytest.raises(ValueError, match="not orthonormal"):
        lb.RigidBody("bad", mass=1.0, inertia=(1.0, 1.0, 1.0), directors=np.eye(3) * 1.1)


# ---------------------------------------------------------------- a small planar mechanism
def _small_mechanism():
    B = lb.PlanarRigidBody(
        "B", mass=2.0, inertia=0.24, position=(0.0, 0.6), directors=((0, 1), (-1, 0)), shape=((-0.6, 0.0), (0.6, 0.0))
    )
    P = lb.PointMass("P", mass=0.7, position=(0.9, 1.2))
    asm = lb.Assembly(
        bodies=[B, P],
        joints=[
            lb.Revolute("O", B.point((-0.6, 0.0)), lb.ground((0.0, 0.0))),
            lb.Distance("rod", B.point((0.6, 0.0)), P.point(), length=0.9),
        ],
        forces=[
            lb.Gravity((0.0, -9.81)),
            lb.Spring("k", lb.ground((1.0, 0.0)), P.point(), stiffness=30.0, rest_length=0.5),
            lb.Damper("c1", B.point((0.6, 0.0)), P.point(), eta=0.4),
            lb.Damper("c2", lb.ground((0.0, 0.0)), P.point(), eta=1.3, axial=True),
        ],
        name="small",
    )
    return asm


def test_small_mechanism_M_g_V_C_against_hand_written():
    asm = _small_mechanism()
    system = asm.system()
    assert asm.d == 8 and asm.m == 3 + 2 + 1
    M = np.diag([2.0, 2.0, 0.12, 0.12, 0.12, 0.12, 0.7, 0.7])  # KBS23a eq 71 with E = J/2
    np.testing.assert_array_equal(system.mass_matrix, M)

    def g(q):  # KBS23a eq 73, 74a, KBS23b eq 117
        phi, d1, d2, x = q[0:2], q[2:4], q[4:6], q[6:8]
        r = phi + 0.6 * d1 - x
        return jnp.concatenate(
            [
                jnp.array([0.5 * (d1 @ d1 - 1), 0.5 * (d2 @ d2 - 1), d1 @ d2]),
                phi - 0.6 * d1,
                jnp.array([0.5 * (r @ r / 0.81 - 1)]),
            ]
        )

    def V(q):
        x = q[6:8]
        return (
            2.0 * 9.81 * q[1] + 0.7 * 9.81 * x[1] + 0.5 * 30.0 * (jnp.linalg.norm(x - jnp.array([1.0, 0.0])) - 0.5) ** 2
        )

    def C(q):  # KBS23a eq 77-78: C = eta B^T B for v_rel = B v; axial: eta e e^T on the particle
        Bm = np.hstack([np.eye(2), 0.6 * np.eye(2), np.zeros((2, 2)), -np.eye(2)])
        out = 0.4 * Bm.T @ Bm
        x = np.asarray(q[6:8])
        e = x / np.linalg.norm(x)
        out[6:8, 6:8] += 1.3 * np.outer(e, e)
        return out

    mech = mechanics(system, np.zeros(8))
    ours = jax.jit(lambda q: (system.constraints(q), mech.G(q), system.potential(q), system.dissipation(q)))
    hand = jax.jit(lambda q: (g(q), jax.jacfwd(g)(q), V(q)))
    for _ in range(4):
        q = jnp.asarray(RNG.normal(size=8))
        (g1, G1, V1, C1), (g2, G2, V2) = ours(q), hand(q)
        np.testing.assert_allclose(g1, g2, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(G1, G2, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(V1, V2, rtol=1e-13)
        np.testing.assert_allclose(C1, C(q), rtol=1e-13, atol=1e-14)
    assert system.coordinate_names == ("B.phi.x", "B.phi.y", "B.d1.x", "B.d1.y", "B.d2.x", "B.d2.y", "P.x", "P.y")
    assert system.constraint_names == (
        "B.orthonormal[d1.d1]",
        "B.orthonormal[d2.d2]",
        "B.orthonormal[d1.d2]",
        "O.revolute.x",
        "O.revolute.y",
        "rod.distance",
    )
    # invariants declared for Greenspan's formula reproduce V (KBS23b eq 122-124)
    pi_fn, pots = system.invariants
    q = jnp.asarray(RNG.normal(size=8))
    assert float(jnp.sum(pots(pi_fn(q)))) == pytest.approx(float(V(q)), rel=1e-13)
    assert float(pi_fn(q)[1]) == pytest.approx(float(jnp.sum((q[6:8] - jnp.array([1.0, 0.0])) ** 2)), rel=1e-14)
    # the gravity and the ground attachments leave no symmetry
    assert asm.symmetries() == []


def test_spring_laws():
    """Linear spring 1/2 k (l - L)^2 and the nonlinear one of KBS23b eq 116, 1/2 k (l^2 - L^2)^2."""
    a = lb.PointMass("a", 1.0, (0.0, 0.0, 0.0))
    b = lb.PointMass("b", 1.0, (1.0, 0.0, 0.0))
    q = jnp.asarray(RNG.normal(size=6))
    ell = float(jnp.linalg.norm(q[3:] - q[:3]))
    for law, expect in (("linear", 0.5 * 50 * (ell - 1.3) ** 2), ("squared", 0.5 * 50 * (ell**2 - 1.3**2) ** 2)):
        asm = lb.Assembly([a, b], forces=[lb.Spring("s", a.point(), b.point(), 50.0, 1.3, law=law)])
        assert float(asm.system().potential(q)) == pytest.approx(expect, rel=1e-13)
    asm = lb.Assembly([a, b], forces=[lb.Spring("s", a.point(), b.point(), potential=lambda pi: pi**3)])
    assert float(asm.system().potential(q)) == pytest.approx(ell**6, rel=1e-13)
    # the default rest length is the initial distance: zero force at the start
    asm = lb.Assembly([a, b], forces=[lb.Spring("s", a.point(), b.point(), 50.0)])
    q0, _ = asm.initial_state()
    np.testing.assert_allclose(jax.grad(asm.system().potential)(jnp.asarray(q0)), 0.0, atol=1e-14)


def test_slider_rod_and_pin_constraints():
    """OnAxis keeps a point on a line, Distance a rod length (KBS23b eq 117, default: the initial
    distance), FixedPoint a point in space (KBS23b eq 104)."""
    m = lb.PointMass("m", 1.0, (0.0, 0.0, 0.5))
    asm = lb.Assembly(
        [m], joints=[lb.OnAxis("slide", m.point(), direction=(0.0, 0.0, 2.0))], forces=[lb.Gravity((0.0, 0.0, -9.81))]
    )
    g = jax.jit(asm.system().constraints)
    q = RNG.normal(size=3)
    assert float(jnp.linalg.norm(g(q))) == pytest.approx(np.hypot(q[0], q[1]), rel=1e-14)
    assert asm.constraint_names() == ("slide.on_axis[n1]", "slide.on_axis[n2]")
    assert [s.name for s in asm.symmetries()] == ["J3"]  # not L3: gravity
    a = np.array([0.0, 0.0, 0.5])
    e = np.array([1.0, 1.0, 0.0]) / np.sqrt(2.0)
    tilted = lb.Assembly([m], joints=[lb.OnAxis("s", m.point(), direction=(1.0, 1.0, 0.0), through=a)])
    dist = np.linalg.norm(np.cross(q - a, e))
    assert float(jnp.linalg.norm(tilted.system().constraints(jnp.asarray(q)))) == pytest.approx(dist, rel=1e-13)
    assert tilted.symmetries() == []  # the line misses the origin and is no coordinate axis
    top = lb.RigidBody("top", 1.0, (1.0, 1.0, 1.0), position=(0.0, 0.0, 2.0))
    rod = lb.Assembly(
        [top, m],
        joints=[
            lb.Distance("rod", top.point((0.0, 0.0, -1.0)), m.point()),
            lb.FixedPoint("pin", top.point((0.0, 0.0, 1.0))),
        ],
    )
    q0, _ = rod.initial_state()
    np.testing.assert_allclose(rod.system().constraints(jnp.asarray(q0)), 0.0, atol=1e-15)
    assert rod.layout.joints[0].length == pytest.approx(0.5)  # |(0, 0, 1) - (0, 0, 0.5)|
    assert rod.layout.joints[1].at == (0.0, 0.0, 3.0)


# ---------------------------------------------------------------- symmetries
def _free_pair(gravity=None):
    R = np.linalg.qr(RNG.normal(size=(3, 3)))[0]
    body = lb.RigidBody(
        "body",
        mass=1.3,
        inertia=(0.5, 0.7, 0.9),
        position=(0.1, -0.2, 0.3),
        directors=R.T,
        velocity=(0.2, 0.1, -0.3),
        angular_velocity=(1.0, -2.0, 0.5),
    )
    X = (0.4, 0.0, 0.0)
    x_tip = np.asarray(body.place(np.asarray(body.initial_state()[0]), X))
    v_tip = np.cross(body.angular_velocity, x_tip - np.asarray(body.position)) + np.asarray(body.velocity)
    ball = lb.PointMass("ball", 0.8, position=x_tip, velocity=v_tip)
    joints = [lb.Spherical("S", body.point(X), ball.point())]
    forces = [lb.Spring("k", body.point((0.0, 0.5, 0.0)), ball.point(), 40.0)]
    if gravity is not None:
        forces.append(lb.Gravity(gravity))
    return lb.Assembly([body, ball], joints=joints, forces=forces, name="pair")


@pytest.mark.parametrize(
    "gravity, expected",
    [
        (None, ["J1", "J2", "J3", "L1", "L2", "L3"]),
        ((0.0, 0.0, -9.81), ["J3", "L1", "L2"]),
        ((0.0, -9.81, 0.0), ["J2", "L1", "L3"]),
    ],
)
def test_symmetries_found_and_satisfy_002_eq_41(gravity, expected):
    asm = _free_pair(gravity)
    syms = asm.symmetries()
    assert [s.name for s in syms] == expected
    system = asm.system()
    q0, _ = asm.initial_state()
    mech = mechanics(system, q0)
    G0 = np.asarray(mech.G(jnp.asarray(q0)))
    candidates = [asm.rotation(np.eye(3)[i]) for i in range(3)] + [asm.translation(np.eye(3)[i]) for i in range(3)]
    dV_fn = jax.jit(jax.grad(system.potential))
    for s in candidates:
        q = RNG.normal(size=asm.d)
        dV = float(np.asarray(dV_fn(jnp.asarray(q))) @ s.generator(q))
        Gxi = np.abs(G0 @ s.generator(q0)).max()
        holds = abs(dV) < 1e-10 and Gxi < 1e-12
        assert holds == (s.name in expected), (s.name, dV, Gxi)


def test_loads_and_dampers_break_conservation_not_the_conservative_symmetries():
    """Assembly.symmetries() lists the symmetries of the conservative part (bodies, joints, gravity,
    springs), which a Problem declares; symmetries(conserved=True) those that the loads and dampers
    respect too. A damper to the ground and a load along e3 leave the conservative part's six, and
    of the whole system only the rotation about e3 (the load is parallel to it, the damper axial with
    its ground point on the axis)."""
    base = _free_pair()
    body = base.bodies[0]
    extra = [
        lb.Damper("dash", body.point((0.0, 0.0, 0.0)), lb.ground((0.0, 0.0, -1.0)), eta=0.3, axial=True),
        lb.PointLoad("push", body.point((0.1, 0.0, 0.0)), (0.0, 0.0, 2.0)),
    ]
    asm = lb.Assembly(base.bodies, joints=base.joints, forces=base.forces + tuple(extra), name="pair")
    assert [s.name for s in asm.symmetries()] == ["J1", "J2", "J3", "L1", "L2", "L3"]
    assert [s.name for s in asm.symmetries(conserved=True)] == ["J3"]
    assert [s.name for s in asm.problem().symmetries] == ["J1", "J2", "J3", "L1", "L2", "L3"]
    assert [s.name for s in base.symmetries(conserved=True)] == [s.name for s in base.symmetries()]


def test_momentum_maps_of_assembled_symmetries_are_conserved():
    """VI-S conserves the momentum maps (KBS23b eq 45) the Assembly lists, to round-off."""
    asm = _free_pair(gravity=(0.0, 0.0, -9.81))
    problem = asm.problem(h=0.01, t_end=0.3)
    sol = lv.simulate(problem, "VI-S", tol=1e-12, progress=False)
    maps = sol.momentum_maps()
    assert set(maps) == {"J3", "L1", "L2"}
    for name, J in maps.items():
        assert np.max(np.abs(J - J[0])) < 1e-11 * max(1.0, np.max(np.abs(J))), name
    # the vertical linear momentum is not conserved under gravity: the test could tell
    L3 = asm.translation((0, 0, 1)).momentum_map(sol.q, sol.p)
    assert np.max(np.abs(L3 - L3[0])) > 1e-2


def test_planar_free_pair_has_rotation_and_translations():
    b1 = lb.bar("b1", 1.0, 1.0, center=(0.0, 0.0), direction=(1.0, 0.0))
    b2 = lb.bar("b2", 1.0, 1.0, center=(1.0, 0.0), direction=(1.0, 0.0))
    asm = lb.Assembly([b1, b2], joints=[lb.Revolute("hinge", b1.point((0.5, 0)), b2.point((-0.5, 0)))])
    assert [s.name for s in asm.symmetries()] == ["J3", "L1", "L2"]
    xi = asm.symmetries()[0].xi
    q = RNG.normal(size=12)
    p = RNG.normal(size=12)
    # KBS23a eq 75: J = sum m phi.K phi' + E d.K d' with K = [[0, 1], [-1, 0]], i.e. sum q x p
    K = np.array([[0.0, 1.0], [-1.0, 0.0]])
    J75 = sum(q[2 * k : 2 * k + 2] @ K @ p[2 * k : 2 * k + 2] for k in range(6))
    assert p @ xi @ q == pytest.approx(J75, rel=1e-13)


# ---------------------------------------------------------------- refusals with names
def test_assembly_refusals_name_the_culprit():
    b = lb.bar("b", 1.0, 1.0, center=(0.0, 0.5), direction=(0.0, 1.0))
    top = lb.RigidBody("top", 1.0, (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="same space"):
        lb.Assembly([b, top])
    with pytest.raises(ValueError, match="used twice"):
        lb.Assembly([b], joints=[lb.Revolute("b", b.point((-0.5, 0)), lb.ground((0, 0)))])
    other = lb.bar("c", 1.0, 1.0, center=(3.0, 0.5), direction=(0.0, 1.0))
    with pytest.raises(ValueError, match="not in this assembly"):
        lb.Assembly([b], joints=[lb.Revolute("P", other.point((-0.5, 0)), lb.ground((0, 0)))])
    with pytest.raises(ValueError, match="planar revolute"):
        lb.Assembly([top], joints=[lb.Revolute("R", top.point((0, 0, 1)), lb.ground((0, 0, 0)))])
    with pytest.raises(ValueError, match="must be a non-empty string"):
        lb.PointMass("a b", 1.0, (0, 0))
    # an inconsistent initial state is refused by the Problem, naming the joint component
    asm = lb.Assembly([b], joints=[lb.Revolute("P1", b.point((-0.5, 0)), lb.ground((0.0, 0.1)))])
    with pytest.raises(ValueError, match=r"P1\.revolute\.y"):
        asm.problem(h=0.01, t_end=1.0)


def test_draw_refuses_a_system_not_built_from_blocks():
    from types import SimpleNamespace

    from livens.bodies import draw
    from livens.examples.pendulum_3d import pendulum_3d

    fake = SimpleNamespace(problem=pendulum_3d(), t=np.zeros(2), q=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="not built with livens.bodies.Assembly"):
        draw.animate(fake, "/tmp/never.gif")
