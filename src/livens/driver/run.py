"""The one driver: :func:`run` does, once for every kind of run, the checks, the scheme's
resolution, the initial states and the start, the host loop over the compiled chunk loop, the
records and the result. :func:`livens.simulate`, :func:`livens.simulate_ensemble` and
:func:`livens.flow` are presets of it (:mod:`livens.driver.options` names what differs).
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from .. import engine
from .._progress import progress_bar
from ..run_record import Failure
from ..run_status import Status
from ..schemes.base import State
from ..timestep import make_loop
from . import failure
from .combinations import checked
from .executors import Batched, MemberKernel, NativeMembers
from .executors import Single as SingleExecutor
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
from .records import KeptNodes, record_layout
from .setup import Plan, initial_state, member_states, start_state
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
            if isinstance(executor, Members):
                return _members_run(p, members, executor, output, on_failure, progress)
            return _single_run(p, executor, output, on_failure, progress, blowup_factor, resume, began)
    finally:
        NothingComputed.set(False)


# ------------------------------------------------------------------ one member
def _single_loop(p: Plan, layout, chunk: int):
    """The engine's compiled chunk loop of one member (cached per system, scheme, guess, chunk,
    Newton options and engine options)."""
    key = (p.mech, p.scheme, p.guess, chunk, layout, p.newton, p.engine)
    hit = _LOOPS.get(key)
    if hit is None:

        def build(**opts):
            return make_loop(p.mech, p.scheme, p.guess, chunk, layout, p.newton, **opts)

        hit = _LOOPS[key] = engine.single_loop(build, p.unknowns, p.mech.d, p.mech.m, p.engine)
    return hit


_LOOPS = engine.CompiledCache(32)


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


def _single_run(p: Plan, executor: Single, output, on_failure, progress, blowup_factor, resume, began: float):
    """One member's run. Its times (``meta``; ``began``: when :func:`run` was called) add up:
    ``wall_time`` = ``compile_time`` (set-up, the start step, the compiles of the time loop and
    what else runs before the first step) + ``stepping_time`` (the steps, from the first to the
    last, with their records; a compile needed during them, a rescue's or a large XLA loop's
    optimizing one, counts there)."""
    from ..solution import Solution

    sch, mech, problem = p.scheme, p.mech, p.problem
    save_every = output.save_every
    state, finish_start = _single_state(p, resume)
    layout = record_layout(sch, mech, p.guess, state, p.h, p.params)
    runner = _single_loop(p, layout, executor.chunk)
    empty = history = p.empty_history(state)
    consts = p.consts()
    # the time loop compiled before the first step (while the start compiles, for a scheme with
    # one), so that the steps are timed on their own
    runner.prepare(state, history, np.float64(p.t_start), jnp.asarray(0, jnp.int64), *consts)
    if finish_start is not None:
        state, info = finish_start()
        _check_start(p, info)
    if resume is not None and p.guess == "extrapolated":
        from ..guess import GuessHistory

        history = GuessHistory.from_meta(resume.meta.get("guess_history"), p.offset, empty)
    start_node = {
        "t": p.t_start,
        "q": np.asarray(state.q),
        "p": np.asarray(state.p),
        "v": np.asarray(state.v),
        "m": p.m_all,
    }
    meta = _meta(p, save_every, on_failure)
    meta["chunk"] = executor.chunk
    kept = _kept_nodes(p, 1, p.offset, save_every, p.t_start, start_node)
    stream = _open_stream(p, output, meta, kept)
    ex = SingleExecutor(runner, state, history, p.t_start, consts, executor.chunk)
    energy0 = None
    if blowup_factor is not None:
        fn = failure.blowup_energy(mech)
        energy0 = None if fn is None else np.asarray(fn(jnp.asarray(problem.q0)[None], jnp.asarray(problem.p0)[None]))
        blowup_factor = None if energy0 is None else blowup_factor
    bar = progress_bar(p.steps, progress)
    wall0 = time.perf_counter()
    recorder = Recorder(kept, stream)
    out = _host_loop(p, ex, layout, recorder, bar, empty, on_failure, blowup_factor=blowup_factor, energy0=energy0)
    n_done = int(out.n[0])
    state, history = ex.state, ex.history
    ended = time.perf_counter()
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
    sol = Solution.from_record(recorder.run_record(out), 0, problem, sch, p.params, meta)
    _warn_redundant(p, sol.q, sol.t)
    path = output.file()
    _save(output, sol, stopped)
    fail = out.failure(0)
    if fail is not None:
        failure.raise_failure(p, fail, n_done, sol, path, on_failure.rescue, blowup_factor, save_every, state=state)
    return sol


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


def _single_state(p: Plan, resume):
    """The single run's initial State (at the last node of ``resume``, a Solution, where given) and,
    for a scheme with a start step, the function that finishes it: the State's shapes come first and
    its values once the start program has run (the time loop is compiled meanwhile)."""
    sch, mech = p.scheme, p.mech
    state = initial_state(p.problem, mech, sch) if resume is None else _resume_state(resume, p)
    if sch.start is None or resume is not None:
        return state, None
    args = (state, np.float64(p.h), p.jparams, p.jsys)
    native = engine.runs_natively(p.engine, engine.loop_size(p.unknowns, mech.d, mech.m))
    shapes, finish_start = engine.start_program(
        (sch.name, mech, jnp.shape(state.q)), _start_fn(p), args, p.engine, native
    )
    return shapes[0], finish_start


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
        warnings.warn(f"livens: {who}{why}", RuntimeWarning, stacklevel=4)


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


# ------------------------------------------------------------------ members
_BATCHED = engine.CompiledCache(16)
_MEMBER_KERNELS = engine.CompiledCache(16)
_STARTS = engine.CompiledCache(16)


def _member_start(p: Plan, state):
    """Every member's start, one ``vmap``-ped program (cached per scheme and system)."""
    key = (p.scheme.name, p.mech, p.engine)
    fn = _STARTS.get(key)
    if fn is None:
        fn = _STARTS[key] = engine.program(jax.vmap(_start_fn(p), in_axes=(0, None, None, None)), p.engine, once=True)
    state, info = fn(state, np.float64(p.h), p.jparams, p.jsys)
    _check_start(p, info, member=0)
    return state


def _members_executor(p: Plan, executor: Members, layout, state, history, B: int):
    """The executor of B members: native lane kernels (at least 2 LANES members) or the single run's
    native kernel per member where the engine makes them, else one vmapped XLA call per chunk."""
    native_chunk, xla_chunk = executor.chunks(B)
    consts = p.consts()

    def build_one(chunk):
        return lambda **opts: make_loop(p.mech, p.scheme, p.guess, chunk, layout, p.newton, **opts)

    one = jax.tree_util.tree_map(lambda a: a[0], (state, history))
    args = (*one, np.float64(0.0), np.int64(0), *consts)
    fallback = None
    lanes_of = p.engine.lanes
    for lanes in (lanes_of, 0) if B >= 2 * lanes_of else (0,):
        key = (p.mech, p.scheme, p.guess, native_chunk, layout, p.newton, p.engine, lanes)
        runner = _MEMBER_KERNELS.get(key)
        if runner is None:
            runner = _MEMBER_KERNELS[key] = engine.member_loop(
                build_one(native_chunk), p.unknowns, p.mech.d, p.mech.m, p.engine, lanes
            )
        if runner is None:
            break
        kernel = runner.kernel(*args)
        if kernel is not None:
            kernel = MemberKernel(lanes=kernel) if lanes else MemberKernel(kernel)
            return NativeMembers(kernel, state, history, 0.0, consts, native_chunk, layout.width), native_chunk
        fallback = fallback or runner.reason
    key = (p.mech, p.scheme, p.guess, xla_chunk, layout, p.newton, p.engine)
    batched = _BATCHED.get(key)
    if batched is None:

        def build_mapped(**opts):
            loop = make_loop(p.mech, p.scheme, p.guess, xla_chunk, layout, p.newton, batched=True, **opts)
            return jax.vmap(loop, in_axes=(0, 0, None, 0, 0, None, None, None, None, None))

        batched = _BATCHED[key] = engine.batched_loop(build_mapped, p.engine)
    ex = Batched(batched, state, history, 0.0, consts)
    ex.reason = fallback
    return ex, xla_chunk


def _members_run(p: Plan, members, executor: Members, output, on_failure, progress):
    from ..ensemble_solution import EnsembleSolution

    sch, mech, problem = p.scheme, p.mech, p.problem
    q0s, v0s = members if members is not None else (None, None)
    q0, v0, p0 = member_states(p, q0s, v0s)
    B = q0.shape[0]
    state = start_state(mech, sch, jnp.asarray(q0), jnp.asarray(p0), jnp.asarray(v0))
    wall0 = time.perf_counter()
    if sch.start is not None:
        state = _member_start(p, state)
    one = jax.tree_util.tree_map(lambda a: a[0], state)
    layout = record_layout(sch, mech, p.guess, one, p.h, p.params)
    empty = p.empty_history(one)
    history = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (B,) + a.shape), empty)
    ex, chunk = _members_executor(p, executor, layout, state, history, B)
    start_node = {"t": 0.0, "q": q0, "p": p0, "v": v0, "m": p.m_all}
    kept = _kept_nodes(p, B, 0, output.save_every, 0.0, start_node)
    meta = _meta(p, output.save_every, on_failure)
    meta.update(members=B, v0s=v0, chunk=chunk, example=problem.name, problem_parameters=dict(problem.parameters))
    stream = _open_stream(p, output, meta, kept, members=B)
    bar = progress_bar(B * p.steps, progress, unit="member-step")
    recorder = Recorder(kept, stream)
    out = _host_loop(p, ex, layout, recorder, bar, empty, on_failure)
    record = recorder.run_record(out)
    meta.update(
        wall_time=time.perf_counter() - wall0,
        compile_time=out.compile_time,
        steps=int(p.steps),
        backend=ex.backend,
        lanes=getattr(ex, "lanes", 0),
        rescued_steps={int(b): v for b, v in out.rescued.items()},
    )
    _fallback(meta, ex)
    ens = EnsembleSolution.from_record(record, sch, p.params, meta, problem, mech)
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


__all__ = ["DEFAULT_CHUNK", "LANES", "run", "Memory", "Stream", "NaNFlag"]
