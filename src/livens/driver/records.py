"""The records of a run: what each step returns, packed into rows, and the nodes a run keeps.

Every time step returns one record: q, p, Newton's iterations and residual, an "ok" flag and the
scheme's outputs (v, lambda, gamma). The loop writes it as one float64 row of a
:class:`RecordLayout` (one write per step instead of one per field; integers and flags are exact in
float64). :class:`KeptNodes` keeps the nodes whose global index is a multiple of ``save_every`` and
the steps that end there, for every member of a run, in arrays of the run's final size.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._lru import LRU
from ..timestep import scheme_mode


class RecordLayout(tuple):
    """The record of one step, (name, shape, dtype) per field, packed into one float64 row."""

    @classmethod
    def of(cls, shapes: dict) -> "RecordLayout":
        return cls((k, tuple(v.shape), np.dtype(v.dtype).str) for k, v in shapes.items())

    @property
    def width(self) -> int:
        return int(sum(math.prod(shape) for _, shape, _ in self))

    def column(self, name: str) -> int:
        """The first column of field ``name``."""
        i = 0
        for k, shape, _ in self:
            if k == name:
                return i
            i += math.prod(shape)
        raise KeyError(name)

    def pack(self, rec: dict):
        """The row of one record (traced)."""
        return jnp.concatenate([jnp.ravel(rec[k]).astype(jnp.float64) for k, _, _ in self])

    def unpack(self, rows) -> dict:
        """Rows (..., width) back to the fields, each of shape (..., *shape) and its own dtype (NumPy)."""
        rows = np.asarray(rows)
        lead = rows.shape[:-1]
        out, i = {}, 0
        for k, shape, dtype in self:
            w = math.prod(shape)
            col = rows[..., i : i + w].reshape(lead + shape)
            out[k] = col != 0 if np.dtype(dtype) == np.bool_ else col.astype(dtype, copy=False)
            i += w
        return out


_LAYOUTS = LRU(64)


def leaf_dtype(a) -> np.dtype:
    """The dtype of an array, tracer or shape; ``jnp.result_type`` of a Python number (a cache
    key's part, found without JAX's dtype rules where the leaf carries its dtype)."""
    dtype = getattr(a, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.dtype(jnp.result_type(a))


def record_layout(scheme, mech, mode: str, state, h, params, solution: bool = False) -> RecordLayout:
    """The :class:`RecordLayout` of a step of ``scheme`` from ``state`` (shapes only, no computation);
    ``solution=True``: with the step's converged unknowns (field "x", a loop of
    :func:`livens.timestep.make_loop` with ``record_solution``).

    Found by tracing the scheme's update, which for a large system takes longer than a short run
    itself (the three-bar swing with 40 elements), so it is kept per scheme, system, guess and the
    shapes of the state and the scheme's parameters: it depends on nothing else."""
    leaves, tree = jax.tree_util.tree_flatten(state)
    key = (
        id(scheme),
        mech,
        mode,
        tree,
        tuple((np.shape(a), str(leaf_dtype(a))) for a in leaves),
        tuple(sorted((k, jnp.shape(v)) for k, v in params.items())),
        solution,
    )
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is scheme:
        return hit[1]

    def outputs(s):
        u = scheme.guess(s, h, 0.0, params, mech, scheme_mode(mode))
        out = scheme.update(u, s, h, 0.0, params, mech)[1]
        return {**out, "x": scheme.pack(u, mech.d, mech.m)} if solution else out

    out = jax.eval_shape(outputs, state)
    f64 = jax.ShapeDtypeStruct((), jnp.float64)
    layout = RecordLayout.of(
        {
            "q": state.q,
            "p": state.p,
            "iterations": jax.ShapeDtypeStruct((), jnp.int32),
            "residual": f64,
            "ok": jax.ShapeDtypeStruct((), jnp.bool_),
            **out,
        }
    )
    _LAYOUTS[key] = (scheme, layout)
    return layout


class KeptNodes:
    """The nodes a run keeps, for each of its B members (module docstring), in arrays of their
    final size: q, p (B, K + 1, d) with node 0 first; v (B, K + 1, d) nodal or (B, K, d) per step;
    lam, gam (B, K, m); iterations, residual (B, K); K the kept nodes after node 0. ``rank``: the
    :class:`livens.redundancy.ConstraintRank` of an overconstrained system, whose multipliers are
    kept per equation (zero on the redundant ones), m its number of equations.

    ``offset``: the global index of the run's first node (a resumed run); ``steps``: the steps the
    run takes; node ``offset + j`` is at time ``t_start + j h``. Rows a member has not reached are
    left empty (:meth:`fill_after` fills them with NaN).
    """

    def __init__(
        self,
        members: int,
        steps: int,
        offset: int,
        save_every: int,
        t_start: float,
        h: float,
        start: dict,
        nodal_v: bool,
        has_gamma: bool,
        rank=None,
    ):
        self.B, self.steps, self.offset, self.k = members, steps, offset, save_every
        first = (offset // save_every + 1) * save_every  # the first multiple of save_every after offset
        self.nodes = np.arange(first, offset + steps + 1, save_every)  # the kept nodes' global indices
        K = self.nodes.size
        q0 = np.asarray(start["q"], float).reshape(members, -1)
        d = q0.shape[1]
        # multipliers of an overconstrained system: one per equation, zero on the redundant ones
        self.rank = rank if rank is not None and rank.redundant else None
        m = self.rank.m if self.rank is not None else int(start["m"])
        self.nodal_v, self.has_gamma = nodal_v, has_gamma
        self.t = np.concatenate([[t_start], t_start + (self.nodes - offset) * h])
        self.q = np.empty((members, K + 1, d))
        self.p = np.empty((members, K + 1, d))
        self.v = np.empty((members, K + 1 if nodal_v else K, d))
        self.q[:, 0], self.p[:, 0] = q0, np.asarray(start["p"], float).reshape(members, d)
        if nodal_v:
            self.v[:, 0] = np.asarray(start["v"], float).reshape(members, d)
        self.lam = np.empty((members, K, m))
        self.gam = np.empty((members, K, m)) if has_gamma else None
        self.iterations = np.zeros((members, K), np.int32)
        self.residual = np.empty((members, K))

    def _positions(self, a: int, e: int):
        """(rows of the kept nodes among steps a..e-1 of the run, their positions lo..hi among the
        kept nodes): step j ends at node ``offset + j + 1``."""
        first = self.offset + a + 1
        lo = int(np.searchsorted(self.nodes, first))
        hi = int(np.searchsorted(self.nodes, self.offset + e, side="right"))
        return self.nodes[lo:hi] - first, lo, hi

    def append(self, members, a: int, e: int, rec: dict):
        """The records ``rec`` (arrays (len(members), >= e - a, ...)) of steps a..e-1 of ``members``;
        returns the kept part as (positions lo..hi, rows) for a stream."""
        rows, lo, hi = self._positions(a, e)
        if hi == lo:
            return lo, hi
        if rows[-1] - rows[0] + 1 == rows.size:  # every node kept (save_every 1): a slice, not a copy
            rows = slice(int(rows[0]), int(rows[-1]) + 1)
        if isinstance(members, np.ndarray) and members.size == self.B and np.all(members == np.arange(self.B)):
            members = slice(None)
        self.q[members, 1 + lo : 1 + hi] = rec["q"][:, rows]
        self.p[members, 1 + lo : 1 + hi] = rec["p"][:, rows]
        if self.nodal_v:
            self.v[members, 1 + lo : 1 + hi] = rec["v"][:, rows]
        else:
            self.v[members, lo:hi] = rec["v"][:, rows]
        expand = self.rank.expand if self.rank is not None else (lambda x: x)
        self.lam[members, lo:hi] = expand(rec["lam"][:, rows])
        if self.gam is not None:
            self.gam[members, lo:hi] = expand(rec["gam"][:, rows])
        self.iterations[members, lo:hi] = rec["iterations"][:, rows]
        self.residual[members, lo:hi] = rec["residual"][:, rows]
        return lo, hi

    def truncate(self, n: int) -> None:
        """Keep only the rows up to node ``n`` (run-local): a run stopped there."""
        c = int(self.kept_count(n))
        self.nodes = self.nodes[:c]
        self.t = self.t[: c + 1]
        self.q, self.p = self.q[:, : c + 1], self.p[:, : c + 1]
        self.v = self.v[:, : c + 1] if self.nodal_v else self.v[:, :c]
        self.lam, self.iterations, self.residual = self.lam[:, :c], self.iterations[:, :c], self.residual[:, :c]
        if self.gam is not None:
            self.gam = self.gam[:, :c]

    def note_failed_step(self, b: int, step: int, iterations: int, residual: float) -> None:
        """Member b's failed step (run-local ``step``, from node step to step + 1): its Newton
        iterations and residual, where it would end at a kept node."""
        pos = int(np.searchsorted(self.nodes, self.offset + step + 1))
        if pos < self.nodes.size and self.nodes[pos] == self.offset + step + 1:
            self.iterations[b, pos] = iterations
            self.residual[b, pos] = residual

    def kept_count(self, n: np.ndarray) -> np.ndarray:
        """Kept nodes after node 0 of members that reached node ``n`` (run-local, per member)."""
        return np.searchsorted(self.nodes, self.offset + np.asarray(n), side="right")

    def fill_after(self, n: np.ndarray, failed: np.ndarray) -> None:
        """NaN (and zero iterations) in the rows after each member's node ``n[b]``; a failed
        member's failed step keeps its iterations and residual (:meth:`note_failed_step`)."""
        counts = self.kept_count(n)
        for b in np.flatnonzero(counts < self.nodes.size):
            c = int(counts[b])
            self.q[b, c + 1 :] = np.nan
            self.p[b, c + 1 :] = np.nan
            self.v[b, (c + 1 if self.nodal_v else c) :] = np.nan
            self.lam[b, c:] = np.nan
            if self.gam is not None:
                self.gam[b, c:] = np.nan
            f = c + 1 if failed[b] and self.nodes[c] == self.offset + int(n[b]) + 1 else c
            self.iterations[b, f:] = 0
            self.residual[b, f:] = np.nan
