"""The one driver: :func:`run` does, once for every kind of run, the checks, the scheme's
resolution, the initial states and the start, the host loop over the compiled chunk loop, the
records and the result. :func:`livens.simulate`, :func:`livens.simulate_ensemble` and
:func:`livens.flow` are presets of it (:mod:`livens.driver.options` names what differs).

A single run and an ensemble take one path (:func:`_host_run`): a single run is an ensemble of one
member, set up by the same function (:func:`_set_up`), its executor chosen by the same one
(:func:`_executor`: a native kernel runs it as the ensembles' :class:`NativeMembers` with B = 1),
kept by the same recorder, its result a view of the same run record; what still differs is what a
single run alone has (its start compiled while its loop compiles, resume, the blow-up check, XLA's
program of one member dispatched ahead) and the result's kind.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import engine
from .._progress import progress_bar
from ..guess import GuessHistory
from ..run_record import Failure
from ..run_status import Status
from ..schemes.base import State
from ..timestep import make_loop
from . import failure
from .combinations import checked
from .executors import Batched, Dispatched, MemberKernel, NativeMembers
from .host import NothingComputed, Recorder, run_host_loop
from .options import (
    DEFAULT_CHUNK,
    Arrays,
    Implicit,
    InGraph,
    Members,
    Memory,
    NaNFlag,
    PerMember,
    Raise,
    Single,
    Stream,
)
from .records import KeptNodes, RecordLayout, record_layout
from .setup import Plan, member_states, start_state
from .setup import plan as make_plan

LANES = engine.EngineOptions.lanes
"""Members per lane kernel by default (:attr:`livens.engine.EngineOptions.lanes`, where the engine's
thresholds live)."""


if TYPE_CHECKING:
    from ..ensemble_solution import EnsembleSolution
    from ..problem import Problem
    from ..solution import Solution
    from .ingraph import FlowFunction

_SINGLE = Single()
"""The default executor of :func:`run` (a frozen option object)."""


def run(
    problem: Problem,
    scheme: str = "VI-S",
    *,
    h: float | None = None,
    t_end: float | None = None,
    n_steps: int | None = None,
    tol: float | str = 1e-9,
    max_iter: int = 40,
    guess: str | None = None,
    parameters: dict | None = None,
    params: dict | None = None,
    final_iteration: bool = False,
    backend: str | None = None,
    members: tuple | None = None,
    executor: Single | Members | InGraph = _SINGLE,
    output: Memory | Stream | Arrays | None = None,
    on_failure: Raise | PerMember | NaNFlag | None = None,
    adjoint: Implicit | None = None,
    progress: bool | None = None,
    blowup_factor: float | None = None,
    resume: Solution | None = None,
    default_guess: str | None = None,
    accept_floor: bool = True,
) -> Solution | EnsembleSolution | FlowFunction:
    """Run ``scheme`` on ``problem``: the one driver (module docstring).

    h, t_end (or n_steps), tol, max_iter, guess, parameters (the System's), params (the scheme's),
    final_iteration, backend: as for :func:`livens.simulate`. ``members``: (q0s, v0s) of an ensemble
    (with ``executor=Members()``). ``executor``, ``output``, ``on_failure``, ``adjoint``: the option
    objects of :mod:`livens.driver.options` (None: the executor's default); a combination they do
    not make, or a keyword the executor does not read, is refused (:mod:`livens.driver.combinations`). ``progress``, ``blowup_factor``, ``resume``: as for
    :func:`livens.simulate`; ``default_guess``: the guess where ``guess`` is None (None: the
    scheme's own); ``accept_floor``: as for :func:`livens.simulate`.

    Returns a :class:`~livens.Solution` (Single), an :class:`~livens.EnsembleSolution` (Members),
    or a :class:`~livens.flow.FlowFunction` (InGraph: the run as a pure function of its initial
    state and parameters).
    """
    output, on_failure, adjoint = checked(
        executor,
        output,
        on_failure,
        adjoint,
        dict(
            members=members,
            blowup_factor=blowup_factor,
            resume=resume,
            n_steps=n_steps,
            t_end=t_end,
            parameters=parameters,
            final_iteration=final_iteration,
            progress=progress,
        ),
    )
    if isinstance(executor, InGraph):
        from .ingraph import flow_function

        p = make_plan(
            problem,
            scheme,
            h=h,
            n_steps=n_steps,
            tol=tol,
            max_iter=max_iter,
            guess=guess,
            params=params,
            backend=backend,
            default_guess=default_guess,
            accept_floor=accept_floor,
        )
        return flow_function(p, executor, output, on_failure, adjoint)
    if blowup_factor is not None and not (blowup_factor > 0):
        raise ValueError(f"blowup_factor must be positive; got {blowup_factor!r}.")
    t_start, offset = 0.0, 0
    if resume is not None:
        t_start = float(resume.t[-1])
    NothingComputed.set(True)
    began = time.perf_counter()  # the run's wall clock: set-up, compiles, steps (Solution.summary)
    try:
        with engine.serial_blas():  # XLA's LAPACK calls on one BLAS thread (livens.engine.threads)
            p = make_plan(
                problem,
                scheme,
                h=h,
                t_end=t_end,
                tol=tol,
                max_iter=max_iter,
                guess=guess,
                parameters=parameters,
                params=params,
                final_iteration=final_iteration,
                backend=backend,
                t_start=t_start,
                offset=offset if resume is None else _resume_offset(resume),
                default_guess=default_guess,
                accept_floor=accept_floor,
            )
            return _host_run(p, members, executor, output, on_failure, progress, blowup_factor, resume, began)
    finally:
        NothingComputed.set(False)
        engine.write_cache_entries()  # the persistent cache entries of the run's XLA programs, after its steps


# ------------------------------------------------------------------ the host run: one member or B
def _host_run(p: Plan, members, executor, output: Memory, on_failure: Raise, progress, blowup_factor, resume, began):
    """A run through the host loop, of one member (``executor`` :class:`Single`: :func:`livens.simulate`)
    or of B (:class:`Members`: an ensemble), on one path: the members' set-up (:func:`_set_up`), the
    run's meta, kept nodes, stream and progress bar, the host loop, then the result, a view of the
    recorder's run record: a Solution (:func:`_single_result`) or an EnsembleSolution
    (:func:`_members_result`). ``began``: when :func:`run` was called."""
    run = _set_up(p, members, executor, resume)
    save_every = output.save_every
    meta = _meta(p, save_every, on_failure)
    if run.single:
        meta["chunk"] = run.chunk
    else:
        problem = p.problem
        meta.update(
            members=run.B,
            v0s=run.node["v"],
            chunk=run.chunk,
            example=problem.name,
            problem_parameters=dict(problem.parameters),
        )
    kept = _kept_nodes(p, run.B, p.offset, save_every, p.t_start, run.node)
    stream = _open_stream(p, output, meta, kept, None if run.single else run.B)
    energy0 = _energy0(p, blowup_factor)
    blowup_factor = None if energy0 is None else blowup_factor
    bar = progress_bar(run.B * p.steps, progress, unit="step" if run.single else "member-step")
    wall0 = time.perf_counter()
    recorder = Recorder(kept, stream)
    blowup = dict(blowup_factor=blowup_factor, energy0=energy0)
    out = _host_loop(p, run.ex, run.layout, recorder, bar, run.empty, on_failure, **blowup)
    times = (began, wall0, time.perf_counter())
    if run.single:
        return _single_result(p, run.ex, out, recorder, meta, output, on_failure, blowup_factor, times)
    return _members_result(p, run.ex, out, recorder, meta, output, times)


def _single_result(p: Plan, ex, out, recorder: Recorder, meta: dict, output, on_failure, blowup_factor, times):
    """The Solution of a single run (its member 0), or the error of a run stopped early, which holds it.
    Its times (``meta``; ``times``: when :func:`run` was called, the first step began, the last ended)
    add up: ``wall_time`` = ``compile_time`` (set-up, the start step, the compiles of the time loop
    and what else runs before the first step) + ``stepping_time`` (the steps, from the first to the
    last, with their records; a compile needed during them, a rescue's or a large XLA loop's
    optimizing one, counts there)."""
    from ..solution import Solution

    began, wall0, ended = times
    save_every, stream = output.save_every, recorder.stream
    n_done = int(out.n[0])
    state, history = ex.member(0)
    meta.update(
        wall_time=ended - began,
        compile_time=wall0 - began,
        stepping_time=ended - wall0,
        steps=n_done,
        rescued_steps=out.rescued.get(0, []),
        backend=ex.backend,
    )
    _fallback(meta, ex)
    stopped = out.failed[0] or out.interrupted
    # a run that ended, or that Ctrl-C stopped at a kept node (its last step kept), continues exactly
    # from its last node: the predictor's history and the compensated sums' carries there
    exact = not out.failed[0] and (not out.interrupted or (p.offset + n_done) % save_every == 0)
    if p.guess == "extrapolated" and exact:
        meta["guess_history"] = history.to_meta(p.offset + n_done)
    if state.comp is not None and exact:
        meta["compensation"] = {"q": np.asarray(state.comp[0]).tolist(), "p": np.asarray(state.comp[1]).tolist()}
    if out.interrupted and stream is not None:  # the stopped run's file holds them too
        stream.continue_from(meta.get("guess_history"), meta.get("compensation"))
    sol = Solution.from_record(recorder.run_record(out), 0, p.problem, p.scheme, p.params, meta)
    _warn_redundant(p, sol.q, sol.t)
    path = output.file()
    _save(output, sol, stopped)
    fail = out.failure(0)
    if fail is not None:
        failure.raise_failure(p, fail, n_done, sol, path, on_failure.rescue, blowup_factor, save_every, state=state)
    return sol


def _members_result(p: Plan, ex, out, recorder: Recorder, meta: dict, output, times) -> EnsembleSolution:
    """The EnsembleSolution of B members; a warning names the members that failed, and Ctrl-C raises
    with the ensemble computed so far. Its times (``meta``): ``wall_time`` since :func:`run` was
    called, ``compile_time`` the first chunk's (its compiles included)."""
    from ..ensemble_solution import EnsembleSolution

    began, _, ended = times
    record = recorder.run_record(out)
    B = int(out.n.shape[0])
    meta.update(
        wall_time=ended - began,
        compile_time=out.compile_time,
        steps=int(p.steps),
        backend=ex.backend,
        lanes=getattr(ex, "lanes", 0),
        rescued_steps={int(b): v for b, v in out.rescued.items()},
    )
    _fallback(meta, ex)
    ens = EnsembleSolution.from_record(record, p.scheme, p.params, meta, p.problem, p.mech)
    for b in range(B) if p.rank is not None else ():
        nodes = record.member(b)
        _warn_redundant(p, nodes["q"], nodes["t"], member=b)
    _save(output, ens, out.interrupted)
    if out.failed.any():
        failure.warn_failed_members([out.failure(b) for b in np.flatnonzero(out.failed)], B)
    if out.interrupted:
        done = Failure(Status.INTERRUPTED, int(out.n.min()))
        failure.raise_ensemble_interrupt(p, done, ens, output.file())
    return ens


def _host_loop(p: Plan, ex, layout, recorder: Recorder, bar, empty, on_failure: Raise, **blowup):
    """Every member of ``ex`` from node 0 to ``p.steps`` through the host loop (:func:`run_host_loop`),
    kept by ``recorder`` (its kept nodes, and its stream where not None), a failed step handled by
    the policy ``on_failure``; then the executor, the stream (the rows it still holds: the file has
    every kept step) and the progress bar closed, also on an error or Ctrl-C. ``blowup``: a single
    run's blowup_factor and energy0."""
    stream = recorder.stream
    try:
        return run_host_loop(
            p,
            ex,
            layout,
            recorder,
            np.zeros(ex.members, np.int64),
            np.full(ex.members, p.steps),
            policy=on_failure,
            progress_bar=bar,
            empty_history=empty,
            stop_run_on_failure=on_failure.stops_run(),
            **blowup,
        )
    finally:
        ex.close()
        if stream is not None:
            stream.close()
        if bar is not None:
            bar.close()


def _energy0(p: Plan, blowup_factor):
    """The energy (one member's) the blow-up check compares with: the problem's initial one, a resumed
    run's too; None where no check runs (no ``blowup_factor``, or an energy that needs an M^-1 the
    system does not have)."""
    if blowup_factor is None:
        return None
    fn = failure.blowup_energy(p.mech)
    if fn is None:
        return None
    return np.asarray(fn(jnp.asarray(p.problem.q0)[None], jnp.asarray(p.problem.p0)[None]))


# ------------------------------------------------------------------ the set-up: one member or B
class _Run(NamedTuple):
    """The members of a run before their first step (:func:`_set_up`): their executor (its loop
    compiled), the record layout, one member's empty predictor history, the steps per call, the
    kept node 0 (t, q, p, v, m; one member's, or member-first), the number of members, and whether
    it is a single run."""

    ex: object
    layout: RecordLayout
    empty: object
    chunk: int
    node: dict
    B: int
    single: bool


def _set_up(p: Plan, members, executor, resume) -> _Run:
    """The run's members before their first step, on one path for one member and for B: their
    initial states (:func:`_initial`), the scheme's start (:func:`_start`), the record layout, the
    compiled chunk loop and its executor (:func:`_executor`; a single run's loop compiles while its
    start does), and the predictor's history (a resumed run's, where it stored one)."""
    single = not isinstance(executor, Members)
    state, node = _initial(p, members, resume, single)
    finish = None
    if p.scheme.start is not None and resume is None:
        state, finish = _start(p, state, single)
    one = state if single else jax.tree_util.tree_map(_first, state)
    layout = record_layout(p.scheme, p.mech, p.guess, one, p.h, p.params)
    empty = p.empty_history(one)
    B = 1 if single else int(np.shape(node["q"])[0])
    make, chunk = _executor(p, executor, layout, one, empty, B)
    if finish is not None:
        state, info = finish()
        _check_start(p, info, None if single else 0)
    history = empty
    if resume is not None and p.guess == "extrapolated":
        history = GuessHistory.from_meta(resume.meta.get("guess_history"), p.offset, empty)
    if not single:
        history = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (B,) + a.shape), empty)
    return _Run(make(state, history), layout, empty, chunk, node, B, single)


def _initial(p: Plan, members, resume, single: bool):
    """(state, node 0) of the members before the scheme's start: one member's for a single run (the
    problem's initial state, or the last node of ``resume``), else member-first (``members``: (q0s,
    v0s), checked by :func:`member_states`); node 0 is the kept start node (t, q, p, v, m)."""
    if single:
        if resume is None:  # NumPy values: the state is every compiled program's argument, never closed over
            pr = p.problem
            state = start_state(p.mech, p.scheme, *(np.asarray(x, np.float64) for x in (pr.q0, pr.p0, pr.v0)))
        else:
            state = _resume_state(resume, p)
        q, pp, v = (np.asarray(x) for x in (state.q, state.p, state.v))
    else:
        q0s, v0s = members if members is not None else (None, None)
        q, v, pp = member_states(p, q0s, v0s)
        state = start_state(p.mech, p.scheme, jnp.asarray(q), jnp.asarray(pp), jnp.asarray(v))
    return state, {"t": p.t_start, "q": q, "p": pp, "v": v, "m": p.m_all}


def _start(p: Plan, state, single: bool):
    """The scheme's start step (SLO09 eq 15, 17) of the members, compiled: ``(shapes, finish)``,
    ``shapes`` those of the started state (its members' axis first for an ensemble), ``finish()``
    giving the started state and the start's (ok, residual, iterations) once the time loop has been
    compiled. A single run's start is one member's program, compiled natively in the background
    while the time loop compiles (:func:`livens.engine.start_program`); an ensemble's is one vmapped
    XLA program for all its members."""
    sch, mech = p.scheme, p.mech
    args = (state, np.float64(p.h), p.jparams, p.jsys)
    fn = _start_fn(p)
    native = single and engine.runs_natively(p.engine, engine.loop_size(p.unknowns, mech.d, mech.m))
    if not single:
        fn = jax.vmap(fn, in_axes=(0, None, None, None))
    key = (sch.name, mech, jnp.shape(state.q), "one" if single else "members")
    # an XLA start compiles beside the trace of the time loop that follows (livens.engine.tiers)
    shapes, finish = engine.start_program(key, fn, args, p.engine, native, beside=True)
    return shapes[0], finish


def _first(a):
    """Member 0 of a member-first array, or of its shape."""
    if isinstance(a, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(a.shape[1:], a.dtype)
    return a[0]


def _start_fn(p: Plan):
    sch, mech = p.scheme, p.mech
    return lambda state, h, params, sys: sch.start(state, h, params, mech.bind(sys))


def _check_start(p: Plan, info, member: int | None = None) -> None:
    """Raise :func:`failure.start_error` where the scheme's start step did not converge (for a
    member: the first of those whose start failed)."""
    ok, resid, its = (np.atleast_1d(np.asarray(x)) for x in info)
    bad = np.flatnonzero(~ok)
    if bad.size:
        b = int(bad[0])
        fail = Failure(Status.SCHEME_START_FAILED, 0, float(resid[b]), int(its[b]), b if member is not None else None)
        raise failure.start_error(p, fail, bad.size if member is not None else None)


def _executor(p: Plan, executor: Single | Members, layout, one, empty, B: int):
    """The executor of the run's B members as ``(make, chunk)``: its chunk loop of ``chunk`` steps
    compiled before the first step (``one``, ``empty``: one member's state, or its shapes, and
    history), and ``make(state, history)`` giving the executor of the members' states and histories
    (a single run's one member's; an ensemble's member-first). Natively, where the engine makes the
    kernel: an ensemble of at least :attr:`SizePolicy.ensemble_lane_groups
    <livens.engine.SizePolicy>` groups of LANES members in lane kernels, else the single run's kernel
    member by member (:class:`NativeMembers`; a single run is its one member); with XLA, a single
    run through its program, the next chunk dispatched ahead (:class:`Dispatched`), an ensemble in
    one vmapped call for all members (:class:`Batched`)."""
    native_chunk, xla_chunk = executor.chunks(B)
    consts = p.consts()
    args = (one, empty, np.float64(p.t_start), np.int64(0), *consts)
    single = not isinstance(executor, Members)
    kernel, fallback = None, None
    if not single and B >= engine.size_policy().ensemble_lane_groups * p.engine.lanes:
        kernel, fallback = _lane_kernel(p, layout, native_chunk, args)
    if kernel is None:
        runner = _single_loop(p, layout, native_chunk)
        one_kernel = runner.kernel(*args)
        kernel = None if one_kernel is None else MemberKernel(one_kernel)
        fallback = fallback or runner.reason
    if kernel is not None:

        def native(state, history):
            if single:  # one member's values: a members' axis of one
                state, history = jax.tree_util.tree_map(lambda a: np.asarray(a)[None], (state, history))
            return NativeMembers(kernel, state, history, p.t_start, consts, native_chunk, layout.width)

        return native, native_chunk
    if single:
        runner.prepare(*args)  # XLA's program compiled before the first step
        return (
            lambda state, history: Dispatched(runner, state, history, p.t_start, consts, native_chunk)
        ), native_chunk
    batched = _batched_loop(p, layout, xla_chunk)

    def mapped(state, history):
        ex = Batched(batched, state, history, p.t_start, consts)
        ex.reason = fallback
        return ex

    return mapped, xla_chunk


def _build(p: Plan, layout, chunk: int):
    """``build(**step_options)``: one member's chunk loop of ``chunk`` steps (:func:`make_loop`)."""
    return lambda **opts: make_loop(p.mech, p.scheme, p.guess, chunk, layout, p.newton, **opts)


def _single_loop(p: Plan, layout, chunk: int):
    """The engine's compiled chunk loop of one member (cached per system, scheme, guess, chunk,
    Newton options and engine options): a single run's, and the kernel an ensemble's members run
    one by one."""
    key = (p.mech, p.scheme, p.guess, chunk, layout, p.newton, p.engine)
    hit = _LOOPS.get(key)
    if hit is None:
        hit = _LOOPS[key] = engine.single_loop(_build(p, layout, chunk), p.unknowns, p.mech.d, p.mech.m, p.engine)
    return hit


def _lane_kernel(p: Plan, layout, chunk: int, args):
    """(the lane kernel of one member's chunk loop, LANES members per call, as a
    :class:`MemberKernel`, or None; why none was made, where native code was possible)."""
    lanes = p.engine.lanes
    key = (p.mech, p.scheme, p.guess, chunk, layout, p.newton, p.engine, lanes)
    runner = _MEMBER_KERNELS.get(key)
    if runner is None:
        runner = _MEMBER_KERNELS[key] = engine.member_loop(
            _build(p, layout, chunk), p.unknowns, p.mech.d, p.mech.m, p.engine, lanes
        )
    kernel = None if runner is None else runner.kernel(*args)
    if kernel is None:
        return None, None if runner is None else runner.reason
    return MemberKernel(lanes=kernel), None


def _batched_loop(p: Plan, layout, chunk: int):
    """One member's chunk loop ``vmap``-ped over the members, compiled by XLA (cached as
    :func:`_single_loop`)."""
    key = (p.mech, p.scheme, p.guess, chunk, layout, p.newton, p.engine)
    batched = _BATCHED.get(key)
    if batched is None:

        def build_mapped(**opts):
            loop = make_loop(p.mech, p.scheme, p.guess, chunk, layout, p.newton, batched=True, **opts)
            return jax.vmap(loop, in_axes=(0, 0, None, 0, 0, None, None, None, None, None))

        batched = _BATCHED[key] = engine.batched_loop(build_mapped, p.engine)
    return batched


_LOOPS = engine.CompiledCache(32)
_BATCHED = engine.CompiledCache(16)
_MEMBER_KERNELS = engine.CompiledCache(16)


# ------------------------------------------------------------------ shared parts


def _kept_nodes(p: Plan, members: int, offset: int, save_every: int, t_start: float, start_node: dict) -> KeptNodes:
    """The host's record of the kept nodes of ``members`` runs from ``start_node``."""
    caps = p.scheme.capabilities
    return KeptNodes(
        members,
        p.steps,
        offset,
        save_every,
        t_start,
        p.h,
        start_node,
        caps.velocity_kind == "nodal",
        caps.gamma,
        p.rank,
    )


def _open_stream(p: Plan, output: Memory, meta: dict, kept: KeptNodes, members: int | None = None):
    """The sink the kept nodes stream to while the run goes (:meth:`Memory.open`: a netCDF file for
    a :class:`Stream`, else None), its attributes the run's ``meta`` with the problem's name and
    parameters, the start node of ``kept`` in it."""
    sch, problem = p.scheme, p.problem
    attrs = {
        "scheme": sch.name,
        "params": p.params,
        "meta": {**meta, "example": problem.name, "problem_parameters": dict(problem.parameters)},
    }
    caps = sch.capabilities
    stream = output.open(attrs, p.mech.d, p.m_all, caps.gamma, caps.velocity_kind, members)
    if stream is not None:
        stream.append_rows(kept, 0, 0, start=True)
    return stream


def _fallback(meta: dict, ex) -> None:
    """``meta`` says why the host loop's executor ``ex`` did not run natively, where XLA ran it."""
    if ex.backend == "xla" and getattr(ex, "reason", None):
        meta["native_fallback"] = ex.reason


def _save(output: Memory, result, stopped: bool) -> None:
    """The finished result written to the output's file, where it has one (a stopped run's file
    keeps the rows streamed so far)."""
    path = output.file()
    if path is not None and not stopped:
        result.to_netcdf(path)


def _warn_redundant(p: Plan, q, t, member: int | None = None) -> None:
    """Warn where the redundant equations of an overconstrained problem stop holding along the kept
    nodes (:func:`livens.redundancy.violation`)."""
    if p.rank is None:
        return
    from ..redundancy import violation

    why = violation(p.problem, q, t, p.tol_num, p.system)
    if why is not None:
        who = f"member {member}: " if member is not None else ""
        warnings.warn(f"livens: {who}{why}", RuntimeWarning, stacklevel=5)


def _meta(p: Plan, save_every: int, on_failure) -> dict:
    from ..solvers.newton import ROUNDOFF
    from .setup import stopping_rule

    meta = dict(
        h=p.h,
        t_end=float(p.t_start + p.steps * p.h),
        tol=p.tol if p.newton[0] == ROUNDOFF else float(p.tol),
        final_iteration=p.newton[1],
        stopping=stopping_rule(p.newton),
        max_iter=p.max_iter,
        guess=p.guess,
        save_every=int(save_every),
        t_start=p.t_start,
        step_offset=p.offset,
        solver=on_failure.solver(),
    )
    if p.system is not None:
        meta["parameters"] = {k: np.asarray(v).tolist() for k, v in p.system.items()}
    if p.scheme.capabilities.symmetries:  # the symmetries whose momentum maps the scheme keeps by construction
        meta["kept_symmetries"] = [s.name for s in p.mech.symmetries]
    return meta


def _resume_offset(sol) -> int:
    return int(sol.meta.get("step_offset", 0)) + int(round((sol.t[-1] - sol.t[0]) / sol.h))


def _resume_state(sol, p: Plan) -> State:
    """The State at the last saved node of ``sol``."""
    sch, mech, h = p.scheme, p.mech, p.h
    if sol.scheme != sch.name:
        raise ValueError(f"Cannot resume a {sol.scheme!r} run with scheme {sch.name!r}; use the same scheme.")
    if abs(sol.h - h) > 1e-14 * max(1.0, abs(h)):
        raise ValueError(f"Cannot resume a run made with h = {sol.h:g} with h = {h:g}; use the same h.")
    if sch.start is not None:
        raise ValueError(f"Scheme {sch.name!r} carries extra state between steps and cannot be resumed from a file.")
    m = mech.m
    restrict = p.rank.restrict if p.rank is not None else (lambda x: x)  # per equation -> per kept one
    lam = restrict(sol.lam[-1]) if len(sol.lam) else np.zeros(m)
    gam = restrict(sol.gam[-1]) if (sol.gam is not None and len(sol.gam)) else np.zeros(m)
    v = sol.v[-1] if len(sol.v) else sol.problem.v0
    q, pp = jnp.asarray(sol.q[-1]), jnp.asarray(sol.p[-1])
    comp = None
    if sch.increments:
        # the carries of the compensated summation where the run stored them (bit for bit: a finished
        # run, or one stopped by Ctrl-C at a kept node),
        # else (a file whose last kept node lies before the last step) zero: the continuation then agrees
        # to round-off
        stored = sol.meta.get("compensation")
        if stored is not None:
            comp = (jnp.asarray(stored["q"], q.dtype), jnp.asarray(stored["p"], pp.dtype))
        else:
            comp = (jnp.zeros_like(q), jnp.zeros_like(pp))
    return State(q=q, p=pp, v=jnp.asarray(v), lam=jnp.asarray(lam), gam=jnp.asarray(gam), comp=comp)


__all__ = ["DEFAULT_CHUNK", "LANES", "run", "Memory", "Stream", "NaNFlag"]
