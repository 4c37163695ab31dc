"""Solution: the arrays of a run, its diagnostics, and lossless export (netCDF, CSV).

Arrays: t (N+1,), q and p (N+1, d), v (N+1, d) for nodal velocities or
(N, d) for "interval"/"leading" ones (see ``velocity_kind``), lam and gam (N, m), newton_iterations
and newton_residual (N,).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache
from .errors import FileFormatError
from .system import Problem

if TYPE_CHECKING:  # xarray is an optional dependency (the io extra), imported where it is used
    import xarray as xr

FORMAT_VERSION = 1
_VMAPS = CompiledCache(64)


def _vmapped(fn):
    hit = _VMAPS.get(fn)
    if hit is None:
        hit = jax.jit(jax.vmap(fn))
        _VMAPS[fn] = hit
    return hit


def manifold_velocity(mech, q, p):
    """The velocity w tangent to g = 0 whose momentum M w agrees with p in the tangent directions:
    [M G^T; G 0] [w; mu] = [p; 0]. Regular wherever M is positive definite on ker G(q), also for a
    singular M (the director beams of SLO09 §4.2); w = M^-1 p where M is regular and G M^-1 p = 0."""
    M, G = mech.M(q), mech.G(q)
    d, m = mech.d, mech.m
    A = jnp.block([[M, G.T], [G, jnp.zeros((m, m), q.dtype)]])
    return jnp.linalg.solve(A, jnp.concatenate([p, jnp.zeros((m,), q.dtype)]))[:d]


def manifold_kinetic_energy(mech, q, p):
    """T(q, p) = 1/2 w.M(q)w for the velocity w = :func:`manifold_velocity` (q, p)."""
    w = manifold_velocity(mech, q, p)
    return 0.5 * w @ (mech.M(q) @ w)


ENERGY_CHUNK_BYTES = 32 * 2**20
"""Bytes of constraint Jacobians evaluated at once by :func:`manifold_kinetic_energies` (bounded
memory whatever the number of nodes)."""

_JACOBIANS = CompiledCache(16)


def _column_colours(rows: np.ndarray, cols: np.ndarray, d: int) -> np.ndarray:
    """A colour per column of an m x d pattern (rows, cols) such that columns of one colour share no
    row (greedy, Curtis, Powell, Reid 1974): one Jacobian-vector product per colour gives them all."""
    by_col: list = [[] for _ in range(d)]
    by_row: dict = {}
    for r, c in zip(rows.tolist(), cols.tolist()):
        by_col[c].append(r)
        by_row.setdefault(r, []).append(c)
    colour = np.full(d, -1, dtype=np.int64)
    for c in range(d):
        taken = {colour[o] for r in by_col[c] for o in by_row[r] if colour[o] >= 0}
        k = 0
        while k in taken:
            k += 1
        colour[c] = k
    return colour


def _constraint_jacobians(mech, q0):
    """(values, rows, cols, width): ``values(Q)`` the entries (rows, cols) of the constraint Jacobians
    G(q) at the rows of Q (N, d), as an (N, nnz) array. The pattern is the union of G's nonzeros at q0
    and at two random points near it; one Jacobian-vector product per colour of its columns gives every
    entry (``width`` colours), checked against the dense reverse-mode Jacobian at q0 and at a third
    random point; where the check fails, the dense Jacobian per node (every entry, ``width`` = d).
    Compiled once per system and chunk size (cached per system)."""
    hit = _JACOBIANS.get(mech)
    if hit is not None:
        return hit
    d, m = mech.d, mech.m
    dense = jax.jit(jax.vmap(jax.jacrev(mech.g)))
    rng = np.random.default_rng(0)
    q0 = np.asarray(q0, float)
    points = np.stack([q0] + [q0 + rng.standard_normal(d) for _ in range(3)])
    G = np.asarray(dense(jnp.asarray(points)))
    rows, cols = np.nonzero(np.any(G[:3] != 0, axis=0) | ~np.all(np.isfinite(G[:3]), axis=0))
    colour = _column_colours(rows, cols, d)
    ncol = int(colour.max()) + 1 if d else 0
    seeds = np.zeros((d, ncol))
    seeds[np.arange(d), colour] = 1.0

    def compressed(Q, E):
        def one(q):
            return jax.vmap(lambda e: jax.jvp(mech.g, (q,), (e,))[1], in_axes=1, out_axes=1)(E)

        return jax.vmap(one)(Q)

    comp = jax.jit(compressed)
    E = jnp.asarray(seeds)
    got = np.asarray(comp(jnp.asarray(points[[0, 3]]), E))[:, rows, colour[cols]]
    want = G[[0, 3]]
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    off = want.copy()
    off[:, rows, cols] = 0.0
    exact = bool(np.max(np.abs(got - want[:, rows, cols]), initial=0.0) <= 1e-12 * scale and not np.any(off))
    if exact and ncol < d:

        def values(Q):
            return np.asarray(comp(jnp.asarray(Q), E))[:, rows, colour[cols]]

        out = (values, rows, cols, ncol)
    else:
        rows, cols = (x.ravel() for x in np.indices((m, d)))

        def values(Q):
            return np.asarray(dense(jnp.asarray(Q))).reshape(len(Q), -1)

        out = (values, rows, cols, d)
    _JACOBIANS[mech] = out
    return out


def manifold_kinetic_energies(mech, q, p) -> np.ndarray:
    """T^n = 1/2 w^n.M(q^n) w^n at every node for the velocity w^n on the constraint manifold whose
    momentum has the tangential part of p^n (:func:`manifold_velocity`), in bounded memory and time:
    the entries of the constraint Jacobians in chunks of nodes (:func:`_constraint_jacobians`, at most
    :data:`ENERGY_CHUNK_BYTES` at once), each saddle-point system [M G^T; G 0] [w; mu] = [p; 0]
    solved as a sparse matrix of a fixed pattern (a beam's constraints couple a node to its
    neighbours only). The same numbers as :func:`manifold_kinetic_energy` node by node, to round-off."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spl

    q, p = np.asarray(q, float), np.asarray(p, float)
    n, d, m = q.shape[0], mech.d, mech.m
    out = np.empty(n)
    if n == 0:
        return out
    if m:
        values, rows, cols, width = _constraint_jacobians(mech, q[0])
    else:
        values, rows, cols, width = None, np.zeros(0, np.int64), np.zeros(0, np.int64), 1
    # the pattern of K = [M G^T; G 0]: M's entries (all of them where M depends on q), G's and G^T's
    if mech.constant_mass:
        M0 = np.asarray(mech.M_const, float)
        mr, mc = np.nonzero(M0)
        M_of = None
    else:
        mr, mc = (x.ravel() for x in np.indices((d, d)))
        M_of = jax.jit(jax.vmap(mech.M))
    I = np.concatenate([mr, d + rows, cols])
    J = np.concatenate([mc, cols, d + rows])
    K = sp.csc_matrix((np.arange(1, I.size + 1, dtype=float), (I, J)), shape=(d + m, d + m))
    order = K.data.astype(np.int64) - 1  # K.data[k] = coo_data[order[k]]
    per_node = 8 * (max(m, 1) * width + rows.size + (d * d if M_of is not None else 0)) + 1
    chunk = int(max(1, min(n, ENERGY_CHUNK_BYTES // per_node)))
    zeros = np.zeros(m)
    for a in range(0, n, chunk):
        Q = q[a : a + chunk]
        k = Q.shape[0]
        pad = np.concatenate([Q, np.repeat(Q[-1:], chunk - k, axis=0)]) if k < chunk else Q  # one shape
        Gv = values(pad)[:k] if m else np.zeros((k, 0))
        Mv = np.asarray(M_of(jnp.asarray(pad)))[:k].reshape(k, -1) if M_of is not None else None
        for i in range(k):
            mv = M0[mr, mc] if Mv is None else Mv[i]
            K.data = np.concatenate([mv, Gv[i], Gv[i]])[order]
            w = spl.spsolve(K, np.concatenate([p[a + i], zeros]))[:d]
            Mw = np.bincount(mr, weights=mv * w[mc], minlength=d)
            out[a + i] = 0.5 * float(w @ Mw)
    return out


def _write_netcdf(ds: xr.Dataset, path: str) -> str:
    """Write ``ds`` to the netCDF4 file ``path`` atomically (a temporary file beside it, then a
    rename), so that a reader never sees half a file; returns the path."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        ds.to_netcdf(tmp, engine="h5netcdf", invalid_netcdf=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


@dataclass(eq=False)
class Solution:
    """The result of :func:`livens.simulate` (or of :func:`livens.load`): the nodes and the per-step
    unknowns of a run, with the diagnostics computed from them (:meth:`energy`, :meth:`momentum_maps`,
    :meth:`constraint_residual`, :meth:`summary`) and lossless export (:meth:`to_netcdf`, :meth:`to_csv`).

    With N the steps kept (every ``save_every``-th node), d the coordinates and m the constraint
    equations, the fields are:

    t: the node times, shape (N+1,).
    q: the configurations q^n at the nodes, shape (N+1, d).
    p: the momenta p^n at the nodes, shape (N+1, d).
    v: the velocities, shape (N+1, d) where ``velocity_kind`` is "nodal", else (N, d): one per step.
    lam: the multipliers lambda of the position constraints, one row per step, shape (N, m).
    gam: the multipliers gamma of the secondary constraint (the GGL schemes, RATTLE, the GGL
        midpoint rule), shape (N, m); None for the schemes without one.
    newton_iterations: Newton iterations per step, shape (N,) (0 where the first guess already met the
        tolerance).
    newton_residual: the residual's infinity norm at the end of each step's Newton iteration, shape (N,).
    velocity_kind: which velocity ``v`` holds: "nodal" (v^n at t^n), "interval" (v^{n+1} of the step
        from t^n to t^{n+1}) or "leading" (v^n of that step).
    scheme: the scheme's name, e.g. "ggl-vi".
    params: the scheme's parameters of the run (e.g. ``theta``); empty for schemes without any.
    meta: the run's settings and records: ``h``, ``tol``, ``max_iter``, ``guess``, ``backend``,
        ``save_every``, ``t_start``, ``t_end``, ``steps``, ``rescued_steps``, ``example`` and
        ``problem_parameters``, ``package_version``, ...
    problem: the Problem that was run; None after loading a file whose system cannot be rebuilt.
    stored: diagnostics read from a file (:func:`livens.load`), used where no problem is attached;
        empty for a fresh run.
    """

    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray | None
    newton_iterations: np.ndarray
    newton_residual: np.ndarray
    velocity_kind: str
    scheme: str
    params: dict
    meta: dict
    problem: Any = None  # the Problem (None after loading a file whose system cannot be rebuilt)
    stored: dict = field(default_factory=dict)  # diagnostics read from a file

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_records(cls, problem, scheme, params, mech, records: list[dict], meta: dict, start: dict) -> "Solution":
        """Assemble the Solution from the time loop's per-chunk records and the start node (``mech``
        may be None: the sizes are then read from the records)."""
        if mech is not None:
            d, m = mech.d, mech.m
        else:
            d = int(np.asarray(start["q"]).shape[-1])
            m = int(next((np.asarray(r["lam"]).shape[-1] for r in records if "lam" in r), 0))

        def cat(key, shape):
            parts = [r[key] for r in records if key in r and len(r[key])]
            if len(parts) == 1:
                return np.asarray(parts[0])
            return np.concatenate(parts) if parts else np.zeros((0,) + shape)

        qn, pn = cat("q", (d,)), cat("p", (d,))
        vn = cat("v", (d,))
        lam = cat("lam", (m,))
        gam = cat("gam", (m,)) if scheme.capabilities.gamma else None
        q = np.vstack([np.asarray(start["q"])[None, :], qn])
        p = np.vstack([np.asarray(start["p"])[None, :], pn])
        v = np.vstack([np.asarray(start["v"])[None, :], vn]) if scheme.capabilities.velocity_kind == "nodal" else vn
        t = np.concatenate([[start["t"]], cat("t", ())])
        meta = dict(meta)
        if problem is not None:
            meta.update(example=problem.name, problem_parameters=dict(problem.parameters))
        meta.update(package_version=_version())
        return cls(
            t=t,
            q=q,
            p=p,
            v=v,
            lam=lam,
            gam=gam,
            newton_iterations=cat("iterations", ()).astype(np.int32),
            newton_residual=cat("residual", ()),
            velocity_kind=scheme.capabilities.velocity_kind,
            scheme=scheme.name,
            params=dict(params),
            meta=meta,
            problem=problem,
        )

    # ------------------------------------------------------------------ basic properties
    @property
    def h(self) -> float:
        return float(self.meta["h"])

    @property
    def n_steps(self) -> int:
        return int(self.q.shape[0] - 1)

    @property
    def save_every(self) -> int:
        return int(self.meta.get("save_every", 1))

    def _consecutive(self, what: str):
        if self.save_every != 1:
            raise ValueError(
                f"{what} needs consecutive steps, but this run kept every {self.save_every}th node "
                "(save_every); rerun with save_every=1 for it."
            )

    @property
    def mechanics(self):
        from .mechanics import mechanics

        if self.problem is None:
            raise ValueError(
                "This Solution has no system attached (it was loaded from a file of a user-defined system); "
                "diagnostics stored in the file are available, others need lv.load(path, problem=...)."
            )
        mech = mechanics(self.problem.system, self.problem.q0)
        values = self.meta.get("parameters")  # the System's parameters of this run
        if values is not None:
            mech = mech.bind({k: jnp.asarray(v) for k, v in values.items()})
        return mech

    def _vmap(self, fn, *arrays):
        return np.asarray(_vmapped(fn)(*[jnp.asarray(a) for a in arrays]))

    def _stored(self, key):
        if self.problem is None and key in self.stored:
            return self.stored[key]
        return None

    def _step_index(self) -> np.ndarray:
        """Global index of each stored step (the step that ends at each stored node after the first)."""
        k = self.save_every
        first = int(round(self.t[0] / self.h)) if self.h > 0 else 0
        return first + k * np.arange(1, self.n_steps + 1) - 1

    @property
    def _nodal_v(self) -> bool:
        return self.velocity_kind == "nodal"

    # ------------------------------------------------------------------ diagnostics
    def energy(self) -> dict[str, np.ndarray]:
        """Energies at the nodes: "kinetic", "potential", "total"; "livens" E(q, v, p) = p.v - L
        (KBS23b eq 4, KB23 eq 31) where the scheme has nodal velocities.

        The kinetic energy is 1/2 v.M(q)v for nodal velocities, else 1/2 p.M^-1 p (KBS23b eq 7). Where M
        is singular (or configuration dependent) and the scheme has no nodal velocities (``vi-lagrange``,
        ``vi-nullspace`` on the beams of SLO09 §4.2), it is 1/2 w.M(q)w for the velocity w on the
        constraint manifold whose momentum has the same tangential part as p: G(q) w = 0 and
        M(q) w - p in the range of G(q)^T (:func:`manifold_kinetic_energy`; equal to 1/2 p.M^-1 p
        where M is regular and G M^-1 p = 0), computed in bounded memory and sparse per node
        (:func:`manifold_kinetic_energies`). The energies of a Solution are computed once and kept
        (its arrays are not expected to change).
        """
        keys = [k for k in ("kinetic", "potential", "total", "livens") if f"energy_{k}" in self.stored]
        if self.problem is None and keys:
            return {k: self.stored[f"energy_{k}"] for k in keys}
        key = (id(self.q), id(self.p), id(self.v), self.q.shape, self.meta.get("parameters") is not None)
        hit = self.__dict__.get("_energy")
        if hit is not None and hit[0] == key:  # summary, files and figures of one run ask for it in turn
            return {k: v.copy() for k, v in hit[1].items()}
        mech = self.mechanics
        V = self._vmap(mech.V, self.q)
        if self._nodal_v:
            T = self._vmap(mech.T, self.q, self.v)
        elif mech.Minv_const is not None:
            T = 0.5 * np.einsum("ni,ij,nj->n", self.p, np.asarray(mech.Minv()), self.p)
        else:
            T = manifold_kinetic_energies(mech, self.q, self.p)
        out = {"kinetic": T, "potential": V, "total": T + V}
        if self._nodal_v:
            out["livens"] = self._vmap(mech.E, self.q, self.v, self.p)
        self.__dict__["_energy"] = (key, {k: v.copy() for k, v in out.items()})
        return out

    def energy_increments(self, kind: str = "total") -> np.ndarray:
        """E^{n+1} - E^n per step, shape (N,)."""
        return np.diff(self.energy()[kind])

    def momentum_maps(self) -> dict[str, np.ndarray]:
        """J_xi = p . xi q (KBS23b eq 45) at the nodes for each of the problem's symmetries."""
        if self.problem is None:
            return {k[len("J:") :]: v for k, v in self.stored.items() if k.startswith("J:")}
        return {s.name: np.asarray(s.momentum_map(self.q, self.p)) for s in self.problem.symmetries}

    def _force_points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, v, t) per step where the scheme evaluates the external force: the left node for
        schemes whose velocity leads the step (``ggl-vi``), else the midpoint (nodal or interval
        velocities)."""
        n = self.n_steps
        if self.velocity_kind == "leading":
            return self.q[:-1], self.v[:n], self.t[:-1]
        q = 0.5 * (self.q[:-1] + self.q[1:])
        v = 0.5 * (self.v[:-1] + self.v[1:]) if self._nodal_v else self.v[:n]
        return q, v, self.t[:-1] + 0.5 * self.h

    def external_impulse(self) -> dict[str, np.ndarray]:
        """The impulse I^n of the external force and the dampers over each step along each of the
        problem's symmetries, shape (N,) per symmetry: I^n = h f^n . xi_Q(q^*) (:meth:`Symmetry.moment`)
        with the force of the step as the schemes apply it,

        - nodal and interval velocities: f^n = F(q^{n+1/2}, v^{n+1/2}, t^n + h/2) - C(q^{n+1/2}) v^{n+1/2}
          at q^* = q^{n+1/2}, with v^{n+1/2} the mean of the nodal velocities or the velocity of the
          interval -- the midpoint quadrature of ``livens-em``, ``livens-midpoint`` (KB23 eq 28, 21),
          the midpoint rules, and of ``vi-lagrange``, ``vi-nullspace``, whose discrete forces
          f^-_d = f^+_d = h/2 F (SLO09 §4) give f^-_d . xi q^n + f^+_d . xi q^{n+1} = h F . xi q^{n+1/2};
        - leading velocities (``ggl-vi``): f^n = F(q^n, v^n, t^n) - C(q^n) v^n at q^* = q^n.

        A scheme that keeps the momentum maps (the energy-momentum and the variational ones) meets
        J^{n+1} - J^n = I^n (:meth:`momentum_balance`) to the Newton tolerance; zero where the system
        has neither an external force nor dampers."""
        syms = self.problem.symmetries if self.problem is not None else ()
        mech = self.mechanics
        self._consecutive("external_impulse()")
        n = self.n_steps
        if not syms or not (mech.has_external_force or mech.has_dissipation):
            return {s.name: np.zeros(n) for s in syms}
        q, v, t = self._force_points()
        f = self._vmap(_applied_force(mech), q, v, t)
        return {s.name: self.h * np.asarray(s.moment(q, f)) for s in syms}

    def momentum_balance(self) -> dict[str, np.ndarray]:
        """J^{n+1} - J^n - I^n per step and symmetry, shape (N,): the change of each momentum map
        (KBS23b eq 45) less the impulse of the external force and dampers along it
        (:meth:`external_impulse`). Zero to the Newton tolerance for the schemes that keep momentum
        maps, whether or not the loads respect the symmetry; without loads it is J^{n+1} - J^n."""
        impulse = self.external_impulse()
        return {name: np.diff(J) - impulse[name] for name, J in self.momentum_maps().items()}

    def constraint_residual(self, level: str = "position") -> np.ndarray:
        """Nodal constraint residuals, shape (N+1, m).

        "position": g(q^n); "velocity": G(q^n) M^-1 p^n (KBS23b eq 29), or G(q^n) v^n where M is
        singular or configuration dependent and the scheme has nodal velocities.
        """
        if level not in ("position", "velocity"):
            raise ValueError(f"level must be 'position' or 'velocity'; got {level!r}.")
        hit = self._stored(f"residual_{level}")
        if hit is not None:
            return hit
        mech = self.mechanics
        if mech.m == 0:
            return np.zeros((self.q.shape[0], 0))
        if level == "position":
            return self._vmap(mech.g, self.q)
        G = self._vmap(mech.G, self.q)
        if mech.Minv_const is not None:
            w = self.p @ np.asarray(mech.Minv()).T
        elif self._nodal_v:
            w = self.v
        else:
            raise ValueError("The velocity-level residual needs M^-1 or nodal velocities; this run has neither.")
        return np.einsum("nij,nj->ni", G, w)

    def enforced_residuals(self) -> dict[str, np.ndarray]:
        """Residuals of the constraints the scheme is built to satisfy, per step, named after
        where they are evaluated (e.g. VI-S: "velocity G(q_bar) M^-1 p^{n+1}"); of an overconstrained
        system, those of the independent equations it solves (``problem.constraint_rank.kept``)."""
        if self.problem is None:
            return {k[len("enforced:") :]: v for k, v in self.stored.items() if k.startswith("enforced:")}
        from .schemes import get

        self._consecutive("enforced_residuals()")
        sch, _ = get(self.scheme)
        out = sch.about.enforced(self)
        rank = getattr(self.problem, "constraint_rank", None)
        if rank is None or not rank.redundant:
            return out
        # an overconstrained system: the scheme solves the independent equations only (livens.redundancy)
        return {k: rank.restrict(v) if np.shape(v)[-1:] == (rank.m,) else v for k, v in out.items()}

    def dissipated_work(self) -> np.ndarray:
        """Work W_diss(t_n) done by the viscous forces, shape (N+1,), W(0) = 0 (KBS23a eq 55).

        Quadrature per step: h v.C(q)v with the scheme's velocity of that step, C at the node where
        that velocity lives ("leading": q^n, "interval": q^{n+1/2}, "nodal": trapezoidal).
        """
        hit = self._stored("dissipated_work")
        if hit is not None:
            return hit
        mech = self.mechanics
        if not mech.has_dissipation:
            return np.zeros(self.q.shape[0])
        self._consecutive("dissipated_work()")
        h = self.h

        def power(q, v):
            return v @ (mech.C(q) @ v)

        if self.velocity_kind == "leading":
            P = self._vmap(power, self.q[:-1], self.v)
        elif self.velocity_kind == "interval":
            P = self._vmap(power, 0.5 * (self.q[:-1] + self.q[1:]), self.v)
        else:
            Pn = self._vmap(power, self.q, self.v)
            P = 0.5 * (Pn[:-1] + Pn[1:])
        return np.concatenate([[0.0], np.cumsum(h * P)])

    def summary(self) -> dict:
        """Figures for the CLI: steps, times, the energy error, momentum drift, residuals, iterations,
        and the number of steps whose plain Newton iteration failed and was rescued
        (``lv.simulate(..., rescue=True)``). "steps" counts the steps computed, "nodes kept" the
        nodes stored (one in every ``save_every``; a file left by a stopped run counts the steps its
        kept nodes span). The wall time includes the compile time, which includes the first chunk of
        steps; "steps/s" is the rate of the other chunks (NaN where the run fit in the first; a run
        continued from a file, ``meta["resumed"]``, is timed for the continuation). The maxima are
        over the kept nodes.

        The energy error is relative to the energy scale max(|E0|, max T - min T, max V - min V), so
        that it means something for a system that starts at rest (E0 = 0); where the system has an
        external force or dampers it is the energy balance max_n |E^n - E^0 - W_ext^n + W_diss^n|
        (:meth:`external_work`, :meth:`dissipated_work`), not the change of E, which the loads make.
        The constraint residuals are the nodal ones, g(q^n) and G(q^n) M^-1 p^n (or G(q^n) v^n); the
        lines "enforced (position)" and "enforced (velocity)" say whether the scheme enforces that
        residual by its own equations or another one (named, with its largest value)."""
        out: dict = {
            "steps": self._steps_computed(),
            "nodes kept": len(self.t),
            "wall time [s]": float(self.meta.get("wall_time", float("nan"))),
            "compile time [s]": float(self.meta.get("compile_time", float("nan"))),
        }
        # the first chunk of steps is timed as the compilation: the rate is that of the others
        run = out["wall time [s]"] - out["compile time [s]"]
        ran = out["steps"] - int((self.meta.get("resumed") or {}).get("steps", 0))  # those of this session
        timed = ran - min(int(self.meta.get("chunk", ran)), ran)
        out["steps/s"] = timed / run if (run > 0 and timed > 0) else float("nan")
        E = self.energy()
        key = "livens" if "livens" in E else "total"
        En = np.asarray(E[key])
        scale = max(abs(float(En[0])), *(float(np.ptp(E[k])) if len(E[k]) else 0.0 for k in ("kinetic", "potential")))
        scale = scale if scale > 0 else 1.0
        out["energy scale max(|E0|, range of T, range of V)"] = scale
        mech = self.mechanics if self.problem is not None else None
        loads = mech is not None and (mech.has_external_force or mech.has_dissipation)
        if loads and self.save_every == 1:
            balance, terms = En - En[0], ""
            if mech.has_external_force:
                W = self.external_work()
                out["work of the external forces W_ext(T)"] = float(W[-1])
                balance, terms = balance - W, terms + " - W_ext"
            if mech.has_dissipation:
                D = self.dissipated_work()
                out["dissipated work W_diss(T)"] = float(D[-1])
                balance, terms = balance + D, terms + " + W_diss"
            out[f"max |E - E0{terms}| / scale ({key}, energy balance)"] = float(np.max(np.abs(balance)) / scale)
        else:
            label = f"max |E - E0| / scale ({key})"
            if loads:
                label += f" (includes the loads' work: one node in every {self.save_every} kept)"
            out[label] = float(np.max(np.abs(En - En[0])) / scale)
        for name, J in self.momentum_maps().items():
            out[f"max drift {name}"] = float(np.max(np.abs(J - J[0])))
        if loads and self.save_every == 1:
            for name, b in self.momentum_balance().items():
                out[f"max |J^(n+1) - J^n - I^n| {name} (momentum balance)"] = float(np.max(np.abs(b), initial=0.0))
        if self.lam.ndim == 2 and self.lam.shape[1]:
            out.update(self._residual_lines())
        out["mean Newton iterations"] = float(np.mean(self.newton_iterations)) if self.n_steps else 0.0
        out["steps rescued by damped Newton"] = len(self.meta.get("rescued_steps", ()))
        return out

    def _residual_lines(self) -> dict:
        """The nodal residuals of :meth:`summary` and whether the scheme enforces them."""
        out: dict = {}
        names = {}
        for level, sym in (("position", "g"), ("velocity", "g_v")):
            try:
                out[f"max |{sym}|"] = float(np.max(np.abs(self.constraint_residual(level)), initial=0.0))
                names[level] = sym
            except ValueError:
                continue
        out.update(self._redundant_lines())
        try:
            enforced = self.enforced_residuals()
        except (ValueError, AttributeError):
            enforced = None
        for level, sym in names.items():
            if enforced is None:
                out[f"enforced ({level})"] = "not known (one node in every save_every kept, or no scheme)"
                continue
            own = [k for k in enforced if k.startswith(level)]
            if not own:
                out[f"enforced ({level})"] = (
                    f"no: the scheme does not enforce max |{sym}| (its equations leave it free)"
                )
                continue
            name = own[0]
            at_nodes = "q^{n+1}" in name and (level == "position" or "p^{n+1}" in name or "v^{n+1}" in name)
            if level == "velocity" and at_nodes:
                # the nodal residual is G M^-1 p where M^-1 is constant, else G v: the same quantity?
                nodal_p = self.problem is not None and self.mechanics.Minv_const is not None
                at_nodes = ("p^{n+1}" in name) == nodal_p
            if at_nodes:
                out[f"enforced ({level})"] = f"yes: max |{sym}| is the scheme's own {name.split(' ', 1)[1]} = 0"
            else:
                top = float(np.max(np.abs(np.asarray(enforced[name])), initial=0.0))
                out[f"enforced ({level})"] = (
                    f"no: the scheme enforces {name.split(' ', 1)[1]} = 0 instead (max {top:.3e}); max |{sym}| is free"
                )
        return out

    def _redundant_lines(self) -> dict:
        """The summary's lines of an overconstrained system (:mod:`livens.redundancy`): the redundant
        equations, which the scheme does not solve, and their largest residuals along the run."""
        rank = getattr(self.problem, "constraint_rank", None)
        if rank is None:
            return {}
        out = {}
        if rank.singular_start:
            out["singular start"] = f"rank G(q0) = {rank.rank_q0} < {rank.rank} = rank G near q0"
        if not rank.redundant:
            return out
        g = np.abs(self.constraint_residual("position"))[:, list(rank.redundant)]
        worst = np.max(g, axis=0, initial=0.0)
        listed = ", ".join(f"{rank.labels[k]} {w:.1e}" for k, w in zip(rank.redundant, worst))
        out[f"redundant equations ({len(rank.redundant)} of {rank.m}, not solved, multipliers 0): max |g|"] = listed
        return out

    def external_work(self) -> np.ndarray:
        """Work W_ext(t_n) of the external force F(q, v, t), shape (N+1,), W_ext(0) = 0, by the
        quadrature of the step the schemes apply F with: F(q^{n+1/2}, v, t^n + h/2) . (q^{n+1} - q^n)
        (midpoint; v the mean of the nodal velocities or the velocity of the interval), or
        F(q^n, v^n, t^n) . (q^{n+1} - q^n) for leading velocities (``ggl-vi``). Zero without a force."""
        mech = self.mechanics
        n = self.n_steps
        if not mech.has_external_force or n == 0:
            return np.zeros(self.q.shape[0])
        self._consecutive("external_work()")
        q, v, t = self._force_points()
        F = self._vmap(mech.F, q, v, t)
        return np.concatenate([[0.0], np.cumsum(np.einsum("ni,ni->n", F, np.diff(self.q, axis=0)))])

    # ------------------------------------------------------------------ export
    def to_dataset(self) -> xr.Dataset:
        """An xarray Dataset with every array, the diagnostics and the metadata."""
        import xarray as xr

        d = self.q.shape[1]
        m = self.lam.shape[1] if self.lam.ndim == 2 else 0
        vdim = "time" if self._nodal_v else "step"
        data = {
            "q": (("time", "coord"), self.q),
            "p": (("time", "coord"), self.p),
            "v": ((vdim, "coord"), self.v),
            "lam": (("step", "constraint"), self.lam.reshape(len(self.newton_iterations), m)),
            "newton_iterations": (("step",), self.newton_iterations),
            "newton_residual": (("step",), self.newton_residual),
        }
        if self.gam is not None:
            data["gam"] = (("step", "constraint"), self.gam.reshape(len(self.newton_iterations), m))
        diag = self._diagnostics_for_file()
        for k, (dims, arr) in diag.items():
            data[k] = (dims, arr)
        meta = dict(self.meta)
        hist = meta.pop("guess_history", None)
        if hist is not None:  # the predictor's history (livens.simulate, resume): a variable, not an attribute
            data["guess_history"] = (
                ("history", "unknown"),
                np.asarray(hist["x"], dtype=float),
                {k: hist[k] for k in ("step", "k", "advanced", "since") if k in hist},
            )
        ds = xr.Dataset(data, coords={"time": self.t, "step": self._step_index()})
        names = None
        if self.problem is not None:
            names = self.problem.system.constraint_names
        attrs = {
            "livens_format": FORMAT_VERSION,
            "scheme": self.scheme,
            "velocity_kind": self.velocity_kind,
            "params": json.dumps(self.params),
            "meta": json.dumps(_jsonable(meta)),
            "d": d,
            "m": m,
        }
        if names:
            attrs["constraint_names"] = json.dumps(list(names))
        ds.attrs.update(attrs)
        return ds

    def _diagnostics_for_file(self) -> dict:
        out: dict = {}
        try:
            for k, arr in self.energy().items():
                out[f"energy_{k}"] = (("time",), np.asarray(arr))
            for k, arr in self.momentum_maps().items():
                out[f"J:{k}"] = (("time",), np.asarray(arr))
            for level in ("position", "velocity"):
                try:
                    out[f"residual_{level}"] = (("time", "constraint"), self.constraint_residual(level))
                except ValueError:
                    pass
            if self.save_every == 1:
                for k, arr in self.enforced_residuals().items():
                    arr = np.asarray(arr)
                    out[f"enforced:{k}"] = (
                        ("step", "constraint"),
                        arr.reshape(self.n_steps, arr.size // max(self.n_steps, 1)),
                    )
                out["dissipated_work"] = (("time",), self.dissipated_work())
        except ValueError:
            pass
        return out

    def to_netcdf(self, path: str | os.PathLike) -> str:
        """Write the Solution to a netCDF4 file (atomically: temporary file, then rename)."""
        path = os.fspath(path)
        ds = self.to_dataset()
        return _write_netcdf(ds, path)

    def to_csv(self, path: str | os.PathLike, rows: int | None = None, columns: str = "all") -> str:
        """Write nodal data as CSV with named columns (pgfplots, spreadsheets); returns the path.

        One row per stored node t^n. ``columns="all"``: t, q_i, p_i, v_i, energies, momentum maps,
        every constraint residual (nodal and where the scheme enforces it), lambda_j, gamma_j and
        the Newton iterations; ``"summary"``: t, q_i, energies, momentum maps, the largest
        |residual| over the constraints at each level (``max_abs_residual_position``, ...) and the
        Newton iterations. Per-step quantities (v for non-nodal schemes, lam, gam, enforced
        residuals, Newton iterations) are written in the row of the step's end node t^{n+1}
        ("leading" velocities in the row of t^n); the remaining row holds NaN.

        ``rows``: at most this many rows, the nodes 0, k, 2k, ... and the last one (k the smallest
        step that fits); None writes every stored node. The file is replaced atomically and gets
        the permissions of any new file (0666 less the umask).
        """
        if columns not in ("all", "summary"):
            raise ValueError(f"columns must be 'all' or 'summary'; got {columns!r}.")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 2):
            raise ValueError(f"rows must be an integer of at least 2 (or None for every node); got {rows!r}.")
        path = os.fspath(path)
        n1 = self.q.shape[0]
        sel = thinned_nodes(n1, rows)
        summary = columns == "summary"
        cols: dict[str, np.ndarray] = {"t": self.t[sel]}

        def steps(arr, leading=False):
            out = np.full((n1,) + arr.shape[1:], np.nan)
            if leading:
                out[:-1] = arr
            else:
                out[1:] = arr
            return out[sel]

        for i in range(self.q.shape[1]):
            cols[f"q{i + 1}"] = self.q[sel, i]
        if not summary:
            for i in range(self.p.shape[1]):
                cols[f"p{i + 1}"] = self.p[sel, i]
            v = self.v[sel] if self._nodal_v else steps(self.v, self.velocity_kind == "leading")
            for i in range(self.v.shape[1]):
                cols[f"v{i + 1}"] = v[:, i]
        for k, (dims, arr) in self._diagnostics_for_file().items():
            arr = np.asarray(arr)
            arr = steps(arr) if dims[0] == "step" else arr[sel]
            if arr.ndim == 1:
                cols[_csv_name(k)] = arr
            elif summary:
                if arr.shape[1]:
                    name = k.split(":", 1)[-1]
                    prefix = "max_abs_" + ("enforced_" if k.startswith("enforced:") else "")
                    cols[prefix + _csv_name(name)] = np.max(np.abs(arr), axis=1)
            else:
                for j in range(arr.shape[1]):
                    cols[f"{_csv_name(k)}_{j + 1}"] = arr[:, j]
        if not summary:
            for j in range(self.lam.shape[1] if self.lam.ndim == 2 else 0):
                cols[f"lambda{j + 1}"] = steps(self.lam[:, j])
                if self.gam is not None:
                    cols[f"gamma{j + 1}"] = steps(self.gam[:, j])
        cols["newton_iterations"] = steps(self.newton_iterations.astype(float))
        header = ",".join(cols)
        table = np.column_stack([np.asarray(c, dtype=float) for c in cols.values()])
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
        try:
            # a new file with mode 0666 less the umask, as open() gives (mkstemp would give 0600)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            with os.fdopen(fd, "w") as f:
                np.savetxt(f, table, delimiter=",", header=header, comments="", fmt="%.17g")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path

    def _steps_computed(self) -> int:
        """The steps the run computed (``meta["steps"]``); for a file left by a stopped run, which
        does not record them, the steps its kept nodes span."""
        return int(self.meta.get("steps", self.n_steps * self.save_every))

    def __repr__(self) -> str:
        return (
            f"Solution(scheme={self.scheme!r}, params={self.params}, steps={self._steps_computed()}, "
            f"nodes={len(self.t)}, save_every={self.save_every}, h={self.h:g}, d={self.q.shape[1]}, "
            f"m={self.lam.shape[1] if self.lam.ndim == 2 else 0})"
        )


_APPLIED = CompiledCache(16)


def _applied_force(mech):
    """(q, v, t) -> F(q, v, t) - C(q) v, the external and viscous forces of ``mech`` (one function per
    Mechanics, so that :meth:`Solution.external_impulse` compiles its vmapped program once)."""
    fn = _APPLIED.get(mech)
    if fn is None:

        def fn(q, v, t):
            f = mech.F(q, v, t)
            return f - mech.C(q) @ v if mech.has_dissipation else f

        _APPLIED[mech] = fn
    return fn


def thinned_nodes(n_nodes: int, rows: int | None) -> np.ndarray:
    """Indices of at most ``rows`` of ``n_nodes`` nodes: 0, k, 2k, ... and the last (every node
    for ``rows=None`` or where they fit)."""
    if rows is None or n_nodes <= rows:
        return np.arange(n_nodes)
    k = -(-(n_nodes - 1) // (rows - 1))  # ceil: 0, k, ..., and the last node fit in ``rows``
    sel = np.arange(0, n_nodes, k)
    if sel[-1] != n_nodes - 1:
        sel = np.append(sel[: rows - 1], n_nodes - 1)
    return sel


def _csv_name(key: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("livens")
    except Exception:  # pragma: no cover
        return "0+unknown"


@dataclass(eq=False)
class EnsembleSolution:
    """The result of :func:`simulate_ensemble`: member-first arrays on a common time grid.

    t (K+1,): the kept nodes' times; q, p (B, K+1, d); v (B, K+1, d) for nodal velocities, else
    (B, K, d); lam, gam (B, K, m) (gam None for schemes without it); newton_iterations,
    newton_residual (B, K): the kept nodes and the steps that end there (every ``save_every``-th).
    ``steps[b]``: the steps member b took (its run-local node); a member whose Newton iteration
    failed keeps its converged steps and NaN after them; ``failed[b]`` says so (its failed step
    keeps its iterations and residual). ``ens[b]`` is member b as a :class:`~livens.Solution`.
    """

    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray | None
    newton_iterations: np.ndarray
    newton_residual: np.ndarray
    steps: np.ndarray
    failed: np.ndarray
    velocity_kind: str
    scheme: str
    params: dict
    meta: dict
    problem: Any = None
    _scheme_obj: Any = field(default=None, repr=False)
    _mech: Any = field(default=None, repr=False)

    @classmethod
    def from_kept(cls, kept, n, failed, scheme, params, meta, problem, mech) -> "EnsembleSolution":
        """The ensemble from the driver's :class:`~livens.driver.records.KeptNodes`."""
        meta = dict(meta, index=(kept.nodes - 1).tolist())
        return cls(
            t=kept.t,
            q=kept.q,
            p=kept.p,
            v=kept.v,
            lam=kept.lam,
            gam=kept.gam,
            newton_iterations=kept.iterations,
            newton_residual=kept.residual,
            steps=np.asarray(n, np.int64),
            failed=np.asarray(failed, bool),
            velocity_kind=scheme.capabilities.velocity_kind,
            scheme=scheme.name,
            params=dict(params),
            meta=meta,
            problem=problem,
            _scheme_obj=scheme,
            _mech=mech,
        )

    def __len__(self) -> int:
        return int(self.q.shape[0])

    @property
    def h(self) -> float:
        return float(self.meta["h"])

    @property
    def save_every(self) -> int:
        return int(self.meta.get("save_every", 1))

    def _index(self) -> np.ndarray:
        """The global index of each kept step (the step ending at each kept node after node 0)."""
        index = self.meta.get("index")
        return np.asarray(index, np.int64) if index is not None else np.arange(self.t.size - 1)

    def __getitem__(self, b: int):
        """Member b as the :class:`~livens.Solution` of its single run (its converged steps)."""
        B = len(self)
        if not isinstance(b, (int, np.integer)) or not -B <= b < B:
            raise IndexError(f"member index {b!r} out of range for an ensemble of {B}")
        b = int(b) % B
        n = int(self.steps[b])
        index = self._index()
        c = int(np.searchsorted(index, n - 1, side="right"))  # kept steps up to the member's last
        problem = self.problem.replace(q0=self.q[b, 0], v0=self.meta["v0s"][b]) if self.problem is not None else None
        rec = {
            "q": self.q[b, 1 : c + 1],
            "p": self.p[b, 1 : c + 1],
            "lam": self.lam[b, :c],
            "iterations": self.newton_iterations[b, :c],
            "residual": self.newton_residual[b, :c],
            "t": self.t[1 : c + 1],
            "index": index[:c],
        }
        rec["v"] = self.v[b, 1 : c + 1] if self.velocity_kind == "nodal" else self.v[b, :c]
        if self.gam is not None:
            rec["gam"] = self.gam[b, :c]
        meta = {k: v for k, v in self.meta.items() if k not in ("v0s", "members", "index", "rescued_steps", "lanes")}
        meta.update(
            steps=n,
            ensemble_member=b,
            t_end=float(self.t[0] + n * self.h),
            rescued_steps=list(self.meta.get("rescued_steps", {}).get(b, [])),
        )
        start = {"t": float(self.t[0]), "q": self.q[b, 0], "p": self.p[b, 0], "v": self.meta["v0s"][b]}
        return Solution.from_records(problem, self._scheme_obj, self.params, self._mech, [rec], meta, start)

    def solutions(self) -> list:
        """Every member as a :class:`~livens.Solution`."""
        return [self[b] for b in range(len(self))]

    def to_netcdf(self, path: str | os.PathLike) -> str:
        """Write the ensemble to a netCDF4 file (atomically), with a ``member`` dimension;
        ``lv.load`` reads it back as an EnsembleSolution."""
        import xarray as xr

        path = os.fspath(path)
        vdim = "time" if self.velocity_kind == "nodal" else "step"
        data = {
            "q": (("member", "time", "coord"), self.q),
            "p": (("member", "time", "coord"), self.p),
            "v": (("member", vdim, "coord"), self.v),
            "lam": (("member", "step", "constraint"), self.lam),
            "newton_iterations": (("member", "step"), self.newton_iterations),
            "newton_residual": (("member", "step"), self.newton_residual),
            "steps": (("member",), self.steps),
            "failed": (("member",), self.failed.astype(np.int8)),
            "v0s": (("member", "coord"), np.asarray(self.meta["v0s"])),
        }
        if self.gam is not None:
            data["gam"] = (("member", "step", "constraint"), self.gam)
        meta = {k: v for k, v in self.meta.items() if k not in ("v0s", "index")}
        ds = xr.Dataset(data, coords={"time": self.t, "step": self._index()})
        ds.attrs.update(
            {
                "livens_format": FORMAT_VERSION,
                "scheme": self.scheme,
                "velocity_kind": self.velocity_kind,
                "params": json.dumps(self.params),
                "meta": json.dumps(_jsonable(meta)),
                "d": int(self.q.shape[2]),
                "m": int(self.lam.shape[2]),
                "members": len(self),
                "complete": 1,
            }
        )
        return _write_netcdf(ds, path)

    @classmethod
    def from_dataset(cls, ds, problem=None) -> "EnsembleSolution":
        """The ensemble of a file written by :meth:`to_netcdf` or streamed by a running ensemble
        (its rows so far; members not yet written are NaN). The scheme and system are reattached
        where the file names a known example (or from ``problem``)."""
        from .mechanics import mechanics
        from .schemes import get as get_scheme

        meta = json.loads(ds.attrs["meta"])
        B = int(ds.attrs["members"])
        meta["v0s"] = np.asarray(ds["v0s"].values) if "v0s" in ds else np.asarray(meta.get("v0s", np.nan))
        meta["index"] = np.asarray(ds["step"].values).tolist()
        steps = np.asarray(ds["steps"].values) if "steps" in ds else np.full(B, ds.sizes["step"])
        failed = np.asarray(ds["failed"].values).astype(bool) if "failed" in ds else np.zeros(B, bool)
        scheme = get_scheme(str(ds.attrs["scheme"]))[0]
        mech = mechanics(problem.system, problem.q0) if problem is not None else None
        return cls(
            t=np.asarray(ds["time"].values),
            q=np.asarray(ds["q"].values),
            p=np.asarray(ds["p"].values),
            v=np.asarray(ds["v"].values),
            lam=np.asarray(ds["lam"].values),
            gam=np.asarray(ds["gam"].values) if "gam" in ds else None,
            newton_iterations=np.asarray(ds["newton_iterations"].values),
            newton_residual=np.asarray(ds["newton_residual"].values),
            steps=steps,
            failed=failed,
            velocity_kind=str(ds.attrs["velocity_kind"]),
            scheme=scheme.name,
            params=json.loads(ds.attrs["params"]),
            meta=meta,
            problem=problem,
            _scheme_obj=scheme,
            _mech=mech,
        )


def load(path: str | os.PathLike, problem: Problem | None = None) -> Solution | EnsembleSolution:
    """Read a Solution written by :meth:`Solution.to_netcdf` (or streamed by a running
    :func:`livens.simulate`), or an :class:`~livens.EnsembleSolution` (a file with a ``member``
    dimension, from ``simulate_ensemble(..., out=...)``).

    The system is reattached from the example named in the file (with its recorded parameters),
    or from ``problem`` for a user-defined system; without it the stored diagnostics are used.
    Loading never executes code from the file.
    """
    import xarray as xr

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such result file: {path!r}.")
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds = ds.load()
    except Exception as exc:
        raise FileFormatError(
            f"{path!r} is not a readable livens result file (truncated, corrupted or not netCDF4/HDF5): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    version = ds.attrs.get("livens_format")
    if version is None:
        raise FileFormatError(f"{path!r} is a netCDF file but not a livens result file (no 'livens_format' attribute).")
    if int(version) > FORMAT_VERSION:
        raise FileFormatError(
            f"{path!r} has livens file format {int(version)}, newer than this livens reads ({FORMAT_VERSION}); "
            "upgrade livens."
        )
    if "members" in ds.attrs:
        if problem is None:
            problem = _example_problem(json.loads(ds.attrs.get("meta", "{}")))
        try:
            return EnsembleSolution.from_dataset(ds, problem)
        except (KeyError, ValueError) as exc:
            raise FileFormatError(
                f"{path!r} is missing livens data ({exc}); the file is incomplete or foreign."
            ) from None
    try:
        meta = json.loads(ds.attrs["meta"])
        if "guess_history" in ds:
            gh = ds["guess_history"]
            meta["guess_history"] = {
                **{
                    k: gh.attrs[k].item() if hasattr(gh.attrs[k], "item") else gh.attrs[k]
                    for k in ("step", "k", "advanced", "since")
                    if k in gh.attrs
                },
                "x": np.asarray(gh.values),
            }
        params = json.loads(ds.attrs["params"])
        stored = {
            k: np.asarray(ds[k].values)
            for k in ds.data_vars
            if k.startswith(("energy_", "J:", "residual_", "enforced:", "dissipated_work"))
        }
        sol = Solution(
            t=np.asarray(ds["time"].values),
            q=np.asarray(ds["q"].values),
            p=np.asarray(ds["p"].values),
            v=np.asarray(ds["v"].values),
            lam=np.asarray(ds["lam"].values),
            gam=np.asarray(ds["gam"].values) if "gam" in ds else None,
            newton_iterations=np.asarray(ds["newton_iterations"].values),
            newton_residual=np.asarray(ds["newton_residual"].values),
            velocity_kind=str(ds.attrs["velocity_kind"]),
            scheme=str(ds.attrs["scheme"]),
            params=params,
            meta=meta,
            problem=None,
            stored=stored,
        )
    except (KeyError, ValueError) as exc:
        raise FileFormatError(f"{path!r} is missing livens data ({exc}); the file is incomplete or foreign.") from None
    if problem is None:
        problem = _example_problem(meta)
    sol.problem = problem
    return sol


def _example_problem(meta: dict):
    """The Problem of the example a file's metadata names (with its recorded parameters), or None."""
    if not meta.get("example"):
        return None
    from . import examples

    if meta["example"] not in examples.names():
        return None
    try:
        return examples.load(meta["example"], **meta.get("problem_parameters", {}))
    except Exception:  # noqa: BLE001 - the stored diagnostics are used instead
        return None
