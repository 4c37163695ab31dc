"""The rules of the native translator for control flow: ``while``, ``cond`` and ``scan`` as C loops and
branches (a mixin of :class:`livens.engine.native.codegen.Translator`)."""

from __future__ import annotations

import numpy as np

from .emitter import Buf


class ControlRules:
    """Primitive rules ``p_<name>`` for loops and conditionals."""

    # --- control flow ----------------------------------------------------------------------------
    def _carry(self, init: list[Buf]) -> list[Buf]:
        """Fresh arrays holding the initial values of loop carries."""
        out = []
        for b in init:
            c = self.new(b.shape, b.dtype)
            self.copy(c, b)
            out.append(c)
        return out

    def _assign(self, dst: list[Buf], src: list[Buf]) -> None:
        """dst := src for loop carries, through temporaries where a source is one of the carries."""
        names = {d.name for d in dst}
        staged = []
        for d, s in zip(dst, src):
            if (self.refs(s) & names) and s.name != d.name:
                t = self.new(s.shape, s.dtype)
                self.copy(t, s)
                staged.append((d, t))
            else:
                staged.append((d, s))
        for d, s in staged:
            self.copy(d, s)

    MASKED_WHILE = False
    """True where even a predicate without a shape differs between the values computed at once
    (a lane kernel): every while loop then updates its carries only where its predicate holds."""

    def holds_somewhere(self, expr: str) -> str:
        """C truth value of a predicate element ``expr``: true where it holds (a lane kernel: in
        any lane)."""
        return expr

    def _while(self, ins, outs, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **_):
        """``lax.while_loop``. A predicate with a shape (what ``vmap`` makes of a while loop), or
        any predicate with :attr:`MASKED_WHILE`, runs the body while any of its elements is true
        and updates each carry only where its element is true, the predicate's axes being the
        carries' leading axes (as XLA lowers it)."""
        cconsts, bconsts = ins[:cond_nconsts], ins[cond_nconsts : cond_nconsts + body_nconsts]
        carry = self._carry(ins[cond_nconsts + body_nconsts :])
        pshape = tuple(cond_jaxpr.out_avals[0].shape)
        pred = self.fresh("c")
        self.line(f"int {pred};")
        mask = self.new(pshape, np.bool_) if pshape or self.MASKED_WHILE else None
        self.open("for (;;)")
        if mask is None:  # the condition in the loop's block: what it computes, the body may read
            (c,) = self.closed_with(cond_jaxpr, cconsts, carry)
            self.line(f"{pred} = {self.at(c, 0)};")
        else:
            self.open("")
            (c,) = self.closed_with(cond_jaxpr, cconsts, carry)
            self.copy(mask, c)
            i = self.fresh("i")
            self.line(
                f"{pred} = 0; for (int {i} = 0; {i} < {mask.size}; {i}++) "
                f"{pred} |= {self.holds_somewhere(f'{mask.name}[{i}]')};"
            )
            self.close()
        self.line(f"if (!{pred}) break;")
        self.open("")
        new = self.closed_with(body_jaxpr, bconsts, carry)
        if mask is not None:
            masked = []
            for old, upd in zip(carry, new):
                per = old.size // mask.size if mask.size else 0
                sel = self.new(old.shape, old.dtype)
                i = self.fresh("i")
                self.line(
                    f"for (int {i} = 0; {i} < {old.size}; {i}++) {sel.name}[{i}] = {mask.name}[{i} / {max(per, 1)}] "
                    f"? {self.rhs(self.at(upd, i if upd.size > 1 else 0), old.dtype)} : {old.name}[{i}];"
                )
                masked.append(sel)
            new = masked
        self._assign(carry, new)
        self.close()
        self.close()
        return carry

    def p_custom_linear_solve(self, ins, outs, const_lengths, jaxprs, **_):
        """x = solve(b): the forward value is the ``solve`` jaxpr on its constants and b."""
        n_mv, n_vm, n_solve = const_lengths.matvec, const_lengths.vecmat, const_lengths.solve
        n_consts = n_mv + n_vm + n_solve + const_lengths.transpose_solve
        consts = ins[n_mv + n_vm : n_mv + n_vm + n_solve]
        return self.closed_with(jaxprs.solve, consts, ins[n_consts:])

    def closed_with(self, cj, consts, args) -> list[Buf]:
        """A closed jaxpr whose own consts come first, then ``consts`` + ``args`` as its invars."""
        own = [Buf(None, np.shape(c), np.asarray(c).dtype, np.asarray(c)) for c in cj.consts]
        return self.jaxpr(cj.jaxpr, own, list(consts) + list(args))

    def p_cond(self, ins, outs, branches, **_):
        index, ops = ins[0], ins[1:]
        res = [self.new(a.shape, a.dtype) for a in outs]
        if index.known:
            k = min(max(int(index.value.ravel()[0]), 0), len(branches) - 1)
            self._cond_branch(branches[k], ops, res, "")
            return res
        k = self.fresh("k")
        self.line(f"int {k} = (int) {self.at(index, 0)};")
        for j, br in enumerate(branches):
            if j == 0:
                head = f"if ({k} <= 0)" if len(branches) > 1 else ""
            elif j == len(branches) - 1:
                head = "else"
            else:
                head = f"else if ({k} == {j})"
            self._cond_branch(br, ops, res, head)
        return res

    def _cond_branch(self, br, ops, res: list[Buf], head: str) -> None:
        """A branch of :meth:`p_cond` in the block ``head``, its results into the cond's arrays
        ``res``. A result that is an array the branch made (a step's new state, its shifted
        history) is written there directly: its declaration becomes a pointer to the cond's array
        (:meth:`~livens.engine.native.emitter.Emitter.declare_as`), and no copy of it ends the
        branch; the other results are copied."""
        self.open(head)
        body, start = self.lines, len(self.lines)
        vals = self.closed_with(br, [], ops)
        for d, s in zip(res, vals):
            if not self.declare_as(s, d, body, start):
                self.copy(d, s)
        self.close()

    interruptible = False
    """Whether the kernel's outermost scans (the chunk's steps) stop early where the caller's stop
    flag is set (:func:`translate`): the carry then holds the steps done, the records after them
    are not written, not even to the kernel's outputs (a chunk of millions of steps stopped early
    costs no copy of its unwritten rows)."""
    _looping = False

    def p_while(self, *args, **params):
        looping, self._looping = self._looping, True
        try:
            return self._while(*args, **params)
        finally:
            self._looping = looping

    def p_scan(self, *args, **params):
        outer = self.interruptible and self._main and not self._looping
        looping, self._looping = self._looping, True
        try:
            return self._scan(*args, check_stop=outer, **params)
        finally:
            self._looping = looping

    def _scan(self, ins, outs, jaxpr, num_consts, num_carry, length, reverse, check_stop=False, **_):
        consts = ins[:num_consts]
        carry = self._carry(ins[num_consts : num_consts + num_carry])
        xs = ins[num_consts + num_carry :]
        ys = [self.new(a.shape, a.dtype) for a in outs[num_carry:]]
        i = self.fresh("n")
        if check_stop:  # the steps taken before the stop flag was seen: the records written
            done = self.fresh("done")
            self.line(f"int {done} = {int(length)};")
            for y in ys:
                y.rows_written = (done, y.size // int(length))
        self.open(f"for (int {i} = 0; {i} < {int(length)}; {i}++)")
        if check_stop:
            self.line(f"if (*lv_stop) {{ {done} = {i}; break; }}")
        at = f"({int(length) - 1} - {i})" if reverse else i
        xslices = []
        for x in xs:
            step = x.size // int(length)
            name = self.static(x) if x.known else self.arr(x).name  # a known xs: a file-level constant
            xslices.append(Buf(f"({name} + {at}*{step})", x.shape[1:], x.dtype))
        new = self.closed_with(jaxpr, consts, carry + xslices)
        for y, v in zip(ys, new[num_carry:]):
            step = y.size // int(length)
            if v.size == 1:
                self.line(f"{y.name}[{at}*{step}] = {self.rhs(self.at(v, 0), y.dtype)};")
            elif v.elems is not None:
                self.assign(f"({y.name} + {at}*{step})", range(v.size), lambda x: x, [(a,) for a in v.elems], v.dtype)
            else:
                if v.known:
                    self.static_copy(y, self.static(v), step, f"{at}*{step}")
                else:
                    self.line(f"memcpy({y.name} + {at}*{step}, {v.name}, sizeof({y.name}[0]) * {step});")
        self._assign(carry, new[:num_carry])
        self.close()
        return carry + ys
