"""Trace: the diagnostics of one run as plain arrays (what figures and claims need).

A :class:`Trace` is a :class:`~livens.Solution` reduced to the quantities the papers plot: the
energy quantities T, V, H and the energy function E = p.v - L (KBS23b eq 4, KB23 eq 31, 35), the
momentum maps J = p . xi q (KBS23b eq 45), the constraint residuals at both levels, at the nodes
(g(q^n), G(q^n) M^-1 p^n, KBS23b eq 29) and where the scheme enforces them (``enforced``), the
multipliers, and optionally the coordinates and momenta. It holds no reference to the system, so
it pickles cheaply (Dask) and plots without JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine import CompiledCache


@dataclass
class Trace:
    """Diagnostics of one run; node arrays have shape (N+1, ...), step arrays (N, ...).

    ``t`` are the node times and ``t_step`` the end times t^{n+1} of the steps (multipliers and
    enforced residuals belong to the step n -> n+1). ``v`` is the scheme's velocity: at the nodes
    for ``velocity_kind`` "nodal", else per step. ``energy_key`` names the scheme's energy
    function: "livens" (E = p.v - L) where the scheme has nodal velocities, else "total" (H).
    """

    label: str
    scheme: str
    h: float
    t: np.ndarray
    energy: dict
    energy_key: str
    momentum: dict
    nodal: dict
    enforced: dict
    t_step: np.ndarray
    lam: np.ndarray | None = None
    gam: np.ndarray | None = None
    q: np.ndarray | None = None
    p: np.ndarray | None = None
    v: np.ndarray | None = None
    constraint_names: tuple | None = None
    coordinate_names: tuple | None = None
    linear_constraints: tuple = ()
    work: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_solution(
        cls, sol, label: str | None = None, max_points: int | None = None, include: str = "all"
    ) -> "Trace":
        """Reduce a Solution; ``include`` is "all" or "energy" (energy and momentum maps only).

        With ``max_points`` the node series are thinned to at most about that many points,
        keeping in every bin the extreme values of the energy error (an envelope), so that a
        blow-up or an oscillation amplitude stays visible.
        """
        E = sol.energy()
        key = "livens" if "livens" in E else "total"
        J = sol.momentum_maps()
        n1 = sol.t.shape[0]
        idx = _envelope_indices(E[key], max_points) if max_points else np.arange(n1)
        sidx = idx[idx > 0] - 1 if max_points else np.arange(max(n1 - 1, 0))
        nodal, enforced, lam, gam, q, p, v = {}, {}, None, None, None, None, None
        names = coord_names = work = None
        linear: tuple = ()
        if sol.problem is not None and sol.problem.system.dissipation is not None:
            work = np.asarray(sol.dissipated_work())[idx]
        if include == "all":
            for level, label_ in (("position", "position g(q^n)"), ("velocity", "velocity G(q^n) M^-1 p^n")):
                try:
                    r = sol.constraint_residual(level)
                except ValueError:
                    continue
                if level == "velocity" and sol.mechanics.Minv_const is None:
                    label_ = "velocity G(q^n) v^n"
                nodal[label_] = np.asarray(r)[idx]
            for k, r in sol.enforced_residuals().items():
                enforced[k] = np.asarray(r).reshape(sol.n_steps, -1)[sidx]
            lam = np.asarray(sol.lam)[sidx]
            gam = None if sol.gam is None else np.asarray(sol.gam)[sidx]
            q, p = np.asarray(sol.q)[idx], np.asarray(sol.p)[idx]
            v = np.asarray(sol.v)[idx] if sol.velocity_kind == "nodal" else np.asarray(sol.v)[sidx]
            if sol.problem is not None:
                names = sol.problem.system.constraint_names
                coord_names = sol.problem.system.coordinate_names
                linear = linear_constraints(sol)
        return cls(
            label=label or sol.scheme,
            scheme=sol.scheme,
            h=sol.h,
            t=np.asarray(sol.t)[idx],
            energy={k: np.asarray(x)[idx] for k, x in E.items()},
            energy_key=key,
            momentum={k: np.asarray(x)[idx] for k, x in J.items()},
            nodal=nodal,
            enforced=enforced,
            t_step=np.asarray(sol.t)[1:][sidx],
            lam=lam,
            gam=gam,
            q=q,
            p=p,
            v=v,
            constraint_names=tuple(names) if names else None,
            coordinate_names=tuple(coord_names) if coord_names else None,
            linear_constraints=linear,
            work=work,
            meta={"thinned": bool(max_points and len(idx) < n1)},
        )

    # ------------------------------------------------------------------ derived quantities
    @property
    def E(self) -> np.ndarray:
        """The scheme's energy function at the nodes (see ``energy_key``)."""
        return self.energy[self.energy_key]

    def energy_increments(self, key: str | None = None) -> np.ndarray:
        """E^{n+1} - E^n (KBS23b Figs 8-9, 25; KB23 Figs 3, 7-8)."""
        return np.diff(self.energy[key or self.energy_key])

    @property
    def energy_scale(self) -> float:
        """max|T| + max|V| over the run: the size of the energies exchanged (a total energy near
        zero does not make its round-off small)."""
        s = sum(float(np.max(np.abs(self.energy[k]))) for k in ("kinetic", "potential") if k in self.energy)
        return s if s > 0 else max(abs(float(self.E[0])), 1e-300)

    def max_energy_increment(self, key: str | None = None, relative: bool = True) -> float:
        """max_n |E^{n+1} - E^n|, relative to :attr:`energy_scale` when ``relative``."""
        dE = self.energy_increments(key)
        if dE.size == 0:
            return 0.0
        m = float(np.max(np.abs(dE)))
        return m / self.energy_scale if relative else m

    def max_energy_error(self, key: str | None = None) -> float:
        """max_n |E^n - E^0| / |E^0|."""
        E = self.energy[key or self.energy_key]
        return float(np.max(np.abs(E - E[0])) / max(abs(float(E[0])), 1e-300))

    def max_residual(self, name: str, which: Sequence[int] | None = None) -> float:
        """max |r| of a nodal or enforced residual (by name), optionally of some constraints only."""
        r = self.nodal.get(name)
        if r is None:
            r = self.enforced[name]
        r = np.asarray(r)
        if which is not None:
            r = r[:, list(which)]
        return float(np.max(np.abs(r), initial=0.0))

    def nodal_name(self, level: str) -> str | None:
        """The key of the nodal residual of ``level`` ("position" or "velocity")."""
        for k in self.nodal:
            if k.startswith(level):
                return k
        return None

    def enforced_name(self, level: str) -> str | None:
        """The key of the enforced residual of ``level`` ("position" or "velocity")."""
        for k in self.enforced:
            if k.startswith(level):
                return k
        return None


_HESSIANS = CompiledCache(32)


def linear_constraints(sol) -> tuple:
    """Indices k of the constraints whose Hessian D^2 g_k vanishes at q^0 (linear constraints;
    their Jacobian is constant, so velocity constraints enforced anywhere hold at the nodes,
    KBS23a §5.2, KBS23b §6.2). Decided by AD, never from names."""
    import jax
    import jax.numpy as jnp

    mech = sol.mechanics
    if mech.m == 0:
        return ()
    fn = _HESSIANS.get(mech)
    if fn is None:
        fn = _HESSIANS[mech] = jax.jit(jax.jacfwd(mech.G))  # one compilation, not one per primitive
    hess = np.asarray(fn(jnp.asarray(sol.q[0])))  # (m, d, d)
    scale = max(1.0, float(np.max(np.abs(hess))))
    return tuple(int(k) for k in range(mech.m) if np.max(np.abs(hess[k])) <= 1e-14 * scale)


def _envelope_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices thinning ``values`` to about ``max_points``: the first and last node, and in each
    bin the positions of its minimum and maximum."""
    n = values.shape[0]
    if max_points is None or n <= max_points:
        return np.arange(n)
    bins = max(1, max_points // 2)
    edges = np.linspace(0, n, bins + 1).astype(int)
    out = [0, n - 1]
    for a, b in zip(edges[:-1], edges[1:]):
        if b > a:
            seg = values[a:b]
            out.extend([a + int(np.argmin(seg)), a + int(np.argmax(seg))])
    return np.unique(np.asarray(out))
