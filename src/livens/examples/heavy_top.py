"""Steady precession of a gyroscopic (heavy) top in director coordinates (KBS23b §6.2; KBS23a §5.1).

q = (phi, d1, d2, d3) in R^12 (eq 100), M = diag(m I, E1 I, E2 I, E3 I) with
E_i = 1/2 (I_j + I_k - I_i) (eq 101), six orthonormality constraints (eq 103) and the tip fixed at
the origin, phi/l - d3 = 0 (eq 104): d = 12, m = 9. Data: m = 0.7069, I1 = I2 = I3 = 5.3014e-4,
l = 0.075, nutation alpha0 = pi/3 (eq 108-110), omega_p = 10 and omega_s from the steady-precession
condition (eq 112, = 135.6). Defaults h = 0.002, T = 2 (KBS23a §5.1). Symmetry: rotation about e3
acting on all four 3-blocks (eq 105-107).

Parameter range: h and T are the papers' and every scheme runs them at the paper's data
(tests/test_examples_defaults.py). The fastest motion is the spin omega_s (135.6 rad/s, 23 steps per
turn at h = 0.002); other data change omega_s by eq 112 (a smaller I3 or omega_p spins the top
faster): scale h with 1 / omega_s.

Built from :mod:`livens.bodies`: a :class:`~livens.bodies.RigidBody` "top" (eq 100-103), a
:class:`~livens.bodies.FixedPoint` "tip" for its material point X = (0, 0, -l) with scale 1/l, so that
g_ext = (phi - l d3)/l = phi/l - d3 exactly as eq 104, and :class:`~livens.bodies.Gravity`
b = -9.81 e3 (V = -m b.phi). The Assembly finds the rotation about e3 as the only symmetry.
System parameter: ``gravity`` (:func:`with_gravity_parameter`).
"""

import numpy as np

from .. import bodies as lb
from ..problem import Problem
from . import register


def spin_rate(mass, inertia, length, gravity, omega_p, alpha0):
    """omega_s of steady precession (KBS23b eq 112)."""
    I1, _, I3 = inertia
    return mass * gravity * length / (I3 * omega_p) + (I1 + mass * length**2 - I3) / I3 * omega_p * np.cos(alpha0)


def assembly(
    mass: float = 0.7069,
    inertia=(5.3014e-4, 5.3014e-4, 5.3014e-4),
    length: float = 0.075,
    gravity: float = 9.81,
    alpha0: float = np.pi / 3,
    omega_p: float = 10.0,
) -> "lb.Assembly":
    """The top as an :class:`livens.bodies.Assembly` (KBS23b eq 100-112)."""
    c, s = np.cos(alpha0), np.sin(alpha0)
    R = np.array([[1, 0, 0], [0, c, -s], [0, s, c]])  # eq 108
    d = [R @ e for e in np.eye(3)]  # eq 109
    phi = R @ np.array([0.0, 0.0, length])  # eq 110
    omega_s = spin_rate(mass, tuple(inertia), length, gravity, omega_p, alpha0)
    omega = omega_p * np.array([0.0, 0.0, 1.0]) + omega_s * d[2]  # eq 111
    top = lb.RigidBody(
        "top",
        mass=mass,
        inertia=tuple(inertia),
        position=phi,
        directors=d,
        velocity=np.cross(omega, phi),
        angular_velocity=omega,
        shape=((0.0, 0.0, -length), (0.0, 0.0, 0.0)),
    )
    tip = lb.FixedPoint("tip", point=top.point((0.0, 0.0, -length)), at=(0.0, 0.0, 0.0), scale=1.0 / length)
    return lb.Assembly(bodies=[top], joints=[tip], forces=[lb.Gravity((0.0, 0.0, -gravity))], name="heavy-top")


@register("heavy-top")
def heavy_top(
    mass: float = 0.7069,
    inertia=(5.3014e-4, 5.3014e-4, 5.3014e-4),
    length: float = 0.075,
    gravity: float = 9.81,
    alpha0: float = np.pi / 3,
    omega_p: float = 10.0,
) -> Problem:
    """The heavy top of KBS23b §6.2 (h = 0.002, T = 2; momentum map J3, eq 107)."""
    asm = assembly(mass, inertia, length, gravity, alpha0, omega_p)
    params = dict(mass=mass, inertia=list(inertia), length=length, gravity=gravity, alpha0=alpha0, omega_p=omega_p)
    problem = asm.problem(h=0.002, t_end=2.0, name="heavy-top", parameters=params)
    return problem.replace(system=with_gravity_parameter(problem.system, gravity))


def with_gravity_parameter(system, gravity: float):
    """The assembled System with ``gravity`` as a System parameter (runtime value for
    ``lv.simulate(parameters=...)`` and ``lv.flow``): gravity is the top's only force, so its
    potential and Greenspan's invariant potentials (KBS23b eq 123) scale with it."""
    import dataclasses

    pi, pots = system.invariants
    V, g = system.potential, system.constraints
    return dataclasses.replace(
        system,
        potential=lambda q, par: par["gravity"] / gravity * V(q),
        constraints=lambda q, par: g(q),
        invariants=(lambda q, par: pi(q), lambda x, par: par["gravity"] / gravity * pots(x)),
        parameters={"gravity": gravity},
    )
