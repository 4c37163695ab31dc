"""Forces: gravity, springs and viscous dampers between material points (000 §5, eq 63, 72, 77-78;
002 eq 116).

Conservative forces give potentials; each is also written as a function of one invariant pi(q)
(002 eq 122-124): a spring's pi = |x_A - x_B|^2, gravity's pi = -sum m b.phi (linear), so that the
Assembly can declare V(q) = sum_i V_i(pi_i(q)) for Greenspan's discrete gradient (002 eq 126).

A damper contributes the Rayleigh dissipation function R(q, v) = 1/2 eta |v_rel|^2 of the relative
velocity of its two points (000 eq 77-78); the Assembly derives the dissipation matrix C(q) of
000 eq 53-54 from it by AD, as the Hessian of R in v (the matrix printed as 000 eq 80 is garbled).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import jax.numpy as jnp
import numpy as np

from .joints import _check_point, _on_axis
from .rigid import Point, _check_name


@dataclass(frozen=True)
class Gravity:
    """Uniform gravity b: V = -sum_i m_i b.phi_i over the bodies (000 eq 63, 72; 002 §6.2).

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

    def points(self):
        """The points the force acts between (none for gravity)."""
        return ()

    def resolved(self, x0):
        """A copy with defaults (rest length) from the initial placement ``x0(point)``."""
        return self

    def _acts_on(self, body) -> bool:
        """Whether gravity acts on ``body``."""
        return self.bodies is None or body.name in self.bodies

    def invariants(self, P) -> list:
        """pi = -sum m b.phi, the potential energy itself (a linear invariant)."""
        masses = np.array([body.mass if self._acts_on(body) else 0.0 for body in P.bodies])
        return [-(masses @ (P.centers() @ np.asarray(self.b)))]

    def invariant_potentials(self) -> list[Callable]:
        """V(pi) = pi: gravity's potential is its invariant (000 eq 63, 72)."""
        return [lambda pi: pi]

    def rotation_invariant(self, axis, dim: int) -> bool:
        """V is invariant under rotations about ``axis`` (002 eq 41a) when every ground point is on it."""
        b = np.asarray(self.b)
        if dim == 2:
            return bool(np.max(np.abs(b)) == 0.0)
        return bool(np.linalg.norm(np.cross(b, axis)) <= 1e-12 * max(1.0, np.linalg.norm(b)))

    def translation_invariant(self, direction, dim: int) -> bool:
        """Invariant under translations when nothing is attached to the ground (002 eq 41a)."""
        return bool(abs(np.asarray(self.b) @ np.asarray(direction, dtype=float)) <= 1e-12 * max(1.0, np.linalg.norm(self.b)))


@dataclass(frozen=True)
class Spring:
    """A spring between two points with length ell = |x_A - x_B|, written in the invariant
    pi = ell^2 (002 eq 122):

    * ``law="linear"``: V = 1/2 k (ell - L)^2, the linear spring;
    * ``law="squared"``: V = 1/2 k (ell^2 - L^2)^2, the nonlinear spring of 002 eq 116;
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
            raise ValueError(f"{self.name}: law must be 'linear' or 'squared' (002 eq 116); got {self.law!r}.")
        if self.potential is None and not (float(self.stiffness) >= 0):
            raise ValueError(f"{self.name}: stiffness must be >= 0; got {self.stiffness!r}.")
        if self.potential is not None and not callable(self.potential):
            raise TypeError(f"{self.name}: potential must be a function pi -> V of pi = |x_A - x_B|^2.")

    def points(self):
        """The points the force acts between (none for gravity)."""
        return (self.a, self.b)

    def resolved(self, x0):
        """A copy with defaults (rest length) from the initial placement ``x0(point)``."""
        if self.rest_length is not None or self.potential is not None:
            return self
        L = float(np.linalg.norm(np.asarray(x0(self.a)) - np.asarray(x0(self.b))))
        return replace(self, rest_length=L)

    def invariants(self, P) -> list:
        """pi = |x_A - x_B|^2 (002 eq 122)."""
        r = P.x(self.a) - P.x(self.b)
        return [r @ r]

    def invariant_potentials(self) -> list[Callable]:
        """V(pi) of the spring law (002 eq 124 for ``law="squared"``)."""
        if self.potential is not None:
            return [self.potential]
        k, L = float(self.stiffness), float(self.rest_length)
        if self.law == "squared":
            return [lambda pi: 0.5 * k * (pi - L**2) ** 2]
        return [lambda pi: 0.5 * k * (jnp.sqrt(pi) - L) ** 2]

    def ground_points(self):
        """Positions of the force's ground points."""
        return [np.asarray(p.X) for p in self.points() if p.is_ground]

    def rotation_invariant(self, axis, dim: int) -> bool:
        """V is invariant under rotations about ``axis`` (002 eq 41a) when every ground point is on it."""
        return all(_on_axis(x0, axis, dim) for x0 in self.ground_points())

    def translation_invariant(self, direction, dim: int) -> bool:
        """Invariant under translations when nothing is attached to the ground (002 eq 41a)."""
        return not self.ground_points()


@dataclass(frozen=True)
class Damper:
    """A viscous damper between two points with Rayleigh function R = 1/2 eta |v_rel|^2, v_rel the
    relative velocity of the points (000 eq 77-78, with eta_i = 0.5 in §5.2).

    ``axial=True`` damps only the rate of change of the distance, R = 1/2 eta (e.v_rel)^2 with
    e = (x_A - x_B)/|x_A - x_B| (a dashpot; its force is along the line of the points, so it keeps
    angular momentum). The force is -D_v R = -C(q) v with C the Hessian of R in v (000 eq 53-54).
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

    def points(self):
        """The points the force acts between (none for gravity)."""
        return (self.a, self.b)

    def resolved(self, x0):
        """A copy with defaults (rest length) from the initial placement ``x0(point)``."""
        return self

    def rayleigh(self, r, rdot):
        """R = 1/2 eta rdot.rdot (000 eq 77), or 1/2 eta (r.rdot)^2 / r.r for an axial damper."""
        if self.axial:
            return 0.5 * self.eta * (r @ rdot) ** 2 / (r @ r)
        return 0.5 * self.eta * (rdot @ rdot)

    def ground_points(self):
        """Positions of the force's ground points."""
        return [np.asarray(p.X) for p in self.points() if p.is_ground]

    def rotation_invariant(self, axis, dim: int) -> bool:
        """The momentum map of a rotation is kept only by an axial damper (its moment vanishes)."""
        return self.axial and all(_on_axis(x0, axis, dim) for x0 in self.ground_points())

    def translation_invariant(self, direction, dim: int) -> bool:
        """Invariant under translations when nothing is attached to the ground (002 eq 41a)."""
        return not self.ground_points()


FORCE_TYPES = (Gravity, Spring, Damper)
