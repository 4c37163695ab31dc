"""The host loop: the one loop on the Python side of every run that is not inside a
differentiable program.

It calls the executor (:mod:`livens.driver.executors`) once per chunk of steps for all members
that have not reached their stop, and between chunks it hands the kept nodes to the output (memory,
and a netCDF file where streamed), handles a failed step by the failure policy (the damped rescue,
then stopping the member or the run), checks the energy for a blow-up where asked, updates the
progress bar and answers Ctrl-C. What it returns (:class:`Outcome`) says how far each member got
and why a member stopped early; the driver builds the result and raises the run's error.

It runs :func:`livens.simulate`, :func:`livens.simulate_ensemble` and the native forward run of
:func:`livens.flow` (:mod:`livens.driver.native_flow`). What a run keeps is its recorder's:
:class:`Recorder` (the kept nodes, and a netCDF stream) for the first two, whatever the executor,
which makes of them the run's :class:`~livens.run_record.RunRecord` (:meth:`Recorder.run_record`),
the arrays every result is a view of; :class:`EveryStep` (every step's record, its converged
unknowns included) for the flow, whose program makes its result of them.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .. import engine
from ..run_record import Failure, RunRecord
from ..run_status import Status
from . import failure


@dataclass
class Outcome:
    """How far a run's members got: n (B,) nodes reached (run-local), failed (B,); stops: member ->
    (kind, run-local step, residual, iterations) for the members that stopped early ("convergence",
    "blowup"); rescued: member -> global indices of the rescued steps; interrupted: Ctrl-C;
    compile_time: the first chunk's wall time (its compilation included); n_stop (B,): the nodes
    the members were to reach."""

    n: np.ndarray
    failed: np.ndarray
    stops: dict = field(default_factory=dict)
    rescued: dict = field(default_factory=dict)
    interrupted: bool = False
    compile_time: float = 0.0
    n_stop: np.ndarray | None = None

    def failure(self, b: int) -> Failure | None:
        """Member b's :class:`~livens.run_record.Failure`: its failed step (STEP_FAILED), the step
        whose energy left the band (BLOWUP), or the steps it had done when Ctrl-C stopped the run
        before its stop (INTERRUPTED, or in any case for a run of one member); None where it ended."""
        stop = self.stops.get(b)
        if stop is not None:
            kind, step, resid, its = stop
            status = Status.STEP_FAILED if kind == "convergence" else Status.BLOWUP
            return Failure(status, int(step), float(resid), int(its), int(b))
        unfinished = self.n_stop is None or self.n[b] < self.n_stop[b] or self.n.shape[0] == 1
        if self.interrupted and unfinished:
            return Failure(Status.INTERRUPTED, int(self.n[b]), member=int(b))
        return None

    def status(self, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(codes of :class:`~livens.Status` (B,) int32, failed_step (B,) int64) of the members: the
        global index ``offset + step`` of a failed Newton step, -1 for the others
        (:mod:`livens.run_status`)."""
        B = self.n.shape[0]
        codes, failed_step = np.zeros(B, np.int32), np.full(B, -1, np.int64)
        for b in range(B):
            f = self.failure(b)
            if f is not None:
                codes[b] = int(f.status)
                if f.status is Status.STEP_FAILED:
                    failed_step[b] = offset + f.step
        return codes, failed_step


class NothingComputed:
    """Whether the running ``simulate`` has computed nothing yet (set-up, the first chunk's
    compilation and computation): a Ctrl-C then loses nothing, and the command line may exit at
    once instead of waiting for XLA's compiler, which does not return to Python until it is done
    (:func:`livens.cli._exit_on_ctrl_c_before_the_first_step`). ``lock`` is held while the flag is
    cleared, so that whoever acts on the flag does so before any result is written."""

    lock = threading.Lock()
    flag = False

    @classmethod
    def set(cls, value: bool) -> None:
        with cls.lock:
            cls.flag = value


class _Watcher:
    """The process's one SIGINT watcher thread (:func:`_wakeup_watcher`), started at the first run
    that needs it and kept: a thread started and joined per run costs each short run the time the
    operating system takes to schedule it. ``armed`` (under ``lock``): a run is under way, whose
    native kernels the thread stops at a SIGINT; bytes it reads while no run is armed (a SIGINT of
    a run that has ended, other signals) are dropped."""

    lock = threading.Lock()
    armed = False
    pid = None
    writer = None

    @classmethod
    def started(cls):
        """The writing end of the watcher's socket, the thread started in this process (again after
        a fork, whose child has no thread of its parent's)."""
        import os
        import socket

        with cls.lock:
            if cls.pid != os.getpid():
                reader, writer = socket.socketpair()
                writer.setblocking(False)
                threading.Thread(target=cls._watch, args=(reader,), name="livens-sigint", daemon=True).start()
                cls.pid, cls.writer, cls.armed = os.getpid(), writer, False
            return cls.writer

    @classmethod
    def _watch(cls, reader):
        with reader:
            while True:
                try:
                    data = reader.recv(64)
                except OSError:
                    return
                if not data:
                    return
                if signal.SIGINT in data:
                    with cls.lock:  # a run that has ended (disarmed) is not stopped after its end
                        if cls.armed:
                            engine.interrupt_native()

    @classmethod
    def arm(cls, armed: bool) -> None:
        with cls.lock:
            cls.armed = armed


def _wakeup_watcher():
    """A thread that hears SIGINT while the main thread is inside a native kernel, where Python's own
    handler cannot run until the kernel returns: the C-level handler writes the signal's number to a
    socket (:func:`signal.set_wakeup_fd`), and the thread tells native kernels to stop after the step
    under way (:func:`livens.engine.interrupt_native`). Returns the function that ends its watch for
    this run, or None where another wakeup descriptor is installed (an asyncio loop, say), which it
    leaves alone. The thread is the process's one (:class:`_Watcher`), armed for the run."""
    writer = _Watcher.started()
    try:
        old = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # pragma: no cover
        old = None
    if old != -1:  # none could be set, or someone else's is: leave theirs in place
        if old is not None:
            signal.set_wakeup_fd(old)
        return None
    _Watcher.arm(True)

    def remove():
        signal.set_wakeup_fd(-1)
        # disarmed under the watcher's lock: an interrupt() it is making finishes first, and a SIGINT
        # it reads later is dropped, so the caller may then let native kernels run again (a late
        # interrupt() would stop every later native run before its first step)
        _Watcher.arm(False)

    return remove


def sigint_flag() -> dict:
    """Turn SIGINT into a flag checked between chunks, so Ctrl-C never lands inside a file write.

    Only in the main thread; elsewhere the default behaviour stays. Native kernels are told to stop
    after the step under way (:func:`livens.engine.interrupt_native`): those in other threads (an
    ensemble's lanes) by the handler, the one the main thread runs by :func:`_wakeup_watcher`, so
    Ctrl-C is answered within a step, not a chunk. ``restore()`` puts the previous handler back and
    lets native kernels run whole chunks again."""
    state = {"flag": False, "restore": lambda: None}
    if threading.current_thread() is not threading.main_thread():
        return state
    try:
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            state["flag"] = True
            engine.interrupt_native()

        signal.signal(signal.SIGINT, handler)
        remove = _wakeup_watcher()

        def restore():
            if remove is not None:
                remove()
            signal.signal(signal.SIGINT, previous)
            engine.resume_native()

        state["restore"] = restore
    except (ValueError, OSError):  # pragma: no cover
        pass
    return state


class Recorder:
    """Where the host loop puts the kept nodes: :class:`~livens.driver.records.KeptNodes`, and a
    netCDF stream where the output is streamed (one member: every kept row at once; members: the
    rows every member still running has reached)."""

    def __init__(self, kept, stream=None):
        self.kept, self.stream = kept, stream
        self.written = 0  # kept rows already streamed (all members)
        self.counts = np.zeros(kept.B, np.int64)  # kept rows per member

    def record(self, members, a: int, e: int, rec: dict) -> None:
        lo, hi = self.kept.append(members, a, e, rec)
        self.counts[members] = np.maximum(self.counts[members], hi)

    def note_failed_step(self, b: int, e: int, row: dict) -> None:
        """Member b's step e failed; ``row``: its record (its iterations and residual are kept
        where it is a kept step)."""
        self.kept.note_failed_step(b, e, int(row["iterations"]), float(row["residual"]))

    def flush(self, done: np.ndarray, final: bool = False) -> None:
        """Stream the rows every member still running has (``done``: members that stopped)."""
        if self.stream is None:
            return
        running = self.counts[~done]
        upto = int(running.min()) if running.size and not final else int(self.counts.max(initial=0))
        if upto > self.written:
            self.stream.append_rows(self.kept, self.written, upto)
            self.written = upto

    def run_record(self, out: Outcome) -> RunRecord:
        """The run's :class:`~livens.run_record.RunRecord` once the host loop has returned ``out``:
        the kept arrays themselves (no copy), cut after the node the furthest member reached where
        Ctrl-C stopped the run, NaN in each member's rows after its last node (its failed step's
        iterations and residual kept), and how each member ended (:meth:`Outcome.status`)."""
        kept = self.kept
        if out.interrupted:  # what was computed: the rows up to the member that got furthest
            kept.truncate(int(out.n.max()))
        kept.fill_after(out.n, out.failed)
        status, failed_step = out.status(kept.offset)
        return RunRecord(
            t=kept.t,
            q=kept.q,
            p=kept.p,
            v=kept.v,
            lam=kept.lam,
            gam=kept.gam,
            iterations=kept.iterations,
            residual=kept.residual,
            steps=np.asarray(out.n, np.int64),
            status=status,
            failed_step=failed_step,
            index=kept.nodes - 1,
            nodal_v=kept.nodal_v,
            offset=kept.offset,
        )


class EveryStep:
    """The recorder that keeps every step's record of each of ``members`` members, fields as the
    layout's, in arrays (members, n_steps, ...) (:attr:`records`): the steps taken, and a failed
    step's record; the rows of steps not taken are zero with "ok" set (the skipped rows of the
    chunk loop). The native forward runs of :func:`livens.flow` keep their records here (its
    derivatives replay the steps from the recorded unknowns "x")."""

    def __init__(self, layout, n_steps: int, members: int = 1):
        self.records = {}  # each field's array made directly (as layout.unpack would give them), no rows copied
        for k, shape, dtype in layout:
            a = np.zeros((members, n_steps, *shape), dtype)
            if k == "ok":
                a.reshape(members, n_steps, -1)[..., 0] = 1
            self.records[k] = a
        self.members = members

    def record(self, members, a: int, e: int, rec: dict) -> None:
        every = np.size(members) == self.members  # distinct and sorted: every member, in order
        for k, v in rec.items():
            if every:  # basic indexing: no gather of the members' rows
                self.records[k][:, a:e] = v[:, : e - a]
            else:
                self.records[k][members, a:e] = v[:, : e - a]

    def note_failed_step(self, b: int, e: int, row: dict) -> None:
        for k, v in row.items():
            if e < self.records[k].shape[1]:
                self.records[k][b, e] = v

    def flush(self, done: np.ndarray, final: bool = False) -> None:
        pass


def _first_failed(ok_rows: np.ndarray) -> int:
    return int(np.flatnonzero(~ok_rows)[0])


def run_host_loop(
    plan,
    executor,
    layout,
    recorder: Recorder,
    n: np.ndarray,
    n_stop: np.ndarray,
    *,
    policy,
    blowup_factor=None,
    energy0=None,
    progress_bar=None,
    empty_history=None,
    stop_run_on_failure: bool = True,
) -> Outcome:
    """Advance every member to its ``n_stop`` (module docstring). ``policy``: the failure policy
    (its ``rescue``); ``stop_run_on_failure``: a member that stops early stops the run (one member:
    :func:`livens.simulate`); ``energy0`` (B,): the energies the blow-up check compares with.

    ``recorder``: where the steps go (:class:`Recorder`, :class:`EveryStep`): ``record(members, a,
    e, rec)``, ``note_failed_step(b, e, row)``, ``flush(done, final)``. A call of the executor that
    takes no step and fails none (a native kernel whose stop flag is up: Ctrl-C, here or in
    another thread) ends the run as interrupted."""
    B = n.shape[0]
    out = Outcome(n=n.copy(), failed=np.zeros(B, bool), n_stop=np.asarray(n_stop).copy())
    n = out.n
    interrupted = sigint_flag()
    t0 = time.perf_counter()
    try:
        while True:
            alive = ~out.failed & (n < n_stop)
            if not alive.any():
                break
            if interrupted["flag"]:
                raise KeyboardInterrupt
            stop = np.where(alive, n_stop, n)
            n_before = n.copy()
            n_new, failed_now, rows = executor.advance(n_before, stop)
            NothingComputed.set(False)  # from here on, results are kept and written
            if out.compile_time == 0.0:
                out.compile_time = time.perf_counter() - t0
            moved = n_new - n_before
            if not failed_now.any() and not moved.any():  # a native kernel's stop flag is up (Ctrl-C)
                raise KeyboardInterrupt
            # the rows of the steps taken (a failed step's too), not the rest of the chunk
            rec = layout.unpack(rows[:, : max(1, int(moved.max()) + int(failed_now.any()))])
            stopped_here = False
            simple = not failed_now.any() and blowup_factor is None
            if simple:  # members that advanced over the same steps are recorded together (all, usually)
                for a, e in sorted({(int(x), int(y)) for x, y in zip(n_before[moved > 0], n_new[moved > 0])}):
                    bs = np.flatnonzero((moved > 0) & (n_before == a) & (n_new == e))
                    if bs.size == B:  # every member over the same steps: the records as they are
                        recorder.record(bs, a, e, rec)
                    else:
                        recorder.record(bs, a, e, {k: v[bs] for k, v in rec.items()})
                n[:] = n_new
            else:
                for b in np.flatnonzero(alive):
                    a, e = int(n_before[b]), int(n_new[b])
                    mrec = {k: v[b : b + 1, : e - a] for k, v in rec.items()}
                    stop_info = None
                    if failed_now[b]:
                        j = _first_failed(rec["ok"][b])
                        its, resid = int(rec["iterations"][b, j]), float(rec["residual"][b, j])
                        rescued = None
                        if policy.rescue:
                            state_b, _ = executor.member(b)
                            rescued = failure.rescue(plan, state_b, plan.t_start + e * plan.h, its)
                        if rescued is not None:
                            new_state, srec = rescued
                            executor.replace(b, new_state, empty_history)
                            out.rescued.setdefault(b, []).append(plan.offset + e)
                            mrec = {
                                k: np.concatenate([v, np.asarray(srec[k])[None, None]], axis=1) if k in srec else v
                                for k, v in mrec.items()
                            }
                            e += 1
                        else:
                            stop_info = ("convergence", e, resid, its)
                            recorder.note_failed_step(b, e, {k: v[b, j] for k, v in rec.items()})
                    # the steps before a failed Newton step are checked too: an energy that left the band
                    # before the failure is a blow-up, whatever the chunk size
                    if blowup_factor is not None and e > a and (stop_info is None or stop_info[0] == "convergence"):
                        blown = failure.first_blowup(
                            plan.mech, float(energy0[b]), mrec["q"][0], mrec["p"][0], blowup_factor
                        )
                        if blown is not None:
                            keep = blown[0] + 1  # the steps up to and including the first blown-up one
                            mrec = {k: v[:, :keep] for k, v in mrec.items()}
                            e = a + keep
                            stop_info = ("blowup", e, blown[1], 0)
                            out.rescued[b] = [i for i in out.rescued.get(b, []) if i < plan.offset + e]
                    if e > a:
                        recorder.record(np.array([b]), a, e, mrec)
                    n[b] = e
                    if stop_info is not None:
                        out.failed[b] = True
                        out.stops[b] = stop_info
                        stopped_here = True
            if progress_bar is not None:
                progress_bar.update(int(np.sum(n - n_before)))
            recorder.flush(out.failed)
            if stopped_here:
                executor.discard()
                if stop_run_on_failure:
                    break
            if interrupted["flag"]:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        executor.discard()
        out.interrupted = True
    finally:
        interrupted["restore"]()
    recorder.flush(out.failed, final=True)
    return out
