"""The numbered description of an assembled mechanism (:class:`Layout`: bodies with their offsets into
q, joints and forces) and the placement of its points at a configuration, which joints and forces
evaluate (KBS23a §5, eq 58). :mod:`livens.bodies.assembly` builds it; :mod:`livens.bodies.draw`
reads it."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .beam import Beam
from .rigid import PlanarRigidBody, Point, PointMass, RigidBody


@dataclass(frozen=True, eq=False)
class Layout:
    """The numbered mechanism: bodies (in coordinate order) with their offsets into q, and the
    joints and forces with their defaults resolved (rest lengths, anchor points)."""

    name: str
    dim: int
    bodies: tuple
    offsets: tuple
    joints: tuple
    forces: tuple

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return int(sum(b.size for b in self.bodies))

    def body(self, name: str) -> PointMass | RigidBody | PlanarRigidBody | Beam:
        """The body called ``name``."""
        for b in self.bodies:
            if b.name == name:
                return b
        raise KeyError(f"No body {name!r} in {self.name!r}; bodies: {', '.join(b.name for b in self.bodies)}.")

    def index(self, body: PointMass | RigidBody | PlanarRigidBody | Beam | str) -> int:
        """The position of ``body`` (or its name) in the body list."""
        name = body if isinstance(body, str) else body.name
        for i, b in enumerate(self.bodies):
            if b.name == name:
                return i
        raise KeyError(f"No body {name!r} in {self.name!r}; bodies: {', '.join(b.name for b in self.bodies)}.")

    def coordinates(
        self, q: jax.Array | np.ndarray, body: PointMass | RigidBody | PlanarRigidBody | Beam | str
    ) -> jax.Array | np.ndarray:
        """The body's block q[..., offset:offset + size] (jax or numpy, any leading shape)."""
        i = self.index(body)
        o = self.offsets[i]
        return q[..., o : o + self.bodies[i].size]

    def x(self, q: jax.Array | np.ndarray, point: Point) -> jax.Array | np.ndarray:
        """The placement x(q) = phi + X_i d_i of ``point`` (KBS23a eq 58); works on stacks q[..., d]."""
        if point.is_ground:
            X = np.asarray(point.X, dtype=float)
            if isinstance(q, np.ndarray):
                return np.broadcast_to(X, q.shape[:-1] + X.shape)
            return jnp.asarray(X)
        return point.body.place(self.coordinates(q, point.body), point.X)

    def center(
        self, q: jax.Array | np.ndarray, body: PointMass | RigidBody | PlanarRigidBody | Beam
    ) -> jax.Array | np.ndarray:
        """The position block (phi of a rigid body, x of a particle)."""
        return self.coordinates(q, body)[..., body.position_slice()]

    def center_index(self) -> np.ndarray:
        """Indices (n_bodies, dim) of every body's position block in q."""
        return np.array(
            [
                [o + body.position_slice().start + k for k in range(self.dim)]
                for body, o in zip(self.bodies, self.offsets)
            ]
        )

    def frame(self, q: jax.Array | np.ndarray, point: Point) -> jax.Array | np.ndarray:
        """The director frame (rows d_i, shape (..., dim, dim)) of the body carrying ``point``: a rigid
        body's directors, a beam node's."""
        body = point.body
        qb = self.coordinates(q, body)
        if isinstance(body, Beam):
            return body.directors(qb, point.X)
        if isinstance(body, RigidBody):
            return qb[..., 3:12].reshape(qb.shape[:-1] + (3, 3))
        raise ValueError(
            f"{body.name} has no director frame (a {body.kind}); a hinge axis needs a rigid body or a beam node."
        )

    def mass_points(self) -> tuple:
        """The points that carry translational mass: (indices (n_points, dim) of their position
        blocks in q, the body of each, their masses). One per body (its centre of mass), and each node
        of a beam with its lumped mass (:meth:`Beam.node_masses`)."""
        rows, owners, masses = [], [], []
        for body, o in zip(self.bodies, self.offsets):
            if isinstance(body, Beam):
                for s, m in zip(body.position_slices(), body.node_masses()):
                    rows.append([o + s.start + k for k in range(self.dim)])
                    owners.append(body)
                    masses.append(float(m))
            else:
                rows.append([o + body.position_slice().start + k for k in range(self.dim)])
                owners.append(body)
                masses.append(body.mass)
        return np.array(rows, dtype=int), tuple(owners), np.array(masses)


class _Placement:
    """Positions of points at one configuration q (what joints and forces evaluate)."""

    def __init__(self, layout: Layout, q):
        """Placements at the configuration ``q``."""
        self.layout = layout
        self.q = q
        self.bodies = layout.bodies

    def x(self, point: Point):
        """x(q) of ``point`` (KBS23a eq 58)."""
        return self.layout.x(self.q, point)

    def center(self, body):
        """phi of ``body``."""
        return self.layout.center(self.q, body)

    def frame(self, point: Point):
        """The director frame of the body (or beam node) of ``point``."""
        return self.layout.frame(self.q, point)
