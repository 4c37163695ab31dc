"""The option objects of the one driver (:func:`livens.driver.run`): what differs between runs.

- executor: how the chunk loop runs: :class:`Single` (one member: the engine's native kernel or
  XLA program), :class:`Members` (an ensemble: native kernels one member or a lane of members at a
  time, or one ``vmap``-ped XLA call for all), :class:`InGraph` (inside a differentiable program,
  its derivative replayed in checkpointed segments);
- output: :class:`Memory` (every ``save_every``-th node), :class:`Stream` (the same, appended to a
  netCDF file while the run goes), :class:`Arrays` (returned from the program, in-graph);
- on_failure: :class:`Raise` (stop the run, keep its steps, raise), :class:`PerMember` (stop the
  member that failed, the others go on), :class:`NaNFlag` (in-graph: NaN after the failed step and a
  flag); the first two retry a failed step once with the damped rescue where ``rescue`` is on;
- adjoint: None, or :class:`Implicit` (each step's derivative by the implicit function theorem,
  replayed from the recorded solutions).

Each object decides the behaviour it names through its methods (:meth:`InGraph.segments`,
:meth:`Memory.open`, :meth:`Raise.stops_run`, :meth:`NaNFlag.hold`, :meth:`Implicit.differentiable`);
which combinations go together is checked in one table (:mod:`livens.driver.combinations`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import engine

DEFAULT_CHUNK = engine.SizePolicy.chunk
"""Steps per compiled chunk of a run (fixed, so that h and t_end never recompile): the default of
:class:`Single` and of :func:`livens.simulate`'s ``chunk``, defined once as
:attr:`livens.engine.SizePolicy.chunk`."""


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return value


@dataclass(frozen=True)
class Single:
    """One member through the engine's compiled chunk loop of ``chunk`` steps."""

    chunk: int = DEFAULT_CHUNK

    def __post_init__(self):
        _positive_int("chunk", self.chunk)

    def chunks(self, members: int = 1) -> tuple[int, int]:
        """(native chunk, XLA chunk): ``chunk`` both (as :meth:`Members.chunks`)."""
        return self.chunk, self.chunk


@dataclass(frozen=True)
class Members:
    """An ensemble's members. ``chunk``: steps per call; None: the sizes in force
    (:func:`livens.engine.size_policy`): its ``chunk`` (512) for native kernels (one member's steps
    per call), and for XLA's one call for all members about 65536 member-steps
    (:meth:`livens.engine.SizePolicy.batched_chunk`: 512 for up to 128 members, 64 for 1000), so
    that the records of one call stay small."""

    chunk: int | None = None

    def __post_init__(self):
        if self.chunk is not None:
            _positive_int("chunk", self.chunk)

    def chunks(self, members: int) -> tuple[int, int]:
        """(native chunk, XLA chunk) for ``members`` members."""
        if self.chunk is not None:
            return self.chunk, self.chunk
        sizes = engine.size_policy()
        return sizes.chunk, sizes.batched_chunk(members)


@dataclass(frozen=True)
class InGraph:
    """The run inside a differentiable program (:mod:`livens.driver.ingraph`): the chunk loop,
    native or XLA, recording each step's solution; its derivative replays the steps in
    checkpointed segments of ``segment`` steps (default about sqrt(n_steps))."""

    segment: int | None = None

    def __post_init__(self):
        if self.segment is not None:
            _positive_int("segment", self.segment)

    def segments(self, n_steps: int) -> tuple[int, int]:
        """(steps per segment, segments) of a run of ``n_steps`` steps: ``segment``, or about
        sqrt(n_steps) segments of about sqrt(n_steps) steps, the fewest padded steps."""
        seg = self.segment
        if seg is None:
            import math

            n_seg = -(-n_steps // max(1, math.isqrt(n_steps)))
            seg = -(-n_steps // n_seg)
        return seg, -(-n_steps // seg)


@dataclass(frozen=True)
class Memory:
    """The run's nodes kept in memory, every ``save_every``-th one and the step that ends there."""

    save_every: int = 1

    def __post_init__(self):
        _positive_int("save_every", self.save_every)

    def file(self) -> str | None:
        """The file the nodes go to (None: memory only)."""
        return None

    def open(self, attrs: dict, d: int, m: int, gamma: bool, velocity_kind: str, members: int | None = None):
        """The sink the host loop appends the kept nodes to while the run goes (None: memory only)."""
        return None


@dataclass(frozen=True)
class Stream(Memory):
    """As :class:`Memory`, and appended to the netCDF file ``path`` while the run goes
    (:mod:`livens.stream`); a finished run rewrites it with its diagnostics."""

    path: str = ""

    def __post_init__(self):
        super().__post_init__()
        if not self.path:
            raise ValueError("Stream needs a file path.")
        object.__setattr__(self, "path", os.fspath(self.path))

    def file(self) -> str | None:
        return self.path

    def open(self, attrs: dict, d: int, m: int, gamma: bool, velocity_kind: str, members: int | None = None):
        """The :class:`~livens.stream.NetCDFStream` at ``path`` (attributes ``attrs``)."""
        from ..stream import NetCDFStream

        extra = {} if members is None else {"members": members}
        return NetCDFStream(self.path, d, m, gamma, velocity_kind, attrs, **extra)


@dataclass(frozen=True)
class Arrays(Memory):
    """In-graph: the nodes returned as arrays of the program (every ``save_every``-th)."""


@dataclass(frozen=True)
class Raise:
    """Stop the run at a failed step, keep every step before it, raise the error; ``rescue``: first
    retry the step once with the damped least-squares method."""

    rescue: bool = True

    def stops_run(self) -> bool:
        """Whether a member whose step failed stops every member (one member: the run)."""
        return True

    def solver(self) -> str:
        """The solver of the run's steps, as ``meta["solver"]`` names it."""
        return "newton+rescue" if self.rescue else "newton"


@dataclass(frozen=True)
class PerMember(Raise):
    """Stop only the member whose step failed (after the rescue, where on); the others go on, and a
    warning names the failed members."""

    def stops_run(self) -> bool:
        return False


FILLS = ("nan", "hold")
"""The values of :attr:`NaNFlag.fill` (``on_failure`` of :func:`livens.flow`)."""


@dataclass(frozen=True)
class NaNFlag:
    """In-graph: once the start or a step fails, no later step is taken, the result says it did not
    converge, and every derivative of the run is NaN; the nodes after it are NaN (``fill="nan"``)
    or hold the last node reached (``fill="hold"``)."""

    fill: str = "nan"
    rescue = False  # a failed step is not retried: it fails the run (the host loop reads this)

    def __post_init__(self):
        if self.fill not in FILLS:
            raise ValueError(f"lv.flow: on_failure must be one of {', '.join(map(repr, FILLS))}; got {self.fill!r}.")

    def hold(self) -> bool:
        """Whether the nodes after a failure hold the last node reached (else they are NaN)."""
        return self.fill == "hold"

    def stops_run(self) -> bool:
        """Whether a failed step stops the run (the host loop of a native forward run): it does."""
        return True


@dataclass(frozen=True)
class Implicit:
    """Derivatives of a run: each step's by the implicit function theorem at its converged Newton
    solution, replayed from the solutions the run recorded (:func:`livens.timestep.make_replay`);
    reverse mode keeps the states at the starts of segments and recomputes each segment's
    linearization (memory like sqrt(n_steps) beyond the records)."""

    def differentiable(self, primal, tangent):
        """``primal`` (never differentiated) with the derivative ``tangent(primals, out, tangents)
        -> tangents of out`` (the replay's), as one ``jax.custom_jvp`` function; its derivative calls
        it again, so that higher derivatives take the same rule."""
        import jax

        @jax.custom_jvp
        def fn(*args):
            return primal(*args)

        @fn.defjvp
        def fn_jvp(primals, tangents):
            out = fn(*primals)
            return out, tangent(primals, out, tangents)

        return fn
