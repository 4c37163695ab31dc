"""Dependent constraint equations: redundant ones, and singular configurations.

A mechanism is *overconstrained* when some of its constraint equations are consequences of the
others on the constraint manifold: a planar four-bar built with four 3D hinges has 38 equations of
rank 35 at every configuration. A mechanism passes a *singular configuration* where the rank of
G(q) = Dg(q) drops at an instant only: a parallelogram linkage in its flattened position (rank 2 of
3 there, 3 everywhere else), the dead centres of the double four-bar (KBS23a §5.2).

:func:`analyse` tells the two apart at set-up. It computes the rank of G at q0 (singular values
above :data:`RTOL` times the largest) and the rank near q0 on the manifold: at q0 moved a little
along the initial velocity and along two other tangent directions, each point brought back onto
g(q) = 0 by minimum-norm Gauss-Newton steps. The largest of these ranks is the rank of the
mechanism near q0; equations beyond it are **redundant** (dependent everywhere near q0), a rank at
q0 below it is a **singular start**.

Redundant equations are handled as Adams does: an independent subset of the equations is what the
schemes solve, :func:`independent`. It is kept in the order given (a later equation is the redundant
one where a choice exists, chosen greedily at the point near q0 that the initial velocity leads to),
unless a walk of the manifold from q0 (:func:`_walk`, the way a motion would go) finds that choice near
losing rank where another, chosen by pivoted QR, stays better conditioned (:func:`_choose`).
The subset defines the same constraint manifold near q0, so every scheme keeps its structure
unchanged (docs/theory, "Overconstrained mechanisms"); the redundant equations are monitored along
the run (the Solution's ``constraint_residual`` reports all m equations). Their multipliers are zero:
in an overconstrained mechanism the multipliers (joint reactions) are not unique, only the
constraint force G(q)^T lambda is, and livens returns the solution whose redundant components vanish.

A singular start keeps every equation (removing one that is dependent at q0 alone would change
the mechanism elsewhere); the schemes evaluate G at the new node or the midpoint of a step, where
the rank is full again, and follow the branch of the initial velocity.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401
from ._lru import LRU
from .numpy_jaxpr import PointFunction

if TYPE_CHECKING:
    from .system import System

RTOL = 1e-8
"""Singular values of G below RTOL times the largest count as zero (a redundant equation gives one at
round-off, about 1e-15 relative; a configuration a step away from a singular one gives one near
the size of that step)."""

STEP = 1e-3
"""The distance from q0 (relative to 1 + max |q0|) of the points where the rank near q0 is measured."""


class RedundantConstraintsNotice(UserWarning):
    """Information, not an error: the system has redundant constraint equations, and livens solves
    with an independent subset of them (:mod:`livens.redundancy`). Silence it with
    ``warnings.filterwarnings("ignore", category=lv.RedundantConstraintsNotice)``."""


@dataclass(frozen=True)
class ConstraintRank:
    """The rank analysis of a Problem's constraints (module docstring).

    ``m``: the number of equations; ``rank``: the rank of G near q0 on the manifold (the mechanism's);
    ``rank_q0``: the rank of G(q0); ``kept``: the indices of the independent equations the schemes
    solve (all of them where none is redundant); ``redundant``: the others; ``labels``: the equations'
    names (``System.constraint_names``, or g[k])."""

    m: int
    rank: int
    rank_q0: int
    kept: tuple[int, ...]
    redundant: tuple[int, ...]
    labels: tuple[str, ...]

    @property
    def singular_start(self) -> bool:
        """True where G loses rank at q0 only (a singular configuration, not redundancy)."""
        return self.rank_q0 < self.rank

    def describe(self) -> str:
        """One paragraph for the set-up notice and the CLI summary."""
        n = len(self.redundant)
        parts = []
        if n:
            names = ", ".join(self.labels[k] for k in self.redundant)
            parts.append(
                f"{n} redundant constraint equation{'s' if n > 1 else ''} (dependent on the others near q0: "
                f"rank G = {self.rank} < m = {self.m}): {names}. livens solves with the {len(self.kept)} "
                "independent equations; the redundant ones are monitored (Solution.constraint_residual), "
                "their multipliers are zero."
            )
        if self.singular_start:
            parts.append(
                f"q0 is a singular configuration: rank G(q0) = {self.rank_q0} < {self.rank} = rank G near q0. "
                "Every equation is kept; the run follows the branch of the initial velocity."
            )
        return " ".join(parts)

    def expand(self, x: ArrayLike, axis: int = -1) -> np.ndarray | jax.Array:
        """Values per kept equation (multipliers) as values per equation, zero on the redundant ones
        (NumPy arrays or JAX arrays, along ``axis``)."""
        if not self.redundant:
            return x
        xp = jnp if isinstance(x, jax.Array) else np
        x = xp.moveaxis(xp.asarray(x), axis, -1)
        out = xp.zeros(x.shape[:-1] + (self.m,), x.dtype)
        idx = np.asarray(self.kept)
        out = out.at[..., idx].set(x) if xp is jnp else _set(out, idx, x)
        return xp.moveaxis(out, -1, axis)

    def restrict(self, x: ArrayLike, axis: int = -1) -> np.ndarray:
        """Values per equation restricted to the kept equations (the inverse of :meth:`expand`)."""
        if not self.redundant:
            return x
        return np.take(np.asarray(x), np.asarray(self.kept), axis=axis)


def _set(out: np.ndarray, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
    out[..., idx] = x
    return out


def rank_of(G: np.ndarray, rtol: float = RTOL) -> int:
    """The numerical rank of G: singular values above ``rtol`` times the largest."""
    if G.size == 0:
        return 0
    s = np.linalg.svd(G, compute_uv=False)
    return int(np.sum(s > rtol * max(float(s.max()), 1e-300)))


def independent_rows(G: np.ndarray, rank: int, rtol: float = RTOL) -> tuple[int, ...]:
    """``rank`` rows of G that are independent, in the order given where that is well conditioned.

    A greedy pass keeps each row that is not in the span of those kept before it (a later row is
    dropped where a choice exists: the equations reported redundant are the later ones). A pivoted QR
    factorization of G^T gives a better-conditioned choice where the rows nearly depend on each other;
    it is taken where the greedy choice's smallest singular value is below :data:`CONDITIONING` times
    its own (a kept equation about to lose rank would stop the run there), or where the greedy pass
    does not reach ``rank``."""
    import scipy.linalg

    scale = max(float(np.max(np.linalg.norm(G, axis=1), initial=0.0)), 1e-300)
    basis = np.zeros((0, G.shape[1]))
    kept = []
    for k, row in enumerate(G):
        r = row - basis.T @ (basis @ row)
        r = r - basis.T @ (basis @ r)  # twice is enough (Gram-Schmidt with reorthogonalization)
        n = np.linalg.norm(r)
        if n > np.sqrt(rtol) * scale:
            basis = np.vstack([basis, r / n])
            kept.append(k)
    _, _, piv = scipy.linalg.qr(G.T, pivoting=True, mode="economic")
    pivoted = sorted(int(k) for k in piv[:rank])

    def smallest(rows):
        return float(np.linalg.svd(G[rows], compute_uv=False)[-1]) if rows else 0.0

    if len(kept) == rank and smallest(kept) >= CONDITIONING * smallest(pivoted):
        return tuple(kept)
    return tuple(pivoted)


CONDITIONING = 0.5
"""The greedy, order-keeping choice of :func:`independent_rows` is kept where its smallest singular
value is at least this fraction of the pivoted QR choice's."""


def _onto(g, G, q: np.ndarray, scale: float, rank: int | None = None) -> np.ndarray | None:
    """q brought onto g(q) = 0 by minimum-norm Gauss-Newton steps (None where they do not get there).
    ``rank``: the rank of G on the manifold; each step then inverts G(q) on its ``rank`` largest singular
    values only (off the manifold the redundant rows are nearly, not exactly, dependent: inverting them
    too would pull q back along the manifold)."""
    for _ in range(30):
        r = np.asarray(g(q))
        if not np.all(np.isfinite(r)):
            return None
        if np.max(np.abs(r), initial=0.0) <= 1e-13 * scale**2:
            return q
        u, s, vt = np.linalg.svd(np.asarray(G(q)), full_matrices=False)
        k = int(np.sum(s > RTOL * max(float(s.max(initial=0.0)), 1e-300)))
        k = k if rank is None else min(k, rank)
        q = q - vt[:k].T @ ((u[:, :k].T @ r) / s[:k])
    return None


def _tangent(Gq: np.ndarray, t: np.ndarray) -> np.ndarray:
    """t projected onto the null space of Gq (its numerical rank's)."""
    _, s, vt = np.linalg.svd(Gq)
    r = int(np.sum(s > RTOL * max(float(s.max(initial=0.0)), 1e-300)))
    null = vt[r:].T
    return null @ (null.T @ t)


def _near_points(g, G, q0: np.ndarray, v0: np.ndarray, G0: np.ndarray, rng) -> list[np.ndarray]:
    """Points on g(q) = 0 near q0: q0 moved along v0 (projected on the null space of G(q0)) and along
    two random directions of that null space, each brought back onto the manifold by minimum-norm
    Gauss-Newton steps. The point along v0 comes first."""
    scale = 1.0 + float(np.max(np.abs(q0)))
    dirs = [_tangent(G0, v0)] if np.linalg.norm(v0) > 0 else []
    dirs += [_tangent(G0, rng.standard_normal(q0.shape[0])) for _ in range(2)]
    out = []
    for t in dirs:
        nt = np.linalg.norm(t)
        if nt > 0:
            q = _onto(g, G, q0 + STEP * scale * t / nt, scale)
            if q is not None:
                out.append(q)
    return out


WALK = 12
"""Steps of each walk on the manifold (:func:`_walk`)."""

WALK_STEP = 0.1
"""The length of a step of the walk, relative to 1 + max |q0|."""


def _walk(g, G, q: np.ndarray, t: np.ndarray, scale: float, rank: int) -> list[np.ndarray]:
    """Points of g(q) = 0 along a path from q in the tangent direction t: :data:`WALK` steps of
    :data:`WALK_STEP`, each continued in the direction of the last one and brought back onto the
    manifold (a walk of the configuration space in the way a motion would go)."""
    out = []
    for _ in range(WALK):
        t = _tangent(np.asarray(G(q)), t)
        nt = np.linalg.norm(t)
        if not nt > 0:
            break
        nxt = _onto(g, G, q + WALK_STEP * scale * t / nt, scale, rank)
        if nxt is None:
            break
        t, q = nxt - q, nxt
        out.append(q)
    return out


def _choose(Gs: list[np.ndarray], rank: int, first: tuple[int, ...]) -> tuple[int, ...]:
    """The independent rows to solve with: ``first`` (chosen near q0 in the given order), unless a row
    set chosen by pivoted QR at one of the points keeps much better conditioned over all of them. The
    measure is the worst, over the points, of s_r(G_K) / s_r(G): how near the kept rows come to losing
    rank where all rows keep it (r the rank; a row subset never exceeds 1)."""
    import scipy.linalg

    def worst(K):
        rows = list(K)
        ratios = []
        for Gq in Gs:
            full = np.linalg.svd(Gq, compute_uv=False)
            if full[rank - 1] <= 1e-6 * full[0]:  # the mechanism's own singular configuration
                continue
            ratios.append(np.linalg.svd(Gq[rows], compute_uv=False)[rank - 1] / full[rank - 1])
        return min(ratios, default=1.0)

    candidates = {first}
    for Gq in Gs:
        piv = scipy.linalg.qr(Gq.T, pivoting=True, mode="economic")[2]
        candidates.add(tuple(sorted(int(k) for k in piv[:rank])))
    scores = {K: worst(K) for K in candidates}
    best = max(sorted(candidates), key=lambda K: scores[K])
    return first if scores[first] >= CONDITIONING * scores[best] else best


def analyse(system: System, q0: ArrayLike, v0: ArrayLike, G0: np.ndarray, labels: tuple[str, ...]) -> ConstraintRank:
    """The :class:`ConstraintRank` of ``system`` at (q0, v0), G0 = G(q0) (module docstring); made once
    per system and state (a Problem's ``replace`` with the same system and state finds it made)."""
    G0, q0, v0 = np.asarray(G0, float), np.asarray(q0, float), np.asarray(v0, float)
    key = (id(system), q0.tobytes(), v0.tobytes(), G0.shape, G0.tobytes(), labels)
    hit = _ANALYSED.get(key)
    if hit is not None and hit[0] is system:
        return hit[1]
    out = _analysis(system, q0, v0, G0, labels)
    _ANALYSED[key] = (system, out)
    return out


def _analysis(
    system: System, q0: np.ndarray, v0: np.ndarray, G0: np.ndarray, labels: tuple[str, ...]
) -> ConstraintRank:
    m = G0.shape[0]
    rank_q0 = rank_of(G0)
    if rank_q0 == m:
        return ConstraintRank(m, m, m, tuple(range(m)), (), labels)
    from .mechanics import mechanics

    mech = mechanics(system, q0)
    hit = _EVALUATED.get(mech)
    if hit is None or hit[0] is not mech:  # traced once per system: a new Problem does not trace again
        hit = _EVALUATED[mech] = (mech, PointFunction(mech.g, q0), PointFunction(mech.G, q0))
    g, G = hit[1], hit[2]
    rng = np.random.default_rng(0)
    pts = _near_points(g, G, q0, v0, G0, rng)
    best, rank = None, rank_q0
    for q in pts:
        Gq = np.asarray(G(q))
        r = rank_of(Gq)
        if r > rank:
            best, rank = Gq, r
    if rank == m:  # independent near q0: a singular start keeps every equation
        return ConstraintRank(m, m, rank_q0, tuple(range(m)), (), labels)
    first = independent_rows(G0 if best is None else best, rank)
    # the rows must stay independent along the motion, not only near q0: walks of the manifold from q0
    # forwards and backwards along v0 and along a random tangent direction sample where it may go
    scale = 1.0 + float(np.max(np.abs(q0)))
    walked = []
    directions = [v0] if np.linalg.norm(v0) > 0 else []
    for t in directions + [rng.standard_normal(q0.shape[0])]:
        walked += _walk(g, G, q0, t, scale, rank) + _walk(g, G, q0, -t, scale, rank)
    Gs = [np.asarray(G(q)) for q in walked]
    kept = _choose([G0 if best is None else best] + Gs, rank, first)
    redundant = tuple(k for k in range(m) if k not in set(kept))
    return ConstraintRank(m, rank, rank_q0, kept, redundant, labels)


def independent(system: System, rank: ConstraintRank) -> System:
    """The System whose constraints are the kept equations of ``rank`` (``system`` itself where none is
    redundant): the same manifold near q0, with an independent set of equations."""
    if not rank.redundant:
        return system
    import dataclasses

    key = (id(system), rank.kept)
    hit = _INDEPENDENT.get(key)
    if hit is not None and hit[0] is system:
        return hit[1]  # one System per system and subset: what is compiled for it is reused
    g = system.constraints
    idx = np.asarray(rank.kept)

    def constraints(*args):
        return jnp.atleast_1d(g(*args))[idx]

    names = None if system.constraint_names is None else tuple(rank.labels[k] for k in rank.kept)
    out = dataclasses.replace(system, constraints=constraints, constraint_names=names)
    _INDEPENDENT[key] = (system, out)
    return out


_INDEPENDENT = LRU(32)
_EVALUATED = LRU(16)
_ANALYSED = LRU(32)


def violation(problem, q: np.ndarray, t: np.ndarray, tol: float, parameters: dict | None = None) -> str | None:
    """Whether the redundant equations of ``problem`` stop holding along nodes ``q`` (times ``t``) where
    the equations the schemes solve hold: a message naming them, the first node past the bound and
    the last one before it, or None. The bound: 1e3 times the larger of the solved equations' largest
    residual and ``tol``, times (1 + max |q|)^2 (the redundant equations hold wherever the others do,
    near q0; far from it their dependency may change, and the run then follows another mechanism)."""
    rank = problem.constraint_rank
    if rank is None or not rank.redundant or not len(q):
        return None
    from .mechanics import mechanics

    mech = mechanics(problem.system, problem.q0)
    if parameters is not None:
        mech = mech.bind({k: jnp.asarray(v) for k, v in parameters.items()})
    g = np.abs(np.asarray(_nodal_g(mech, np.asarray(q))))
    solved = float(np.max(g[:, list(rank.kept)], initial=0.0))
    bound = 1e3 * max(solved, tol) * (1.0 + float(np.max(np.abs(q)))) ** 2
    red = g[:, list(rank.redundant)]
    over = np.flatnonzero(np.max(red, axis=1) > bound)
    if not over.size:
        return None
    k = int(over[0])
    worst = [rank.labels[rank.redundant[j]] for j in np.flatnonzero(red[k] > bound)]
    j = k - 2  # the velocity at the node before may have left the redundant equations already
    before = f"node {j} (t = {float(t[j]):g}) or earlier" if j >= 0 else "a state nearer q0"
    return (
        f"The redundant equations {', '.join(worst)} stop holding at node {k} (t = {float(t[k]):g}): max |g| = "
        f"{float(red[k].max()):.3e} > {bound:.1e}, while the equations livens solves hold. The equations chosen as "
        "independent at q0 no longer describe the mechanism there (its dependent equations changed along the "
        f"motion), and the nodes after it follow another mechanism. Start a new run from {before}, e.g. "
        "problem.replace(q0=sol.q[k], v0=...): its set-up chooses the independent equations there."
    )


_NODAL = LRU(16)


def _nodal_g(mech, q: np.ndarray) -> np.ndarray:
    """g at each of the nodes q, evaluated by NumPy where it can be (a check run once after a run,
    which compiling a program for would cost more than it saves; a compiled program otherwise)."""
    key = (mech, q.shape, q.dtype)
    hit = _NODAL.get(key)
    if hit is None or hit[0] is not mech:
        hit = _NODAL[key] = (mech, PointFunction(jax.vmap(mech.g), q))
    return np.asarray(hit[1](q))


def notify(rank: ConstraintRank, name: str) -> None:
    """The set-up notice (:class:`RedundantConstraintsNotice`), once per Problem made."""
    if rank.redundant or rank.singular_start:
        warnings.warn(f"{name}: {rank.describe()}", RedundantConstraintsNotice, stacklevel=5)


__all__ = ["ConstraintRank", "RedundantConstraintsNotice", "analyse", "independent", "independent_rows", "rank_of"]
