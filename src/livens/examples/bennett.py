"""The Bennett linkage: a spatial 4R loop that moves although the mobility count says it cannot ([Ben03]).

Four links joined by four revolute joints in a closed loop, opposite links equal: lengths a, b, a, b
and twist angles alpha, beta, alpha, beta (the common normals and the angles between consecutive
joint axes), with the Bennett condition a / sin(alpha) = b / sin(beta). In Denavit-Hartenberg form
([McC90]; [Ben03] for the mechanism) link i carries the frame i, T_i = Rot_z(theta_i)
Trans_x(a_i) Rot_x(alpha_i) maps frame i-1 to frame i, z_{i-1} is the axis of joint i, and the loop
closes, T_1 T_2 T_3 T_4 = I, along a one-parameter family:

    theta3 = -theta1,  theta4 = -theta2  (mod 2 pi),
    tan(theta1/2) tan(theta2/2) = sin((beta + alpha)/2) / sin((beta - alpha)/2)

(Bennett's relation [Ben03], [Bak79]; the signs are those of the transforms above, checked by building
the chain: :func:`chain` closes to round-off at every theta1). Link 4 is the ground, its frame the
space frame: joint 1 on the axis e3 through the origin, joint 4 at o3 = -b e1 on the fixed axis
z3 = (0, sin(beta), cos(beta)).

Bodies: links 1-3 as :class:`~livens.bodies.RigidBody` rods of mass ``mass`` and radius ``radius``
(J = (m r^2/2, m (l^2/12 + r^2/4), m (l^2/12 + r^2/4))), directors (d1, d2, d3) = (x_i, y_i, z_i) of
frame i: d1 along the common normal from joint i to joint i+1, d3 the axis of joint i+1. Joints: four
3D :class:`~livens.bodies.Revolute` hinges J1-J4 with the skew axes z0-z3 of the initial
configuration. Coordinates d = 36 (phi, d1, d2, d3 of three links); equations m = 3 x 6
orthonormality + 4 x 5 hinge = 38, of rank 35 on the whole loop (measured: the 35th singular value
of G stays between 0.27 and 0.30 over a full turn): one degree of freedom, where the
Gruebler-Kutzbach count 6 x 3 - 5 x 4 = -2 gives none. livens finds the rank at set-up
(:mod:`livens.redundancy`, a ``RedundantConstraintsNotice``) and solves with 35 equations. Which three
it leaves out matters here: the last hinge's three out-of-plane equations (J4.revolute.z and its two
axis equations), the choice in the order given, lose rank where link 1 lies in line with the ground
link, theta1 = 0 or pi (their 35th singular value falls from 0.18 to 0 there while that of all 38
equations stays at 0.27). livens' set-up walks the manifold from q0 and keeps a choice that stays well
conditioned along it: at the defaults L2.orthonormal[d1.d1], J2.revolute.axis[n2] and
J4.revolute.axis[n2], whose 35th singular value stays above 0.12 over a full turn (measured,
omega0 = 6; tests/test_overconstrained_examples.py checks > 0.1), against 0.27 for all 38 equations.

The default motion: with gravity b = ``gravity`` e2 (the loop hangs from its ground link, V is least
near theta1 = 1.4) theta1 swings between 0.60 and 2.04 (measured, T = 2); ``omega0`` = 6 turns the
loop fully (tests/test_overconstrained_examples.py, EM).

Initial state: joint angle theta1 = ``theta0``, turning at ``omega0``; theta2 from Bennett's relation
and theta2' = -theta1' sin(theta2) / sin(theta1) = -theta1' K / (sin^2(theta1/2) + K^2 cos^2(theta1/2))
(its derivative, K the ratio above), theta3' = -theta1'. The links' angular velocities omega_i =
omega_{i-1} + theta_i' z_{i-1} and the velocities of their centres follow from rigid-body kinematics,
so that G(q0) v0 = 0 to round-off. Defaults: a = 1, alpha = pi/6, beta = pi/3 (b = a sin(beta) /
sin(alpha) = sqrt(3)), masses 1, radius 0.1, theta0 = pi/2, omega0 = 2 rad/s (the links turn at up to
2.3 rad/s); h = 0.01, T = 2.

Parameter range: 0 < alpha, beta < pi and alpha != beta (alpha = beta makes the ratio K infinite).
Every scheme that accepts the system runs the defaults to T (the slow test tests/test_examples_defaults.py
checks it). VI-S (``ggl-vi``) is the fragile one here: its Newton iteration fails with ``omega0`` = 6 at
h = 0.01 and with thin rods (radius 0.02), also on the open chain J1-J3 without J4, so not because of
the redundancy (observed; no test repeats it). Scale h with 1 / max |omega| of the links.

References: [Ben03], [Bak79], [McC90] (the bibliography; McCarthy for the Denavit-Hartenberg
parameters of spatial linkages).
"""

import numpy as np

from .. import bodies as lb
from ..problem import Problem
from . import register


def dh(theta: float, a: float, alpha: float) -> np.ndarray:
    """T = Rot_z(theta) Trans_x(a) Rot_x(alpha) (4 x 4, no offset along z)."""
    ct, st, ca, sa = np.cos(theta), np.sin(theta), np.cos(alpha), np.sin(alpha)
    return np.array(
        [
            [ct, -st * ca, st * sa, a * ct],
            [st, ct * ca, -ct * sa, a * st],
            [0.0, sa, ca, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


def bennett_ratio(alpha: float, beta: float) -> float:
    """K = sin((beta + alpha)/2) / sin((beta - alpha)/2), tan(theta1/2) tan(theta2/2) = K."""
    return float(np.sin(0.5 * (beta + alpha)) / np.sin(0.5 * (beta - alpha)))


def joint_angles(theta1: float, alpha: float, beta: float) -> np.ndarray:
    """(theta1, theta2, theta3, theta4) on the Bennett loop (module docstring)."""
    K = bennett_ratio(alpha, beta)
    # tan(theta2/2) = K / tan(theta1/2), written without the poles of tan
    theta2 = 2.0 * np.arctan2(K * np.cos(0.5 * theta1), np.sin(0.5 * theta1))
    return np.array([theta1, theta2, -theta1, -theta2])


def chain(theta: np.ndarray, a: float, b: float, alpha: float, beta: float) -> list[np.ndarray]:
    """The frames 0-4 (4 x 4) of the open chain T_1 ... T_i for joint angles ``theta``; the loop is
    closed where frame 4 equals frame 0 (the identity)."""
    frames = [np.eye(4)]
    for th, ai, al in zip(theta, (a, b, a, b), (alpha, beta, alpha, beta)):
        frames.append(frames[-1] @ dh(th, ai, al))
    return frames


def _rod(
    name: str, frame: np.ndarray, length: float, mass: float, radius: float, omega: np.ndarray, velocity: np.ndarray
) -> "lb.RigidBody":
    """Link i as a solid rod along x_i ending at the origin of frame i (its centre at o_i - l/2 x_i)."""
    R, o = frame[:3, :3], frame[:3, 3]
    return lb.rod(name, length, mass, radius, o - 0.5 * length * R[:, 0], tuple(R.T), velocity, omega)


def assembly(
    a: float = 1.0,
    alpha: float = np.pi / 6,
    beta: float = np.pi / 3,
    mass: float = 1.0,
    radius: float = 0.1,
    theta0: float = np.pi / 2,
    omega0: float = 2.0,
    gravity: float = 9.81,
) -> "lb.Assembly":
    """The Bennett linkage as an :class:`livens.bodies.Assembly` (module docstring)."""
    if not (0 < alpha < np.pi and 0 < beta < np.pi and abs(np.sin(0.5 * (beta - alpha))) > 1e-8):
        raise ValueError(f"bennett-linkage: need 0 < alpha, beta < pi and alpha != beta; got {alpha}, {beta}.")
    b = a * np.sin(beta) / np.sin(alpha)
    th = joint_angles(theta0, alpha, beta)
    F = chain(th, a, b, alpha, beta)
    closure = np.max(np.abs(F[4] - np.eye(4)))
    if closure > 1e-10:  # a guard on the closed form (module docstring)
        raise ValueError(
            f"bennett-linkage: the loop does not close at theta0 = {theta0} (|T1..T4 - I| = {closure:.2e})."
        )
    # velocities: theta2' from the derivative of Bennett's relation, theta3' = -theta1'
    w1 = float(omega0)
    K = bennett_ratio(alpha, beta)
    w2 = -w1 * K / (np.sin(0.5 * th[0]) ** 2 + K**2 * np.cos(0.5 * th[0]) ** 2)  # = -w1 sin(theta2) / sin(theta1)
    rates = (w1, w2, -w1)
    z = [f[:3, 2] for f in F]
    o = [f[:3, 3] for f in F]
    omegas, vel, w, v_o = [], [], np.zeros(3), np.zeros(3)  # v_o: velocity of o_{i-1}
    for i, (length, rate) in enumerate(zip((a, b, a), rates)):
        w = w + rate * z[i]  # omega_i = omega_{i-1} + theta_i' z_{i-1}
        centre = o[i + 1] - 0.5 * length * F[i + 1][:3, 0]
        omegas.append(w)
        vel.append(v_o + np.cross(w, centre - o[i]))
        v_o = v_o + np.cross(w, o[i + 1] - o[i])
    links = [_rod(f"L{i + 1}", F[i + 1], length, mass, radius, omegas[i], vel[i]) for i, length in enumerate((a, b, a))]
    L1, L2, L3 = links
    ha, hb = 0.5 * a, 0.5 * b
    joints = [
        lb.Revolute("J1", L1.point((-ha, 0.0, 0.0)), lb.ground(o[0]), axis=z[0]),
        lb.Revolute("J2", L2.point((-hb, 0.0, 0.0)), L1.point((ha, 0.0, 0.0)), axis=z[1]),
        lb.Revolute("J3", L3.point((-ha, 0.0, 0.0)), L2.point((hb, 0.0, 0.0)), axis=z[2]),
        lb.Revolute("J4", L3.point((ha, 0.0, 0.0)), lb.ground(o[3]), axis=z[3]),
    ]
    return lb.Assembly(bodies=links, joints=joints, forces=[lb.Gravity((0.0, gravity, 0.0))], name="bennett-linkage")


@register("bennett-linkage")
def bennett_linkage(
    a: float = 1.0,
    alpha: float = np.pi / 6,
    beta: float = np.pi / 3,
    mass: float = 1.0,
    radius: float = 0.1,
    theta0: float = np.pi / 2,
    omega0: float = 2.0,
    gravity: float = 9.81,
) -> Problem:
    """The Bennett linkage [Ben03], link 4 grounded (38 equations of rank 35; module docstring)."""
    params = dict(a=a, alpha=alpha, beta=beta, mass=mass, radius=radius, theta0=theta0, omega0=omega0, gravity=gravity)
    return assembly(**params).problem(h=0.01, t_end=2.0, name="bennett-linkage", parameters=params)
