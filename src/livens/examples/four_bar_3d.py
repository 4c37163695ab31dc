"""A planar four-bar linkage built in 3D with four parallel hinges: an overconstrained mechanism.

Crank A-B, coupler B-C and rocker D-C turn in the plane x-y about the ground pins A = (0, 0, 0) and
D = (``ground``, 0, 0); each link is a :class:`~livens.bodies.RigidBody` in director form (a solid
rod of radius ``radius``, J = (m r^2/2, m (l^2/12 + r^2/4), m (l^2/12 + r^2/4)), d1 along the rod from
its first to its second end, d3 = e3) and the four hinges are 3D :class:`~livens.bodies.Revolute`
joints with axis e3. Coordinates: q = (phi, d1, d2, d3) of crank, coupler and rocker, d = 36.
Equations: 3 x 6 orthonormality and 4 x 5 hinge equations (x_A - x_B = 0 and two axis equations
per hinge), m = 38, of rank 35 at every configuration: the four parallel hinges restrain the
out-of-plane motion three times over (a planar loop closes in the plane by itself). One degree of
freedom, where the Gruebler-Kutzbach count 6 x 3 - 5 x 4 = -2 gives none. livens finds the rank at
set-up (:mod:`livens.redundancy`, a ``RedundantConstraintsNotice``) and drops the three equations
that depend on the earlier ones (tests/test_overconstrained.py checks the CLI's list): D.revolute.z, D.revolute.axis[n1] and
D.revolute.axis[n2] (the last hinge's out-of-plane equations); ``Solution.lam`` has zeros there and
``Solution.constraint_residual`` reports all 38.

Initial state: the crank at angle ``theta0`` from e1, turning at ``omega0`` (counter-clockwise
positive); C at the intersection of the circles about B and D above the line B-D (the open
assembly); the coupler's and rocker's angular velocities from the planar velocity loop
omega1 e3 x (B - A) + omega2 e3 x (C - B) = omega3 e3 x (C - D), so that G(q0) v0 = 0 (to round-off).
Gravity b = -``gravity`` e2, in the plane of motion. Defaults: links 1, 2, 1.5 and ground 2 (a
Grashof crank-rocker: s + l = 3 < p + q = 3.5, the crank turns fully and no configuration is
singular), masses 1, radius 0.02, theta0 = pi/3, omega0 = 2 rad/s; h = 0.01, T = 2 (the crank turns
once, at 1.0-8.9 rad/s, the coupler and rocker at up to 4.5 rad/s). The independent subset livens keeps (all of hinges A-C, the in-plane equations
of D) has full rank over the whole turn.

No paper has this system: it is livens' own test case of redundant equations, and its parameters are
livens' choice. Independent reference: tests/_planar_four_bar.py integrates the same linkage in its three link
angles with SciPy (tests/test_overconstrained_examples.py compares the crank angle).

Parameter range: any lengths that close the loop at theta0 (a ValueError says which do not); the
mechanism is free of singular configurations only where the link lengths satisfy s + l < p + q
strictly (the change-point linkage s + l = p + q folds flat, where G loses rank). At the defaults
every scheme runs to T with the equations it enforces within 10 tol and a bounded energy error (the slow
test tests/test_examples_defaults.py). Scale h with 1 / max |omega| of the links.
"""

import numpy as np

from .. import bodies as lb
from ..problem import Problem
from . import register

E3 = np.array([0.0, 0.0, 1.0])


def _cross2(w: float, r: np.ndarray) -> np.ndarray:
    """w e3 x r for r in the plane (the velocity of a point at r from a pin turning at w)."""
    return w * np.array([-r[1], r[0], 0.0])


def configuration(
    crank: float, coupler: float, rocker: float, ground: float, theta0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pins A, B, C, D (3D, z = 0) with the crank at ``theta0``, C on the open branch (to the left of
    B -> D)."""
    A, D = np.zeros(3), np.array([float(ground), 0.0, 0.0])
    B = A + crank * np.array([np.cos(theta0), np.sin(theta0), 0.0])
    r = np.linalg.norm(D - B)
    x = (coupler**2 - rocker**2 + r**2) / (2 * r)
    if not (r > 0 and coupler**2 - x**2 >= 0):
        raise ValueError(
            f"four-bar-3d: links crank = {crank}, coupler = {coupler}, rocker = {rocker}, ground = {ground} "
            f"do not close at theta0 = {theta0} (|B - D| = {r:.6g})."
        )
    u = (D - B) / r
    C = B + x * u + np.sqrt(coupler**2 - x**2) * np.cross(E3, u)
    return A, B, C, D


def angular_velocities(
    A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray, omega0: float
) -> tuple[float, float, float]:
    """(omega1, omega2, omega3) of crank, coupler and rocker from the planar velocity loop
    omega1 e3 x (B - A) + omega2 e3 x (C - B) = omega3 e3 x (C - D), omega1 = omega0."""
    rhs = -_cross2(omega0, B - A)[:2]
    K = np.column_stack([_cross2(1.0, C - B)[:2], -_cross2(1.0, C - D)[:2]])
    w2, w3 = np.linalg.solve(K, rhs)
    return float(omega0), float(w2), float(w3)


def _rod(
    name: str, P: np.ndarray, Q: np.ndarray, mass: float, radius: float, omega: float, velocity: np.ndarray
) -> "lb.RigidBody":
    """A solid rod from P to Q turning about e3 at ``omega``; d1 along P -> Q, d3 = e3."""
    length = float(np.linalg.norm(Q - P))
    d1 = (Q - P) / length
    directors = (d1, np.cross(E3, d1), E3)
    return lb.rod(name, length, mass, radius, 0.5 * (P + Q), directors, velocity, omega * E3)


def assembly(
    crank: float = 1.0,
    coupler: float = 2.0,
    rocker: float = 1.5,
    ground: float = 2.0,
    m_crank: float = 1.0,
    m_coupler: float = 1.0,
    m_rocker: float = 1.0,
    radius: float = 0.02,
    theta0: float = np.pi / 3,
    omega0: float = 2.0,
    gravity: float = 9.81,
) -> "lb.Assembly":
    """The four-bar with 3D hinges as an :class:`livens.bodies.Assembly` (module docstring)."""
    A, B, C, D = configuration(crank, coupler, rocker, ground, theta0)
    w1, w2, w3 = angular_velocities(A, B, C, D, omega0)
    vB = _cross2(w1, B - A)
    crank_ = _rod("crank", A, B, m_crank, radius, w1, 0.5 * vB)
    coupler_ = _rod("coupler", B, C, m_coupler, radius, w2, vB + _cross2(w2, 0.5 * (C - B)))
    rocker_ = _rod("rocker", D, C, m_rocker, radius, w3, _cross2(w3, 0.5 * (C - D)))
    hc, hk, hr = 0.5 * crank, 0.5 * coupler, 0.5 * rocker
    z = tuple(E3)
    joints = [
        lb.Revolute("A", crank_.point((-hc, 0.0, 0.0)), lb.ground(A), axis=z),
        lb.Revolute("B", coupler_.point((-hk, 0.0, 0.0)), crank_.point((hc, 0.0, 0.0)), axis=z),
        lb.Revolute("C", rocker_.point((hr, 0.0, 0.0)), coupler_.point((hk, 0.0, 0.0)), axis=z),
        lb.Revolute("D", rocker_.point((-hr, 0.0, 0.0)), lb.ground(D), axis=z),
    ]
    return lb.Assembly(
        bodies=[crank_, coupler_, rocker_],
        joints=joints,
        forces=[lb.Gravity((0.0, -gravity, 0.0))],
        name="four-bar-3d",
    )


@register("four-bar-3d")
def four_bar_3d(
    crank: float = 1.0,
    coupler: float = 2.0,
    rocker: float = 1.5,
    ground: float = 2.0,
    m_crank: float = 1.0,
    m_coupler: float = 1.0,
    m_rocker: float = 1.0,
    radius: float = 0.02,
    theta0: float = np.pi / 3,
    omega0: float = 2.0,
    gravity: float = 9.81,
) -> Problem:
    """A planar four-bar with four 3D hinges (38 equations of rank 35; module docstring)."""
    params = dict(
        crank=crank,
        coupler=coupler,
        rocker=rocker,
        ground=ground,
        m_crank=m_crank,
        m_coupler=m_coupler,
        m_rocker=m_rocker,
        radius=radius,
        theta0=theta0,
        omega0=omega0,
        gravity=gravity,
    )
    return assembly(**params).problem(h=0.01, t_end=2.0, name="four-bar-3d", parameters=params)
