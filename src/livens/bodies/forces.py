"""Forces: gravity, springs and viscous dampers between material points (KBS23a §5, eq 63, 72, 77-78;
KBS23b eq 116), and prescribed point loads with a time function (the pulse of SLO09 §4.2).

Conservative forces give potentials; each is also written as a function of one invariant pi(q)
(KBS23b eq 122-124): a spring's pi = |x_A - x_B|^2, gravity's pi = -sum m b.phi (linear), so that the
Assembly can declare V(q) = sum_i V_i(pi_i(q)) for Greenspan's discrete gradient (KBS23b eq 126).

A damper contributes the Rayleigh dissipation function R(q, v) = 1/2 eta |v_rel|^2 of the relative
velocity of its two points (KBS23a eq 77-78); the Assembly derives the dissipation matrix C(q) of
KBS23a eq 53-54 from it by AD, as the Hessian of R in v (the matrix printed as KBS23a eq 80 is garbled).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from .joints import _check_point, _on_axis
from .layout import _Placement
from .rigid import Point, _check_name


@dataclass(frozen=True)
class Gravity:
    """Uniform gravity b: V = -sum_i m_i b.phi_i over the bodies (KBS23a eq 63, 72; KBS23b §6.2); over a
    beam's nodes with their lumped masses (exact for the linear interpolation).

    ``bodies``: names of the bodies it acts on (default: all).
    """

    b: tuple
    bodies: tuple | None = None
    name: str = "gravity"

    kind = "gravity"

    def __post_init__(self):
        """Check the parameters, with messages naming the force."""
        b = np.asarray(self.b, dtype=float)
        if b.ndim != 1 or b.shape[0] not in (2, 3) or not np.all(np.isfinite(b)):
            raise ValueError(f"gravity: b must be a finite 2- or 3-vector; got {self.b!r}.")
        object.__setattr__(self, "b", tuple(float(x) for x in b))
        if self.bodies is not None:
            object.__setattr__(self, "bodies", tuple(self.bodies))

    def points(self) -> tuple[Point, ...]:
        """The points the force acts between (none for gravity)."""
        return ()

    def resolved(self, x0: Callable) -> Gravity:
        """A copy with defaults (rest length) from the initial placement ``x0(point)``."""
        return self

    def _acts_on(self, body) -> bool:
        """Whether gravity acts on ``body``."""
        return self.bodies is None or body.name in self.bodies

    def invariants(self, P: _Placement) -> list[jax.Array | np.ndarray]:
        """pi = -sum m b.phi, the potential energy itself (a linear invariant)."""
        idx, owners, mass = P.layout.mass_points()
        masses = np.array([m if self._acts_on(body) else 0.0 for body, m in zip(owners, mass)])
        return [-(masses @ (P.q[..., idx] @ np.asarray(self.b)))]

    def invariant_potentials(self) -> list[Callable]:
        """V(pi) = pi: gravity's potential is its invariant (KBS23a eq 63, 72)."""
        return [lambda pi: pi]

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """V is invariant under rotations about ``axis`` (KBS23b eq 41a) when every ground point is on it."""
        b = np.asarray(self.b)
        if dim == 2:
            return bool(np.max(np.abs(b)) == 0.0)
        return bool(np.linalg.norm(np.cross(b, axis)) <= 1e-12 * max(1.0, np.linalg.norm(b)))

    def translation_invariant(self, direction: ArrayLike, dim: int) -> bool:
        """Invariant under translations when nothing is attached to the ground (KBS23b eq 41a)."""
        return bool(
            abs(np.asarray(self.b) @ np.asarray(direction, dtype=float)) <= 1e-12 * max(1.0, np.linalg.norm(self.b))
        )


@dataclass(frozen=True)
class Spring:
    """A spring between two points with length ell = |x_A - x_B|, written in the invariant
    pi = ell^2 (KBS23b eq 122):

    * ``law="linear"``: V = 1/2 k (ell - L)^2, the linear spring;
    * ``law="squared"``: V = 1/2 k (ell^2 - L^2)^2, the nonlinear spring of KBS23b eq 116;
    * ``potential=f``: any V = f(pi) (a jax function of the scalar pi).

    ``rest_length`` L defaults to the initial length.
    """

    name: str
    a: Point
    b: Point
    stiffness: float = 0.0
    rest_length: float | None = None
    law: str = "linear"
    potential: Callable | None = None

    kind = "spring"

    def __post_init__(self):
        """Check the parameters, with messages naming the force."""
        _check_name(self.name)
        _check_point(self.name, self.a)
        _check_point(self.name, self.b)
        if self.law not in ("linear", "squared"):
            raise ValueError(f"{self.name}: law must be 'linear' or 'squared' (KBS23b eq 116); got {self.law!r}.")
        if self.potential is None and not (float(self.stiffness) >= 0):
            raise ValueError(f"{self.name}: stiffness must be >= 0; got {self.stiffness!r}.")
        if self.potential is not None and not callable(self.potential):
            raise TypeError(f"{self.name}: potential must be a function pi -> V of pi = |x_A - x_B|^2.")

    def points(self) -> tuple[Point, ...]:
        """The points the force acts between (none for gravity)."""
        return (self.a, self.b)

    def resolved(self, x0: Callable) -> Spring:
        """A copy with defaults (rest length) from the initial placement ``x0(point)``."""
        if self.rest_length is not None or self.potential is not None:
            return self
        L = float(np.linalg.norm(np.asarray(x0(self.a)) - np.asarray(x0(self.b))))
        return replace(self, rest_length=L)

    def invariants(self, P: _Placement) -> list[jax.Array | np.ndarray]:
        """pi = |x_A - x_B|^2 (KBS23b eq 122)."""
        r = P.x(self.a) - P.x(self.b)
        return [r @ r]

    def invariant_potentials(self) -> list[Callable]:
        """V(pi) of the spring law (KBS23b eq 124 for ``law="squared"``)."""
        if self.potential is not None:
            return [self.potential]
        k, L = float(self.stiffness), float(self.rest_length)
        if self.law == "squared":
            return [lambda pi: 0.5 * k * (pi - L**2) ** 2]
        return [lambda pi: 0.5 * k * (jnp.sqrt(pi) - L) ** 2]

    def ground_points(self) -> list[np.ndarray]:
        """Positions of the force's ground points."""
        return [np.asarray(p.X) for p in self.points() if p.is_ground]

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """V is invariant under rotations about ``axis`` (KBS23b eq 41a) when every ground point is on it."""
        return all(_on_axis(x0, axis, dim) for x0 in self.ground_points())

    def translation_invariant(self, direction: ArrayLike, dim: int) -> bool:
        """Invariant under translations when nothing is attached to the ground (KBS23b eq 41a)."""
        return not self.ground_points()


@dataclass(frozen=True)
class Damper:
    """A viscous damper between two points with Rayleigh function R = 1/2 eta |v_rel|^2, v_rel the
    relative velocity of the points (KBS23a eq 77-78, with eta_i = 0.5 in §5.2).

    ``axial=True`` damps only the rate of change of the distance, R = 1/2 eta (e.v_rel)^2 with
    e = (x_A - x_B)/|x_A - x_B| (a dashpot; its force is along the line of the points, so it keeps
    angular momentum). The force is -D_v R = -C(q) v with C the Hessian of R in v (KBS23a eq 53-54).
    """

    name: str
    a: Point
    b: Point
    eta: float = 0.0
    axial: bool = False

    kind = "damper"

    def __post_init__(self):
        """Check the parameters, with messages naming the force."""
        _check_name(self.name)
        _check_point(self.name, self.a)
        _check_point(self.name, self.b)
        if not (float(self.eta) >= 0):
            raise ValueError(f"{self.name}: the damping constant eta must be >= 0; got {self.eta!r}.")

    def points(self) -> tuple[Point, ...]:
        """The points the force acts between (none for gravity)."""
        return (self.a, self.b)

    def resolved(self, x0: Callable) -> Damper:
        """A copy with defaults (rest length) from the initial placement ``x0(point)``."""
        return self

    def rayleigh(self, r: jax.Array | np.ndarray, rdot: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
        """R = 1/2 eta rdot.rdot (KBS23a eq 77), or 1/2 eta (r.rdot)^2 / r.r for an axial damper."""
        if self.axial:
            return 0.5 * self.eta * (r @ rdot) ** 2 / (r @ r)
        return 0.5 * self.eta * (rdot @ rdot)

    def ground_points(self) -> list[np.ndarray]:
        """Positions of the force's ground points."""
        return [np.asarray(p.X) for p in self.points() if p.is_ground]

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """The momentum map of a rotation is kept only by an axial damper (its moment vanishes)."""
        return self.axial and all(_on_axis(x0, axis, dim) for x0 in self.ground_points())

    def translation_invariant(self, direction: ArrayLike, dim: int) -> bool:
        """Invariant under translations when nothing is attached to the ground (KBS23b eq 41a)."""
        return not self.ground_points()


def triangular_pulse(t_peak: float, t_end: float, t_start: float = 0.0) -> Callable:
    """The time function of a triangular pulse: 0 at ``t_start``, 1 at ``t_peak``, 0 from ``t_end`` on
    (the load of the three-bar swing, SLO09 §4.2: 0 at t = 0, peak at 0.125 s, 0 at 0.25 s). A jax
    function of t."""
    t0, tp, t1 = float(t_start), float(t_peak), float(t_end)
    if not (t0 < tp < t1):
        raise ValueError(f"triangular_pulse: need t_start < t_peak < t_end; got {t0:g}, {tp:g}, {t1:g}.")

    def pulse(t):
        """0 -> 1 -> 0, piecewise linear."""
        return jnp.clip(jnp.minimum((t - t0) / (tp - t0), (t1 - t) / (t1 - tp)), 0.0, 1.0)

    pulse.support = (t0, t1)
    return pulse


@dataclass(frozen=True)
class PointLoad:
    """A prescribed (dead) force f(t) = ``force`` * ``time_function``(t) on a material point: the
    generalized force F(q, t) = Dx(q)^T f(t), the gradient of the virtual work f(t) . x(q) (by AD).
    ``time_function`` is a jax function of t (default 1: a constant force), e.g.
    :func:`triangular_pulse`. It enters the schemes as the System's ``external_force``; momentum
    maps of translations normal to the force and of rotations about axes parallel to it are kept
    (KBS23b eq 41)."""

    name: str
    point: Point
    force: tuple
    time_function: Callable | None = None

    kind = "load"

    def __post_init__(self):
        """Check the parameters, with messages naming the load."""
        _check_name(self.name)
        _check_point(self.name, self.point)
        if self.point.is_ground:
            raise ValueError(f"{self.name}: a load acts on a body point, not a ground point.")
        f = np.asarray(self.force, dtype=float)
        if f.ndim != 1 or f.shape[0] not in (2, 3) or not np.all(np.isfinite(f)):
            raise ValueError(f"{self.name}: force must be a finite 2- or 3-vector; got {self.force!r}.")
        object.__setattr__(self, "force", tuple(float(x) for x in f))
        if self.time_function is not None and not callable(self.time_function):
            raise TypeError(f"{self.name}: time_function must be a function t -> scale (or None for a constant load).")

    def points(self) -> tuple[Point, ...]:
        """The point the load acts on."""
        return (self.point,)

    def resolved(self, x0: Callable) -> PointLoad:
        """The load itself (no defaults to resolve)."""
        return self

    def scale(self, t: float | jax.Array) -> float | jax.Array:
        """time_function(t), or 1."""
        return 1.0 if self.time_function is None else self.time_function(t)

    def virtual_work(self, x: Callable, t: float | jax.Array) -> jax.Array:
        """f(t) . x(q), whose gradient in q is the generalized force."""
        return self.scale(t) * (jnp.asarray(self.force) @ x(self.point))

    def ground_points(self) -> list[np.ndarray]:
        """None: a load is not attached to the ground."""
        return []

    def rotation_invariant(self, axis: ArrayLike | None, dim: int) -> bool:
        """The angular momentum about ``axis`` (3D) is kept when the force is parallel to it (its moment
        about the axis, (x x f) . a, vanishes wherever the point is); in the plane never."""
        if dim != 3:
            return False
        f = np.asarray(self.force)
        return bool(np.linalg.norm(np.cross(f, np.asarray(axis, dtype=float))) <= 1e-12 * max(1.0, np.linalg.norm(f)))

    def translation_invariant(self, direction: ArrayLike, dim: int) -> bool:
        """The momentum along ``direction`` is kept when the force is normal to it."""
        f = np.asarray(self.force)
        return bool(abs(f @ np.asarray(direction, dtype=float)) <= 1e-12 * max(1.0, np.linalg.norm(f)))


FORCE_TYPES = (Gravity, Spring, Damper, PointLoad)
