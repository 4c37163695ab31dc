"""The native kernels of :func:`livens.flow`: its forward run and its derivatives, called from the
program through host callbacks.

- :class:`NativeForward`: the records of a run from the engine's native kernel of the chunk loop
  (the one :func:`livens.simulate` runs), with each step's converged unknowns ("x") and the state
  at the start of every chunk of :data:`CHUNK` steps. It is a run like any other: the host loop of
  every run (:func:`livens.driver.host.run_host_loop`) drives the kernel, so that a failed step,
  Ctrl-C and a kernel's stop flag are handled as in :func:`livens.simulate`.
- :class:`NativeDerivatives`: the run's derivative from those records, chunk by chunk: the replay
  of a chunk's steps from their solutions (:func:`livens.timestep.make_replay`) and its
  Jacobian-vector product (forward mode, the first chunk first) or vector-Jacobian product
  (reverse mode, the last chunk first), each translated to one native kernel. They agree with
  XLA's derivatives of the same replay to round-off (tests/test_flow_native_derivatives.py).
  Both directions are one chunk iterator (:meth:`NativeDerivatives._replay_pass`), not the host
  loop: a replay is no run. It solves no equation, so no step can fail and there is nothing for
  a failure policy, a rescue or a blow-up check to do; it keeps no nodes, streams nothing and shows
  no progress; and the reverse pass goes from the last chunk to the first, carrying a cotangent,
  where the host loop advances members forward to their stop. Ctrl-C between its chunks is
  Python's KeyboardInterrupt.

JAX transposes a linear map that it cannot see into (a host callback) only through a primitive
with a transpose rule of its own: the tangent map T: (d state_0, d parameters) -> d records is
handed to JAX as ``lax.custom_linear_solve`` with the identity as its matrix, whose ``solve`` is
T (the tangent kernel, or the XLA replay's ``jvp`` where the translator refuses it) and whose
``transpose_solve`` is T^T (the adjoint kernel). JAX differentiates such a solve once; a second
derivative through it is refused (:func:`first_order`) with the fix, ``backend="xla"``.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import engine
from ..timestep import make_loop, make_replay
from . import host
from .executors import SingleNative
from .options import DEFAULT_CHUNK
from .records import record_layout

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


def _kernels(run, parts) -> list:
    """The engine's native kernels of ``parts``, a list of (build, args, what): ``build()`` compiled
    for ``args``, or None where the engine runs none. Several are compiled side by side (the C
    compiler runs in processes of its own). The engine's notice of why one is not native is given
    again naming ``what`` runs with XLA instead. Warnings are caught here, in the calling thread
    (``warnings.catch_warnings`` is not thread-safe), for the compiling threads too."""
    NativeFallback = engine.NativeFallback
    plan, mech = run.flow.plan, run.mech

    def make(build, args):
        runner = engine.single_loop(build, plan.unknowns, mech.d, mech.m, plan.engine)
        try:
            return runner.kernel(*args)
        except Exception:  # noqa: BLE001 - backend="native" refused: the XLA program runs it
            return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NativeFallback)
        if len(parts) == 1:
            kernels = [make(*parts[0][:2])]
        else:
            with ThreadPoolExecutor(len(parts)) as pool:
                futures = [pool.submit(make, build, args) for build, args, _ in parts]
                kernels = [f.result() for f in futures]
    xla = " and ".join(what for (_, _, what), k in zip(parts, kernels) if k is None) or "a part of it"
    for w in caught:
        if issubclass(w.category, NativeFallback):
            reason = getattr(w.message, "reason", str(w.message))
            notice = NativeFallback(f"livens.flow: {xla} runs with XLA, not native code: {reason}", reason)
            warnings.warn(notice, stacklevel=4)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return kernels


class NativeForward:
    """The records of a run from the engine's native kernel (module docstring), called like
    :meth:`livens.driver.ingraph._Run.segments`: ``(state, history, failed, sysp) -> (records,
    nodes reached, a step failed, the states at the chunks' starts)``."""

    def __init__(self, run, kernel, layout, shapes):
        self.run, self.kernel, self.layout, self.shapes = run, kernel, layout, shapes

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
        (kernel,) = _kernels(run, [(build, args, "the forward run")])
        if kernel is None:
            return None
        n_steps = run.flow.n_steps
        n_chunks = -(-n_steps // CHUNK)
        recs = {k: jax.ShapeDtypeStruct((n_steps, *shape), np.dtype(dtype)) for k, shape, dtype in layout}
        starts = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct((n_chunks, *a.shape), a.dtype), spec[0])
        shapes = (recs, jax.ShapeDtypeStruct((), jnp.int64), jax.ShapeDtypeStruct((), jnp.bool_), starts)
        return cls(run, kernel, layout, shapes)

    def host(self, state, history, failed, sysp):
        """The run on the host: the host loop of every run (:func:`livens.driver.host.run_host_loop`)
        over the native kernel (:class:`~livens.driver.executors.SingleNative`, keeping the chunks'
        starting states) until the last step or a failed one (the policy
        :class:`~livens.driver.options.NaNFlag`: no rescue, the run stops), every step's record in
        an :class:`~livens.driver.host.EveryStep`. A start that failed (``failed``) takes no step."""
        flow = self.run.flow
        plan, n_steps = flow.plan, flow.n_steps
        recs_shape, n_shape, failed_shape, starts_shape = self.shapes
        starts = _zeros(starts_shape)
        consts = plan.consts()
        ex = SingleNative(self.kernel, state, history, 0.0, (*consts[:5], sysp), CHUNK, starts=starts)
        recorder = host.EveryStep(self.layout, n_steps)
        stop = np.array([0 if bool(failed) else n_steps], np.int64)
        try:
            out = host.run_host_loop(
                plan, ex, self.layout, recorder, np.zeros(1, np.int64), stop, policy=flow.on_failure
            )
        finally:
            ex.close()
        if out.interrupted:
            raise KeyboardInterrupt("livens: the native run of lv.flow was interrupted (Ctrl-C)")
        recs = {k: np.asarray(recorder.records[k], dtype=recs_shape[k].dtype) for k in recs_shape}
        bad = bool(failed) or bool(out.failed[0])
        return recs, np.asarray(out.n[0], n_shape.dtype), np.asarray(bad, failed_shape.dtype), starts

    def __call__(self, state, history, failed, sysp):
        return jax.pure_callback(self.host, self.shapes, state, history, failed, sysp, vmap_method="sequential")


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

    def __init__(self, run, adjoint, tangent, state_spec, sys_spec, rec_spec):
        self.run, self.adjoint, self.tangent_kernel = run, adjoint, tangent
        self.state_spec, self.sys_spec, self.rec_spec = state_spec, sys_spec, rec_spec

    @classmethod
    def make(cls, run, state, sysp) -> "NativeDerivatives | None":
        """The native derivatives of ``run`` for a state and parameters of these shapes, or None where
        the engine runs no native kernel of the reverse pass. The two kernels compile side by side."""
        if not _runs_natively(run):
            return None
        plan, mech = run.flow.plan, run.mech
        replay = make_replay(mech, plan.scheme, CHUNK)

        def chunk(t_start, n0, n_stop, h, params, xs):
            return lambda s, p: replay(s, xs, t_start, n0, n_stop, h, params, p)

        def build_adjoint(**_):
            def adjoint(state, xs, t_start, n0, n_stop, h, params, sysp, ct_state, ct_recs):
                f = chunk(t_start, n0, n_stop, h, params, xs)
                return jax.vjp(f, state, sysp)[1]((ct_state, ct_recs))

            return adjoint

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
        adjoint, tangent = _kernels(
            run,
            [
                (build_adjoint, (*head, _zeros(out[0]), _zeros(rec_spec)), "the reverse pass (jax.grad)"),
                (build_tangent, (*head, _zeros(state_spec), _zeros(sys_spec)), "forward mode (jax.jvp)"),
            ],
        )
        if adjoint is None:
            return None
        return cls(run, adjoint, tangent, state_spec, sys_spec, rec_spec)

    def _chunks(self, n):
        """(chunk index, first step, end step) of the chunks of a run that reached node n."""
        n_steps = self.run.flow.n_steps
        for c in range(-(-n_steps // CHUNK)):
            lo = c * CHUNK
            if lo >= n:  # not reached (a failed run)
                return
            yield c, lo, min(lo + CHUNK, n_steps)

    @staticmethod
    def _start(starts, c):
        leaves, tree = jax.tree_util.tree_flatten(starts)
        return jax.tree_util.tree_unflatten(tree, [np.asarray(a)[c] for a in leaves])

    @staticmethod
    def _rows(a, lo, hi):
        """Rows lo:hi of a, padded with zeros to CHUNK (steps past n_stop are skipped)."""
        a = np.asarray(a)[lo:hi]
        return np.pad(a, [(0, CHUNK - a.shape[0])] + [(0, 0)] * (a.ndim - 1))

    def _replay_pass(self, kernel, starts, xs, n, sysp, carry, given, take, reverse: bool):
        """One pass of a replay kernel over the chunks of a run that reached node ``n`` (module
        docstring), the last chunk first where ``reverse``: for chunk c (steps lo:hi) ``kernel(start
        of c, its solutions, t_start, n0, n_stop, h, the scheme's and the System's parameters,
        carry, given(lo, hi)) -> (carry, out)``, then ``take(out, lo, hi)``; returns the last carry."""
        plan, n = self.run.flow.plan, int(n)
        chunks = list(self._chunks(n))
        for c, lo, hi in reversed(chunks) if reverse else chunks:
            head = (self._start(starts, c), self._rows(xs, lo, hi), np.float64(0.0), np.int64(lo), np.int64(n))
            carry, out = kernel(*head, np.float64(plan.h), plan.jparams, sysp, carry, given(lo, hi))
            take(out, lo, hi)
        return carry

    def host_adjoint(self, starts, xs, n, ct_recs, sysp):
        """(cotangent of the initial state, of the System's parameters) for the records' cotangents
        ``ct_recs``: the chunks' vector-Jacobian products, the last chunk first, each from the
        state's cotangent where the later one ended; the parameters' cotangents summed."""
        ct_sys = [_zeros(self.sys_spec)]

        def add(ct_p, lo, hi):
            ct_sys[0] = jax.tree_util.tree_map(np.add, ct_sys[0], ct_p)

        def chunk_cotangents(lo, hi):
            return jax.tree_util.tree_map(lambda a: self._rows(a, lo, hi), ct_recs)

        ct_state = self._replay_pass(
            self.adjoint, starts, xs, n, sysp, _zeros(self.state_spec), chunk_cotangents, add, reverse=True
        )
        cast = lambda x, s: np.asarray(x, s.dtype)  # noqa: E731
        return jax.tree_util.tree_map(cast, ct_state, self.state_spec), jax.tree_util.tree_map(
            cast, ct_sys[0], self.sys_spec
        )

    def host_tangent(self, starts, xs, n, sysp, d_state, d_sys):
        """The records' tangents for (d_state, d_sys): the chunks' Jacobian-vector products, the
        first chunk first, each starting from the tangent where the last one ended."""
        n_steps = self.run.flow.n_steps
        out = {k: np.zeros((n_steps, *a.shape[1:]), a.dtype) for k, a in self.rec_spec.items()}

        def put(d_recs, lo, hi):
            for k in out:
                out[k][lo:hi] = np.asarray(d_recs[k])[: hi - lo]

        self._replay_pass(self.tangent_kernel, starts, xs, n, sysp, d_state, lambda lo, hi: d_sys, put, reverse=False)
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
                d = jax.pure_callback(self.host_tangent, rec_shapes, *args, vmap_method="sequential")
            return jax.tree_util.tree_map(jnp.zeros_like, b[0]), jax.tree_util.tree_map(jnp.zeros_like, b[1]), d

        def transpose_solve(_, ct):
            shapes = (self.state_spec, self.sys_spec)
            a, p = jax.pure_callback(self.host_adjoint, shapes, starts, xs, n, ct[2], sysp, vmap_method="sequential")
            return a, p, jax.tree_util.tree_map(jnp.zeros_like, ct[2])

        out = lax.custom_linear_solve(lambda v: v, (d_state, d_sys, zero_recs), solve, transpose_solve)
        return out[2]
