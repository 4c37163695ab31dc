"""A large XLA program compiled twice: quickly first, optimized in the background.

XLA's CPU compiler spends most of its time on LLVM's optimization of the generated code. At XLA's
lowest backend optimization level (``xla_backend_optimization_level=0``) a large time loop (the
beams of SLO09 §4.2, the double four-bar's energy schemes) compiles in about half the time and runs
about half as fast. :class:`TieredJit` is ``jax.jit`` for such programs: the first call of each
argument signature compiles the program at level 0 and runs it; a background thread compiles it
again at XLA's default level, and every call after that compile has ended uses the optimized
executable. A run's first chunks may therefore run on the quick executable, later ones on the
optimized one. They do not agree to the bit: at its default level XLA contracts a product and a sum
into a fused multiply-add, at level 0 it does not (then each operation is the IEEE one, as in
NumPy), so the two differ by round-off, and a Newton iteration that stops near its tolerance may
take one iteration more or fewer: the results agree to round-off and the Newton tolerance, and
which chunks ran on which executable depends on when the background compile ended. A program of
fewer than :data:`LARGE` equations compiles fast at the default level and is compiled once, at it.

This is the XLA counterpart of the native backend's ``-Og`` / ``-O2`` pair
(:mod:`livens.engine.native.build`, whose two levels give the same bits); :func:`wait` waits for the background
compiles, as
:func:`livens.engine.native.wait` does for the C compiler's. A process that ends while one still runs waits
for it at exit (XLA's compiler cannot be stopped, and the interpreter's shutdown under it would abort
the process).

A background compile neither reads nor writes JAX's persistent compilation cache
(:mod:`livens.engine.xla`): loading a cached CPU executable, and serializing one into the cache, in a
second thread while the first compiles crashed test processes (segmentation faults inside the
executable's deserialization and serialization). The optimized tier is therefore compiled in every
process that needs it (in the background); the quick tier, compiled in the calling thread, is cached.
Where the installed JAX has no ``compilation_cache.get_executable_and_time`` and
``put_executable_and_time`` to guard, a large program is compiled once, at the default level, in the
calling thread.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from . import xla
from .jaxprs import size as jaxpr_size
from .xla import signature

LARGE = 1500
"""Equations of a program (its sub-programs included) from which :class:`TieredJit` compiles it quickly
first; below, XLA's default level costs little more than level 0."""

_PENDING: set = set()
_BACKGROUND = threading.local()
_CACHE_READ: list = []
"""JAX's reader of the persistent cache, once :func:`_guard_cache` has wrapped it."""
_CACHE_WRITE: list = []
"""JAX's writer of the persistent cache, once :func:`_guard_cache` has wrapped it."""


def _guard_cache() -> bool:
    """Wrap JAX's reader and writer of the persistent compilation cache (once per process) so that a
    thread running :func:`background` neither reads nor writes it (module docstring); False where JAX
    has no such functions."""
    if _CACHE_READ:
        return True
    try:
        from jax._src import compilation_cache
    except ImportError:  # pragma: no cover - a JAX without the module
        return False
    read = getattr(compilation_cache, "get_executable_and_time", None)
    write = getattr(compilation_cache, "put_executable_and_time", None)
    if read is None or write is None:  # pragma: no cover - a JAX that uses its cache elsewhere
        return False
    _CACHE_READ.append(read)
    _CACHE_WRITE.append(write)

    def guarded_read(*args, **kwargs):
        if getattr(_BACKGROUND, "active", False):
            return None, None
        return _CACHE_READ[0](*args, **kwargs)

    def guarded_write(*args, **kwargs):
        if getattr(_BACKGROUND, "active", False):
            return None
        return _CACHE_WRITE[0](*args, **kwargs)

    compilation_cache.get_executable_and_time = guarded_read
    compilation_cache.put_executable_and_time = guarded_write
    return True


class _Program:
    """The executables of one argument signature: the one in use, and the optimized one to come."""

    def __init__(self, lowered, large: bool):
        self.optimized: Future | None = None
        if not large or not _guard_cache():
            self.executable = lowered.compile(xla.compiler_options())
            self.level = "default"
            return
        self.executable = lowered.compile(xla.compiler_options(once=True))
        self.level = "quick"
        self.optimized = background(lambda: lowered.compile(xla.compiler_options()), "livens-xla-optimize")

    def current(self):
        """The optimized executable once its compile has ended (successfully), else the quick one."""
        future = self.optimized
        if future is not None and future.done():
            self.optimized = None
            if future.exception() is None:
                self.executable, self.level = future.result(), "default"
        return self.executable


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
        """ "quick" or "default": the executable the next call with these arguments runs (None if not compiled)."""
        program = self._programs.get(signature(args))
        if program is None:
            return None
        program.current()
        return program.level

    def __call__(self, *args):
        return self._program(args).current()(*args)

    def _cache_size(self) -> int:
        """The argument signatures compiled, like ``jax.jit``'s."""
        return len(self._programs)


def background(fn: Callable[[], Any], name: str = "livens-compile") -> Future:
    """fn() in a daemon thread, as a Future (XLA's compiler releases the GIL while it works; a C
    compiler runs as a process of its own); :func:`wait` and the process's exit wait for it."""
    future: Future = Future()

    def work():
        _BACKGROUND.active = True
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
    """Wait until the compiles running in the background (:func:`background`) have ended."""
    for future in list(_PENDING):
        try:
            future.result(timeout)
        except Exception:  # noqa: BLE001 - a failed optimized compile leaves the quick executable in use
            pass


# an XLA compile still running in a daemon thread when the interpreter shuts down aborts the process
# ("terminate called ... FATAL: exception not rethrown")
atexit.register(wait)
