"""Native kernels for a driver that calls them itself, and the reason where there is none.

A run of :func:`livens.simulate` calls the engine's compiled loop (:mod:`livens.engine.loops`),
native or XLA alike. :func:`livens.flow` calls its chunk programs from host callbacks inside a JAX
program, so it needs native kernels, or to know that there are none and why (its own XLA program
then runs them). It asks here:

- :func:`native_kernels`: for each :class:`ProgramRequest` (a function built from the step's
  options, one member's arguments, what it is), a :class:`NativeProgram`: the kernel of one member,
  the same kernel for any number of members (:class:`~livens.engine.members.MemberKernel`, a lane
  kernel made at the first call with at least :attr:`SizePolicy.flow_lanes_from
  <livens.engine.SizePolicy>` members), or, where there is no kernel, its :class:`Fallback`.
  Several compile side by side on the members' pool (:func:`~livens.engine.members.spread`; the C
  compiler runs in processes of its own). Kernels are shared by every request with the same key,
  so that a second flow with the same settings compiles nothing;
- :func:`replay_derivatives`: the two derivative programs of a chunk's replay
  (:mod:`livens.engine.replay_adjoint`), its reverse pass and forward mode, compiled side by side;
- :func:`native_unavailable`: the :class:`Fallback` that the options and sizes alone decide
  (backend "xla", no C compiler, a system above the native size limit), asked before anything is
  built.

A :class:`Fallback` is structured: its :class:`FallbackKind` (by the options, by a size limit,
refused by the translator, a fault of the translator) and a detail. A fault of the translator
(any exception it raises) never vanishes: XLA runs the program, so that no run is lost, the
program's :attr:`~NativeProgram.fallback` names the exception's type and message, and a
:class:`~livens.engine.native.runner.NativeFallback` warning says it (once per message and
process, like a refusal's; its ``fallback`` attribute is the :class:`Fallback`). A fallback by the
options or a size limit is by design: no notice.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from .._lru import CompiledCache
from .loops import member_loop, single_loop
from .members import MemberKernel, spread
from .native import compiler
from .native.runner import NativeFallback, NativeUnavailable, runs_natively
from .options import EngineOptions, loop_size, size_policy
from .replay_adjoint import adjoint_program, tangent_program


class FallbackKind(enum.Enum):
    """Why XLA runs a program that was asked for as a native kernel."""

    BACKEND = "backend"  # the backend asked for runs no native code ("xla", "plain")
    NO_COMPILER = "no C compiler"
    LIMIT = "above a native limit"  # by design: the system or its C source is larger than EngineOptions allows
    REFUSED = "translator refused"  # the program holds what the translator does not handle
    INTERNAL = "internal error"  # the translator (or the C compiler) failed: a bug of livens.engine.native


@dataclass(frozen=True)
class Fallback:
    """Why XLA runs a program (module docstring): ``kind`` and ``detail`` (the backend, the limit
    passed, the translator's refusal, or the exception's type and message)."""

    kind: FallbackKind
    detail: str = ""

    @property
    def by_design(self) -> bool:
        """Whether the options decided it (backend, C compiler, size limits): no notice is given."""
        return self.kind in (FallbackKind.BACKEND, FallbackKind.NO_COMPILER, FallbackKind.LIMIT)

    def __str__(self) -> str:
        if self.kind is FallbackKind.BACKEND:
            return f"backend {self.detail}"
        if self.kind is FallbackKind.NO_COMPILER:
            return "no C compiler"
        if self.kind is FallbackKind.LIMIT:
            return self.detail
        return f"{self.kind.value}: {self.detail}"

    @classmethod
    def of_exception(cls, exc: BaseException) -> "Fallback":
        """The fallback for a fault of the translator: ``exc``'s type and message."""
        return cls(FallbackKind.INTERNAL, f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True, eq=False)
class ProgramRequest:
    """A program asked for as a native kernel: ``build(**step_options)`` makes the function (as
    for :func:`livens.engine.single_loop`), ``args`` are one member's arguments (or arrays of
    their shapes), ``what`` names it in a notice, ``interruptible``: its kernel stops within its
    chunk at :func:`livens.engine.interrupt_native` (a time loop; a replay must run whole chunks).
    ``key`` names the function (the system, the scheme and whatever else decides it): requests with
    the same key and engine options share their kernels."""

    key: Hashable
    build: Callable[..., Callable]
    args: tuple
    what: str
    interruptible: bool = False


@dataclass(eq=False)
class NativeProgram:
    """The answer to a :class:`ProgramRequest`: ``kernel``, the native kernel of one member (called
    with one member's arguments), or None; ``members``, the same kernel for any number of members
    (:class:`~livens.engine.members.MemberKernel`; None without a kernel); ``fallback``: why there
    is no kernel (None where there is one); ``lanes_fallback``: why no lane kernel was made, once
    one was asked for and not made (the single kernel then runs the members)."""

    request: ProgramRequest
    kernel: Any
    fallback: Fallback | None
    members: MemberKernel | None = None
    lanes_fallback: Fallback | None = field(default=None)


def native_unavailable(options: EngineOptions, unknowns: int, d: int, m: int) -> Fallback | None:
    """The :class:`Fallback` of every native program of a loop with ``unknowns`` Newton unknowns, ``d``
    coordinates and ``m`` constraints under ``options``, decided before anything is built (the
    backend, the C compiler, the size limit of "auto": :func:`livens.engine.runs_natively`, for a loop
    also past :attr:`EngineOptions.large_program_unknowns`), or None where the translator is to be
    asked: a loop between the two limits runs natively where it is a large program, as a run of
    :func:`livens.simulate` does (:func:`livens.engine.options.large_program`; its runner decides from
    the trace, and a smaller program's fallback is then by the size limit, without a notice)."""
    if options.backend in ("xla", "plain"):
        return Fallback(FallbackKind.BACKEND, options.backend)
    if compiler() is None:
        return Fallback(FallbackKind.NO_COMPILER)
    size = loop_size(unknowns, d, m)
    # a loop above the size limit but within large_program_unknowns may still run natively (a large
    # program, or a tangent factorized by groups in small blocks): its runner decides from its trace
    if not runs_natively(options, size) and size[0] > options.large_program_unknowns:
        limit = options.max_native_unknowns
        return Fallback(
            FallbackKind.LIMIT,
            f"{size[1]}, more than the native limit of {limit} (EngineOptions.max_native_unknowns; "
            "backend='native' compiles it natively)",
        )
    return None


_RUNNERS = CompiledCache(32)
"""The engine's compiled programs of requests (:func:`livens.engine.single_loop`, and
:func:`livens.engine.member_loop` for lanes), keyed by the request's key, the engine's options, the
lanes and whether the kernel reads the stop flag."""


def _runner(request: ProgramRequest, sizes: tuple, options: EngineOptions, lanes: int = 0):
    key = (request.key, options, lanes, request.interruptible)
    hit = _RUNNERS.get(key)
    if hit is None:
        if lanes:
            hit = member_loop(request.build, *sizes, options, lanes, interruptible=request.interruptible)
        else:
            hit = single_loop(request.build, *sizes, options, interruptible=request.interruptible)
        _RUNNERS[key] = hit
    return hit


def _kernel(runner, args):
    """The kernel builder: ``runner``'s native kernel for ``args`` (translated and compiled at the
    first need, then kept by the runner), or None where it runs none (its ``reason`` says why)."""
    return runner.kernel(*args)


def _outcome(runner, args) -> tuple[Any, Fallback | None]:
    """(the kernel, None), or (None, why there is none)."""
    try:
        kernel = _kernel(runner, args)
    except NativeUnavailable as exc:  # backend="native" refused (a fault of the translator: its cause)
        if exc.__cause__ is not None:
            return None, Fallback.of_exception(exc.__cause__)
        return None, Fallback(FallbackKind.REFUSED, runner.reason or str(exc))
    except Exception as exc:  # noqa: BLE001 - a fault: XLA runs the program; the fallback names it and is told
        return None, Fallback.of_exception(exc)
    if kernel is not None:
        return kernel, None
    reason = runner.reason or "no reason given"
    if getattr(runner, "suspect", None) is not None:  # the runner caught a fault of the translator
        return None, Fallback(FallbackKind.INTERNAL, reason)
    if getattr(runner, "limited", False):  # a size limit of "auto", not a refusal
        return None, Fallback(FallbackKind.LIMIT, reason)
    return None, Fallback(FallbackKind.REFUSED, reason)


_NOTIFIED: set = set()


def _notify(who: str, fallbacks: Sequence[tuple[str, Fallback | None]], stacklevel: int) -> None:
    """One :class:`NativeFallback` per reason not by design, naming the programs (``what``) of each
    pair ``(what, fallback)`` with that reason, once per message and process."""
    whats: dict = {}
    for what, fallback in fallbacks:
        if fallback is not None and not fallback.by_design:
            whats.setdefault(fallback, []).append(what)
    for fallback, names in whats.items():
        verb = "runs" if len(names) == 1 else "run"
        message = f"{who}: {' and '.join(names)} {verb} with XLA, not native code: {fallback}"
        if fallback.kind is FallbackKind.INTERNAL:
            message += " (a bug in livens.engine.native: please report it)"
        if message in _NOTIFIED:
            continue
        _NOTIFIED.add(message)
        notice = NativeFallback(message, str(fallback))
        notice.fallback = fallback
        warnings.warn(notice, stacklevel=stacklevel + 1)


def _members(program: NativeProgram, sizes: tuple, options: EngineOptions, who: str) -> MemberKernel:
    """``program``'s kernel for any number of members: :attr:`EngineOptions.lanes` at a time
    through a lane kernel of the same function, made at the first call with at least
    :attr:`SizePolicy.flow_lanes_from` members (unless its scratch arrays would be too large for
    lanes to pay: :attr:`SizePolicy.lane_scratch_bytes`); where none is made, the single kernel
    member by member, without a notice for a refusal (the members still run natively) and with one
    for a fault."""
    request, lanes = program.request, options.lanes

    def make_lanes():
        runner = _runner(request, sizes, options, lanes) if lanes >= 2 else None
        if runner is None:
            return None
        with warnings.catch_warnings():  # the single kernel runs the members instead
            warnings.simplefilter("ignore", NativeFallback)
            kernel, program.lanes_fallback = _outcome(runner, request.args)
        if program.lanes_fallback is not None and program.lanes_fallback.kind is FallbackKind.INTERNAL:
            _notify(who, [(f"the lane kernel of {request.what}", program.lanes_fallback)], stacklevel=2)
        return kernel

    lanes_from = size_policy().flow_lanes_from
    return MemberKernel(program.kernel, make_lanes=make_lanes, lanes_from=lanes_from, max_lanes=lanes)


def native_kernels(
    requests: Sequence[ProgramRequest], sizes: tuple[int, int, int], options: EngineOptions, who: str
) -> list[NativeProgram]:
    """The :class:`NativeProgram` of each request (module docstring) for a loop of ``sizes``
    (Newton unknowns, coordinates, constraints) under ``options``, compiled side by side; ``who``
    names the caller in a notice ("livens.flow"). The engine's own notices of the runners are
    replaced by one per reason naming the requests' ``what`` (warnings are filtered here, in the
    calling thread, for the compiling threads too: ``warnings.catch_warnings`` is not
    thread-safe)."""
    unavailable = native_unavailable(options, *sizes)
    if unavailable is not None:
        return [NativeProgram(r, None, unavailable) for r in requests]

    def make(request):
        return _outcome(_runner(request, sizes, options), request.args)

    with warnings.catch_warnings():  # the runners' notice: the programs' fallbacks are told below
        warnings.simplefilter("ignore", NativeFallback)
        outcomes = spread(make, requests)
    programs = [NativeProgram(r, kernel, why) for r, (kernel, why) in zip(requests, outcomes)]
    for p in programs:
        if p.kernel is not None:
            p.members = _members(p, sizes, options, who)
    _notify(who, [(p.request.what, p.fallback) for p in programs], stacklevel=2)
    return programs


@dataclass(eq=False)
class ReplayDerivatives:
    """The derivative programs of a chunk's replay (:func:`replay_derivatives`): ``adjoint``
    (reverse mode) and ``tangent`` (forward mode), each a :class:`NativeProgram`, and the shapes of
    the replay's outputs, ``end_spec`` (its end state) and ``records_spec`` (its records)."""

    adjoint: NativeProgram
    tangent: NativeProgram
    end_spec: Any
    records_spec: Any


def _zeros(spec):
    return jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), spec)


def replay_derivatives(
    key: Hashable,
    replay: Callable,
    one_step: Callable,
    state,
    xs,
    scalars: tuple,
    sysp,
    sizes: tuple[int, int, int],
    options: EngineOptions,
    who: str,
    what: tuple[str, str] = ("the reverse pass", "forward mode"),
) -> ReplayDerivatives:
    """The native kernels of the derivatives of the chunk ``replay`` (steps ``one_step``; the calling
    conventions of :mod:`livens.engine.replay_adjoint`) for a state, solutions ``xs``, ``scalars``
    ``(t_start, n0, n_stop, h, params)`` and the System's parameters ``sysp`` of these shapes
    (``state`` and ``sysp`` may be trees of ``jax.ShapeDtypeStruct``): the reverse pass, ``(state,
    xs, *scalars, sysp, cotangent of the end state, of the records) -> (cotangent of state, of
    sysp)``, and forward mode, ``(state, xs, *scalars, sysp, d state, d sysp) -> tangents of (end
    state, records)``, compiled side by side (:func:`native_kernels`; ``key`` names the replay,
    ``what`` the two programs in a notice)."""
    end, records = jax.eval_shape(lambda s, p: replay(s, xs, *scalars, p), state, sysp)
    head = (_zeros(state), xs, *scalars, _zeros(sysp))
    requests = [
        ProgramRequest(("adjoint", key), adjoint_program(one_step), (*head, _zeros(end), _zeros(records)), what[0]),
        ProgramRequest(("tangent", key), tangent_program(replay), (*head, _zeros(state), _zeros(sysp)), what[1]),
    ]
    adjoint, tangent = native_kernels(requests, sizes, options, who)
    return ReplayDerivatives(adjoint, tangent, end, records)


__all__ = [
    "Fallback",
    "FallbackKind",
    "NativeProgram",
    "ProgramRequest",
    "ReplayDerivatives",
    "native_kernels",
    "native_unavailable",
    "replay_derivatives",
]
