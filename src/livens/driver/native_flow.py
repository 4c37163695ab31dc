"""The native kernels of :func:`livens.flow`: its forward run and its derivatives, called from the
program through host callbacks.

- :class:`NativeForward`: the records of a run from the engine's native kernel of the chunk loop
  (the one :func:`livens.simulate` runs), with each step's converged unknowns ("x") and the state
  at the start of every chunk of :data:`CHUNK` steps. It is a run like any other: the host loop of
  every run (:func:`livens.driver.host.run_host_loop`) drives the kernel through the members'
  executor of :func:`livens.simulate_ensemble` (:class:`~livens.driver.executors.NativeMembers`),
  the run its one member, so that a failed step, Ctrl-C and a kernel's stop flag are handled as
  in :func:`livens.simulate`.
- :class:`NativeDerivatives`: the run's derivative from those records, chunk by chunk: the replay
  of a chunk's steps from their solutions (:func:`livens.timestep.make_replay`) and its
  Jacobian-vector product (forward mode, the first chunk first) or vector-Jacobian product
  (reverse mode, the last chunk first, each step transposed from its state:
  :func:`_transposed_by_steps`), each translated to one native kernel. They agree with
  XLA's derivatives of the same replay to round-off (tests/test_flow_native_derivatives.py).
  Both directions are one chunk iterator (:meth:`NativeDerivatives._replay_pass`), not the host
  loop: a replay is no run. It solves no equation, so no step can fail and there is nothing for
  a failure policy, a rescue or a blow-up check to do; it keeps no nodes, streams nothing and shows
  no progress; and the reverse pass goes from the last chunk to the first, carrying a cotangent,
  where the host loop advances members forward to their stop. Ctrl-C between its chunks is
  Python's KeyboardInterrupt.

Under ``jax.vmap`` every host callback is given the whole batch at once (``vmap_method=
"broadcast_all"``): the members' forward runs go through one host loop (the same executor, B
members), and each replayed chunk runs for all members that reached it, the members together in
lane kernels of the same functions (:class:`~livens.driver.executors.MemberKernel`,
:mod:`livens.engine.native.member_lanes`: each lane computes the single kernel's operations, so
every member's values and derivatives are those of its own run, to the bit), on the one pool of
threads that runs the members of ensembles too (:func:`~livens.driver.executors.spread`). A member
that fails stops alone.

JAX transposes a linear map that it cannot see into (a host callback) only through a primitive
with a transpose rule of its own: the tangent map T: (d state_0, d parameters) -> d records is
handed to JAX as ``lax.custom_linear_solve`` with the identity as its matrix, whose ``solve`` is
T (the tangent kernel, or the XLA replay's ``jvp`` where the translator refuses it) and whose
``transpose_solve`` is T^T (the adjoint kernel). JAX differentiates such a solve once; a second
derivative through it is refused (:func:`first_order`) with the fix, ``backend="xla"``.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore
from jax.extend.core import primitives as _prims

from .. import engine
from ..timestep import make_loop, make_replay, replay_step
from . import host
from .executors import MemberKernel, NativeMembers, for_members, member_rows, set_member_rows, spread
from .options import DEFAULT_CHUNK
from .records import record_layout

# jax.extend.core exports new_jaxpr_eqn in the JAX versions livens is developed with; JAX 0.7 only in jax.core
_new_jaxpr_eqn = getattr(jcore, "new_jaxpr_eqn", None) or jax.core.new_jaxpr_eqn

CHUNK = DEFAULT_CHUNK
"""Steps per call of the native kernels of a run of :func:`livens.flow` (forward, and the replays
of both derivatives, which start where the forward run's chunks start): the driver's default chunk
(:attr:`livens.engine.SizePolicy.chunk`)."""


def _spec(tree):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), tree)


def _zeros(spec):
    return jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), spec)


def _runs_natively(run) -> bool:
    plan, mech = run.flow.plan, run.mech
    return engine.runs_natively(plan.engine, engine.loop_size(plan.unknowns, mech.d, mech.m))


_RUNNERS = engine.CompiledCache(32)
"""The engine's compiled kernels of flows' forward runs and replays, shared by every flow whose
kernels are the same function (keyed by what decides it: :func:`_runner`), so that a second flow
with the same settings compiles nothing."""


def _runner(key, build, run, lanes: int = 0):
    """The engine's compiled chunk loop of ``build`` for a flow's ``run`` (one member, or ``lanes``
    members per call), cached under ``key`` (with the system, the scheme and the engine's options)
    among :data:`_RUNNERS`; ``runner.kernel(*args)`` is the native kernel for ``args`` or None.
    Only the forward run's kernel stops at Ctrl-C within its chunk: a replay solves no equations
    and must run whole chunks (a replay cut short would give a wrong derivative, not a shorter
    run), so its kernels do not read the stop flag."""
    plan, mech = run.flow.plan, run.mech
    interruptible = key[0] == "forward"
    key = (key, mech, plan.scheme, plan.engine, lanes)
    hit = _RUNNERS.get(key)
    if hit is None:
        sizes = (plan.unknowns, mech.d, mech.m, plan.engine)
        if lanes:
            hit = engine.member_loop(build, *sizes, lanes, interruptible=interruptible)
        else:
            hit = engine.single_loop(build, *sizes, interruptible=interruptible)
        _RUNNERS[key] = hit
    return hit


def _kernels(run, parts) -> list:
    """The engine's native kernels of ``parts``, a list of (key, build, args, what): ``build()``
    compiled for ``args`` (shared under ``key``: :func:`_runner`), or None where the engine runs
    none. Several are compiled side by side, on the members' threads
    (:func:`~livens.driver.executors.spread`; the C compiler runs in processes of its own). The
    engine's notice of why one is not native is given again naming ``what`` runs with XLA instead.
    Warnings are caught here, in the calling thread (``warnings.catch_warnings`` is not
    thread-safe), for the compiling threads too."""
    NativeFallback = engine.NativeFallback

    def make(key, build, args):
        runner = _runner(key, build, run)
        try:
            return runner.kernel(*args)
        except Exception:  # noqa: BLE001 - backend="native" refused: the XLA program runs it
            return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NativeFallback)
        kernels = spread(lambda part: make(*part[:3]), parts)
    xla = " and ".join(part[-1] for part, k in zip(parts, kernels) if k is None) or "a part of it"
    for w in caught:
        if issubclass(w.category, NativeFallback):
            reason = getattr(w.message, "reason", str(w.message))
            notice = NativeFallback(f"livens.flow: {xla} runs with XLA, not native code: {reason}", reason)
            warnings.warn(notice, stacklevel=4)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return kernels


def _member_kernel(run, single, key, build, args) -> MemberKernel:
    """The single kernel ``single`` of a flow's ``run`` for any number of members
    (:class:`~livens.driver.executors.MemberKernel`): :attr:`EngineOptions.lanes
    <livens.engine.EngineOptions>` members at a time through a lane kernel of the same function, made
    at the first call with at least :attr:`SizePolicy.flow_lanes_from <livens.engine.SizePolicy>`
    members, unless its arrays would be too large for lanes to pay (``lane_scratch_bytes``); where the engine makes no lane
    kernel of it, the single kernel member by member. ``key``, ``build`` and ``args``: the key,
    function and arguments (one member's) the single kernel was compiled from (:func:`_runner`)."""
    lanes = run.flow.plan.engine.lanes

    def make_lanes():
        runner = _runner(key, build, run, lanes) if lanes >= 2 else None
        if runner is None:
            return None
        with warnings.catch_warnings():  # the single kernel runs the members instead: no notice
            warnings.simplefilter("ignore", engine.NativeFallback)
            try:
                return runner.kernel(*args)
            except Exception:  # noqa: BLE001 - member by member through the single kernel
                return None

    return MemberKernel(single, make_lanes=make_lanes, lanes_from=engine.size_policy().flow_lanes_from, max_lanes=lanes)


def _batched(fn, batch: tuple, args: tuple):
    """``fn(*args)`` for the members of a batched host callback (``jax.pure_callback`` with
    ``vmap_method="broadcast_all"``: every leaf of ``args`` has the batch axes ``batch`` first, ``()``
    where not batched: one member), the batch axes flattened into one members' axis for ``fn`` and
    its outputs' members' axis given the batch axes again."""
    B, k = math.prod(batch), len(batch)
    flat = jax.tree_util.tree_map(lambda a: np.reshape(np.asarray(a), (B, *np.shape(a)[k:])), args)
    return jax.tree_util.tree_map(lambda a: np.reshape(a, (*batch, *np.shape(a)[1:])), fn(*flat))


def _transposed_by_steps(one_step, state, xs, scalars, sysp, ct_state, ct_recs):
    """(cotangent of ``state``, of ``sysp``): the vector-Jacobian product of the replay of a chunk
    (:func:`livens.timestep.make_replay`, its steps ``one_step``: :func:`livens.timestep.replay_step`)
    for the cotangents of its end state and records. A scan forward keeps only the state at each
    step's start; a scan backward transposes each step, linearized again at its start (its tangent
    and that tangent's LU, made there), where ``jax.vjp`` of the replay's scan keeps those values
    of every step of the chunk from its forward scan for its backward one: per step a matrix and
    its LU, which, for lanes of members at once, leave the caches. Each step's transpose is that of
    the replay's scan step, so the state's cotangents are the same to the bit; the cotangents of
    the System's parameters, summed over their uses in a step and then over the steps, may differ
    from the scan's in the last bits (it adds each use's to the sum over the later steps)."""
    t_start, n0, n_stop, h, params = scalars
    js = jnp.arange(xs.shape[0], dtype=jnp.asarray(n0).dtype)

    def at(j, x):
        return lambda s, p: one_step(s, j, x, t_start, n0, n_stop, h, params, p)

    def forward(s, jx):
        return at(*jx)(s, sysp)[0], s

    _, starts = lax.scan(forward, state, (js, xs))

    def backward(cts, step):
        ct_s, ct_p = cts
        s, j, x, ct_r = step
        d_s, d_p = jax.vjp(at(j, x), s, sysp)[1]((ct_s, ct_r))
        return (d_s, jax.tree_util.tree_map(jnp.add, ct_p, d_p)), None

    zero_p = jax.tree_util.tree_map(jnp.zeros_like, sysp)
    (ct_s, ct_p), _ = lax.scan(backward, (ct_state, zero_p), (starts, js, xs, ct_recs), reverse=True)
    return ct_s, ct_p


def _values_only(jaxpr):
    """``jaxpr`` (and the jaxprs of its loops, conditionals and calls) reduced to what its values
    read: each ``custom_linear_solve`` a call of its ``solve`` on that solve's constants and the
    right-hand side, without its matrix (the constants of ``matvec`` and ``vecmat``: its
    derivatives and transpose, which ``jax.vjp`` of ``jnp.linalg.solve`` hands from a step's
    linearization to its transpose beside the LU), and each ``custom_jvp`` function a call of the
    function, without what its derivative rule reads (an implicit solution's tangent matrix,
    :func:`livens.solvers.newton.implicit`, where the reverse pass's forward scan takes the steps
    only for their states). The engine translates the same operations of what is left; JAX's
    dead-code elimination then removes what made those inputs. Not to be differentiated."""
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive is _prims.linear_solve_p:
            n, solve = eqn.params["const_lengths"], eqn.params["jaxprs"].solve
            lo, end = n.matvec + n.vecmat, n.matvec + n.vecmat + n.solve + n.transpose_solve
            eqns.append(_call(eqn, solve, [*eqn.invars[lo : lo + n.solve], *eqn.invars[end:]]))
        elif eqn.primitive is _prims.custom_jvp_call_p:
            eqns.append(_call(eqn, eqn.params["call_jaxpr"], eqn.invars))
        else:
            eqns.append(eqn.replace(params={k: _values_only_in(v) for k, v in eqn.params.items()}))
    return jaxpr.replace(eqns=eqns)


def _call(eqn, closed, invars):
    """``eqn`` as a call of ``closed`` (reduced by :func:`_values_only`) on ``invars``."""
    call = {"call_jaxpr": closed.replace(jaxpr=_values_only(closed.jaxpr))}
    return _new_jaxpr_eqn(invars, eqn.outvars, _prims.closed_call_p, call, eqn.effects, eqn.source_info, eqn.ctx)


def _values_only_in(param):
    if isinstance(param, jcore.ClosedJaxpr):
        return param.replace(jaxpr=_values_only(param.jaxpr))
    if isinstance(param, jcore.Jaxpr):
        return _values_only(param)
    if isinstance(param, tuple) and any(isinstance(p, (jcore.ClosedJaxpr, jcore.Jaxpr)) for p in param):
        return tuple(_values_only_in(p) for p in param)
    return param


def _reading_only_values(fn):
    """``fn`` traced and run as its program reduced by :func:`_values_only`: the same values by the
    same operations, without those that only its derivatives would read."""

    def run(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = jcore.jaxpr_as_fun(closed.replace(jaxpr=_values_only(closed.jaxpr)))(*jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), out)

    return run


class NativeForward:
    """The records of a run from the engine's native kernel (module docstring), called like
    :meth:`livens.driver.ingraph._Run.segments`: ``(state, history, failed, sysp) -> (records,
    nodes reached, a step failed, the states at the chunks' starts)``."""

    def __init__(self, run, kernel, layout, shapes, made):
        self.run, self.layout, self.shapes = run, layout, shapes
        self.kernel = _member_kernel(run, kernel, *made)

    @classmethod
    def make(cls, run, state, history, failed, sysp) -> "NativeForward | None":
        """The native forward of ``run`` for arguments of these shapes, or None where the engine runs
        no native kernel for it (backend "xla", no C compiler, a loop the translator refuses)."""
        if not _runs_natively(run):
            return None
        plan, mech = run.flow.plan, run.mech
        spec = _spec((state, history))
        layout = record_layout(plan.scheme, mech, plan.guess, spec[0], plan.h, plan.params, solution=True)

        def build(**opts):
            return make_loop(mech, plan.scheme, plan.guess, CHUNK, layout, plan.newton, record_solution=True, **opts)

        consts = plan.consts()
        sys_spec = None if sysp is None else {k: np.zeros(jnp.shape(v)) for k, v in sysp.items()}
        args = (*spec, np.float64(0.0), np.int64(0), consts[0], *consts[1:5], sys_spec)
        key = ("forward", plan.guess, CHUNK, layout, plan.newton)
        (kernel,) = _kernels(run, [(key, build, args, "the forward run")])
        if kernel is None:
            return None
        n_steps = run.flow.n_steps
        n_chunks = -(-n_steps // CHUNK)
        recs = {k: jax.ShapeDtypeStruct((n_steps, *shape), np.dtype(dtype)) for k, shape, dtype in layout}
        starts = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct((n_chunks, *a.shape), a.dtype), spec[0])
        shapes = (recs, jax.ShapeDtypeStruct((), jnp.int64), jax.ShapeDtypeStruct((), jnp.bool_), starts)
        return cls(run, kernel, layout, shapes, (key, build, args))

    def host(self, state, history, failed, sysp):
        """The run on the host (every argument member-first under ``jax.vmap``, its members' axes
        first: B members; else one member): the host loop of every run
        (:func:`livens.driver.host.run_host_loop`) over the members' executor
        (:class:`~livens.driver.executors.NativeMembers`, keeping the chunks' starting states) until
        the last step or a failed one (the policy :class:`~livens.driver.options.NaNFlag`: no
        rescue, the member stops, the others go on), every step's record in an
        :class:`~livens.driver.host.EveryStep`. A member whose start failed (``failed``) takes no
        step. Each member's records are those of its own run (to the bit)."""
        return _batched(self._host_members, np.shape(failed), (state, history, failed, sysp))

    def __call__(self, state, history, failed, sysp):
        return jax.pure_callback(self.host, self.shapes, state, history, failed, sysp, vmap_method="broadcast_all")

    def _host_members(self, state, history, failed, sysp):
        flow = self.run.flow
        plan, n_steps = flow.plan, flow.n_steps
        recs_shape, n_shape, failed_shape, starts_shape = self.shapes
        failed = np.asarray(failed, bool)
        B = failed.shape[0]
        starts = jax.tree_util.tree_map(lambda s: np.zeros((B, *s.shape), s.dtype), starts_shape)
        consts = (*plan.consts()[:5], None)
        width = self.layout.width
        ex = NativeMembers(self.kernel, state, history, 0.0, consts, CHUNK, width, starts=starts, member_sys=sysp)
        recorder = host.EveryStep(self.layout, n_steps, B)
        stop = np.where(failed, 0, n_steps).astype(np.int64)
        out = host.run_host_loop(
            plan,
            ex,
            self.layout,
            recorder,
            np.zeros(B, np.int64),
            stop,
            policy=flow.on_failure,
            stop_run_on_failure=False,
        )
        if out.interrupted:
            raise KeyboardInterrupt("livens: the native run of lv.flow was interrupted (Ctrl-C)")
        recs = {k: np.asarray(recorder.records[k], dtype=recs_shape[k].dtype) for k in recs_shape}
        bad = failed | out.failed
        return recs, np.asarray(out.n, n_shape.dtype), np.asarray(bad, failed_shape.dtype), starts


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
    and its transpose, reverse mode (``adjoint``). Either kernel may be None (the translator
    refused it): forward mode then runs the XLA replay; without the adjoint the run's derivatives
    are XLA's throughout (:func:`make` returns None)."""

    def __init__(self, run, adjoint, tangent, state_spec, sys_spec, rec_spec, builds=(None, None)):
        self.run, self.adjoint, self.tangent_kernel = run, adjoint, tangent
        self.state_spec, self.sys_spec, self.rec_spec = state_spec, sys_spec, rec_spec
        self.adjoint_members = _member_kernel(run, adjoint, *builds[0]) if builds[0] else None
        self.tangent_members = _member_kernel(run, tangent, *builds[1]) if builds[1] and tangent else None

    @classmethod
    def make(cls, run, state, sysp) -> "NativeDerivatives | None":
        """The native derivatives of ``run`` for a state and parameters of these shapes, or None where
        the engine runs no native kernel of the reverse pass. The two kernels compile side by side."""
        if not _runs_natively(run):
            return None
        plan, mech = run.flow.plan, run.mech
        replay, one_step = make_replay(mech, plan.scheme, CHUNK), replay_step(mech, plan.scheme)

        def chunk(t_start, n0, n_stop, h, params, xs):
            return lambda s, p: replay(s, xs, t_start, n0, n_stop, h, params, p)

        def build_adjoint(**_):
            def adjoint(state, xs, t_start, n0, n_stop, h, params, sysp, ct_state, ct_recs):
                scalars = (t_start, n0, n_stop, h, params)
                return _transposed_by_steps(one_step, state, xs, scalars, sysp, ct_state, ct_recs)

            return _reading_only_values(adjoint)

        def build_tangent(**_):
            def tangent(state, xs, t_start, n0, n_stop, h, params, sysp, d_state, d_sys):
                f = chunk(t_start, n0, n_stop, h, params, xs)
                return jax.jvp(f, (state, sysp), (d_state, d_sys))[1]

            return tangent

        state_spec, sys_spec = _spec(state), _spec(sysp)
        xs = np.zeros((CHUNK, plan.unknowns))
        f64 = np.float64
        scalars = (f64(0.0), np.int64(0), np.int64(CHUNK), f64(plan.h), plan.jparams)
        out = jax.eval_shape(lambda s, p: replay(s, xs, *scalars, p), state_spec, sys_spec)
        rec_spec = out[1]
        head = (_zeros(state_spec), xs, *scalars, _zeros(sys_spec))
        adjoint_args = (*head, _zeros(out[0]), _zeros(rec_spec))
        tangent_args = (*head, _zeros(state_spec), _zeros(sys_spec))
        adjoint, tangent = _kernels(
            run,
            [
                (("adjoint", CHUNK), build_adjoint, adjoint_args, "the reverse pass (jax.grad)"),
                (("tangent", CHUNK), build_tangent, tangent_args, "forward mode (jax.jvp)"),
            ],
        )
        if adjoint is None:
            return None
        builds = ((("adjoint", CHUNK), build_adjoint, adjoint_args), (("tangent", CHUNK), build_tangent, tangent_args))
        return cls(run, adjoint, tangent, state_spec, sys_spec, rec_spec, builds)

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
        without the members' axis."""
        axis = np.ndim(idx)  # the steps' axis of the result
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
        (:class:`~livens.driver.executors.MemberKernel`), ``kernel(start of c, its solutions,
        t_start, n0, n_stop, h, the scheme's and the System's parameters, carry, given(idx, lo, hi))
        -> (carry, out)``, then ``take(idx, out, lo, hi)`` for each group ``idx`` of them (in its
        thread: the groups' rows are disjoint; ``idx`` an integer: one member, its outputs without
        the members' axis); ``carry`` (member-first arrays) is updated in place."""
        plan, n = self.run.flow.plan, np.asarray(n, np.int64)
        chunks = list(self._chunks(int(n.max(initial=0))))
        for c, lo, hi in reversed(chunks) if reverse else chunks:

            def args_of(idx, c=c, lo=lo, hi=hi):
                start = jax.tree_util.tree_map(lambda a: np.asarray(a)[idx, c], starts)
                t0_n0 = for_members(idx, (np.float64(0.0), np.int64(lo)))
                head = (start, self._rows(xs, idx, lo, hi), *t0_n0, n[idx])
                consts = for_members(idx, (np.float64(plan.h), plan.jparams))
                return (*head, *consts, member_rows(sysp, idx), member_rows(carry, idx), given(idx, lo, hi))

            def taken(idx, outputs, lo=lo, hi=hi):
                new, out = outputs
                set_member_rows(carry, idx, new)
                take(idx, out, lo, hi)

            kernels.run(np.flatnonzero(lo < n), args_of, taken)
        return carry

    def host_adjoint(self, starts, xs, n, ct_recs, sysp):
        """(cotangent of the initial state, of the System's parameters) for the records' cotangents
        ``ct_recs``: the chunks' vector-Jacobian products, the last chunk first, each from the
        state's cotangent where the later one ended; the parameters' cotangents summed. Under
        ``jax.vmap`` every argument has the members' axes first, and the members run together."""
        return _batched(self._adjoint_members, np.shape(n), (starts, xs, n, ct_recs, sysp))

    def _adjoint_members(self, starts, xs, n, ct_recs, sysp):
        B = np.shape(n)[0]
        zeros = lambda s: np.zeros((B, *s.shape), s.dtype)  # noqa: E731
        ct_sys = jax.tree_util.tree_map(zeros, self.sys_spec)

        def add(idx, ct_p, lo, hi):
            for dst, src in zip(jax.tree_util.tree_leaves(ct_sys), jax.tree_util.tree_leaves(ct_p)):
                dst[idx] = dst[idx] + src

        def chunk_cotangents(idx, lo, hi):
            return jax.tree_util.tree_map(lambda a: self._rows(a, idx, lo, hi), ct_recs)

        ct_state = jax.tree_util.tree_map(zeros, self.state_spec)
        self._replay_pass(self.adjoint_members, starts, xs, n, sysp, ct_state, chunk_cotangents, add, reverse=True)
        cast = lambda x, s: np.asarray(x, s.dtype)  # noqa: E731
        return jax.tree_util.tree_map(cast, ct_state, self.state_spec), jax.tree_util.tree_map(
            cast, ct_sys, self.sys_spec
        )

    def host_tangent(self, starts, xs, n, sysp, d_state, d_sys):
        """The records' tangents for (d_state, d_sys): the chunks' Jacobian-vector products, the
        first chunk first, each starting from the tangent where the last one ended. Under
        ``jax.vmap`` every argument has the members' axes first, and the members run together."""
        return _batched(self._tangent_members, np.shape(n), (starts, xs, n, sysp, d_state, d_sys))

    def _tangent_members(self, starts, xs, n, sysp, d_state, d_sys):
        B, n_steps = np.shape(n)[0], self.run.flow.n_steps
        out = {k: np.zeros((B, n_steps, *a.shape[1:]), a.dtype) for k, a in self.rec_spec.items()}

        def put(idx, d_recs, lo, hi):  # idx: members (d_recs member-first) or one member
            for k in out:
                d = np.asarray(d_recs[k])
                out[k][idx, lo:hi] = d[:, : hi - lo] if np.ndim(idx) else d[: hi - lo]

        carry = jax.tree_util.tree_map(np.array, d_state)
        self._replay_pass(
            self.tangent_members, starts, xs, n, sysp, carry, lambda idx, lo, hi: member_rows(d_sys, idx), put, False
        )
        return out

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
        rec_shapes = {k: jax.ShapeDtypeStruct((n_steps, *a.shape[1:]), a.dtype) for k, a in self.rec_spec.items()}
        zero_recs = {k: jnp.broadcast_to(zero, a.shape) for k, a in rec_shapes.items()}
        d_state, d_sys = jax.tree_util.tree_map(lambda t: t + zero, (d_state, d_sys))

        def solve(_, b):
            if self.tangent_kernel is None:
                _, d = jax.jvp(lambda s, p: replayed(s, xs, p), (state, sysp), (b[0], b[1]))
            else:
                args = (starts, xs, n, sysp, b[0], b[1])
                d = jax.pure_callback(self.host_tangent, rec_shapes, *args, vmap_method="broadcast_all")
            return jax.tree_util.tree_map(jnp.zeros_like, b[0]), jax.tree_util.tree_map(jnp.zeros_like, b[1]), d

        def transpose_solve(_, ct):
            shapes = (self.state_spec, self.sys_spec)
            a, p = jax.pure_callback(self.host_adjoint, shapes, starts, xs, n, ct[2], sysp, vmap_method="broadcast_all")
            return a, p, jax.tree_util.tree_map(jnp.zeros_like, ct[2])

        out = lax.custom_linear_solve(lambda v: v, (d_state, d_sys, zero_recs), solve, transpose_solve)
        return out[2]
