"""Geometrically exact beams in director form (Betsch and Steinmann 2002; Romero and Armero 2002), as
used for the three-bar swing of SLO09 §4.2.

Each node k = 0..n of a :class:`Beam` carries q_k = (phi_k, d1_k, d2_k, d3_k) in R^12: the position of
the centre line and three directors, d1, d2 spanning the cross-section along its principal axes and d3
normal to it (the rotationless description of the rigid bodies, KBS23a §5.1, node by node), with the six
orthonormality constraints of KBS23a eq 61 per node. The coordinates are node after node.

Finite elements: linear shape functions between nodes k and k+1 (length L_e = L/n) with one-point
(midpoint) quadrature, so that per element phi' = (phi_(k+1) - phi_k)/L_e, d_i' likewise, and
d_bar_i = (d_i,k + d_i,k+1)/2. The strains (objective, invariant under superposed rigid motions) are

    Gamma_i = d_bar_i . phi' - Gamma_i^0                     (shear Gamma_1, Gamma_2; axial Gamma_3)
    K_1 = 1/2 (d_bar_3 . d2' - d_bar_2 . d3')                (bending about d1)
    K_2 = 1/2 (d_bar_1 . d3' - d_bar_3 . d1')                (bending about d2)
    K_3 = 1/2 (d_bar_2 . d1' - d_bar_1 . d2')                (torsion)

with the reference values Gamma^0, K^0 of the (straight) reference configuration, Gamma^0 = e3 in the
director frame. The hyperelastic stored energy of an element is

    W_e = L_e/2 sum_i (C_Gamma_i Gamma_i^2 + C_K_i K_i^2),
    C_Gamma = (GA_1, GA_2, EA),  C_K = (EI_1, EI_2, GJ),

a sum of functions of quadratic invariants d_bar_i . phi' and K_i of q (KBS23b eq 122-126): the Assembly
declares it that way, so that invariant-based discrete gradients apply. The stress resultants of an
element are the material forces N_i = C_Gamma_i Gamma_i (N_1, N_2 shear, N_3 axial) and moments
M_i = C_K_i K_i (M_1, M_2 bending, M_3 torsion), spatially n = N_i d_bar_i and m = M_i d_bar_i
(SLO09 Figs 6, 7).

Kinetic energy: T = 1/2 int (A_rho |phi'|^2 + M_rho^2 |d1'|^2 + M_rho^1 |d2'|^2) ds for the linear
interpolation, integrated exactly (the consistent mass matrix L_e/6 [[2, 1], [1, 2]] per element and
block). A section point x = phi + x_1 d1 + x_2 d2 moves with x' = phi' + x_1 d1' + x_2 d2', so
|d1'|^2 is weighted by int rho x_1^2 dA = rho I_2 and |d2'|^2 by rho I_1: ``inertia`` =
(A_rho, M_rho1, M_rho2) with M_rho^alpha = rho I_alpha, the mass moment paired with EI_alpha (the
bending stiffness about d_alpha). d3 carries no inertia, so the mass matrix is singular; on the
constraint manifold the kinetic energy is positive definite (the rotations of a node are carried by
d1 and d2), which is why the variational schemes (SLO09 eq 14-17) and Livens' scheme (KB23) run it, and
the schemes that form M^-1 cannot. Point masses can sit on nodes (added to the phi block).

Material points of a beam are node points: ``beam.node(k)`` is phi_k, ``beam.node(k, (X1, X2, X3))``
the point phi_k + X_i d_i,k of node k's cross-section frame. They are :class:`~livens.bodies.Point`s, so
that the joints (Spherical, the 3D Revolute with an axis), springs, dampers and loads of
:mod:`livens.bodies` attach to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from .rigid import Point, _check_name, _orthonormal_names, _vec, orthonormality

_AXES = "xyz"
_NODE = 12  # coordinates per node: phi, d1, d2, d3


def _skew(w):
    w = np.asarray(w, dtype=float)
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


@dataclass(frozen=True)
class Beam:
    """A geometrically exact beam of ``n_elements`` linear elements between ``start`` and ``end``
    (straight reference configuration), in director form (see the module docstring).

    ``stiffness`` = (GA_1, GA_2, EA, EI_1, EI_2, GJ): shear stiffnesses along d1, d2, the axial
    stiffness, the bending stiffnesses about d1, d2 and the torsional stiffness.
    ``inertia`` = (A_rho, M_rho1, M_rho2): mass per length and the mass moments rho I_1, rho I_2 of
    the cross-section about d1, d2 (weighting |d2'|^2 and |d1'|^2 respectively).
    ``d1`` gives the orientation of the cross-section: the direction of the director d1 in the
    reference configuration (its component along the axis is removed; default: a unit vector normal
    to the axis); d3 = (end - start)/L, d2 = d3 x d1.
    ``point_masses``: pairs (node, mass) of particles rigidly attached to nodes.
    Initial state: the reference configuration moving rigidly with ``velocity`` (of node 0) and
    ``angular_velocity`` omega about node 0: phi_k' = v + omega x (phi_k - phi_0), d_i' = omega x d_i.
    """

    name: str
    start: tuple
    end: tuple
    stiffness: tuple
    inertia: tuple
    n_elements: int = 10
    d1: tuple | None = None
    point_masses: tuple = ()
    velocity: tuple = (0.0, 0.0, 0.0)
    angular_velocity: tuple = (0.0, 0.0, 0.0)

    kind = "beam"
    dim = 3
    blocks = ("phi", "d1", "d2", "d3")
    shape = ()

    def __post_init__(self):
        """Check and normalise the data, with messages naming the beam."""
        _check_name(self.name)
        a = np.asarray(_vec(f"{self.name}: start", self.start, 3))
        b = np.asarray(_vec(f"{self.name}: end", self.end, 3))
        object.__setattr__(self, "start", tuple(a.tolist()))
        object.__setattr__(self, "end", tuple(b.tolist()))
        if not np.linalg.norm(b - a) > 0:
            raise ValueError(f"{self.name}: start and end coincide ({a.tolist()}); a beam needs a length.")
        n = self.n_elements
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{self.name}: n_elements must be a positive integer; got {n!r}.")
        object.__setattr__(self, "n_elements", int(n))
        C = _vec(f"{self.name}: stiffness (GA1, GA2, EA, EI1, EI2, GJ)", self.stiffness, 6)
        if min(C) <= 0:
            raise ValueError(f"{self.name}: the stiffnesses (GA1, GA2, EA, EI1, EI2, GJ) must be positive; got {C}.")
        object.__setattr__(self, "stiffness", C)
        rho = _vec(f"{self.name}: inertia (A_rho, M_rho1, M_rho2)", self.inertia, 3)
        if min(rho) <= 0:
            raise ValueError(
                f"{self.name}: the inertias (A_rho, M_rho1, M_rho2) must be positive (with a zero "
                f"M_rho the rotations of a node carry no inertia); got {rho}."
            )
        object.__setattr__(self, "inertia", rho)
        e3 = (b - a) / np.linalg.norm(b - a)
        if self.d1 is None:
            c = np.eye(3)[int(np.argmin(np.abs(e3)))]
            d1 = c - (c @ e3) * e3
        else:
            d1 = np.asarray(_vec(f"{self.name}: d1", self.d1, 3))
            d1 = d1 - (d1 @ e3) * e3
            if not np.linalg.norm(d1) > 1e-12 * max(1.0, float(np.linalg.norm(self.d1))):
                raise ValueError(
                    f"{self.name}: d1 = {list(self.d1)} is parallel to the beam axis {e3.tolist()}; "
                    "give a direction across the beam."
                )
        object.__setattr__(self, "d1", tuple((d1 / np.linalg.norm(d1)).tolist()))
        pm = []
        for item in self.point_masses:
            try:
                k, m = item
            except (TypeError, ValueError):
                raise ValueError(f"{self.name}: point_masses must be pairs (node, mass); got {item!r}.") from None
            k = self._node_index(k, "point mass node")
            if not float(m) > 0:
                raise ValueError(f"{self.name}: a point mass must be positive; got {m!r} at node {k}.")
            pm.append((k, float(m)))
        object.__setattr__(self, "point_masses", tuple(pm))
        object.__setattr__(self, "velocity", _vec(f"{self.name}: velocity", self.velocity, 3))
        object.__setattr__(self, "angular_velocity", _vec(f"{self.name}: angular_velocity", self.angular_velocity, 3))

    # ------------------------------------------------------------------ sizes and names
    @property
    def n_nodes(self) -> int:
        """n_elements + 1."""
        return self.n_elements + 1

    @property
    def size(self) -> int:
        """Number of coordinates, 12 per node."""
        return _NODE * self.n_nodes

    @property
    def length(self) -> float:
        """L = |end - start|."""
        return float(np.linalg.norm(np.subtract(self.end, self.start)))

    @property
    def element_length(self) -> float:
        """L_e = L / n_elements."""
        return self.length / self.n_elements

    @property
    def mass(self) -> float:
        """Total mass: A_rho L plus the point masses."""
        return self.inertia[0] * self.length + sum(m for _, m in self.point_masses)

    @property
    def internal_names(self) -> tuple:
        """The orthonormality constraints of every node, "n3.orthonormal[d1.d2]" (KBS23a eq 61)."""
        return tuple(f"n{k}.{c}" for k in range(self.n_nodes) for c in _orthonormal_names(3))

    def coordinate_names(self) -> tuple[str, ...]:
        """Names "<beam>.n<k>.phi.x", "<beam>.n<k>.d1.y", ... node after node."""
        return tuple(f"{self.name}.n{k}.{b}.{c}" for k in range(self.n_nodes) for b in self.blocks for c in _AXES)

    def frame_offsets(self) -> tuple:
        """Offsets in the beam's coordinates of each node block (phi, d1, d2, d3)."""
        return tuple(_NODE * k for k in range(self.n_nodes))

    def position_slices(self) -> tuple:
        """The phi block of every node (translated by a translation symmetry)."""
        return tuple(slice(_NODE * k, _NODE * k + 3) for k in range(self.n_nodes))

    def position_slice(self) -> slice:
        """phi of node 0 (where a single position is asked for)."""
        return slice(0, 3)

    # ------------------------------------------------------------------ reference configuration
    def reference_frame(self) -> np.ndarray:
        """The directors of the straight reference configuration, rows d1, d2, d3."""
        a, b = np.asarray(self.start), np.asarray(self.end)
        d3 = (b - a) / np.linalg.norm(b - a)
        d1 = np.asarray(self.d1)
        return np.array([d1, np.cross(d3, d1), d3])

    def reference_nodes(self) -> np.ndarray:
        """The reference configuration as an array (n_nodes, 4, 3) of (phi, d1, d2, d3)."""
        a, b = np.asarray(self.start), np.asarray(self.end)
        s = np.linspace(0.0, 1.0, self.n_nodes)
        D = self.reference_frame()
        out = np.empty((self.n_nodes, 4, 3))
        out[:, 0] = a[None, :] + s[:, None] * (b - a)[None, :]
        out[:, 1:] = D[None]
        return out

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(q0, v0): the reference configuration moving rigidly (see the class docstring)."""
        X = self.reference_nodes()
        W = _skew(self.angular_velocity)
        V = np.empty_like(X)
        V[:, 0] = np.asarray(self.velocity)[None, :] + (X[:, 0] - X[0, 0]) @ W.T
        V[:, 1:] = X[:, 1:] @ W.T
        return X.reshape(-1), V.reshape(-1)

    # ------------------------------------------------------------------ kinematics
    def nodes(self, qb: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
        """The beam's coordinates (..., size) as (..., n_nodes, 4, 3): phi, d1, d2, d3 per node."""
        return qb.reshape(qb.shape[:-1] + (self.n_nodes, 4, 3))

    def _node_index(self, k, what: str = "node") -> int:
        kk = int(round(float(k)))
        if abs(float(k) - kk) > 0 or not 0 <= kk <= self.n_elements:
            raise ValueError(f"{self.name}: {what} {k!r} is not a node index 0..{self.n_elements}.")
        return kk

    def node(self, k: int, X: ArrayLike = (0.0, 0.0, 0.0)) -> Point:
        """The point phi_k + X_i d_i,k of node k (X in the node's director frame; default phi_k)."""
        kk = self._node_index(k)
        X = _vec(f"{self.name}: node point", X, 3)
        return Point(self, (float(kk),) + X)

    def point(self, X: ArrayLike) -> Point:
        """A node point given as (k, X1, X2, X3) (see :meth:`node`)."""
        X = _vec(f"{self.name}: beam point (node, X1, X2, X3)", X, 4)
        return self.node(X[0], X[1:])

    def placement_matrix(self, X: ArrayLike) -> np.ndarray:
        """S (3, size) with x = S q_beam = phi_k + X_i d_i,k for the node point X = (k, X1, X2, X3)."""
        X = _vec(f"{self.name}: beam point (node, X1, X2, X3)", X, 4)
        k = self._node_index(X[0])
        S = np.zeros((3, self.size))
        o = _NODE * k
        S[:, o : o + 3] = np.eye(3)
        for i in range(3):
            S[:, o + 3 * (i + 1) : o + 3 * (i + 2)] = X[1 + i] * np.eye(3)
        return S

    def place(self, qb: jax.Array | np.ndarray, X: Sequence[float]) -> jax.Array | np.ndarray:
        """x = phi_k + X_i d_i,k for the node point X = (k, X1, X2, X3), qb of any leading shape."""
        k = self._node_index(X[0])
        o = _NODE * k
        x = qb[..., o : o + 3]
        for i in range(3):
            if X[1 + i] != 0.0:
                x = x + X[1 + i] * qb[..., o + 3 * (i + 1) : o + 3 * (i + 2)]
        return x

    def directors(self, qb: jax.Array | np.ndarray, X: Sequence[float]) -> jax.Array | np.ndarray:
        """The director frame of the node of point X, shape (..., 3, 3) (rows d1, d2, d3)."""
        o = _NODE * self._node_index(X[0])
        return qb[..., o + 3 : o + 12].reshape(qb.shape[:-1] + (3, 3))

    def internal_constraints(self, qb: ArrayLike) -> jax.Array:
        """The six orthonormality constraints of every node (KBS23a eq 61), node after node."""
        Y = self.nodes(jnp.asarray(qb))
        return jnp.concatenate([orthonormality([Y[k, 1], Y[k, 2], Y[k, 3]]) for k in range(self.n_nodes)])

    # ------------------------------------------------------------------ strains and energy
    def _element_fields(self, qb):
        """Per element: d_bar (..., n_el, 3, 3) (rows d_bar_i), phi' (..., n_el, 3), d' (..., n_el, 3, 3)."""
        Y = self.nodes(qb)
        a, b = Y[..., :-1, :, :], Y[..., 1:, :, :]
        Le = self.element_length
        return (
            0.5 * (a[..., 1:, :] + b[..., 1:, :]),
            (b[..., 0, :] - a[..., 0, :]) / Le,
            (b[..., 1:, :] - a[..., 1:, :]) / Le,
        )

    def invariants(self, qb: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
        """The quadratic invariants of every element, shape (..., n_el, 6): d_bar_i . phi' (i = 1..3)
        and K_1, K_2, K_3 (Betsch and Steinmann 2002; see the module docstring)."""
        xp = np if isinstance(qb, np.ndarray) else jnp  # numpy stays numpy (reference values, drawings)
        dbar, dphi, dd = self._element_fields(qb)
        G = xp.einsum("...ij,...j->...i", dbar, dphi)
        # B[i, j] = d_bar_i . d_j'
        B = xp.einsum("...ik,...jk->...ij", dbar, dd)
        K = 0.5 * xp.stack(
            [B[..., 2, 1] - B[..., 1, 2], B[..., 0, 2] - B[..., 2, 0], B[..., 1, 0] - B[..., 0, 1]], axis=-1
        )
        return xp.concatenate([G, K], axis=-1)

    def reference_invariants(self) -> np.ndarray:
        """The invariants of the reference configuration (n_el, 6): Gamma^0 = e3, K^0 = 0 when straight."""
        return self._reference_invariants

    @cached_property
    def _reference_invariants(self) -> np.ndarray:
        return self.invariants(self.reference_nodes().reshape(-1))

    def strains(self, qb: jax.Array | np.ndarray) -> tuple[jax.Array | np.ndarray, jax.Array | np.ndarray]:
        """(Gamma, K), each (..., n_el, 3): the invariants minus their reference values."""
        s = self.invariants(qb) - self.reference_invariants()
        return s[..., :3], s[..., 3:]

    @property
    def n_invariants(self) -> int:
        """6 per element."""
        return 6 * self.n_elements

    def invariant_potentials(self, pi: ArrayLike) -> jax.Array:
        """W_i(pi_i) = L_e/2 C_i (pi_i - pi_i^0)^2 for the flattened invariants pi (n_el * 6,)."""
        pi = jnp.reshape(pi, (self.n_elements, 6))
        C = jnp.asarray(self.stiffness)
        return (0.5 * self.element_length * C * (pi - jnp.asarray(self.reference_invariants())) ** 2).reshape(-1)

    def strain_energy(self, qb: jax.Array | np.ndarray) -> jax.Array:
        """The stored energy sum_e W_e of the beam (see the module docstring)."""
        s = self.invariants(qb) - jnp.asarray(self.reference_invariants())
        return 0.5 * self.element_length * jnp.sum(jnp.asarray(self.stiffness) * s**2, axis=(-2, -1))

    def stress_resultants(self, qb: ArrayLike) -> dict[str, np.ndarray]:
        """Stress resultants of every element (..., n_el): material "N1", "N2" (shear forces), "N3" (axial
        force), "M1", "M2" (bending moments about d1, d2), "M3" (torsional moment), and the spatial
        vectors "n" = N_i d_bar_i, "m" = M_i d_bar_i (..., n_el, 3)."""
        qb = np.asarray(qb, dtype=float)
        s = self.invariants(qb) - self.reference_invariants()
        C = np.asarray(self.stiffness)
        N, M = C[:3] * s[..., :3], C[3:] * s[..., 3:]
        dbar = self._element_fields(qb)[0]
        out = {f"N{i + 1}": N[..., i] for i in range(3)}
        out.update({f"M{i + 1}": M[..., i] for i in range(3)})
        out["n"] = np.einsum("...i,...ij->...j", N, dbar)
        out["m"] = np.einsum("...i,...ij->...j", M, dbar)
        return out

    # ------------------------------------------------------------------ mass
    def node_masses(self) -> np.ndarray:
        """The translational mass lumped to the nodes, int A_rho N_k ds plus the point masses (n_nodes,):
        exact for the work of a uniform field on phi (gravity)."""
        w = np.full(self.n_nodes, self.inertia[0] * self.element_length)
        w[0] *= 0.5
        w[-1] *= 0.5
        for k, m in self.point_masses:
            w[k] += m
        return w

    def mass_block(self) -> np.ndarray:
        """The consistent mass matrix (size, size): per element L_e/6 [[2, 1], [1, 2]] for each of
        A_rho I (phi), M_rho2 I (d1), M_rho1 I (d2) and 0 (d3), plus the point masses on phi."""
        A_rho, M1, M2 = self.inertia
        per_block = np.array([A_rho, M2, M1, 0.0])
        D = np.kron(np.diag(per_block), np.eye(3))  # (12, 12)
        Le = self.element_length
        E = Le / 6.0 * np.array([[2.0, 1.0], [1.0, 2.0]])
        M = np.zeros((self.size, self.size))
        for e in range(self.n_elements):
            s = slice(_NODE * e, _NODE * (e + 2))
            M[s, s] += np.kron(E, D)
        for k, m in self.point_masses:
            o = _NODE * k
            M[o : o + 3, o : o + 3] += m * np.eye(3)
        return M

    def mass_diagonal(self) -> np.ndarray:
        """The diagonal of :meth:`mass_block` (the beam's mass matrix is not diagonal)."""
        return np.diag(self.mass_block()).copy()


__all__ = ["Beam"]
