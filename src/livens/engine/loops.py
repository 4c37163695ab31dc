"""The compiled programs of a run, as the driver asks for them.

The driver gives the engine a function that builds the loop of a chunk of steps from the step's
plain options (``build(fuse=..., residual_written_once=...)``, :func:`livens.timestep.make_loop`);
the engine decides what runs it:

- :func:`single_loop`: the loop of one member: a native kernel where the size and the backend
  allow (:class:`~livens.engine.native.runner.ChunkRunner`), else XLA, in two tiers for a large
  program (:class:`~livens.engine.tiers.TieredJit`);
- :func:`member_loop`: the same loop compiled natively for the members of an ensemble, one member
  or ``lanes`` members per call (None where XLA runs the ensemble);
- :func:`batched_loop`: the driver's ``vmap`` of the loop over the members, compiled by XLA;
- :func:`program`: any other program of a run (the rescue of a failed step, a start), compiled by
  XLA with the engine's options (``once``: at level 0, for a program that runs once or a few times);
- :func:`start_program`: a start step, compiled (as C in the background while the time loop compiles,
  or by XLA in the background while the time loop is traced).

:func:`step_options` says which of the engine's rewrites the step itself applies: the
small-product rewrite of its residual and Newton update (XLA programs of small systems), and
the residual written once in the extrapolated guess (programs that XLA compiles).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import jax

from .._lru import CompiledCache
from . import xla
from .options import EngineOptions, loop_size
from .small_products import fold_constants, fuse_small_dots
from .tiers import TieredJit, background, compile_beside


def step_options(options: EngineOptions, unknowns: int, size: tuple[int, str], native: bool) -> dict:
    """The step's options (keywords of :func:`livens.timestep.make_loop`) for a loop of a scheme
    with ``unknowns`` Newton unknowns and :func:`~livens.engine.options.loop_size` ``size``;
    ``native``: for the C translation (which rewrites nothing)."""
    fuse = None
    if not (native or options.plain) and options.small_product_limit and unknowns <= options.small_product_unknowns:
        limit = options.small_product_limit
        fuse = lambda fn: fuse_small_dots(fn, limit)  # noqa: E731
    return {"fuse": fuse, "residual_written_once": size[0] > options.written_once_unknowns}


def _jit(fn, options: EngineOptions, once: bool = False):
    return jax.jit(fn) if options.plain else xla.jit(fn, once=once)


def single_loop(
    build: Callable[..., Callable], unknowns: int, d: int, m: int, options: EngineOptions, interruptible: bool = True
) -> Any:
    """The chunk loop of one member, compiled (module docstring): called like the loop, with
    ``prepare(*args)`` (compile without running), ``backend`` ("native" or "xla" once called)
    and ``reason`` (why XLA runs it where native was possible in principle). ``interruptible``:
    its native kernel stops within its chunk where :func:`livens.engine.interrupt_native` was called (a time
    loop); False for a loop whose chunk must always be whole (a derivative's replay)."""
    from .native.runner import ChunkRunner

    size = loop_size(unknowns, d, m)
    xla_options = step_options(options, unknowns, size, native=False)
    xla_fn = build(**xla_options)
    if options.plain:
        return ChunkRunner(xla_fn, jax.jit(xla_fn), options, size, interruptible=interruptible)
    native_options = step_options(options, unknowns, size, native=True)
    # one function where the two builds are the same: JAX traces it once for both
    native_loop = xla_fn if native_options == xla_options else build(**native_options)
    xla_loop = TieredJit(xla_fn, options.tier_equations)
    return ChunkRunner(native_loop, xla_loop, options, size, interruptible=interruptible, probe=xla_fn)


def member_loop(
    build: Callable[..., Callable],
    unknowns: int,
    d: int,
    m: int,
    options: EngineOptions,
    lanes: int = 0,
    interruptible: bool = True,
) -> Any:
    """The chunk loop of one member as a native kernel for an ensemble's members, ``lanes`` of them
    per call where ``lanes`` > 0 (:mod:`livens.engine.native.member_lanes`; where no lane kernel
    can be made, "auto" falls back to one member per call): a ChunkRunner whose ``kernel(*args)``
    is the kernel or None. None where the backend runs no native code. ``interruptible``: as
    :func:`single_loop`'s."""
    from .native.runner import ChunkRunner

    if options.backend in ("xla", "plain"):
        return None
    size = loop_size(unknowns, d, m)
    loop = build(**step_options(options, unknowns, size, native=True))
    lane_options = options if not lanes else EngineOptions(**{**options.__dict__, "backend": "auto"})
    return ChunkRunner(loop, xla.jit(loop), lane_options, size, lanes=lanes, interruptible=interruptible)


def batched_loop(build_mapped: Callable[..., Callable], options: EngineOptions) -> Callable:
    """The driver's ``vmap`` of the chunk loop over an ensemble's members, compiled by XLA:
    ``build_mapped(fuse=...)`` is given the rewrite of the batched step (index arithmetic on
    constants folded, :func:`~livens.engine.small_products.fold_constants`; no small-product
    rewrite: batched, XLA's matrix products are the faster ones)."""
    fn = build_mapped(fuse=None if options.plain else fold_constants, residual_written_once=False)
    return _jit(fn, options)


def program(fn: Callable, options: EngineOptions, once: bool = False) -> Callable:
    """``fn`` compiled by XLA with the engine's options (``once``: a program run once or a few times)."""
    return _jit(fn, options, once)


_STARTS = CompiledCache(16)


def start_program(
    key: Any, fn: Callable, args: tuple, options: EngineOptions, native: bool, beside: bool = False
) -> tuple[Any, Callable]:
    """A start step ``fn(*args)``, compiled: (its outputs' shapes, ``finish()``), ``finish()`` waiting
    for the compile and returning ``fn(*args)``. ``native``: translated to C and compiled at ``-O0``
    (a program that runs once) in the background while the time loop compiles; XLA, in the calling
    thread, where the translator cannot, or with ``beside`` in a background thread while the calling
    thread traces the time loop (:func:`livens.engine.tiers.compile_beside`). ``key`` names ``fn`` and
    the arguments' shapes: a later call with the same key reuses the program."""
    hit = _STARTS.get((key, native, options))
    if hit is not None:
        shapes, compiled = hit
        return shapes, lambda: _finish(compiled, fn, args, options, key, native)
    compiled = None
    if native and not options.plain:
        from .native import Unsupported, compile_traced, trace_function

        try:
            traced = trace_function(fn, *args)
            shapes, compiled = (
                traced.out_shape,
                background(lambda: compile_traced(traced, once=True), "livens-start-compile"),
            )
        except Unsupported:
            compiled = None
        except Exception as exc:  # noqa: BLE001 - a fault of the translator: XLA compiles the start, and says so
            warnings.warn(
                f"the native translator failed on the start step ({type(exc).__name__}: {exc}); XLA "
                "compiles it instead (results agree to round-off).",
                RuntimeWarning,
                stacklevel=3,
            )
            compiled = None
    if compiled is None:
        traced = _jit(fn, options, once=True).trace(*args)
        lowered = traced.lower()
        shapes = traced.out_info
        # XLA compiles in the calling thread, or beside its trace of the time loop (livens.engine.tiers)
        compiled = compile_beside(lowered) if beside else _now(lambda: xla.compile_lowered(lowered))
    _STARTS[(key, native, options)] = (shapes, compiled)
    return shapes, lambda: _finish(compiled, fn, args, options, key, native)


def _now(fn: Callable[[], Any]) -> Future:
    """fn() run now, as a finished Future (its result or its exception)."""
    future: Future = Future()
    try:
        future.set_result(fn())
    except Exception as exc:  # noqa: BLE001 - kept on the future, raised where it is awaited
        future.set_exception(exc)
    return future


def _finish(compiled: Future, fn, args, options, key, native):
    """The start's result once its compile has ended (:func:`start_program`)."""
    try:
        program = compiled.result()
    except BaseException as exc:
        _STARTS.pop((key, native, options), None)  # compiled again at the next call
        from .native import CompileError

        if native and isinstance(exc, CompileError):  # the C compiler failed: XLA compiles the start
            return start_program(key, fn, args, options, native=False)[1]()
        raise
    return program(*args)


__all__ = ["batched_loop", "member_loop", "program", "single_loop", "start_program", "step_options"]
