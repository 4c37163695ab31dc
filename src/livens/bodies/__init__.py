"""Multibody building blocks in director form (KBS23a §5; KBS23b §6.2-6.3; SLO09 §4.2).

Bodies (:class:`PointMass`, :class:`RigidBody` in 3D, :class:`PlanarRigidBody`, the helpers
:func:`bar`, :func:`rod` and :func:`pyramid`, the geometrically exact :class:`Beam`), material points on them
(``body.point(X)``, ``beam.node(k)``, :func:`ground`), joints (:class:`FixedPoint`,
:class:`Spherical`, :class:`Revolute` (planar, or 3D with a hinge axis), :class:`Clamp`, :class:`Distance`,
:class:`OnAxis`) and forces (:class:`Gravity`, :class:`Spring`, :class:`Damper`, :class:`PointLoad`
with a time function such as :func:`triangular_pulse`) are collected by an :class:`Assembly`,
which numbers the coordinates and builds an ordinary :class:`livens.System` (an
:class:`AssembledSystem`, carrying the mechanism's ``layout`` for the drawings) and a Problem with the
symmetries of its conservative part (``Assembly.symmetries``: those of the bodies, joints, gravity and
springs; loads and dampers may break them, and the Solution reports the balance of each momentum map
with their impulse)::

    import livens as lv
    from livens import bodies as lb

    b1 = lb.bar("B1", length=1.0, mass=1.0, center=(0, 0.5), direction=(0, 1))
    asm = lb.Assembly(bodies=[b1], joints=[lb.Revolute("P1", b1.point((-0.5, 0)), lb.ground((0, 0)))],
                      forces=[lb.Gravity((0, -9.81))], name="pendulum-bar")
    problem = asm.problem(h=1e-3, t_end=1.0)

A beam between two points, clamped at one end and loaded at the other::

    beam = lb.Beam("beam", start=(0, 0, 0), end=(1, 0, 0), n_elements=10,
                   stiffness=(1e6, 1e6, 2e6, 10.0, 10.0, 8.0), inertia=(1.0, 1e-4, 1e-4))
    asm = lb.Assembly(bodies=[beam], joints=[lb.Clamp("root", beam.node(0), lb.ground((0, 0, 0)))],
                      forces=[lb.PointLoad("tip", beam.node(10), (0, 0, -1.0))])

Stress resultants per element: :func:`stress_resultants`. Pictures: :mod:`livens.bodies.draw`
(``snapshot``, ``animate``), imported on first use.
"""

from .assembly import AssembledSystem, Assembly
from .beam import Beam
from .forces import Damper, Gravity, PointLoad, Spring, triangular_pulse
from .joints import Clamp, Distance, FixedPoint, OnAxis, Revolute, Spherical
from .layout import Layout
from .resultants import stress_resultants
from .rigid import (
    PlanarRigidBody,
    Point,
    PointMass,
    RigidBody,
    bar,
    ground,
    orthonormality,
    pyramid,
    pyramid_inertia,
    pyramid_points,
    rod,
)

__all__ = [
    "Assembly",
    "AssembledSystem",
    "Layout",
    "PointMass",
    "RigidBody",
    "PlanarRigidBody",
    "bar",
    "rod",
    "Point",
    "ground",
    "orthonormality",
    "pyramid",
    "pyramid_inertia",
    "pyramid_points",
    "Beam",
    "stress_resultants",
    "FixedPoint",
    "Spherical",
    "Revolute",
    "Clamp",
    "Distance",
    "OnAxis",
    "Gravity",
    "Spring",
    "Damper",
    "PointLoad",
    "triangular_pulse",
    "draw",
]


def __getattr__(name):
    """Import ``livens.bodies.draw`` (matplotlib) only when asked for."""
    if name == "draw":  # matplotlib only when pictures are asked for
        import importlib

        return importlib.import_module(f"{__name__}.draw")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
