"""Assembly: bodies, joints and forces numbered into one constrained mechanical System (KBS23a §5).

The coordinates are the bodies' own, one block after the other in the order given; the mass matrix
is block diagonal and constant (KBS23a eq 60, 71); the constraints are the bodies' internal ones
followed by the joints' (g = [g_int; g_ext], KBS23b eq 102); the potential is the sum of the forces'
potentials, also declared through invariants (KBS23b eq 122-126); the dampers' Rayleigh functions give
C(q) (KBS23a eq 53-54, 77) by AD. Coordinates and constraints are named after their bodies and joints
("B1.phi.x", "B1.orthonormal[d1.d2]", "P4.revolute.x"), so that messages and files say which.

The System built here is an :class:`AssembledSystem`: an ordinary :class:`livens.System` that also
carries ``layout``, the numbered description of the mechanism (bodies, offsets, joints, forces).
The drawings of :mod:`livens.bodies.draw` read it from ``solution.problem.system.layout``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from .. import _jaxconfig  # noqa: F401
from ..numpy_jaxpr import NumpyFunction
from ..problem import Problem
from ..system import Symmetry, System
from .beam import Beam
from .forces import FORCE_TYPES, Damper, Gravity, PointLoad, Spring
from .joints import JOINT_TYPES, Clamp, FixedPoint, OnAxis, Revolute, Spherical
from .layout import Layout, _Placement
from .rigid import BODY_TYPES, RigidBody

ALL_BODY_TYPES = BODY_TYPES + (Beam,)


@dataclass(frozen=True, eq=False)
class AssembledSystem(System):
    """A :class:`livens.System` built by :class:`Assembly`; ``layout`` describes the mechanism
    (bodies with their coordinate offsets, joints, forces) for drawings and introspection."""

    layout: Any = None


def _unit(i: int, dim: int) -> np.ndarray:
    """The unit vector e_(i+1) of R^dim."""
    e = np.zeros(dim)
    e[i] = 1.0
    return e


@dataclass(frozen=True, eq=False)
class Assembly:
    """A mechanism built from blocks (KBS23a §5): ``bodies`` (PointMass, RigidBody, PlanarRigidBody,
    Beam), ``joints`` (FixedPoint, Spherical, Revolute, Clamp, Distance, OnAxis) and ``forces`` (Gravity,
    Spring, Damper, PointLoad). Use :meth:`system` for the :class:`AssembledSystem` and
    :meth:`problem` for a Problem with the bodies' initial state and the symmetries that apply.
    Beams add their stored energy to the potential and their consistent mass blocks to M; point
    loads become the System's ``external_force``.
    """

    bodies: tuple
    joints: tuple = ()
    forces: tuple = ()
    name: str = "assembly"
    _layout: Any = field(default=None, init=False, repr=False)
    _plan: Any = field(default=None, init=False, repr=False)

    def __post_init__(self):
        """Check the blocks (types, one dimension, unique names, points on member bodies), number them and
        resolve defaults."""
        bodies, joints, forces = tuple(self.bodies), tuple(self.joints), tuple(self.forces)
        object.__setattr__(self, "bodies", bodies)
        object.__setattr__(self, "joints", joints)
        object.__setattr__(self, "forces", forces)
        if not bodies:
            raise ValueError("An Assembly needs at least one body.")
        for b in bodies:
            if not isinstance(b, ALL_BODY_TYPES):
                raise TypeError(
                    f"bodies: expected PointMass, RigidBody, PlanarRigidBody or Beam; got {type(b).__name__}."
                )
        for j in joints:
            if not isinstance(j, JOINT_TYPES):
                raise TypeError(
                    f"joints: expected FixedPoint, Spherical, Revolute, Clamp, Distance or OnAxis; got {type(j).__name__}."
                )
        for f in forces:
            if not isinstance(f, FORCE_TYPES):
                raise TypeError(f"forces: expected Gravity, Spring, Damper or PointLoad; got {type(f).__name__}.")
        dims = {b.dim for b in bodies}
        if len(dims) != 1:
            raise ValueError(
                f"All bodies must live in the same space (2D or 3D); got dimensions {sorted(dims)}: "
                + ", ".join(f"{b.name}: {b.dim}D" for b in bodies)
                + "."
            )
        dim = dims.pop()
        seen: dict[str, str] = {}
        for kind, items in (("body", bodies), ("joint", joints), ("force", forces)):
            for it in items:
                if it.name in seen:
                    raise ValueError(
                        f"The name {it.name!r} is used twice (a {seen[it.name]} and a {kind}); names must be unique."
                    )
                seen[it.name] = kind
        by_name = {b.name: b for b in bodies}
        for el in joints + forces:
            for p in el.points():
                if p.is_ground:
                    if len(p.X) != dim:
                        raise ValueError(
                            f"{el.name}: ground point {p.X} has {len(p.X)} coordinates; the assembly is {dim}D."
                        )
                elif p.body.name not in by_name or not (by_name[p.body.name] == p.body):
                    raise ValueError(
                        f"{el.name}: its point {p.label} is on a body that is not in this assembly "
                        f"(bodies: {', '.join(by_name)})."
                    )
        for j in joints:
            if isinstance(j, Revolute) and dim != 2 and j.axis is None:
                raise ValueError(
                    f"{j.name}: Revolute without an axis is the planar revolute joint (KBS23a eq 74); this "
                    "assembly is 3D: give the hinge axis (axis=(ax, ay, az)), or use Spherical."
                )
            if isinstance(j, Revolute) and dim == 2 and j.axis is not None:
                raise ValueError(
                    f"{j.name}: a planar revolute joint takes no axis (it turns about the normal of the "
                    f"plane); got axis = {j.axis}."
                )
            if isinstance(j, Clamp) and dim != 3:
                raise ValueError(f"{j.name}: Clamp is a 3D joint.")
            if isinstance(j, Clamp) or (isinstance(j, Revolute) and j.axis is not None):
                for p in j.points():
                    if not p.is_ground and not isinstance(p.body, (RigidBody, Beam)):
                        raise ValueError(
                            f"{j.name}: a hinge axis needs director frames, but {p.label} is on a "
                            f"{p.body.kind}; attach it to a rigid body or a beam node."
                        )
            if type(j) is Spherical and dim != 3:
                raise ValueError(f"{j.name}: Spherical is a 3D joint; in the plane use Revolute.")
            if isinstance(j, FixedPoint) and j.at is not None and len(j.at) != dim:
                raise ValueError(f"{j.name}: at = {j.at} has {len(j.at)} coordinates; the assembly is {dim}D.")
            if isinstance(j, OnAxis) and len(j.direction) != dim:
                raise ValueError(
                    f"{j.name}: direction {j.direction} has {len(j.direction)} entries; the assembly is {dim}D."
                )
        for f in forces:
            if isinstance(f, Gravity):
                if len(f.b) != dim:
                    raise ValueError(f"gravity b = {f.b} has {len(f.b)} entries; the assembly is {dim}D.")
                for n in f.bodies or ():
                    if n not in by_name:
                        raise ValueError(f"gravity acts on {n!r}, which is not a body of this assembly.")
        offsets = tuple(int(x) for x in np.cumsum([0] + [b.size for b in bodies])[:-1])
        pre = Layout(self.name, dim, bodies, offsets, (), ())
        q0 = np.concatenate([b.initial_state()[0] for b in bodies])

        def x0(p):
            """Initial placement of a point."""
            return np.asarray(pre.x(q0, p))

        def frame0(p):
            """Initial director frame of a point's body (rows d_i)."""
            return np.asarray(pre.frame(q0, p))

        layout = Layout(
            self.name,
            dim,
            bodies,
            offsets,
            tuple(j.resolved(x0, frame0) for j in joints),
            tuple(f.resolved(x0) for f in forces),
        )
        object.__setattr__(self, "_layout", layout)
        object.__setattr__(self, "_plan", self._plan_constraints())

    # ------------------------------------------------------------------ numbering
    @property
    def layout(self) -> Layout:
        """The numbered mechanism (also carried by the System as ``system.layout``)."""
        return self._layout

    @property
    def dim(self) -> int:
        """Dimension of the space, 2 or 3."""
        return self._layout.dim

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return self._layout.d

    @property
    def m(self) -> int:
        """Number of constraints, internal and joints (e.g. 5 x 3 + 7 x 2 = 29 in KBS23a §5.2)."""
        return sum(len(b.internal_names) for b in self.bodies) + sum(j.size(self.dim) for j in self._layout.joints)

    def coordinate_names(self) -> tuple[str, ...]:
        """Coordinate names, body after body ("B1.phi.x", ...)."""
        return tuple(n for b in self.bodies for n in b.coordinate_names())

    def constraint_names(self) -> tuple[str, ...]:
        """Internal constraints of each body ("B1.orthonormal[d1.d1]"), then each joint's components."""
        names = [f"{b.name}.{n}" for b in self.bodies for n in b.internal_names]
        names += [n for j in self._layout.joints for n in j.component_names(self.dim)]
        return tuple(names)

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(q0, v0) from the bodies' initial placements and velocities."""
        qs, vs = zip(*(b.initial_state() for b in self.bodies))
        return np.concatenate(qs), np.concatenate(vs)

    # ------------------------------------------------------------------ the System
    def mass_matrix(self) -> np.ndarray:
        """M = diag(M^(1), ..., M^(n)) (KBS23a eq 60, 71), with a beam's consistent mass block."""
        M = np.diag(np.concatenate([b.mass_diagonal() for b in self.bodies]))
        for b, o in zip(self.bodies, self._layout.offsets):
            if isinstance(b, Beam):
                M[o : o + b.size, o : o + b.size] = b.mass_block()
        return M

    def _plan_constraints(self):
        """Constant data for a cheap g(q): the director blocks of the rigid bodies (for their Gram
        matrices) and the joints in their order, each run of consecutive linear joints as one
        matrix (g = A q + c, exact for a linear residual). Built once; the traced g then has a few
        primitives, which keeps the nested AD of the schemes small; the joints come in their order,
        without a permutation of the rows. The gathers of the director blocks and Gram entries are
        kept: batched (ensembles), a gather and a Gram matrix product cost less than the static
        slices and elementwise products that avoid them (measured); in a single run,
        :func:`livens.engine.small_products.fuse_small_dots` turns them into fusible products."""
        lay, dim, d = self._layout, self.dim, self.d
        rigid = [
            o + f
            for b, o in zip(self.bodies, lay.offsets)
            if b.internal_names
            for f in (b.frame_offsets() if isinstance(b, Beam) else (0,))
        ]
        pairs = [(i, i) for i in range(dim)] + [(i, j) for i in range(dim) for j in range(i + 1, dim)]
        diagonal = np.array([i == j for i, j in pairs])
        zero = np.zeros(d)
        parts = []  # ("linear", A, c) for a run of linear joints, ("joint", joint) for the others
        for j in lay.joints:
            if not j.linear:
                parts.append(("joint", j))
                continue
            fn = lambda q, j=j: jnp.atleast_1d(j.residual(_Placement(lay, q).x))  # noqa: E731
            A, c = _linear_terms(fn, zero)
            if parts and parts[-1][0] == "linear":
                parts[-1] = ("linear", np.vstack([parts[-1][1], A]), np.concatenate([parts[-1][2], c]))
            else:
                parts.append(("linear", A, c))
        idx = np.array(
            [[[o + dim * (i + 1) + k for k in range(dim)] for i in range(dim)] for o in rigid], dtype=int
        ).reshape(len(rigid), dim, dim)
        I, J = (np.array(t, dtype=int) for t in zip(*pairs))
        return dict(
            idx=idx, I=I, J=J, weight=np.where(diagonal, 0.5, 1.0), shift=np.where(diagonal, 0.5, 0.0), parts=parts
        )

    def internal_constraints(self, q: jax.Array) -> jax.Array:
        """The bodies' orthonormality constraints, body after body (KBS23a eq 61, 73; KBS23b eq 103),
        from the Gram matrices d_i.d_j of all director frames at once."""
        pl = self._plan
        if pl["idx"].shape[0] == 0:
            return jnp.zeros((0,), dtype=jnp.result_type(q))
        D = q[pl["idx"]]
        gram = jnp.einsum("bik,bjk->bij", D, D)
        return (pl["weight"] * gram[:, pl["I"], pl["J"]] - pl["shift"]).reshape(-1)

    def joint_constraints(self, q: jax.Array) -> jax.Array:
        """The joints' constraints in joint order (KBS23a eq 74; KBS23b eq 104, 117)."""
        pl = self._plan
        P = _Placement(self._layout, q)
        parts = []
        for part in pl["parts"]:
            if part[0] == "linear":  # a run of linear joints: A q + c
                parts.append(jnp.asarray(part[1]) @ q + part[2])
            elif part[1].uses_frames:
                parts.append(jnp.atleast_1d(part[1].residual(P.x, P.frame)))
            else:
                parts.append(jnp.atleast_1d(part[1].residual(P.x)))
        return jnp.concatenate(parts) if parts else jnp.zeros((0,), dtype=jnp.result_type(q))

    def constraints(self, q: jax.Array) -> jax.Array:
        """g(q) = [internal constraints of each body; joints] (KBS23b eq 102; KBS23a eq 61, 73, 74)."""
        return jnp.concatenate([self.internal_constraints(q), self.joint_constraints(q)])

    def _conservative(self):
        """The forces with a potential (gravity and springs; not dampers or loads)."""
        return [f for f in self._layout.forces if isinstance(f, (Gravity, Spring))]

    def _beams(self):
        """(beam, offset) pairs."""
        return [(b, o) for b, o in zip(self.bodies, self._layout.offsets) if isinstance(b, Beam)]

    def _loads(self):
        """The point loads."""
        return [f for f in self._layout.forces if isinstance(f, PointLoad)]

    def invariants(self, q: jax.Array) -> jax.Array:
        """pi(q): one invariant per conservative force (KBS23b eq 122; gravity's is linear), then six
        per beam element (the quadratic strain invariants, :meth:`Beam.invariants`)."""
        P = _Placement(self._layout, q)
        parts = []
        if self._conservative():
            parts.append(jnp.stack([jnp.asarray(v) for f in self._conservative() for v in f.invariants(P)]))
        for b, o in self._beams():
            parts.append(jnp.reshape(b.invariants(q[..., o : o + b.size]), (-1,)))
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts)

    def invariant_potentials(self, pi: jax.Array) -> jax.Array:
        """V_i(pi_i), so that V(q) = sum_i V_i(pi_i(q)) (KBS23b eq 123-124; a beam's stored energy per
        element and strain, :meth:`Beam.invariant_potentials`)."""
        fns = [fn for f in self._conservative() for fn in f.invariant_potentials()]
        parts = [jnp.stack([fn(pi[i]) for i, fn in enumerate(fns)])] if fns else []
        i = len(fns)
        for b, _ in self._beams():
            parts.append(b.invariant_potentials(pi[i : i + b.n_invariants]))
            i += b.n_invariants
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts)

    def potential(self, q: jax.Array) -> jax.Array:
        """V(q) = sum of the forces' potentials (KBS23a eq 72; KBS23b eq 116) and the beams' stored energy."""
        if not self._conservative() and not self._beams():
            return jnp.zeros((), dtype=jnp.result_type(q))
        return jnp.sum(self.invariant_potentials(self.invariants(q)))

    def external_force(self, q: jax.Array, v: jax.Array, t: float | jax.Array) -> jax.Array:
        """F(q, v, t) = sum over point loads of Dx(q)^T f(t): the gradient of the virtual work (by AD)."""
        lay = self._layout

        def work(x):
            P = _Placement(lay, x)
            return sum(f.virtual_work(P.x, t) for f in self._loads())

        return jax.grad(work)(q)

    def rayleigh(self, q: jax.Array, v: jax.Array) -> jax.Array:
        """R(q, v) = sum over dampers of 1/2 eta |v_rel|^2 (KBS23a eq 77), v_rel by a jvp of x_A - x_B."""
        lay = self._layout
        total = jnp.zeros((), dtype=jnp.result_type(q))
        for f in lay.forces:
            if isinstance(f, Damper):
                r, rdot = jax.jvp(lambda x, f=f: lay.x(x, f.a) - lay.x(x, f.b), (q,), (v,))
                total = total + f.rayleigh(r, rdot)
        return total

    def dissipation(self, q: jax.Array) -> jax.Array:
        """C(q) = D_v^2 R(q, v), the Hessian of the Rayleigh function in v (KBS23a eq 53-54), by AD."""
        return jax.hessian(lambda v: self.rayleigh(q, v))(jnp.zeros_like(q))

    def system(self) -> AssembledSystem:
        """The :class:`AssembledSystem` (M, V, g, C, names, layout)."""
        has_g = self.m > 0
        has_c = any(isinstance(f, Damper) for f in self._layout.forces)
        inv = (self.invariants, self.invariant_potentials) if (self._conservative() or self._beams()) else None
        return AssembledSystem(
            mass_matrix=self.mass_matrix(),
            potential=self.potential,
            constraints=self.constraints if has_g else None,
            dissipation=self.dissipation if has_c else None,
            external_force=self.external_force if self._loads() else None,
            invariants=inv,
            coordinate_names=self.coordinate_names(),
            constraint_names=self.constraint_names() if has_g else None,
            name=self.name,
            layout=self._layout,
        )

    # ------------------------------------------------------------------ symmetries
    def _elements(self, conserved: bool = False):
        """What decides the symmetries: the joints and the conservative forces (gravity, springs),
        and with ``conserved`` also the loads and dampers."""
        lay = self._layout
        if conserved:
            return lay.joints + lay.forces
        return lay.joints + tuple(f for f in lay.forces if isinstance(f, (Gravity, Spring)))

    def rotation(self, axis: ArrayLike = (0.0, 0.0, 1.0), name: str | None = None) -> Symmetry:
        """The rotation generator xi acting on every vector block (KBS23b eq 105-106; in 2D the matrix
        [[0, -1], [1, 0]] per block, so that J = p.xi q is the angular momentum of KBS23a eq 75),
        whether or not it is a symmetry (see :meth:`symmetries`)."""
        d, dim = self.d, self.dim
        if dim == 2:
            xi = np.kron(np.eye(d // 2), np.array([[0.0, -1.0], [1.0, 0.0]]))
            return Symmetry.matrix(xi, name=name or "J3")
        a = np.asarray(axis, dtype=float)
        a = a / np.linalg.norm(a)
        return Symmetry.rotation(a, blocks=d // 3, dim=d, name=name or _axis_label("J", a))

    def translation(self, direction: ArrayLike, name: str | None = None) -> Symmetry:
        """The translation of every body's position block along ``direction`` (KBS23b eq 118)."""
        e = np.asarray(direction, dtype=float)
        shift = np.zeros(self.d)
        for b, o in zip(self.bodies, self._layout.offsets):
            for s in b.position_slices() if isinstance(b, Beam) else (b.position_slice(),):
                shift[o + s.start : o + s.stop] = e
        return Symmetry(name or _axis_label("L", e), shift=shift)

    def symmetries(self, conserved: bool = False) -> list[Symmetry]:
        """The symmetries of the conservative part (KBS23b eq 41): the rotations of every vector block
        and translations of every position block under which the bodies' mass and stored energy, every
        joint and every conservative force (gravity, springs) are invariant -- rotations about the
        coordinate axes, the gravity direction and slider axes (the plane's one rotation in 2D),
        translations along the coordinate axes. The bodies are invariant under all of them (their
        mass matrices act on each 3-block alike, a beam's strains are objective), so the joints and
        forces decide. Loads and dampers need not respect them: the energy-momentum schemes then keep
        the balance of each momentum map with the impulse of the loads and dampers (KBS23b eq 85).

        ``conserved=True``: only those under which the loads and dampers are invariant too, the
        symmetries of the whole system, whose momentum maps are constant."""
        dim, els = self.dim, self._elements(conserved)
        out = []
        if dim == 2:
            if all(e.rotation_invariant(None, 2) for e in els):
                out.append(self.rotation())
        else:
            axes = [_unit(i, 3) for i in range(3)]
            for e in els:
                if isinstance(e, Gravity) and np.linalg.norm(e.b) > 0:
                    axes.append(np.asarray(e.b) / np.linalg.norm(e.b))
                if isinstance(e, OnAxis):
                    axes.append(np.asarray(e.direction))
            unique: list[np.ndarray] = []
            for a in axes:
                if not any(np.linalg.norm(np.cross(a, u)) <= 1e-12 for u in unique):
                    unique.append(a if a[np.argmax(np.abs(a))] > 0 else -a)
            for a in unique:
                if all(e.rotation_invariant(a, 3) for e in els):
                    out.append(self.rotation(a))
        for i in range(dim):
            e = _unit(i, dim)
            if all(el.translation_invariant(e, dim) for el in els):
                out.append(self.translation(e))
        return out

    # ------------------------------------------------------------------ the Problem
    def problem(
        self,
        h: float | None = None,
        t_end: float | None = None,
        name: str | None = None,
        parameters: dict | None = None,
        symmetries: Iterable[Symmetry] | None = None,
        **kwargs: Any,
    ) -> Problem:
        """A Problem with the bodies' initial state, ``h`` and ``t_end``, and the symmetries of the
        conservative part (:meth:`symmetries`) unless ``symmetries`` is given. The initial state must
        satisfy the constraints (see ``lv.consistent_initial_state``)."""
        q0, v0 = self.initial_state()
        syms = self.symmetries() if symmetries is None else list(symmetries)
        return Problem(
            self.system(),
            q0=q0,
            v0=v0,
            h=h,
            t_end=t_end,
            symmetries=syms,
            name=name or self.name,
            parameters=dict(parameters or {}),
            **kwargs,
        )


def _axis_label(prefix: str, a: np.ndarray) -> str:
    """Momentum-map names: "J3" for a rotation about e3, "L1" for a translation along e1."""
    for i in range(len(a)):
        if np.allclose(a, _unit(i, len(a)), atol=1e-14):
            return f"{prefix}{i + 1}"
    return f"{prefix}[{','.join(f'{x:.6g}' for x in a)}]"


def _linear_terms(fn, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A, c) of a linear residual fn(q) = A q + c: its Jacobian and its value at q = 0, by NumPy from
    their jaxprs (:mod:`livens.numpy_jaxpr`: building an Assembly compiles no XLA program), or by JAX
    where the interpreter cannot evaluate them."""
    try:
        return NumpyFunction(jax.jacfwd(fn), zero)(zero), NumpyFunction(fn, zero)(zero)
    except Exception:  # noqa: BLE001 - a primitive the interpreter does not know: JAX evaluates it
        return np.asarray(jax.jacfwd(fn)(jnp.asarray(zero))), np.asarray(fn(jnp.asarray(zero)))


__all__ = ["Assembly", "AssembledSystem", "Layout"]
