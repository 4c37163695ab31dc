"""A large XLA program compiled quickly first, and optimized once its runs have paid for it.

XLA's CPU compiler spends most of its time on LLVM's optimization of the generated code. At XLA's
lowest backend optimization level (``xla_backend_optimization_level=0``) a large time loop (the
beams of SLO09 §4.2, the double four-bar's energy schemes) compiles in about half the time and runs
about half as fast. :class:`TieredJit` is ``jax.jit`` for such programs: the first call of each
argument signature compiles the program at level 0 and runs it, and measures what the compile and
each run cost. Once the runs at level 0 have taken :data:`PAYBACK` times that compile (the time a
second, optimizing compile would take and save again, a rent-or-buy rule), the next call compiles
the program again at XLA's default level, in the calling thread, and every call after it runs the
optimized executable. A short run therefore never pays for the optimization; a long one pays for it
at most about twice.
A caller that knows its runs will be long, or measures the optimized programs' speed, compiles every
program still at level 0 at the default level at once with :func:`optimize` (in its own thread).

The two executables do not agree to the bit: at its default level XLA contracts a product and a sum
into a fused multiply-add, at level 0 it does not (then each operation is the IEEE one, as in
NumPy), so the two differ by round-off, and a Newton iteration that stops near its tolerance may
take one iteration more or fewer: the results agree to round-off and the Newton tolerance, and
which chunks ran on which executable depends on the measured times. A program of fewer than
:data:`LARGE` equations compiles fast at the default level and is compiled once, at it.

XLA compiles one program at a time: XLA's CPU compiler, and its persistent compilation cache,
compiling in a second thread beside the first, or beside the first thread's runs, crashed test
processes (segmentation faults and aborts inside the compile and the cache's (de)serialization).
Each of livens' XLA compiles holds :data:`livens.engine.xla.COMPILE_LOCK`, and every one runs in
the thread that calls but one: an XLA start step (:func:`compile_beside`), a program of its own that
runs once, compiles in a background thread while the calling thread traces and lowers the time loop
(no XLA compile and no run meanwhile), and the loop's own compile waits for it at the lock.
:func:`background` also runs the native backend's start compiles (the C translation and the C
compiler, a process of its own); :func:`wait` waits for them, as :func:`livens.engine.native.wait`
does for the native ``-O2`` libraries.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import jax

from . import xla
from .jaxprs import size as jaxpr_size
from .xla import signature

LARGE = 1000
"""Equations of a program (its sub-programs included) from which :class:`TieredJit` compiles it quickly
first; below, XLA's default level costs little more than level 0."""

PAYBACK = 4.0
"""The optimizing compile starts once the runs at level 0 have taken this many times the quick
compile: it takes about twice the quick compile, and saves about half of each run after it."""

_PENDING: set = set()

_QUICK: weakref.WeakSet = weakref.WeakSet()
"""The programs still running their level-0 executable, for :func:`optimize`."""


def _compile(lowered, level: str):
    """The lowered program compiled by XLA at ``level`` ("quick": level 0, "default")."""
    return xla.compile_lowered(lowered, xla.compiler_options(once=level == "quick"))


class _Program:
    """The executable of one argument signature in use, and what its runs at level 0 have cost."""

    def __init__(self, lowered, large: bool):
        self.lowered = lowered
        self.level = "quick" if large else "default"
        start = time.perf_counter()
        self.executable = _compile(lowered, self.level)
        self.compile_seconds = time.perf_counter() - start
        self.run_seconds = 0.0
        if self.level == "quick":
            _QUICK.add(self)

    def optimize(self) -> None:
        """Compile the optimized executable now and use it from the next call on; a failed
        optimizing compile leaves the quick one in use, and is not tried again."""
        if self.level != "quick" or self.lowered is None:
            return
        try:
            self.executable = _compile(self.lowered, "default")
        except Exception:  # noqa: BLE001 - the quick executable computes the same to round-off
            self.run_seconds = -float("inf")  # never tried again
            self.lowered = None
        else:
            self.level, self.lowered = "default", None
        _QUICK.discard(self)

    def current(self):
        """The executable the next call runs: the optimized one once the quick runs have paid for
        its compile (module docstring); a failed optimizing compile leaves the quick one in use."""
        if self.level == "quick" and self.run_seconds >= PAYBACK * self.compile_seconds:
            self.optimize()
        return self.executable

    def __call__(self, *args):
        executable = self.current()
        if self.level != "quick":
            return executable(*args)
        start = time.perf_counter()
        out = jax.block_until_ready(executable(*args))
        self.run_seconds += time.perf_counter() - start
        return out


class TieredJit:
    """``jax.jit(fn)`` for a large program, compiled quickly first (module docstring); called with
    the same arguments as ``fn``. ``large``: the number of equations from which it is compiled in
    two tiers (default :data:`LARGE`)."""

    def __init__(self, fn, large: int | None = None):
        self.fn = fn
        self.jitted = xla.jit(fn)
        self.large = LARGE if large is None else large
        self._programs: dict = {}

    def _program(self, args) -> _Program:
        key = signature(args)
        program = self._programs.get(key)
        if program is None:
            traced = self.jitted.trace(*args)
            large = jaxpr_size(traced.jaxpr.jaxpr, at_least=self.large) >= self.large
            program = self._programs[key] = _Program(traced.lower(), large)
        return program

    def prepare(self, *args) -> None:
        """Compile (the quick tier of) the program for these arguments, or their shapes
        (``jax.ShapeDtypeStruct``), without running it."""
        self._program(args)

    def level(self, *args) -> str | None:
        """ "quick" or "default": the executable in use for these arguments (None if not compiled)."""
        program = self._programs.get(signature(args))
        return None if program is None else program.level

    def __call__(self, *args):
        return self._program(args)(*args)

    def _cache_size(self) -> int:
        """The argument signatures compiled, like ``jax.jit``'s."""
        return len(self._programs)


def compile_beside(lowered) -> Future:
    """The XLA compile of ``lowered`` (a start step: compiled with the options of its ``jit``) in a
    daemon thread, as a Future, holding :data:`livens.engine.xla.COMPILE_LOCK` (module docstring):
    the calling thread traces the time loop meanwhile, and compiles it once this compile has ended."""
    return background(lambda: xla.compile_lowered(lowered), "livens-start-xla")


def background(fn: Callable[[], Any], name: str = "livens-compile") -> Future:
    """fn() in a daemon thread, as a Future; :func:`wait` and the process's exit wait for it. For the
    C translation and compiler, which runs as a process of its own, and for an XLA compile only
    through :func:`compile_beside` (module docstring)."""
    future: Future = Future()

    def work():
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - kept on the future, raised where it is awaited
            future.set_exception(exc)
        finally:
            _PENDING.discard(future)

    _PENDING.add(future)
    threading.Thread(target=work, name=name, daemon=True).start()
    return future


def wait(timeout: float | None = None) -> None:
    """Wait until the compiles running in the background (:func:`background`) have ended, and the
    persistent cache entries kept back are written (:func:`livens.engine.xla.write_kept_entries`)."""
    xla.write_kept_entries()
    for future in list(_PENDING):
        try:
            future.result(timeout)
        except Exception:  # noqa: BLE001 - a failed optimized compile leaves the quick executable in use
            pass


def optimize() -> None:
    """Compile every program still at XLA's level 0 at the default level now, in the calling thread
    (module docstring), so that its next call runs the optimized executable whatever its runs have
    cost: for a measurement of the optimized programs' speed, or a caller that knows its runs will
    be long. Their results change by round-off only (module docstring)."""
    for program in list(_QUICK):
        program.optimize()


# a compile still running in a daemon thread when the interpreter shuts down would be cut off
atexit.register(wait)
