"""A chain of 3D rigid bodies on spherical joints: a hanging chain of rods, the first one held by a
spherical joint at the origin, swinging and turning about the vertical under gravity.

Bodies: ``n_bodies`` (default 6) :class:`~livens.bodies.RigidBody` rods made by :func:`~livens.bodies.rod`,
of length ``length``, mass ``mass`` and radius ``radius`` (J = (m r^2/2, m (l^2/12 + r^2/4),
m (l^2/12 + r^2/4)) about d1, d2, d3), d1 along the rod from its upper end P_k to its lower end
P_{k+1}. Joints: :class:`~livens.bodies.Spherical` "S0" between the first rod's upper end and the
ground point at the origin, "S1" ... between consecutive rods' ends. Gravity b = -``gravity`` e3.
Coordinates d = 12 N (phi, d1, d2, d3 per rod), equations m = 6 N orthonormality + 3 N joint
= 9 N (d = 72, m = 54 at N = 6): 3 N degrees of freedom, a step of ggl-em or ggl-vi has
3 d + 2 m = 324 Newton unknowns at N = 6.

Initial state: rod k points along u_k = (sin a cos b_k, sin a sin b_k, -cos a), tilted from the
downward vertical by ``tilt`` a and turned about e3 by b_k = k ``twist`` (a twisted, open helix); the
whole chain turns about e3 at ``omega`` as a rigid body (omega_k = omega e3, each point's velocity
omega e3 x x), so that the joint equations' velocities vanish, G(q0) v0 = 0 to round-off, and the
momentum map about e3 is J3 = omega I_33 of the chain about the vertical axis. The Assembly finds the
rotation about e3 as the system's one symmetry (the ground point lies on the axis, gravity along it):
EM keeps J3 and the energy to the Newton tolerance.

Defaults: N = 6, l = 0.5, m = 1, r = 0.05, tilt = pi/4, twist = pi/3, omega = 2 rad/s; h = 0.005, T = 1.

No paper has this system: it is livens' own test system (its parameters are livens' choice), a
mechanism of a few bodies whose step has several hundred Newton unknowns, beyond the native code's
default size limit (``EngineOptions.max_native_unknowns``); EM's tangent by bodies (from four rods,
:attr:`livens.engine.SizePolicy.em_group_unknowns`) factorizes dense blocks within it, so the default
backend runs EM's step as native code up to eleven rods (its largest block, on the multipliers of
the joints between rods, has 6 (N - 1) rows); with two and three rods EM's dense step is a large
program within ``EngineOptions.large_program_unknowns`` and runs natively too; ggl-vi's runs with XLA:
benchmarks/chain_3d.py measures both.
Independent reference: one rod (N = 1) is a heavy symmetric top pivoted at the rod's end (a Lagrange
top); tests/test_chain_3d.py compares its axis with SciPy's integration of the top's equations, and
the momentum map J3 of the six rods with omega I_33 computed from their geometry.

Parameter range: any positive lengths, masses and radii (a ValueError names a bad one). Scale h with
1 / max |omega| of the rods, which grows as the lower rods whip: at the defaults the rods turn at up
to 5.2, 7.8, 7.6, 12, 15 and 20 rad/s from the top down (measured with EM, tol 1e-12, T = 1), 0.1 rad
per step of the fastest at h = 0.005.
"""

import numpy as np

from .. import bodies as lb
from ..problem import Problem
from . import register

E3 = np.array([0.0, 0.0, 1.0])


def directions(n_bodies: int, tilt: float, twist: float) -> list[np.ndarray]:
    """u_k, the unit vectors from each rod's upper end to its lower end (module docstring)."""
    return [
        np.array([np.sin(tilt) * np.cos(k * twist), np.sin(tilt) * np.sin(k * twist), -np.cos(tilt)])
        for k in range(n_bodies)
    ]


def _frame(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An orthonormal right-handed frame (d1, d2, d3) with d1 = u."""
    helper = E3 if abs(u[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    d2 = np.cross(helper, u)
    d2 /= np.linalg.norm(d2)
    return u, d2, np.cross(u, d2)


def assembly(
    n_bodies: int = 6,
    length: float = 0.5,
    mass: float = 1.0,
    radius: float = 0.05,
    tilt: float = np.pi / 4,
    twist: float = np.pi / 3,
    omega: float = 2.0,
    gravity: float = 9.81,
) -> "lb.Assembly":
    """The chain as an :class:`livens.bodies.Assembly` (module docstring)."""
    if isinstance(n_bodies, bool) or int(n_bodies) != n_bodies or n_bodies < 1:
        raise ValueError(f"chain-3d: n_bodies must be a positive integer; got {n_bodies!r}.")
    if not (length > 0 and mass > 0 and radius > 0):
        raise ValueError(f"chain-3d: length, mass and radius must be positive; got {length!r}, {mass!r}, {radius!r}.")
    w = omega * E3
    top, rods = np.zeros(3), []
    for k, u in enumerate(directions(int(n_bodies), tilt, twist)):
        center = top + 0.5 * length * u
        rods.append(lb.rod(f"R{k}", length, mass, radius, center, _frame(u), np.cross(w, center), w))
        top = top + length * u
    half = 0.5 * length
    joints = [lb.Spherical("S0", rods[0].point((-half, 0.0, 0.0)), lb.ground((0.0, 0.0, 0.0)))]
    joints += [
        lb.Spherical(f"S{k}", rods[k].point((-half, 0.0, 0.0)), rods[k - 1].point((half, 0.0, 0.0)))
        for k in range(1, len(rods))
    ]
    return lb.Assembly(bodies=rods, joints=joints, forces=[lb.Gravity((0.0, 0.0, -gravity))], name="chain-3d")


@register("chain-3d")
def chain_3d(
    n_bodies: int = 6,
    length: float = 0.5,
    mass: float = 1.0,
    radius: float = 0.05,
    tilt: float = np.pi / 4,
    twist: float = np.pi / 3,
    omega: float = 2.0,
    gravity: float = 9.81,
) -> Problem:
    """A chain of ``n_bodies`` rods on spherical joints under gravity (livens' own test system; module
    docstring)."""
    params = dict(
        n_bodies=n_bodies,
        length=length,
        mass=mass,
        radius=radius,
        tilt=tilt,
        twist=twist,
        omega=omega,
        gravity=gravity,
    )
    return assembly(**params).problem(h=0.005, t_end=1.0, name="chain-3d", parameters=params)
