"""Where the program reads an array for the last time: an equation that overwrites its operand (an
LU factored in the matrix's own array, :meth:`AlgebraRules._lu_start`) may do so only there.

:class:`LastRead` keeps, for each jaxpr being written (a frame), the equation under way, the last
equation that reads each variable, the variables whose values are read from each C array and the
arrays that the jaxpr makes; :meth:`Translator.jaxpr` and :meth:`Translator.eqn` keep them up to
date (:meth:`LastRead._enter`, :meth:`LastRead._at`, :meth:`LastRead._held`).
"""

from __future__ import annotations

import re

from jax.extend import core as jcore

from .emitter import Buf

INLINE_CALLS = {
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
}
"""Primitives whose jaxpr the translator writes in line, run once where the call stands (a
loop's body or a cond's branches are not: their arguments are read again)."""


class LastRead:
    """A mixin of :class:`~livens.engine.native.codegen.Translator`: :meth:`_last_read` and
    :meth:`_forget`, with the frames they read."""

    @property
    def _frames(self) -> list:
        """The jaxprs being written, innermost last (:meth:`_enter`)."""
        if "_lu_frames" not in self.__dict__:
            self._lu_frames = []
        return self._lu_frames

    def _enter(self, jaxpr, consts, args) -> None:
        """A frame for ``jaxpr`` (its constvars bound to ``consts``, invars to ``args``) pushed:
        the last equation that reads each variable (the outputs' variables: never), the variables
        whose values are read from each C array (its arguments' too), the arrays made here (a call
        written in line: its caller's), and whether it is such a call. The caller pops it."""
        last = {}
        for i, e in enumerate(jaxpr.eqns):
            for v in e.invars:
                if isinstance(v, jcore.Var):
                    last[v] = i
        for v in jaxpr.outvars:
            if isinstance(v, jcore.Var):
                last[v] = len(jaxpr.eqns)
        parent = self._frames[-1] if self._frames else None
        inline = parent is not None and parent["prim"] in INLINE_CALLS
        frame = {"at": {id(e): i for i, e in enumerate(jaxpr.eqns)}, "last": last, "eqn": None, "prim": None}
        frame.update(holders={}, inline=inline, made=parent["made"] if inline else set())
        for v, b in zip(list(jaxpr.constvars) + list(jaxpr.invars), list(consts) + list(args)):
            for name in self.refs(b):
                frame["holders"].setdefault(name, []).append(v)
        self._frames.append(frame)

    def _at(self, eqn) -> None:
        """``eqn`` is the equation under way in the innermost frame."""
        if self._frames:
            frame = self._frames[-1]
            frame["eqn"], frame["prim"] = frame["at"].get(id(eqn)), eqn.primitive.name

    def _held(self, eqn, outs) -> None:
        """The outputs ``outs`` of ``eqn`` hold values read from their C arrays."""
        if self._frames:
            holders = self._frames[-1]["holders"]
            for v, b in zip(eqn.outvars, outs):
                for name in self.refs(b):
                    holders.setdefault(name, []).append(v)

    def new(self, shape, dtype) -> Buf:
        b = super().new(shape, dtype)
        if self._frames:
            self._frames[-1]["made"].add(b.name)
        return b

    def _forget(self, name: str) -> None:
        """The values of the array ``name`` that the translator keeps for later equations (an
        equation's outputs written before, :meth:`Translator.eqn`; its elements held in C scalars,
        :meth:`scalar`) forgotten: the array is about to hold other values."""
        word = re.compile(rf"\b{re.escape(name)}\b")
        for key, (_, ins, outs) in list(self._reused.items()):
            if any(name in self.refs(x) for x in list(ins) + list(outs)):
                del self._reused[key]
        for key in [k for k in self._scalars if word.search(k[0])]:
            del self._scalars[key]

    def _to_overwrite(self, a: Buf) -> Buf:
        """The C array in which an equation may overwrite a's values: a's own where the equation
        under way is the last to read it (:meth:`_last_read`; the values kept of it forgotten,
        :meth:`_forget`), else a new array, for the caller to copy a into (:meth:`Emitter.copy`
        of a to its own array writes nothing)."""
        if self._last_read(a):
            self._forget(a.name)
            return Buf(a.name, a.shape, a.dtype)
        return self.new(a.shape, a.dtype)

    def _last_read(self, b: Buf) -> bool:
        """Whether the equation under way is the last to read the C array of b: an array made by
        an equation (not a loop's carry, an argument, a constant or a part of another array, nor
        the array a list of elements was written to, :meth:`Emitter.arr`), every variable whose
        values are read from it (b's, views and reshapes of it) read by no later equation of the
        jaxpr being written and none of its outputs, and the same in the jaxprs that call it in
        line, after their calls (the arrays that such a call makes are its caller's: a loop's
        body or a cond's branch ends the chain, which must have made the array; so does the C
        function of a shared call, :meth:`Translator._write_function`)."""
        if b.known or b.elems is not None or b.rows_written is not None or b.name in self._stores:
            return False
        for frame in reversed(self._frames):
            if frame["eqn"] is None:
                return False
            if any(frame["last"].get(v, -1) > frame["eqn"] for v in frame["holders"].get(b.name, ())):
                return False
            if not frame["inline"]:
                return b.name in frame["made"]
        return False


__all__ = ["INLINE_CALLS", "LastRead"]
