"""Symmetry detection with JAX AD, at set-up: whether a declared :class:`livens.Symmetry` is an
exact symmetry of the conservative part of the system (:func:`symmetry_defect`: the potential, the
constraint manifold and the kinetic energy invariant, KBS23b eq 41), which rows of g are invariant
(:func:`invariant_rows`) or affine (:func:`affine_rows`), and whether the midpoint derivatives of
lambda.g and gamma.g_v meet the orthogonality conditions of the energy-momentum schemes by
themselves (:func:`constraints_midpoint_orthogonal`, KBS23b eq 85b, c).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401
from .numpy_jaxpr import PointFunction
from .validation import constraint_label, point_evaluation

if TYPE_CHECKING:  # annotations only: Mechanics is imported where it is used, so that this module's
    # namespace (no __all__) holds only the symmetry checks
    from .mechanics import Mechanics
    from .system import Symmetry


#: Relative size of dV . xi q, G(q) xi q (on the constraint manifold) and of the non-invariant part of M
#: below which a declared symmetry counts as an exact symmetry of the system (AD values: round-off).
SYMMETRY_RTOL = 1e-8


def _manifold_points(mech, q0, rng, n: int):
    """q0 and up to ``n`` points near it on g(q) = 0 (random perturbations projected by
    Gauss-Newton), for the symmetry checks."""
    pts = [q0]
    scale = 0.2 * (1.0 + np.linalg.norm(q0) / np.sqrt(q0.shape[0]))
    values = point_evaluation(mech, q0)
    for _ in range(n):
        q = q0 + scale * rng.standard_normal(q0.shape[0])
        if mech.m:
            for _ in range(30):
                _, _, gq, G = (np.asarray(x) for x in values(q))
                if not np.all(np.isfinite(gq)):
                    break
                if np.max(np.abs(gq)) <= 1e-13:
                    pts.append(q)
                    break
                try:
                    q = q - G.T @ np.linalg.solve(G @ G.T, gq)
                except np.linalg.LinAlgError:
                    break
        else:
            pts.append(q)
    return pts


def invariance_defects(dV: ArrayLike, G: ArrayLike | None, Z: ArrayLike, xp: Any = np) -> tuple[Any, Any]:
    """Which generators break invariance at one point, the criterion of :func:`symmetry_defect`
    (KBS23b eq 41) in NumPy (``xp=np``) or traced (``xp=jax.numpy``: :func:`livens.flow`'s check
    of the kept symmetries): for the columns z = xi q of ``Z`` (d, r), ``potential`` (r,): |dV . z| >
    SYMMETRY_RTOL |dV| |z|, and ``constraint`` (m, r) (None without constraints): |G_k z| >
    SYMMETRY_RTOL |G_k| |z| for each constraint row k."""
    zn = xp.linalg.norm(Z, axis=0)
    potential = xp.abs(dV @ Z) > SYMMETRY_RTOL * (xp.linalg.norm(dV) * zn + 1e-300)
    if G is None:
        return potential, None
    lim = SYMMETRY_RTOL * (xp.linalg.norm(G, axis=1)[:, None] * zn[None, :] + 1e-300)
    return potential, xp.abs(G @ Z) > lim


def symmetry_defect(mech: Mechanics, sym: Symmetry, q0: ArrayLike, seed: int = 0) -> str | None:
    """Why ``sym`` is not an exact symmetry of the system (KBS23b eq 41), or None when it is.

    Checked with AD at q0, at points near q0 on the constraint manifold and at points off it:
    dV(q) . xi q = 0 (the potential is invariant), G(q) xi q = 0 on g(q) = 0 (the constraint
    manifold is invariant; g itself may be invariant or equivariant) and that the kinetic energy
    1/2 v.M(q)v is invariant under the tangent lift (q, v) -> (exp(a xi) q, exp(a xi) v):
    xi^T M + M xi = 0 for a constant M, DM(q)[xi q] + xi^T M(q) + M(q) xi = 0 at every point for a
    configuration-dependent one (DM(q)[shift] = 0 for a translation); each relative to the sizes
    involved, at :data:`SYMMETRY_RTOL`. These are the symmetries of the conservative part of the
    system: an external force or damper need not respect them.
    """
    rng = np.random.default_rng(seed)
    if sym.xi is not None:
        xi = np.asarray(sym.xi)
        if xi.shape != (mech.d, mech.d):
            return f"its generator is {xi.shape[0]} x {xi.shape[1]} but the system has d = {mech.d}"
        if mech.constant_mass:
            M = np.asarray(mech.M_const)
            dM = xi.T @ M + M @ xi
            if np.max(np.abs(dM)) > SYMMETRY_RTOL * np.max(np.abs(M)) * max(np.max(np.abs(xi)), 1.0):
                return f"the kinetic energy is not invariant (|xi^T M + M xi| = {np.max(np.abs(dM)):.2e})"
    elif np.shape(sym.shift) != (mech.d,):
        return f"its generator has {np.shape(sym.shift)} entries but the system has d = {mech.d}"
    on = _manifold_points(mech, np.asarray(q0, float), rng, 3)
    scale = 0.2 * (1.0 + np.linalg.norm(q0) / np.sqrt(len(q0)))
    off = [q + 0.05 * scale * rng.standard_normal(len(q0)) for q in on]
    values = point_evaluation(mech, q0)
    if not mech.constant_mass:
        why = _mass_defect(mech, sym, on + off)
        if why is not None:
            return why
    defects = []  # at each point: (q, z, G, (potential, constraint) defects)
    for q in on + off:
        z = np.asarray(sym.generator(q), float)  # NumPy: no XLA program for the generator's product
        _, grad, _, G = (np.asarray(x) for x in values(q))
        potential, constraint = invariance_defects(grad, G if mech.m else None, z[:, None])
        defects.append((q, z, G, constraint))
        if potential[0]:
            return f"the potential is not invariant (dV . xi q = {grad @ z:.3e} at q = {np.round(q, 4).tolist()})"
    if mech.m:
        for q, z, G, constraint in defects[: len(on)]:  # on the manifold
            bad = np.flatnonzero(constraint[:, 0])
            if bad.size:
                k = int(bad[0])
                return (
                    f"it does not leave the constraint manifold invariant ({constraint_label(mech.system, k)}: "
                    f"G xi q = {G[k] @ z:.3e} at q = {np.round(q, 4).tolist()})"
                )
    return None


def _mass_defect(mech, sym, points) -> str | None:
    """Why the kinetic energy of a configuration-dependent M(q) is not invariant under the tangent
    lift of ``sym`` at one of ``points`` (DM(q)[xi q] + xi^T M(q) + M(q) xi, relative to |M(q)|),
    or None."""
    xi = None if sym.xi is None else jnp.asarray(sym.xi)
    M = mech.M

    def change(q):
        Mq, dM = jax.jvp(M, (q,), (jnp.asarray(sym.generator(q), q.dtype),))
        return (dM if xi is None else dM + xi.T @ Mq + Mq @ xi), Mq

    change_at = PointFunction(change, np.asarray(points[0], float))  # NumPy where it can: no XLA compile
    for q in points:
        dM, Mq = (np.asarray(a) for a in change_at(np.asarray(q, float)))
        size = max(np.max(np.abs(Mq)), 1e-300) * (1.0 if xi is None else max(float(np.max(np.abs(sym.xi))), 1.0))
        if np.max(np.abs(dM)) > SYMMETRY_RTOL * size:
            return (
                f"the kinetic energy is not invariant (|DM(q)[xi q] + xi^T M + M xi| = {np.max(np.abs(dM)):.2e} "
                f"at q = {np.round(q, 4).tolist()})"
            )
    return None


def invariant_rows(mech: Mechanics, symmetries: Sequence[Symmetry], q0: ArrayLike, seed: int = 1) -> np.ndarray:
    """For each row of g, whether it is invariant under every one of ``symmetries``:
    G_k(q) xi q = 0 at q0 and at three random points off the manifold (relative to the sizes
    involved, at :data:`SYMMETRY_RTOL`)."""
    inv = np.ones(mech.m, dtype=bool)
    if not mech.m or not symmetries:
        return inv
    rng = np.random.default_rng(seed)
    q0 = np.asarray(q0, float)
    scale = 0.2 * (1.0 + np.linalg.norm(q0) / np.sqrt(len(q0)))
    values = point_evaluation(mech, q0)
    for q in [q0] + [q0 + scale * rng.standard_normal(len(q0)) for _ in range(3)]:
        G = np.asarray(values(q)[3])
        for sym in symmetries:
            z = np.asarray(sym.generator(q), float)
            lim = SYMMETRY_RTOL * (np.linalg.norm(G, axis=1) * np.linalg.norm(z) + 1e-300)
            inv &= np.abs(G @ z) <= lim
    return inv


def constraints_invariant(mech: Mechanics, symmetries: Sequence[Symmetry], q0: ArrayLike, seed: int = 1) -> bool:
    """True when g itself (not only the manifold g = 0) is invariant under every one of
    ``symmetries`` (:func:`invariant_rows`, every row). Then the midpoint derivatives of lambda.g
    and of gamma.g_v meet the orthogonality conditions (KBS23b eq 85b, c) by themselves; for an
    equivariant g (e.g. a point fixed on the axis, g(R q) = R g(q)) the energy-momentum schemes
    impose them unless its rows are affine (:func:`constraints_midpoint_orthogonal`)."""
    return bool(np.all(invariant_rows(mech, symmetries, q0, seed)))


def affine_rows(mech: Mechanics, seed: int = 2) -> np.ndarray:
    """For each row of g, whether it is affine in q: its Hessian by AD is exactly zero at three
    random points (AD of a linear expression gives exact zeros; a row's own jaxpr cannot be told
    apart structurally where g builds all rows in one array)."""
    rng = np.random.default_rng(seed)
    hess = PointFunction(jax.jacfwd(jax.jacfwd(mech.g)), np.zeros(mech.d))  # NumPy where it can: no XLA compile
    flat = np.zeros(mech.m, dtype=bool)
    for i in range(3):
        H = np.asarray(hess(rng.standard_normal(mech.d)))
        zero = ~np.any(H.reshape(mech.m, -1) != 0.0, axis=1)
        flat = zero if i == 0 else flat & zero
    return flat


def constraints_midpoint_orthogonal(
    mech: Mechanics, symmetries: Sequence[Symmetry], q0: ArrayLike, seed: int = 1
) -> bool:
    """True when the midpoint derivatives of lambda.g and gamma.g_v meet the orthogonality
    conditions (KBS23b eq 85b, c) of ``symmetries`` at every solution of the energy-momentum schemes,
    so that no orthogonality target needs imposing: g is invariant (:func:`constraints_invariant`),
    or each row of g is either invariant (G_k(q) xi q = 0 at q0 and at random points off the
    manifold) or affine, g_k = a_k . q + b_k (:func:`affine_rows`), with the affine rows' gradients A
    closed under the generators (the rows of A xi lie in the row space of A; A shift = 0 for a
    translation) -- a joint fixing a point of a rotating body is such a row.

    Why: for an affine row, A xi = R A and the nodes' g = 0 give A q^{n+1/2} = -b, so a_k . xi q^{n+1/2}
    = a_k . xi q* = 0 (q* any point of the manifold): the lambda term meets 85b; D_q(a_k . w) = 0, and
    the target gamma_k a_k M^-1 xi^T p^{n+1/2} = -gamma_k (R A M^-1 p^{n+1/2})_k is the mean of the nodes'
    g_v rows, zero by (84e). Both hold at the solution, to the Newton tolerance, as the other
    conditions do."""
    invariant = invariant_rows(mech, symmetries, q0, seed)
    if invariant.all():
        return True
    affine = affine_rows(mech)
    if np.any(~invariant & ~affine):
        return False
    A = np.asarray(point_evaluation(mech, q0)(np.asarray(q0, float))[3])[affine]
    for sym in symmetries:
        if sym.xi is None:
            Axi = A @ np.asarray(sym.shift, float)[:, None]  # must vanish: no component to map into
            if np.max(np.abs(Axi)) > SYMMETRY_RTOL * max(np.max(np.abs(A)), 1.0) * np.linalg.norm(sym.shift):
                return False
            continue
        Axi = A @ np.asarray(sym.xi, float)
        coef, *_ = np.linalg.lstsq(A.T, Axi.T, rcond=None)
        if np.max(np.abs(coef.T @ A - Axi)) > SYMMETRY_RTOL * max(np.max(np.abs(A)), 1.0) * max(
            np.max(np.abs(sym.xi)), 1.0
        ):
            return False
    return True
