"""The compile engine: how a run's traced programs become fast code, behind one boundary.

The physics code (systems, mechanics, schemes, the time step) is plain JAX and knows nothing of
this package; the driver (:mod:`livens.driver`) hands it the programs of a run and receives
compiled functions. What it does, each in a module of its own:

- :mod:`~livens.engine.options`: :class:`EngineOptions`, every choice and size threshold, and the
  one switch, the backend ("auto", "native", "xla", "plain": ``backend=`` or ``LIVENS_BACKEND``);
  :class:`SizePolicy` (:func:`size_policy`; :func:`sizes_replaced` for a ``with`` block), the sizes at
  which the solvers change the form of a Newton tangent;
- :mod:`~livens.engine.loops`: the compiled chunk loops of one member and of ensembles, the
  rescue and start programs;
- :mod:`~livens.engine.native_programs`: native kernels for a driver that calls them from host
  callbacks (:func:`livens.flow`): :func:`native_kernels` of a chunk loop, :func:`replay_derivatives`
  (a replay's reverse pass and forward mode, :mod:`~livens.engine.replay_adjoint`), each a
  :class:`NativeProgram` with, where XLA runs it instead, a structured :class:`Fallback`;
- :mod:`~livens.engine.members`: :class:`MemberKernel`, a native kernel run for many members
  (member by member, or in lane kernels), and :func:`spread`, the members' one pool of threads;
- :mod:`~livens.engine.native`: a jaxpr translated to one C function and compiled by the system's
  C compiler (small systems), with a kernel cache, and lane kernels for ensembles
  (:mod:`~livens.engine.native.member_lanes`);
- :mod:`~livens.engine.tiers`: a large XLA program compiled quickly first and optimized once its
  runs have paid for it;
- :mod:`~livens.engine.small_products`: small matrix products rewritten as fusible sums;
- :mod:`~livens.engine.xla`: XLA's compile options and the persistent compilation cache (set when
  livens compiles its first program, ``LIVENS_COMPILATION_CACHE=0`` turns it off);
- :mod:`~livens.engine.threads`: one BLAS thread while a run's programs execute.

:func:`runs_natively` says whether a loop of a given size runs as native code (a solver says with
:func:`tangent_by_groups`, while a step is traced, that its tangent is factorized by groups, whose
largest dense block the size limit then bounds), :class:`NativeFallback`
is the notice (with its ``reason``) where one meant to does not, :func:`interrupt_native` and
:func:`resume_native` raise and lower the native kernels' stop flag (Ctrl-C), :func:`tracing_native`
says, while a step is traced, whether a native kernel of one member will run it. The rest of livens
imports only what this module names.

:func:`wait` waits for every compile running in the background (native ``-O2`` libraries and start
steps); :func:`optimize` also compiles every large XLA program still at level 0 at XLA's default
level, in the calling thread, as a benchmark does before it measures the optimized programs.
"""

from .._lru import CompiledCache
from .loops import batched_loop, member_loop, program, single_loop, start_program, step_options
from .members import THREAD_PREFIX as MEMBER_THREAD_PREFIX
from .members import MemberKernel, spread
from .native import interrupt as interrupt_native
from .native import resume as resume_native
from .native.runner import NativeFallback, runs_natively
from .native.target import tracing_native
from .native_programs import (
    Fallback,
    FallbackKind,
    NativeProgram,
    ProgramRequest,
    ReplayDerivatives,
    native_kernels,
    native_unavailable,
    replay_derivatives,
)
from .options import (
    BACKENDS,
    EngineOptions,
    SizePolicy,
    engine_options,
    loop_size,
    size_policy,
    sizes_replaced,
    tangent_by_groups,
)
from .threads import serial_blas
from .tiers import background
from .xla import ImmediateProgram, compilation_cache_dir, write_cache_entries
from .xla import jit as xla_jit


def wait(timeout: float | None = None) -> None:
    """Wait until the compiles running in the background (native ``-O2`` libraries, native start
    steps) have ended."""
    from . import native, tiers

    native.wait(timeout)
    tiers.wait(timeout)


def optimize() -> None:
    """The optimized programs in use from the next call on: :func:`wait`, then every large XLA
    program compiled so far and still at XLA's level 0 (:mod:`~livens.engine.tiers`) compiled at the
    default level now, in the calling thread."""
    from . import tiers

    wait()
    tiers.optimize()


__all__ = [
    "BACKENDS",
    "Fallback",
    "FallbackKind",
    "MEMBER_THREAD_PREFIX",
    "MemberKernel",
    "NativeFallback",
    "NativeProgram",
    "ProgramRequest",
    "ReplayDerivatives",
    "native_kernels",
    "native_unavailable",
    "replay_derivatives",
    "spread",
    "interrupt_native",
    "resume_native",
    "runs_natively",
    "CompiledCache",
    "EngineOptions",
    "SizePolicy",
    "ImmediateProgram",
    "background",
    "batched_loop",
    "compilation_cache_dir",
    "engine_options",
    "loop_size",
    "tangent_by_groups",
    "member_loop",
    "optimize",
    "program",
    "serial_blas",
    "single_loop",
    "size_policy",
    "sizes_replaced",
    "tracing_native",
    "start_program",
    "step_options",
    "wait",
    "write_cache_entries",
    "xla_jit",
]
