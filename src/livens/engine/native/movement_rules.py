"""The rules of the native translator for primitives that move data: reshapes, broadcasts, slices,
concatenation, padding, dynamic slices, gathers, scatters and sorts (a mixin of
:class:`livens.engine.native.codegen.Translator`)."""

from __future__ import annotations

import math

import jax
import numpy as np

from .emitter import MAX_ELEMS, Buf, Unsupported, _ctype, _gather_fill, _gather_layout, _is_float, _strides, c_literal
from .folding import _np_gather, _window_offset


class MovementRules:
    """Primitive rules ``p_<name>`` for data movement (methods of the translator)."""

    # --- data movement ---------------------------------------------------------------------------
    def gather_loops(self, out: Buf, src: Buf, index_of) -> None:
        """out[idx] = src[index_of(idx)] over all indices of out (index_of returns a C expression)."""
        idx = self.loops(out.shape)
        self.line(f"{out.name}[{self.flat(idx, out.shape)}] = {self.rhs(self.at(src, index_of(idx)), out.dtype)};")
        self.end(idx)

    def p_reshape(self, ins, outs, **_):
        return self.alias(ins[0], outs[0].shape)

    p_squeeze = p_reshape
    p_expand_dims = p_reshape

    def p_broadcast_in_dim(self, ins, outs, shape, broadcast_dimensions, **_):
        src = ins[0]
        if src.size == 1:
            out = self.new(shape, src.dtype)
            if out.size == 1:
                self.line(f"{out.name}[0] = {self.rhs(self.at(src, 0), out.dtype)};")
            else:
                i = self.fresh("i")
                self.line(
                    f"for (int {i} = 0; {i} < {out.size}; {i}++) {out.name}[{i}] = {self.rhs(self.at(src, 0), out.dtype)};"
                )
            return out
        out = self.new(shape, src.dtype)
        st = _strides(src.shape)
        self.gather_loops(
            out,
            src,
            lambda idx: self.affine([(st[k], idx[d]) for k, d in enumerate(broadcast_dimensions) if src.shape[k] != 1]),
        )
        return out

    def p_transpose(self, ins, outs, permutation, **_):
        src = ins[0]
        out = self.new(outs[0].shape, src.dtype)
        st = _strides(src.shape)
        self.gather_loops(out, src, lambda idx: self.affine([(st[permutation[j]], idx[j]) for j in range(len(idx))]))
        return out

    def p_slice(self, ins, outs, start_indices, limit_indices, strides=None, **_):
        src = ins[0]
        shape = outs[0].shape
        steps = strides or (1,) * len(shape)
        st = _strides(src.shape)
        offset = sum(s * a for s, a in zip(st, start_indices))
        # a contiguous block: an alias into the source (or the run of its elements)
        if not src.known and self._contiguous(src.shape, start_indices, shape, steps):
            if src.elems is not None:
                return self.make(shape, src.dtype, src.elems[offset : offset + math.prod(shape)])
            return Buf(f"({src.name} + {offset})" if offset else src.name, shape, src.dtype)
        out = self.new(shape, src.dtype)
        self.gather_loops(out, src, lambda idx: self.affine([(s * k, i) for s, k, i in zip(st, steps, idx)], offset))
        return out

    @staticmethod
    def _contiguous(shape, start, out_shape, steps) -> bool:
        """Whether a slice is one contiguous run of the row-major source."""
        if any(s != 1 for s in steps):
            return False
        # all axes after the first one that is cut must be whole; the axes before it of length 1
        k = 0
        while k < len(shape) and out_shape[k] == 1:
            k += 1
        if k == len(shape):
            return True
        return all(out_shape[j] == shape[j] and start[j] == 0 for j in range(k + 1, len(shape)))

    def p_split(self, ins, outs, sizes, axis, **_):
        src = ins[0]
        res, start = [], 0
        for n, aval in zip(sizes, outs):
            begin = [0] * len(src.shape)
            begin[axis] = start
            limit = list(src.shape)
            limit[axis] = start + int(n)
            res.append(self.p_slice([src], [aval], begin, limit))
            start += int(n)
        return res

    def p_stack(self, ins, outs, axis, **_):
        """The operands along a new axis: a concatenation of the operands with that axis added."""
        shaped = [self.alias(b, b.shape[:axis] + (1,) + b.shape[axis:]) for b in ins]
        return self.p_concatenate(shaped, outs, axis)

    def p_unstack(self, ins, outs, axis, **_):
        """The slices along ``axis``, that axis removed."""
        src = ins[0]
        res = []
        for k, aval in enumerate(outs):
            begin = [0] * len(src.shape)
            begin[axis] = k
            limit = list(src.shape)
            limit[axis] = k + 1
            piece = self.p_slice(
                [src], [jax.core.ShapedArray(src.shape[:axis] + (1,) + src.shape[axis + 1 :], src.dtype)], begin, limit
            )
            res.append(self.alias(piece, aval.shape))
        return res

    def p_rev(self, ins, outs, dimensions, **_):
        src = ins[0]
        out = self.new(src.shape, src.dtype)
        st = _strides(src.shape)
        n = src.shape

        def index_of(idx):
            terms, off = [], 0
            for j, i in enumerate(idx):
                if j in dimensions:
                    terms.append((-st[j], i))
                    off += st[j] * (n[j] - 1)
                else:
                    terms.append((st[j], i))
            return self.affine(terms, off)

        self.gather_loops(out, src, index_of)
        return out

    def p_concatenate(self, ins, outs, dimension, **_):
        out = self.new(outs[0].shape, outs[0].dtype)
        sto = _strides(out.shape)
        off = 0
        for b in ins:
            if b.size:
                idx = self.loops(b.shape)
                target = self.affine(list(zip(sto, idx)), off * sto[dimension])
                self.line(f"{out.name}[{target}] = {self.rhs(self.at(b, self.flat(idx, b.shape)), out.dtype)};")
                self.end(idx)
            off += b.shape[dimension]
        return out

    def p_pad(self, ins, outs, padding_config, **_):
        src, val = ins
        if any(lo < 0 or hi < 0 for lo, hi, _ in padding_config):
            raise Unsupported("pad with negative padding")
        out = self.new(outs[0].shape, src.dtype)
        i = self.fresh("i")
        self.line(
            f"for (int {i} = 0; {i} < {out.size}; {i}++) {out.name}[{i}] = {self.rhs(self.at(val, 0), out.dtype)};"
        )
        if src.size:
            sto = _strides(out.shape)
            idx = self.loops(src.shape)
            off = sum(s * lo for s, (lo, _, _) in zip(sto, padding_config))
            target = self.affine([(s * (it + 1), v) for s, (_, _, it), v in zip(sto, padding_config, idx)], off)
            self.line(f"{out.name}[{target}] = {self.rhs(self.at(src, self.flat(idx, src.shape)), out.dtype)};")
            self.end(idx)
        return out

    def _starts(self, operand_shape, sizes, starts, read=None) -> list[str]:
        """C expressions of dynamic slice starts, clamped to [0, n - size] as in XLA; a start
        computed at run time is read by ``read(buf, 0)`` (default :meth:`at`; a lane kernel reads
        its lane)."""
        read = read or self.at
        out = []
        for n, s, b in zip(operand_shape, sizes, starts):
            hi = int(n) - int(s)
            if b.known:
                out.append(str(min(max(int(b.value.ravel()[0]), 0), hi)))
            else:
                v = self.fresh("s")
                self.line(f"int64_t {v} = (int64_t) {read(b, 0)};")
                self.line(f"{v} = {v} < 0 ? 0 : ({v} > {hi} ? {hi} : {v});")
                out.append(v)
        return out

    def p_dynamic_slice(self, ins, outs, slice_sizes, **_):
        src, starts = ins[0], ins[1:]
        s = self._starts(src.shape, slice_sizes, starts)
        out = self.new(outs[0].shape, src.dtype)
        st = _strides(src.shape)
        self.gather_loops(out, src, lambda idx: _window_offset(s, idx, st))
        return out

    def p_dynamic_update_slice(self, ins, outs, **_):
        src, upd, starts = ins[0], ins[1], ins[2:]
        s = self._starts(src.shape, upd.shape, starts)
        out = self.new(src.shape, src.dtype)
        self.copy(out, src)
        st = _strides(src.shape)
        idx = self.loops(upd.shape)
        target = _window_offset(s, idx, st)
        self.line(f"{out.name}[{target}] = {self.rhs(self.at(upd, self.flat(idx, upd.shape)), out.dtype)};")
        self.end(idx)
        return out

    def p_gather(self, ins, outs, dimension_numbers, slice_sizes, mode, fill_value=None, **params):
        src, ind = ins
        dn = dimension_numbers
        out = self.new(outs[0].shape, src.dtype)
        if ind.known:  # the source index of every output element, now: a table
            codes = np.arange(src.size, dtype=np.int64).reshape(src.shape)
            fill = src.size  # an out-of-bounds window (FILL_OR_DROP) reads the fill value
            table = _np_gather(codes, np.asarray(ind.value), dn, slice_sizes, mode)
            if table is None:  # a window out of bounds in fill mode, or batching dimensions: JAX says which
                with jax.ensure_compile_time_eval():
                    table = jax.lax.gather(
                        codes,
                        ind.value,
                        dn,
                        slice_sizes,
                        mode=mode,
                        fill_value=fill,
                        indices_are_sorted=params.get("indices_are_sorted", False),
                        unique_indices=params.get("unique_indices", False),
                    )
            table = np.asarray(table).ravel()
            if np.any(table == fill):
                raise Unsupported("gather out of bounds")
            self._table_copy(out, src, table)
            return out
        # runtime indices: the index vector is the last axis of the indices, whose other axes are
        # the output's batch axes in order; an operand batching axis takes the index of its paired
        # indices batching axis (vmap of a gather)
        out_shape = out.shape
        batch_axes, window, st_src, st_ind = _gather_layout(src.shape, ind.shape, out_shape, dn)
        fill_mode = "FILL" in str(mode)  # a window out of bounds reads the fill value, else it is clamped
        idx = self.loops(out_shape)
        base = self.affine([(st_ind[k], idx[a]) for k, a in enumerate(batch_axes)])
        starts = []
        oob = self.fresh("oob")
        if fill_mode:
            self.line(f"int {oob} = 0;")
        known = self.bounds(ind)  # indices known in bounds (an LU's permutation) need no clamp
        for k, dim in enumerate(dn.start_index_map):
            s = self.fresh("s")
            hi = src.shape[dim] - slice_sizes[dim]
            self.line(f"int64_t {s} = (int64_t) {self.at(ind, f'{base} + {k * st_ind[-1]}')};")
            if known is not None and 0 <= known[0] and known[1] <= hi:
                pass
            elif fill_mode:
                self.line(f"{oob} |= ({s} < 0) | ({s} > {hi});")
            else:
                self.line(f"{s} = {s} < 0 ? 0 : ({s} > {hi} ? {hi} : {s});")
            starts.append((dim, s))
        terms = [
            f"{idx[batch_axes[ib]]}*{st_src[ob]}"
            for ob, ib in zip(getattr(dn, "operand_batching_dims", ()), getattr(dn, "start_indices_batching_dims", ()))
        ]
        for dim, s in starts:
            terms.append(f"{s}*{st_src[dim]}")
        for j, dim in enumerate(window):
            terms.append(f"{idx[dn.offset_dims[j]]}*{st_src[dim]}")
        value = self.at(src, " + ".join(terms) or "0")
        if fill_mode:  # the element is not read where the window is out of bounds
            value = f"({oob} ? {c_literal(_gather_fill(fill_value, src.dtype), src.dtype)} : {value})"
        self.line(f"{out.name}[{self.flat(idx, out_shape)}] = {value};")
        self.end(idx)
        return out

    def _table_copy(self, out: Buf, src: Buf, table) -> None:
        """out[i] = src[table[i]]; an arithmetic progression as a loop, else a constant table."""
        n = out.size
        if n == 0:
            return
        if n == 1:
            self.line(f"{out.name}[0] = {self.rhs(self.at(src, int(table[0])), out.dtype)};")
            return
        step = table[1] - table[0]
        if np.all(np.diff(table) == step):
            i = self.fresh("i")
            self.line(
                f"for (int {i} = 0; {i} < {n}; {i}++) {out.name}[{i}] = "
                f"{self.rhs(self.at(src, self.affine([(int(step), i)], int(table[0]))), out.dtype)};"
            )
            return
        tname = self.static(Buf(None, (n,), np.int32, table.astype(np.int32)))
        i = self.fresh("i")
        self.line(
            f"for (int {i} = 0; {i} < {n}; {i}++) {out.name}[{i}] = {self.rhs(self.at(src, f'{tname}[{i}]'), out.dtype)};"
        )

    def _scatter_table(self, operand: Buf, ind: Buf, upd: Buf, dn, mode):
        """The operand index of every update element, for indices known now (or Unsupported)."""
        if not ind.known:
            raise Unsupported("scatter with runtime indices")
        if getattr(dn, "operand_batching_dims", ()):
            raise Unsupported("scatter with batching dimensions")
        window = list(dn.update_window_dims)
        slice_sizes, j = [], 0
        for d in range(len(operand.shape)):
            if d in dn.inserted_window_dims:
                slice_sizes.append(1)
            else:
                slice_sizes.append(upd.shape[window[j]])
                j += 1
        gdn = jax.lax.GatherDimensionNumbers(
            offset_dims=tuple(window),
            collapsed_slice_dims=tuple(dn.inserted_window_dims),
            start_index_map=tuple(dn.scatter_dims_to_operand_dims),
        )
        codes = np.arange(operand.size, dtype=np.int64).reshape(operand.shape)
        clip = jax.lax.GatherScatterMode.CLIP
        # the scatter's targets as a gather's sources, with NumPy (JAX would compile a program per
        # shape): a clipping scatter clamps its windows like the gather; any other drops those out
        # of bounds, which the fill-mode gather reports (None)
        if jax.lax.GatherScatterMode.from_any(mode) == clip:
            table = _np_gather(codes, np.asarray(ind.value), gdn, tuple(slice_sizes), clip)
        else:
            table = _np_gather(
                codes, np.asarray(ind.value), gdn, tuple(slice_sizes), jax.lax.GatherScatterMode.FILL_OR_DROP
            )
            if table is None:
                raise Unsupported("scatter out of bounds")
        table = np.asarray(table).ravel()
        if table.size != upd.size:
            raise Unsupported("scatter out of bounds")
        return table

    def _scatter_runtime(self, operand: Buf, ind: Buf, upd: Buf, dn, mode, op: str) -> Buf:
        """A scatter whose indices are computed at run time: every update element goes to its
        operand element (XLA's semantics: the update's scatter axes are the indices' batch axes in
        order, its window axes the operand's axes that are not inserted nor batching axes); a
        window out of bounds is dropped, or clamped in CLIP mode. A lane kernel scatters lane by
        lane (hooks :meth:`_each_lane` and :meth:`_lane_at`), each lane's updates in the single
        kernel's order."""
        out = self.new(operand.shape, operand.dtype)
        self.copy(out, operand)
        lanes = self._each_lane()
        window = list(dn.update_window_dims)
        scatter_axes = [a for a in range(len(upd.shape)) if a not in window]
        op_window = [
            a
            for a in range(len(operand.shape))
            if a not in dn.inserted_window_dims and a not in getattr(dn, "operand_batching_dims", ())
        ]
        sizes = {dim: upd.shape[window[j]] for j, dim in enumerate(op_window)}
        st_op, st_ind = _strides(operand.shape), _strides(ind.shape)
        idx = self.loops(upd.shape)
        base = self.affine([(st_ind[k], idx[a]) for k, a in enumerate(scatter_axes)])
        clip = "CLIP" in str(mode)
        terms, inside = [], []
        for k, dim in enumerate(dn.scatter_dims_to_operand_dims):
            v = self.fresh("s")
            hi = operand.shape[dim] - sizes.get(dim, 1)
            self.line(f"int64_t {v} = (int64_t) {self._lane_at(ind, f'{base} + {k * st_ind[-1]}')};")
            if clip:
                self.line(f"{v} = {v} < 0 ? 0 : ({v} > {hi} ? {hi} : {v});")
            else:
                inside.append(f"{v} >= 0 && {v} <= {hi}")
            terms.append(f"{v}*{st_op[dim]}")
        terms += [f"{idx[window[j]]}*{st_op[dim]}" for j, dim in enumerate(op_window)]
        terms += [
            f"{idx[scatter_axes[ib]]}*{st_op[ob]}"
            for ob, ib in zip(
                getattr(dn, "operand_batching_dims", ()), getattr(dn, "scatter_indices_batching_dims", ())
            )
        ]
        target = self._lane_at(out, " + ".join(terms) or "0")
        value = self._lane_at(upd, self.flat(idx, upd.shape))
        stmt = f"{target} += {value};" if op == "add" else f"{target} = {value};"
        self.line(f"if ({' && '.join(inside)}) {stmt}" if inside else stmt)
        self.end(idx)
        if lanes:
            self.close()
        return out

    def _lane_at(self, b: Buf, index) -> str:
        """Element ``index`` of b in the lane under way (a lane kernel, in the loop that
        :meth:`_each_lane` opens); a single kernel's :meth:`at`."""
        return self.at(b, index)

    def _scatter_loop(self, operand: Buf, upd: Buf, table, assign: str) -> Buf:
        """The operand with update element i written (``assign`` "=") or added ("+=") at its
        operand element table[i], indices known now: one loop over a constant table."""
        out = self.new(operand.shape, operand.dtype)
        self.copy(out, operand)
        tname = self.static(Buf(None, (table.size,), np.int32, table.astype(np.int32)))
        i = self.fresh("i")
        self.line(
            f"for (int {i} = 0; {i} < {table.size}; {i}++) {out.name}[{tname}[{i}]] {assign} {self.rhs(self.at(upd, i), out.dtype)};"
        )
        return out

    def p_scatter_add(self, ins, outs, dimension_numbers, mode, **_):
        operand, ind, upd = ins
        if not ind.known or getattr(dimension_numbers, "operand_batching_dims", ()):
            return self._scatter_runtime(operand, ind, upd, dimension_numbers, mode, "add")
        table = self._scatter_table(operand, ind, upd, dimension_numbers, mode)
        if (
            (upd.elems is not None or operand.elems is not None or operand.known)
            and operand.size <= MAX_ELEMS
            and _is_float(operand.dtype)
        ):
            # element by element: each target is its operand element plus its updates, in order
            dt = operand.dtype
            sums = [[a] for a in self.atoms(operand)]
            for a, k in zip(self.atoms(upd), table.tolist()):
                if not (a[0] is None and a[1] == 0):
                    sums[k].append(a)
            result, exprs = [], []
            for k, terms in enumerate(sums):
                if len(terms) > 1 and terms[0][0] is None and terms[0][1] == 0:
                    terms = terms[1:]  # 0 + u is u (but for the sign of a zero u)
                result.append(terms[0] if len(terms) == 1 else None)
                if len(terms) > 1:
                    exprs.append((k, " + ".join(self.text(a, dt) for a in terms)))
            return self.computed(operand.shape, dt, result, exprs)
        return self._scatter_loop(operand, upd, table, "+=")

    def p_scatter(self, ins, outs, dimension_numbers, mode, **_):
        """Where two updates land on one element, the last one wins (XLA leaves that unspecified)."""
        operand, ind, upd = ins
        if not ind.known or getattr(dimension_numbers, "operand_batching_dims", ()):
            return self._scatter_runtime(operand, ind, upd, dimension_numbers, mode, "set")
        table = self._scatter_table(operand, ind, upd, dimension_numbers, mode)
        if len(set(table.tolist())) != table.size:
            raise Unsupported("scatter with repeated indices")
        return self._scatter_loop(operand, upd, table, "=")

    SORT_REFUSAL = "sort other than by one integer key"

    def p_sort(self, ins, outs, dimension, is_stable, num_keys, **_):
        """A stable sort along ``dimension`` by one integer key, the other operands carried along
        (insertion sort: the arrays sorted here are a permutation's few entries, as in the
        transposed LU solve of a reverse pass). A lane kernel sorts each lane by its own key
        through the hooks :meth:`_sort_element`, :meth:`_sort_scalar` and :meth:`_each_lane`."""
        if num_keys != 1 or not np.issubdtype(ins[0].dtype, np.integer):
            raise Unsupported(self.SORT_REFUSAL)
        shape = ins[0].shape
        n = shape[dimension]
        res = [self.new(shape, b.dtype) for b in ins]
        for dst, src in zip(res, ins):
            self.copy(dst, src)
        st = _strides(shape)
        others = [d for d in range(len(shape)) if d != dimension]
        lanes = self._each_lane()
        idx = self.loops([shape[d] for d in others])
        base = " + ".join([f"{i}*{st[d]}" for i, d in zip(idx, others)]) or "0"

        def at(x, j):
            return self._sort_element(x, f"{base} + {j}*{st[dimension]}")

        self.open(f"for (int i = 1; i < {n}; i++)")
        self.line(" ".join(f"{self._sort_scalar(x)} t{k} = {at(x, 'i')};" for k, x in enumerate(res)))
        self.line("int j = i - 1;")
        self.open(f"while (j >= 0 && {at(res[0], 'j')} > t0)")
        for x in res:
            self.line(f"{at(x, '(j + 1)')} = {at(x, 'j')};")
        self.line("j--;")
        self.close()
        for k, x in enumerate(res):
            self.line(f"{at(x, '(j + 1)')} = t{k};")
        self.close()
        self.end(idx)
        if lanes:
            self.close()
        return res

    def _each_lane(self) -> bool:
        """Open a loop over the lanes where the kernel has them (True if it opened one)."""
        return False

    def _sort_element(self, x, offset: str) -> str:
        return f"{x.name}[{offset}]"

    def _sort_scalar(self, x) -> str:
        return _ctype(x.dtype)
