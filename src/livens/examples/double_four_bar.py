"""Double four-bar linkage, with or without dampers (KBS23a §5.2, eq 70-80), built from livens.bodies.

Five planar bars in director form (eq 70-73), mass m = 1 and length l = 1, J = m l^2 / 12 and
E_1 = E_2 = J/2: the lower bars B1-B3 stand on ground pins P1 = (0, 0), P2 = (1, 0), P3 = (2, 0);
the upper bars B4 (P4-P5) and B5 (P5-P6) join their tops at P4 = (0, 1), P5 = (1, 1) (two joints)
and P6 = (2, 1). Revolute joints (eq 74): 7 x 2 = 14 external and 5 x 3 = 15 internal constraints,
d = 30, m = 29, one degree of freedom (the inclination angle theta of the lower bars). Gravity
b = -9.81 e2 (eq 72). Start upright (theta = pi/2) with the upper bars moving at v0 = 1 in +e1 and
the lower bars' centres at v0/2 (their angular velocity is -v0/l). Defaults h = 1e-3, T = 10
(KBS23a §5.2). Horizontal configurations (theta = 0, pi) are singular: there G(q) loses rank.

``dampers=True`` adds the two viscous dampers of KBS23a eq 77-78, eta = 0.5 between P1 (ground) and
P5 (right end of B4) and between P2 (ground) and P6 (right end of B5); the dissipation matrix
C(q) = diag(0, 0, 0, C1, C2) (eq 79) is derived by AD from the Rayleigh function (eq 80 is garbled).

Numbering: the bars follow the paper (B4, B5 upper, so that eq 74b and 78-79 read as printed);
the initial data are those of the authors' MATLAB code metis, whose bars 1-5 are our B1, B4, B2, B5, B3.
No symmetry applies (gravity and the ground pins); the angular momentum of eq 75 is available as
``Assembly.rotation()`` for monitoring.

Parameter range: h and T are the paper's; every scheme runs them at the paper's data
(tests/test_examples_defaults.py), VI-B with its nodal momenta off the velocity constraint after
the first dead-centre position (its parasitic root -1 at vartheta = 1/2,
:mod:`livens.schemes.ggl_theta`). The bars turn at about v0 / l (plus what gravity adds): scale h
with l / v0 for a faster start.
"""

from .. import bodies as lb
from . import register


def assembly(
    mass: float = 1.0,
    length: float = 1.0,
    gravity: float = 9.81,
    v0: float = 1.0,
    dampers: bool = False,
    eta: float = 0.5,
) -> "lb.Assembly":
    """The linkage as an :class:`livens.bodies.Assembly` (KBS23a §5.2)."""
    l, half = float(length), 0.5 * float(length)
    w = -v0 / l  # angular velocity of the lower bars (clockwise for v0 > 0)

    def lower(name, x, up):
        """A lower bar B1-B3, standing on the ground, upright, turning at omega = -v0/l."""
        # metis data: B1 has d1 = (0, 1), d2 = (1, 0); B2, B3 have d1 = (0, -1), d2 = (-1, 0)
        d1 = (0.0, 1.0) if up else (0.0, -1.0)
        return lb.bar(name, l, mass, center=(x, half), direction=d1, velocity=(0.5 * v0, 0.0), angular_velocity=w)

    def upper(name, x):
        """An upper bar B4, B5, horizontal, moving at v0 in +e1."""
        return lb.bar(name, l, mass, center=(x, l), direction=(1.0, 0.0), velocity=(v0, 0.0))

    B1, B2, B3 = lower("B1", 0.0, True), lower("B2", l, False), lower("B3", 2 * l, False)
    B4, B5 = upper("B4", half), upper("B5", l + half)
    low, high = (-half, 0.0), (half, 0.0)

    def foot(B):
        """The material point of a lower bar on its ground pin (KBS23a eq 74a)."""
        return B.point(low if B is B1 else high)

    def top(B):
        """The upper end of a lower bar."""
        return B.point(high if B is B1 else low)

    joints = [
        lb.Revolute("P1", foot(B1), lb.ground((0.0, 0.0))),  # eq 74a
        lb.Revolute("P2", foot(B2), lb.ground((l, 0.0))),
        lb.Revolute("P3", foot(B3), lb.ground((2 * l, 0.0))),
        lb.Revolute("P4", top(B1), B4.point(low)),  # eq 74b
        lb.Revolute("P5a", B4.point(high), top(B2)),
        lb.Revolute("P5b", B5.point(low), top(B2)),
        lb.Revolute("P6", B5.point(high), top(B3)),
    ]
    forces = [lb.Gravity((0.0, -gravity))]
    if dampers:
        forces += [
            lb.Damper("D1", lb.ground((0.0, 0.0)), B4.point(high), eta=eta),  # P1-P5, eq 78a
            lb.Damper("D2", lb.ground((l, 0.0)), B5.point(high), eta=eta),  # P2-P6, eq 78b
        ]
    name = "double-four-bar"
    return lb.Assembly(bodies=[B1, B2, B3, B4, B5], joints=joints, forces=forces, name=name)


@register("double-four-bar")
def double_four_bar(
    mass: float = 1.0,
    length: float = 1.0,
    gravity: float = 9.81,
    v0: float = 1.0,
    dampers: bool = False,
    eta: float = 0.5,
):
    """The double four-bar linkage of KBS23a §5.2 (h = 1e-3, T = 10); ``dampers=True`` adds the dampers
    of eq 77-78 with constant ``eta``."""
    params = dict(mass=mass, length=length, gravity=gravity, v0=v0, dampers=bool(dampers), eta=eta)
    return assembly(mass, length, gravity, v0, dampers, eta).problem(
        h=1e-3, t_end=10.0, name="double-four-bar", parameters=params
    )
