"""The chunk loop of :func:`livens.simulate` as a native kernel, or with XLA where it cannot be.

:class:`ChunkRunner` is called like the jitted loop of :func:`livens.timestep.make_loop`. At its first
call for given argument shapes it translates the loop to one C function (:mod:`livens.engine.native`);
where the loop holds something the translator does not handle, no C compiler is found, the
system is larger than :attr:`~livens.engine.options.EngineOptions.max_native_unknowns` (large systems have
banded or matrix-free tangents that XLA runs well, and their C source would be long to compile; a
tangent factorized by groups is judged by its largest dense block, found from a trace of the loop) or
the C translation is longer than :attr:`~livens.engine.options.EngineOptions.max_native_lines`, it
runs the jitted XLA loop instead.

The backend is the engine's switch (:mod:`livens.engine.options`): "auto" (native where possible,
else XLA), "native" (an error where it is not possible), "xla" or "plain" (never native).
Where "auto" meant native and XLA runs the loop (a primitive the translator does not handle, the C
compiler failed), a one-line :class:`NativeFallback` warning says so and why, once per reason; a
system above a size limit runs with XLA by design, without a notice.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np

from ..jaxprs import size as jaxpr_size
from ..options import EngineOptions, factorized_size, large_program, reported_blocks


def runs_natively(options: EngineOptions, size: tuple[int, str]) -> bool:
    """Whether a time loop of ``size`` (:func:`livens.engine.options.loop_size`) is meant to run
    natively under ``options``: a C compiler is there, and with "auto" the system is small
    (:attr:`EngineOptions.max_native_unknowns`). The translation may still refuse the loop
    (:class:`ChunkRunner`); and a loop above the limit whose traced tangent is factorized by groups
    in small blocks still runs natively where a ChunkRunner runs it (asked before the loop is
    traced, this answers by the size alone)."""
    from .build import compiler

    if options.backend in ("xla", "plain") or compiler() is None:
        return False
    return options.backend == "native" or size[0] <= options.max_native_unknowns


class NativeUnavailable(ValueError):
    """backend="native" was asked for and the loop cannot run natively (the reason is the message)."""


class NativeFallback(UserWarning):
    """The one-line notice that a loop meant to run natively runs with XLA, and why (given once
    per reason and process; ``warnings.simplefilter("ignore", NativeFallback)`` silences it).
    ``reason``: the why alone, for a caller that words the notice for its own run."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = message if reason is None else reason


_NOTIFIED: set = set()


def _notify(reason: str) -> None:
    if reason not in _NOTIFIED:
        _NOTIFIED.add(reason)
        notice = NativeFallback(f"livens: this run uses XLA, not native code: {reason}", reason)
        warnings.warn(notice, stacklevel=5)


def _signature(args):
    leaves, tree = jax.tree_util.tree_flatten(args)
    return tree, tuple((np.shape(x), np.dtype(getattr(x, "dtype", type(x))).str) for x in leaves)


class ChunkRunner:
    """The jitted XLA loop ``xla`` or, where possible, ``loop`` compiled natively (module docstring).

    ``options``: the engine's (:class:`~livens.engine.options.EngineOptions`: the backend asked
    for and the size limit of "auto"); ``size``: :func:`~livens.engine.options.loop_size` of the
    loop; ``lanes``: > 0 for kernels that run that many members at once
    (:mod:`livens.engine.native.member_lanes`); ``interruptible``: the kernel reads the stop flag
    (:func:`livens.engine.interrupt_native`) at each step of its chunk; ``probe``: the function whose
    trace decides, under "auto", a loop above the size limit (:meth:`_factorized_size`): ``loop``
    by default; :func:`~livens.engine.loops.single_loop` gives the function ``xla`` compiles, whose
    trace JAX keeps for XLA. After a call,
    :attr:`backend` names what ran it and :attr:`reason` why XLA ran it where native was asked for
    or possible in principle; :attr:`limited` says whether that reason is a size limit of "auto"
    (:attr:`EngineOptions.max_native_unknowns`, :attr:`EngineOptions.max_native_lines`).
    """

    def __init__(
        self, loop, xla, options: EngineOptions, size: tuple[int, str], lanes: int = 0, interruptible=True, probe=None
    ):
        self.loop, self.xla, self.options, self.size, self.lanes = loop, xla, options, size, lanes
        self.probe = loop if probe is None else probe
        self.interruptible = interruptible
        self.requested = options.backend
        self.kernels: dict = {}
        self.backend = "xla" if self.requested in ("xla", "plain") else None
        self.reason = None
        self.limited = False  # the reason is a size limit of "auto" (EngineOptions.max_native_*)
        self.suspect = None  # a translator fault not yet reported (see _native)

    def _native(self, args):
        from . import compile_traced, trace_function
        from .codegen import Unsupported
        from .target import native_trace

        limit = self.options.max_native_unknowns
        if self.requested == "auto" and self.size[0] > limit:
            size, equations = self._factorized_size(args)
            if size[0] > limit and not (not self.lanes and large_program(self.options, size, equations)):
                self.reason = (
                    f"{size[1]}, more than the native limit of {limit} (EngineOptions.max_native_unknowns; "
                    "backend='native' compiles it natively)"
                )
                self.limited = True
                return None
        try:
            # a kernel within the size limit (of one member, or in lanes: a lane kernel's cond computes
            # only the branches some lane takes, and its lanes then run the single kernel's program) is
            # traced with the building blocks' native forms (.target), as a function of its own: JAX keeps
            # that trace apart from its trace of self.loop, which XLA may compile
            own = self.size[0] <= limit
            with native_trace(own):
                fn = (lambda *a: self.loop(*a)) if own else self.loop
                traced = trace_function(fn, *args, lanes=self.lanes, interruptible=self.interruptible)
            lines, most = traced.source.count("\n"), self.options.max_native_lines
            if self.requested == "auto" and lines > most:
                self.reason = (
                    f"its C translation has {lines} lines, more than the native limit of {most} "
                    "(EngineOptions.max_native_lines)"
                )
                self.limited = True
                return None
            return compile_traced(traced)
        except Unsupported as exc:
            self.reason = str(exc)
            if self.requested == "native":
                raise NativeUnavailable(
                    f"backend='native': this run cannot be compiled natively ({exc}); use backend='auto' or 'xla'."
                ) from None
            _notify(self.reason)
            return None
        except Exception as exc:  # noqa: BLE001 - a fault of the translator: XLA runs the loop, and says so
            self.reason = f"the native translator failed ({type(exc).__name__}: {exc})"
            if self.requested == "native":
                raise NativeUnavailable(f"backend='native': {self.reason}; use backend='auto' or 'xla'.") from exc
            # blamed on the translator only once XLA has run the same loop (call): where XLA raises
            # too, the fault is in the loop itself (a user function, a scheme) and that error stands
            self.suspect = self.reason
            return None

    def _factorized_size(self, args) -> tuple[tuple[int, str], int]:
        """The size the limit bounds (:func:`~livens.engine.options.factorized_size`): the largest
        dense block of a tangent by groups, as its solver reports it while :attr:`probe` is traced
        (JAX keeps the trace: the translation or XLA's compile of the same function reuses it; the
        native loop's where its size is within :attr:`EngineOptions.large_program_unknowns`), else
        :attr:`size`; and the equations of that trace, counted up to
        :attr:`EngineOptions.large_program_equations` (:func:`~livens.engine.options.large_program`).
        A loop whose trace fails keeps its size and counts none (XLA then raises the loop's error)."""
        # within large_program_unknowns native code is the likelier choice: its function is traced, the
        # trace its translation then reuses (the XLA function has the small-product rewrite in it)
        likely_native = not self.lanes and self.size[0] <= self.options.large_program_unknowns
        try:
            with reported_blocks() as blocks:
                closed = jax.make_jaxpr(self.loop if likely_native else self.probe)(*args)
        except Exception:  # noqa: BLE001 - the loop's own error, which XLA raises when it traces the loop
            return self.size, 0
        equations = jaxpr_size(closed.jaxpr, at_least=self.options.large_program_equations)
        return factorized_size(self.size, blocks), equations

    def kernel(self, *args):
        """The native kernel for these arguments (compiled on first need), or None where XLA runs them."""
        if self.requested in ("xla", "plain"):
            return None
        key = _signature(args)
        if key not in self.kernels:
            self.kernels[key] = self._native(args)
        return self.kernels[key]

    def prepare(self, *args) -> None:
        """Compile the loop for these arguments (or their shapes) without running it: the native
        kernel, or where XLA runs the loop, XLA's program."""
        if self.kernel(*args) is None and hasattr(self.xla, "prepare"):
            self.xla.prepare(*args)

    def _cache_size(self) -> int:
        """Compiled variants held (native kernels and XLA executables), like ``jax.jit``'s."""
        return len(self.kernels) + self.xla._cache_size()

    def __call__(self, *args):
        if self.requested in ("xla", "plain"):
            return self.xla(*args)
        kernel = self.kernel(*args)
        self.backend = "xla" if kernel is None else "native"
        if kernel is not None:
            return kernel(*args)
        out = self.xla(*args)
        if self.suspect is not None:
            warnings.warn(
                f"{self.suspect}; XLA runs this loop instead (results are the same). This is a "
                "bug in livens.engine.native: please report it.",
                RuntimeWarning,
                stacklevel=3,
            )
            self.suspect = None
        return out
