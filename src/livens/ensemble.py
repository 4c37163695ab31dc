"""Ensembles: many initial states of one problem in one compiled call.

:func:`simulate_ensemble` integrates B initial states (q0_b, v0_b) of the same system with the
same scheme, h and t_end. The compiled chunk of time steps of :func:`livens.simulate` is mapped
over the members with ``jax.vmap``, so the whole ensemble advances in one call per chunk: the
fixed cost of launching each operation (which dominates a single small system on a CPU) is paid
once for all members. Every member takes exactly the Newton iterates of its single run (the
Newton loop of a member stops changing it once it has converged; the ensemble's loop runs until
the slowest member has converged), so each member equals ``lv.simulate`` of its initial state
to round-off.

Where the single run's chunk loop runs natively (:mod:`livens.native`; the default backend
"auto" and a C compiler found), the members instead run that loop compiled as a lane kernel
(:mod:`livens.native.lanes`, with GCC, for at least ``2 * LANES`` members): :data:`LANES` members at
once, one per lane of a vector, each with the bits of its own native run; where that kernel cannot
be made, each member runs the single run's kernel from its first step to its last. Either way the
kernels run on one thread per CPU core (a kernel releases the GIL), and a member takes exactly the
steps of its single run. ``backend="xla"`` asks for the vmapped call.

The result is an :class:`EnsembleSolution`: batched arrays (member first) and ``ens[i]``, the
member's :class:`~livens.Solution`, as ``lv.simulate`` would have returned it.
"""
from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _jaxconfig
from . import _linalg
from .checks import check_step, constraint_label
from .engine import serial_blas
from .schemes.base import State
from ._fusion import fold_constants
from .core import NEWTON_DEFAULT, make_loop
from .newton import ROUNDOFF
from .simulate import DEFAULT_CHUNK, check_guess, new_history, newton_options, resolve
from ._cache import CompiledCache
from .system import Problem, parameter_values

_CHECKS = CompiledCache(32)


_RUNNERS = CompiledCache(16)


def _ensemble_runner(mech, scheme, mode: str, chunk: int, newton_opts: tuple = NEWTON_DEFAULT):
    """The compiled chunk of ``chunk`` time steps for B members at once (cached per system,
    scheme, guess, chunk, Newton options): the step loop of :mod:`livens.core` (the one
    :func:`livens.simulate` runs) mapped over the members with ``jax.vmap``,

        (state, history, t_start, n0, n_stop, h, tol, max_iter, params, sys_params)
            -> (state, history, n, failed, records),

    member-first (``n0``, ``n_stop`` per member; ``history``: each member's solutions of its last
    steps, for the "extrapolated" guess). A member that has stopped (at n_stop, or on a failed
    step) keeps its state and takes no Newton iteration, so the others run exactly as they would
    alone. Small products are not rewritten (:mod:`livens._fusion`): batched, XLA's matrix
    products are the faster ones; index arithmetic on constants is folded
    (:func:`livens._fusion.fold_constants`); and linear systems are factorized whole
    (:func:`livens._linalg.whole_systems`).
    """
    key = (mech, scheme, mode, chunk, newton_opts)
    hit = _RUNNERS.get(key)
    if hit is not None:
        return hit
    loop = make_loop(mech, scheme, mode, chunk, None, newton_opts, fold_constants, batched=True)
    mapped = jax.vmap(loop, in_axes=(0, 0, None, 0, 0, None, None, None, None, None))

    def traced(*args):  # runs while jax.jit traces: no block elimination in batched solves
        with _linalg.whole_systems():
            return mapped(*args)

    runner = _jaxconfig.jit(traced)
    _RUNNERS[key] = runner
    return runner


_MEMBER_RUNNERS = CompiledCache(16)


def _member_runner(mech, scheme, mode: str, chunk: int, newton_opts: tuple, backend: str):
    """The single run's chunk loop for one member, as a :class:`livens.native.runner.ChunkRunner`
    (records as a dict of arrays), or None with backend "xla"."""
    if backend == "xla":
        return None
    key = (mech, scheme, mode, chunk, newton_opts, backend)
    hit = _MEMBER_RUNNERS.get(key)
    if hit is None:
        from .native.runner import ChunkRunner, system_size

        loop = make_loop(mech, scheme, mode, chunk, None, newton_opts)
        hit = ChunkRunner(loop, _jaxconfig.jit(loop), backend, system_size(scheme, mech))
        _MEMBER_RUNNERS[key] = hit
    return hit


LANES = 8
"""Members per lane kernel (:mod:`livens.native.lanes`): eight doubles are one AVX-512 vector."""


def _lane_runner(mech, scheme, mode: str, chunk: int, newton_opts: tuple, backend: str):
    """The single run's chunk loop for a native kernel of :data:`LANES` members at once, as a
    :class:`livens.native.runner.ChunkRunner`; None with backend "xla". Its step is a ``cond``
    on "still running", which the lane kernel skips once every lane has stopped."""
    if backend == "xla":
        return None
    key = (mech, scheme, mode, chunk, newton_opts, backend, "lanes")
    hit = _MEMBER_RUNNERS.get(key)
    if hit is None:
        from .native.runner import ChunkRunner, system_size

        loop = make_loop(mech, scheme, mode, chunk, None, newton_opts)
        # "auto": where no lane kernel can be made, the members run one by one (never an error)
        hit = ChunkRunner(loop, _jaxconfig.jit(loop), "auto", system_size(scheme, mech), lanes=LANES)
        _MEMBER_RUNNERS[key] = hit
    return hit


def _store(out: dict, bs, a: int, e: int, recs: dict, nodal: bool) -> None:
    """Copy the records of steps a..e of members ``bs`` (``recs``, member first) into the
    ensemble's arrays ``out``."""
    k = e - a
    out["q"][bs, a + 1:e + 1] = recs["q"][:, :k]
    out["p"][bs, a + 1:e + 1] = recs["p"][:, :k]
    if nodal:
        out["v"][bs, a + 1:e + 1] = recs["v"][:, :k]
    else:
        out["v"][bs, a:e] = recs["v"][:, :k]
    out["lam"][bs, a:e] = recs["lam"][:, :k]
    if out["gam"] is not None:
        out["gam"][bs, a:e] = recs["gam"][:, :k]
    out["iterations"][bs, a:e] = recs["iterations"][:, :k]
    out["residual"][bs, a:e] = recs["residual"][:, :k]


def _fill_after_last_step(out: dict, n, failed, n_steps: int, nodal: bool) -> None:
    """NaN after each member's last converged step ``n[b]`` (zero Newton iterations), where no
    record was written: the failed step keeps its iterations and residual (:func:`_store_failure`)."""
    for b in np.flatnonzero(n < n_steps):
        k = int(n[b])
        out["q"][b, k + 1:] = np.nan
        out["p"][b, k + 1:] = np.nan
        out["v"][b, k + 1 if nodal else k:] = np.nan
        out["lam"][b, k:] = np.nan
        if out["gam"] is not None:
            out["gam"][b, k:] = np.nan
        f = k + 1 if failed[b] else k
        out["iterations"][b, f:] = 0
        out["residual"][b, f:] = np.nan


def _store_failure(out: dict, b: int, i: int, recs: dict) -> None:
    """The failed step i of member b: its Newton iterations and residual (``recs`` of one member)."""
    j = int(np.flatnonzero(~np.asarray(recs["ok"]))[0])
    if i < out["iterations"].shape[1]:
        out["iterations"][b, i] = recs["iterations"][j]
        out["residual"][b, i] = recs["residual"][j]


def _run_members(kernel, state, history, args, n, failed, n_steps: int, out: dict, nodal: bool) -> None:
    """Every member from its step ``n[b]`` to the end (or its failed step) with the native
    ``kernel`` of a single run, chunk after chunk, the records written straight into ``out``; the
    members are spread over one thread per CPU core (the kernel releases the GIL). Updates ``n``
    and ``failed`` in place."""
    from concurrent.futures import ThreadPoolExecutor

    state, history = jax.tree_util.tree_map(np.asarray, (state, history))
    t_start, h, tol, max_iter, params, sys_params = args

    def member(b):
        sb, hb = jax.tree_util.tree_map(lambda a: a[b], (state, history))
        nb = int(n[b])
        while nb < n_steps:
            sb, hb, n_new, failed_now, recs = kernel(sb, hb, t_start, nb, n_steps, h, tol, max_iter, params,
                                                     sys_params)
            n_new = int(n_new)
            if n_new > nb:
                _store(out, [b], nb, n_new, {k: v[None] for k, v in recs.items()}, nodal)
            nb = n_new
            if failed_now:
                failed[b] = True
                _store_failure(out, b, nb, recs)
                break
        n[b] = nb

    B = n.shape[0]
    workers = max(1, min(os.cpu_count() or 1, B))
    if workers == 1:
        for b in range(B):
            member(b)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="livens-member") as pool:
            list(pool.map(member, range(B)))


def _run_lanes(kernel, state, history, args, n, failed, n_steps: int, out: dict, nodal: bool) -> None:
    """Every member from its step ``n[b]`` to the end (or its failed step) with a lane kernel:
    the members in groups of ``kernel.lanes`` (the last group filled up with copies of its last
    member, which take no step), each group chunk after chunk until all its members have
    stopped, the groups spread over one thread per CPU core. Updates ``n`` and ``failed``."""
    from concurrent.futures import ThreadPoolExecutor

    L = kernel.lanes
    local = threading.local()  # each thread's kernel buffers, reused group after group
    state, history = jax.tree_util.tree_map(np.asarray, (state, history))
    t_start, h, tol, max_iter, params, sys_params = jax.tree_util.tree_map(
        lambda x: np.broadcast_to(np.asarray(x), (L,) + np.shape(x)), args)
    B = n.shape[0]

    def group(first):
        bs = np.arange(first, min(first + L, B))
        lanes = np.concatenate([bs, np.full(L - bs.size, bs[-1])])
        real = np.arange(L) < bs.size
        sb, hb = jax.tree_util.tree_map(lambda a: a[lanes], (state, history))
        nb = n[lanes].astype(np.int64)
        done = ~real | failed[lanes]
        if not hasattr(local, "buffers"):
            local.buffers = {}
        while True:
            alive = ~done & (nb < n_steps)
            if not alive.any():
                break
            n_stop = np.where(alive, n_steps, nb)
            # the outputs are views of this thread's buffers: copied out (or passed back in) before the next call
            sb, hb, n_new, failed_now, recs = kernel(sb, hb, t_start, nb, n_stop, h, tol, max_iter, params,
                                                     sys_params, buffers=local.buffers)
            n_new = np.array(n_new, dtype=np.int64)
            failed_now = np.array(failed_now)
            moved = alive & (n_new > nb)
            # lanes that advanced over the same steps are copied together (all of them, usually)
            for a, e in sorted({(int(x), int(y)) for x, y in zip(nb[moved], n_new[moved])}):
                sel = np.flatnonzero(moved & (nb == a) & (n_new == e))
                rows = slice(sel[0], sel[-1] + 1) if sel[-1] - sel[0] + 1 == sel.size else sel
                _store(out, lanes[sel], a, e, {k: v[rows] for k, v in recs.items()}, nodal)
            for lane in np.flatnonzero(alive & np.asarray(failed_now)):
                b = int(lanes[lane])
                failed[b] = done[lane] = True
                _store_failure(out, b, int(n_new[lane]), {k: v[lane] for k, v in recs.items()})
            nb = n_new
        n[bs] = nb[:bs.size]

    starts = list(range(0, B, L))
    workers = max(1, min(os.cpu_count() or 1, len(starts)))
    if workers == 1:
        for first in starts:
            group(first)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="livens-lanes") as pool:
            list(pool.map(group, starts))


@contextlib.contextmanager
def _no_collection():
    """Python's cyclic garbage collector paused (and restored as it was): the native members' loops
    make no reference cycles, and a full collection of the large heap JAX leaves (tenths of a
    second) would stop every thread at its next Python line."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run_vmapped(runner, state, history, scalars, n, failed, n_steps: int, out: dict, nodal: bool) -> float:
    """Every member to the end (or its failed step) with ``runner``, the vmapped chunk loop: one
    call per chunk for all members. Updates ``n`` and ``failed`` in place; returns the first
    call's wall time (its compilation included)."""
    t_start, h, tol, max_iter, params, sys_params = scalars
    compile_time = None
    while True:
        alive = ~failed & (n < n_steps)
        if not alive.any():
            break
        n_before = n.copy()
        t0 = time.perf_counter()
        # a failed member gets n_stop = n: it takes no further step
        n_stop = np.where(failed, n, n_steps)
        state, history, n_new, failed_now, recs = runner(state, history, t_start, jnp.asarray(n), jnp.asarray(n_stop),
                                                         h, tol, max_iter, params, sys_params)
        recs = jax.device_get(recs)
        if compile_time is None:
            compile_time = time.perf_counter() - t0
        n_new = np.asarray(n_new)
        failed_now = np.asarray(failed_now)
        failed |= failed_now
        moved = n_new > n_before
        # members that advanced over the same steps are copied together (all alive ones, usually)
        for a, e in sorted({(int(x), int(y)) for x, y in zip(n_before[moved], n_new[moved])}):
            bs = np.flatnonzero(moved & (n_before == a) & (n_new == e))
            _store(out, bs, a, e, {k: v[bs] for k, v in recs.items()}, nodal)
        for b in np.flatnonzero(failed_now):  # the failed step's iterations and residual
            _store_failure(out, b, int(n_new[b]), {k: v[b] for k, v in recs.items()})
        n[:] = n_new
    return compile_time or 0.0


def _consistency_functions(mech):
    """Compiled, member-mapped g(q) and G(q) v (cached per system)."""
    hit = _CHECKS.get(mech)
    if hit is None:
        hit = (jax.jit(jax.vmap(mech.g)), jax.jit(jax.vmap(lambda q, v: mech.G(q) @ v)))
        _CHECKS[mech] = hit
    return hit


def _initial_states(problem: Problem, mech, q0s, v0s):
    """(B, d) arrays q0, v0, p0, checked: shapes, finite values, on the constraint manifold."""
    d = mech.d
    if q0s is None and v0s is None:
        raise ValueError("Give the initial states: q0s and/or v0s of shape (B, d) (the other one defaults to the problem's).")

    def as_batch(name, x, ref):
        a = np.asarray(ref if x is None else x, dtype=float)
        if x is None:
            a = a[None, :]
        if a.ndim != 2 or a.shape[1] != d:
            raise ValueError(f"{name} must have shape (B, d) with d = {d}; got shape {a.shape}.")
        bad = np.flatnonzero(~np.all(np.isfinite(a), axis=1))
        if bad.size:
            raise ValueError(f"{name} has non-finite entries in member(s) {bad[:10].tolist()}.")
        return a

    q0 = as_batch("q0s", q0s, problem.q0)
    v0 = as_batch("v0s", v0s, problem.v0)
    B = max(q0.shape[0], v0.shape[0])
    if q0.shape[0] not in (1, B) or v0.shape[0] not in (1, B):
        raise ValueError(f"q0s and v0s must hold the same number of members; got {q0.shape[0]} and {v0.shape[0]}.")
    q0 = np.broadcast_to(q0, (B, d)).copy()
    v0 = np.broadcast_to(v0, (B, d)).copy()
    tol = problem.consistency_tol
    if mech.m:
        g_fn, gv_fn = _consistency_functions(mech)
        g, gv = np.asarray(g_fn(q0)), np.asarray(gv_fn(q0, v0))
        for what, r in (("position level |g(q0)|", g), ("velocity level |G(q0) v0|", gv)):
            worst = np.max(np.abs(r), axis=1)
            bad = np.flatnonzero(~(worst <= tol))
            if bad.size:
                b = int(bad[0])
                k = int(np.argmax(np.abs(r[b])))
                raise ValueError(
                    f"Member {b} of the ensemble starts off the constraint manifold ({len(bad)} member(s) in all): "
                    f"{what}: {constraint_label(problem.system, k)} = {r[b, k]:.3e} > {tol:g}. Project each state "
                    "with lv.consistent_initial_state(system, q0, v0)."
                )
    if mech.constant_mass:
        p0 = v0 @ np.asarray(mech.M_const).T
    else:
        p0 = np.asarray(jax.jit(jax.vmap(lambda q, v: mech.M(q) @ v))(q0, v0))
    return q0, v0, p0


@dataclass(eq=False)
class EnsembleSolution:
    """The result of :func:`simulate_ensemble`: member-first arrays on a common time grid.

    t (N+1,); q, p (B, N+1, d); v (B, N+1, d) for nodal velocities, else (B, N, d); lam, gam
    (B, N, m) (gam None for schemes without it); newton_iterations, newton_residual (B, N).
    A member whose Newton iteration failed keeps its converged steps (``steps[b]`` of them) and
    NaN after them; ``failed[b]`` says so. ``ens[b]`` is member b as a :class:`~livens.Solution`.
    """

    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray | None
    newton_iterations: np.ndarray
    newton_residual: np.ndarray
    steps: np.ndarray
    failed: np.ndarray
    velocity_kind: str
    scheme: str
    params: dict
    meta: dict
    problem: Any = None
    _scheme_obj: Any = field(default=None, repr=False)
    _mech: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.q.shape[0])

    @property
    def h(self) -> float:
        return float(self.meta["h"])

    def __getitem__(self, b: int):
        """Member b as the :class:`~livens.Solution` of its single run (its converged steps)."""
        from .solution import Solution

        B = len(self)
        if not isinstance(b, (int, np.integer)) or not -B <= b < B:
            raise IndexError(f"member index {b!r} out of range for an ensemble of {B}")
        b = int(b) % B
        n = int(self.steps[b])
        problem = self.problem.replace(q0=self.q[b, 0], v0=self.meta["v0s"][b])
        rec = {"q": self.q[b, 1:n + 1], "p": self.p[b, 1:n + 1], "lam": self.lam[b, :n],
               "iterations": self.newton_iterations[b, :n], "residual": self.newton_residual[b, :n],
               "t": self.t[1:n + 1], "index": np.arange(n)}
        rec["v"] = self.v[b, 1:n + 1] if self.velocity_kind == "nodal" else self.v[b, :n]
        if self.gam is not None:
            rec["gam"] = self.gam[b, :n]
        meta = {k: v for k, v in self.meta.items() if k not in ("v0s", "members")}
        meta.update(steps=n, ensemble_member=b, t_end=float(self.t[n]))
        start = {"t": float(self.t[0]), "q": self.q[b, 0], "p": self.p[b, 0], "v": self.meta["v0s"][b]}
        return Solution.from_records(problem, self._scheme_obj, self.params, self._mech, [rec], meta, start)

    def solutions(self) -> list:
        """Every member as a :class:`~livens.Solution`."""
        return [self[b] for b in range(len(self))]


@serial_blas()  # XLA's LAPACK calls on one BLAS thread while the members run (livens.engine.threads)
def simulate_ensemble(
    problem: Problem,
    scheme: str = "VI-S",
    q0s=None,
    v0s=None,
    h: float | None = None,
    t_end: float | None = None,
    tol: float | str = 1e-9,
    max_iter: int = 40,
    guess: str | None = None,
    chunk: int | None = None,
    parameters: dict | None = None,
    backend: str | None = None,
    **params: Any,
) -> EnsembleSolution:
    """Integrate many initial states of ``problem``: natively in lane kernels of :data:`LANES`
    members (or one member per kernel call) on one thread per core, else one compiled,
    ``jax.vmap``-ped call per chunk.

    Parameters
    ----------
    problem: the system, its defaults (h, t_end) and symmetries; its own q0, v0 fill in whichever
        of ``q0s``/``v0s`` is not given.
    q0s, v0s: initial configurations and velocities, shape (B, d) (or (d,) broadcast to all
        members); each must lie on the constraint manifold (|g(q0)|, |G(q0) v0| at most
        ``problem.consistency_tol``).
    scheme, h, t_end, tol, max_iter, guess, parameters, backend, **params: as for
        :func:`livens.simulate`. With the native backend and at least ``2 * LANES`` members, the
        members run :data:`LANES` at a time in a lane kernel (``ens.meta["lanes"]``; 0 where each
        member runs the single run's kernel), the kernels spread over one thread per CPU core;
        with XLA, one ``vmap``-ped call per chunk for all members. ``ens.meta["backend"]`` says
        which ran.
    chunk: steps per compiled call. Natively, one member's steps per call (default 512); with
        XLA, all members' steps per call: by default about 65536 member-steps (512 for up to 128
        members, 64 for 1000), so that the records of one call stay small (they are allocated
        for the whole chunk: 1000 members x 512 steps of a heavy top are 230 MB).

    Returns an :class:`EnsembleSolution`; ``ens[b]`` equals ``lv.simulate`` of member b (to
    round-off). A member whose Newton iteration fails stops there (``ens.failed``); the others go
    on, and a warning names the failed members.
    """
    h = problem.h if h is None else h
    t_end = problem.t_end if t_end is None else t_end
    if h is None or t_end is None:
        raise ValueError("Give h and t_end: the problem has no default step size or end time.")
    check_step(h, t_end, tol, max_iter)
    check_guess(guess)
    from .native.runner import resolve_backend

    backend = resolve_backend(backend)
    if chunk is not None and not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk must be a positive integer; got {chunk!r}.")
    sys_values = parameter_values(problem.system, parameters)
    sch, vals, mech = resolve(problem, scheme, params, sys_values)
    jsys = None if sys_values is None else {k: jnp.asarray(v) for k, v in sys_values.items()}
    guess = sch.preferred_guess if guess is None else guess
    q0, v0, p0 = _initial_states(problem, mech, None if q0s is None else np.atleast_2d(q0s),
                                 None if v0s is None else np.atleast_2d(v0s))
    B, d, m = q0.shape[0], mech.d, mech.m
    chunk_given = chunk is not None
    if chunk is None:  # a power of two, so that ensembles of similar size share the compiled call
        chunk = int(min(DEFAULT_CHUNK, max(8, 2 ** int(np.log2(max(1, 65536 // B))))))
    n_steps = max(1, int(round(t_end / h)))
    z = jnp.zeros((B, m))
    state = State(q=jnp.asarray(q0), p=jnp.asarray(p0), v=jnp.asarray(v0), lam=z, gam=z)
    if sch.increments:  # the carries of the compensated summation, zero at the start
        state = state._replace(comp=(jnp.zeros_like(state.q), jnp.zeros_like(state.p)))
    if sch.start is not None:
        starts = [sch.start(State(q=state.q[b], p=state.p[b], v=state.v[b], lam=z[b], gam=z[b]), float(h), vals,
                            mech.bind(jsys))
                  for b in range(B)]
        state = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *starts)
    nopts = newton_options(tol)
    tol_num = 0.0 if nopts[0] == ROUNDOFF else float(tol)
    jparams = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
    empty = new_history(sch, mech, jax.tree_util.tree_map(lambda a: a[0], state), h, jparams)
    history = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (B,) + a.shape), empty)

    nodal = sch.velocity_kind == "nodal"
    # allocated empty: each member's records are first written by the thread that runs it, and what
    # no step wrote is filled at the end (_fill_after_last_step)
    out = {"q": np.empty((B, n_steps + 1, d)), "p": np.empty((B, n_steps + 1, d)),
           "v": np.empty((B, n_steps + 1 if nodal else n_steps, d)), "lam": np.empty((B, n_steps, m)),
           "gam": np.empty((B, n_steps, m)) if sch.has_gamma else None,
           "iterations": np.empty((B, n_steps), np.int32), "residual": np.empty((B, n_steps))}
    out["q"][:, 0], out["p"][:, 0] = q0, p0
    if nodal:
        out["v"][:, 0] = v0
    n = np.zeros(B, np.int64)  # converged steps per member
    failed = np.zeros(B, bool)
    scalars = (jnp.asarray(0.0, dtype=jnp.float64), jnp.asarray(h, dtype=jnp.float64),
               jnp.asarray(tol_num, dtype=jnp.float64), jnp.asarray(max_iter, dtype=jnp.int32), jparams, jsys)
    wall0 = time.perf_counter()
    # the members through the single run's native kernel where there is one (one member's records
    # per call, so its chunk need not shrink with B), else one vmapped XLA call per chunk
    native_chunk = chunk if chunk_given else DEFAULT_CHUNK
    member_runner = _member_runner(mech, sch, guess, native_chunk, nopts, backend)
    lane_runner = _lane_runner(mech, sch, guess, native_chunk, nopts, backend) if B >= 2 * LANES else None
    kernel = lanes = None
    one = jax.tree_util.tree_map(lambda a: a[0], (state, history))
    if lane_runner is not None:
        lanes = lane_runner.kernel(*one, scalars[0], 0, n_steps, *scalars[1:])
    if lanes is None and member_runner is not None:
        kernel = member_runner.kernel(*one, scalars[0], 0, n_steps, *scalars[1:])
    if lanes is not None:
        compile_time = time.perf_counter() - wall0
        with _no_collection():
            _run_lanes(lanes, state, history, scalars, n, failed, n_steps, out, nodal)
    elif kernel is not None:
        compile_time = time.perf_counter() - wall0
        with _no_collection():
            _run_members(kernel, state, history, scalars, n, failed, n_steps, out, nodal)
    else:
        compile_time = _run_vmapped(_ensemble_runner(mech, sch, guess, chunk, nopts), state, history, scalars, n,
                                    failed, n_steps, out, nodal)
    _fill_after_last_step(out, n, failed, n_steps, nodal)
    wall = time.perf_counter() - wall0
    if failed.any():
        bad = np.flatnonzero(failed)
        warnings.warn(
            f"Newton did not converge for {bad.size} of {B} ensemble members (first: member {bad[0]} in step "
            f"{int(n[bad[0]])}); they keep their converged steps (ens.steps, ens.failed). Try a smaller h, "
            "a larger max_iter, or guess='advanced'.", RuntimeWarning, stacklevel=2,
        )
    meta = dict(h=float(h), t_end=float(n_steps * h), tol=tol if nopts[0] == ROUNDOFF else float(tol),
                max_iter=int(max_iter), guess=guess, solver="newton",
                save_every=1, t_start=0.0, step_offset=0, wall_time=wall, compile_time=compile_time or 0.0,
                members=B, steps=int(n_steps), v0s=v0,
                backend="native" if kernel is not None or lanes is not None else "xla",
                lanes=lanes.lanes if lanes is not None else 0)
    if kernel is None and lanes is None and member_runner is not None and member_runner.reason:
        meta["native_fallback"] = member_runner.reason
    if sys_values is not None:
        meta["parameters"] = {k: v.tolist() for k, v in sys_values.items()}
    return EnsembleSolution(
        t=np.arange(n_steps + 1) * float(h), q=out["q"], p=out["p"], v=out["v"], lam=out["lam"], gam=out["gam"],
        newton_iterations=out["iterations"],
        newton_residual=out["residual"], steps=n.astype(np.int64), failed=failed, velocity_kind=sch.velocity_kind,
        scheme=sch.name, params=dict(vals), meta=meta, problem=problem, _scheme_obj=sch, _mech=mech,
    )


__all__ = ["simulate_ensemble", "EnsembleSolution"]
