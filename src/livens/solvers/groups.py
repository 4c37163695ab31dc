"""Coordinates in groups (the bodies of a multibody system), found from the sparsity of a tangent.

In a multibody system each body's coordinates are coupled among themselves by its mass matrix, its
internal constraints and the second derivatives of the potential and the constraints, and with other
bodies only through the constraints of the joints. A scheme's tangent whose blocks have that
structure -- d x d blocks that couple coordinates of one group only, m x d blocks (constraint
Jacobians) that couple each constraint with the few groups it involves -- can be factorized group by
group: every d x d block is block diagonal in the groups, and what remains couples the constraints
alone (:class:`livens.schemes.ggl_em_blocks.EMBlockTangent`).

:class:`GroupStructure` holds, from the numerically found patterns of such blocks (union of the
nonzeros at a few random points, as :mod:`livens.solvers.banded` does):

- the groups: connected components of the d x d pattern; each group's coordinates and the
  constraints that involve them, padded to common sizes s and r so that all groups are handled as
  one batch (the padding's coordinates and constraints point to a zero slot); the multipliers private
  to a group are eliminated in batches of the groups with as many of them and as many shared ones,
  unpadded (a body held to the ground has more than the others, the end of a chain fewer shared:
  each factorized at its own size);
- colourings of the d columns (coordinates) and of the m columns (multipliers) such that one
  Jacobian-vector product per colour gives every entry of the blocks (Curtis, Powell, Reid 1974):
  a coordinate's colour differs from those of the coordinates of its group and of those that share
  a constraint with it;
- index tables that take the group blocks out of the compressed Jacobians (:meth:`take`), and the
  gathers and scatters between vectors and groups.

The largest dense matrix such a tangent factorizes (:attr:`GroupStructure.largest_block`: a group's
block, the private multipliers' block of a group, or the Schur complement on the shared multipliers)
is said to the engine while the step is traced (:meth:`GroupStructure.multiplier_solver`,
:func:`livens.engine.tangent_by_groups`): it, not the number of unknowns, decides whether the
default backend runs the loop as native code (:attr:`livens.engine.EngineOptions.max_native_unknowns`).

Patterns are found numerically: :func:`missed` compares the blocks assembled at one more random
point with the dense Jacobians there, and a caller uses the structure only where it holds.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..engine import CompiledCache, ImmediateProgram, tangent_by_groups
from .banded import SAMPLES, SEED, _color_columns
from .dense import solver


def batched_lu(A):
    """LU with partial pivoting of each matrix of A (ng, s, s): (lu, the rows' order as flat indices
    into the (ng * s) rows of a right-hand side)."""
    lu, _, perm = lax.linalg.lu(A)
    ng, s = A.shape[0], A.shape[1]
    return lu, jnp.reshape(perm + s * jnp.arange(ng, dtype=perm.dtype)[:, None], (-1,))


def batched_lu_solve(lu, rows, B):
    """A^-1 B for each matrix of A (factorized by :func:`batched_lu`), B (ng, s, r)."""
    ng, s = B.shape[0], B.shape[1]
    Bp = jnp.reshape(jnp.reshape(B, (ng * s,) + B.shape[2:])[rows], B.shape)
    y = lax.linalg.triangular_solve(lu, Bp, left_side=True, lower=True, unit_diagonal=True)
    return lax.linalg.triangular_solve(lu, y, left_side=True, lower=False)


def _coarsened(ng: int, label: np.ndarray, P: np.ndarray) -> tuple[int, np.ndarray]:
    """The groups ``label`` (of ng) merged through the constraints that involve few of them: taken in
    the order of the number of groups each involves, a constraint merges its groups where the
    merged group stays within four times the largest group before and half the coordinates. Its
    multipliers then meet one group only (private, eliminated group by group): the internal
    constraints of a body (a rigid body's orthonormality conditions couple the x, y and z
    components of its directors, each of them a group of the d x d pattern) join its components,
    while a joint, which would merge two bodies, is left shared. Then a group of at most a quarter
    of the largest joins the group it shares the most constraints with, within the same bound."""
    size = np.bincount(label, minlength=ng)
    cap = min(4 * int(size.max()), label.size // 2)
    parent = np.arange(ng)

    def root(g):
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    involved = [np.unique(label[row]) for row in P]
    for k in sorted(range(len(involved)), key=lambda k: (len(involved[k]), k)):
        roots = sorted({root(g) for g in involved[k]})
        if len(roots) > 1 and size[roots].sum() <= cap:
            parent[roots[1:]] = roots[0]
            size[roots[0]] = size[roots].sum()
    # a group left small (a body's position, joined to the others by joints alone) goes to the one it
    # shares the most constraints with, where the merged group stays within the bound
    for g in range(ng):
        if root(g) != g or 4 * size[g] > size[[root(h) for h in range(ng)]].max():
            continue
        shared = np.zeros(ng, np.int64)
        for groups in involved:
            roots = {root(h) for h in groups}
            if g in roots:
                shared[sorted(roots - {g})] += 1
        shared[size + size[g] > cap] = 0
        best = int(np.argmax(shared))
        if shared[best]:
            parent[g] = best
            size[best] += size[g]
    top = np.array([root(g) for g in range(ng)])
    _, merged = np.unique(top[label], return_inverse=True)
    return int(merged.max(initial=-1)) + 1, merged


def _pattern(A) -> np.ndarray:
    """The nonzero (or not finite) entries of A as a boolean array."""
    return ~(np.asarray(A) == 0.0)


class _Batch(NamedTuple):
    """The groups of p private and t shared multipliers (:meth:`GroupStructure.multiplier_solver`):
    ``groups`` (nb,); ``lp`` (nb, p): their private multipliers' positions among each group's 2r;
    ``lrows`` (nb, p): those multipliers' numbers among the 2m; ``ls`` (nb, t): the shared ones'
    positions among the 2r and ``sidx`` (nb, t) their numbers among the ns shared ones (a group
    without shared ones: one, padded with 2r and ns)."""

    groups: np.ndarray
    lp: np.ndarray
    lrows: np.ndarray
    ls: np.ndarray
    sidx: np.ndarray


class GroupStructure:
    """Groups of coordinates and index tables for the blocks of a tangent (module docstring).

    ``D``: boolean d x d pattern of the blocks that couple coordinates among themselves; ``P``:
    boolean m x d pattern of the constraint Jacobians (constraint k involves coordinate i).

    ng groups, each of at most s coordinates (``gidx`` (ng, s), padded with d) and involved in at
    most r constraints (``ridx`` (ng, r), padded with m); ``pos``: the position of each coordinate
    in the flattened (ng * s) groups; colours ``colors_d`` (nc_d of them) and ``colors_m`` (nc_m).
    """

    def __init__(self, D, P):
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components

        D, P = np.asarray(D, bool), np.asarray(P, bool)
        self.m, self.d = m, d = P.shape
        D = D | D.T | np.eye(d, dtype=bool)
        ng, label = connected_components(sp.csr_matrix(D), directed=False)
        ng, label = _coarsened(ng, label, P)
        members = [np.flatnonzero(label == g) for g in range(ng)]
        members.sort(key=lambda a: a[0])
        self.ng = ng
        self.s = s = max(len(a) for a in members)
        touching = [np.flatnonzero(P[:, a].any(axis=1)) for a in members]
        self.r = r = max(1, max(len(k) for k in touching))
        self.gidx = np.full((ng, s), d, np.int64)
        self.ridx = np.full((ng, r), m, np.int64)
        for g, (a, k) in enumerate(zip(members, touching)):
            self.gidx[g, : len(a)] = a
            self.ridx[g, : len(k)] = k
        self.gvalid, self.rvalid = self.gidx < d, self.ridx < m
        self.pos = np.empty(d, np.int64)
        flat = self.gidx.ravel()
        self.pos[flat[flat < d]] = np.flatnonzero(flat < d)
        group_of = np.empty(d, np.int64)
        for g, a in enumerate(members):
            group_of[a] = g
        # colours: coordinates of one group, or sharing a constraint, differ
        same = group_of[:, None] == group_of[None, :]
        rows_d = sp.csr_matrix(np.concatenate([P, same], axis=0).astype(float))
        self.colors_d = _color_columns(rows_d.tocsc(), rows_d, np.arange(d))
        self.nc_d = int(self.colors_d.max(initial=-1)) + 1
        rows_m = sp.csr_matrix(P.T.astype(float))
        self.colors_m = _color_columns(rows_m.tocsc(), rows_m, np.arange(m))
        self.nc_m = int(self.colors_m.max(initial=-1)) + 1
        self.P = P
        # the multipliers of each group: (lambda_k, gamma_k) for the constraints it involves
        self.lidx = np.concatenate(
            [np.where(self.rvalid, self.ridx, 2 * m), np.where(self.rvalid, self.ridx + m, 2 * m)], axis=1
        )
        self._private_and_shared()

    def _private_and_shared(self) -> None:
        """Tables of :meth:`multiplier_solver`: the multipliers of the constraints that involve one
        group only (private) and the others (shared: ``shared``, the numbers of the ns of them
        among the 2m). The groups are batched by their numbers of private and shared multipliers
        (``batches``: one :class:`_Batch` per distinct pair, in the order of their first group), so
        that each factorization and product is of a group's own size; ``p``, ``t``: the most private and shared multipliers
        of a group; ``order``: where each of the 2m multipliers is in [shared, private by batch and
        group]."""
        m, r2 = self.m, 2 * self.r
        groups_of = np.bincount(self.ridx[self.rvalid], minlength=m)
        private = np.concatenate([groups_of == 1, groups_of == 1, [False]])  # of lidx's values
        valid = self.lidx < 2 * m
        shared = np.unique(self.lidx[valid & ~private[self.lidx]])
        self.shared, self.ns = shared, len(shared)
        number = np.full(2 * m + 1, self.ns)
        number[shared] = np.arange(self.ns)
        priv = [np.flatnonzero(valid[g] & private[self.lidx[g]]) for g in range(self.ng)]
        shar = [np.flatnonzero(valid[g] & ~private[self.lidx[g]]) for g in range(self.ng)]
        self.p = max(len(a) for a in priv)
        self.t = max(1, max(len(a) for a in shar))
        self.order = np.zeros(2 * m, np.int64)
        self.order[shared] = np.arange(self.ns)
        self.batches, offset = [], self.ns
        counts = [(len(a), len(b)) for a, b in zip(priv, shar)]
        for size, t in dict.fromkeys(counts):  # distinct counts, in the order of their first group
            members = np.array([g for g in range(self.ng) if counts[g] == (size, t)], np.int64)
            t = max(1, t)
            lp = np.array([priv[g] for g in members], np.int64).reshape(len(members), size)
            ls = np.full((len(members), t), r2, np.int64)
            for k, g in enumerate(members):
                ls[k, : len(shar[g])] = shar[g]
                self.order[self.lidx[g, priv[g]]] = offset + k * size + np.arange(size)
            offset += len(members) * size
            at = self.lidx[members[:, None], np.minimum(ls, r2 - 1)]
            lrows = self.lidx[members[:, None], lp]
            self.batches.append(_Batch(members, lp, lrows, ls, number[np.where(ls < r2, at, 2 * m)]))

    @property
    def largest_block(self) -> int:
        """The order of the largest dense matrix a tangent by these groups factorizes: a group's
        (s), a group's private multipliers' (p) and the shared multipliers' Schur complement (ns),
        or without private multipliers the 2m x 2m matrix of all of them
        (:meth:`multiplier_solver`)."""
        return max(self.s, self.p, self.ns) if self.p else max(self.s, 2 * self.m)

    @property
    def useful(self) -> bool:
        """Worth the groups: at least two, none larger than half the coordinates, and every
        constraint involves some coordinate."""
        return self.ng >= 2 and 2 * self.s <= self.d and bool(self.P.any(axis=1).all())

    # --- seeds and index tables (NumPy, set-up) ----------------------------------------------------
    def seeds_d(self) -> np.ndarray:
        """(d, nc_d): column j of the unit matrix added into colour colors_d[j]."""
        E = np.zeros((self.d, self.nc_d))
        E[np.arange(self.d), self.colors_d] = 1.0
        return E

    def seeds_m(self) -> np.ndarray:
        """(m, nc_m), as :meth:`seeds_d` for the multipliers."""
        E = np.zeros((self.m, self.nc_m))
        E[np.arange(self.m), self.colors_m] = 1.0
        return E

    def index_dd(self) -> np.ndarray:
        """(ng, s, s) positions of the group blocks of a d x d matrix in its compressed form
        (d x nc_d, flattened), d * nc_d (a zero) for the padding."""
        i, j = self.gidx[:, :, None], self.gidx[:, None, :]
        ok = (i < self.d) & (j < self.d)
        jc = self.colors_d[np.minimum(j, self.d - 1)]
        return np.where(ok, np.minimum(i, self.d - 1) * self.nc_d + jc, self.d * self.nc_d)

    def index_md(self) -> np.ndarray:
        """(ng, r, s) positions of the entries of an m x d matrix of pattern P (constraint k of the
        group, coordinate i of the group) in its compressed form (m x nc_d), m * nc_d for a zero."""
        k, i = self.ridx[:, :, None], self.gidx[:, None, :]
        kk, ii = np.minimum(k, self.m - 1), np.minimum(i, self.d - 1)
        ok = (k < self.m) & (i < self.d) & self.P[kk, ii]
        return np.where(ok, kk * self.nc_d + self.colors_d[ii], self.m * self.nc_d)

    def index_dm(self) -> np.ndarray:
        """(ng, s, r) positions of the entries of a d x m matrix of pattern P^T in its compressed
        form (d x nc_m), d * nc_m for a zero."""
        i, k = self.gidx[:, :, None], self.ridx[:, None, :]
        kk, ii = np.minimum(k, self.m - 1), np.minimum(i, self.d - 1)
        ok = (k < self.m) & (i < self.d) & self.P[kk, ii]
        return np.where(ok, ii * self.nc_m + self.colors_m[kk], self.d * self.nc_m)

    # --- on arrays (traced) --------------------------------------------------------------------
    @staticmethod
    def take(C, index):
        """The entries of the compressed Jacobian C at ``index`` (a zero where it points past C). Where
        no index points past C (the groups' d x d blocks where every group has s coordinates), they
        are read from C itself, without a copy of C with the zero appended."""
        if int(np.max(index, initial=-1)) < C.size:
            return jnp.ravel(C)[index]
        flat = jnp.concatenate([jnp.ravel(C), jnp.zeros((1,), C.dtype)])
        return flat[index]

    def gather_d(self, v):
        """v (d,) or (d, r') by groups: (ng, s) or (ng, s, r'), zeros in the padding."""
        ext = jnp.concatenate([v, jnp.zeros((1,) + v.shape[1:], v.dtype)])
        return ext[self.gidx]

    def scatter_d(self, Vg):
        """The inverse of :meth:`gather_d` (each coordinate is in one group)."""
        return jnp.reshape(Vg, (-1,) + Vg.shape[2:])[self.pos]

    def gather_l(self, y):
        """The multipliers (lambda, gamma) (2m,) or (2m, r') of each group: (ng, 2r, ...)."""
        ext = jnp.concatenate([y, jnp.zeros((1,) + y.shape[1:], y.dtype)])
        return ext[self.lidx]

    def scatter_add_m(self, Yg):
        """sum over groups of Yg (ng, r, ...) into the m constraints."""
        out = jnp.zeros((self.m + 1,) + Yg.shape[2:], Yg.dtype)
        return out.at[self.ridx].add(Yg)[: self.m]

    def scatter_add_ll(self, Wg):
        """sum over groups of Wg (ng, 2r, 2r) into the 2m x 2m matrix of the multipliers."""
        n = 2 * self.m
        idx = self.lidx[:, :, None] * (n + 1) + self.lidx[:, None, :]
        out = jnp.zeros(((n + 1) * (n + 1),), Wg.dtype).at[idx].add(Wg)
        return out.reshape(n + 1, n + 1)[:n, :n]

    def multiplier_solver(self, Wg):
        """y -> W^-1 y for the 2m x 2m matrix W summed from the groups' blocks Wg (ng, 2r, 2r) at
        their multipliers (:meth:`scatter_add_ll`), y (2m,) or (2m, r'). The multipliers private to a
        group (of constraints that involve it alone) meet only that group's block: they are
        eliminated group by group (an LU of each group's block of them, batched with the groups of as
        many private and shared ones: :attr:`batches`), and the Schur complement on the ns shared ones is solved by one LU.
        Pivots are chosen within those blocks. Without private multipliers, one LU of W. Says the
        :attr:`largest_block` of the tangent to the engine (:func:`livens.engine.tangent_by_groups`:
        the last factorization of a tangent by groups)."""
        tangent_by_groups(self.largest_block)
        if self.p == 0:
            return solver(self.scatter_add_ll(Wg))
        ns = self.ns
        padded = any(np.any(b.ls == 2 * self.r) for b in self.batches)
        Wx = jnp.pad(Wg, ((0, 0), (0, 1), (0, 1))) if padded else Wg  # a zero row and column at 2r: the padding
        Wss = jnp.zeros(((ns + 1) * (ns + 1),), Wg.dtype)
        eliminated = []  # (batch, its LU, W_sp, F = W_pp^-1 W_ps) of the batches with private multipliers
        for b in self.batches:
            g, lp, ls = b.groups[:, None, None], b.lp, b.ls
            schur = Wx[g, ls[:, :, None], ls[:, None, :]]
            if lp.shape[1]:
                lu, rows = batched_lu(Wx[g, lp[:, :, None], lp[:, None, :]])
                Wsp = Wx[g, ls[:, :, None], lp[:, None, :]]
                F = batched_lu_solve(lu, rows, Wx[g, lp[:, :, None], ls[:, None, :]])
                schur = schur - Wsp @ F
                eliminated.append((b, lu, rows, Wsp, F))
            Wss = Wss.at[b.sidx[:, :, None] * (ns + 1) + b.sidx[:, None, :]].add(schur)
        shared_solve = solver(Wss.reshape(ns + 1, ns + 1)[:ns, :ns])

        def solve(y):
            Y = y[:, None] if y.ndim == 1 else y
            tail = Y.shape[1:]
            acc, ups = jnp.zeros((ns + 1,) + tail, Y.dtype), []
            for b, lu, rows, Wsp, _ in eliminated:
                up = batched_lu_solve(lu, rows, Y[b.lrows])
                acc = acc.at[b.sidx].add(Wsp @ up)
                ups.append(up)
            ys = shared_solve(Y[self.shared] - acc[:ns])
            ysx = jnp.concatenate([ys, jnp.zeros((1,) + tail, Y.dtype)])
            yp = [jnp.reshape(up - F @ ysx[b.sidx], (-1,) + tail) for up, (b, _, _, _, F) in zip(ups, eliminated)]
            out = jnp.concatenate([ys, *yp])[self.order]
            return out[:, 0] if y.ndim == 1 else out

        return solve

    # --- dense forms (tests) -------------------------------------------------------------------------
    def dense_dd(self, Xg):
        """The d x d matrix of the group blocks Xg (ng, s, s)."""
        out = jnp.zeros((self.d + 1, self.d + 1), Xg.dtype)
        return out.at[self.gidx[:, :, None], self.gidx[:, None, :]].set(Xg)[: self.d, : self.d]

    def dense_md(self, Xg):
        """The m x d matrix of the blocks Xg (ng, r, s) of pattern P."""
        out = jnp.zeros((self.m + 1, self.d + 1), Xg.dtype)
        return out.at[self.ridx[:, :, None], self.gidx[:, None, :]].add(Xg)[: self.m, : self.d]

    def dense_dm(self, Xg):
        """The d x m matrix of the blocks Xg (ng, s, r) of pattern P^T."""
        out = jnp.zeros((self.d + 1, self.m + 1), Xg.dtype)
        return out.at[self.gidx[:, :, None], self.ridx[:, None, :]].add(Xg)[: self.d, : self.m]


def structure_from(dd_patterns, md_patterns) -> GroupStructure:
    """The :class:`GroupStructure` of the unions of the d x d and the m x d patterns (arrays whose
    nonzeros count)."""
    D = np.logical_or.reduce([_pattern(A) for A in dd_patterns])
    P = np.logical_or.reduce([_pattern(A) for A in md_patterns])
    return GroupStructure(D, P)


def missed(structure: GroupStructure, dd, md) -> bool:
    """Whether a nonzero of the d x d matrices ``dd`` lies outside the groups' blocks, or one of the
    m x d matrices ``md`` outside the pattern P (NumPy; the check at one more random point)."""
    s = structure
    group_of = np.empty(s.d, np.int64)
    for g in range(s.ng):
        a = s.gidx[g][s.gvalid[g]]
        group_of[a] = g
    inside = group_of[:, None] == group_of[None, :]
    if any(np.any(_pattern(A) & ~inside) for A in dd):
        return True
    return any(np.any(_pattern(A) & ~s.P) for A in md)


_GROUPS = CompiledCache(64)


def find_groups(key, dense_blocks, random_point, blocks_of, constant_dd=()) -> GroupStructure | None:
    """The :class:`GroupStructure` of a tangent's blocks, or None where it is not
    :attr:`~GroupStructure.useful` or the pattern, the union of the nonzeros at
    :data:`~livens.solvers.banded.SAMPLES` random points, misses an entry at one more (:func:`missed`).

    ``dense_blocks(*point)``: the blocks at a point, run at once also while a time loop that needs
    them is traced (:class:`livens.engine.ImmediateProgram`); ``random_point(rng)`` draws a point
    (NumPy arrays); ``blocks_of(outputs)`` sorts the outputs into (d x d blocks, m x d blocks);
    ``constant_dd``: d x d blocks that do not depend on the point (a constant mass matrix). Found
    once per ``key`` (one key, one function)."""
    if key in _GROUPS:
        return _GROUPS[key]
    program = ImmediateProgram(dense_blocks)
    rng = np.random.default_rng(SEED)

    def at_random_point():
        return blocks_of([np.asarray(a) for a in program(*random_point(rng))])

    dd, md = [np.asarray(a) for a in constant_dd], []
    for _ in range(SAMPLES):
        a, b = at_random_point()
        dd, md = dd + list(a), md + list(b)
    structure = structure_from(dd, md)
    if not structure.useful or missed(structure, *at_random_point()):
        structure = None
    _GROUPS[key] = structure
    return structure


__all__ = ["GroupStructure", "batched_lu", "batched_lu_solve", "find_groups", "missed", "structure_from"]
