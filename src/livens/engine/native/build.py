"""Compile the C source of :mod:`livens.engine.native.codegen` and call it from Python.

The source is compiled by the system's C compiler (``$CC``, which may hold several words such
as ``ccache gcc``, else ``cc``, ``gcc`` or ``clang`` on the PATH) into a shared library, kept in
the cache of :mod:`livens.engine.native.cache` under a name that hashes the source, the
compiler's identity and version, the flags and the target CPU, so that a second process (or a
second run of the same system and scheme) loads it without compiling. The library is called
through :mod:`ctypes`, which releases the GIL during the call: several threads may run kernels
at once.

Flags: ``-O2`` without fast-math, and ``-ffp-contract=off`` (no fused multiply-adds the program
does not contain), so that every floating-point operation is the IEEE operation of the jaxpr.
The generated function is one large body of scalars and small arrays, on which some of GCC's
passes take much of the compile time and gain the kernel nothing measurable: RTL global common
subexpression elimination (``-fno-gcse``; the tree-level passes do the same work before it), the
alias queries of value numbering (capped by ``--param=sccvn-max-alias-queries-per-access``),
register allocation by loop regions (``-fira-region=one``) and points-to analysis (every array
is a local whose address is never taken but for the arguments). Straight-line (SLP) vectorization
stays on: it costs a large source somewhat more compile time (in the background ``-O2`` compile)
and packs the adjacent elements of the small arrays of a Newton step (the blocks of a structured
tangent, the rows of an elimination) into vectors. Loops are vectorized with GCC's "cheap" cost model
(``-O2`` alone takes only loops whose trip count is a multiple of the vector length) where they
run at least twice the vector length (``min-vect-loop-bound``: shorter loops, as in the 3-vectors
of a pendulum, ran slower vectorized): the row updates of LU and of the block eliminations. Each
lane does the IEEE operation of one element, and GCC vectorizes no floating-point sum without
``-fassociative-math``, so vectorization changes no bit of the results. GCC compiles for this
CPU (``-march=native``: AVX2 or AVX-512 vectors where it has them), and the library's name holds
what that means here (:data:`ARCH_FLAGS`).

Large sources (more than :data:`LARGE_SOURCE` characters, where GCC at ``-O2`` may take several
seconds) whose optimized library is not yet cached are compiled twice at once: at ``-O0``
(:data:`QUICK_FLAGS`, for this CPU where ``-O2`` is: :func:`quick_flags`) and at ``-O2``. The
kernel runs the ``-O0`` library from the first call and switches to the ``-O2`` one when its
compile ends (:func:`wait` waits for that). ``-O0`` compiles the large body of a time loop in a
fraction of ``-Og``'s time (``-Og`` still allocates registers over the whole function, most of
its compile); the kernel runs more slowly on it until the ``-O2`` library is in use. The ``-O2``
compile, which nothing waits for, runs at a lower priority
(:data:`~livens.engine.native.cache.BACKGROUND_NICE`): it takes the CPU that the run's own work
(its ``-O0`` compile, its tracing, its first steps) leaves.
Every level follows IEEE arithmetic (no fast-math, no contraction; x86-64 computes at ``-O0`` in
the same SSE registers, never in x87's wider ones), so the switch changes no bit of the results.
A process that exits first stops the ``-O2`` compile; the next one compiles it again.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
import threading
import time
from concurrent.futures import Future
from typing import NamedTuple

import jax
import numpy as np

from . import cache
from .cache import CompileError
from .codegen import Translator, Unsupported, translate

FLAGS = ("-O2", "-std=gnu99", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-w")
GCC_FLAGS = (
    "-fno-gcse",
    "--param=sccvn-max-alias-queries-per-access=100",
    "-fira-region=one",
    "-fno-tree-pta",
    "-fvect-cost-model=cheap",
    "--param=min-vect-loop-bound=2",
)
"""Added where the compiler is GCC (other compilers do not know them)."""
ARCH_FLAGS = ("-march=native",)
"""Added where the compiler is GCC and says what ``-march=native`` means on this CPU (its wider
vectors and instructions; with ``-ffp-contract=off`` no fused multiply-add, so the same bits).
What it means is part of the library's name: a cache shared by machines with different CPUs
never loads a library built for another."""
QUICK_FLAGS = ("-O0", "-std=gnu99", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-w")
"""The quick compile of a large source: the same arithmetic as :data:`FLAGS`, no optimization."""
QUICK_LEVEL = QUICK_FLAGS[0]
"""The optimization level of :data:`QUICK_FLAGS` (:attr:`Kernel.level` until ``-O2`` is in use)."""
ONCE_FLAGS = QUICK_FLAGS
"""The compile of a program that runs once (``build(once=True)``): the same arithmetic, no optimization."""
LARGE_SOURCE = 32_000
"""Sources of more characters than this are compiled at both levels at once (module docstring).
GCC at ``-O2`` spends about as much CPU time per character on every kernel livens writes (tens of
microseconds), so a source of this size takes about a second there: a larger one would hold the
first call of a run for longer than its ``-O0`` compile and the run's first chunks at ``-O0``."""
_PENDING: set = set()  # futures of -O2 libraries compiled in the background


def _resolve(cc: str) -> str | None:
    """``cc`` with its first word a path to an executable, or None where there is none."""
    try:
        words = cache.compiler_words(cc)
    except ValueError:
        return None
    if not words:
        return None
    first = shutil.which(words[0]) or (words[0] if os.path.isfile(words[0]) else None)
    return None if first is None else " ".join([first, *words[1:]])


def compiler() -> str | None:
    """The C compiler command to use (``$CC``, which may hold several words), or None where there is none."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        return _resolve(cc)
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def missing_compiler() -> str:
    """Why :func:`compiler` found none, in words that name the fix."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        try:
            first = cache.compiler_words(cc)[0]
        except (ValueError, IndexError):
            return f"no C compiler: CC={cc!r} is not a command; set CC to a C compiler (e.g. gcc), or unset it"
        return (
            f"no C compiler: CC={cc!r} names {first!r}, which is not an executable on the PATH; "
            "set CC to a C compiler, or unset it"
        )
    return "no C compiler found (set CC, or install cc, gcc or clang)"


def _run(cc: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*cache.compiler_words(cc), *args], capture_output=True, text=True, timeout=timeout)


_GCC: dict = {}
_VERSION: dict = {}
_TARGET: dict = {}  # compiler -> what -march=native means on this CPU ("" where unknown)


def target_options(cc1_line: str) -> str:
    """The target options (``-m...`` and ``--param name=value``) of the compiler proper's command
    line ``cc1_line``: what ``-march=native`` means on this CPU, without the input and the
    temporary output names, which change from call to call."""
    try:
        words = shlex.split(cc1_line)
    except ValueError:
        words = cc1_line.split()
    keep = []
    for k, w in enumerate(words):
        if w.startswith("-m") or (k > 0 and words[k - 1] == "--param"):
            keep.append(w)
    return " ".join(keep)


def native_target(cc: str) -> str:
    """What ``-march=native`` expands to for the compiler ``cc`` on this CPU (the target options
    of the compiler proper's command line, as ``-###`` prints it: :func:`target_options`), or ""
    where it cannot say."""
    if cc not in _TARGET:
        try:
            run = _run(cc, *ARCH_FLAGS, "-###", "-x", "c", "-c", "-o", os.devnull, os.devnull)
            lines = [ln for ln in run.stderr.splitlines() if "cc1" in ln and "-march=" in ln]
            _TARGET[cc] = target_options(lines[-1]) if run.returncode == 0 and lines else ""
        except (OSError, ValueError, subprocess.SubprocessError):
            _TARGET[cc] = ""
    return _TARGET[cc]


def compiler_identity(cc: str) -> str:
    """What names the compiler ``cc`` in a library's key: its command and what ``--version`` prints."""
    if cc not in _VERSION:
        try:
            _VERSION[cc] = _run(cc, "--version").stdout.strip()
        except (OSError, ValueError, subprocess.SubprocessError):
            _VERSION[cc] = ""
    return f"{cc}\n{_VERSION[cc]}"


CXX_FLAGS = ("-x", "c++", "-std=gnu++17", "-fno-exceptions", "-fno-rtti")
"""In place of ``-std=gnu99`` for the C++ source of a lane kernel (:mod:`livens.engine.native.member_lanes`)."""


def _as_cpp(opts: tuple) -> tuple:
    """The flags ``opts`` for C++ source."""
    k = opts.index("-std=gnu99")
    return opts[:k] + CXX_FLAGS + opts[k + 1 :]


def is_gcc(cc: str) -> bool:
    """Whether the compiler ``cc`` is GCC."""
    if cc not in _GCC:
        out = compiler_identity(cc).split("\n", 1)[1]
        first = out.splitlines()[0] if out else ""
        _GCC[cc] = ("gcc" in first.lower() or "Free Software Foundation" in out) and "clang" not in out.lower()
    return _GCC[cc]


LANE_ARCH_FLAGS = ("-mprefer-vector-width=512",)
"""Added to :data:`ARCH_FLAGS` for a lane kernel: the loops GCC vectorizes in it (the lane-by-lane
math functions, the broadcasts) then use vectors as wide as its own, where the CPU has them; a
loop vectorized at half the width passes its result through memory, which stalls."""


def flags(cc: str, cpp: bool = False) -> tuple:
    """The flags for the compiler ``cc``: :data:`FLAGS`, and :data:`GCC_FLAGS` where it is GCC, with
    :data:`ARCH_FLAGS` where it also says what they mean here (:func:`native_target`); for C++
    source (``cpp``), :data:`CXX_FLAGS` in place of the C standard."""
    base = _as_cpp(FLAGS) if cpp else FLAGS
    if not is_gcc(cc):
        return base
    arch = (ARCH_FLAGS + (LANE_ARCH_FLAGS if cpp else ())) if native_target(cc) else ()
    return base + GCC_FLAGS + arch


def quick_flags(cc: str, cpp: bool = False) -> tuple:
    """The flags of the quick ``-O0`` compile (:data:`QUICK_FLAGS`; :data:`CXX_FLAGS` for C++ source),
    with the target flags of :func:`flags` (:data:`ARCH_FLAGS`, and :data:`LANE_ARCH_FLAGS` for a
    lane kernel) where it has them: GCC then compiles a lane kernel's vectors of 8 doubles to the
    CPU's own instead of splitting them into SSE halves (the source compiles in a fraction of the
    time, and the library runs several times faster until the ``-O2`` one is in use); the same
    arithmetic as at ``-O2``."""
    opts = _as_cpp(QUICK_FLAGS) if cpp else QUICK_FLAGS
    if is_gcc(cc) and native_target(cc):
        opts = opts + ARCH_FLAGS + (LANE_ARCH_FLAGS if cpp else ())
    return opts


def _parts(cc: str, opts: tuple, source: str) -> tuple:
    """What decides a library's bytes (its cache key): the source, the compiler's identity, the
    flags, and what ``-march=native`` means on this CPU where the flags hold it."""
    target = native_target(cc) if any(o in opts for o in ARCH_FLAGS) else ""
    return (source, compiler_identity(cc), *opts, target)


def _library(cc: str, opts: tuple, source: str, name: str) -> str:
    """The path of the cached library (:mod:`livens.engine.native.cache`)."""
    return cache.path(_parts(cc, opts, source), name)


def _load(cc: str, opts: tuple, source: str, name: str, background: bool = False):
    """The function ``name`` of ``source`` compiled with ``opts`` (from the cache where it is there);
    ``background``: a compile nothing waits for, at a lower priority (:data:`cache.BACKGROUND_NICE`)."""
    return cache.load(cc, opts, source, name, _parts(cc, opts, source), background)


def build(source: str, name: str = "livens_kernel", quick: bool = False, cpp: bool = False, once: bool = False):
    """The ctypes function ``name`` of the compiled ``source`` (from the cache where it is there).

    With ``quick=True``, a large source whose ``-O2`` library is not cached is compiled at both
    levels at once (module docstring); the result is then ``(fn, future)``: the ``-O0`` function,
    and a :class:`concurrent.futures.Future` of the ``-O2`` one (None where ``fn`` is already it).
    ``cpp``: the source is C++ (a lane kernel), compiled with GCC only. ``once=True``: a program
    run once, compiled at :data:`ONCE_FLAGS` only."""
    cc = compiler()
    if cc is None:
        raise CompileError(missing_compiler())
    if cpp and not is_gcc(cc):
        raise CompileError("lane kernels need GCC (its vector extensions in C++)")
    if once:  # a program run once: -O0
        return _load(cc, ONCE_FLAGS, source, name)
    opts = flags(cc, cpp)
    if quick and len(source) > LARGE_SOURCE and not cache.verified(_library(cc, opts, source, name)):
        future: Future = Future()

        def optimized():
            try:
                future.set_result(_load(cc, opts, source, name, True))
            except BaseException as exc:  # the -O0 library stays; the error is kept on the future
                future.set_exception(exc)
            finally:
                _PENDING.discard(future)

        _PENDING.add(future)
        threading.Thread(target=optimized, name="livens-native-O2", daemon=True).start()
        return _load(cc, quick_flags(cc, cpp), source, name), future
    fn = _load(cc, opts, source, name)
    return (fn, None) if quick else fn


_STOP = np.zeros(1, np.intc)
"""The stop flag that interruptible kernels read at each step of their chunk (:func:`interrupt`)."""


def interrupt() -> None:
    """Make the interruptible kernels running now (and those called later, until :func:`resume`)
    stop after the step under way: Ctrl-C is then answered within a step, the steps done kept.
    Safe to call from a signal handler."""
    _STOP[0] = 1


def resume() -> None:
    """Let interruptible kernels run their whole chunks again (after :func:`interrupt`)."""
    _STOP[0] = 0


def wait(timeout: float | None = None) -> None:
    """Wait until the ``-O2`` libraries being compiled in the background are in use (module docstring)."""
    for future in list(_PENDING):
        try:
            future.result(timeout)
        except Exception:  # a failed -O2 compile leaves the -O0 library in use
            pass
        while future in _PENDING:  # its callbacks (the kernels' switch) run before it leaves
            time.sleep(0.001)


class Kernel:
    """A function of arrays compiled to one C function: called like the traced function, it
    returns the same pytree of outputs, as NumPy arrays (:func:`compile_function`)."""

    def __init__(
        self,
        closed_jaxpr,
        in_tree,
        out_tree,
        fn,
        compile_s: float,
        source: str,
        optimized=None,
        lanes: int = 0,
        scratch: int = 0,
        interruptible: bool = False,
    ):
        self.jaxpr, self.in_tree, self.out_tree, self.fn = closed_jaxpr, in_tree, out_tree, fn
        self.scratch, self.interruptible = scratch, interruptible
        """Bytes of scratch memory a call needs (its large arrays, off the C stack), 0 for none."""
        self.lanes = lanes
        """0 for a kernel of one member; else the members it runs at once (:mod:`livens.engine.native.member_lanes`):
        every argument and output then has a first axis of that length, one member per row."""
        self.in_avals = [(v.aval.shape, np.dtype(v.aval.dtype)) for v in closed_jaxpr.jaxpr.invars]
        self.out_avals = [(v.aval.shape, np.dtype(v.aval.dtype)) for v in closed_jaxpr.jaxpr.outvars]
        self._held = threading.local()  # a kernel of one member: each thread's arrays (_call_arrays)
        self._out_layout, at = [], 0  # (offset, bytes) of each output in a call's block (_outputs)
        for shape, dtype in self.out_avals:
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            self._out_layout.append((at, nbytes))
            at += -(-max(nbytes, 1) // 64) * 64
        self.compile_s, self.source = compile_s, source
        self.level = "-O2" if optimized is None else QUICK_LEVEL
        """The optimization of the library in use: "-O0" until the background "-O2" compile ends."""
        if optimized is not None:
            optimized.add_done_callback(self._switch)

    def _switch(self, future) -> None:
        if future.exception() is None:
            self.fn, self.level = future.result(), "-O2"

    def __call__(self, *args, buffers: dict | None = None):
        """The outputs for ``args``. ``buffers`` (a lane kernel only): a dict that keeps the kernel's
        argument and output buffers from one call to the next (a loop of calls then allocates, and
        touches fresh memory, only once); the outputs are then views of buffers that the next call
        with the same dict overwrites."""
        leaves, tree = jax.tree_util.tree_flatten(args)
        if tree != self.in_tree:
            raise TypeError(f"native kernel called with {tree}, compiled for {self.in_tree}")
        if self.lanes:
            return self._call_lanes(leaves, buffers)
        if buffers is not None:
            raise TypeError("native kernel: buffers are kept for lane kernels only")
        held = getattr(self._held, "arrays", None)
        if held is None:
            held = self._held.arrays = self._call_arrays()
        ins, ptrs, n_in, _ = held  # the scratch and stop flag held too: their addresses are in ptrs
        for x, view in zip(leaves, ins):
            a = np.asarray(x)
            if a.shape != view.shape:
                raise TypeError(f"native kernel: an argument of shape {a.shape}, compiled for {view.shape}")
            np.copyto(view, a, casting="unsafe")
        block, outs = self._outputs()
        base = block.ctypes.data
        for k, (off, _) in enumerate(self._out_layout):
            ptrs[n_in + k] = base + off
        fn = self.fn
        fn(ptrs)
        return jax.tree_util.tree_unflatten(self.out_tree, outs)

    def _call_arrays(self):
        """This thread's arrays of a kernel of one member, kept from call to call (:meth:`__call__`):
        the arguments' (each call copies its arguments into them), the scratch memory, and the
        array of pointers the kernel reads, whose outputs' entries each call sets (the outputs are
        new arrays at every call, :meth:`_outputs`). Taking an array's address costs more than
        copying a small one, and fresh scratch memory costs page faults."""
        ins = [_aligned(tuple(shape), dtype) for shape, dtype in self.in_avals]
        extra = ([_aligned((self.scratch,), np.uint8)] if self.scratch else []) + (
            [_STOP] if self.interruptible else []
        )
        n_in, n_out = len(ins), len(self.out_avals)
        ptrs = (ctypes.c_void_p * max(n_in + n_out + len(extra), 1))()
        for k, a in enumerate(ins + [None] * n_out + extra):
            if a is not None:
                ptrs[k] = a.ctypes.data
        return ins, ptrs, n_in, extra

    def _outputs(self):
        """One new block of memory for a call's outputs and their views into it, each aligned to
        64 bytes (its address the block's plus :attr:`_out_layout`'s offset)."""
        size = self._out_layout[-1][0] + self._out_layout[-1][1] if self._out_layout else 0
        block = _aligned((max(size, 1),), np.uint8)
        outs = [
            np.ndarray(shape, dtype, buffer=block, offset=off)
            for (off, _), (shape, dtype) in zip(self._out_layout, self.out_avals)
        ]
        return block, outs

    def _lane_buffers(self, buffers: dict | None):
        """The kernel's arrays, lane-last, 64-bit, aligned, kept in ``buffers``: (argument buffers,
        output buffers, their member-first views), the views made once, not at every call."""
        held = None if buffers is None else buffers.get(id(self))
        if held is None:
            L = self.lanes
            ins = [_aligned(tuple(shape) + (L,), _lane_dtype(dtype)) for shape, dtype in self.in_avals]
            outs = [_aligned(tuple(shape) + (L,), _lane_dtype(dtype)) for shape, dtype in self.out_avals]
            held = (ins, outs, [np.moveaxis(b, -1, 0) for b in ins], [np.moveaxis(b, -1, 0) for b in outs])
            if buffers is not None:
                buffers[id(self)] = held
        return held

    def _call_lanes(self, leaves, buffers: dict | None = None):
        """The lane kernel on member-first arguments: each member's values go to its lane (the
        last axis of the kernel's arrays, 64-bit, masks -1 for true) and back."""
        L = self.lanes
        ins, outs, in_views, out_views = self._lane_buffers(buffers)
        for x, view, (shape, dtype) in zip(leaves, in_views, self.in_avals):
            a = np.asarray(x)
            if a.shape != (L, *shape):
                raise TypeError(f"native lane kernel: an argument of shape {a.shape}, compiled for {(L, *shape)}")
            np.copyto(view, a, casting="unsafe")  # each member to its lane
            if dtype == np.bool_:
                np.negative(view, out=view)  # a mask: -1 for true
        held = None if buffers is None else buffers.get((id(self), "pointers"))
        if held is None:  # the arrays' addresses, kept with the arrays (taking one costs more than a small copy)
            arrays = ins + outs
            if self.scratch:
                arrays = arrays + [_aligned((self.scratch,), np.uint8)]
            if self.interruptible:
                arrays = arrays + [_STOP]
            held = ((ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays]), arrays)
            if buffers is not None:
                buffers[(id(self), "pointers")] = held
        fn = self.fn
        fn(held[0])
        res = []  # member-first views of the lane-last buffers (copied only to change the dtype)
        for o, (_, dtype) in zip(out_views, self.out_avals):
            res.append(o != 0 if dtype == np.bool_ else o.astype(dtype, copy=False))
        return jax.tree_util.tree_unflatten(self.out_tree, res)


def _lane_dtype(dtype) -> np.dtype:
    """The type of a value of ``dtype`` in a lane kernel's arrays."""
    return np.dtype(np.float64) if np.issubdtype(dtype, np.floating) else np.dtype(np.int64)


def _aligned(shape, dtype, align: int = 64) -> np.ndarray:
    """An empty C-contiguous array whose data starts at a multiple of ``align`` bytes (a lane
    kernel reads and writes its arguments as whole vectors)."""
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(n + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + n].view(dtype).reshape(shape)


class Traced(NamedTuple):
    """A function traced and translated, not yet compiled (:func:`trace_function`)."""

    jaxpr: object
    source: str
    in_tree: object
    out_tree: object
    out_shape: object  # the outputs' ShapeDtypeStructs
    lanes: int
    seconds: float  # spent tracing and translating
    scratch: int = 0  # bytes of scratch memory the kernel needs (livens.engine.native.codegen.translate)
    interruptible: bool = False  # its outermost scans stop where interrupt() was called


def trace_function(fn, *args, lanes: int = 0, interruptible: bool = False) -> Traced:
    """Trace ``fn(*args)`` (arrays or pytrees of arrays; their shapes and dtypes are fixed) and
    translate it to C (:func:`compile_traced` compiles it). Raises :class:`Unsupported` where the
    program holds something the translator does not handle. ``interruptible``: the kernel's
    outermost scans (a chunk's steps) stop after the step under way once :func:`interrupt` is
    called; the carry then holds the steps done."""
    t0 = time.perf_counter()
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    if closed.effects:
        raise Unsupported(f"effects {closed.effects}")
    if lanes:
        from .member_lanes import LaneTranslator

        translator = LaneTranslator(lanes)
    else:
        translator = Translator()
    translator.interruptible = interruptible
    source = translate(closed, translator=translator)
    _, in_tree = jax.tree_util.tree_flatten(args)
    out_tree = jax.tree_util.tree_structure(out_shape)
    seconds = time.perf_counter() - t0
    return Traced(closed, source, in_tree, out_tree, out_shape, lanes, seconds, translator.scratch, interruptible)


def compile_traced(traced: Traced, once: bool = False) -> Kernel:
    """The :class:`Kernel` of a :class:`Traced` function. ``once=True``: a program that runs once or
    a few times (a start step), compiled at ``-O0`` only (:data:`ONCE_FLAGS`: the same arithmetic,
    a fraction of the compile time)."""
    t0 = time.perf_counter()
    if once:
        kernel_fn, optimized = build(traced.source, once=True), None
    else:
        kernel_fn, optimized = build(traced.source, quick=True, cpp=bool(traced.lanes))
    return Kernel(
        traced.jaxpr,
        traced.in_tree,
        traced.out_tree,
        kernel_fn,
        traced.seconds + time.perf_counter() - t0,
        traced.source,
        optimized,
        traced.lanes,
        traced.scratch,
        traced.interruptible,
    )


def compile_function(fn, *args, lanes: int = 0, interruptible: bool = False) -> Kernel:
    """Trace ``fn(*args)`` (arrays or pytrees of arrays; their shapes and dtypes are fixed) and
    compile it to one C function. Raises :class:`Unsupported` where the program holds something
    the translator does not handle or no C compiler works.

    ``lanes`` > 0: a kernel that runs ``fn`` on that many argument sets at once (each argument
    and output with a first axis of ``lanes``; :mod:`livens.engine.native.member_lanes`), ``args`` being one set."""
    return compile_traced(trace_function(fn, *args, lanes=lanes, interruptible=interruptible))
