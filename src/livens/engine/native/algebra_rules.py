"""The rules of the native translator for contractions, reductions and linear algebra: ``dot_general``,
reductions and arg-reductions, LU and QR factorizations and triangular solves (a mixin of
:class:`livens.engine.native.codegen.Translator`)."""

from __future__ import annotations

import math

import numpy as np

from .elementwise import _maxmin
from .emitter import MAX_ELEMS, Buf, Unsupported, _ctype, _is_float, _strides


class AlgebraRules:
    """Primitive rules ``p_<name>`` for contractions, reductions and factorizations."""

    # --- contractions and reductions -------------------------------------------------------------
    def p_dot_general(self, ins, outs, dimension_numbers, **_):
        lhs, rhs = ins
        (lc, rc), (lb, rb) = dimension_numbers
        if _is_float(outs[0].dtype) and (
            any(b.known or b.elems is not None for b in ins)
            or outs[0].size * math.prod(lhs.shape[a] for a in lc) <= self.SPARSE_DOT_TERMS
        ):
            out = self._sparse_dot(lhs, rhs, (lc, rc), (lb, rb), outs[0])
            if out is not None:
                return out
        lfree = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
        rfree = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
        if (
            _is_float(outs[0].dtype)
            and math.prod(rhs.shape[a] for a in rfree) >= self.ROW_DOT_COLUMNS
            and math.prod(lhs.shape[a] for a in lc) > 1
        ):
            return self._row_dot(lhs, rhs, (lc, rc), (lb, rb), lfree, rfree, outs[0])
        if self._column_dot(lhs, rhs, lc, lb, lfree, rfree, outs[0]):
            return self._row_dot(rhs, lhs, (rc, lc), (rb, lb), rfree, lfree, outs[0])
        out = self.new(outs[0].shape, outs[0].dtype)
        (lname, loff, sl), (rname, roff, sr) = self.view(lhs), self.view(rhs)
        idx = self.loops(out.shape)
        nb = len(lb)
        bi, li, ri = idx[:nb], idx[nb : nb + len(lfree)], idx[nb + len(lfree) :]
        acc = self.fresh("acc")
        self.line(f"{self.ct(out.dtype)} {acc} = {self.rhs('0', out.dtype)};")
        cshape = [lhs.shape[i] for i in lc]
        if len([n for n in cshape if n > 1]) == 1 and math.prod(cshape) <= self.UNROLL_CONTRACTION:
            self.line(f"#pragma GCC unroll {math.prod(cshape)}")
        cidx = self.loops(cshape)
        lterms = (
            [(sl[a], v) for a, v in zip(lb, bi)]
            + [(sl[a], v) for a, v in zip(lfree, li)]
            + [(sl[a], v) for a, v in zip(lc, cidx)]
        )
        rterms = (
            [(sr[a], v) for a, v in zip(rb, bi)]
            + [(sr[a], v) for a, v in zip(rfree, ri)]
            + [(sr[a], v) for a, v in zip(rc, cidx)]
        )
        self.line(f"{acc} += {lname}[{self.affine(lterms, loff)}] * {rname}[{self.affine(rterms, roff)}];")
        self.end(cidx)
        self.line(f"{out.name}[{self.flat(idx, out.shape)}] = {acc};")
        self.end(idx)
        return out

    def _column_dot(self, lhs: Buf, rhs: Buf, lc, lb, lfree, rfree, aval) -> bool:
        """Whether a matrix-vector product is written as :meth:`_row_dot` of its operands swapped: a
        matrix whose one free axis is contiguous (a transposed matrix) times a vector, no batch axes.
        Its output is then summed in vectors along the free axis, each element the same sum in the
        same order (0, then ``+= x_j * a_ij``; a product is the same either way round), not in one
        chain of scalar multiply-adds per element. Not with known zeros (:meth:`_row_dot` drops them)."""
        if lb or rfree or len(lfree) != 1 or len(lc) != 1 or lhs.shape[lc[0]] < 2:
            return False
        if any(b.known or self.known_zeros(b).any() for b in (lhs, rhs)):
            return False
        if not (np.dtype(aval.dtype) == np.float64 and self.ct(aval.dtype) == _ctype(aval.dtype)):
            return False
        if not self.ROW_DOT_COLUMNS <= lhs.shape[lfree[0]] <= self._one_row_limit(1):
            return False
        return self.view(lhs)[2][lfree[0]] == 1

    UNROLL_CONTRACTION = 4
    """The loop nest of a ``dot_general`` whose one contraction axis has at most this many indices has
    that loop unrolled by the C compiler (``#pragma GCC unroll``; the Gram matrices of 3-vectors):
    the same sums in the same order, the same bits."""

    ROW_DOT_COLUMNS = 8
    """A ``dot_general`` whose right operand has at least this many free elements (a matrix
    product, not a matrix-vector product) is written by rows (:meth:`_row_dot`)."""

    REGISTER_ROW = 32
    """A row of :meth:`_row_dot` of at most this many elements is summed in registers (:meth:`_register_rows`);
    twice as many in a kernel of one member where the product has one row (:meth:`_one_row_limit`)."""

    def _one_row_limit(self, rows: int) -> int:
        """The most doubles of a row :meth:`_register_rows` sums in registers, for ``rows`` output rows:
        for one (a multistep history's coefficients times its states) 16 vectors, of AVX-512's 32."""
        return self.REGISTER_ROW * (2 if rows == 1 else 1)

    SKIP_ZERO_TERMS = 64
    """A product of :meth:`_register_rows` over at most this many contraction indices, whose right
    operand has known zeros, is written index by index without the terms whose factors are all
    known zeros."""

    def _known_zero_terms(self, rhs: Buf, rc, rb, rfree):
        """Where the right operand of a product of rows (no batch axes, one contraction axis and one
        free axis) is a known zero, as an array (contraction index, free index) of booleans; None
        where it has none or the product is not of that form."""
        if rb or len(rc) != 1 or len(rfree) != 1 or (rhs.elems is None and not rhs.known):
            return None
        if rhs.shape[rc[0]] > self.SKIP_ZERO_TERMS:
            return None
        zero = self.known_zeros(rhs).reshape(rhs.shape).transpose([rc[0], rfree[0]])
        return zero if zero.any() else None

    @staticmethod
    def _live_terms(dead_row, width: int) -> tuple[list[int], list[int]]:
        """The terms of one contraction index that :meth:`_register_rows` writes, from ``dead_row``
        (the right factors of an output row that are known zeros): the groups q of 4 elements
        (4q to 4q + 3) whose right factors are not all known zeros, and the last ``width mod 4``
        elements m (4 (width // 4) + m) whose right factor is not a known zero. Lane kernels leave
        out the same terms (:mod:`~livens.engine.native.member_lanes`)."""
        k = width // 4
        groups = [q for q in range(k) if not dead_row[4 * q : 4 * q + 4].all()]
        return groups, [m for m in range(width % 4) if not dead_row[4 * k + m]]

    def _register_rows(self, out: Buf, lview, rview, contract, batch, lfree, width: int, lhs: Buf, dead=None) -> None:
        """The rows of :meth:`_row_dot` (one free right index, contiguous in the right operand)
        summed in vectors of 4 doubles (GCC's and Clang's ``vector_size``) and scalars for the last
        ``width mod 4`` elements, which stay in registers over the contraction and are stored once:
        the loop of row updates loads and stores the output row at every term. Each element is the
        same sum in the same order (0, then ``+= a * r`` for each contraction index in turn; no
        contraction into fused multiply-adds): the same bits.

        ``dead`` (:meth:`_known_zero_terms`): the right operand's known zeros; the contraction is
        then written index by index, each without the vectors and scalars whose right factors are all
        known zeros (``x * 0`` taken as zero, :meth:`simplify`): an accumulator that starts at +0 and
        gains only products and sums is never -0, so adding a zero product leaves it as it is."""
        (lc, rc), (lb, rb) = contract, batch
        (lname, loff, sl), (rname, roff, sr) = lview, rview
        vec, k, rem = self.fresh("v4d"), width // 4, width % 4
        self.line(f"typedef double {vec} __attribute__((vector_size(32)));")
        bi = self.loops([lhs.shape[a] for a in lb])
        li = self.loops([lhs.shape[a] for a in lfree])
        accs, tails = [self.fresh("acc") for _ in range(k)], [self.fresh("t") for _ in range(rem)]
        self.line(f"{vec} " + ", ".join(f"{x} = {{0, 0, 0, 0}}" for x in accs) + ";")
        if tails:
            self.line("double " + ", ".join(f"{t} = 0" for t in tails) + ";")
        if dead is not None:
            a, y = self.fresh("a"), self.fresh("y")
            lterms = [(sl[x], v) for x, v in zip(lfree, li)]
            for c in range(dead.shape[0]):
                live, live_tails = self._live_terms(dead[c], width)
                if not live and not live_tails:
                    continue
                self.open("")
                self.line(f"const double {a} = {lname}[{self.affine(lterms, loff + sl[lc[0]] * c)}];")
                if live:
                    self.line(f"const {vec} {a}v = {{{a}, {a}, {a}, {a}}};")
                at = roff + sr[rc[0]] * c
                for q in live:
                    self.line(
                        f"{{ {vec} {y}; memcpy(&{y}, {rname} + {at + 4 * q}, sizeof {y}); {accs[q]} += {a}v * {y}; }}"
                    )
                for m in live_tails:
                    self.line(f"{tails[m]} += {a} * {rname}[{at + 4 * k + m}];")
                self.close()
            self._store_rows(out, bi, li, accs, tails, k)
            return
        cidx = self.loops([lhs.shape[a] for a in lc])
        a, r, y = self.fresh("a"), self.fresh("r"), self.fresh("y")
        lterms = [(sl[x], v) for x, v in zip(lb, bi)] + [(sl[x], v) for x, v in zip(lfree, li)]
        lterms += [(sl[x], v) for x, v in zip(lc, cidx)]
        self.line(f"const double {a} = {lname}[{self.affine(lterms, loff)}];")
        self.line(f"const {vec} {a}v = {{{a}, {a}, {a}, {a}}};")
        rterms = [(sr[x], v) for x, v in zip(rb, bi)] + [(sr[x], v) for x, v in zip(rc, cidx)]
        self.line(f"const double *{r} = {rname} + {self.affine(rterms, roff)};")
        for q, x in enumerate(accs):
            self.line(f"{{ {vec} {y}; memcpy(&{y}, {r} + {4 * q}, sizeof {y}); {x} += {a}v * {y}; }}")
        for m, t in enumerate(tails):
            self.line(f"{t} += {a} * {r}[{4 * k + m}];")
        self.end(cidx)
        self._store_rows(out, bi, li, accs, tails, k)

    def _store_rows(self, out: Buf, bi, li, accs, tails, k: int) -> None:
        """The end of :meth:`_register_rows`: the row's accumulators stored, its loops closed."""
        ostr = _strides(out.shape)
        o = self.fresh("o")
        self.line(f"double *{o} = {out.name} + {self.affine(list(zip(ostr, bi + li)))};")
        for q, x in enumerate(accs):
            self.line(f"memcpy({o} + {4 * q}, &{x}, sizeof {x});")
        for m, t in enumerate(tails):
            self.line(f"{o}[{4 * k + m}] = {t};")
        self.end(li)
        self.end(bi)

    def _row_dot(self, lhs: Buf, rhs: Buf, contract, batch, lfree, rfree, aval) -> Buf:
        """A ``dot_general`` as row updates: each output row (batch and left free indices) starts
        at zero and gains ``lhs[.., k] * rhs[k, ..]`` for the contraction indices k in order, the
        innermost loop running along the row. Each output element is the same sum, in the same
        order, as in the loop nest of one accumulator per element; but the innermost loop is an
        update of a contiguous row, which the C compiler vectorizes (a sum into one accumulator
        it may not reorder), as in LU's row updates. A row of at most :attr:`REGISTER_ROW`
        elements contiguous in the right operand is summed in registers (:meth:`_register_rows`)."""
        (lc, rc), (lb, rb) = contract, batch
        out = self.new(aval.shape, aval.dtype)
        (lname, loff, sl), (rname, roff, sr) = self.view(lhs), self.view(rhs)
        dt = aval.dtype
        rshape = [rhs.shape[a] for a in rfree]
        width = rshape[0] if len(rfree) == 1 and sr[rfree[0]] == 1 else 0
        scalar = np.dtype(dt) == np.float64 and self.ct(dt) == _ctype(dt)
        if scalar and 4 <= width <= self._one_row_limit(math.prod(lhs.shape[a] for a in [*lb, *lfree])):
            dead = self._known_zero_terms(rhs, rc, rb, rfree)
            self._register_rows(out, (lname, loff, sl), (rname, roff, sr), contract, batch, lfree, width, lhs, dead)
            return out
        bi = self.loops([lhs.shape[a] for a in lb])
        li = self.loops([lhs.shape[a] for a in lfree])
        ostr = _strides(aval.shape)
        head = len(bi) + len(li)
        row = list(zip(ostr[:head], bi + li))
        ri = self.loops(rshape)
        self.line(f"{out.name}[{self.affine(row + list(zip(ostr[head:], ri)))}] = {self.rhs('0', dt)};")
        self.end(ri)
        cidx = self.loops([lhs.shape[a] for a in lc])
        a = self.fresh("a")
        lterms = [(sl[x], v) for x, v in zip(lb, bi)] + [(sl[x], v) for x, v in zip(lfree, li)]
        lterms += [(sl[x], v) for x, v in zip(lc, cidx)]
        self.line(f"const {self.ct(dt)} {a} = {lname}[{self.affine(lterms, loff)}];")
        ri = self.loops(rshape)
        rterms = [(sr[x], v) for x, v in zip(rb, bi)] + [(sr[x], v) for x, v in zip(rfree, ri)]
        rterms += [(sr[x], v) for x, v in zip(rc, cidx)]
        o = self.affine(row + list(zip(ostr[head:], ri)))
        self.line(f"{out.name}[{o}] += {a} * {rname}[{self.affine(rterms, roff)}];")
        self.end(ri)
        self.end(cidx)
        self.end(li)
        self.end(bi)
        return out

    SPARSE_DOT_TERMS = 32
    """A ``dot_general`` of at most this many multiplications is written term by term, into C
    scalars (registers, where a loop nest writes an array the compiler must track in memory); a
    larger one where at most an eighth of its terms survive the known zeros, or at most half of
    them and at most :attr:`SPARSE_DOT_SUMS` output elements are sums (:meth:`_sparse_dot`)."""
    SPARSE_DOT_SUMS = 96

    def _sparse_dot(self, lhs: Buf, rhs: Buf, contract, batch, aval) -> Buf | None:
        """A ``dot_general`` with known elements in an operand, as one sum per output element of
        only its terms without a known zero factor (a known factor 1 without the multiplication,
        -1 as a subtraction), summed in the order of the contraction as the loop nest would.

        The known operands of differentiation (``jacfwd``'s seeds, selection and identity blocks,
        and the blocks of zeros in the matrices assembled from them) are mostly zeros: most of the
        loop nest's multiply-adds are by zero. Dropping ``x * 0`` is the simplification of
        :meth:`simplify`. An output element that is one operand's element is that element, one
        without terms a known zero. Returns None for a large product with few known zeros
        (the loop nest is then the shorter code)."""
        (lc, rc), (lb, rb) = contract, batch
        if int(math.prod(aval.shape)) * int(math.prod(lhs.shape[a] for a in lc)) > 1 << 21:
            return None
        lfree = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
        rfree = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
        # both operands as [batch, free, contraction]
        lcode = np.arange(lhs.size).reshape(lhs.shape).transpose(list(lb) + lfree + list(lc))
        rcode = np.arange(rhs.size).reshape(rhs.shape).transpose(list(rb) + rfree + list(rc))
        nb = int(math.prod(lhs.shape[a] for a in lb))
        nc = int(math.prod(lhs.shape[a] for a in lc))
        if nc == 0 or nb == 0:  # an empty sum (or an empty output): known zeros
            return Buf(None, aval.shape, aval.dtype, np.zeros(aval.shape, aval.dtype))
        lcode, rcode = lcode.reshape(nb, -1, nc), rcode.reshape(nb, -1, nc)
        # per output element (b, i, j) and term c: the lhs and the rhs element
        ll, rr = np.broadcast_arrays(lcode[:, :, None, :], rcode[:, None, :, :])
        ll, rr = ll.reshape(-1, nc), rr.reshape(-1, nc)
        la, ra = self.atom_view(lhs), self.atom_view(rhs)
        live = ~(self.known_zeros(lhs)[ll] | self.known_zeros(rhs)[rr])
        nlive = np.count_nonzero(live)
        if nlive == 0:  # every term has a known zero factor: a known zero of any size, folded onwards
            return Buf(None, aval.shape, aval.dtype, np.zeros(aval.shape, aval.dtype))
        if live.size > self.SPARSE_DOT_TERMS and (
            live.shape[0] > MAX_ELEMS
            or (
                nlive > live.size // 8
                and (nlive > live.size // 2 or np.count_nonzero(live.sum(axis=1) > 1) > self.SPARSE_DOT_SUMS)
            )
        ):
            if nlive <= live.size // 4:
                return self._table_dot(lhs, rhs, ll, rr, live, aval)
            return None
        dt = aval.dtype
        result, lines = [], []
        for k in range(ll.shape[0]):
            terms = []
            for c in np.nonzero(live[k])[0].tolist():
                x, y = la[ll[k, c]], ra[rr[k, c]]
                if x[0] is None and y[0] is None:
                    terms.append((1, (None, x[1] * y[1])))
                elif x[0] is None and abs(x[1]) == 1:
                    terms.append((x[1], y))
                elif y[0] is None and abs(y[1]) == 1:
                    terms.append((y[1], x))
                else:
                    terms.append((0, f"{self.text(x, dt)} * {self.text(y, dt)}"))
            if not terms:
                result.append((None, 0.0))
            elif len(terms) == 1 and terms[0][0] == 1:
                result.append(terms[0][1])
            else:
                expr = ""
                for sign, t in terms:
                    t = t if sign == 0 else self.text(t, dt)
                    if not expr:
                        expr = f"-{t}" if sign == -1 else t
                    else:
                        expr += f" - {t}" if sign == -1 else f" + {t}"
                lines.append((k, expr))
                result.append(None)
        return self.computed(aval.shape, dt, result, lines)

    def _table_dot(self, lhs: Buf, rhs: Buf, ll, rr, live, aval) -> Buf:
        """A large ``dot_general`` with mostly known-zero terms (``live`` marks the others, ``ll``
        and ``rr`` give each term's operand elements) as a loop over tables of its live terms:
        the work of the sparse product, in code of constant size. Summed as :meth:`_sparse_dot`.
        Where at least :attr:`TABLE_EMPTY_SHARE` of the outputs have no live term (a product with
        a seed of colours: each coordinate's derivative in one colour only), the output is set to
        zero at once and the loop runs over the others alone: each output the same sum (0, then
        ``+= a * b`` in order), the same bits."""
        count = live.sum(axis=1)
        rows = np.flatnonzero(count)
        skip = rows.size < live.shape[0] and (live.shape[0] - rows.size) >= self.TABLE_EMPTY_SHARE * live.shape[0]
        if not skip:
            rows = np.arange(live.shape[0])
        ptr = np.concatenate([[0], np.cumsum(count[rows])]).astype(np.int32)
        ia = ll[rows][live[rows]].astype(np.int32)  # row by row, each row's terms in contraction order
        ib = rr[rows][live[rows]].astype(np.int32)
        a, b = self.arr(lhs), self.arr(rhs)
        an = self.static(a) if a.known else a.name
        bn = self.static(b) if b.known else b.name
        P, IA, IB = (self.static(Buf(None, (t.size,), np.int32, t)) for t in (ptr, ia, ib))
        out = self.new(aval.shape, aval.dtype)
        k, t, acc = self.fresh("k"), self.fresh("j"), self.fresh("acc")
        target = f"{out.name}[{k}]"
        if skip:
            self.line(f"memset({out.name}, 0, sizeof({out.name}[0]) * {out.size});")
            R = self.static(Buf(None, (rows.size,), np.int32, rows.astype(np.int32)))
            target = f"{out.name}[{R}[{k}]]"
        self.open(f"for (int {k} = 0; {k} < {rows.size}; {k}++)")
        self.line(f"{self.ct(out.dtype)} {acc} = {self.rhs('0', out.dtype)};")
        self.line(f"for (int {t} = {P}[{k}]; {t} < {P}[{k} + 1]; {t}++) {acc} += {an}[{IA}[{t}]] * {bn}[{IB}[{t}]];")
        self.line(f"{target} = {acc};")
        self.close()
        return out

    TABLE_EMPTY_SHARE = 0.25
    """The share of a table product's outputs without live terms from which they are set at once
    and the loop skips them (:meth:`_table_dot`)."""

    def _reduce(self, ins, outs, axes, init: str, update) -> Buf:
        src = ins[0]
        out = self.new(outs[0].shape, outs[0].dtype)
        kept = [a for a in range(len(src.shape)) if a not in axes]
        st = _strides(src.shape)
        idx = self.loops([src.shape[a] for a in kept])
        acc = self.fresh("acc")
        self.line(f"{self.ct(out.dtype)} {acc} = {self.rhs(init, out.dtype)};")
        ridx = self.loops([src.shape[a] for a in axes])
        x = self.at(
            src, self.affine([(st[a], v) for a, v in zip(kept, idx)] + [(st[a], v) for a, v in zip(axes, ridx)])
        )
        self.line(update(acc, x) + ";")
        self.end(ridx)
        self.line(f"{out.name}[{self.flat(idx, out.shape)}] = {acc};")
        self.end(idx)
        return out

    def p_reduce_sum(self, ins, outs, axes, **_):
        return self._reduce(ins, outs, axes, "0", lambda a, x: f"{a} += {x}")

    def p_reduce_prod(self, ins, outs, axes, **_):
        return self._reduce(ins, outs, axes, "1", lambda a, x: f"{a} *= {x}")

    def p_reduce_max(self, ins, outs, axes, **_):
        dt = ins[0].dtype
        init = "(-INFINITY)" if _is_float(dt) else str(np.iinfo(dt).min) + ("LL" if dt.itemsize == 8 else "")
        if self._lane_extremum(ins, axes):
            return self._lane_reduce(ins, outs, ">", init)
        return self._reduce(ins, outs, axes, init, lambda a, x: f"{a} = {_maxmin('>')(x, a, dt)}")

    def p_reduce_min(self, ins, outs, axes, **_):
        dt = ins[0].dtype
        init = "INFINITY" if _is_float(dt) else str(np.iinfo(dt).max) + ("LL" if dt.itemsize == 8 else "")
        if self._lane_extremum(ins, axes):
            return self._lane_reduce(ins, outs, "<", init)
        return self._reduce(ins, outs, axes, init, lambda a, x: f"{a} = {_maxmin('<')(x, a, dt)}")

    LANE_REDUCE = 16
    """A float max or min over all of at least this many elements is taken in 8 lanes
    (:meth:`_lane_reduce`)."""

    def _lane_extremum(self, ins, axes) -> bool:
        """Whether :meth:`_lane_reduce` takes this reduction: floats (C scalars, not a lane kernel's
        vectors) reduced whole, at least :attr:`LANE_REDUCE` of them."""
        src = ins[0]
        whole = sorted(axes) == list(range(len(src.shape)))
        scalar = _is_float(src.dtype) and self.ct(src.dtype) == _ctype(src.dtype)
        return scalar and whole and src.size >= self.LANE_REDUCE

    def _lane_reduce(self, ins, outs, op: str, init: str) -> Buf:
        """The max (``op`` ">") or min ("<") of all elements, as the loop of one accumulator
        (``acc = x op acc || isnan(x) ? x : acc``, :meth:`_reduce`) gives it, in 8 lanes (of doubles in
        vectors, :meth:`_vector_lanes`): element i goes to lane i mod 8 (kept where ``x op lane``),
        the lanes are then combined. Without a NaN, the extremum's value is the loop's, and where it
        is not zero every element of that value has the same bits; where an element is NaN (the loop
        returns the last NaN) or the extremum is zero (the first of +0 and -0), the loop itself runs.
        The loop's bits, without its one chain of dependent compares (a residual's norm, per iteration)."""
        src, dt = ins[0], ins[0].dtype
        out = self.new(outs[0].shape, outs[0].dtype)
        n, ct = src.size, self.ct(dt)
        acc, lane, bad, i, j = (self.fresh(k) for k in ("acc", "lane", "bad", "i", "j"))
        whole = n // 8 * 8
        self.line(f"{ct} {acc} = {init}; int {bad} = 0;")
        x = self.at(src, i)
        if ct == "double":
            self._vector_lanes(src, op, init, acc, bad, i, n)
        else:
            self.line(f"{ct} {lane}[8];")
            xj = self.at(src, f"{i} + {j}")
            self.line(f"for (int {j} = 0; {j} < 8; {j}++) {lane}[{j}] = {init};")
            self.open(f"for (int {i} = 0; {i} < {whole}; {i} += 8)")
            self.line(
                f"for (int {j} = 0; {j} < 8; {j}++) {{ {ct} x = {xj}; {bad} |= isnan(x); {lane}[{j}] = x {op} {lane}[{j}] ? x : {lane}[{j}]; }}"
            )
            self.close()
            self.line(
                f"for (int {i} = {whole}; {i} < {n}; {i}++) {{ {ct} x = {x}; {bad} |= isnan(x); {acc} = x {op} {acc} ? x : {acc}; }}"
            )
            self.line(f"for (int {j} = 0; {j} < 8; {j}++) {acc} = {lane}[{j}] {op} {acc} ? {lane}[{j}] : {acc};")
        self.open(f"if ({bad} || {acc} == 0)")  # the loop of one accumulator, as _reduce writes it
        self.line(f"{acc} = {init};")
        self.line(f"for (int {i} = 0; {i} < {n}; {i}++) {acc} = {_maxmin(op)(x, acc, dt)};")
        self.close()
        self.line(f"{out.name}[0] = {acc};")
        return out

    def _vector_lanes(self, src: Buf, op: str, init: str, acc: str, bad: str, i: str, n: int) -> None:
        """The 8 lanes of :meth:`_lane_reduce` for doubles in two vectors of 4 (``vector_size``), by the
        same rule (``x op lane ? x : lane`` as a compare mask that selects bits), combined into
        ``acc``; ``bad`` where an element is NaN (``x != x``). The last elements (n not a multiple of 8)
        are taken by one more pair of vectors, over the last 8 elements: an element seen twice leaves
        a max or min as it is, where the loop of one accumulator would take them one by one. The two
        vectors are then combined by the same rule, and their 4 lanes one by one into ``acc``: the
        same extremum, as the value the lanes hold is of one of the elements."""
        vd, vm, lo, hi, nan = (self.fresh(k) for k in ("v4d", "v4m", "lo", "hi", "nan"))
        self.line(f"typedef double {vd} __attribute__((vector_size(32)));")
        self.line(f"typedef long long {vm} __attribute__((vector_size(32)));")
        self.line(f"{vd} {lo} = {{{init}, {init}, {init}, {init}}}, {hi} = {lo}; {vm} {nan} = {{0, 0, 0, 0}};")

        def pair(first: str) -> None:
            for half, name in ((0, lo), (4, hi)):
                x, m, at = self.fresh("x"), self.fresh("m"), self.at(src, f"{first} + {half}" if half else first)
                self.line(f"{vd} {x}; memcpy(&{x}, &{at}, sizeof {x});")
                self.line(f"const {vm} {m} = ({vm}) ({x} {op} {name}); {nan} |= ({vm}) ({x} != {x});")
                self.line(f"{name} = ({vd}) ((({vm}) {x} & {m}) | (({vm}) {name} & ~{m}));")

        self.open(f"for (int {i} = 0; {i} < {n // 8 * 8}; {i} += 8)")
        pair(i)
        self.close()
        if n % 8:
            self.open("")
            self.line(f"const int {i} = {n - 8};")
            pair(i)
            self.close()
        m = self.fresh("m")
        self.line(
            f"const {vm} {m} = ({vm}) ({hi} {op} {lo}); {lo} = ({vd}) ((({vm}) {hi} & {m}) | (({vm}) {lo} & ~{m}));"
        )
        for k in range(4):
            self.line(f"{acc} = {lo}[{k}] {op} {acc} ? {lo}[{k}] : {acc};")
        self.line(f"{bad} = ({nan}[0] | {nan}[1] | {nan}[2] | {nan}[3]) != 0;")

    def p_reduce_and(self, ins, outs, axes, **_):
        return self._reduce(ins, outs, axes, "1", lambda a, x: f"{a} = {a} & {x}")

    def p_reduce_or(self, ins, outs, axes, **_):
        return self._reduce(ins, outs, axes, "0", lambda a, x: f"{a} = {a} | {x}")

    def _arg(self, ins, outs, axes, index_dtype, better: str) -> Buf:
        src = ins[0]
        (axis,) = axes
        out = self.new(outs[0].shape, index_dtype)
        kept = [a for a in range(len(src.shape)) if a != axis]
        st = _strides(src.shape)
        idx = self.loops([src.shape[a] for a in kept])
        base = self.affine([(st[a], v) for a, v in zip(kept, idx)])
        best, at = self.fresh("b"), self.fresh("k")
        self.line(f"{_ctype(src.dtype)} {best} = {self.at(src, base)}; int64_t {at} = 0;")
        j = self.fresh("j")
        self.open(f"for (int {j} = 1; {j} < {src.shape[axis]}; {j}++)")
        x = self.at(src, f"{base} + {j}*{st[axis]}")
        nan = f" || (isnan({x}) && !isnan({best}))" if _is_float(src.dtype) else ""
        self.line(f"if (({x} {better} {best}){nan}) {{ {best} = {x}; {at} = {j}; }}")
        self.close()
        self.line(f"{out.name}[{self.flat(idx, out.shape)}] = {at};")
        self.end(idx)
        return out

    def p_argmax(self, ins, outs, axes, index_dtype, **_):
        return self._arg(ins, outs, axes, index_dtype, ">")

    def p_argmin(self, ins, outs, axes, index_dtype, **_):
        return self._arg(ins, outs, axes, index_dtype, "<")

    # --- linear algebra --------------------------------------------------------------------------
    def _lu_start(self, ins, outs):
        """The outputs of an LU (the matrices: a copy, or their own array where it is read last;
        pivots, permutation), the loop over the batch opened, and (A, P, V, m, n, k): C pointers to this
        matrix, its permutation and pivots, the shape and min(m, n). The caller factors and closes."""
        a = ins[0]
        *batch, m, n = a.shape
        lu = self._to_overwrite(a)  # a itself where the LU reads it last (a Newton tangent), else new
        piv = self.new(outs[1].shape, np.int32)
        perm = self.new(outs[2].shape, np.int32)
        self._bounds[piv.name] = self._bounds[perm.name] = (0, m - 1)  # row indices (Emitter.bounds)
        self.copy(lu, a)  # nothing where lu is a
        k = min(m, n)
        b = self.fresh("b")
        self.open(f"for (int {b} = 0; {b} < {int(math.prod(batch))}; {b}++)")
        return [lu, piv, perm], (
            f"({lu.name} + {b}*{m * n})",
            f"({perm.name} + {b}*{m})",
            f"({piv.name} + {b}*{k})",
            m,
            n,
            k,
        )

    LU_UNROLL = 32
    """An LU of at most this many columns has its loop over the columns unrolled by the C compiler
    (``#pragma GCC unroll``; other compilers ignore it): the row updates and the pivot search of each
    column then run over a known number of elements, which GCC vectorizes without the run-time
    trip-count checks and remainder loops of a variable length (the LU of a small Newton system
    costs less). The same operations in the same order: the same bits."""

    def p_lu(self, ins, outs, **_):
        """LU with partial pivoting, as LAPACK's getrf: the first largest |a_ik| is the pivot."""
        res, (A, P, V, m, n, k) = self._lu_start(ins, outs)
        if m == n and 1 < n <= self.LU_UNROLL and ins[0].dtype == np.float64:
            self._lu_unrolled(A, P, V, n)
            self.close()
            return res
        self.line(f"for (int i = 0; i < {m}; i++) {P}[i] = i;")
        if k <= self.LU_UNROLL:  # GCC unrolls the columns: each one's loops then have fixed lengths
            self.line(f"#pragma GCC unroll {k}")
        self.open(f"for (int c = 0; c < {k}; c++)")
        self.line(f"int p = c; double best = fabs({A}[c*{n} + c]);")
        self.line(
            f"for (int i = c + 1; i < {m}; i++) {{ double x = fabs({A}[i*{n} + c]); if (x > best) {{ best = x; p = i; }} }}"
        )
        self.line(f"{V}[c] = p;")
        self.open("if (p != c)")
        self.line(
            f"for (int j = 0; j < {n}; j++) {{ double t = {A}[c*{n} + j]; {A}[c*{n} + j] = {A}[p*{n} + j]; {A}[p*{n} + j] = t; }}"
        )
        self.line(f"int t = {P}[c]; {P}[c] = {P}[p]; {P}[p] = t;")
        self.close()
        self.open(f"if ({A}[c*{n} + c] != 0.0)")
        self.line(f"double inv = 1.0 / {A}[c*{n} + c];")
        self.open(f"for (int i = c + 1; i < {m}; i++)")
        self.line(f"double l = {A}[i*{n} + c] * inv; {A}[i*{n} + c] = l;")
        self.line(f"for (int j = c + 1; j < {n}; j++) {A}[i*{n} + j] -= l * {A}[c*{n} + j];")
        self.close()
        self.close()
        self.close()
        self.close()
        return res

    LU_VECTOR = 4
    """Doubles per vector in the row updates of :meth:`_lu_unrolled` (GCC's and Clang's ``vector_size``)."""

    def _lu_unrolled(self, A: str, P: str, V: str, n: int) -> None:
        """The LU of :meth:`p_lu` for a small square matrix (at most :data:`LU_UNROLL` columns),
        written out column by column: the pivot search as n - c - 1 comparisons, a swap of whole rows,
        and each row's update over the columns right of c, the multiplier l = a_ic * (1 / a_cc) held
        in a register and the pivot row's part too. Every element sees the operations of the loop
        form in the same order (a_ij - l * a_cj; no fused multiply-adds): the same bits, at a fraction
        of the loop form's cost (no trip counts, no remainder loops or run-time alias checks of a
        vectorized loop of variable length).

        A row is moved in vectors of :data:`LU_VECTOR` doubles at fixed places, counted from its end,
        and scalars before the first of them: a vector read back (the next column's update, a swap)
        is then one written as a whole, which the processor forwards from its store. Where c is the
        first element of a vector, the others are updated in it too, their results and l chosen
        into it by a mask of bits: the same operations, in one vector, not W - 1 scalars."""
        W = self.LU_VECTOR
        blocks = list(range(n % W, n - W + 1, W))  # the vectors' first elements
        head = blocks[0] if blocks else n  # elements [0, head) moved one by one
        vd, a = self.fresh("lu_v"), self.fresh("lu_a")
        self.line(f"typedef double {vd} __attribute__((vector_size({8 * W})));")
        self.line(f"typedef long long {vd}m __attribute__((vector_size({8 * W})));")
        self.line(f"double *{a} = {A};")
        self.line(f"for (int i = 0; i < {n}; i++) {P}[i] = i;")
        for c in range(n):
            self.open("")
            self.line(f"int p = {c}; double best = fabs({a}[{c * n + c}]); double x;")
            if c + 1 < n:  # one line (EngineOptions.max_native_lines counts lines)
                self.line(
                    " ".join(
                        f"x = fabs({a}[{i * n + c}]); if (x > best) {{ best = x; p = {i}; }}" for i in range(c + 1, n)
                    )
                )
            self.line(f"{V}[{c}] = p;")
            self.open(f"if (p != {c})")
            self.line(f"double *rc = {a} + {c * n}, *rp = {a} + p*{n};")
            for j in range(head):
                self.line(f"{{ double t = rc[{j}]; rc[{j}] = rp[{j}]; rp[{j}] = t; }}")
            for j in blocks:
                self.line(
                    f"{{ {vd} s, t; memcpy(&s, rc + {j}, sizeof s); memcpy(&t, rp + {j}, sizeof t); "
                    f"memcpy(rc + {j}, &t, sizeof t); memcpy(rp + {j}, &s, sizeof s); }}"
                )
            self.line(f"int t = {P}[{c}]; {P}[{c}] = {P}[p]; {P}[p] = t;")
            self.close()
            if c + 1 < n:
                vecs = [j for j in blocks if j > c]
                ones = range(c + 1, vecs[0] if vecs else n)
                if c in blocks:  # the vector of c, masked (docstring)
                    vecs, ones = [c, *vecs], range(0)
                self.open(f"if ({a}[{c * n + c}] != 0.0)")
                self.line(f"const double inv = 1.0 / {a}[{c * n + c}];")
                for j in vecs:
                    self.line(f"{vd} u{j}; memcpy(&u{j}, {a} + {c * n + j}, sizeof u{j});")
                for j in ones:
                    self.line(f"const double e{j} = {a}[{c * n + j}];")
                self.open(f"for (int i = {c + 1}; i < {n}; i++)")
                store = "" if c in vecs else f" ri[{c}] = l;"
                self.line(f"double *ri = {a} + i*{n}; const double l = ri[{c}] * inv;{store}")
                if vecs:
                    self.line(f"const {vd} lv = {{{', '.join(['l'] * W)}}};")
                if c in vecs:
                    self.line(
                        f"{{ {vd} y; memcpy(&y, ri + {c}, sizeof y); const {vd}m m = {{0{', -1' * (W - 1)}}}, "
                        f"z = ({vd}m) (y - lv * u{c}); y = ({vd}) ((z & m) | (({vd}m) lv & ~m)); memcpy(ri + {c}, &y, sizeof y); }}"
                    )
                    vecs = vecs[1:]
                for j in ones:
                    self.line(f"ri[{j}] = ri[{j}] - l * e{j};")
                for j in vecs:
                    self.line(
                        f"{{ {vd} y; memcpy(&y, ri + {j}, sizeof y); y = y - lv * u{j}; memcpy(ri + {j}, &y, sizeof y); }}"
                    )
                self.close()
                self.close()
            self.close()

    def p_qr(self, ins, outs, full_matrices, pivoting=False, **_):
        """Householder QR as LAPACK's geqrf and orgqr: reflector j maps column j below the diagonal
        to beta e_j with beta = -sign(alpha) ||x|| (alpha the diagonal element), and Q is the product
        of the reflectors applied to the identity, the last one first."""
        if pivoting:
            raise Unsupported("qr with pivoting")
        a = ins[0]
        if np.dtype(a.dtype) != np.float64:  # the loops below compute in double
            raise Unsupported(f"qr of {a.dtype}")
        *batch, m, n = a.shape
        k = min(m, n)
        mq = m if full_matrices else k  # columns of Q, rows of R
        q = self.new(outs[0].shape, a.dtype)
        r = self.new(outs[1].shape, a.dtype)
        w = self.new((m, n), a.dtype)  # the factorization in place: R above, reflectors below
        tau = self.new((max(k, 1),), a.dtype)
        a = self.arr(a)
        src = self.static(a) if a.known else a.name
        nb = int(math.prod(batch))
        b = self.fresh("b")
        self.open(f"for (int {b} = 0; {b} < {nb}; {b}++)")
        W, T = w.name, tau.name
        self.line(f"for (int i = 0; i < {m * n}; i++) {W}[i] = {src}[{b}*{m * n} + i];")
        self.open(f"for (int j = 0; j < {k}; j++)")
        self.line("double xnorm = 0.0;")
        self.line(f"for (int i = j + 1; i < {m}; i++) xnorm += {W}[i*{n} + j] * {W}[i*{n} + j];")
        self.line("xnorm = sqrt(xnorm);")
        self.line(f"double alpha = {W}[j*{n} + j];")
        self.open("if (xnorm == 0.0)")
        self.line(f"{T}[j] = 0.0;")
        self.close()
        self.open("else")
        self.line("double beta = -copysign(hypot(alpha, xnorm), alpha);")
        self.line(f"{T}[j] = (beta - alpha) / beta;")
        self.line("double scale = 1.0 / (alpha - beta);")
        self.line(f"for (int i = j + 1; i < {m}; i++) {W}[i*{n} + j] *= scale;")
        self.line(f"{W}[j*{n} + j] = beta;")
        self._reflect(W, n, "j + 1", W, n, T, m)  # to the columns right of j
        self.close()
        self.close()
        R = f"({r.name} + {b}*{mq * n})"
        self.line(
            f"for (int i = 0; i < {mq}; i++) for (int c = 0; c < {n}; c++) "
            f"{R}[i*{n} + c] = c >= i ? {W}[i*{n} + c] : 0.0;"
        )
        Q = f"({q.name} + {b}*{m * mq})"
        self.line(f"for (int i = 0; i < {m}; i++) for (int c = 0; c < {mq}; c++) {Q}[i*{mq} + c] = i == c ? 1.0 : 0.0;")
        self.open(f"for (int j = {k} - 1; j >= 0; j--)")
        self._reflect(Q, mq, "j", W, n, T, m)
        self.close()
        self.close()
        return [q, r]

    def _reflect(self, X: str, width: int, first: str, W: str, wn: int, T: str, m: int) -> None:
        """Apply reflector j, H = I - tau_j v v^T with v = (1, W[j+1:m, j]) (W row-major of row width
        ``wn``), to columns ``first``..``width``-1 of the row-major m x ``width`` array X:
        X[j:, c] -= tau_j (v . X[j:, c]) v, in LAPACK's order of operations."""
        self.open(f"for (int c = {first}; c < {width}; c++)")
        self.line(f"double s = {X}[j*{width} + c];")
        self.line(f"for (int i = j + 1; i < {m}; i++) s += {W}[i*{wn} + j] * {X}[i*{width} + c];")
        self.line(f"s *= {T}[j];")
        self.line(f"{X}[j*{width} + c] -= s;")
        self.line(f"for (int i = j + 1; i < {m}; i++) {X}[i*{width} + c] -= s * {W}[i*{wn} + j];")
        self.close()

    TRIANGULAR_UNROLL = 32
    """A triangular solve with one right-hand side and at most this many unknowns is written out
    element by element (:meth:`_triangular_unrolled`)."""

    def _triangular_unrolled(self, X: str, m: int, stride: int, Aij, lower: bool, unit: bool, ct: str) -> None:
        """The substitution of :meth:`p_triangular_solve` for one right-hand side, unrolled: each
        unknown a local scalar (in a register), s = b_i, then s -= a_ij x_j for j in the loop's order
        and x_i = s / a_ii (unless the diagonal is unit): the same operations in the same order, the
        same bits, without the loop's loads and stores of x and its trip counts."""
        x = self.fresh("ts")
        for i in range(m) if lower else range(m - 1, -1, -1):  # a row a line (EngineOptions.max_native_lines)
            row = [f"{ct} {x}_{i} = {X}[{i * stride}];"]
            row += [f"{x}_{i} -= {Aij(i, j)} * {x}_{j};" for j in (range(i) if lower else range(i + 1, m))]
            if not unit:
                row.append(f"{x}_{i} = {x}_{i} / {Aij(i, i)};")
            self.line(" ".join(row))
        self.line(" ".join(f"{X}[{i * stride}] = {x}_{i};" for i in range(m)))

    def _batched_matrix(self, a, nb: int, m: int, transposed: bool):
        """Open the loop over the ``nb`` square matrices (m x m, rows in order) of ``a`` and give
        (the loop's index, ``Aij``): ``Aij(i, j)`` the C expression of element (i, j) of the current
        matrix, or of its transpose where ``transposed``."""
        bb = self.fresh("b")
        self.open(f"for (int {bb} = 0; {bb} < {nb}; {bb}++)")
        a = self.arr(a)
        A = f"({a.name if not a.known else self.static(a)} + {bb}*{m * m})"

        def Aij(i, j):
            return f"{A}[({j})*{m} + ({i})]" if transposed else f"{A}[({i})*{m} + ({j})]"

        return bb, Aij

    def p_triangular_solve(self, ins, outs, left_side, lower, transpose_a, conjugate_a, unit_diagonal, **_):
        """op(a) x = b (left_side) or x op(a) = b, op(a) = a or a^T; a triangular."""
        a, bmat = ins
        *batch, m, _ = a.shape
        out = self.new(bmat.shape, bmat.dtype)
        self.copy(out, bmat)
        nb = int(math.prod(batch))
        rows, cols = bmat.shape[-2], bmat.shape[-1]
        # x op(a) = b  <=>  op(a)^T x^T = b^T: a left solve with the other transpose, over b's rows
        eff_t = transpose_a if left_side else not transpose_a
        eff_lower = lower != eff_t  # op(a) lower triangular
        bb, Aij = self._batched_matrix(a, nb, m, eff_t)
        X = f"({out.name} + {bb}*{rows * cols})"
        # the right-hand sides: columns of b (left side) or rows of b (right side)
        nrhs, stride_rhs, stride_elem = (cols, 1, cols) if left_side else (rows, cols, 1)
        r = self.fresh("r")

        def x(i):
            return f"{X}[{r}*{stride_rhs} + ({i})*{stride_elem}]"

        order = f"for (int i = 0; i < {m}; i++)" if eff_lower else f"for (int i = {m} - 1; i >= 0; i--)"
        inner = "for (int j = 0; j < i; j++)" if eff_lower else f"for (int j = i + 1; j < {m}; j++)"
        if nrhs > 1 and stride_rhs == 1:
            # several right-hand sides side by side in memory: row i of x updated by whole rows,
            # each element by the same operations in the same order as below (x_i -= a_ij x_j
            # over j, then / a_ii), but reading and writing memory in order
            self.open(order)
            self.open(inner)
            self.line(f"const {self.ct(bmat.dtype)} a = {Aij('i', 'j')};")
            self.line(f"for (int {r} = 0; {r} < {nrhs}; {r}++) {x('i')} -= a * {x('j')};")
            self.close()
            if not unit_diagonal:
                self.line(f"const {self.ct(bmat.dtype)} d = {Aij('i', 'i')};")
                self.line(f"for (int {r} = 0; {r} < {nrhs}; {r}++) {x('i')} = {x('i')} / d;")
            self.close()
            self.close()
            return out
        if nrhs == 1 and m <= self.TRIANGULAR_UNROLL:
            self._triangular_unrolled(X, m, stride_elem, Aij, eff_lower, unit_diagonal, self.ct(bmat.dtype))
            self.close()
            return out
        self.open(f"for (int {r} = 0; {r} < {nrhs}; {r}++)")
        self.open(order)
        self.line(f"{self.ct(bmat.dtype)} s = {x('i')};")
        self.line(f"{inner} s -= {Aij('i', 'j')} * {x('j')};")
        self.line(f"{x('i')} = s;" if unit_diagonal else f"{x('i')} = s / {Aij('i', 'i')};")
        self.close()
        self.close()
        self.close()
        return out
