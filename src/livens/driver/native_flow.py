"""The native kernels of :func:`livens.flow`: its forward run and its derivatives, called from the
program through host callbacks.

The engine makes the kernels (:mod:`livens.engine.native_programs`): this module asks it for them
and runs them. Where the engine makes none, it says why in a structured
:class:`~livens.engine.Fallback` (and, where that is not by design, in a
:class:`~livens.engine.NativeFallback` warning naming the flow's part: a fault of the translator too,
its exception named), and the flow's XLA program runs that part instead.

- :class:`NativeForward`: the records of a run from the engine's native kernel of the chunk loop
  (the one :func:`livens.simulate` runs; :func:`livens.engine.native_kernels`), with each step's
  converged unknowns ("x") and the state at the start of every chunk of :data:`CHUNK` steps. It is a
  run like any other: the host loop of every run (:func:`livens.driver.host.run_host_loop`) drives
  the kernel through the members' executor of :func:`livens.simulate_ensemble`
  (:class:`~livens.driver.executors.NativeMembers`), the run its one member, so that a failed step,
  Ctrl-C and a kernel's stop flag are handled as in :func:`livens.simulate`.
- :class:`NativeDerivatives`: the run's derivative from those records, chunk by chunk: the replay
  of a chunk's steps from their solutions (:func:`livens.timestep.make_replay`) and its
  Jacobian-vector product (forward mode, the first chunk first) or vector-Jacobian product
  (reverse mode, the last chunk first, each step transposed from its state), each one native
  kernel that the engine builds from the replay and its step (:func:`livens.engine.replay_derivatives`,
  :mod:`livens.engine.replay_adjoint`). They agree with XLA's derivatives of the same replay to
  round-off (tests/test_flow_native_derivatives.py). Both directions are one chunk iterator
  (:meth:`NativeDerivatives._replay_pass`), not the host loop: a replay is no run. It solves no
  equation, so no step can fail and there is nothing for a failure policy, a rescue or a blow-up
  check to do; it keeps no nodes, streams nothing and shows no progress; and the reverse pass goes
  from the last chunk to the first, carrying a cotangent, where the host loop advances members
  forward to their stop. Ctrl-C between its chunks is Python's KeyboardInterrupt.

Every host callback goes through :func:`host_call`: the host reads XLA's buffers and writes its
results (the records of every step, their cotangents and tangents) into XLA's own, copying
neither. Under ``jax.vmap`` every host callback is given the whole batch at once (``vmap_method=
"broadcast_all"``): the members' forward runs go through one host loop (the same executor, B
members), and each replayed chunk runs for all members that reached it, the members together in
lane kernels of the same functions (:class:`~livens.engine.MemberKernel`,
:mod:`livens.engine.native.member_lanes`: each lane computes the single kernel's operations, so
every member's records, and the cotangents and tangents the kernels give, are those of its own
run, to the bit), on the one pool of threads that runs the members of ensembles too
(:func:`~livens.engine.spread`). A member that fails stops alone. The XLA program around the
callbacks is JAX's batched program, equal to each member's own to round-off, not always to the
bit: XLA multiplies a member's matrix by a value that every member shares (a constant of the
system, a weight of the loss) as one product of the members' stacked rows, which its dot kernel
sums in another order than the member's own smaller product. A start's projection onto the
manifold (``consistent=True``) and its derivative hold such products (the heavy top's gradient,
in the last bits); with ``consistent=False`` the pendulum's and the heavy top's are their own
runs' to the bit (tests/test_flow_native_members.py checks the pendulum's).

JAX transposes a linear map that it cannot see into (a host callback) only through a primitive
with a transpose rule of its own: the tangent map T: (d state_0, d parameters) -> d records is
handed to JAX as ``lax.custom_linear_solve`` with the identity as its matrix, whose ``solve`` is
T (the tangent kernel, or the XLA replay's ``jvp`` where the translator refuses it) and whose
``transpose_solve`` is T^T (the adjoint kernel). JAX differentiates such a solve once; a second
derivative through it is refused (:func:`first_order`) with the fix, ``backend="xla"``.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import engine
from ..timestep import make_loop, make_replay, replay_step
from . import host
from .executors import NativeMembers, for_members, member_index, member_rows, per_group, set_member_rows
from .options import DEFAULT_CHUNK
from .records import record_layout

CHUNK = DEFAULT_CHUNK
"""Steps per call of the native kernels of a run of :func:`livens.flow` (forward, and the replays
of both derivatives, which start where the forward run's chunks start): the driver's default chunk
(:attr:`livens.engine.SizePolicy.chunk`)."""

UNDIFFERENTIATED = ("x",)
"""The records whose derivatives no output of :func:`livens.flow` reads: each step's solution,
which the replays read as a value (the derivatives' linearization point) and no result holds. The
derivatives carry no tangent for them (zero, made by JAX where asked for), and the reverse pass's
kernel is given zero cotangents for them by the host: XLA makes and hands over no array of
zeros the size of every step's unknowns."""

WHO = "livens.flow"
"""How the engine's notices name the caller (:class:`~livens.engine.NativeFallback`)."""


def _spec(tree):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), tree)


def _sizes(run) -> tuple[int, int, int]:
    """The sizes the engine's limits read: Newton unknowns, coordinates, constraints."""
    return run.flow.plan.unknowns, run.mech.d, run.mech.m


def _unavailable(run) -> engine.Fallback | None:
    """Why the engine makes no native kernel of ``run``'s programs, decided by its options and sizes
    alone (backend "xla", no C compiler, above the size limit), or None."""
    return engine.native_unavailable(run.flow.plan.engine, *_sizes(run))


try:  # results written by the host straight into XLA's buffers (in the JAX versions livens supports)
    from jax.experimental.buffer_callback import buffer_callback as _buffer_callback
except ImportError:  # a JAX without it: jax.pure_callback, which copies both ways
    _buffer_callback = None


def _members_first(a, batch: tuple, writable: bool):
    """``a`` (a buffer of XLA's or a NumPy array, the batch axes ``batch`` first) as a NumPy view with
    one members' axis first; never a copy (an output's writes must reach XLA's buffer). Inputs are
    read-only views: the host never writes XLA's inputs."""
    view = np.asarray(a).view()
    view.shape = (math.prod(batch), *view.shape[len(batch) :])  # raises where only a copy could
    if not writable:
        view.flags.writeable = False
    return view


def host_call(fill, shapes, batch_arg: int, *args):
    """The results ``shapes`` (a tree of one member's ``jax.ShapeDtypeStruct``) of the host function
    ``fill(out, *args)``, which writes them into ``out`` (a tree of NumPy arrays like ``shapes``, a
    members' axis first). Under ``jax.vmap`` the call is given the whole batch at once
    (``vmap_method="broadcast_all"``: every leaf of ``args``, and of ``out``, has the batch axes
    first), the batch axes flattened into that one members' axis for ``fill``; one member otherwise
    (a members' axis of one). The batch axes are those of ``args[batch_arg]``, a scalar per member.

    Through ``jax.experimental.buffer_callback``, ``out`` and ``args`` are XLA's own buffers, seen
    as NumPy arrays: nothing is copied into the callback or out of it (records of every step of
    every member, their cotangents); where JAX lacks it, through ``jax.pure_callback``, which
    copies the arguments in and the results out."""

    def run(out, args):
        batch = np.shape(args[batch_arg])
        fill(
            jax.tree_util.tree_map(lambda a: _members_first(a, batch, True), out),
            *jax.tree_util.tree_map(lambda a: _members_first(a, batch, False), args),
        )

    if _buffer_callback is None:

        def pure(*args):
            batch = np.shape(args[batch_arg])
            out = jax.tree_util.tree_map(lambda s: np.empty((*batch, *s.shape), s.dtype), shapes)
            run(out, args)
            return out

        return jax.pure_callback(pure, shapes, *args, vmap_method="broadcast_all")

    def callback(_context, out, *args):
        run(out, args)

    return _buffer_callback(callback, shapes, vmap_method="broadcast_all")(*args)


class NativeForward:
    """The records of a run from the engine's native kernel (module docstring), called like
    :meth:`livens.driver.ingraph._Run.segments`: ``(state, history, failed, sysp) -> (records,
    nodes reached, a step failed, the states at the chunks' starts)``."""

    def __init__(self, run, program, layout, shapes):
        self.run, self.layout, self.shapes = run, layout, shapes
        self.program = program  # the engine's answer (livens.engine.NativeProgram)
        self.kernel = program.members  # the kernel for any number of members (livens.engine.MemberKernel)

    @classmethod
    def make(cls, run, state, history, failed, sysp) -> "NativeForward | None":
        """The native forward of ``run`` for arguments of these shapes, or None where the engine runs
        no native kernel for it (backend "xla", no C compiler, a loop the translator refuses or
        fails on: the engine's notice says which, module docstring)."""
        if _unavailable(run) is not None:
            return None
        plan, mech = run.flow.plan, run.mech
        spec = _spec((state, history))
        layout = record_layout(plan.scheme, mech, plan.guess, spec[0], plan.h, plan.params, solution=True)

        def build(**opts):
            return make_loop(mech, plan.scheme, plan.guess, CHUNK, layout, plan.newton, record_solution=True, **opts)

        consts = plan.consts()
        sys_spec = None if sysp is None else {k: np.zeros(jnp.shape(v)) for k, v in sysp.items()}
        args = (*spec, np.float64(0.0), np.int64(0), consts[0], *consts[1:5], sys_spec)
        key = ("forward", mech, plan.scheme, plan.guess, CHUNK, layout, plan.newton)
        # only the forward run's kernel stops at Ctrl-C within its chunk: a replay solves no equations
        # and must run whole chunks (one cut short would give a wrong derivative, not a shorter run)
        request = engine.ProgramRequest(key, build, args, "the forward run", interruptible=True)
        (program,) = engine.native_kernels([request], _sizes(run), plan.engine, WHO)
        if program.kernel is None:
            return None
        n_steps = run.flow.n_steps
        n_chunks = -(-n_steps // CHUNK)
        recs = {k: jax.ShapeDtypeStruct((n_steps, *shape), np.dtype(dtype)) for k, shape, dtype in layout}
        starts = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct((n_chunks, *a.shape), a.dtype), spec[0])
        shapes = (recs, jax.ShapeDtypeStruct((), jnp.int64), jax.ShapeDtypeStruct((), jnp.bool_), starts)
        return cls(run, program, layout, shapes)

    def host(self, out, state, history, failed, sysp):
        """The run on the host, its results written into ``out`` (:func:`host_call`: every argument
        and result member-first, B members): the host loop of every run
        (:func:`livens.driver.host.run_host_loop`) over the members' executor
        (:class:`~livens.driver.executors.NativeMembers`, keeping the chunks' starting states) until
        the last step or a failed one (the policy :class:`~livens.driver.options.NaNFlag`: no
        rescue, the member stops, the others go on), every step's record in an
        :class:`~livens.driver.host.EveryStep` whose arrays are the records' results. A member whose
        start failed (``failed``) takes no step. Each member's records are those of its own run (to
        the bit)."""
        recs, n_out, failed_out, starts = out
        flow = self.run.flow
        plan, n_steps = flow.plan, flow.n_steps
        failed = np.asarray(failed, bool)
        B = failed.shape[0]
        for a in jax.tree_util.tree_leaves(starts):
            a.fill(0)  # the starts of chunks a member did not reach
        consts = (*plan.consts()[:5], None)
        width = self.layout.width
        ex = NativeMembers(self.kernel, state, history, 0.0, consts, CHUNK, width, starts=starts, member_sys=sysp)
        recorder = _RecordsInto(self.layout, recs, n_steps, B)
        stop = np.where(failed, 0, n_steps).astype(np.int64)
        try:
            run = host.run_host_loop(
                plan,
                ex,
                self.layout,
                recorder,
                np.zeros(B, np.int64),
                stop,
                policy=flow.on_failure,
                stop_run_on_failure=False,
            )
        finally:  # no copy may write into XLA's buffers after the call returns, whatever it raised
            recorder.wait()
        if run.interrupted:
            raise KeyboardInterrupt("livens: the native run of lv.flow was interrupted (Ctrl-C)")
        n_out[...] = run.n
        failed_out[...] = failed | run.failed

    def __call__(self, state, history, failed, sysp):
        return host_call(self.host, self.shapes, 2, state, history, failed, sysp)


ASYNC_COPY_BYTES = 256 * 1024
"""The records of a chunk (counted as 8 bytes a value) from which on :class:`_RecordsInto` copies
them in its copying thread; fewer are copied at once, in the host loop's thread (a handover to the
thread and back costs more than their copy)."""

_COPIER: list = []  # the thread that copies records into XLA's buffers (_copier), made at the first need
_COPIER_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it makes its own
    os.register_at_fork(after_in_child=_COPIER.clear)


def _copier() -> ThreadPoolExecutor:
    """One thread for the process that copies the records of a chunk of the native forward run
    into XLA's buffers (:class:`_RecordsInto`) while the next chunk's kernel runs."""
    with _COPIER_LOCK:
        if not _COPIER:
            _COPIER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="livens-records"))
        return _COPIER[0]


class _RecordsInto(host.EveryStep):
    """The :class:`~livens.driver.host.EveryStep` of a run whose arrays are given (``records``, one
    per field of ``layout``, (members, n_steps, ...): the results of the host call, not zeroed), its
    rows as that recorder leaves its own: each member's steps written from the first on (its failed
    step's record after them), and at the end of the run the rows after those zero, with "ok" set
    (written once: no array zeroed first).

    The copies of a chunk's records into the arrays (for many members and a small system as long
    as the chunk's kernel itself: the arrays are fresh memory, each page faulted in at its first
    write), from :data:`ASYNC_COPY_BYTES` on, run in one thread of their own (:func:`_copier`, in
    order), beside the next chunk's kernel, which releases the GIL, as NumPy's copies do. The
    records a chunk hands over may be views of the lane kernel's outputs, which the next chunk
    leaves as they are and the one after it overwrites
    (:class:`~livens.driver.executors.NativeMembers`): each :meth:`record` returns only once the
    copies of the chunks before its own are done, so at most one copy runs beside a kernel.
    :meth:`wait` waits for them (the end of the run, and any exception: the host call must not
    return while a copy still writes into XLA's buffers), and raises what a copy raised."""

    def __init__(self, layout, records: dict, n_steps: int, members: int):
        for k, shape, dtype in layout:
            a = records[k]
            if a.shape != (members, n_steps, *shape) or a.dtype != np.dtype(dtype):
                raise AssertionError(f"record {k!r}: {a.dtype}{a.shape}, not the layout's {dtype}{shape}")
        self.records, self.members = records, members
        self.written = np.zeros(members, np.int64)  # each member's rows 0:written are its steps'
        self.end = np.zeros(members, np.int64)  # and rows 0:end set (its failed step's record at written)
        self.pending = []  # the copies under way (futures of _copier's thread)

    def record(self, members, a: int, e: int, rec: dict) -> None:
        if np.any(self.written[members] != a):
            raise AssertionError(f"records of steps {a}:{e} after rows {self.written[members].tolist()}")
        if sum(np.size(v) for v in rec.values()) * 8 < ASYNC_COPY_BYTES:  # handing over costs more than copying
            super().record(members, a, e, rec)
            behind = self.pending
        else:
            self.pending.append(_copier().submit(host.EveryStep.record, self, members, a, e, rec))
            behind = self.pending[:-1]
        for f in behind:  # the copies of the chunks before this one's: done before the next chunk runs
            f.exception()  # waits for it
        self.pending = [f for f in self.pending if not f.done() or f.exception() is not None]
        self.written[members] = e
        self.end[members] = np.maximum(self.end[members], e)

    def wait(self) -> None:
        """Wait for every copy under way; raise the first exception one of them raised."""
        pending, self.pending = self.pending, []
        errors = [f.exception() for f in pending]  # waits for each
        for error in errors:
            if error is not None:
                raise error

    def note_failed_step(self, b: int, e: int, row: dict) -> None:
        super().note_failed_step(b, e, row)  # before the record of the steps before it
        self.end[b] = max(int(self.end[b]), e + 1)

    def flush(self, done: np.ndarray, final: bool = False) -> None:
        if not final:
            return
        self.wait()
        for b in np.flatnonzero(self.end < next(iter(self.records.values())).shape[1]):
            for k, a in self.records.items():
                rest = a[b, self.end[b] :]
                rest.fill(0)
                if k == "ok":
                    rest.reshape(rest.shape[0], -1)[:, 0] = 1


@jax.custom_jvp
def first_order(x):
    """x, refusing to be differentiated: the values the native derivatives are made from (a
    second derivative through them would silently miss their derivatives)."""
    return x


@first_order.defjvp
def _first_order_jvp(primals, tangents):
    raise NotImplementedError(
        "livens.flow: a second derivative (a Hessian, or a derivative of a gradient) of a run whose "
        "derivatives are native kernels is not available; pass backend='xla' to flow for one (its "
        "derivatives are XLA's throughout)."
    )


class NativeDerivatives:
    """The derivatives of a run as native kernels (module docstring): forward mode (``tangent``)
    and its transpose, reverse mode (``adjoint``), from the engine's programs of a chunk's replay
    (``programs``: :class:`livens.engine.ReplayDerivatives`). The tangent kernel may be None (the
    translator refused it): forward mode then runs the XLA replay; without the adjoint the run's
    derivatives are XLA's throughout (:func:`make` returns None)."""

    def __init__(self, run, programs, state_spec, sys_spec):
        self.run, self.programs = run, programs
        self.adjoint, self.tangent_kernel = programs.adjoint.kernel, programs.tangent.kernel
        self.state_spec, self.sys_spec, self.rec_spec = state_spec, sys_spec, programs.records_spec
        self.adjoint_members, self.tangent_members = programs.adjoint.members, programs.tangent.members

    @classmethod
    def make(cls, run, state, sysp) -> "NativeDerivatives | None":
        """The native derivatives of ``run`` for a state and parameters of these shapes, or None where
        the engine runs no native kernel of the reverse pass. The two kernels compile side by side."""
        if _unavailable(run) is not None:
            return None
        plan, mech = run.flow.plan, run.mech
        replay, one_step = make_replay(mech, plan.scheme, CHUNK), replay_step(mech, plan.scheme)
        state_spec, sys_spec = _spec(state), _spec(sysp)
        xs = np.zeros((CHUNK, plan.unknowns))
        scalars = (np.float64(0.0), np.int64(0), np.int64(CHUNK), np.float64(plan.h), plan.jparams)
        what = ("the reverse pass (jax.grad)", "forward mode (jax.jvp)")
        key = ("replay", mech, plan.scheme, CHUNK)
        programs = engine.replay_derivatives(
            key, replay, one_step, state_spec, xs, scalars, sys_spec, _sizes(run), plan.engine, WHO, what
        )
        if programs.adjoint.kernel is None:
            return None
        return cls(run, programs, state_spec, sys_spec)

    def _chunks(self, n):
        """(chunk index, first step, end step) of the chunks of a run that reached node n."""
        n_steps = self.run.flow.n_steps
        for c in range(-(-n_steps // CHUNK)):
            lo = c * CHUNK
            if lo >= n:  # not reached (a failed run)
                return
            yield c, lo, min(lo + CHUNK, n_steps)

    @staticmethod
    def _rows(a, idx, lo, hi):
        """Steps lo:hi of the members ``idx`` of member-first rows a (members, steps, ...), padded
        with zeros to CHUNK (steps past n_stop are skipped); ``idx`` an integer: one member's,
        without the members' axis; a slice of members (:func:`~livens.driver.executors.member_index`):
        a view where the chunk is whole."""
        axis = 0 if np.ndim(idx) == 0 and not isinstance(idx, slice) else 1  # the steps' axis of the result
        a = np.asarray(a)[idx, lo:hi]  # the chunk's steps only: not each member's whole records per chunk
        if hi - lo == CHUNK:
            return a
        pad = [(0, 0)] * a.ndim
        pad[axis] = (0, CHUNK - a.shape[axis])
        return np.pad(a, pad)

    def _replay_pass(self, kernels, starts, xs, n, sysp, carry, given, take, reverse: bool):
        """One pass of a replay kernel over the chunks of the runs of B members (every argument
        member-first; member b reached node ``n[b]``; module docstring), the last chunk first where
        ``reverse``: for chunk c (steps lo:hi) and the members that reached it, together
        (:class:`~livens.engine.MemberKernel`), ``kernel(start of c, its solutions,
        t_start, n0, n_stop, h, the scheme's and the System's parameters, carry, given(idx, lo, hi))
        -> (carry, out)``, then ``take(idx, out, lo, hi)`` for each group ``idx`` of them (in its
        thread: the groups' rows are disjoint; ``idx`` an integer: one member, its outputs without
        the members' axis); ``given`` is given the members as :func:`~livens.driver.executors.member_index`
        gives them (a slice where they are consecutive); ``carry`` (member-first arrays) is updated in
        place."""
        plan, n = self.run.flow.plan, np.asarray(n, np.int64)
        chunks = list(self._chunks(int(n.max(initial=0))))
        same = {}  # per group of members: the arguments that every chunk gives them alike

        def fixed(idx, at):
            return per_group(
                same,
                idx,
                lambda: (
                    for_members(idx, np.float64(0.0)),
                    for_members(idx, (np.float64(plan.h), plan.jparams)),
                    member_rows(sysp, at),
                ),
            )

        for c, lo, hi in reversed(chunks) if reverse else chunks:

            def args_of(idx, c=c, lo=lo, hi=hi):
                at = member_index(idx)  # consecutive members: views of their rows, not copies
                t0, consts, sys = fixed(idx, at)
                start = jax.tree_util.tree_map(lambda a: np.asarray(a)[at, c], starts)
                head = (start, self._rows(xs, at, lo, hi), t0, for_members(idx, np.int64(lo)), n[idx])
                return (*head, *consts, sys, member_rows(carry, at), given(at, lo, hi))

            def taken(idx, outputs, lo=lo, hi=hi):
                new, out = outputs
                set_member_rows(carry, idx, new)
                take(idx, out, lo, hi)

            kernels.run(np.flatnonzero(lo < n), args_of, taken)
        return carry

    def host_adjoint(self, out, starts, xs, n, ct_recs, sysp):
        """(cotangent of the initial state, of the System's parameters) for the records' cotangents
        ``ct_recs``, written into ``out`` (:func:`host_call`: every argument and result
        member-first, and the members run together): the chunks' vector-Jacobian products, the
        last chunk first, each from the state's cotangent where the later one ended (carried in
        ``out``'s first part); the parameters' cotangents summed."""
        ct_state, ct_sys = out
        for a in jax.tree_util.tree_leaves(out):
            a.fill(0)

        def add(idx, ct_p, lo, hi):
            for dst, src in zip(jax.tree_util.tree_leaves(ct_sys), jax.tree_util.tree_leaves(ct_p)):
                dst[idx] = dst[idx] + src

        def chunk_cotangents(idx, lo, hi):
            cts = {k: self._rows(a, idx, lo, hi) for k, a in ct_recs.items()}
            for k, zero in self._zero_cotangents(cts).items():
                cts[k] = zero
            return cts

        self._replay_pass(self.adjoint_members, starts, xs, n, sysp, ct_state, chunk_cotangents, add, reverse=True)

    def _zero_cotangents(self, cts: dict) -> dict:
        """The cotangents of the records in :data:`UNDIFFERENTIATED` for a chunk whose other
        records' cotangents are ``cts`` (one member's, or members-first): zeros that XLA neither
        makes nor hands over, read-only views of one zero."""
        k0 = next(iter(cts))
        lead = np.shape(cts[k0])[: np.ndim(cts[k0]) - len(self.rec_spec[k0].shape)]
        zero = np.zeros((), np.float64)
        return {
            k: np.broadcast_to(zero.astype(self.rec_spec[k].dtype), (*lead, *self.rec_spec[k].shape))
            for k in self.rec_spec
            if k in UNDIFFERENTIATED
        }

    def host_tangent(self, out, starts, xs, n, sysp, d_state, d_sys):
        """The records' tangents for (d_state, d_sys), written into ``out`` (:func:`host_call`:
        every argument and result member-first, and the members run together): the chunks'
        Jacobian-vector products, the first chunk first, each starting from the tangent where the
        last one ended; zero in the chunks a member did not reach."""

        def put(idx, d_recs, lo, hi):  # idx: members (d_recs member-first) or one member
            for k in out:
                d = np.asarray(d_recs[k])
                out[k][idx, lo:hi] = d[:, : hi - lo] if np.ndim(idx) else d[: hi - lo]

        carry = jax.tree_util.tree_map(np.array, d_state)
        self._replay_pass(
            self.tangent_members, starts, xs, n, sysp, carry, lambda idx, lo, hi: member_rows(d_sys, idx), put, False
        )
        reached = -(-np.asarray(n, np.int64) // CHUNK) * CHUNK  # the chunks a member reached, written whole
        for b in np.flatnonzero(reached < self.run.flow.n_steps):
            for a in out.values():
                a[b, reached[b] :] = 0

    def tangent(self, replayed, state, starts, xs, n, sysp, d_state, d_sys):
        """The tangents of the records for (d_state, d_sys): forward by the tangent kernel (or
        ``replayed(state, xs, sysp)`` differentiated by XLA where there is none), transposed by the
        adjoint kernel (module docstring)."""
        state, starts, xs, n, sysp = first_order((state, starts, xs, n, sysp))
        # JAX transposes the solve only where every part of its right-hand side is linear in the
        # inputs: the records' part (zeros), and the tangents that JAX made constant zeros, get a
        # zero that is linear in them
        zero = sum(0.0 * jnp.sum(t) for t in jax.tree_util.tree_leaves((d_state, d_sys)))
        n_steps = self.run.flow.n_steps
        rec_shapes = {
            k: jax.ShapeDtypeStruct((n_steps, *a.shape[1:]), a.dtype)
            for k, a in self.rec_spec.items()
            if k not in UNDIFFERENTIATED
        }
        zero_recs = {k: jnp.broadcast_to(zero, a.shape) for k, a in rec_shapes.items()}
        d_state, d_sys = jax.tree_util.tree_map(lambda t: t + zero, (d_state, d_sys))

        def solve(_, b):
            if self.tangent_kernel is None:
                _, d = jax.jvp(lambda s, p: replayed(s, xs, p), (state, sysp), (b[0], b[1]))
                d = {k: d[k] for k in rec_shapes}
            else:
                args = (starts, xs, n, sysp, b[0], b[1])
                d = host_call(self.host_tangent, rec_shapes, 2, *args)
            return jax.tree_util.tree_map(jnp.zeros_like, b[0]), jax.tree_util.tree_map(jnp.zeros_like, b[1]), d

        def transpose_solve(_, ct):
            shapes = (self.state_spec, self.sys_spec)
            a, p = host_call(self.host_adjoint, shapes, 2, starts, xs, n, ct[2], sysp)
            return a, p, jax.tree_util.tree_map(jnp.zeros_like, ct[2])

        out = lax.custom_linear_solve(lambda v: v, (d_state, d_sys, zero_recs), solve, transpose_solve)
        return out[2]
