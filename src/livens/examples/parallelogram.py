"""A parallelogram linkage started in its flattened (singular) position, built from livens.bodies.

Two cranks of length ``a`` on ground pins O1 = (0, 0) and O2 = (L, 0) carry a coupler of length
``L``: every link is a planar bar in director form (``lb.bar``, mass ``mass``, J = m l^2 / 12), joined
by four planar revolute joints. d = 18 coordinates, m = 9 internal + 8 joint = 17 equations, one degree
of freedom (the crank angle theta). Gravity acts along -e2.

At theta = 0 (the default) the three links lie on one line: G(q) has rank 16 there and 17 at every
other angle. That configuration is a bifurcation point of the configuration space: the parallelogram
branch (coupler parallel to the ground) crosses the antiparallelogram branch. The mechanism starts
there with the parallelogram's velocity -- both cranks turning at ``omega``, the coupler translating
at a omega -- and must stay on the parallelogram branch: the coupler's director d1 stays (1, 0).

This is livens' own test case of a singular start (:mod:`livens.redundancy`); its parameters are
livens' choice. ``theta`` starts it elsewhere (a regular start); the cranks pass the flattened
positions theta = 0 and pi whenever they turn that far.
"""

import numpy as np

from .. import bodies as lb
from . import register


def assembly(
    crank: float = 1.0,
    length: float = 2.0,
    mass: float = 1.0,
    theta: float = 0.0,
    omega: float = 2.0,
    gravity: float = 9.81,
) -> "lb.Assembly":
    """The linkage as an :class:`livens.bodies.Assembly`: cranks of length ``crank`` at angle ``theta``
    turning at ``omega``, coupler and ground of length ``length``."""
    a, L = float(crank), float(length)
    e = np.array([np.cos(theta), np.sin(theta)])
    tip = a * omega * np.array([-e[1], e[0]])  # the velocity of both crank tips

    def bar_at(name, base):
        return lb.bar(
            name,
            a,
            mass,
            center=tuple(base + 0.5 * a * e),
            direction=tuple(e),
            velocity=tuple(0.5 * tip),
            angular_velocity=omega,
        )

    c1, c2 = bar_at("crank1", np.zeros(2)), bar_at("crank2", np.array([L, 0.0]))
    coupler = lb.bar(
        "coupler", L, mass, center=tuple(a * e + [0.5 * L, 0.0]), direction=(1.0, 0.0), velocity=tuple(tip)
    )
    foot, head = (-0.5 * a, 0.0), (0.5 * a, 0.0)
    joints = [
        lb.Revolute("O1", c1.point(foot), lb.ground((0.0, 0.0))),
        lb.Revolute("O2", c2.point(foot), lb.ground((L, 0.0))),
        lb.Revolute("A", coupler.point((-0.5 * L, 0.0)), c1.point(head)),
        lb.Revolute("B", coupler.point((0.5 * L, 0.0)), c2.point(head)),
    ]
    return lb.Assembly(
        bodies=[c1, c2, coupler], joints=joints, forces=[lb.Gravity((0.0, -gravity))], name="parallelogram"
    )


@register("parallelogram")
def parallelogram(
    crank: float = 1.0,
    length: float = 2.0,
    mass: float = 1.0,
    theta: float = 0.0,
    omega: float = 2.0,
    gravity: float = 9.81,
):
    """The parallelogram linkage, started flattened (theta = 0) with the parallelogram's velocity
    (h = 0.01, T = 3)."""
    params = dict(crank=crank, length=length, mass=mass, theta=theta, omega=omega, gravity=gravity)
    return assembly(crank, length, mass, theta, omega, gravity).problem(
        h=0.01, t_end=3.0, name="parallelogram", parameters=params
    )
