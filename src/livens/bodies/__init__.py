"""Multibody building blocks in director form (000 §5; 002 §6.2-6.3).

Bodies (:class:`PointMass`, :class:`RigidBody` in 3D, :class:`PlanarRigidBody`, the helper
:func:`bar`), material points on them (``body.point(X)``, :func:`ground`), joints
(:class:`FixedPoint`, :class:`Spherical`, :class:`Revolute`, :class:`Distance`, :class:`OnAxis`) and
forces (:class:`Gravity`, :class:`Spring`, :class:`Damper`) are collected by an :class:`Assembly`,
which numbers the coordinates and builds an ordinary :class:`livens.System` (an
:class:`AssembledSystem`, carrying the mechanism's ``layout`` for the drawings) and a Problem with the
symmetries that apply::

    import livens as lv
    from livens import bodies as lb

    b1 = lb.bar("B1", length=1.0, mass=1.0, center=(0, 0.5), direction=(0, 1))
    asm = lb.Assembly(bodies=[b1], joints=[lb.Revolute("P1", b1.point((-0.5, 0)), lb.ground((0, 0)))],
                      forces=[lb.Gravity((0, -9.81))], name="pendulum-bar")
    problem = asm.problem(h=1e-3, t_end=1.0)

Pictures: :mod:`livens.bodies.draw` (``snapshot``, ``animate``), imported on first use.
"""
from .assembly import AssembledSystem, Assembly, Layout
from .forces import Damper, Gravity, Spring
from .joints import Distance, FixedPoint, OnAxis, Revolute, Spherical
from .rigid import PlanarRigidBody, Point, PointMass, RigidBody, bar, ground, orthonormality

__all__ = [
    "Assembly", "AssembledSystem", "Layout",
    "PointMass", "RigidBody", "PlanarRigidBody", "bar", "Point", "ground", "orthonormality",
    "FixedPoint", "Spherical", "Revolute", "Distance", "OnAxis",
    "Gravity", "Spring", "Damper",
    "draw",
]


def __getattr__(name):
    """Import ``livens.bodies.draw`` (matplotlib) only when asked for."""
    if name == "draw":  # matplotlib only when pictures are asked for
        import importlib

        return importlib.import_module(f"{__name__}.draw")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
