"""Bodies in redundant (director) coordinates, and material points on them.

* :class:`PointMass`: q = x in R^2 or R^3, M = m I (KBS23b eq 115).
* :class:`RigidBody`: a 3D rigid body in director form (KBS23a §5.1 eq 58-61; KBS23b eq 100-103):
  q = (phi, d1, d2, d3) in R^12, M = diag(m I, E1 I, E2 I, E3 I) with the principal values of the
  Euler tensor E_i = 1/2 (J_j + J_k - J_i) (KBS23a eq 60), and six orthonormality constraints (KBS23a eq 61).
* :class:`PlanarRigidBody`: a rigid body in the plane (KBS23a §5.2 eq 70-73): q = (phi, d1, d2) in R^6,
  M = diag(m I, E1 I, E2 I) with E_alpha = J/2 (eq 71) and three orthonormality constraints (eq 73).

A material point X of a body is placed at x(q) = phi + X_i d_i (KBS23a eq 58), linear in q: x = S q_body
with the constant ``placement_matrix`` S = [I, X_1 I, X_2 I, ...] (natural coordinates). A
:class:`Point` names such a point (``body.point(X)``) or a point fixed in space (:func:`ground`).
Every function here works on jax and numpy arrays alike and on stacks of configurations
(``q[..., :]``), so that the same code serves the residuals and the drawings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from numpy.typing import ArrayLike

_AXES = "xyz"


def _vec(name: str, x, dim: int | None = None) -> tuple:
    """A finite vector (of length ``dim``) as a tuple of floats, or a ValueError naming ``name``."""
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or (dim is not None and a.shape[0] != dim):
        want = f"({dim},)" if dim is not None else "a vector"
        raise ValueError(f"{name} must have shape {want}; got {np.shape(x)}.")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite; got {a.tolist()}.")
    return tuple(float(v) for v in a)


def _check_name(name) -> str:
    """Names appear in coordinate and constraint names ("B1.phi.x"): no spaces, dots or brackets."""
    if not isinstance(name, str) or not name or any(c in name for c in " .[]"):
        raise ValueError(
            f"A body or element name must be a non-empty string without spaces, dots or brackets; got {name!r}."
        )
    return name


@dataclass(frozen=True)
class Point:
    """A material point X of ``body`` (x = phi + X_i d_i, KBS23a eq 58), or a fixed point in space
    (``body`` None, ``X`` its position; see :func:`ground`)."""

    body: Any
    X: tuple

    @property
    def is_ground(self) -> bool:
        """True for a point fixed in space."""
        return self.body is None

    @property
    def label(self) -> str:
        """A readable label for messages, e.g. "B1(0.5,0)"."""
        coords = ",".join(f"{x:g}" for x in self.X)
        return f"ground({coords})" if self.body is None else f"{self.body.name}({coords})"


def ground(x: ArrayLike) -> Point:
    """A point fixed in space at ``x`` (for joints, springs and dampers attached to the ground)."""
    return Point(None, _vec("ground point", x))


@dataclass(frozen=True)
class PointMass:
    """A particle of mass m with coordinates q = x (KBS23b eq 115); M = m I, no internal constraint.

    ``position`` and ``velocity`` give the initial state; their length (2 or 3) is the dimension.
    """

    name: str
    mass: float
    position: tuple
    velocity: tuple | None = None

    def __post_init__(self):
        """Check and normalise the data (tuples of floats), with messages naming the body."""
        _check_name(self.name)
        x = _vec(f"{self.name}: position", self.position)
        if len(x) not in (2, 3):
            raise ValueError(f"{self.name}: position must have 2 or 3 entries; got {len(x)}.")
        object.__setattr__(self, "position", x)
        v = (0.0,) * len(x) if self.velocity is None else _vec(f"{self.name}: velocity", self.velocity, len(x))
        object.__setattr__(self, "velocity", v)
        if not (float(self.mass) > 0):
            raise ValueError(f"{self.name}: mass must be positive; got {self.mass!r}.")
        object.__setattr__(self, "mass", float(self.mass))

    kind = "point-mass"
    blocks = ("",)

    @property
    def dim(self) -> int:
        """Dimension of the space, 2 or 3."""
        return len(self.position)

    @property
    def size(self) -> int:
        """Number of coordinates, d = dim."""
        return self.dim

    def coordinate_names(self) -> tuple[str, ...]:
        """Names of the body's coordinates, e.g. "B1.phi.x", "B1.d1.y" (KBS23a eq 59, 70)."""
        return tuple(f"{self.name}.{c}" for c in _AXES[: self.dim])

    def mass_diagonal(self) -> np.ndarray:
        """The diagonal of M = m I."""
        return np.full(self.dim, self.mass)

    def internal_constraints(self, qb: jax.Array | np.ndarray) -> None:
        """None: a particle has no internal constraint."""
        return None

    internal_names = ()

    def position_slice(self) -> slice:
        """Where the position (translated by a translation symmetry) lies in the body's coordinates."""
        return slice(0, self.dim)

    def placement_matrix(self, X: ArrayLike = ()) -> np.ndarray:
        """S with x = S q_body: the identity (a particle has only the point X = ())."""
        if len(X) and any(x != 0.0 for x in X):
            raise ValueError(f"{self.name} is a point mass: its only material point is X = (); got {X}.")
        return np.eye(self.dim)

    def place(self, qb: jax.Array | np.ndarray, X: ArrayLike = ()) -> jax.Array | np.ndarray:
        """x = q."""
        return qb @ self.placement_matrix(X).T

    def point(self, X: ArrayLike = ()) -> Point:
        """The particle itself as a :class:`Point`."""
        return Point(self, tuple(float(x) for x in X))

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(q0, v0) = (position, velocity)."""
        return np.array(self.position), np.array(self.velocity)

    shape = ()


def _director_matrix(X, dim: int) -> np.ndarray:
    """S = [I, X_1 I, ..., X_dim I], so that x = phi + X_i d_i = S q_body (KBS23a eq 58): the placement is
    linear in the director coordinates (natural coordinates)."""
    return np.hstack([np.eye(dim)] + [float(Xi) * np.eye(dim) for Xi in X])


def _orthonormal_names(n: int) -> tuple[str, ...]:
    """Names of the orthonormality constraints in the order of KBS23a eq 61 / 73."""
    pairs = [(i, i) for i in range(1, n + 1)] + [(i, j) for i in range(1, n + 1) for j in range(i + 1, n + 1)]
    return tuple(f"orthonormal[d{i}.d{j}]" for i, j in pairs)


def orthonormality(directors: Sequence[jax.Array | np.ndarray]) -> jax.Array:
    """Internal constraints of a director frame: 1/2 (d_i.d_i - 1) for each i, then d_i.d_j for i < j
    (KBS23a eq 61 for three directors in R^3, eq 73 for two in R^2; KBS23b eq 103)."""
    import jax.numpy as jnp

    n = len(directors)
    out = [0.5 * (directors[i] @ directors[i] - 1.0) for i in range(n)]
    out += [directors[i] @ directors[j] for i in range(n) for j in range(i + 1, n)]
    return jnp.stack(out)


def _frame(name: str, directors, dim: int) -> tuple:
    """The initial directors as a tuple of rows, checked orthonormal (KBS23a eq 61, 73 at t = 0)."""
    D = np.asarray(directors, dtype=float)
    if D.shape != (dim, dim):
        raise ValueError(
            f"{name}: directors must be {dim} vectors of length {dim} (rows d1, d2, ...); got shape {D.shape}."
        )
    err = np.max(np.abs(D @ D.T - np.eye(dim)))
    if err > 1e-10:
        raise ValueError(f"{name}: the directors are not orthonormal (max |d_i.d_j - delta_ij| = {err:.3e}).")
    return tuple(tuple(float(x) for x in row) for row in D)


@dataclass(frozen=True)
class RigidBody:
    """A rigid body in 3D in director form (KBS23a §5.1 eq 58-61; KBS23b eq 100-103).

    q = (phi, d1, d2, d3) in R^12: the centre of mass and a body-fixed orthonormal frame along the
    principal axes. M = diag(m I, E1 I, E2 I, E3 I) (KBS23a eq 60) with E_i = 1/2 (J_j + J_k - J_i)
    for even permutations (i, j, k) of the principal moments of inertia ``inertia`` = (J1, J2, J3);
    six internal constraints (KBS23a eq 61).

    Initial state: ``position`` phi, ``directors`` (rows d1, d2, d3), ``velocity`` of phi and the
    spatial ``angular_velocity`` omega, so that d_i' = omega x d_i (KBS23a eq 68b). ``shape`` lists
    material points drawn as a polyline (e.g. the symmetry axis of a top).
    """

    name: str
    mass: float
    inertia: tuple
    position: tuple = (0.0, 0.0, 0.0)
    directors: tuple = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    velocity: tuple = (0.0, 0.0, 0.0)
    angular_velocity: tuple = (0.0, 0.0, 0.0)
    shape: tuple = ()

    kind = "rigid-body"
    dim = 3
    size = 12
    blocks = ("phi", "d1", "d2", "d3")
    internal_names = _orthonormal_names(3)

    def __post_init__(self):
        """Check and normalise the data (tuples of floats), with messages naming the body."""
        _check_name(self.name)
        if not (float(self.mass) > 0):
            raise ValueError(f"{self.name}: mass must be positive; got {self.mass!r}.")
        object.__setattr__(self, "mass", float(self.mass))
        J = _vec(f"{self.name}: inertia", self.inertia, 3)
        if min(J) < 0 or any(J[i] > J[(i + 1) % 3] + J[(i + 2) % 3] + 1e-14 * max(J) for i in range(3)):
            raise ValueError(
                f"{self.name}: principal inertias {J} are not physical (each must be >= 0 and at most the sum "
                "of the other two), so some E_i = 1/2 (J_j + J_k - J_i) would be negative."
            )
        object.__setattr__(self, "inertia", J)
        object.__setattr__(self, "position", _vec(f"{self.name}: position", self.position, 3))
        object.__setattr__(self, "directors", _frame(self.name, self.directors, 3))
        object.__setattr__(self, "velocity", _vec(f"{self.name}: velocity", self.velocity, 3))
        object.__setattr__(self, "angular_velocity", _vec(f"{self.name}: angular_velocity", self.angular_velocity, 3))
        object.__setattr__(self, "shape", tuple(_vec(f"{self.name}: shape point", X, 3) for X in self.shape))

    @property
    def euler(self) -> tuple[float, float, float]:
        """Principal values of the Euler tensor, E_i = 1/2 (J_j + J_k - J_i) (KBS23a eq 60; KBS23b eq 101)."""
        J1, J2, J3 = self.inertia
        return (0.5 * (J2 + J3 - J1), 0.5 * (J3 + J1 - J2), 0.5 * (J1 + J2 - J3))

    def coordinate_names(self) -> tuple[str, ...]:
        """Names of the body's coordinates, e.g. "B1.phi.x", "B1.d1.y" (KBS23a eq 59, 70)."""
        return tuple(f"{self.name}.{b}.{c}" for b in self.blocks for c in _AXES)

    def mass_diagonal(self) -> np.ndarray:
        """The diagonal of M = diag(m I, E1 I, E2 I, E3 I) (KBS23a eq 60)."""
        return np.repeat([self.mass, *self.euler], 3)

    def internal_constraints(self, qb: jax.Array | np.ndarray) -> jax.Array:
        """The six orthonormality constraints of (d1, d2, d3) (KBS23a eq 61)."""
        return orthonormality([qb[3:6], qb[6:9], qb[9:12]])

    def position_slice(self) -> slice:
        """Where phi (the centre of mass) lies in the body's coordinates (KBS23a eq 59, 70)."""
        return slice(0, 3)

    def placement_matrix(self, X: ArrayLike) -> np.ndarray:
        """S with x = phi + X_i d_i = S q_body (KBS23a eq 58)."""
        return _director_matrix(_vec(f"{self.name}: material point", X, 3), 3)

    def place(self, qb: jax.Array | np.ndarray, X: ArrayLike) -> jax.Array | np.ndarray:
        """x = phi + X_i d_i (KBS23a eq 58), for q_body of any leading shape."""
        return qb @ self.placement_matrix(X).T

    def point(self, X: ArrayLike) -> Point:
        """The material point X (coordinates along d1, d2, d3 from the centre of mass)."""
        return Point(self, _vec(f"{self.name}: material point", X, 3))

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(q0, v0) with d_i' = omega x d_i (KBS23a eq 68)."""
        w = np.asarray(self.angular_velocity)
        D = [np.asarray(d) for d in self.directors]
        q = np.concatenate([self.position, *D])
        v = np.concatenate([self.velocity, *[np.cross(w, d) for d in D]])
        return q, v


def _perp(d):
    """omega x d for omega = e3 in the plane: (-d_y, d_x)."""
    return np.array([-d[1], d[0]])


@dataclass(frozen=True)
class PlanarRigidBody:
    """A rigid body in the plane in director form (KBS23a §5.2 eq 70-73).

    q = (phi, d1, d2) in R^6, M = diag(m I, E1 I, E2 I) (KBS23a eq 71) with E_alpha = J/2 for the
    moment of inertia J about the centre of mass (the paper's choice; the kinetic energy of a rigid
    motion, 1/2 m |phi'|^2 + 1/2 (E1 + E2) omega^2, is the same for any E1 + E2 = J). ``euler``
    sets (E1, E2) explicitly. Three internal constraints (KBS23a eq 73).

    Initial state: ``position``, ``directors`` (rows d1, d2), ``velocity`` of phi and the
    ``angular_velocity`` omega (counter-clockwise positive), so that d_alpha' = omega e3 x d_alpha.
    ``shape`` lists material points drawn as a polyline (a bar: its two ends).
    """

    name: str
    mass: float
    inertia: float
    position: tuple = (0.0, 0.0)
    directors: tuple = ((1.0, 0.0), (0.0, 1.0))
    velocity: tuple = (0.0, 0.0)
    angular_velocity: float = 0.0
    shape: tuple = ()
    euler: tuple | None = None

    kind = "planar-rigid-body"
    dim = 2
    size = 6
    blocks = ("phi", "d1", "d2")
    internal_names = _orthonormal_names(2)

    def __post_init__(self):
        """Check and normalise the data (tuples of floats), with messages naming the body."""
        _check_name(self.name)
        if not (float(self.mass) > 0):
            raise ValueError(f"{self.name}: mass must be positive; got {self.mass!r}.")
        object.__setattr__(self, "mass", float(self.mass))
        if not (float(self.inertia) >= 0):
            raise ValueError(f"{self.name}: the moment of inertia must be >= 0; got {self.inertia!r}.")
        object.__setattr__(self, "inertia", float(self.inertia))
        E = (
            (0.5 * self.inertia, 0.5 * self.inertia)
            if self.euler is None
            else _vec(f"{self.name}: euler", self.euler, 2)
        )
        if min(E) < 0:
            raise ValueError(f"{self.name}: E1, E2 must be >= 0; got {E}.")
        object.__setattr__(self, "euler", E)
        object.__setattr__(self, "position", _vec(f"{self.name}: position", self.position, 2))
        object.__setattr__(self, "directors", _frame(self.name, self.directors, 2))
        object.__setattr__(self, "velocity", _vec(f"{self.name}: velocity", self.velocity, 2))
        object.__setattr__(self, "angular_velocity", float(self.angular_velocity))
        object.__setattr__(self, "shape", tuple(_vec(f"{self.name}: shape point", X, 2) for X in self.shape))

    def coordinate_names(self) -> tuple[str, ...]:
        """Names of the body's coordinates, e.g. "B1.phi.x", "B1.d1.y" (KBS23a eq 59, 70)."""
        return tuple(f"{self.name}.{b}.{c}" for b in self.blocks for c in _AXES[:2])

    def mass_diagonal(self) -> np.ndarray:
        """The diagonal of M = diag(m I, E1 I, E2 I) (KBS23a eq 71)."""
        return np.repeat([self.mass, *self.euler], 2)

    def internal_constraints(self, qb: jax.Array | np.ndarray) -> jax.Array:
        """The three orthonormality constraints of (d1, d2) (KBS23a eq 73)."""
        return orthonormality([qb[2:4], qb[4:6]])

    def position_slice(self) -> slice:
        """Where phi (the centre of mass) lies in the body's coordinates (KBS23a eq 59, 70)."""
        return slice(0, 2)

    def placement_matrix(self, X: ArrayLike) -> np.ndarray:
        """S with x = phi + X_1 d1 + X_2 d2 = S q_body (KBS23a eq 58 in the plane; eq 74)."""
        return _director_matrix(_vec(f"{self.name}: material point", X, 2), 2)

    def place(self, qb: jax.Array | np.ndarray, X: ArrayLike) -> jax.Array | np.ndarray:
        """x = phi + X_1 d1 + X_2 d2 (KBS23a eq 58 in the plane; eq 74), for q_body of any leading shape."""
        return qb @ self.placement_matrix(X).T

    def point(self, X: ArrayLike) -> Point:
        """The material point X (coordinates along d1, d2 from the centre of mass)."""
        return Point(self, _vec(f"{self.name}: material point", X, 2))

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(q0, v0) with d_alpha' = omega e3 x d_alpha."""
        D = [np.asarray(d) for d in self.directors]
        q = np.concatenate([self.position, *D])
        v = np.concatenate([self.velocity, *[self.angular_velocity * _perp(d) for d in D]])
        return q, v


def bar(
    name: str,
    length: float,
    mass: float,
    center: ArrayLike,
    direction: ArrayLike,
    normal: ArrayLike | None = None,
    velocity: ArrayLike = (0.0, 0.0),
    angular_velocity: float = 0.0,
) -> PlanarRigidBody:
    """A slender planar bar (KBS23a §5.2): J = m l^2 / 12, d1 = ``direction`` along the bar,
    d2 = ``normal`` (default (d1_y, -d1_x), the convention of the data of the
    authors' MATLAB code metis), drawn between its ends X = (-l/2, 0) and (l/2, 0)."""
    d1 = np.asarray(direction, dtype=float)
    n = float(np.linalg.norm(d1))
    if d1.shape != (2,) or not n > 0:
        raise ValueError(f"{name}: direction must be a nonzero 2-vector; got {direction!r}.")
    d1 = d1 / n
    d2 = np.array([d1[1], -d1[0]]) if normal is None else np.asarray(normal, dtype=float)
    half = 0.5 * float(length)
    return PlanarRigidBody(
        name,
        mass=mass,
        inertia=mass * length**2 / 12.0,
        position=center,
        directors=(d1, d2),
        velocity=velocity,
        angular_velocity=angular_velocity,
        shape=((-half, 0.0), (half, 0.0)),
    )


def rod(
    name: str,
    length: float,
    mass: float,
    radius: float,
    center: ArrayLike,
    directors: ArrayLike,
    velocity: ArrayLike = (0.0, 0.0, 0.0),
    angular_velocity: ArrayLike = (0.0, 0.0, 0.0),
) -> RigidBody:
    """A solid circular rod in 3D, the counterpart of :func:`bar`: d1 (the first row of ``directors``)
    along its axis, J = (m r^2 / 2, m (l^2 / 12 + r^2 / 4), m (l^2 / 12 + r^2 / 4)) about d1, d2, d3,
    drawn between its ends X = (-l/2, 0, 0) and (l/2, 0, 0)."""
    length, mass, radius = float(length), float(mass), float(radius)
    if not (length > 0 and radius >= 0):
        raise ValueError(f"{name}: length must be positive and radius non-negative; got {length!r}, {radius!r}.")
    Jt = mass * (length**2 / 12.0 + radius**2 / 4.0)
    half = 0.5 * length
    return RigidBody(
        name,
        mass=mass,
        inertia=(0.5 * mass * radius**2, Jt, Jt),
        position=center,
        directors=directors,
        velocity=velocity,
        angular_velocity=angular_velocity,
        shape=((-half, 0.0, 0.0), (half, 0.0, 0.0)),
    )


def pyramid_inertia(mass: float, base_edge: float, height: float) -> tuple[float, float, float]:
    """Principal moments of inertia (J_1, J_2, J_3) about the centroid of a solid right pyramid with a
    square base of edge a and height H (axis d3): J_1 = J_2 = m (a^2/20 + 3 H^2/80), J_3 = m a^2/10.
    The centroid lies on the axis, H/4 above the base."""
    a, H, m = float(base_edge), float(height), float(mass)
    if not (a > 0 and H > 0 and m > 0):
        raise ValueError(
            f"pyramid: mass, base_edge and height must be positive; got {mass!r}, {base_edge!r}, {height!r}."
        )
    Jt = m * (a**2 / 20.0 + 3.0 * H**2 / 80.0)
    return (Jt, Jt, m * a**2 / 10.0)


def pyramid(
    name: str,
    mass: float,
    base_edge: float,
    height: float,
    base_center: ArrayLike,
    apex_direction: ArrayLike,
    edge_direction: ArrayLike | None = None,
    velocity: ArrayLike = (0.0, 0.0, 0.0),
    angular_velocity: ArrayLike = (0.0, 0.0, 0.0),
) -> RigidBody:
    """A solid right pyramid with a square base (the rigid bodies of the three-bar swing, SLO09 §4.2) as a
    :class:`RigidBody` from its mass and principal inertia (:func:`pyramid_inertia`): d3 points from the
    base centre to the apex along ``apex_direction``, d1 along a base edge (``edge_direction``, made
    normal to d3; default any normal), d2 = d3 x d1; the centre of mass sits H/4 above ``base_center``.
    Its material points: the base centre X = (0, 0, -H/4) and the apex X = (0, 0, 3H/4)
    (:func:`pyramid_points`); it is drawn by its edges."""
    e3 = np.asarray(_vec(f"{name}: apex_direction", apex_direction, 3))
    if not np.linalg.norm(e3) > 0:
        raise ValueError(f"{name}: apex_direction must be nonzero.")
    e3 = e3 / np.linalg.norm(e3)
    c = (
        np.eye(3)[int(np.argmin(np.abs(e3)))]
        if edge_direction is None
        else np.asarray(_vec(f"{name}: edge_direction", edge_direction, 3))
    )
    e1 = c - (c @ e3) * e3
    if not np.linalg.norm(e1) > 1e-12:
        raise ValueError(f"{name}: edge_direction is parallel to apex_direction; give a direction across the axis.")
    e1 /= np.linalg.norm(e1)
    H, a = float(height), float(base_edge)
    J = pyramid_inertia(mass, a, H)
    centroid = np.asarray(_vec(f"{name}: base_center", base_center, 3)) + 0.25 * H * e3
    z0, z1, r = -0.25 * H, 0.75 * H, 0.5 * a
    corners = [(r, r, z0), (-r, r, z0), (-r, -r, z0), (r, -r, z0)]
    apex = (0.0, 0.0, z1)
    outline = (
        corners[0],
        corners[1],
        corners[2],
        corners[3],
        corners[0],
        apex,
        corners[1],
        corners[2],
        apex,
        corners[3],
    )
    return RigidBody(
        name,
        mass=mass,
        inertia=J,
        position=centroid,
        directors=(e1, np.cross(e3, e1), e3),
        velocity=velocity,
        angular_velocity=angular_velocity,
        shape=outline,
    )


def pyramid_points(height: float) -> tuple[tuple, tuple]:
    """The material points (base centre, apex) of a :func:`pyramid` of height H, relative to its centroid."""
    H = float(height)
    return (0.0, 0.0, -0.25 * H), (0.0, 0.0, 0.75 * H)


BODY_TYPES = (PointMass, RigidBody, PlanarRigidBody)
