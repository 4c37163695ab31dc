"""The native kernel of one member run on several members at once, one per lane of a vector.

An ensemble of a small system (:func:`livens.simulate_ensemble`) repeats the same program for
every member. Here that program (the jaxpr of the single run's chunk loop) is written once more as
C++, every value of it a GCC vector of ``lanes`` doubles (or 64-bit integers), member l in lane l:
the straight-line arithmetic of a step, its products and LU eliminations then run on ``lanes``
members per instruction. Each lane computes exactly the IEEE operations of the single member's
kernel (:mod:`livens.engine.native.codegen`), so every member's results are the same to the bit.

What differs from one member to the next is handled per lane:

- the Newton ``while`` loop runs until every lane's condition is false, and a lane whose
  condition is false keeps its carries (the semantics of ``jax.vmap`` of a while loop);
- a ``cond`` computes all its branches and selects each lane's;
- LU's pivot rows (:mod:`livens.engine.native.lane_lu`), and gathers, scatters and dynamic slices at
  computed indices, are taken lane by lane;
- a boolean is a mask: -1 (all bits) for true, 0 for false.

Math functions run lane by lane through the scalar C library (the same results as the single
run). Primitives this translation does not handle per lane (sorting other than by one integer
key, QR, argmax at computed indices, 32-bit floats) raise
:class:`~livens.engine.native.codegen.Unsupported`; the ensemble then runs the members one by one.
"""

from __future__ import annotations

import math

import numpy as np

from .codegen import Translator
from .elementwise import BINARY, UNARY, saturation
from .emitter import SCRATCH_BYTES, Buf, Unsupported, _gather_layout, _is_float, _strides, c_literal
from .folding import _window_offset
from .lane_lu import LU_HELPERS, LaneLU

LANE_HEADER = """#include <math.h>
#include <stdint.h>
#include <string.h>
#define LANES {lanes}
typedef double dv __attribute__((vector_size(8 * LANES)));
typedef int64_t iv __attribute__((vector_size(8 * LANES)));
static inline dv BD(double x) {{ return x - (dv){{}}; }}  /* x - (+0) is x, -0 and NaN included */
static inline dv BD(dv x) {{ return x; }}
static inline iv BI(int64_t x) {{ return x + (iv){{}}; }}
static inline iv BI(iv x) {{ return x; }}
static inline int ANY(iv m) {{ int64_t r = 0; for (int l = 0; l < LANES; l++) r |= m[l]; return r != 0; }}
static inline int ANY(int64_t m) {{ return m != 0; }}
static inline iv isnan(dv x) {{ return x != x; }}
static inline dv fabs(dv x) {{ return (dv) ((iv) x & 0x7fffffffffffffffLL); }}
#define LANE1(f) static inline dv f(dv x) {{ dv r; for (int l = 0; l < LANES; l++) r[l] = f(x[l]); return r; }}
#define LANE2(f) \\
  static inline dv f(dv a, dv b) {{ dv r; for (int l = 0; l < LANES; l++) r[l] = f(a[l], b[l]); return r; }} \\
  static inline dv f(dv a, double b) {{ dv r; for (int l = 0; l < LANES; l++) r[l] = f(a[l], b); return r; }} \\
  static inline dv f(double a, dv b) {{ dv r; for (int l = 0; l < LANES; l++) r[l] = f(a, b[l]); return r; }}
LANE1(sqrt) LANE1(cbrt) LANE1(exp) LANE1(exp2) LANE1(log) LANE1(log1p) LANE1(expm1)
LANE1(sin) LANE1(cos) LANE1(tan) LANE1(asin) LANE1(acos) LANE1(atan) LANE1(sinh) LANE1(cosh)
LANE1(tanh) LANE1(asinh) LANE1(acosh) LANE1(atanh) LANE1(floor) LANE1(ceil) LANE1(erf) LANE1(erfc)
LANE1(lgamma) LANE1(rint) LANE1(round)
LANE2(pow) LANE2(atan2) LANE2(nextafter) LANE2(fmod)
static inline iv isfinite(dv x) {{ return fabs(x) <= 0x1.fffffffffffffp+1023; }}
typedef uint64_t uv __attribute__((vector_size(8 * LANES)));
template <class A, class B> static inline iv DIV(A a, B b, int64_t by_zero) {{
  iv x = BI(a), y = BI(b), z = (y == 0), m = (y == -1);
  iv q = x / ((z | m) ? BI(1) : y);
  q = m ? (iv) (-(uv) x) : q;
  return z ? BI(by_zero) : q;
}}
template <class A, class B> static inline iv REM(A a, B b) {{
  iv x = BI(a), y = BI(b);
  iv r = x % (((y == 0) | (y == -1)) ? BI(1) : y);
  return (y == 0) ? x : r;
}}
static inline iv SAT(dv a, double lo, double hi, int64_t least, int64_t largest) {{
  dv c = ((a > lo) & (a < hi)) ? a : BD(0.0);
  iv r = __builtin_convertvector(c, iv);
  r = (a <= lo) ? BI(least) : r;
  return (a >= hi) ? BI(largest) : r;
}}
"""
"""The C++ prelude of a lane kernel: the vector types ``dv`` and ``iv``, broadcasts ``BD`` and
``BI`` of a scalar to all lanes, ``ANY`` of a mask, and the math functions lane by lane."""


def _sign(a, dt):
    if _is_float(dt):
        return f"(isnan({a}) ? {a} : (({a} > 0) ? BD(1.0) : (({a} < 0) ? BD(-1.0) : BD(0.0))))"
    return f"(({a} > 0) ? BI(1) : (({a} < 0) ? BI(-1) : BI(0)))"


def _xor(a, b, dt):
    if np.dtype(dt) == np.bool_:
        return f"(({a} != 0) ^ ({b} != 0))"
    return f"({a} ^ {b})"


def _narrow(expr: str, dt) -> str:
    """``expr`` (64-bit in a lane) wrapped to the signed integer type ``dt`` where that is narrower."""
    dt = np.dtype(dt)
    if dt.kind != "i" or dt.itemsize == 8:
        return expr
    bits = 64 - 8 * dt.itemsize
    return f"(({expr} << {bits}) >> {bits})"


def _div(a, b, dt):
    """``lax.div`` as XLA computes it (:func:`livens.engine.native.elementwise._div`), lane by lane."""
    if _is_float(dt):
        return f"({a} / {b})"
    dt = np.dtype(dt)
    if dt.kind == "u":
        if dt.itemsize == 8:
            raise Unsupported("unsigned 64-bit division in lanes")
        return f"DIV({a}, {b}, {int(np.iinfo(dt).max)}LL)"
    return _narrow(f"DIV({a}, {b}, -1LL)", dt)


def _rem(a, b, dt):
    """``lax.rem`` as XLA computes it (:func:`livens.engine.native.elementwise._rem`), lane by lane."""
    if _is_float(dt):
        return f"fmod({a}, {b})"
    if np.dtype(dt) == np.dtype(np.uint64):
        raise Unsupported("unsigned 64-bit remainder in lanes")
    return f"REM({a}, {b})"


class LaneTranslator(LaneLU, Translator):
    """:class:`~livens.engine.native.codegen.Translator` of a program run on ``lanes`` members at once
    (module docstring): arrays of vectors, lane l the member l; masks for booleans."""

    UNARY = {**UNARY, "sign": _sign}
    BINARY = {**BINARY, "xor": _xor, "div": _div, "rem": _rem}
    linkage = 'extern "C" '
    SHARED_FUNCTIONS = False  # a call inside a masked loop would need the mask: every call inlined

    def __init__(self, lanes: int):
        super().__init__()
        if lanes < 2:
            raise ValueError(f"lanes must be at least 2; got {lanes}")
        self.lanes = int(lanes)
        self._scratch_made: list[str] = []  # the arrays made in scratch memory, in order (new)

    def header(self) -> str:
        return LANE_HEADER.format(lanes=self.lanes) + LU_HELPERS

    # --- values --------------------------------------------------------------------------------
    def ct(self, dtype) -> str:
        dtype = np.dtype(dtype)
        if dtype == np.float64:
            return "dv"
        if dtype == np.bool_ or np.issubdtype(dtype, np.integer):
            return "iv"
        raise Unsupported(f"dtype {dtype} in lanes")

    def rhs(self, expr: str, dtype) -> str:
        return f"BD({expr})" if _is_float(dtype) else f"BI({expr})"

    def literal(self, x, dtype) -> str:
        if np.dtype(dtype) == np.bool_:
            return "(-1LL)" if bool(x) else "(0LL)"
        return c_literal(x, dtype)

    def static(self, b: Buf) -> str:
        if b.dtype == np.bool_:  # masks: -1 for true
            b = Buf(None, b.shape, np.int64, -b.value.astype(np.int64))
        return super().static(b)

    def static_copy(self, dst: Buf, name: str, n: int, offset: str = "") -> None:
        i = self.fresh("i")
        at = f"{offset} + {i}" if offset else i
        self.line(f"for (int {i} = 0; {i} < {n}; {i}++) {dst.name}[{at}] = {self.rhs(f'{name}[{i}]', dst.dtype)};")

    def itemsize(self, dtype) -> int:
        return 8 * self.lanes

    def new(self, shape, dtype) -> Buf:
        if max(int(math.prod(shape)), 1) * self.itemsize(dtype) < SCRATCH_BYTES:
            self.elements += int(math.prod(shape)) * (self.lanes - 1)  # the stack holds every lane
        before = self.scratch
        b = super().new(shape, dtype)
        if self.scratch != before:
            self._scratch_made.append(b.name)
        return b

    def lane(self, b: Buf, index) -> str:
        """Lane ``l`` (the C variable) of element ``index`` of b (a known b: its scalar)."""
        text = self.at(b, index)
        return text if b.known else f"({text})[l]"

    # --- elementwise -----------------------------------------------------------------------------
    def p_convert_element_type(self, ins, outs, new_dtype, **_):
        src, dst = ins[0], np.dtype(new_dtype)
        if dst == src.dtype:
            return self.alias(src, outs[0].shape)
        if dst == np.bool_:
            return self.elementwise(lambda a, dt: f"({a} != 0)", ins, outs[0], {})
        if src.dtype == np.bool_:  # a mask to 0 or 1
            to = "dv" if _is_float(dst) else "iv"
            return self.elementwise(lambda a, dt: f"__builtin_convertvector((({a}) != 0) & 1, {to})", ins, outs[0], {})
        if _is_float(dst) == _is_float(src.dtype):  # integers are all 64-bit in lanes
            if not _is_float(dst) and dst.itemsize < 8 and src.dtype.itemsize > dst.itemsize:
                bits = 8 * dst.itemsize
                return self.elementwise(lambda a, dt: f"((({a}) << {64 - bits}) >> {64 - bits})", ins, outs[0], {})
            return self.alias(src, outs[0].shape)
        if _is_float(dst):
            return self.elementwise(lambda a, dt: f"__builtin_convertvector({a}, dv)", ins, outs[0], {})
        if dst == np.dtype(np.uint64):
            raise Unsupported("conversion of floats to uint64 in lanes")
        lo, hi, least, largest = saturation(dst)  # as XLA: saturated, NaN to 0
        return self.elementwise(
            lambda a, dt: (
                f"SAT(BD({a}), {c_literal(lo, np.float64)}, {c_literal(hi, np.float64)}, ({least + 1}LL - 1), {largest}LL)"
            ),
            ins,
            outs[0],
            {},
        )

    def p_reduce_and(self, ins, outs, axes, **_):
        return self._reduce(ins, outs, axes, "-1", lambda a, x: f"{a} = {a} & {x}")

    # --- indices computed per lane ---------------------------------------------------------------
    def _lane_window(self, out, src_shape, window_shape, starts, write) -> None:
        """A loop over the lanes and the window elements of a dynamic slice whose starts are
        computed per lane (clamped as in XLA): ``write(idx, at)`` is the C statement for window
        element ``idx`` at flat operand index ``at`` in lane ``l``."""
        self.open(f"for (int l = 0; l < {self.lanes}; l++)")
        s = self._starts(src_shape, window_shape, starts, read=self.lane)
        st = _strides(src_shape)
        idx = self.loops(window_shape)
        self.line(write(idx, _window_offset(s, idx, st)))
        self.end(idx)
        self.close()

    def p_dynamic_slice(self, ins, outs, slice_sizes, **_):
        src, starts = ins[0], ins[1:]
        if all(b.known for b in starts):
            return super().p_dynamic_slice(ins, outs, slice_sizes)
        out = self.new(outs[0].shape, src.dtype)
        self._lane_window(
            out,
            src.shape,
            out.shape,
            starts,
            lambda idx, at: f"{out.name}[{self.flat(idx, out.shape)}][l] = {self.lane(src, at)};",
        )
        return out

    def p_dynamic_update_slice(self, ins, outs, **_):
        src, upd, starts = ins[0], ins[1], ins[2:]
        if all(b.known for b in starts):
            return super().p_dynamic_update_slice(ins, outs)
        out = self.new(src.shape, src.dtype)
        self.copy(out, src)
        self._lane_window(
            out,
            src.shape,
            upd.shape,
            starts,
            lambda idx, at: f"{out.name}[{at}][l] = {self.lane(upd, self.flat(idx, upd.shape))};",
        )
        return out

    def p_gather(self, ins, outs, dimension_numbers, slice_sizes, mode, fill_value=None, **params):
        """A gather at indices computed per lane, lane by lane; where every lane's indices are the
        same (members in lanes mostly permute alike: an LU solve's pivots), by whole vectors."""
        src, ind = ins
        if ind.known:
            return super().p_gather(ins, outs, dimension_numbers, slice_sizes, mode, fill_value, **params)
        if "FILL" in str(mode):
            raise Unsupported("gather with runtime indices in fill mode")
        ind = self.arr(ind)
        out = self.new(outs[0].shape, src.dtype)
        same = self.fresh("u")
        i = self.fresh("i")
        self.line(f"int {same} = 1;")
        self.line(
            f"for (int {i} = 0; {i} < {ind.size}; {i}++) {same} &= !ANY({ind.name}[{i}] != BI({ind.name}[{i}][0]));"
        )
        self.open(f"if ({same})")
        self._gather_loop(src, ind, out, dimension_numbers, slice_sizes, None)
        self.close()
        self.open("else")
        self.open(f"for (int l = 0; l < {self.lanes}; l++)")
        self._gather_loop(src, ind, out, dimension_numbers, slice_sizes, "l")
        self.close()
        self.close()
        return out

    def _gather_loop(self, src, ind, out, dn, slice_sizes, lane) -> None:
        """The loops of :meth:`p_gather`: lane ``lane`` (a C variable) of every element, or where
        ``lane`` is None, whole vectors at lane 0's indices."""
        out_shape = out.shape
        batch_axes, window, st_src, st_ind = _gather_layout(src.shape, ind.shape, out_shape, dn)
        idx = self.loops(out_shape)
        base = self.affine([(st_ind[k], idx[a]) for k, a in enumerate(batch_axes)])
        terms = [
            f"{idx[batch_axes[ib]]}*{st_src[ob]}"
            for ob, ib in zip(getattr(dn, "operand_batching_dims", ()), getattr(dn, "start_indices_batching_dims", ()))
        ]
        for k, dim in enumerate(dn.start_index_map):
            s = self.fresh("s")
            hi = src.shape[dim] - slice_sizes[dim]
            at = f"({self.at(ind, f'{base} + {k * st_ind[-1]}')})[{lane or 0}]"
            self.line(f"int64_t {s} = (int64_t) {at};")
            self.line(f"{s} = {s} < 0 ? 0 : ({s} > {hi} ? {hi} : {s});")
            terms.append(f"{s}*{st_src[dim]}")
        for j, dim in enumerate(window):
            terms.append(f"{idx[dn.offset_dims[j]]}*{st_src[dim]}")
        where = " + ".join(terms) or "0"
        if lane is None:
            self.line(f"{out.name}[{self.flat(idx, out_shape)}] = {self.rhs(self.at(src, where), src.dtype)};")
        else:
            self.line(f"{out.name}[{self.flat(idx, out_shape)}][{lane}] = {self.lane(src, where)};")
        self.end(idx)

    def _lane_at(self, b: Buf, index) -> str:
        return self.lane(b, index)

    def _arg(self, ins, outs, axes, index_dtype, better):
        raise Unsupported("argmax/argmin in lanes")

    SORT_REFUSAL = "sort in lanes by a key other than one integer array"

    SORT_BY_RANKS = 256
    """The longest sort that :meth:`p_sort` does by ranks on vectors; a longer one is sorted lane by
    lane."""

    def p_sort(self, ins, outs, dimension, is_stable, num_keys, **params):
        """:meth:`Translator.p_sort` (stable, by one integer key) in every lane at once: element i's
        place is the number of elements whose key is smaller, and of those before it whose key is
        equal, counted on vectors (all lanes together); each operand's elements are then put at
        their lane's places. A stable sort has one result, so each lane's is that of the insertion
        sort of one member (which a sort longer than :data:`SORT_BY_RANKS` still runs, lane by
        lane)."""
        if num_keys != 1 or not np.issubdtype(ins[0].dtype, np.integer):
            raise Unsupported(self.SORT_REFUSAL)
        shape = ins[0].shape
        n = shape[dimension]
        if n > self.SORT_BY_RANKS:
            return super().p_sort(ins, outs, dimension, is_stable, num_keys, **params)
        res = [self.new(shape, b.dtype) for b in ins]
        for dst, src in zip(res, ins):
            self.copy(dst, src)
        st = _strides(shape)
        others = [d for d in range(len(shape)) if d != dimension]
        idx = self.loops([shape[d] for d in others])
        base = " + ".join([f"{i}*{st[d]}" for i, d in zip(idx, others)]) or "0"
        rk, key = self.fresh("rk"), res[0].name

        def at(x, j):
            return f"{x}[{base} + ({j})*{st[dimension]}]"

        self.line(f"iv {rk}[{n}];")
        self.open(f"for (int i = 0; i < {n}; i++)")
        self.line(f"const iv k = {at(key, 'i')}; iv r = BI(0);")  # a true comparison is -1
        self.line(f"for (int j = 0; j < i; j++) r -= (iv) ({at(key, 'j')} <= k);")
        self.line(f"for (int j = i + 1; j < {n}; j++) r -= (iv) ({at(key, 'j')} < k);")
        self.line(f"{rk}[i] = r;")
        self.close()
        for x in res:
            s = self.fresh("s")
            self.line(f"{self.ct(x.dtype)} {s}[{n}];")
            self.line(f"for (int i = 0; i < {n}; i++) {s}[i] = {at(x.name, 'i')};")
            self.line(
                f"for (int i = 0; i < {n}; i++) for (int l = 0; l < {self.lanes}; l++) "
                f"{at(x.name, f'{rk}[i][l]')}[l] = {s}[i][l];"
            )
        self.end(idx)
        return res

    def _each_lane(self) -> bool:
        """:meth:`Translator.p_sort` lane by lane: each lane its own order."""
        self.open(f"for (int l = 0; l < {self.lanes}; l++)")
        return True

    def _sort_element(self, x, offset: str) -> str:
        return f"{x.name}[{offset}][l]"

    def _sort_scalar(self, x) -> str:
        return "double" if _is_float(x.dtype) else "int64_t"

    def p_qr(self, ins, outs, **_):
        raise Unsupported("qr in lanes")

    # --- linear algebra --------------------------------------------------------------------------
    def _row_dot(self, lhs: Buf, rhs: Buf, contract, batch, lfree, rfree, aval) -> Buf:
        """A product of rows (:meth:`Translator._row_dot`) whose output row, contiguous in the right
        operand, has 4 to :attr:`REGISTER_ROW` elements, with one contraction axis: each output
        row summed in one vector of lanes per element, in registers over the contraction, stored
        once. The right operand's known zeros (:meth:`_known_zero_terms`) leave out the terms the
        kernel of one member leaves out (:meth:`_register_rows`: those of a group of 4 elements
        whose right factors are all known zeros, and those of the last ``width mod 4`` elements
        one by one), the contraction then written index by index. Each element is the same sum in
        the same order (0, then ``+= a * r`` for each contraction index in turn, the same terms
        left out): the single kernel's bits, NaN and infinite factors included."""
        (lc, rc), (lb, rb) = contract, batch
        rview = self.view(rhs)
        sr = rview[2]
        rshape = [rhs.shape[a] for a in rfree]
        width = rshape[0] if len(rfree) == 1 and sr[rfree[0]] == 1 else 0
        if np.dtype(aval.dtype) != np.float64 or not 4 <= width <= self.REGISTER_ROW or len(lc) != 1:
            return super()._row_dot(lhs, rhs, contract, batch, lfree, rfree, aval)
        (lname, loff, sl), (rname, roff, _) = self.view(lhs), rview
        dead = self._known_zero_terms(rhs, rc, rb, rfree)
        out = self.new(aval.shape, aval.dtype)
        bi = self.loops([lhs.shape[a] for a in lb])
        li = self.loops([lhs.shape[a] for a in lfree])
        ts = [self.fresh("t") for _ in range(width)]
        self.line("dv " + ", ".join(f"{t} = BD(0.0)" for t in ts) + ";")
        a = self.fresh("a")
        lterms = [(sl[x], v) for x, v in zip(lb, bi)] + [(sl[x], v) for x, v in zip(lfree, li)]
        if dead is not None:
            whole = width // 4 * 4
            for c in range(dead.shape[0]):
                groups, tails = self._live_terms(dead[c], width)
                live = [4 * q + i for q in groups for i in range(4)] + [whole + m for m in tails]
                if not live:
                    continue
                self.open("")
                self.line(f"const dv {a} = BD({lname}[{self.affine(lterms, loff + sl[lc[0]] * c)}]);")
                at = roff + sr[rc[0]] * c
                self.line(" ".join(f"{ts[j]} += {a} * {rname}[{at + j}];" for j in live))
                self.close()
        else:
            (cidx,) = self.loops([lhs.shape[lc[0]]])
            r = self.fresh("r")
            self.line(f"const dv {a} = BD({lname}[{self.affine(lterms + [(sl[lc[0]], cidx)], loff)}]);")
            rterms = [(sr[x], v) for x, v in zip(rb, bi)] + [(sr[rc[0]], cidx)]
            self.line(f"const auto *{r} = {rname} + {self.affine(rterms, roff)};")
            self.line(" ".join(f"{t} += {a} * {r}[{j}];" for j, t in enumerate(ts)))
            self.end([cidx])
        o = self.fresh("o")
        self.line(f"dv *{o} = {out.name} + {self.affine(list(zip(_strides(aval.shape), bi + li)))};")
        self.line(" ".join(f"{o}[{j}] = {t};" for j, t in enumerate(ts)))
        self.end(li)
        self.end(bi)
        return out

    def p_triangular_solve(self, ins, outs, left_side, lower, transpose_a, conjugate_a, unit_diagonal, **params):
        """op(a) x = b as :meth:`Translator.p_triangular_solve`; for one right-hand side where op(a)
        = a^T is lower triangular (the first solve of a transposed LU solve: the reverse pass's),
        by columns of op(a), rows of a: x_j final, then x_i -= a_ji x_j for i > j, contiguous in
        memory, where the row by row form reads a column of a per x_i, each element of it on
        another cache line, in a chain of subtractions. Each x_i sees the same subtractions in the
        same order (j = 0, 1, ...), then the same division: the same bits."""
        a, bmat = ins
        *batch, m, _ = a.shape
        rows, cols = bmat.shape[-2], bmat.shape[-1]
        if left_side and 1 < cols <= self.TRIANGULAR_IN_REGISTERS and a.dtype == bmat.dtype == np.float64:
            return self._triangular_rows(a, bmat, m, batch, lower, transpose_a, unit_diagonal)
        if not (left_side and transpose_a and not lower and cols == 1 and a.dtype == np.float64):
            return super().p_triangular_solve(
                ins, outs, left_side, lower, transpose_a, conjugate_a, unit_diagonal, **params
            )
        out = self.new(bmat.shape, bmat.dtype)
        self.copy(out, bmat)
        bb = self.fresh("b")
        self.open(f"for (int {bb} = 0; {bb} < {int(math.prod(batch))}; {bb}++)")
        a = self.arr(a)
        A = f"({a.name if not a.known else self.static(a)} + {bb}*{m * m})"
        X = f"({out.name} + {bb}*{rows})"
        self.open(f"for (int j = 0; j < {m}; j++)")
        if not unit_diagonal:
            self.line(f"{X}[j] = {X}[j] / {A}[j*{m} + j];")
        self.line(f"const dv xj = {X}[j];")
        self.line(f"for (int i = j + 1; i < {m}; i++) {X}[i] = {X}[i] - {A}[j*{m} + i] * xj;")
        self.close()
        self.close()
        return out

    TRIANGULAR_IN_REGISTERS = 24
    """The most right-hand sides of a triangular solve whose row of x :meth:`_triangular_rows`
    keeps in registers."""

    def _triangular_rows(self, a, bmat, m, batch, lower, transpose_a, unit_diagonal) -> Buf:
        """op(a) x = b for several right-hand sides (the columns of b) as
        :meth:`Translator.p_triangular_solve` computes it, row i of x at a time (x_i -= a_ij x_j for
        j in the same order, then / a_ii), the row's elements held in registers over the
        subtractions where that form loads and stores the row at every j: the same operations in
        the same order, the same bits."""
        cols = bmat.shape[-1]
        out = self.new(bmat.shape, bmat.dtype)
        self.copy(out, bmat)
        eff_lower = lower != transpose_a
        bb, Aij = self._batched_matrix(a, int(math.prod(batch)), m, transpose_a)
        X = f"({out.name} + {bb}*{m * cols})"
        s = [self.fresh("s") for _ in range(cols)]
        self.open(f"for (int i = 0; i < {m}; i++)" if eff_lower else f"for (int i = {m} - 1; i >= 0; i--)")
        self.line(f"dv {', '.join(f'{x} = {X}[i*{cols} + {r}]' for r, x in enumerate(s))};")
        self.open("for (int j = 0; j < i; j++)" if eff_lower else f"for (int j = i + 1; j < {m}; j++)")
        self.line(f"const dv a = {Aij('i', 'j')}; const dv *y = {X} + j*{cols};")
        self.line(" ".join(f"{x} = {x} - a * y[{r}];" for r, x in enumerate(s)))
        self.close()
        if unit_diagonal:
            self.line(" ".join(f"{X}[i*{cols} + {r}] = {x};" for r, x in enumerate(s)))
        else:
            self.line(f"const dv d = {Aij('i', 'i')};")
            self.line(" ".join(f"{X}[i*{cols} + {r}] = {x} / d;" for r, x in enumerate(s)))
        self.close()
        self.close()
        return out

    # --- control flow ----------------------------------------------------------------------------
    def _branch(self, br, ops, outs, head: str) -> list[Buf]:
        """A branch of :meth:`p_cond` in the block ``head``, and its results, which outlive the
        block: an array that the branch made in scratch memory (never reused by another array) is
        its result itself, through a pointer declared before the block; any other result is copied
        to an array made there. A matrix a step makes (the LU of its tangent) so costs no copy of
        every lane's elements at every step; the results' values are the same."""
        at = len(self.lines)  # where the declarations go, before the block
        self.open(head)
        mark = len(self._scratch_made)
        vals = self.closed_with(br, [], ops)
        made, decls, res = set(self._scratch_made[mark:]), [], []
        for s, a in zip(vals, outs):
            own = s.name in made and not s.known and s.elems is None and s.rows_written is None
            if own and s.dtype == np.dtype(a.dtype) and s.size == math.prod(a.shape):
                r = self.fresh("r")
                decls.append(f"{self.ct(a.dtype)} *{r};")
                self.line(f"{r} = {s.name};")
                res.append(Buf(r, a.shape, a.dtype))
                continue
            first = len(self.lines)
            d = self.new(a.shape, a.dtype)  # declared before the block
            decls.extend(line.strip() for line in self.lines[first:])
            del self.lines[first:]
            self.copy(d, s)
            res.append(d)
        self.close()
        depth = "  " * self.depth
        self.lines[at:at] = [depth + line for line in decls]
        return res

    MASKED_WHILE = True  # a while loop runs until its condition fails in every lane (vmap's semantics)

    def holds_somewhere(self, expr: str) -> str:
        return f"ANY({expr})"

    def p_cond(self, ins, outs, branches, **_):
        """``lax.cond``/``switch`` at an index that differs by lane: each branch that some lane
        takes is computed, and each lane's result taken from its branch (the index clamped as in
        XLA). Where every lane takes the same branch (a loop's step while every member runs it)
        the results are that branch's arrays, not copies of them blended lane by lane: the cond's
        outputs are pointers to one or the other. A loop of steps whose step is a ``cond`` on
        "still running" so skips the step once every lane has stopped."""
        index, ops = ins[0], ins[1:]
        if index.known or len(branches) == 1:
            return super().p_cond(ins, outs, branches)
        k = self.fresh("k")
        self.line(f"const iv {k} = {self.rhs(self.at(index, 0), index.dtype)};")
        last = len(branches) - 1

        def test(j):
            return f"{k} <= 0" if j == 0 else (f"{k} >= {j}" if j == last else f"{k} == {j}")

        results = []
        for j, br in enumerate(branches):
            results.append(self._branch(br, ops, outs, f"if (ANY({test(j)}))"))
        # the lanes' blend, into arrays made here (a blend's arrays outlive its block)
        blends = [[self.new(a.shape, a.dtype) for a in outs] for _ in range(last)]
        ptrs = [self.fresh("o") for _ in outs]
        for p, a in zip(ptrs, outs):
            self.line(f"{self.ct(a.dtype)} *{p};")
        u = self.fresh("u")  # the branch every lane takes, or -1
        self.line(f"int {u} = -1;")
        for j in range(last + 1):
            self.line(f"if (!ANY(~({test(j)}))) {u} = {j};")
        for j in range(last + 1):
            self.open(f"if ({u} == {j})" if j == 0 else f"else if ({u} == {j})")
            for p, r in zip(ptrs, results[j]):
                self.line(f"{p} = {r.name};")
            self.close()
        self.open("else")
        out = results[-1]
        for j in range(last - 1, -1, -1):
            sel = blends[j]
            for d, yes, no in zip(sel, results[j], out):
                if d.size:
                    i = self.fresh("i")
                    self.line(
                        f"for (int {i} = 0; {i} < {d.size}; {i}++) {d.name}[{i}] = ({test(j)}) "
                        f"? {yes.name}[{i}] : {no.name}[{i}];"
                    )
            out = sel
        for p, r in zip(ptrs, out):
            self.line(f"{p} = {r.name};")
        self.close()
        return [Buf(p, a.shape, a.dtype) for p, a in zip(ptrs, outs)]


__all__ = ["LaneTranslator", "LANE_HEADER"]
