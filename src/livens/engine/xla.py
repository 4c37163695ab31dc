"""XLA's side of the engine: the options livens' programs compile with, and the persistent
compilation cache.

Compile options (:func:`jit`, :func:`compiler_options`): on the CPU, XLA's newer MLIR fusion
emitters are switched off (``xla_cpu_use_fusion_emitters``); the classic emitters compile the large
time loops of the beams and the double four-bar in about two thirds of the time and run them as
fast (``python -m benchmarks``). A program run once or a few times (a start step, a sparsity
pattern's columns, the quick tier of :mod:`livens.engine.tiers`) is compiled with LLVM's
optimization off (``xla_backend_optimization_level=0``: about half the compile time, about half the
speed). Where the installed jaxlib does not know an option, or ``XLA_FLAGS`` names it, livens'
programs compile with XLA's defaults.

The persistent compilation cache: a compiled time loop is stored on disk, so that a second process
running the same (example, scheme) pair skips XLA's compilation. It lives in
``$LIVENS_COMPILATION_CACHE`` if that names a directory, else in the user cache directory
(``$XDG_CACHE_HOME/livens/jax`` or ``~/.cache/livens/jax``; ``~/Library/Caches/livens/jax`` on macOS;
``%LOCALAPPDATA%\\livens\\jax`` on Windows); ``LIVENS_COMPILATION_CACHE=0`` (or ``off``) switches
it off. It is JAX's own cache, a setting of the whole process: livens sets it when it compiles its
first program (not at import), and leaves a cache directory already given to JAX
(``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``) as it is. The native kernels of
:mod:`livens.engine.native` keep their libraries in ``native/`` beside it.

Writing a compiled program into the cache (serialized, compressed, written to a file) is work a
first call need not wait for, since the program runs without it: the entries of livens'
compiles (:func:`compile_lowered`) are kept back and written by :func:`write_cache_entries`, in a
background thread holding :data:`COMPILE_LOCK` (never beside a compile), which the driver starts
at the end of each run; :func:`livens.engine.wait` and the process's exit wait for it and write
what is still kept back (:func:`write_kept_entries`). JAX's writer
(``jax._src.compilation_cache.put_executable_and_time``) is wrapped for this once per process, and
keeps back only what a thread inside :func:`compile_lowered` writes; with a JAX without that writer
every entry is written at once, as JAX writes it.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax

from .. import _jaxconfig  # noqa: F401 - float64 before any program is traced
from ..numpy_jaxpr import NumpyFunction

COMPILE_LOCK = threading.RLock()
"""Held by each of livens' XLA compiles (:func:`compile_lowered`): one at a time in the process. XLA's
CPU compiler and its persistent cache crashed test processes where two compiles, or a compile and a
cache read, ran side by side (:mod:`livens.engine.tiers`)."""

XLA_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
"""XLA's compile options for livens' programs (module docstring)."""
ONCE_OPTIONS = {"xla_backend_optimization_level": 0}
"""Added for a program that runs once or a few times: LLVM's optimization off (module docstring)."""


def _user_cache_dir() -> str:
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    elif os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "livens", "jax")


def compilation_cache_dir() -> str | None:
    """The directory of the persistent compilation cache livens asks for, or None when off."""
    setting = os.environ.get("LIVENS_COMPILATION_CACHE", "").strip()
    if setting.lower() in ("0", "off", "false", "no", "none"):
        return None
    return setting if setting and setting.lower() not in ("1", "on", "true", "yes") else _user_cache_dir()


_CACHE_SET: list = []


def enable_compilation_cache() -> None:
    """Point JAX's persistent compilation cache at :func:`compilation_cache_dir` (once per process,
    and only where neither the user nor the environment chose one)."""
    if _CACHE_SET:
        return
    _CACHE_SET.append(True)
    path = compilation_cache_dir()
    if path is None or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # read-only home, etc.: run without the cache
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@functools.cache
def _supported(options: tuple) -> dict:
    """The options (pairs) as a dict where this jaxlib takes them and ``XLA_FLAGS`` does not set
    them, else {} (found out once, by compiling the identity)."""
    flags = os.environ.get("XLA_FLAGS", "")
    options = {k: v for k, v in options if k not in flags}
    if not options:
        return {}
    try:
        compile_lowered(jax.jit(lambda x: x, compiler_options=options).lower(0.0))
    except Exception:  # noqa: BLE001 - an older jax (no compiler_options) or an XLA without the option
        return {}
    return options


def compiler_options(once: bool = False) -> dict:
    """:data:`XLA_OPTIONS` (and with ``once``, :data:`ONCE_OPTIONS`), each set where this jaxlib takes
    it and ``XLA_FLAGS`` does not set it."""
    enable_compilation_cache()
    options = dict(_supported(tuple(XLA_OPTIONS.items())))
    if once:
        options.update(_supported(tuple(ONCE_OPTIONS.items())))
    return options


def jit(fn: Callable, once: bool = False, **kwargs: Any) -> Callable:
    """``jax.jit(fn, **kwargs)`` compiling with :func:`compiler_options` (``once``: for a program run
    once or a few times). Only for a program called at the top level: JAX refuses compile options
    on a ``jit`` called inside another traced function."""
    options = compiler_options(once)
    return jax.jit(fn, compiler_options=options, **kwargs) if options else jax.jit(fn, **kwargs)


def compile_lowered(lowered, options: dict | None = None):
    """``lowered.compile(options)`` holding :data:`COMPILE_LOCK`: never beside another of livens' XLA
    compiles, whichever thread it runs in. Its persistent cache entry is kept back for
    :func:`write_cache_entries` (module docstring)."""
    with COMPILE_LOCK:
        deferred = _defer_cache_writes()
        before, _KEEP.on = getattr(_KEEP, "on", False), deferred
        try:
            return lowered.compile(options) if options is not None else lowered.compile()
        finally:
            _KEEP.on = before


_KEEP = threading.local()  # .on: this thread's compile keeps its cache entry back
_KEPT: list = []  # (JAX's writer, its arguments) of the entries kept back
_DEFERRING: list = []  # [True] once JAX's writer is wrapped, [False] where it cannot be


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: the compile lock that one of them held (a
    compile beside the calling thread, a cache write) is free in the child, and the entries kept
    back are the parent's to write."""
    COMPILE_LOCK._at_fork_reinit()
    _KEPT.clear()


if hasattr(os, "register_at_fork") and hasattr(COMPILE_LOCK, "_at_fork_reinit"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _defer_cache_writes() -> bool:
    """Wrap JAX's writer of persistent cache entries (once per process) so that an entry written
    during one of livens' compiles is kept back; False where this JAX has no such writer."""
    if _DEFERRING:
        return _DEFERRING[0]
    try:
        from jax._src import compilation_cache
    except ImportError:  # pragma: no cover - another JAX: its entries are written at once
        _DEFERRING.append(False)
        return False
    put = getattr(compilation_cache, "put_executable_and_time", None)
    if put is None:  # pragma: no cover
        _DEFERRING.append(False)
        return False

    @functools.wraps(put)
    def kept_back(*args, **kwargs):
        if not getattr(_KEEP, "on", False):
            return put(*args, **kwargs)
        _KEPT.append((put, args, kwargs))
        return None

    compilation_cache.put_executable_and_time = kept_back
    _DEFERRING.append(True)
    return True


def write_kept_entries() -> None:
    """Write the persistent cache entries kept back (:func:`compile_lowered`) now, in the calling
    thread, holding :data:`COMPILE_LOCK` (so also after a writing thread has ended,
    :func:`write_cache_entries`); a failed write warns, as JAX's does."""
    with COMPILE_LOCK:
        while _KEPT:
            put, args, kwargs = _KEPT.pop(0)
            try:
                put(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the cache only speeds up later processes
                warnings.warn(
                    f"livens: a persistent compilation cache entry was not written ({type(exc).__name__}: {exc})",
                    RuntimeWarning,
                    stacklevel=2,
                )


WRITE_AFTER = 0.02
"""Seconds the thread of :func:`write_cache_entries` waits before it writes: the serialization of an
executable holds the GIL for part of its time, and the call that started the thread returns first."""


def _write_soon() -> None:
    time.sleep(WRITE_AFTER)
    write_kept_entries()


def write_cache_entries() -> None:
    """Write the persistent cache entries kept back (:func:`compile_lowered`) in a daemon thread
    holding :data:`COMPILE_LOCK`, from :data:`WRITE_AFTER` seconds on; :func:`write_kept_entries`
    writes them at once, or waits for that thread where it is writing."""
    if _KEPT:
        threading.Thread(target=_write_soon, name="livens-cache-write", daemon=True).start()


atexit.register(write_kept_entries)  # the entries still kept back, once a writing thread has ended


def _leaf_key(x):
    if isinstance(x, jax.ShapeDtypeStruct):
        return tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False))
    aval = jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)
    return tuple(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False))


def signature(args) -> tuple:
    """What decides a compiled program: the arguments' tree, shapes, dtypes and weak types."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    return tree, tuple(_leaf_key(x) for x in leaves)


class ImmediateProgram:
    """``fn(*args)`` run at once with NumPy arguments, also while another program is being traced
    (a sparsity pattern is found during the tracing of the first run that needs it): ``fn`` is
    traced once per argument signature and its jaxpr evaluated by NumPy
    (:class:`livens.numpy_jaxpr.NumpyFunction`: a few evaluations cost less than any compile), or
    where the jaxpr holds what NumPy does not evaluate, compiled ahead of time as a program run a
    few times (:func:`compiler_options` with ``once``) and executed. The two agree to round-off;
    the callers read sparsity patterns, which round-off does not change. Called inside another
    trace without it, ``fn`` would be staged into that program, and JAX would evaluate every
    operation on known values in it eagerly, each an XLA compilation of its own."""

    def __init__(self, fn):
        self.fn = fn
        self.jitted = jax.jit(fn)
        self._compiled: dict = {}

    def __call__(self, *args):
        key = signature(args)
        if key not in self._compiled:
            self._compiled[key] = self._numpy(args)
        program = self._compiled[key]
        if isinstance(program, NumpyFunction):
            try:
                return program(*args)
            except Exception:  # noqa: BLE001 - a case NumPy does not evaluate: the compiled program from now on
                program = None
        if program is None:
            lowered = self.jitted.trace(*args).lower()
            program = self._compiled[key] = compile_lowered(lowered, compiler_options(once=True))
        return program(*args)

    def _numpy(self, args):
        try:
            return NumpyFunction(self.fn, *args)
        except Exception:  # noqa: BLE001 - a primitive NumPy does not evaluate: None, compiled at the call
            return None
