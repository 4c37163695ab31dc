"""The C emitter of the native translator: C types and literals, the :class:`Buf` that stands for
an array (a C array, a set of known values, or C expressions per element) and the :class:`Emitter`
that writes statements, loop nests and arrays (:mod:`livens.engine.native.codegen` puts the
primitive rules on top of it)."""

from __future__ import annotations

import math

import numpy as np


class Unsupported(Exception):
    """The program holds something this translator does not handle (the caller falls back to XLA)."""


CTYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int8): "int8_t",
    np.dtype(np.uint64): "uint64_t",
    np.dtype(np.uint32): "uint32_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.bool_): "uint8_t",
}

MAX_LOCAL_ELEMENTS = 400_000
"""The most elements the arrays on the C stack hold in all: further arrays of the kernel's own
function live in the scratch memory (as large ones do), and a called function that would pass it
is not translated."""
SCRATCH_BYTES = 1 << 16
"""Arrays of the kernel's function of this many bytes or more live in the scratch memory that
the caller passes (:func:`translate`), not on the C stack."""


def _ctype(dtype) -> str:
    try:
        return CTYPES[np.dtype(dtype)]
    except KeyError:
        raise Unsupported(f"dtype {dtype}") from None


_KINDS: dict = {}  # dtype (or scalar type) -> its kind for literals (_kind)


def _kind(dtype) -> str:
    """What :func:`c_literal` writes a value of ``dtype`` as: "b" (bool), "f" (floating), "l"
    (int64), "u" (uint64) or "i" (another integer); looked up once per dtype (the translator asks
    for every element it writes)."""
    try:
        return _KINDS[dtype]
    except (KeyError, TypeError):
        pass
    d = np.dtype(dtype)
    if d == np.bool_:
        kind = "b"
    elif np.issubdtype(d, np.floating):
        kind = "f"
    elif d == np.dtype(np.int64):
        kind = "l"
    elif d == np.dtype(np.uint64):
        kind = "u"
    else:
        kind = "i"
    try:
        _KINDS[dtype] = kind
    except TypeError:  # an unhashable spelling of a dtype
        pass
    return kind


def _is_float(dtype) -> bool:
    return _kind(dtype) == "f"


def _strides(shape) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= int(n)
    return out[::-1]


def _gather_layout(src_shape, ind_shape, out_shape, dn):
    """The layout of a gather with runtime indices: the output's batch axes (those not in a window),
    the operand's window axes (not collapsed, not batching), and the strides of operand and
    indices."""
    batch_axes = [a for a in range(len(out_shape)) if a not in dn.offset_dims]
    window = [
        a
        for a in range(len(src_shape))
        if a not in dn.collapsed_slice_dims and a not in getattr(dn, "operand_batching_dims", ())
    ]
    return batch_axes, window, _strides(src_shape), _strides(ind_shape)


def _gather_fill(fill_value, dtype):
    """The value a gather in fill mode reads out of bounds: ``fill_value``, else JAX's default (NaN
    for floats, the most negative signed or the largest unsigned integer, True)."""
    if fill_value is not None:
        return fill_value
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return True
    if np.issubdtype(dtype, np.floating):
        return np.nan
    info = np.iinfo(dtype)
    return info.min if np.issubdtype(dtype, np.signedinteger) else info.max


def c_literal(x, dtype) -> str:
    """A C literal for the scalar x of ``dtype`` (floats exact, as hexadecimal)."""
    kind = _kind(dtype)
    if kind == "b":
        return "1" if bool(x) else "0"
    if kind == "f":
        x = float(x)
        if math.isnan(x):
            return "NAN"
        if math.isinf(x):
            return "INFINITY" if x > 0 else "(-INFINITY)"
        s = x.hex()
        return f"({s})" if x < 0 else s
    x = int(x)
    if kind == "l":
        return f"({x + 1}LL - 1)" if x == _INT64_MIN else f"({x}LL)"  # the least: its magnitude is no literal
    if kind == "u":
        return f"{x}ULL"
    return f"({x})"


_INT64_MIN = int(np.iinfo(np.int64).min)


class Buf:
    """An array value of the program: a C array (or a pointer into one), a value known now, or a
    list of elements (``elems``) each of which is an element of some C array or a known scalar.

    An element ("atom") is ``(name, index)``, the C expression ``name[index]``, or ``(None, x)``,
    the known scalar x. Moving data around (transpose, slice, concatenate, gather with known
    indices, ...) and the simplifications of :meth:`Translator.simplify` then cost no code: the
    output's elements are the operands' elements in another order, some known zeros among them.
    Such a Buf is written to a C array (:meth:`Emitter.arr`) only where a loop needs one."""

    def __init__(self, name: str | None, shape, dtype, value=None, elems=None):
        self.name, self.shape, self.dtype = name, tuple(int(n) for n in shape), np.dtype(dtype)
        self.value = None if value is None else np.asarray(value, dtype=self.dtype).reshape(self.shape)
        self.size = int(math.prod(self.shape))
        self.elems = elems
        self.stored = None  # the C array it was written to
        self.slot = None  # where in the code it was made: (lines, depth) to write it there
        self.rows_written = None  # (C count, elements per row): an interruptible scan's records, stopped early

    @property
    def known(self) -> bool:
        return self.value is not None


class _Atoms:
    """The atoms of a C array or a known value, element ``i`` made when it is read (:meth:`Emitter.atom_view`)."""

    __slots__ = ("name", "values")

    def __init__(self, b: Buf):
        self.name, self.values = b.name, (b.value.ravel() if b.known else None)

    def __getitem__(self, i):
        if self.values is None:
            return (self.name, int(i))
        return (None, self.values[i].item())


class Emitter:
    """Writes the C function of a closed jaxpr (:func:`translate`)."""

    def __init__(self):
        self.statics: list[str] = []
        self.functions: list[str] = []  # C functions of called jaxprs (Translator.call_shared)
        self.shared: dict = {}
        self._keys: dict = {}  # id of a called jaxpr -> (it, its key): Translator._key
        self._static_names: dict = {}
        self.lines: list[str] = []
        self.depth = 1
        self.scope: tuple = ()  # the blocks the current line is in
        self.blocks = 0
        self._scalars: dict = {}
        self._reused: dict = {}  # equations written: key -> (block, operands, outputs) (Translator.eqn)
        self.count = 0
        self.elements = 0
        self.scratch = 0  # bytes of the large arrays, kept off the stack (:meth:`new`)
        self._main = True  # writing the kernel's own function (not a called one)
        self._declared: dict = {}  # array name -> (the list of lines, the index) of its declaration (new)
        self._bounds: dict = {}  # integer array name -> (least, greatest) value it can hold (bounds)
        self._stores: set = set()  # the arrays that Bufs of elements were written to (arr)

    # --- what a value is in C (the lanes of :mod:`livens.engine.native.member_lanes` change these) ----------
    def ct(self, dtype) -> str:
        """The C type of a value of ``dtype`` in the kernel's arrays and scalars."""
        return _ctype(dtype)

    def rhs(self, expr: str, dtype) -> str:
        """``expr`` as the value assigned to an element or a scalar of ``dtype``."""
        return expr

    def literal(self, x, dtype) -> str:
        """The C literal of the known scalar x of ``dtype``."""
        return c_literal(x, dtype)

    def static_copy(self, dst: "Buf", name: str, n: int, offset: str = "") -> None:
        """``dst[offset + i] = name[i]`` for i < n, from the file-level constant array ``name``."""
        at = f"{dst.name} + {offset}" if offset else dst.name
        self.line(f"memcpy({at}, {name}, sizeof({dst.name}[0]) * {n});")

    # --- names and declarations -------------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def open(self, head: str) -> None:
        self.line(head + " {")
        self.depth += 1
        self.blocks += 1
        self.scope = self.scope + (self.blocks,)

    def close(self) -> None:
        self.depth -= 1
        self.scope = self.scope[:-1]
        self.line("}")

    def itemsize(self, dtype) -> int:
        """Bytes of an element of ``dtype`` in the kernel's arrays."""
        return np.dtype(dtype).itemsize

    def new(self, shape, dtype) -> Buf:
        """A new local array: on the stack, or where it is large (:data:`SCRATCH_BYTES`, the
        records of a chunk) or the stack is full (:data:`MAX_LOCAL_ELEMENTS`, the many mid-sized
        matrices of a system with a few hundred unknowns) in the kernel's scratch memory, which
        the caller gives it (a stack of a thread may be 1 MiB or less)."""
        b = Buf(self.fresh(), shape, dtype)
        nbytes = max(b.size, 1) * self.itemsize(b.dtype)
        ct = self.ct(b.dtype)
        if self._main and (nbytes >= SCRATCH_BYTES or self.elements + b.size > MAX_LOCAL_ELEMENTS):
            self.line(f"{ct} *{b.name} = ({ct} *) (lv_scratch + {self.scratch});")
            self.scratch += -(-nbytes // 64) * 64  # each array aligned to 64 bytes
        else:
            self.elements += b.size
            if self.elements > MAX_LOCAL_ELEMENTS:
                raise Unsupported("arrays too large for one C function")
            self.line(f"{ct} {b.name}[{max(b.size, 1)}];")
        self._declared[b.name] = (self.lines, len(self.lines) - 1)
        return b

    def bounds(self, b: Buf) -> tuple | None:
        """(least, greatest) value that the integer array b can hold, where the program says (an
        LU's pivots and permutation: row indices) or b is known; None where unknown. Kept by C
        array (every array is written once), so that b's elements moved elsewhere keep them."""
        if not np.issubdtype(b.dtype, np.integer) or b.size == 0:
            return None
        if b.known:
            return int(b.value.min()), int(b.value.max())
        if b.elems is None:
            return self._bounds.get(_base(b.name))
        lo = hi = None
        for name, x in b.elems:
            r = (int(x), int(x)) if name is None else self._bounds.get(_base(name))
            if r is None:
                return None
            lo, hi = (r[0], r[1]) if lo is None else (min(lo, r[0]), max(hi, r[1]))
        return lo, hi

    def declare_as(self, b: Buf, dst: Buf, lines: list, start: int) -> bool:
        """Make the array b, declared at or after ``lines[start]`` (the block being written), the
        array ``dst`` itself: its declaration becomes a pointer to dst, so that what is written to
        b is written to dst, and no copy is needed. False (nothing changed) where b is not such an
        array of dst's size and type, its declaration not found there as :meth:`new` wrote it."""
        if b.known or b.elems is not None or b.rows_written is not None or b.name is None:
            return False
        if b.size != dst.size or b.dtype != dst.dtype:
            return False
        at = self._declared.get(b.name)
        if at is None or at[0] is not lines or not start <= at[1] < len(lines):
            return False
        text, ct = lines[at[1]], self.ct(b.dtype)
        if not isinstance(text, str):
            return False
        decl = text.strip()
        if decl != f"{ct} {b.name}[{max(b.size, 1)}];" and not decl.startswith(
            f"{ct} *{b.name} = ({ct} *) (lv_scratch + "
        ):
            return False
        lines[at[1]] = f"{text[: len(text) - len(text.lstrip())]}{ct} *{b.name} = {dst.name};"
        del self._declared[b.name]
        return True

    def alias(self, src: Buf, shape) -> Buf:
        """The same elements in another shape (row-major: reshape, squeeze, expand_dims)."""
        if src.known:
            return Buf(None, shape, src.dtype, src.value.reshape(shape))
        if src.elems is not None:
            out = Buf(None, shape, src.dtype, elems=src.elems)
            out.slot = src.slot
            return out
        return Buf(src.name, shape, src.dtype)

    # --- elements --------------------------------------------------------------------------------
    @staticmethod
    def atoms(b: Buf) -> list:
        """The elements of b as atoms (see :class:`Buf`)."""
        if b.elems is not None:
            return b.elems
        if b.known:
            return [(None, x) for x in b.value.ravel().tolist()]
        return [(b.name, i) for i in range(b.size)]

    @staticmethod
    def atom_view(b: Buf):
        """b's atoms (:meth:`atoms`) by index, each made when it is read: for a product that reads
        a few elements of a large operand."""
        if b.elems is not None:
            return b.elems
        return _Atoms(b)

    @staticmethod
    def known_zeros(b: Buf) -> np.ndarray:
        """Which elements of b (flat) are known zeros, as booleans."""
        if b.elems is not None:
            return np.array([a[0] is None and a[1] == 0 for a in b.elems], dtype=bool)
        if b.known:
            return np.asarray(b.value.ravel() == 0, dtype=bool)
        return np.zeros(b.size, dtype=bool)

    def text(self, atom, dtype) -> str:
        name, x = atom
        if name is None:
            return self.literal(x, dtype)
        return name if x is None else f"{name}[{x}]"

    def computed(self, shape, dtype, result: list, exprs: list) -> Buf:
        """The Buf of the elements ``result`` with those at the indices ``exprs`` lists (pairs
        ``(k, C expression)``) computed: into C scalars for a small array, into a C array for a
        larger one (whose elements later loops can run over)."""
        if len(result) <= SCALAR_MAX:
            for k, e in exprs:
                result[k] = self.scalar(e, dtype)
        elif exprs:
            out = self.new(shape, dtype)
            for k, e in exprs:
                self.line(f"{out.name}[{k}] = {self.rhs(e, dtype)};")
                result[k] = (out.name, k)
        return self.make(shape, dtype, result)

    def scalar(self, expr: str, dtype):
        """A C scalar (an atom ``(name, None)``) holding expr: a register to the compiler where
        an array element is memory it must track. The same expression in the same or an enclosed
        block is the same scalar: every array an expression reads is written whole before it is
        read and not after, but for loop carries, which change only at the end of their loop's
        body, after the last expression of the body is written."""
        key = (expr, np.dtype(dtype).str)
        hit = self._scalars.get(key)
        if hit is not None and self.scope[: len(hit[0])] == hit[0]:
            return hit[1]
        t = self.fresh("t")
        self.line(f"const {self.ct(dtype)} {t} = {self.rhs(expr, dtype)};")
        self._scalars[key] = (self.scope, (t, None))
        return (t, None)

    def make(self, shape, dtype, atoms: list) -> Buf:
        """A Buf of these elements: a known value where all are known, the C array itself where
        they are a whole contiguous run of one, else a Buf of elements."""
        shape = tuple(int(n) for n in shape)
        if all(a[0] is None for a in atoms):
            return Buf(None, shape, dtype, np.array([a[1] for a in atoms], dtype=dtype))
        name, i0 = atoms[0]
        if name is not None and i0 is not None and all(a[0] == name and a[1] == i0 + k for k, a in enumerate(atoms)):
            return Buf(f"({name} + {i0})" if i0 else name, shape, dtype)
        out = Buf(None, shape, dtype, elems=atoms)
        out.slot = ([], self.depth)
        self.lines.append(out.slot[0])
        return out

    def assign(self, dst: str, ks, fn, operands, dtype, out_dtype=None) -> None:
        """``dst[k] = fn(texts of operands[k])`` for the indices ks (ascending), where operands[k]
        is a tuple of atoms, of the dtype ``dtype`` (or a tuple of one dtype per operand). Runs of
        consecutive k over which every operand moves by a fixed step through one array (or stays
        one known value) become loops."""
        dts = tuple(dtype) if isinstance(dtype, (tuple, list)) else None
        odt = out_dtype if out_dtype is not None else dtype
        j, n = 0, len(ks)
        while j < n:
            e = j + 1
            steps = None
            while e < n and ks[e] == ks[e - 1] + 1:
                prev, cur = operands[e - 1], operands[e]
                st = []
                for a, b in zip(prev, cur):
                    if a[0] != b[0] or (a[0] is None and a[1] != b[1]) or (a[0] is not None and a[1] is None):
                        break
                    st.append(0 if a[0] is None else b[1] - a[1])
                else:
                    if steps is None or st == steps:
                        steps = st
                        e += 1
                        continue
                break
            if e - j >= 3:
                i = self.fresh("i")
                texts = [
                    self.text(a, dts[p] if dts else dtype)
                    if a[0] is None
                    else f"{a[0]}[{self.affine([(st, i)], a[1])}]"
                    for p, (a, st) in enumerate(zip(operands[j], steps))
                ]
                self.line(
                    f"for (int {i} = 0; {i} < {e - j}; {i}++) {dst}[{self.affine([(1, i)], ks[j])}] = {self.rhs(fn(*texts), odt)};"
                )
            else:
                e = j + 1
                texts = [self.text(a, dts[p] if dts else dtype) for p, a in enumerate(operands[j])]
                self.line(f"{dst}[{ks[j]}] = {self.rhs(fn(*texts), odt)};")
            j = e

    def arr(self, b: Buf) -> Buf:
        """b as a C array. A Buf of elements is written to a new one where it was made (not in a
        loop that reads it), once."""
        if b.elems is None:
            return b
        if b.stored is None:
            saved = self.lines, self.depth
            self.lines, self.depth = b.slot
            try:
                out = self.new(b.shape, b.dtype)
                self.assign(out.name, range(b.size), lambda x: x, [(a,) for a in b.elems], b.dtype)
            finally:
                self.lines, self.depth = saved
            b.stored = out
            self._stores.add(out.name)
        return b.stored

    def view(self, b: Buf):
        """``(array, offset, strides)`` through which a loop reads b: element (i, j, ...) is
        ``array[offset + i*strides[0] + j*strides[1] + ...]``. A Buf of elements that all lie in
        one array at such places (a transpose, a strided slice, a broadcast of a C array) is read
        in place; another is written to an array first (:meth:`arr`)."""
        if b.elems is not None and b.size > 1:
            names = {a[0] for a in b.elems}
            if len(names) == 1 and None not in names and b.elems[0][1] is not None:
                idx = np.array([a[1] for a in b.elems], dtype=np.int64).reshape(b.shape)
                off = int(idx.ravel()[0])
                strides = [int(np.take(idx, 1, axis=d).ravel()[0] - off) if n > 1 else 0 for d, n in enumerate(b.shape)]
                grid = off + sum(
                    st * np.arange(n).reshape([-1 if k == d else 1 for k in range(len(b.shape))])
                    for d, (st, n) in enumerate(zip(strides, b.shape))
                )
                if np.array_equal(idx, np.broadcast_to(grid, b.shape)):
                    return next(iter(names)), off, strides
        b = self.arr(b)
        name = self.static(b) if b.known else b.name
        return name, 0, _strides(b.shape)

    @staticmethod
    def refs(b: Buf) -> set:
        """The C arrays (their base names) that b's elements are read from."""
        names = {a[0] for a in b.elems} if b.elems is not None else ({b.name} if not b.known else set())
        return {n.strip("()").split(" ")[0] for n in names if n is not None}

    def static(self, b: Buf) -> str:
        """The name of a file-level constant array holding b's known value."""
        flat = b.value.ravel()
        key = (b.dtype.str, flat.tobytes())
        name = self._static_names.get(key)
        if name is None:
            name = f"K{len(self._static_names)}"
            vals = ", ".join([c_literal(x, b.dtype) for x in flat.tolist()]) or "0"
            self.statics.append(f"static const {_ctype(b.dtype)} {name}[{max(flat.size, 1)}] = {{{vals}}};")
            self._static_names[key] = name
        return name

    def at(self, b: Buf, index) -> str:
        """C expression of element ``index`` (an int or a C index expression) of b."""
        if b.elems is not None:
            if isinstance(index, (int, np.integer)):
                return self.text(b.elems[int(index)], b.dtype)
            return self.at(self.arr(b), index)
        if b.known:
            if b.size == 1:
                return self.literal(b.value.ravel()[0], b.dtype)
            if isinstance(index, (int, np.integer)):
                return self.literal(b.value.ravel()[int(index)], b.dtype)
            return f"{self.static(b)}[{index}]"
        return f"{b.name}[{index}]"

    def copy(self, dst: Buf, src: Buf) -> None:
        """dst[:] = src[:] (same size)."""
        if src.elems is not None:
            self.assign(dst.name, range(src.size), lambda x: x, [(a,) for a in src.elems], src.dtype)
            return
        if src.known or dst.name != src.name:
            if src.size == 1:
                self.line(f"{dst.name}[0] = {self.rhs(self.at(src, 0), dst.dtype)};")
            elif src.known:
                self.static_copy(dst, self.static(src), src.size)
            else:
                self.line(f"memcpy({dst.name}, {src.name}, sizeof({dst.name}[0]) * {src.size});")

    # --- loop nests ----------------------------------------------------------------------------
    def loops(self, shape) -> list[str]:
        """Open one ``for`` per axis of ``shape`` longer than 1; returns the index expressions
        (a variable name, or ``"0"`` for an axis of length 1, which gets no loop)."""
        names = []
        for n in shape:
            if int(n) == 1:
                names.append("0")
                continue
            i = self.fresh("i")
            self.open(f"for (int {i} = 0; {i} < {int(n)}; {i}++)")
            names.append(i)
        return names

    def end(self, idx) -> None:
        for i in idx:
            if i != "0":
                self.close()

    @staticmethod
    def affine(terms, offset: int | str = 0) -> str:
        """The C expression offset + sum(coef * var) for terms [(coef, var)]."""
        parts = [str(offset)] if (not isinstance(offset, int) or offset) else []
        for c, v in terms:
            if v == "0":
                continue
            if c == 1:
                parts.append(v)
            elif c:
                parts.append(f"{c}*{v}")
        return " + ".join(parts) if parts else "0"

    def flat(self, idx, shape) -> str:
        return self.affine(list(zip(_strides(shape), idx)))


def _base(name: str | None) -> str | None:
    """The C array that the expression ``name`` (an array, or ``(array + offset)``) points into."""
    return None if name is None else name.strip("()").split(" ")[0]


# --- elementwise primitives ------------------------------------------------------------------------


SCALAR_MAX = 16
"""Computed elements of arrays of at most this many are C scalars (registers to the compiler);
of larger ones, elements of a C array (a loop can run over them, code of constant size)."""
MAX_ELEMS = 512
"""Arrays of more elements than this are not handled element by element (data movement copies
them by loops, products and elementwise operations run as loop nests): the code written per
element would cost the compiler more than the known zeros save the kernel."""
