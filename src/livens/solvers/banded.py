"""Newton systems of large, sparsely coupled problems as band matrices (chains, beams).

In a chain of bodies each constraint couples neighbouring bodies only, so the Newton tangent
dR/dx of a scheme is sparse, and in a suitable order of the unknowns it is a band matrix. This
module finds that order from the tangent's sparsity pattern, computes the tangent from a few
Jacobian-vector products of the residual, and factorizes it over its band, so that a Newton
iteration costs O(n) instead of the O(n^3) of a dense LU:

- :func:`sparsity_pattern`: the nonzero pattern of dR/dx, the union of the nonzeros of the AD
  Jacobian at a few random points (state, unknowns, h, t and parameters all random, so that no
  entry vanishes by coincidence);
- :class:`BandStructure`: the reverse Cuthill-McKee order of that pattern (SciPy), its half
  bandwidth b, and a colouring of the columns: columns that share no row get one colour, so that
  one Jacobian-vector product per colour gives every entry (Curtis, Powell, Reid 1974);
  :attr:`BandStructure.narrow` says whether the band is worth it;
- :class:`BandedTangent`: the tangent assembled from those products into the b x b blocks of a
  block-tridiagonal matrix, and :meth:`BandedTangent.solve`, LU with partial pivoting over the
  blocks (:func:`block_tridiagonal_solve`), the same solve as the dense LU up to round-off.

- :func:`find_structure`: the pattern at random points, its structure, the check below, cached
  per system, None where the band is not narrow or the check fails; :func:`residual_tangent`
  applies it to the AD Jacobian of a scheme's residual itself (vi-lagrange, SLO09 eq 14, 15), where
  :func:`livens.schemes.ggl_vi.band_structure` applies it to VI-S's reduced system.

The pattern is found numerically: an entry that vanishes at every sample point (a branch of
``jnp.where`` that none of them takes) would be missed. :func:`checked` therefore compares the
band assembled at one more random point with the Jacobian-vector product there, and
:func:`find_structure` gives up the band where they differ. An entry
that vanishes at that point too is still missed: Newton then iterates with an inexact tangent
(more iterations, or a failed step and its rescue, which uses the AD Jacobian), never to a
different solution, since it stops on the residual.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from ..engine import CompiledCache, ImmediateProgram

SAMPLES = 3
"""Random points whose Jacobian's nonzeros make up the sparsity pattern."""

CHUNK = 256
"""Columns of the AD Jacobian computed at a time while the pattern is found (bounded memory)."""


def sparsity_pattern(jvp_columns, n: int, points) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the entries of an n x n Jacobian that are nonzero (or not finite) at any of
    ``points``. ``jvp_columns(point, E)`` returns the Jacobian at ``point`` times the n x k matrix
    E (unit vectors, k = min(n, :data:`CHUNK`), always the same k)."""
    found = np.zeros((0, 2), np.int64)
    width = min(CHUNK, n)  # one shape for every call (one compilation)
    for point in points:
        for j0 in range(0, n, width):
            k = min(width, n - j0)
            E = np.zeros((n, width))
            E[j0 + np.arange(k), np.arange(k)] = 1.0
            cols = np.asarray(jvp_columns(point, E))[:, :k]
            r, c = np.nonzero(~(cols == 0.0))  # NaN counts as nonzero
            found = np.concatenate([found, np.stack([r, c + j0], axis=1)])
    found = np.unique(found, axis=0)
    return found[:, 0], found[:, 1]


class BandStructure:
    """The order, band and column colouring of a sparse n x n tangent (set-up, NumPy).

    perm: the new order (position i holds unknown perm[i]); b: the block size (half bandwidth in
    the new order, at least 1); nb: blocks (n padded to nb * b); colors: the colour of each
    unknown's column; ncolors; index: for the (3, nb, b, b) blocks (sub-diagonal, diagonal,
    super-diagonal) the position of each entry in the compressed Jacobian (n x ncolors, flattened),
    n * ncolors for a zero, n * ncolors + 1 for the one on the diagonal of the padding.
    """

    def __init__(self, n, rows, cols):
        import scipy.sparse as sp
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        self.n = n = int(n)
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        self.nnz = int(rows.size)
        A = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
        perm = np.asarray(reverse_cuthill_mckee((A + A.T).tocsr(), symmetric_mode=True), np.int64)
        inv = np.empty(n, np.int64)
        inv[perm] = np.arange(n)
        self.perm, self.inv = perm, inv
        ri, ci = inv[rows], inv[cols]
        self.kl = int(np.max(ri - ci, initial=0))
        self.ku = int(np.max(ci - ri, initial=0))
        self.b = b = max(1, self.kl, self.ku)
        self.nb = nb = -(-n // b)
        self.colors = _color_columns(A.tocsc(), A, perm)
        self.ncolors = int(self.colors.max(initial=-1)) + 1
        # where each entry of the blocks comes from
        zero, one = n * self.ncolors, n * self.ncolors + 1
        index = np.full((3, nb, b, b), zero, np.int64)
        k, r, c = np.meshgrid(np.arange(nb), np.arange(b), np.arange(b), indexing="ij")
        pad = (k * b + r >= n) & (r == c)  # the padding's diagonal
        index[1][pad] = one
        # the pattern's entries, in the new order
        k_blk, r_in = np.divmod(ri, b)
        k_col, c_in = np.divmod(ci, b)
        which = k_col - k_blk + 1  # 0, 1, 2 for sub-, diagonal, super-diagonal block
        if np.any((which < 0) | (which > 2)):  # pragma: no cover (b >= kl, ku)
            raise AssertionError("band structure: an entry outside the three block diagonals")
        index[which, k_blk, r_in, c_in] = rows * self.ncolors + self.colors[cols]
        self.index = index

    @property
    def narrow(self) -> bool:
        """Worth the band: at least four blocks."""
        return self.nb >= 4

    def seeds(self) -> np.ndarray:
        """E (n x ncolors): E[j, colors[j]] = 1; the compressed Jacobian is J E."""
        E = np.zeros((self.n, self.ncolors))
        E[np.arange(self.n), self.colors] = 1.0
        return E

    def compressed(self, jvp, dtype=jnp.float64):
        """The n x ncolors compressed Jacobian J E from ``jvp(v) = J v``."""
        return jax.vmap(jvp, in_axes=1, out_axes=1)(jnp.asarray(self.seeds(), dtype))

    def blocks(self, C):
        """The (3, nb, b, b) blocks (sub-diagonal, diagonal, super-diagonal) from the compressed C
        (NumPy for a NumPy C)."""
        xp = np if isinstance(C, np.ndarray) else jnp
        flat = xp.concatenate([xp.ravel(C), xp.zeros((1,), C.dtype), xp.ones((1,), C.dtype)])
        return flat[self.index]


def checked(structure: BandStructure, jvp_columns, point, rng) -> bool:
    """Whether the band matrix assembled at ``point`` from ``jvp_columns`` (as for
    :func:`sparsity_pattern`) times a random vector equals the Jacobian times it: False where the
    pattern missed an entry."""
    n, k = structure.n, min(CHUNK, structure.n)
    if structure.ncolors + 1 > k:
        return False
    v = rng.standard_normal(n)
    E = np.zeros((n, k))
    E[:, : structure.ncolors] = structure.seeds()
    E[:, structure.ncolors] = v
    cols = np.asarray(jvp_columns(point, E))  # the check in NumPy: no eager XLA operation to compile
    band = BandedTangent(structure, compressed=cols[:, : structure.ncolors])
    exact = cols[:, structure.ncolors]
    scale = np.max(np.abs(exact), initial=0.0)
    return bool(np.all(np.abs(band.matvec(v) - exact) <= 1e-10 * scale))


def random_parameters(defaults, rng):
    """Values of a System's parameters for a sparsity pattern: each default times a random factor
    in [1.1, 1.3], plus a small random number where it is zero (no entry vanishes by coincidence);
    NumPy arrays. None for a System without parameters."""
    if defaults is None:
        return None
    out = {}
    for k, v in defaults.items():
        a = np.asarray(v, dtype=float)
        out[k] = a * rng.uniform(1.1, 1.3, a.shape) + np.where(a == 0, rng.uniform(0.1, 0.2, a.shape), 0.0)
    return out


_STRUCTURES = CompiledCache(64)
SEED = 20240607
"""The random points of every pattern come from this seed: the same structure in every process."""


def find_structure(key, n: int, columns_at, random_point) -> BandStructure | None:
    """The :class:`BandStructure` of an n x n Jacobian, or None where its band is not narrow or
    the band assembled from the pattern misses an entry at one more random point (:func:`checked`).
    ``random_point(rng)`` draws a point (NumPy arrays), ``columns_at(point, E)`` is the Jacobian
    there times E (as for :func:`sparsity_pattern`), evaluated at once also while a time loop that
    needs it is traced (:class:`livens.engine.ImmediateProgram`). Cached under ``key``: found once per system (at the
    compilation of its first run)."""
    if key in _STRUCTURES:
        return _STRUCTURES[key]
    rng = np.random.default_rng(SEED)
    points = [random_point(rng) for _ in range(SAMPLES)]
    rows, cols = sparsity_pattern(columns_at, n, points)
    structure = BandStructure(n, rows, cols)
    if not (structure.narrow and checked(structure, columns_at, random_point(rng), rng)):
        structure = None
    _STRUCTURES[key] = structure
    return structure


def _random_like(template, rng):
    """Random values shaped as the arrays of ``template`` (a pytree; only shapes and dtypes are
    read, so traced values will do): scalars uniform in [0.01, 0.1] (step sizes, times, factors),
    arrays standard normal; NumPy arrays."""

    def draw(a):
        shape, dtype = jnp.shape(a), np.dtype(jnp.result_type(a))
        if not shape:
            return np.asarray(rng.uniform(0.01, 0.1), dtype)
        return np.asarray(rng.standard_normal(shape), dtype)

    return jax.tree_util.tree_map(draw, template)


_SAME_PATTERN: dict = {}
"""Residual keys whose patterns are one (:func:`same_pattern`): key -> the name they share."""


def same_pattern(name: str, *keys) -> None:
    """Declare that the residuals named ``keys`` (the keys of :func:`residual_structure`, as
    :func:`livens.solvers.banded_tangent` is given them; a key with its coupling values held,
    ``(key, "couplings held")``, shares as its key does) are one function of x evaluated at other
    arguments, so that dR/dx has one sparsity pattern for all of them: vi-lagrange's start (SLO09
    eq 15) and its step (eq 14) are one system at other values. Their structure is then found once
    per system and size of x, by whichever residual needs it first, instead of once for each."""
    for key in keys:
        _SAME_PATTERN[key] = name


def _shared_name(key):
    """The name a residual key shares its pattern under (:func:`same_pattern`), or None."""
    try:
        if key in _SAME_PATTERN:
            return _SAME_PATTERN[key]
        if isinstance(key, tuple) and len(key) == 2 and key[1] == "couplings held" and key[0] in _SAME_PATTERN:
            return (_SAME_PATTERN[key[0]], "couplings held")
    except TypeError:  # an unhashable key shares nothing
        return None
    return None


def residual_structure(key, residual, x, args, mech, min_n: int = 0) -> BandStructure | None:
    """The :class:`BandStructure` of dR/dx for R(x) = ``residual(x, args, mech)``, or None where x has
    fewer than ``min_n`` entries or no narrow band was found.

    The pattern is that of the AD Jacobian of ``residual`` itself, at random x, random ``args``
    shaped as the given ones (:func:`_random_like`: the state, h, t, ...) and random System
    parameters (:func:`random_parameters`), found once per (``key``, system, shapes) by
    :func:`find_structure`, or once per (shared name, system, n) for a key declared to share its
    pattern (:func:`same_pattern`). ``key`` names the residual: one key, one residual function."""
    n = int(x.shape[0])
    if n < min_n:
        return None
    shared = _shared_name(key)
    if shared is not None:  # one pattern for the residuals that share it (same_pattern), whatever their args
        full_key = (shared, mech.system, mech.symmetries, n)
    else:
        shapes = tuple((jnp.shape(a), str(jnp.result_type(a))) for a in jax.tree_util.tree_leaves(args))
        full_key = (key, mech.system, mech.symmetries, n, jax.tree_util.tree_structure(args), shapes)
    if full_key in _STRUCTURES:
        return _STRUCTURES[full_key]
    template = args

    def random_point(rng):
        prm = random_parameters(mech.system.parameters, rng)
        return prm, np.asarray(rng.standard_normal(n), np.dtype(x.dtype)), _random_like(template, rng)

    @ImmediateProgram  # run at a few sample points
    def columns(prm, y, a, E):
        bound = mech.bind(prm)
        return jax.vmap(lambda v: jax.jvp(lambda z: residual(z, a, bound), (y,), (v,))[1], in_axes=1, out_axes=1)(E)

    return find_structure(full_key, n, lambda point, E: columns(*point, E), random_point)


def residual_tangent(key, residual, x, args, mech, min_n: int = 0, jvp=None):
    """dR/dx at x of R(x) = ``residual(x, args, mech)`` as a :class:`BandedTangent` (its solve is
    the band LU), or None where :func:`residual_structure` finds no band. The tangent is assembled
    from one Jacobian-vector product of ``residual`` per colour: ``jvp(v)`` where the caller has
    the linearization at x, else ``jax.jvp``."""
    structure = residual_structure(key, residual, x, args, mech, min_n)
    if structure is None:
        return None
    if jvp is None:
        jvp = lambda v: jax.jvp(lambda z: residual(z, args, mech), (x,), (v,))[1]  # noqa: E731
    return BandedTangent(structure, jvp)


def _color_columns(A_csc, A_csr, order) -> np.ndarray:
    """Greedy colouring of the columns of A, taken in ``order``: two columns that share a row get
    different colours. In the band's order this needs at most kl + ku + 1 colours."""
    n = A_csc.shape[1]
    colors = np.full(n, -1, np.int64)
    indptr_c, rows_of = A_csc.indptr, A_csc.indices
    indptr_r, cols_of = A_csr.indptr, A_csr.indices
    for j in order:
        rows = rows_of[indptr_c[j] : indptr_c[j + 1]]
        neighbours = (
            np.unique(np.concatenate([cols_of[indptr_r[i] : indptr_r[i + 1]] for i in rows]))
            if rows.size
            else np.zeros(0, np.int64)
        )
        used = colors[neighbours]
        used = set(used[used >= 0].tolist())
        c = 0
        while c in used:
            c += 1
        colors[j] = c
    return colors


def block_tridiagonal_solve(L, D, U, rhs):
    """Solve the block-tridiagonal system with blocks L[k] = A[k, k-1], D[k] = A[k, k],
    U[k] = A[k, k+1] (each (nb, b, b); L[0], U[nb-1] unused) and right-hand side rhs (nb, b), or
    several at once (nb, b, r), by LU with partial pivoting: block column k is factorized as the
    2b x b panel [D_k; L_{k+1}], its row exchanges applied to the two block rows (so U gains a
    second super-diagonal block, as in LAPACK's band LU), the right-hand sides eliminated on the
    way; then back substitution. The same pivots as a dense LU restricted to the band; exact up to
    round-off."""
    b = D.shape[1]
    dtype = D.dtype
    single = rhs.ndim == 2
    if single:
        rhs = rhs[:, :, None]
    r = rhs.shape[2]
    Zb = jnp.zeros((1, b, b), dtype)
    # the next block row of each step; after the last one a block row (0, I, 0 | 0)
    Ln = jnp.concatenate([L[1:], Zb])
    Dn = jnp.concatenate([D[1:], jnp.eye(b, dtype=dtype)[None]])
    Un = jnp.concatenate([U[1:], Zb])
    rn = jnp.concatenate([rhs[1:], jnp.zeros((1, b, r), dtype)])
    Z = jnp.zeros((b, b), dtype)

    def eliminate(carry, nxt):
        Dk, Uk, rk = carry
        Lk1, Dk1, Uk1, rk1 = nxt
        lu, _, p = lax.linalg.lu(jnp.concatenate([Dk, Lk1], axis=0))
        T = jnp.concatenate([jnp.concatenate([Uk, Z, rk], axis=1), jnp.concatenate([Dk1, Uk1, rk1], axis=1)], axis=0)[p]
        top = jsl.solve_triangular(lu[:b], T[:b], lower=True, unit_diagonal=True)
        bottom = T[b:] - lu[b:] @ top
        W = jsl.solve_triangular(lu[:b], top, lower=False)  # U_kk^-1 [U_k,k+1  U_k,k+2  y_k]
        return (bottom[:, :b], bottom[:, b : 2 * b], bottom[:, 2 * b :]), W

    _, W = lax.scan(eliminate, (D[0], U[0], rhs[0]), (Ln, Dn, Un, rn))

    def back(carry, Wk):
        x1, x2 = carry
        xk = Wk[:, 2 * b :] - Wk[:, :b] @ x1 - Wk[:, b : 2 * b] @ x2
        return (xk, x1), xk

    zero = jnp.zeros((b, r), dtype)
    _, X = lax.scan(back, (zero, zero), W, reverse=True)
    return X[:, :, 0] if single else X


class BandedTangent:
    """dR/dx of a sparse residual as a block-tridiagonal matrix in the order of a
    :class:`BandStructure`: ``solve(rhs)`` applies its inverse (:func:`block_tridiagonal_solve`),
    ``matrix()`` assembles the dense matrix in the original order (for tests)."""

    def __init__(self, structure: BandStructure, jvp=None, compressed=None):
        self.s = structure
        self.C = structure.compressed(jvp) if compressed is None else compressed
        self.L, self.D, self.U = structure.blocks(self.C)

    def solve(self, rhs):
        """The tangent's inverse applied to rhs (n,), or to the columns of rhs (n, r)."""
        s = self.s
        X = block_tridiagonal_solve(self.L, self.D, self.U, self._padded(rhs))
        x = X.reshape((s.nb * s.b,) + rhs.shape[1:])[: s.n]
        return x[s.inv]

    def _padded(self, v):
        """v (n,) or (n, r) in the band's order, padded to nb * b rows: (nb, b) or (nb, b, r)."""
        s = self.s
        tail = v.shape[1:]
        if isinstance(v, np.ndarray):
            out = np.zeros((s.nb * s.b,) + tail, v.dtype)
            out[: s.n] = v[s.perm]
            return out.reshape((s.nb, s.b) + tail)
        return jnp.zeros((s.nb * s.b,) + tail, v.dtype).at[: s.n].set(v[s.perm]).reshape((s.nb, s.b) + tail)

    def matvec(self, v):
        """The matrix times v (original order); NumPy where the blocks and v are NumPy arrays."""
        s = self.s
        xp = np if isinstance(v, np.ndarray) and isinstance(self.D, np.ndarray) else jnp
        V = self._padded(v)
        zero = xp.zeros((1, s.b), v.dtype)
        prev = xp.concatenate([zero, V[:-1]])
        nxt = xp.concatenate([V[1:], zero])
        Y = (
            xp.einsum("kij,kj->ki", self.L, prev)
            + xp.einsum("kij,kj->ki", self.D, V)
            + xp.einsum("kij,kj->ki", self.U, nxt)
        )
        return Y.reshape(-1)[: s.n][s.inv]

    def matrix(self):
        s = self.s
        nb, b = s.nb, s.b
        A = jnp.zeros((nb * b, nb * b), self.D.dtype)
        for k in range(nb):
            A = A.at[k * b : (k + 1) * b, k * b : (k + 1) * b].set(self.D[k])
            if k:
                A = A.at[k * b : (k + 1) * b, (k - 1) * b : k * b].set(self.L[k])
            if k + 1 < nb:
                A = A.at[k * b : (k + 1) * b, (k + 1) * b : (k + 2) * b].set(self.U[k])
        A = A[: s.n, : s.n]
        return A[s.inv][:, s.inv]


__all__ = [
    "SAMPLES",
    "BandStructure",
    "BandedTangent",
    "block_tridiagonal_solve",
    "checked",
    "find_structure",
    "random_parameters",
    "residual_structure",
    "residual_tangent",
    "same_pattern",
    "sparsity_pattern",
]
