"""LU with partial pivoting in a lane kernel (:mod:`livens.engine.native.member_lanes`): every
lane its own matrix and its own pivot rows, the arithmetic on vectors of lanes.

Each lane sees the IEEE operations of the single member's LU (:meth:`Translator.p_lu`) in the
same order: for every element, a_ij - l_it u_tj for t = 0, 1, ... (a multiplication, then a
subtraction; no fused multiply-adds), each multiplier l_it = a_it * (1 / u_tt), the first largest
|a_ic| of the column the pivot. A lane whose pivot is zero keeps its rows at that column, as the
single LU does. So every lane's factors, pivots and permutation are those of its member alone,
to the bit.

Members in lanes mostly pivot alike, and a Newton tangent has no zero pivot: the code takes
paths without masks for those cases (rows swapped as whole vectors, no blend of lanes; updates
without a select per operation) and keeps the masked forms for the others.
"""

from __future__ import annotations

import numpy as np

from .emitter import Unsupported

LU_HELPERS = """
static inline __attribute__((always_inline)) void LU_PIVOT_IN(dv *a, iv *P, iv *V, int m, int n, int c) {
  iv p = BI(c), p1 = BI(-1), p2 = BI(-1), p3 = BI(-1);
  dv best = fabs(a[c*n + c]), b1 = BD(-1.0), b2 = BD(-1.0), b3 = BD(-1.0);
  int i = c + 1;
#define LU_MAX(b, q, r) { const dv x = fabs(a[(r)*n + c]); const iv gt = x > b; b = gt ? x : b; q = gt ? BI(r) : q; }
  for (; i + 3 < m; i = i + 4) { LU_MAX(best, p, i) LU_MAX(b1, p1, i + 1) LU_MAX(b2, p2, i + 2) LU_MAX(b3, p3, i + 3) }
  for (; i < m; i++) LU_MAX(best, p, i)
#define LU_FIRST(b, q) { const iv gt = (b > best) | ((b == best) & (q < p)); best = gt ? b : best; p = gt ? q : p; }
  LU_FIRST(b1, p1) LU_FIRST(b2, p2) LU_FIRST(b3, p3)
  V[c] = p;
  const int64_t r0 = p[0];
  if (!ANY(p != r0)) {
    if (r0 == c) return;
    for (int j = 0; j < n; j++) { const dv x = a[c*n + j]; a[c*n + j] = a[r0*n + j]; a[r0*n + j] = x; }
    const iv x = P[c]; P[c] = P[r0]; P[r0] = x;
    return;
  }
  int64_t rs[LANES]; iv sws[LANES]; int nr = 0;
  for (int l = 0; l < LANES; l++) {
    const int64_t r = p[l]; int seen = r == c;
    for (int e = 0; e < nr; e++) seen |= rs[e] == r;
    if (!seen) { rs[nr] = r; sws[nr] = p == r; nr++; }
  }
  for (int j = 0; j < n; j++) {
    const dv x = a[c*n + j]; dv y = x;
    for (int e = 0; e < nr; e++) { const dv z = a[rs[e]*n + j]; y = sws[e] ? z : y; a[rs[e]*n + j] = sws[e] ? x : z; }
    a[c*n + j] = y;
  }
  const iv x = P[c]; iv y = x;
  for (int e = 0; e < nr; e++) { const iv z = P[rs[e]]; y = sws[e] ? z : y; P[rs[e]] = sws[e] ? x : z; }
  P[c] = y;
}
static __attribute__((noinline)) void LU_PIVOT(dv *a, iv *P, iv *V, int m, int n, int c) {
  LU_PIVOT_IN(a, P, V, m, n, c);
}
static __attribute__((noinline)) void LU_MASKED(dv *a, int m, int n, int c, iv nz) {
  const dv inv = 1.0 / a[c*n + c];
  for (int i = c + 1; i < m; i++) {
    const dv l = a[i*n + c] * inv; a[i*n + c] = nz ? l : a[i*n + c];
    for (int j = c + 1; j < n; j++) a[i*n + j] = nz ? a[i*n + j] - l * a[c*n + j] : a[i*n + j];
  }
}
"""
"""The C++ helpers of a lane kernel's LU (:class:`LaneLU`). ``LU_PIVOT_IN(a, P, V, m, n, c)``
finds column c's pivot row p in each lane (the first largest |a_ic|, i >= c; four chains of
comparisons over every fourth row, whose bests are then merged, larger or equal and earlier
first: the row a scan in order takes, |a_cc| kept where it is NaN), records it in V[c],
and swaps rows c and p of the m x n matrix a and entries c and p of the permutation P in each
lane: where every lane's pivot row is the same, the two rows as whole vectors (nothing to do
where it is c), else row c read and written once and each other pivot row r once, in the lanes
whose pivot row is r. ``LU_MASKED(a, m, n, c, nz)``: column c's elimination where only the lanes
of the mask nz have a nonzero pivot (the others keep their rows). A loop over the columns takes
``LU_PIVOT_IN`` in line; the columns written out call ``LU_PIVOT`` (the same, out of line: one
copy of its code for all of them) and ``LU_MASKED``."""


class LaneLU:
    """The LU rules of :class:`~livens.engine.native.member_lanes.LaneTranslator` (a mixin of a
    :class:`~livens.engine.native.codegen.Translator` with ``lanes``; its header holds
    :data:`LU_HELPERS`)."""

    LU_BLOCKED_BYTES = 32 << 10
    """A matrix in lanes larger than this (about a core's first-level cache) is factored by
    :meth:`_lu_blocked`."""

    LU_BLOCK = 8
    """Columns per block of :meth:`_lu_blocked`."""

    LU_UNROLL_LANES = 24
    """A smaller square matrix of at most this many columns is factored column by column written
    out (:meth:`_unrolled_column`)."""

    def p_lu(self, ins, outs, **_):
        """LU with partial pivoting (as :meth:`Translator.p_lu`), each lane its own pivot rows: the
        pivot and the row swaps of ``LU_PIVOT`` (:data:`LU_HELPERS`), the elimination on vectors,
        where some lane's pivot is zero by ``LU_MASKED``."""
        if ins[0].dtype != np.float64:
            raise Unsupported(f"lu of {ins[0].dtype} in lanes")
        res, (A, P, V, m, n, k) = self._lu_start(ins, outs)
        self.line(f"for (int i = 0; i < {m}; i++) {P}[i] = BI(i);")
        if m * n * self.itemsize(np.float64) > self.LU_BLOCKED_BYTES and k > 1:
            self._lu_blocked(A, P, V, m, n, k)
        elif m == n and n <= self.LU_UNROLL_LANES:
            for c in range(k):
                self._unrolled_column(A, P, V, n, c)
        else:
            self.open(f"for (int c = 0; c < {k}; c++)")
            self.line(f"LU_PIVOT_IN({A}, {P}, {V}, {m}, {n}, c);")
            self.line(f"const iv nz = {A}[c*{n} + c] != 0.0;")
            self.open("if (!ANY(~nz))")  # every lane's pivot nonzero (the rule): no masks
            self.line(f"const dv inv = 1.0 / {A}[c*{n} + c];")
            self.open(f"for (int i = c + 1; i < {m}; i++)")
            self.line(f"const dv l = {A}[i*{n} + c] * inv; {A}[i*{n} + c] = l;")
            self.line(f"for (int j = c + 1; j < {n}; j++) {A}[i*{n} + j] = {A}[i*{n} + j] - l * {A}[c*{n} + j];")
            self.close()
            self.close()
            self.line(f"else if (ANY(nz)) LU_MASKED({A}, {m}, {n}, c, nz);")
            self.close()
        self.close()
        return res

    def _unrolled_column(self, A: str, P: str, V: str, n: int, c: int) -> None:
        """Column ``c`` (a number) of the LU of :meth:`p_lu` of a small square matrix: the pivot and
        the swaps of ``LU_PIVOT``, then, where every lane's pivot is nonzero, each row's update over
        the columns right of c written out, the pivot row's part in registers, as
        :meth:`Translator._lu_unrolled` writes it for one member (a_ij - l * u_cj, l = a_ic *
        (1 / u_cc): the loop form's operations in the same order); where some lane's pivot is
        zero, ``LU_MASKED``."""
        self.line(f"LU_PIVOT({A}, {P}, {V}, {n}, {n}, {c});")
        if c + 1 == n:
            return
        self.open("")
        self.line(f"dv *a = {A}; const iv nz = a[{c * n + c}] != 0.0;")
        self.open("if (!ANY(~nz))")
        self.line(f"const dv inv = 1.0 / a[{c * n + c}];")
        self.line(" ".join(f"const dv u{j} = a[{c * n + j}];" for j in range(c + 1, n)))
        self.open(f"for (int i = {c + 1}; i < {n}; i++)")
        self.line(f"dv *ri = a + i*{n}; const dv l = ri[{c}] * inv; ri[{c}] = l;")
        self.line(" ".join(f"ri[{j}] = ri[{j}] - l * u{j};" for j in range(c + 1, n)))
        self.close()
        self.close()
        self.line(f"else if (ANY(nz)) LU_MASKED(a, {n}, {n}, {c}, nz);")
        self.close()

    def _lu_blocked(self, A: str, P: str, V: str, m: int, n: int, k: int) -> None:
        """The LU of :meth:`p_lu` by blocks of :data:`LU_BLOCK` columns, for a matrix whose lanes
        leave the first-level cache: the rows right of a block are updated once per block, each
        element by the block's columns in turn in a register, where the column by column LU loads
        and stores the whole rest of the matrix at every column. Within a block, each column is first
        updated by the block's earlier columns, then its pivot is found (the first largest |a_ic|
        of each lane), its rows swapped in the lanes that pivot and its multipliers scaled. Every
        element sees the operations of the column by column LU in the same order (a_ij - l_it u_tj
        for t = 0, 1, ..., each multiplier l_it = a_it / u_tt as a_it times 1 / u_tt; a row swap
        carries a row's pending updates with it, its multipliers being in the row): the same bits.
        A lane whose pivot is zero keeps its rows at that column, as there.

        While every pivot of the block is nonzero in every lane (the rule), the updates take no
        masks, and each runs a known number of terms (a ``switch`` on the count): a column's
        update by the block's earlier columns holds their u_tc in registers, and a row's update
        right of the block holds its multipliers."""
        B = self.LU_BLOCK
        self.open(f"for (int c0 = 0; c0 < {k}; c0 += {B})")
        self.line(f"const int c1 = c0 + {B} < {k} ? c0 + {B} : {k};")
        self.line(f"iv nzs[{B}]; int every = 1;")  # each column's lanes with a nonzero pivot; all, so far
        self.open("for (int c = c0; c < c1; c++)")
        self._block_column(A, m, n)
        self.line(f"LU_PIVOT_IN({A}, {P}, {V}, {m}, {n}, c);")
        self.line(f"const iv nz = {A}[c*{n} + c] != 0.0; nzs[c - c0] = nz; every &= !ANY(~nz);")
        self.line(f"const dv inv = 1.0 / {A}[c*{n} + c];")
        self.line(f"if (every) for (int i = c + 1; i < {m}; i++) {A}[i*{n} + c] = {A}[i*{n} + c] * inv;")
        self.line(
            f"else for (int i = c + 1; i < {m}; i++) {{ const dv x = {A}[i*{n} + c]; {A}[i*{n} + c] = nz ? x * inv : x; }}"
        )
        self.close()
        if n > B:  # the rows' elements right of the block, rows in order (a block row is a later one's u)
            self._block_rows(A, m, n)
        self.close()

    def _block_column(self, A: str, m: int, n: int) -> None:
        """Column c of a block of :meth:`_lu_blocked` updated by the block's earlier columns
        t = c0, ..., c - 1 in turn, rows in order (a block row's element is a later row's u_tc):
        rows c0 < i < c by their t < i, rows i >= c by all of them."""
        B = self.LU_BLOCK
        self.open("if (c > c0 && every)")
        self.line(f"dv u[{B}]; u[0] = {A}[c0*{n} + c];")
        self.line(
            f"for (int i = c0 + 1; i < c; i++) {{ dv a = {A}[i*{n} + c]; "
            f"for (int t = 0; t < i - c0; t++) a = a - {A}[i*{n} + c0 + t] * u[t]; {A}[i*{n} + c] = a; u[i - c0] = a; }}"
        )
        self.open("switch (c - c0)")
        for nt in range(1, B):
            terms = " ".join(f"a = a - r[{t}] * u[{t}];" for t in range(nt))
            self.line(
                f"case {nt}: for (int i = c; i < {m}; i++) {{ const dv *r = {A} + i*{n} + c0; dv a = r[c - c0]; "
                f"{terms} {A}[i*{n} + c] = a; }} break;"
            )
        self.close()
        self.close()
        self.open("else if (c > c0)")
        self.open(f"for (int i = c0 + 1; i < {m}; i++)")
        self.line(f"const int te = i < c ? i : c; dv a = {A}[i*{n} + c];")
        self.line(
            f"for (int t = c0; t < te; t++) {{ const dv y = a - {A}[i*{n} + t] * {A}[t*{n} + c]; "
            "a = nzs[t - c0] ? y : a; }"
        )
        self.line(f"{A}[i*{n} + c] = a;")
        self.close()
        self.close()

    def _block_rows(self, A: str, m: int, n: int) -> None:
        """The elements right of a block of :meth:`_lu_blocked` (columns c1, ..., n - 1) of rows
        i > c0, each updated by the block's columns t < i in turn, the row's multipliers l_it
        in registers."""
        B = self.LU_BLOCK
        self.open(f"for (int i = c0 + 1; i < {m}; i++)")
        self.line("const int te = i < c1 ? i : c1;")
        self.line(f"dv ls[{B}]; for (int t = c0; t < te; t++) ls[t - c0] = {A}[i*{n} + t];")
        self.open("if (every) switch (te - c0)")
        for nt in range(1, B + 1):
            terms = " ".join(f"a = a - ls[{t}] * {A}[(c0 + {t})*{n} + j];" for t in range(nt))
            self.line(
                f"case {nt}: for (int j = c1; j < {n}; j++) {{ dv a = {A}[i*{n} + j]; {terms} {A}[i*{n} + j] = a; }} break;"
            )
        self.close()
        self.open("else")
        self.open(f"for (int j = c1; j < {n}; j++)")
        self.line(f"dv a = {A}[i*{n} + j];")
        self.line(
            f"for (int t = c0; t < te; t++) {{ const dv y = a - ls[t - c0] * {A}[t*{n} + j]; a = nzs[t - c0] ? y : a; }}"
        )
        self.line(f"{A}[i*{n} + j] = a;")
        self.close()
        self.close()
        self.close()


__all__ = ["LaneLU", "LU_HELPERS"]
