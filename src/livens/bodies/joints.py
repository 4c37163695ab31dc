"""Joints and other holonomic constraints between material points (KBS23a §5; KBS23b §6).

Each joint gives a block of constraint functions g(q) of the placements x(q) = phi + X_i d_i of
its points, with a name per component ("P4.revolute.x"). The Assembly evaluates them; the
functions are at most quadratic in q, so that the schemes' discrete derivatives stay exact. Joints with
``uses_frames`` also read the director frames of their points (``residual(x, frame)``).

* :class:`FixedPoint`: a body point pinned to the ground, s (x_P - x0) = 0; the heavy top's
  tip, phi/l - d3 = 0, is the point X = (0, 0, -l) with s = 1/l (KBS23b eq 104; KBS23a eq 64).
* :class:`Spherical`: a ball joint between two body points in 3D, x_A - x_B = 0.
* :class:`Revolute`: a revolute joint: x_A - x_B = 0 in R^2 (KBS23a eq 74a, b); in 3D with a hinge
  ``axis`` kept aligned in both bodies by two bilinear director constraints.
* :class:`Clamp`: a rigid connection of two frames, or of a frame to the ground, in 3D (six constraints).
* :class:`Distance`: a massless rod, 1/2 (|x_A - x_B|^2 / L^2 - 1) = 0 (KBS23b eq 93, 117).
* :class:`OnAxis`: a body point kept on a fixed line through ``through`` along ``direction``:
  the components of x_P - a normal to the line vanish (a slider).

Every joint also tells whether it is invariant under a rotation about an axis through the origin
or a translation (the symmetry conditions KBS23b eq 41c, D g(q) xi_Q = 0 on the constraint manifold),
so that the Assembly can list the momentum maps that apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from .rigid import Point, _check_name

_AXES = "xyz"


def _on_axis(x0, axis, dim: int) -> bool:
    """True when the fixed point x0 is on the rotation axis through the origin (x0 = 0 in 2D)."""
    x0 = np.asarray(x0, dtype=float)
    scale = max(1.0, float(np.max(np.abs(x0))))
    if dim == 2:
        return bool(np.max(np.abs(x0)) <= 1e-12 * scale)
    return bool(np.max(np.abs(np.cross(x0, axis))) <= 1e-12 * scale)


def _check_point(owner: str, p) -> Point:
    """``p`` if it is a Point, else a TypeError naming the joint or force."""
    if not isinstance(p, Point):
        raise TypeError(f"{owner}: expected a Point (body.point(X) or ground(x)); got {type(p).__name__}.")
    return p


def _normals(direction, dim: int) -> np.ndarray:
    """An orthonormal basis (rows) of the complement of ``direction``."""
    e = np.asarray(direction, dtype=float)
    e = e / np.linalg.norm(e)
    if dim == 2:
        return np.array([[-e[1], e[0]]])
    a = np.eye(3)[int(np.argmin(np.abs(e)))]
    n1 = np.cross(e, a)
    n1 /= np.linalg.norm(n1)
    n2 = np.cross(e, n1)
    return np.array([n1, n2])


@dataclass(frozen=True)
class _Joint:
    """Common part of the joints: a name, its points, defaults and symmetry checks (KBS23b eq 41c)."""

    name: str

    linear = False  # True where the residual is linear in q (the Assembly stacks those into one matrix)
    uses_frames = False  # True where the residual also reads director frames: residual(x, frame)

    def points(self) -> tuple[Point, ...]:
        """The material (or ground) points the joint connects."""
        raise NotImplementedError

    def resolved(self, x0: Callable, frame0: Callable | None = None) -> _Joint:
        """A copy with defaults taken from the initial placement ``x0(point)`` (and, for joints that
        need them, the initial director frames ``frame0(point)``)."""
        return self

    def ground_points(self) -> list[np.ndarray]:
        """Positions of the joint's points fixed in space (they decide its symmetries)."""
        return [np.asarray(p.X) for p in self.points() if p.is_ground]

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """Invariant (on g = 0) under rotations about ``axis`` through the origin: every ground point
        lies on the axis (KBS23b eq 41c)."""
        return all(_on_axis(x0, axis, dim) for x0 in self.ground_points())

    def translation_invariant(self, direction: ArrayLike, dim: int) -> bool:
        """Invariant under translations of all bodies: nothing is attached to the ground."""
        return not self.ground_points()


def _difference_names(name: str, kind: str, dim: int) -> tuple[str, ...]:
    """Component names "<name>.<kind>.x", ... of a vector constraint."""
    return tuple(f"{name}.{kind}.{c}" for c in _AXES[:dim])


@dataclass(frozen=True)
class FixedPoint(_Joint):
    """A body point pinned to the ground: scale * (x_P(q) - at) = 0 (KBS23b eq 104 with scale = 1/l).

    ``at`` defaults to the point's initial position. Components are named "<name>.fixed.x", ...
    """

    point: Point = None
    at: tuple | None = None
    scale: float = 1.0

    kind = "fixed"
    linear = True

    def __post_init__(self):
        """Check the points and parameters, with messages naming the joint."""
        _check_name(self.name)
        _check_point(self.name, self.point)
        if self.point.is_ground:
            raise ValueError(f"{self.name}: the point to fix must be a body point, not a ground point.")
        if not (np.isfinite(self.scale) and self.scale != 0):
            raise ValueError(f"{self.name}: scale must be a finite nonzero number; got {self.scale!r}.")

    def points(self) -> tuple[Point, ...]:
        """The points the joint connects."""
        return (self.point,)

    def resolved(self, x0: Callable, frame0: Callable | None = None) -> FixedPoint:
        """A copy with the defaults filled in from the initial placement ``x0(point)``."""
        at = x0(self.point) if self.at is None else self.at
        return replace(self, at=tuple(float(a) for a in np.asarray(at, dtype=float)))

    def ground_points(self) -> list[np.ndarray]:
        """The fixed points of this joint (they decide its symmetries, KBS23b eq 41c)."""
        return [np.asarray(self.at)]

    def size(self, dim: int) -> int:
        """Number of scalar constraints in a ``dim``-dimensional assembly."""
        return dim

    def component_names(self, dim: int) -> tuple[str, ...]:
        """Names of the scalar constraints, as they appear in System.constraint_names."""
        return _difference_names(self.name, "fixed", dim)

    def residual(self, x: Callable) -> jax.Array:
        """scale (x_P - at) (KBS23b eq 104; KBS23a eq 74a)."""
        return self.scale * (x(self.point) - jnp.asarray(self.at))


@dataclass(frozen=True)
class Spherical(_Joint):
    """A spherical (ball) joint in 3D: x_A(q) - x_B(q) = 0; B may be a ground point."""

    a: Point = None
    b: Point = None

    kind = "spherical"
    planar = False
    linear = True

    def __post_init__(self):
        """Check the points and parameters, with messages naming the joint."""
        _check_name(self.name)
        _check_point(self.name, self.a)
        _check_point(self.name, self.b)
        if self.a.is_ground and self.b.is_ground:
            raise ValueError(f"{self.name}: at least one point of a joint must be on a body.")

    def points(self) -> tuple[Point, ...]:
        """The points the joint connects."""
        return (self.a, self.b)

    def size(self, dim: int) -> int:
        """Number of scalar constraints in a ``dim``-dimensional assembly."""
        return dim

    def component_names(self, dim: int) -> tuple[str, ...]:
        """Names of the scalar constraints, as they appear in System.constraint_names."""
        return _difference_names(self.name, self.kind, dim)

    def residual(self, x: Callable) -> jax.Array | np.ndarray:
        """x_A - x_B."""
        return x(self.a) - x(self.b)


@dataclass(frozen=True)
class Revolute(Spherical):
    """A revolute joint (a hinge).

    In the plane (no ``axis``): x_A(q) - x_B(q) = 0 in R^2 (KBS23a eq 74a for B on the ground, 74b
    between two bars); components "<name>.revolute.x", "<name>.revolute.y".

    In 3D, ``axis`` is the hinge axis in the initial configuration (a spatial vector). The axis is
    fixed in both bodies: a_A = a_i d_i^A in A and a_B = b_j d_j^B in B (a fixed direction if B is a
    ground point), with components taken from the initial directors. Besides x_A - x_B = 0 the joint
    keeps them parallel by two bilinear constraints (n_alpha,i d_i^A) . a_B = 0, n_1, n_2 an
    orthonormal basis normal to a_A in A's frame (the director form of a revolute pair, Betsch and
    Leyendecker 2006): five constraints "<name>.revolute.x/y/z", "<name>.revolute.axis[n1]",
    "<name>.revolute.axis[n2]". Point A must lie on a body with directors (a rigid body or a beam node).
    """

    axis: tuple | None = None
    axis_a: tuple | None = None
    normals_a: tuple | None = None
    axis_b: tuple | None = None

    kind = "revolute"
    planar = True
    uses_frames = True

    def __post_init__(self):
        """Check the points and the axis, with messages naming the joint."""
        super().__post_init__()
        if self.axis is not None:
            e = np.asarray(self.axis, dtype=float)
            if e.shape != (3,) or not np.all(np.isfinite(e)) or not np.linalg.norm(e) > 0:
                raise ValueError(f"{self.name}: axis must be a nonzero 3-vector (the hinge axis); got {self.axis!r}.")
            object.__setattr__(self, "axis", tuple(float(v) for v in e / np.linalg.norm(e)))
            if self.a.is_ground:
                raise ValueError(
                    f"{self.name}: point A of a revolute joint in 3D must be on a body with directors "
                    "(a rigid body or a beam node); put the ground point second."
                )

    @property
    def linear(self) -> bool:
        """The planar joint is linear in q; the axis constraints of the 3D joint are bilinear."""
        return self.axis is None

    def resolved(self, x0: Callable, frame0: Callable | None = None) -> Revolute:
        """In 3D: the axis' components in A's and B's director frames from the initial frames
        ``frame0(point)`` (rows d_i), and a basis n_1, n_2 normal to it in A's frame."""
        if self.axis is None or self.axis_a is not None:
            return self
        e = np.asarray(self.axis)
        DA = np.asarray(frame0(self.a))
        a = DA @ e
        N = _normals(a, 3)
        b = e if self.b.is_ground else np.asarray(frame0(self.b)) @ e
        return replace(
            self, axis_a=tuple(a.tolist()), normals_a=tuple(tuple(r) for r in N.tolist()), axis_b=tuple(b.tolist())
        )

    def size(self, dim: int) -> int:
        """2 in the plane; 3 + 2 in 3D."""
        return dim if self.axis is None else dim + 2

    def component_names(self, dim: int) -> tuple[str, ...]:
        """Names of the scalar constraints, as they appear in System.constraint_names."""
        names = _difference_names(self.name, self.kind, dim)
        if self.axis is None:
            return names
        return names + (f"{self.name}.revolute.axis[n1]", f"{self.name}.revolute.axis[n2]")

    def residual(self, x: Callable, frame: Callable | None = None) -> jax.Array | np.ndarray:
        """x_A - x_B; in 3D followed by (n_alpha . D_A) . a_B (alpha = 1, 2)."""
        r = x(self.a) - x(self.b)
        if self.axis is None:
            return r
        DA = frame(self.a)
        aB = jnp.asarray(self.axis_b) if self.b.is_ground else jnp.asarray(self.axis_b) @ frame(self.b)
        nA = jnp.asarray(self.normals_a) @ DA  # (2, 3): n_alpha,i d_i^A
        return jnp.concatenate([r, nA @ aB])

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """Ground points on the rotation axis and, for a hinge to the ground in 3D, the hinge axis
        parallel to it (KBS23b eq 41c)."""
        if not super().rotation_invariant(axis, dim):
            return False
        if self.axis is not None and self.b.is_ground:
            return bool(np.linalg.norm(np.cross(np.asarray(self.axis_b), np.asarray(axis, dtype=float))) <= 1e-12)
        return True


@dataclass(frozen=True)
class Clamp(_Joint):
    """A rigid connection (clamp, weld) of a frame to another frame or to the ground, in 3D: x_A - x_B = 0
    and the relative rotation fixed by three bilinear director constraints d2^A . c3 = d3^A . c1 =
    d1^A . c2 = 0, with c_i the vectors of B's frame (c_i = C_ij d_j^B) or of space (B a ground point)
    that coincide with d_i^A initially. Six constraints "<name>.clamp.x/y/z", "<name>.clamp.rot[23]",
    "...rot[31]", "...rot[12]"; A must be on a rigid body or a beam node (a cantilever's root).
    """

    a: Point = None
    b: Point = None
    frame_b: tuple | None = None

    kind = "clamp"
    uses_frames = True

    def __post_init__(self):
        """Check the points, with messages naming the joint."""
        _check_name(self.name)
        _check_point(self.name, self.a)
        _check_point(self.name, self.b)
        if self.a.is_ground:
            raise ValueError(
                f"{self.name}: point A of a clamp must be on a body with directors; put the ground point second."
            )

    def points(self) -> tuple[Point, ...]:
        """The points the joint connects."""
        return (self.a, self.b)

    def resolved(self, x0: Callable, frame0: Callable | None = None) -> Clamp:
        """A copy with A's initial directors expressed in B's frame (or in space)."""
        if self.frame_b is not None:
            return self
        DA = np.asarray(frame0(self.a))
        C = DA if self.b.is_ground else DA @ np.asarray(frame0(self.b)).T
        return replace(self, frame_b=tuple(tuple(r) for r in C.tolist()))

    def size(self, dim: int) -> int:
        """Six constraints (3D)."""
        return 6

    def component_names(self, dim: int) -> tuple[str, ...]:
        """Names of the scalar constraints, as they appear in System.constraint_names."""
        return _difference_names(self.name, self.kind, dim) + tuple(
            f"{self.name}.clamp.rot[{k}]" for k in ("23", "31", "12")
        )

    def residual(self, x: Callable, frame: Callable | None = None) -> jax.Array:
        """x_A - x_B, then d2^A . c3, d3^A . c1, d1^A . c2."""
        DA = frame(self.a)
        C = jnp.asarray(self.frame_b)
        c = C if self.b.is_ground else C @ frame(self.b)
        rot = jnp.stack([DA[1] @ c[2], DA[2] @ c[0], DA[0] @ c[1]])
        return jnp.concatenate([x(self.a) - x(self.b), rot])

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """Never when clamped to the ground (the fixed frame turns with no rotation); else as any joint."""
        return not self.b.is_ground and super().rotation_invariant(axis, dim)


@dataclass(frozen=True)
class Distance(_Joint):
    """A massless rod of length L between two points: 1/2 (|x_A - x_B|^2 / L^2 - 1) = 0
    (KBS23b eq 93, 117). ``length`` defaults to the initial distance."""

    a: Point = None
    b: Point = None
    length: float | None = None

    kind = "distance"

    def __post_init__(self):
        """Check the points and parameters, with messages naming the joint."""
        _check_name(self.name)
        _check_point(self.name, self.a)
        _check_point(self.name, self.b)
        if self.a.is_ground and self.b.is_ground:
            raise ValueError(f"{self.name}: at least one point of a rod must be on a body.")
        if self.length is not None and not (float(self.length) > 0):
            raise ValueError(f"{self.name}: length must be positive; got {self.length!r}.")

    def points(self) -> tuple[Point, ...]:
        """The points the joint connects."""
        return (self.a, self.b)

    def resolved(self, x0: Callable, frame0: Callable | None = None) -> Distance:
        """A copy with the defaults filled in from the initial placement ``x0(point)``."""
        if self.length is not None:
            return self
        L = float(np.linalg.norm(np.asarray(x0(self.a)) - np.asarray(x0(self.b))))
        if not L > 0:
            raise ValueError(f"{self.name}: the two points start at the same place; give the rod length.")
        return replace(self, length=L)

    def size(self, dim: int) -> int:
        """Number of scalar constraints in a ``dim``-dimensional assembly."""
        return 1

    def component_names(self, dim: int) -> tuple[str, ...]:
        """Names of the scalar constraints, as they appear in System.constraint_names."""
        return (f"{self.name}.distance",)

    def residual(self, x: Callable) -> jax.Array:
        """1/2 (|x_A - x_B|^2 / L^2 - 1) (KBS23b eq 117)."""
        r = x(self.a) - x(self.b)
        return jnp.atleast_1d(0.5 * (r @ r / self.length**2 - 1.0))


@dataclass(frozen=True)
class OnAxis(_Joint):
    """A body point kept on the fixed line a + s e: N^T (x_P - a) = 0 with N an orthonormal basis of
    the normal space of e (two components in 3D, one in the plane). Invariant under translations
    along e, and in 3D under rotations about e when the line passes through the origin."""

    point: Point = None
    direction: tuple = (0.0, 0.0, 1.0)
    through: tuple | None = None

    kind = "on_axis"
    linear = True

    def __post_init__(self):
        """Check the points and parameters, with messages naming the joint."""
        _check_name(self.name)
        _check_point(self.name, self.point)
        if self.point.is_ground:
            raise ValueError(f"{self.name}: the point must be a body point.")
        e = np.asarray(self.direction, dtype=float)
        if e.ndim != 1 or e.shape[0] not in (2, 3) or not np.linalg.norm(e) > 0:
            raise ValueError(f"{self.name}: direction must be a nonzero 2- or 3-vector; got {self.direction!r}.")
        object.__setattr__(self, "direction", tuple(float(v) for v in e / np.linalg.norm(e)))

    def points(self) -> tuple[Point, ...]:
        """The points the joint connects."""
        return (self.point,)

    def resolved(self, x0: Callable, frame0: Callable | None = None) -> OnAxis:
        """A copy with the defaults filled in from the initial placement ``x0(point)``."""
        a = np.zeros(len(self.direction)) if self.through is None else np.asarray(self.through, dtype=float)
        return replace(self, through=tuple(float(v) for v in a))

    def ground_points(self) -> list[np.ndarray]:
        """The fixed points of this joint (they decide its symmetries, KBS23b eq 41c)."""
        return [np.asarray(self.through)]

    def size(self, dim: int) -> int:
        """Number of scalar constraints in a ``dim``-dimensional assembly."""
        return dim - 1

    def component_names(self, dim: int) -> tuple[str, ...]:
        """Names of the scalar constraints, as they appear in System.constraint_names."""
        return tuple(f"{self.name}.on_axis[n{k + 1}]" for k in range(dim - 1))

    def residual(self, x: Callable) -> jax.Array:
        """N^T (x_P - a)."""
        N = _normals(self.direction, len(self.direction))
        return jnp.asarray(N) @ (x(self.point) - jnp.asarray(self.through))

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """In 3D: the line is the rotation axis (parallel, through the origin); never in 2D (KBS23b eq 41c)."""
        if dim == 2:
            return False
        e = np.asarray(self.direction)
        parallel = np.linalg.norm(np.cross(e, np.asarray(axis, dtype=float))) <= 1e-12
        return bool(parallel and _on_axis(self.through, axis, dim))

    def translation_invariant(self, direction: ArrayLike, dim: int) -> bool:
        """Invariant under translations along the line's own direction (KBS23b eq 41c)."""
        return bool(
            np.linalg.norm(
                np.cross(
                    np.r_[self.direction, [0.0] * (3 - dim)], np.r_[np.asarray(direction, float), [0.0] * (3 - dim)]
                )
            )
            <= 1e-12
        )


JOINT_TYPES = (FixedPoint, Spherical, Revolute, Clamp, Distance, OnAxis)
