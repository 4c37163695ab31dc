"""A jaxpr as one C function: the whole chunk of time steps as a single compiled kernel.

XLA on a CPU runs a compiled program as a sequence of kernels ("thunks"), one per fused
operation, LAPACK call or copy, at a fixed cost each; a Newton iteration of a small system is a
hundred of them, and that fixed cost, not the arithmetic, is most of the time of a step. Here the
same program (the ``jaxpr`` that JAX traces from :func:`livens.timestep.make_loop`: the scheme's
residual, its tangent, the Newton ``while`` loop, the ``scan`` over the chunk's steps) is written
as one C function: every array is a fixed-size local C array (a large one, as the records of a
chunk, in scratch memory that the caller passes), every primitive a loop nest over it, the
control flow C's own. The C compiler then sees the whole step at once.

Small arrays are also handled element by element, where that saves work or code (:class:`Buf`):
data movement only reorders elements, known zeros and ones of differentiation (``jacfwd``'s
seeds, identity and zero blocks) are folded away, small products are written term by term into C
scalars, and only what a loop nest reads is written to an array. Both the kernel's time and the
C compiler's time (which grows with the number of statements and memory accesses) go down.

A large ``jit`` function that the program calls at several places (a scheme's inner solve, as
the projection of the null space method, in the first guess, in Newton's iteration and in the
update) is written once, as a C function of its own called at each place
(:meth:`Translator.plan_shared`), not once per call: a shorter source, compiled sooner.

The translation follows the semantics of each primitive as JAX documents them (``jax.lax``);
operations on values known when the code is generated (constants of the program, index arrays)
are evaluated then, with JAX itself. A primitive this module does not know raises
:class:`Unsupported`, and the caller runs the program with XLA instead. Floating-point results
agree with XLA's to round-off: only the order of summation in reductions and products, and the
order of operations inside LU factorizations, may differ; and a product ``x * 0`` with a known
zero is taken as zero, NaN and infinite x included (:meth:`Translator.simplify`). Where C's
semantics differ from XLA's, the kernel computes XLA's: integer division by zero and the least
value divided by -1 (:func:`_div`, :func:`_rem`; C raises SIGFPE), conversions of NaN and of
values out of range to integers (:func:`saturation`), subnormal numbers flushed to zero
(:data:`FLUSH_SUBNORMALS`).
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.extend import core as jcore

from ..jaxprs import equations, size


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
"""Programs whose arrays on the stack hold more elements than this in all are not translated."""
SCRATCH_BYTES = 1 << 16
"""Arrays of the kernel's function of this many bytes or more live in the scratch memory that
the caller passes (:func:`translate`), not on the C stack."""


def _ctype(dtype) -> str:
    try:
        return CTYPES[np.dtype(dtype)]
    except KeyError:
        raise Unsupported(f"dtype {dtype}") from None


def _is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


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
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "1" if bool(x) else "0"
    if _is_float(dtype):
        x = float(x)
        if math.isnan(x):
            return "NAN"
        if math.isinf(x):
            return "INFINITY" if x > 0 else "(-INFINITY)"
        s = x.hex()
        return f"({s})" if x < 0 else s
    x = int(x)
    if dtype == np.dtype(np.int64) and x == np.iinfo(np.int64).min:  # its magnitude is no int64 literal
        return f"({x + 1}LL - 1)"
    if dtype in (np.dtype(np.int64), np.dtype(np.uint64)):
        return f"({x}LL)" if dtype == np.dtype(np.int64) else f"{x}ULL"
    return f"({x})"


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

    @property
    def known(self) -> bool:
        return self.value is not None


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
        self.count = 0
        self.elements = 0
        self.scratch = 0  # bytes of the large arrays, kept off the stack (:meth:`new`)
        self._main = True  # writing the kernel's own function (not a called one)

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
        records of a chunk) in the kernel's scratch memory, which the caller gives it (a stack of
        a thread may be 1 MiB or less)."""
        b = Buf(self.fresh(), shape, dtype)
        nbytes = max(b.size, 1) * self.itemsize(b.dtype)
        ct = self.ct(b.dtype)
        if self._main and nbytes >= SCRATCH_BYTES:
            self.line(f"{ct} *{b.name} = ({ct} *) (lv_scratch + {self.scratch});")
            self.scratch += -(-nbytes // 64) * 64  # each array aligned to 64 bytes
            return b
        self.elements += b.size
        if self.elements > MAX_LOCAL_ELEMENTS:
            raise Unsupported("arrays too large for one C function")
        self.line(f"{ct} {b.name}[{max(b.size, 1)}];")
        return b

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
            vals = ", ".join(c_literal(x, b.dtype) for x in flat) or "0"
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


# --- elementwise primitives ------------------------------------------------------------------------
def _maxmin(op):
    def f(a, b, dt):
        if _is_float(dt):  # NaN propagates, as in XLA
            return f"(({a} {op} {b}) || isnan({a}) ? {a} : {b})"
        return f"(({a} {op} {b}) ? {a} : {b})"

    return f


def _unary(fn):
    return lambda a, dt: f"{fn}({a})"


def _sign(a, dt):
    if _is_float(dt):
        return f"(isnan({a}) ? {a} : (({a} > 0) - ({a} < 0)) * 1.0)"
    return f"(({a} > 0) - ({a} < 0))"


def _abs(a, dt):
    return f"fabs({a})" if _is_float(dt) else f"(({a}) < 0 ? -({a}) : ({a}))"


def _not(a, dt):
    return f"(!{a})" if np.dtype(dt) == np.bool_ else f"(~{a})"


def _int_literal(x: int, dtype) -> str:
    """A C literal of the integer x of ``dtype`` (the least int64 too, which C cannot write as one)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "i" and x == np.iinfo(dtype).min:
        return f"(({_ctype(dtype)}) ({x + 1}LL - 1))"
    return f"(({_ctype(dtype)}) {x}{'ULL' if dtype.kind == 'u' else 'LL'})"


def _div(a, b, dt):
    """``lax.div`` as XLA computes it: integers rounded toward zero, x / 0 = -1 (the largest value
    where unsigned), the least value / -1 = itself (no SIGFPE, which C's division raises)."""
    if _is_float(dt):
        return f"({a} / {b})"
    dt = np.dtype(dt)
    if dt.kind == "u":
        return f"({b} == 0 ? {_int_literal(np.iinfo(dt).max, dt)} : {a} / {b})"
    neg = f"(({_ctype(dt)}) (0 - (u{_ctype(dt)}) {a}))"  # wraps: the least value stays
    return f"({b} == 0 ? (({_ctype(dt)}) -1) : ({b} == -1 ? {neg} : {a} / {b}))"


def _rem(a, b, dt):
    """``lax.rem`` as XLA computes it: the sign of the dividend, x % 0 = x, x % -1 = 0 (no SIGFPE)."""
    if _is_float(dt):
        return f"fmod({a}, {b})"
    if np.dtype(dt).kind == "u":
        return f"({b} == 0 ? {a} : {a} % {b})"
    return f"({b} == 0 ? {a} : ({b} == -1 ? 0 : {a} % {b}))"


def saturation(dst) -> tuple:
    """(lo, hi, least, largest) of a conversion of floats to the integer type ``dst``, as XLA
    converts: values at or below ``lo`` give the least value, at or above ``hi`` the largest
    (``hi`` is the first power of two out of range), NaN gives 0."""
    info = np.iinfo(dst)
    lo = float(info.min)
    hi = float(2 ** (8 * info.dtype.itemsize - (1 if info.dtype.kind == "i" else 0)))
    return lo, hi, int(info.min), int(info.max)


def _to_integer(dst):
    """A saturating conversion of floats to the integer type ``dst`` (:func:`saturation`), where C's
    conversion of NaN or an out-of-range value is undefined (INT_MIN on x86)."""
    lo, hi, least, largest = saturation(dst)
    ct = _ctype(dst)

    def fn(a, dt):
        return (
            f"(isnan({a}) ? (({ct}) 0) : ({a} <= {c_literal(lo, np.float64)} ? {_int_literal(least, dst)} : "
            f"({a} >= {c_literal(hi, np.float64)} ? {_int_literal(largest, dst)} : (({ct}) {a}))))"
        )

    return fn


def _round(a, dt, rounding_method=0):
    return f"rint({a})" if int(rounding_method) == 1 else f"round({a})"


def _integer_pow(a, dt, y):
    y = int(y)
    if y == 0:
        return "1.0"
    base = a
    n = abs(y)
    # exponentiation by squaring, as an expression
    result, sq = None, base
    while n:
        if n & 1:
            result = sq if result is None else f"({result} * {sq})"
        n >>= 1
        if n:
            sq = f"({sq} * {sq})"
    return f"(1.0 / {result})" if y < 0 else result


UNARY = {
    "neg": lambda a, dt: f"(-{a})",
    "abs": _abs,
    "sign": _sign,
    "not": _not,
    "sqrt": _unary("sqrt"),
    "rsqrt": lambda a, dt: f"(1.0 / sqrt({a}))",
    "cbrt": _unary("cbrt"),
    "exp": _unary("exp"),
    "exp2": _unary("exp2"),
    "log": _unary("log"),
    "log1p": _unary("log1p"),
    "expm1": _unary("expm1"),
    "sin": _unary("sin"),
    "cos": _unary("cos"),
    "tan": _unary("tan"),
    "asin": _unary("asin"),
    "acos": _unary("acos"),
    "atan": _unary("atan"),
    "sinh": _unary("sinh"),
    "cosh": _unary("cosh"),
    "tanh": _unary("tanh"),
    "asinh": _unary("asinh"),
    "acosh": _unary("acosh"),
    "atanh": _unary("atanh"),
    "floor": _unary("floor"),
    "ceil": _unary("ceil"),
    "erf": _unary("erf"),
    "erfc": _unary("erfc"),
    "lgamma": _unary("lgamma"),
    "is_finite": lambda a, dt: f"isfinite({a})",
    "square": lambda a, dt: f"({a} * {a})",
    "logistic": lambda a, dt: f"(1.0 / (1.0 + exp(-{a})))",
}

BINARY = {
    "add": lambda a, b, dt: f"({a} + {b})",
    "add_any": lambda a, b, dt: f"({a} + {b})",
    "sub": lambda a, b, dt: f"({a} - {b})",
    "mul": lambda a, b, dt: f"({a} * {b})",
    "div": _div,
    "rem": _rem,
    "pow": lambda a, b, dt: f"pow({a}, {b})",
    "atan2": lambda a, b, dt: f"atan2({a}, {b})",
    "nextafter": lambda a, b, dt: f"nextafter({a}, {b})",
    "max": _maxmin(">"),
    "min": _maxmin("<"),
    "and": lambda a, b, dt: f"({a} & {b})",
    "or": lambda a, b, dt: f"({a} | {b})",
    "xor": lambda a, b, dt: f"({a} ^ {b})",
    "eq": lambda a, b, dt: f"({a} == {b})",
    "ne": lambda a, b, dt: f"({a} != {b})",
    "lt": lambda a, b, dt: f"({a} < {b})",
    "le": lambda a, b, dt: f"({a} <= {b})",
    "gt": lambda a, b, dt: f"({a} > {b})",
    "ge": lambda a, b, dt: f"({a} >= {b})",
}

IDENTITY = {"copy", "copy_p", "optimization_barrier", "stop_gradient"}
CALLS = {
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "remat",
    "checkpoint",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "custom_lin",
}
NO_FOLD = {"while", "cond", "scan", "rng_uniform", "random_bits", "random_seed"}
MOVES = {  # primitives that only move elements: operand positions that are data (None: all)
    "transpose": None,
    "reshape": None,
    "squeeze": None,
    "expand_dims": None,
    "broadcast_in_dim": None,
    "slice": None,
    "concatenate": None,
    "rev": None,
    "pad": None,
    "split": None,
    "stack": None,
    "unstack": None,
    "copy": None,
    "copy_p": None,
    "dynamic_slice": (0,),
    "dynamic_update_slice": (0, 1),
    "gather": (0,),
    "select_n": "cases",
}
SCALAR_MAX = 16
"""Computed elements of arrays of at most this many are C scalars (registers to the compiler);
of larger ones, elements of a C array (a loop can run over them, code of constant size)."""
MAX_ELEMS = 512
"""Arrays of more elements than this are not handled element by element (data movement copies
them by loops, products and elementwise operations run as loop nests): the code written per
element would cost the compiler more than the known zeros save the kernel."""
ZERO_RULES = {"add", "add_any", "sub", "mul"}


def _np_move(name, vals, p):
    """The common data-movement primitives on NumPy arrays, as ``jax.lax`` defines them (the
    others, and any parameter not handled here: None, for the primitive itself). JAX would compile
    an XLA program for each new shape, which is most of the time of translating otherwise."""
    try:
        if name in ("reshape", "squeeze", "expand_dims"):
            if name == "reshape" and p.get("dimensions") is not None:
                return None
            return [vals[0].reshape(p["new_sizes"] if name == "reshape" else _squeezed(vals[0].shape, name, p))]
        if name == "transpose":
            return [vals[0].transpose(p["permutation"])]
        if name == "broadcast_in_dim":
            x, shape, dims = vals[0], tuple(p["shape"]), tuple(p["broadcast_dimensions"])
            mid = [1] * len(shape)
            for k, d in enumerate(dims):
                mid[d] = x.shape[k]
            return [np.broadcast_to(x.reshape(mid), shape)]
        if name == "slice":
            steps = p.get("strides") or (1,) * vals[0].ndim
            return [vals[0][tuple(slice(a, b, c) for a, b, c in zip(p["start_indices"], p["limit_indices"], steps))]]
        if name == "concatenate":
            return [np.concatenate(vals, axis=p["dimension"])]
        if name == "rev":
            return [np.flip(vals[0], axis=tuple(p["dimensions"])) if p["dimensions"] else vals[0]]
        if name == "split":
            cuts = np.cumsum(p["sizes"])[:-1]
            return np.split(vals[0], cuts, axis=p["axis"])
        if name in ("copy", "copy_p"):
            return [vals[0]]
        if name == "stack":
            return [np.stack(vals, axis=p["axis"])]
        if name == "unstack":
            return [np.take(vals[0], k, axis=p["axis"]) for k in range(vals[0].shape[p["axis"]])]
        if name == "pad":
            return [_np_pad(vals[0], vals[1], p["padding_config"])]
        if name == "gather":
            out = _np_gather(vals[0], np.asarray(vals[1]), p["dimension_numbers"], p["slice_sizes"], p["mode"])
            return None if out is None else [out]
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _window_offset(starts, idx, strides) -> str:
    """C expression of the flat operand index of window element ``idx`` (C index names) of a
    window starting at ``starts`` (C expressions), in an operand of ``strides``."""
    return " + ".join(f"({a} + {i})*{k}" for a, i, k in zip(starts, idx, strides)) or "0"


def _np_pad(x, value, config):
    """``jax.lax.pad``: per axis (low, high, interior), ``interior`` copies of ``value`` between
    neighbours, then ``low`` / ``high`` of them at the ends (negative: that many cut off)."""
    x = np.asarray(x)
    value = np.asarray(value, x.dtype)
    dilated = [n + max(n - 1, 0) * k for n, (_, _, k) in zip(x.shape, config)]
    inner = np.full(dilated, value, x.dtype)
    inner[tuple(slice(None, None, k + 1) for _, _, k in config)] = x
    shape = [lo + n + hi for n, (lo, hi, _) in zip(dilated, config)]
    if any(n < 0 for n in shape):
        raise ValueError("pad: negative size")
    out = np.full(shape, value, x.dtype)
    src, dst = [], []
    for n, m, (lo, _, _) in zip(dilated, shape, config):
        a, b = max(lo, 0), min(lo + n, m)  # where the dilated operand lands in the output
        src.append(slice(a - lo, b - lo) if b > a else slice(0, 0))
        dst.append(slice(a, b) if b > a else slice(0, 0))
    out[tuple(dst)] = inner[tuple(src)]
    return out


def _np_gather(operand, indices, dn, slice_sizes, mode):
    """``jax.lax.gather`` (its index vector the last axis of the indices, as JAX always has it):
    the window of ``slice_sizes`` at each index vector's start, starts clamped into the operand
    (modes clip and promise-in-bounds); None for batching dimensions, and for a window out of
    bounds in fill mode."""
    if getattr(dn, "operand_batching_dims", ()) or indices.ndim == 0:
        return None
    fill = "FILL" in str(mode)
    batch_shape = indices.shape[:-1]
    rows = indices.reshape(-1, indices.shape[-1]).tolist()
    wshape = [n for d, n in enumerate(slice_sizes) if d not in dn.collapsed_slice_dims]
    windows = []
    for row in rows:
        start = [0] * operand.ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = int(row[k])
        for d in range(operand.ndim):
            hi = operand.shape[d] - slice_sizes[d]
            if fill and not 0 <= start[d] <= hi:
                return None
            start[d] = min(max(start[d], 0), hi)
        windows.append(operand[tuple(slice(a, a + n) for a, n in zip(start, slice_sizes))].reshape(wshape))
    w = (
        np.stack(windows).reshape(tuple(batch_shape) + tuple(wshape))
        if windows
        else np.zeros(tuple(batch_shape) + tuple(wshape), operand.dtype)
    )
    rank = len(batch_shape) + len(wshape)
    src = [0] * rank
    for i, t in enumerate(a for a in range(rank) if a not in dn.offset_dims):
        src[t] = i
    for j, t in enumerate(dn.offset_dims):
        src[t] = len(batch_shape) + j
    return w.transpose(src)


_NP_BINARY = {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
}


def _np_elementwise(name, vals, p):
    """Common elementwise primitives (and ``dot_general``) on known NumPy arrays, where NumPy's
    result is the one ``jax.lax`` defines (IEEE arithmetic, comparisons, exact conversions; a
    product to round-off); None for the others, which run through JAX (which compiles an XLA
    program for each new shape)."""
    if name in _NP_BINARY and all(np.asarray(v).dtype == np.asarray(vals[0]).dtype for v in vals):
        return [_NP_BINARY[name](*vals)]
    if name == "div" and _is_float(np.asarray(vals[0]).dtype):
        return [np.divide(*vals)]
    if name == "neg":
        return [np.negative(vals[0])]
    if name == "not":
        return [np.logical_not(vals[0]) if vals[0].dtype == np.bool_ else np.invert(vals[0])]
    if name == "convert_element_type":
        src, dst = np.asarray(vals[0]).dtype, np.dtype(p["new_dtype"])
        if _is_float(dst) or (not _is_float(src) and dst != np.bool_):
            return [np.asarray(vals[0]).astype(dst)]
        if dst == np.bool_:
            return [np.asarray(vals[0]) != 0]
        return None
    if name == "select_n":
        pred, cases = np.asarray(vals[0]), vals[1:]
        if pred.dtype == np.bool_:
            return [np.where(pred, cases[1], cases[0])] if len(cases) == 2 else [np.asarray(cases[0])]
        return [np.choose(pred, np.broadcast_arrays(*cases))]
    if (
        name == "dot_general"
        and all(_is_float(np.asarray(v).dtype) for v in vals)
        and np.asarray(vals[0]).dtype == np.asarray(vals[1]).dtype
    ):
        # summed term by term in the contraction's order, as the loop nest of p_dot_general does
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        lhs, rhs = np.asarray(vals[0]), np.asarray(vals[1])
        lfree = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rfree = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        nb = int(math.prod(lhs.shape[a] for a in lb))
        nc = int(math.prod(lhs.shape[a] for a in lc))
        nl = int(math.prod(lhs.shape[a] for a in lfree))
        nr = int(math.prod(rhs.shape[a] for a in rfree))
        lm = lhs.transpose(list(lb) + lfree + list(lc)).reshape(nb, nl, nc)  # sizes given: some may be 0
        rm = rhs.transpose(list(rb) + rfree + list(rc)).reshape(nb, nr, nc)
        acc = np.zeros((nb, lm.shape[1], rm.shape[1]), lhs.dtype)
        for c in range(nc):
            acc += lm[:, :, None, c] * rm[:, None, :, c]
        shape = [lhs.shape[a] for a in lb] + [lhs.shape[a] for a in lfree] + [rhs.shape[a] for a in rfree]
        return [acc.reshape(shape)]
    if name == "iota":
        shape, dim = tuple(p["shape"]), p["dimension"]
        ar = np.arange(shape[dim], dtype=np.dtype(p["dtype"]))
        return [np.broadcast_to(ar.reshape([-1 if k == dim else 1 for k in range(len(shape))]), shape)]
    return None


def _squeezed(shape, name, p):
    dims = [d % (len(shape) + (len(p["dimensions"]) if name == "expand_dims" else 0)) for d in p["dimensions"]]
    if name == "squeeze":
        return tuple(n for k, n in enumerate(shape) if k not in dims)
    out, it = [], iter(shape)
    for k in range(len(shape) + len(dims)):
        out.append(1 if k in dims else next(it))
    return tuple(out)


class Translator(Emitter):
    """Emits the equations of jaxprs (with their sub-jaxprs) as C statements."""

    UNARY, BINARY = UNARY, BINARY
    linkage = ""
    """What precedes the kernel's declaration (C++ sources: ``extern "C"``)."""

    def header(self) -> str:
        return HEADER

    # --- functions called at several places ---------------------------------------------------
    SHARED_FUNCTIONS = True
    """Write the jaxpr of a ``jit`` call made at several places of the program once, as a C
    function (:meth:`plan_shared`); False: every call inlined."""
    SHARED_MIN_EQUATIONS = 60
    """A called jaxpr of fewer equations (its sub-jaxprs' included) is inlined at each call."""

    def _key(self, closed):
        """What makes two called jaxprs the same function: their text and their constants."""
        if not isinstance(closed, jcore.ClosedJaxpr):
            return None
        hit = self._keys.get(id(closed))
        if hit is None or hit[0] is not closed:
            consts = tuple((np.shape(c), str(np.asarray(c).dtype), np.asarray(c).tobytes()) for c in closed.consts)
            hit = (closed, (str(closed.jaxpr), consts))
            self._keys[id(closed)] = hit
        return hit[1]

    def plan_shared(self, jaxpr) -> None:
        """Find the called jaxprs (``jit``) of ``jaxpr`` that are called at several places (in all
        its sub-jaxprs) and are large (:data:`SHARED_MIN_EQUATIONS`): each becomes one C function,
        called at each place (:meth:`call_shared`). The program is the same; the source is
        shorter, and the C compiler's time with it, where a scheme calls the same inner solve
        several times in a step (the projection of the null space method)."""
        self.shared: dict = {}
        if not self.SHARED_FUNCTIONS:
            return
        counts: dict = {}
        for eqn in equations(jaxpr):
            if eqn.primitive.name in ("pjit", "jit"):
                sub = eqn.params.get("jaxpr")
                if (
                    isinstance(sub, jcore.ClosedJaxpr)
                    and size(sub.jaxpr, self.SHARED_MIN_EQUATIONS) >= self.SHARED_MIN_EQUATIONS
                ):
                    key = self._key(sub)
                    counts[key] = counts.get(key, 0) + 1
        self.shared = {key: None for key, n in counts.items() if n >= 2}

    def call_shared(self, closed, ins: list[Buf]) -> list[Buf]:
        """A call of the C function of ``closed`` (written the first time): arguments as C arrays
        (known values as file-level constants), outputs into new local arrays."""
        key = self._key(closed)
        fname = self.shared[key]
        if fname is None:
            fname = self._write_function(closed)
            self.shared[key] = fname
        args = []
        for b in ins:
            if b.size == 0:
                args.append("0")
            elif b.known:
                args.append(f"({self.ct(b.dtype)} *) {self.static(b)}")
            else:
                args.append(self.arr(b).name)
        outs = [self.new(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.outvars]
        args += [o.name for o in outs]
        self.line(f"{fname}({', '.join(args)});")
        return outs

    def _write_function(self, closed) -> str:
        """The C function of ``closed``: ``static void f(inputs..., outputs...)``, its body
        translated on its own (its own scalars and blocks), kept from inlining so that the C
        compiler works on it once."""
        fname = self.fresh("f")
        saved = (self.lines, self.depth, self.scope, self._scalars, self._main)
        self.lines, self.depth, self.scope, self._scalars, self._main = [], 1, (), {}, False
        try:
            params, args = [], []
            for k, v in enumerate(closed.jaxpr.invars):
                params.append(f"{self.ct(v.aval.dtype)} *a{k}")
                args.append(Buf(f"a{k}", v.aval.shape, v.aval.dtype))
            outs = self.closed(closed, args)
            for k, (v, b) in enumerate(zip(closed.jaxpr.outvars, outs)):
                params.append(f"{self.ct(v.aval.dtype)} *o{k}")
                if b.size:
                    self.copy(Buf(f"o{k}", b.shape, b.dtype), b)
            body = "\n".join(_flat(self.lines))
        finally:
            self.lines, self.depth, self.scope, self._scalars, self._main = saved
        self.functions.append(
            f"static __attribute__((noinline)) void {fname}({', '.join(params) or 'void'}) {{\n{body}\n}}"
        )
        return fname

    # --- jaxprs --------------------------------------------------------------------------------
    def jaxpr(self, jaxpr, consts, args) -> list[Buf]:
        """Emit ``jaxpr`` with its constvars bound to ``consts`` and invars to ``args`` (Bufs);
        returns the Bufs of its outvars."""
        env: dict = {}
        for v, b in zip(jaxpr.constvars, consts):
            env[v] = b
        for v, b in zip(jaxpr.invars, args):
            env[v] = b

        def read(v):
            if isinstance(v, jcore.Literal):
                return Buf(None, np.shape(v.val), v.aval.dtype, v.val)
            return env[v]

        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            outs = self.eqn(eqn, ins)
            for v, b in zip(eqn.outvars, outs):
                env[v] = b
        return [read(v) for v in jaxpr.outvars]

    def closed(self, cj, args) -> list[Buf]:
        consts = [Buf(None, np.shape(c), np.asarray(c).dtype, np.asarray(c)) for c in cj.consts]
        return self.jaxpr(cj.jaxpr, consts, args)

    def eqn(self, eqn, ins: list[Buf]) -> list[Buf]:
        name = eqn.primitive.name
        p = eqn.params
        outs_aval = [v.aval for v in eqn.outvars]
        if (
            name in ("pjit", "jit")
            and self.shared
            and not all(b.known for b in ins)
            and self._key(p.get("jaxpr")) in self.shared
        ):
            return self.call_shared(p["jaxpr"], ins)
        if name in CALLS:
            sub = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
            if sub is None:
                raise Unsupported(f"{name} without a jaxpr")
            if isinstance(sub, jcore.ClosedJaxpr):
                return self.closed(sub, ins)
            return self.jaxpr(sub, [], ins)
        if all(b.known for b in ins) and name not in NO_FOLD and not eqn.effects:
            return self.fold(eqn, ins)
        if name in MOVES:
            moved = self.move(eqn, ins)
            if moved is not None:
                return moved
        method = getattr(self, "p_" + name.replace("-", "_"), None)
        if method is not None:
            out = method(ins, outs_aval, **p)
            return out if isinstance(out, list) else [out]
        if name in self.UNARY:
            if ins[0].elems is not None and not p:
                return [self.elementwise_elems(name, self.UNARY[name], ins, outs_aval[0])]
            return [self.elementwise(self.UNARY[name], ins, outs_aval[0], p)]
        if name in self.BINARY:
            simple = self.simplify(name, ins, outs_aval[0])
            if simple is not None:
                return [simple]
            if any(b.elems is not None for b in ins) or (
                name in ZERO_RULES
                and math.prod(outs_aval[0].shape) <= MAX_ELEMS
                and any(b.known and b.size > 1 and bool(np.any(b.value == 0)) for b in ins)
            ):
                return [self.elementwise_elems(name, self.BINARY[name], ins, outs_aval[0])]
            return [self.elementwise(self.BINARY[name], ins, outs_aval[0], p)]
        if name in IDENTITY:
            return [self.alias(b, a.shape) for b, a in zip(ins, outs_aval)]
        raise Unsupported(f"primitive {name!r}")

    def fold(self, eqn, ins) -> list[Buf]:
        """Evaluate an equation on known values now (with JAX on the CPU)."""
        vals = [b.value for b in ins]
        with np.errstate(all="ignore"):
            outs = _np_move(eqn.primitive.name, vals, eqn.params)
            if outs is None:
                outs = _np_elementwise(eqn.primitive.name, vals, eqn.params)
        if outs is not None:
            return [Buf(None, v.aval.shape, v.aval.dtype, np.asarray(o)) for v, o in zip(eqn.outvars, outs)]
        try:
            with jax.ensure_compile_time_eval():
                out = eqn.primitive.bind(*vals, **eqn.params)
        except Exception as exc:  # pragma: no cover - a primitive that cannot run eagerly
            raise Unsupported(f"cannot evaluate {eqn.primitive.name} on constants: {exc}") from None
        outs = out if eqn.primitive.multiple_results else [out]
        return [Buf(None, v.aval.shape, v.aval.dtype, np.asarray(o)) for v, o in zip(eqn.outvars, outs)]

    # --- data movement as elements ----------------------------------------------------------------
    def move(self, eqn, ins) -> list[Buf] | None:
        """A primitive that only moves elements (:data:`MOVES`), evaluated now on the codes of the
        elements (with the primitive itself, so with its own semantics): the outputs are Bufs of
        the operands' elements. None where an output is large or an index is not known now."""
        data = MOVES[eqn.primitive.name]
        if data is None:
            data = range(len(ins))
        elif data == "cases":
            data = range(1, len(ins))
        if any(not ins[k].known for k in range(len(ins)) if k not in data):
            return None
        if sum(math.prod(v.aval.shape) for v in eqn.outvars) > MAX_ELEMS:
            return None
        if any(ins[k].elems is None and not ins[k].known and ins[k].size > MAX_ELEMS for k in data):
            return None
        vals, pool, base = [], [], 1  # code 0: an element no operand gives (out-of-bounds fill)
        for k, b in enumerate(ins):
            if k in data:
                vals.append((base + np.arange(b.size, dtype=np.int64)).reshape(b.shape))
                pool.extend(self.atoms(b))
                base += b.size
            else:
                vals.append(b.value)
        outs = _np_move(eqn.primitive.name, vals, eqn.params)
        if outs is None:
            params = dict(eqn.params)
            if eqn.primitive.name == "gather":
                params["fill_value"] = 0
            try:
                with jax.ensure_compile_time_eval():
                    out = eqn.primitive.bind(*vals, **params)
            except Exception:  # noqa: BLE001 - leave it to the primitive's own translation
                return None
            outs = out if eqn.primitive.multiple_results else [out]
        res = []
        for v, o in zip(eqn.outvars, outs):
            codes = np.asarray(o).ravel()
            if codes.size and codes.min() <= 0:
                return None
            res.append(self.make(v.aval.shape, v.aval.dtype, [pool[c - 1] for c in codes.tolist()]))
        return res

    def elementwise_elems(self, name, fn, ins, aval) -> Buf:
        """An elementwise operation element by element, on operands of which one is a Buf of
        elements or known with zeros: ``x + 0``, ``x - 0``, ``x * 1`` are x's element, ``x * 0`` a
        known zero (:meth:`simplify`), the others computed, by runs of loops where they line up."""
        shape = tuple(aval.shape)
        n = int(math.prod(shape))
        cols = []
        for b in ins:
            if b.size == 1:
                at = self.atoms(b)
                cols.append([at[0]] * n)
                continue
            if len(b.shape) != len(shape):
                raise Unsupported(f"elementwise operands of shapes {b.shape} and {shape}")
            where = np.broadcast_to(np.arange(b.size).reshape(b.shape), shape).ravel().tolist()
            at = self.atoms(b)
            cols.append([at[w] for w in where])
        dt = ins[0].dtype
        dts = tuple(b.dtype for b in ins)  # for the literals of each operand
        result, ks, ops = [], [], []
        for k in range(n):
            args = tuple(c[k] for c in cols)
            r = self._simple_atom(name, args, aval.dtype)
            if r is None:
                ks.append(k)
                ops.append(args)
            result.append(r)
        # an element of a C scalar operand in a C scalar itself (no run of a loop can read it),
        # the others into an array, by runs
        if n > SCALAR_MAX:
            arrayed = list(zip(ks, ops))
        else:
            arrayed = [(k, a) for k, a in zip(ks, ops) if all(x[0] is None or x[1] is not None for x in a)]
            for k, a in zip(ks, ops):
                if not all(x[0] is None or x[1] is not None for x in a):
                    result[k] = self.scalar(fn(*[self.text(x, d) for x, d in zip(a, dts)], dt), aval.dtype)
        if arrayed:
            out = self.new(shape, aval.dtype)
            self.assign(
                out.name, [k for k, _ in arrayed], lambda *t: fn(*t, dt), [a for _, a in arrayed], dts, aval.dtype
            )
            for k, _ in arrayed:
                result[k] = (out.name, k)
        return self.make(shape, aval.dtype, result)

    @staticmethod
    def _simple_atom(name, args, dtype):
        """The element of ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x`` (x), ``x * 0`` (0),
        ``-c`` (-c) for known scalars; None where it must be computed."""
        if not _is_float(dtype):
            return None
        if name == "neg":
            a = args[0]
            return (None, -a[1]) if a[0] is None else None
        if len(args) != 2:
            return None
        (an, av), (bn, bv) = args
        if name in ("add", "add_any"):
            if bn is None and bv == 0:
                return args[0]
            if an is None and av == 0:
                return args[1]
        elif name == "sub":
            if bn is None and bv == 0:
                return args[0]
        elif name == "mul":
            if (an is None and av == 0) or (bn is None and bv == 0):
                return (None, 0.0)
            if bn is None and bv == 1:
                return args[0]
            if an is None and av == 1:
                return args[1]
        return None

    # --- algebraic simplification ---------------------------------------------------------------
    @staticmethod
    def _all(b: Buf, x) -> bool:
        return b.known and b.size > 0 and bool(np.all(b.value == x))

    def simplify(self, name, ins, aval) -> Buf | None:
        """``x + 0``, ``0 + x``, ``x - 0`` and ``x * 1`` as ``x`` itself, ``x * 0`` as a known zero.

        Differentiation (``jacfwd`` seeds, ``add_any`` of symbolic zeros made concrete, identity
        blocks of tangents) leaves many such operations on operands known now. Folding ``x * 0`` to
        zero ignores that it is NaN where x is infinite or NaN, where XLA computes the product: a
        NaN that reaches the program's outputs only through such a product (``0.0 * log(x)`` of a
        negative x) is lost natively. ``x + 0`` differs from x only in the sign of a zero x."""
        if len(ins) != 2 or not _is_float(aval.dtype):
            return None
        a, b = ins
        shape = tuple(aval.shape)

        def same(x: Buf) -> Buf | None:
            return self.alias(x, shape) if x.shape == shape else None

        if name in ("add", "add_any"):
            if self._all(b, 0):
                return same(a)
            if self._all(a, 0):
                return same(b)
        elif name == "sub" and self._all(b, 0):
            return same(a)
        elif name == "mul":
            if self._all(a, 0) or self._all(b, 0):
                return Buf(None, shape, aval.dtype, np.zeros(shape, aval.dtype))
            if self._all(b, 1):
                return same(a)
            if self._all(a, 1):
                return same(b)
        return None

    # --- elementwise -----------------------------------------------------------------------------
    def elementwise(self, fn, ins, aval, params) -> Buf:
        out = self.new(aval.shape, aval.dtype)
        dt = ins[0].dtype
        extra = {k: v for k, v in params.items() if k in ("y", "rounding_method")}
        n = out.size
        if any(
            b.size not in (1, n)
            or (
                b.size == n
                and b.shape != out.shape
                and len(b.shape) == len(out.shape)
                and b.size > 1
                and any(x != y for x, y in zip(b.shape, out.shape))
            )
            for b in ins
        ):
            # operands of the output's rank with axes of length 1 (lax broadcasts those)
            idx = self.loops(out.shape)
            args = []
            for b in ins:
                if b.size == 1:
                    args.append(self.at(b, 0))
                    continue
                if len(b.shape) != len(out.shape):
                    raise Unsupported(f"elementwise operands of shapes {b.shape} and {out.shape}")
                st = _strides(b.shape)
                args.append(self.at(b, self.affine([(s, i) for s, i, k in zip(st, idx, b.shape) if k != 1])))
            self.line(f"{out.name}[{self.flat(idx, out.shape)}] = {self.rhs(fn(*args, dt, **extra), out.dtype)};")
            self.end(idx)
            return out

        def expr(i):
            args = [self.at(b, 0 if b.size == 1 else i) for b in ins]
            return fn(*args, dt, **extra)

        if n == 1:
            self.line(f"{out.name}[0] = {self.rhs(expr(0), out.dtype)};")
        else:
            i = self.fresh("i")
            self.open(f"for (int {i} = 0; {i} < {n}; {i}++)")
            self.line(f"{out.name}[{i}] = {self.rhs(expr(i), out.dtype)};")
            self.close()
        return out

    def p_integer_pow(self, ins, outs, y, **_):
        return self.elementwise(_integer_pow, ins, outs[0], {"y": y})

    def p_round(self, ins, outs, rounding_method=0, **_):
        return self.elementwise(_round, ins, outs[0], {"rounding_method": int(rounding_method)})

    def p_convert_element_type(self, ins, outs, new_dtype, **_):
        src = ins[0]
        if np.dtype(new_dtype) == src.dtype:
            return self.alias(src, outs[0].shape)
        ct = _ctype(new_dtype)
        if np.dtype(new_dtype) == np.bool_:
            return self.elementwise(lambda a, dt: f"({a} != 0)", ins, outs[0], {})
        if _is_float(src.dtype) and not _is_float(new_dtype):
            return self.elementwise(_to_integer(np.dtype(new_dtype)), ins, outs[0], {})
        return self.elementwise(lambda a, dt: f"(({ct}) {a})", ins, outs[0], {})

    def p_select_n(self, ins, outs, **_):
        pred, cases = ins[0], ins[1:]

        def fn(*args):
            c, vals = args[0], args[1:-1]
            if pred.dtype == np.bool_ or len(vals) == 2:
                return f"({c} ? {vals[1]} : {vals[0]})"
            e = vals[-1]
            for k in range(len(vals) - 2, -1, -1):
                e = f"({c} == {k} ? {vals[k]} : {e})"
            return e

        if any(b.elems is not None for b in ins):
            return self.elementwise_elems("select_n", fn, [pred, *cases], outs[0])
        return self.elementwise(fn, [pred, *cases], outs[0], {})

    def p_clamp(self, ins, outs, **_):
        def fn(lo, x, hi, dt):
            return f"({x} < {lo} ? {lo} : ({x} > {hi} ? {hi} : {x}))"

        return self.elementwise(fn, ins, outs[0], {})

    def p_reduce_precision(self, ins, outs, exponent_bits, mantissa_bits, **_):
        if ins[0].dtype == np.float64 and (exponent_bits, mantissa_bits) == (11, 52):
            return self.alias(ins[0], outs[0].shape)
        raise Unsupported("reduce_precision")

    def p_iota(self, ins, outs, dtype, shape, dimension, **_):
        out = self.new(shape, dtype)
        idx = self.loops(shape)
        self.line(f"{out.name}[{self.flat(idx, shape)}] = {self.rhs(idx[dimension], dtype)};")
        self.end(idx)
        return out

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
        for k, dim in enumerate(dn.start_index_map):
            s = self.fresh("s")
            hi = src.shape[dim] - slice_sizes[dim]
            self.line(f"int64_t {s} = (int64_t) {self.at(ind, f'{base} + {k * st_ind[-1]}')};")
            if fill_mode:
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
        window out of bounds is dropped, or clamped in CLIP mode."""
        out = self.new(operand.shape, operand.dtype)
        self.copy(out, operand)
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
            self.line(f"int64_t {v} = (int64_t) {self.at(ind, f'{base} + {k * st_ind[-1]}')};")
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
        target = f"{out.name}[{' + '.join(terms) or '0'}]"
        value = self.at(upd, self.flat(idx, upd.shape))
        stmt = f"{target} += {value};" if op == "add" else f"{target} = {value};"
        self.line(f"if ({' && '.join(inside)}) {stmt}" if inside else stmt)
        self.end(idx)
        return out

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
        out = self.new(outs[0].shape, outs[0].dtype)
        lfree = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
        rfree = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
        (lname, loff, sl), (rname, roff, sr) = self.view(lhs), self.view(rhs)
        idx = self.loops(out.shape)
        nb = len(lb)
        bi, li, ri = idx[:nb], idx[nb : nb + len(lfree)], idx[nb + len(lfree) :]
        acc = self.fresh("acc")
        self.line(f"{self.ct(out.dtype)} {acc} = {self.rhs('0', out.dtype)};")
        cidx = self.loops([lhs.shape[i] for i in lc])
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
        la, ra = self.atoms(lhs), self.atoms(rhs)

        def zeros(at):
            return np.array([a[0] is None and a[1] == 0 for a in at], dtype=bool)

        live = ~(zeros(la)[ll] | zeros(ra)[rr])
        nlive = np.count_nonzero(live)
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
        the work of the sparse product, in code of constant size. Summed as :meth:`_sparse_dot`."""
        ptr = np.concatenate([[0], np.cumsum(live.sum(axis=1))]).astype(np.int32)
        ia = ll[live].astype(np.int32)  # row by row, each row's terms in contraction order
        ib = rr[live].astype(np.int32)
        a, b = self.arr(lhs), self.arr(rhs)
        an = self.static(a) if a.known else a.name
        bn = self.static(b) if b.known else b.name
        P, IA, IB = (self.static(Buf(None, (t.size,), np.int32, t)) for t in (ptr, ia, ib))
        out = self.new(aval.shape, aval.dtype)
        k, t, acc = self.fresh("k"), self.fresh("j"), self.fresh("acc")
        self.open(f"for (int {k} = 0; {k} < {out.size}; {k}++)")
        self.line(f"{self.ct(out.dtype)} {acc} = {self.rhs('0', out.dtype)};")
        self.line(f"for (int {t} = {P}[{k}]; {t} < {P}[{k} + 1]; {t}++) {acc} += {an}[{IA}[{t}]] * {bn}[{IB}[{t}]];")
        self.line(f"{out.name}[{k}] = {acc};")
        self.close()
        return out

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
        return self._reduce(ins, outs, axes, init, lambda a, x: f"{a} = {_maxmin('>')(x, a, dt)}")

    def p_reduce_min(self, ins, outs, axes, **_):
        dt = ins[0].dtype
        init = "INFINITY" if _is_float(dt) else str(np.iinfo(dt).max) + ("LL" if dt.itemsize == 8 else "")
        return self._reduce(ins, outs, axes, init, lambda a, x: f"{a} = {_maxmin('<')(x, a, dt)}")

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
        """The outputs of an LU (a copy of the matrices, pivots, permutation), the loop over the
        batch opened, and (A, P, V, m, n, k): C pointers to this matrix, its permutation and its
        pivots, the matrix shape and min(m, n). The caller writes the factorization and closes."""
        a = ins[0]
        *batch, m, n = a.shape
        lu = self.new(a.shape, a.dtype)
        piv = self.new(outs[1].shape, np.int32)
        perm = self.new(outs[2].shape, np.int32)
        self.copy(lu, a)
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

    def p_lu(self, ins, outs, **_):
        """LU with partial pivoting, as LAPACK's getrf: the first largest |a_ik| is the pivot."""
        res, (A, P, V, m, n, k) = self._lu_start(ins, outs)
        self.line(f"for (int i = 0; i < {m}; i++) {P}[i] = i;")
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

    def p_sort(self, ins, outs, dimension, is_stable, num_keys, **_):
        """A stable sort along ``dimension`` by one integer key, the other operands carried along
        (insertion sort: the arrays sorted here are a permutation's few entries)."""
        if num_keys != 1 or not np.issubdtype(ins[0].dtype, np.integer):
            raise Unsupported("sort other than by one integer key")
        shape = ins[0].shape
        n = shape[dimension]
        res = [self.new(shape, b.dtype) for b in ins]
        for dst, src in zip(res, ins):
            self.copy(dst, src)
        st = _strides(shape)
        lanes = [d for d in range(len(shape)) if d != dimension]
        idx = self.loops([shape[d] for d in lanes])
        base = " + ".join([f"{i}*{st[d]}" for i, d in zip(idx, lanes)]) or "0"
        step = st[dimension]
        self.open(f"for (int i = 1; i < {n}; i++)")
        self.line(" ".join(f"{_ctype(x.dtype)} t{k} = {x.name}[{base} + i*{step}];" for k, x in enumerate(res)))
        self.line("int j = i - 1;")
        self.open(f"while (j >= 0 && {res[0].name}[{base} + j*{step}] > t0)")
        for x in res:
            self.line(f"{x.name}[{base} + (j + 1)*{step}] = {x.name}[{base} + j*{step}];")
        self.line("j--;")
        self.close()
        for k, x in enumerate(res):
            self.line(f"{x.name}[{base} + (j + 1)*{step}] = t{k};")
        self.close()
        self.end(idx)
        return res

    def p_custom_linear_solve(self, ins, outs, const_lengths, jaxprs, **_):
        """x = solve(b): the forward value is the ``solve`` jaxpr on its constants and b."""
        n_mv, n_vm, n_solve = const_lengths.matvec, const_lengths.vecmat, const_lengths.solve
        n_consts = n_mv + n_vm + n_solve + const_lengths.transpose_solve
        consts = ins[n_mv + n_vm : n_mv + n_vm + n_solve]
        return self.closed_with(jaxprs.solve, consts, ins[n_consts:])

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
        bb = self.fresh("b")
        self.open(f"for (int {bb} = 0; {bb} < {nb}; {bb}++)")
        a = self.arr(a)
        A = f"({a.name if not a.known else self.static(a)} + {bb}*{m * m})"

        def Aij(i, j):
            return f"{A}[({j})*{m} + ({i})]" if eff_t else f"{A}[({i})*{m} + ({j})]"

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
        self.open(f"for (int {r} = 0; {r} < {nrhs}; {r}++)")
        self.open(order)
        self.line(f"{self.ct(bmat.dtype)} s = {x('i')};")
        self.line(f"{inner} s -= {Aij('i', 'j')} * {x('j')};")
        self.line(f"{x('i')} = s;" if unit_diagonal else f"{x('i')} = s / {Aij('i', 'i')};")
        self.close()
        self.close()
        self.close()
        return out

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
        self.open("")
        (c,) = self.closed_with(cond_jaxpr, cconsts, carry)
        if mask is None:
            self.line(f"{pred} = {self.at(c, 0)};")
        else:
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

    def closed_with(self, cj, consts, args) -> list[Buf]:
        """A closed jaxpr whose own consts come first, then ``consts`` + ``args`` as its invars."""
        own = [Buf(None, np.shape(c), np.asarray(c).dtype, np.asarray(c)) for c in cj.consts]
        return self.jaxpr(cj.jaxpr, own, list(consts) + list(args))

    def p_cond(self, ins, outs, branches, **_):
        index, ops = ins[0], ins[1:]
        res = [self.new(a.shape, a.dtype) for a in outs]
        if index.known:
            k = min(max(int(index.value.ravel()[0]), 0), len(branches) - 1)
            self.open("")
            vals = self.closed_with(branches[k], [], ops)
            for d, s in zip(res, vals):
                self.copy(d, s)
            self.close()
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
            self.open(head)
            vals = self.closed_with(br, [], ops)
            for d, s in zip(res, vals):
                self.copy(d, s)
            self.close()
        return res

    interruptible = False
    """Whether the kernel's outermost scans (the chunk's steps) stop early where the caller's stop
    flag is set (:func:`translate`): the carry then holds the steps done, the records after them
    are not written."""
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
        self.open(f"for (int {i} = 0; {i} < {int(length)}; {i}++)")
        if check_stop:
            self.line("if (*lv_stop) break;")
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


HEADER = """#include <math.h>
#include <stdint.h>
#include <string.h>
"""


FLUSH_SUBNORMALS = """#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define LV_FLUSH_ON unsigned int lv_csr = _mm_getcsr(); _mm_setcsr(lv_csr | 0x8040u);
#define LV_FLUSH_OFF _mm_setcsr(lv_csr);
#else
#define LV_FLUSH_ON
#define LV_FLUSH_OFF
#endif
"""
"""The kernel computes as XLA does on the CPU: subnormal operands read as zero and subnormal
results flushed to zero (the SSE control bits DAZ and FTZ, set for the call and restored after
it, where the CPU is x86)."""


def _flat(lines):
    """The lines of a function body (nested lists: the places where values were made)."""
    for x in lines:
        if isinstance(x, list):
            yield from _flat(x)
        else:
            yield x


def _dce(jaxpr):
    """The jaxpr without the equations no output depends on (those of the sub-jaxprs of loops and
    conditionals too, by JAX's own rules: ``partial_eval.dce_jaxpr``), its constvars first among
    its invars; and which of those invars it still reads. Differentiation leaves such equations
    (the primal outputs of a ``jvp`` that only its tangent is read of); the C compiler would
    remove them too, but only after spending its time on them."""
    from jax._src.interpreters import partial_eval as pe

    full = pe.convert_constvars_jaxpr(jaxpr)
    try:
        live, used = pe.dce_jaxpr(full, [True] * len(full.outvars), instantiate=True)
    except Exception:  # noqa: BLE001 - an equation without a DCE rule: translate it all
        return full, [True] * len(full.invars)
    return live, used


def translate(closed_jaxpr, name: str = "livens_kernel", translator: "Translator | None" = None) -> str:
    """C source of ``void name(void **args)``: args are the flat inputs of the closed jaxpr, then
    its flat outputs, each a pointer to a C-contiguous array of the aval's shape and dtype, then,
    where ``translator.scratch`` (after the call) is not 0, a pointer to that many bytes of
    scratch memory aligned to 64 bytes (the large arrays: :meth:`Emitter.new`), then, where
    ``translator.interruptible``, a pointer to the stop flag (an ``int``; :attr:`Translator.interruptible`).

    ``translator``: a :class:`Translator` (default a new one); a
    :class:`~livens.engine.native.member_lanes.LaneTranslator` gives C++ source of the same function
    run on several members at once, one per lane of a vector (each array then has a last axis of
    the lanes)."""
    t = Translator() if translator is None else translator
    jaxpr = closed_jaxpr.jaxpr
    n_in = len(jaxpr.invars)
    args = []
    for k, v in enumerate(jaxpr.invars):
        ct = t.ct(v.aval.dtype)
        nm = f"in{k}"
        t.line(f"{ct} *{nm} = ({ct} *) args[{k}];")
        args.append(Buf(nm, v.aval.shape, v.aval.dtype))
    consts = [Buf(None, np.shape(c), np.asarray(c).dtype, np.asarray(c)) for c in closed_jaxpr.consts]
    live, used = _dce(jaxpr)
    t.plan_shared(live)
    outs = t.jaxpr(live, [], [b for b, u in zip(consts + args, used) if u])
    for k, (_, b) in enumerate(zip(jaxpr.outvars, outs)):
        ct = t.ct(b.dtype)
        dst = Buf(f"out{k}", b.shape, b.dtype)
        t.line(f"{ct} *out{k} = ({ct} *) args[{n_in + k}];")
        if b.size:
            t.copy(dst, b)
    body = "\n".join(_flat(t.lines))
    n_args = n_in + len(jaxpr.outvars)
    scratch = f"(char *) args[{n_args}]" if t.scratch else "(char *) 0"
    stop = f"(volatile int *) args[{n_args + bool(t.scratch)}]" if t.interruptible else "&lv_never"
    return (
        t.header()
        + FLUSH_SUBNORMALS
        + "\n".join(t.statics)
        + "\n\n"
        + "".join(f + "\n\n" for f in t.functions)
        + "static volatile int lv_never = 0;\n"
        + f"static void {name}_body(void **args, char *lv_scratch, volatile int *lv_stop) {{\n{body}\n}}\n\n"
        + f"{t.linkage}void {name}(void **args) {{\n  LV_FLUSH_ON\n  {name}_body(args, {scratch}, {stop});\n  LV_FLUSH_OFF\n}}\n"
    )


__all__ = ["Unsupported", "translate", "c_literal"]
