"""The kinetic energy and velocity on the constraint manifold, where the mass matrix may be singular
(KB23 §3): v = M^-1 p restricted to the manifold's tangent space, solved node by node as a saddle-point
system, with the constraint Jacobians compressed by a column colouring for large sparse systems. The
energies of a :class:`~livens.Solution` come from here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache

_VMAPS = CompiledCache(64)


def vmapped(fn):
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
