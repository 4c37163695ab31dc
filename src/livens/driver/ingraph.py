"""The in-graph executor: a whole run inside a program that JAX can transform (:func:`livens.flow`).

The call of a :class:`FlowFunction` is one program:

1. the start: the given (q0, v0) mapped onto the constraint manifold of the call's parameter
   values (:func:`livens.manifold.project`, differentiable), or, with ``consistent=False``,
   checked against it (``Problem.consistency_tol``); then the scheme's own start (SLO09 eq 15, 17);
2. the chunk loop of :mod:`livens.timestep`, never differentiated: the engine's native kernel
   where it compiles the loop natively (:class:`~livens.driver.native_flow.NativeForward`, the
   speed of :func:`livens.simulate`), else a ``lax.scan`` over segments of the XLA loop; every step
   records its converged unknowns. The derivative of the records is that of the replay of the
   steps from those solutions (:func:`livens.timestep.make_replay`: each step's implicit
   derivative at its solution, no Newton iteration re-run), a scan over ``jax.checkpoint``-ed
   segments (memory of the linearization like sqrt(n_steps)). Forward mode runs it in XLA;
   where the engine makes native kernels of it (:class:`~livens.driver.native_flow.NativeDerivatives`),
   both modes run it chunk by chunk there, else in XLA;
3. the failure policy :class:`~livens.driver.options.NaNFlag`: once the start or a step fails, no
   later segment takes a step, the nodes after it are NaN, ``converged`` is False and the
   derivative of every output with respect to every input is NaN (:func:`_loud`), so that a
   gradient never looks valid where the loss is not; with ``on_failure="hold"`` the nodes after it
   hold the last node reached and every derivative of the run is zero (:func:`_fenced`), so that a
   failed member of a batch can be masked with ``converged``;
4. for a scheme that keeps symmetries (EM, EM-G, livens-em), the kept symmetries: called on concrete
   parameter values, those exact for them, as :func:`livens.simulate` decides them; with traced
   values, those exact for every value of the traced parameters (:meth:`FlowFunction.kept_symmetries`).
   They are checked at the nodes with the call's values: values that break one fail the run with a
   message naming it.

What a failed run says and raises, ``throw=True`` included: :mod:`livens.driver.flow_failure`.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import engine
from ..errors import ConvergenceError
from ..manifold import project
from ..mechanics import mechanics
from ..problem import exact_symmetries
from ..symmetries import constraints_midpoint_orthogonal, invariance_defects
from ..system import parameter_values
from ..timestep import make_loop, make_replay
from ..validation import check_initial_state
from .flow_failure import (  # noqa: F401 - the failure codes, also livens.driver.ingraph's
    NONE,
    SCHEME_START,
    START,
    STEP,
    SYMMETRY,
    failed_rows,
    failure_message,
    raise_thrown,
    reraise_thrown,
    step_advice,
)
from .native_flow import NativeDerivatives, NativeForward
from .options import FILLS, NaNFlag
from .setup import start_state

FAILED = FILLS
"""The values of ``on_failure`` of :func:`livens.flow`: what a failed run returns (module docstring;
:class:`~livens.driver.options.NaNFlag`)."""

TRACED_SAMPLES = 3
"""Random values of traced parameters at which a symmetry must be exact to be kept (besides their
defaults): :meth:`FlowFunction.kept_symmetries`."""


class TracedSymmetryNotice(UserWarning):
    """A call of :func:`livens.flow` with traced parameters drops a symmetry that their default (or
    given) values keep: it is not exact for every value of them (the message names it, why, and the
    values where it fails)."""


class FlowResult(NamedTuple):
    """The nodes of a run of :func:`livens.flow`: t (N+1,), q, p (N+1, d), v (the scheme's
    velocities: (N+1, d) nodal, else (N, d)), lam (N, m), gam (N, m) or None, iterations (N,) Newton
    iterations per step, converged (a bool: the start and every step converged), failed_step (the
    index of the first failed step, 0 for a failed start, -1 if none), residual (N,) Newton's
    ||R||_inf per step (NaN for steps not taken; for a failed start, entry 0 holds the start's),
    failure (a code: :data:`NONE`, :data:`START`, :data:`SCHEME_START`, :data:`STEP`, or
    :data:`SYMMETRY` + j). With ``save_every = k`` the node arrays hold every k-th node. Under
    ``jax.vmap`` every field has the members' axis first: converged and failed_step are per member.

    The fields are those of a run's :class:`~livens.run_record.RunRecord` (one member's, or the
    members' under ``jax.vmap``), under the same names and dtypes as a :class:`~livens.Solution`'s,
    and the same shapes where ``save_every`` is 1 (else the per-step fields keep every step);
    :meth:`~livens.run_record.RunRecord.of_flow` makes the record of a concrete result. The result
    stays a NamedTuple of JAX arrays: the output of a pure function, which ``jax.jit``, ``jax.vmap``
    and the derivatives trace through (the record's NumPy arrays on the host cannot be traced)."""

    t: Any
    q: Any
    p: Any
    v: Any
    lam: Any
    gam: Any
    iterations: Any
    converged: Any
    failed_step: Any
    residual: Any = None
    failure: Any = None

    @property
    def status(self) -> Any:
        """The codes of :class:`~livens.Status` (the ``failure`` field), under the name every result of
        livens shares (:mod:`livens.run_status`)."""
        return self.failure


def _traced(*xs) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for x in xs for leaf in jax.tree_util.tree_leaves(x))


@contextlib.contextmanager
def _on_values():
    """Evaluate on concrete values where a program is being traced (the symmetry checks of a call
    with traced inputs), op by op: under JAX 0.7 a ``jax.jit`` call inside
    ``jax.ensure_compile_time_eval`` within a trace computed wrong second derivatives of the heavy
    top's constraints (so the constraints' affine rows, and the kept symmetries, came out wrong)."""
    with jax.ensure_compile_time_eval(), jax.disable_jit():
        yield


# ------------------------------------------------------------------ failure is loud
@jax.custom_jvp
def _loud(outs, z, failed):
    """``outs`` unchanged; its derivative is NaN in every direction where ``failed``: the tangent
    of each output gets NaN times ``dz``, the sum of all the run's input tangents (linear, so that
    reverse mode transposes it: the cotangent of every input is NaN)."""
    return outs


@_loud.defjvp
def _loud_jvp(primals, tangents):
    outs, z, failed = primals
    douts, dz, _ = tangents
    k = jnp.where(failed, jnp.asarray(jnp.nan, z.dtype), jnp.zeros((), z.dtype))
    return outs, jax.tree_util.tree_map(lambda o, do: do + (k * dz).astype(o.dtype), outs, douts)


def _input_sum(*trees):
    """The sum of every entry of every floating-point leaf (the ``z`` of :func:`_loud`)."""
    leaves = [jnp.sum(jnp.asarray(a, jnp.float64)) for t in trees for a in jax.tree_util.tree_leaves(t)]
    return sum(leaves, jnp.zeros((), jnp.float64))


def _fenced(body):
    """``body``, ``(q_in, v_in, sysp) -> (outs, aux)``, whose derivatives are zero for a failed run
    (``aux["converged"]`` False) and unchanged otherwise: the "double where" at both ends of the
    run's linearization. The tangents of the inputs are zeroed before it and those of the outputs
    after it, so that in reverse mode the last operation on the inputs' cotangents is the
    selection itself: NaN coefficients in the linearization of a failed step (its Newton iterate
    is no solution) never reach them, also where they meet zero cotangents."""

    @jax.custom_jvp
    def fenced(q_in, v_in, sysp):
        return body(q_in, v_in, sysp)

    @fenced.defjvp
    def fenced_jvp(primals, tangents):
        outs, lin, aux = jax.linearize(body, *primals, has_aux=True)
        ok = aux["converged"]

        def gate(t):
            return jnp.where(ok, t, jnp.zeros_like(t))

        d_outs = jax.tree_util.tree_map(gate, lin(*jax.tree_util.tree_map(gate, tangents)))
        return (outs, aux), (d_outs, jax.tree_util.tree_map(_zero_tangent, aux))

    return fenced


# ------------------------------------------------------------------ the run as a program
class _Run:
    """The traced run of one Mechanics (one set of kept symmetries): :meth:`__call__` is
    ``(q0, v0, parameters) -> FlowResult``."""

    def __init__(self, flow: "FlowFunction", mech, throw: bool):
        self.flow, self.mech, self.throw = flow, mech, throw
        plan = flow.plan
        self.seg, self.n_seg = flow.segments
        self.loop = make_loop(mech, plan.scheme, plan.guess, self.seg, None, plan.newton, record_solution=True)
        rest = flow.n_steps % self.seg
        self.replay = jax.checkpoint(make_replay(mech, plan.scheme, self.seg))
        self.replay_rest = jax.checkpoint(make_replay(mech, plan.scheme, rest)) if rest else None
        self.kept = tuple(s.name for s in mech.symmetries) if plan.scheme.capabilities.symmetries else ()
        self._native = self._derivatives = False  # not yet made

    def native(self, state, history, failed, sysp):
        """The :class:`~livens.driver.native_flow.NativeForward` of this run (made at the first
        trace), or None."""
        if self._native is False:
            self._native = NativeForward.make(self, state, history, failed, sysp)
        return self._native

    def derivatives(self, state, sysp):
        """The :class:`~livens.driver.native_flow.NativeDerivatives` of this run (made at the first
        trace of a derivative), or None."""
        if self._derivatives is False:
            self._derivatives = NativeDerivatives.make(self, state, sysp)
        return self._derivatives

    # the start
    def start(self, bound, q0, v0):
        """(q0, v0) on the manifold, whether that worked, its residual and iterations."""
        flow = self.flow
        if bound.m == 0:
            z = jnp.zeros((), jnp.float64)
            return q0, v0, jnp.bool_(True), z, jnp.int32(0)
        if flow.consistent:
            pr = project(bound, q0, v0)
            return pr.q, pr.v, pr.converged, jnp.maximum(pr.residual, pr.velocity_residual), pr.iterations
        viol = jnp.maximum(jnp.max(jnp.abs(bound.g(q0))), jnp.max(jnp.abs(bound.G(q0) @ v0)))
        return q0, v0, viol <= flow.problem.consistency_tol, viol, jnp.int32(0)

    def broken_symmetry(self, bound, q):
        """The index of the first kept symmetry that the call's values break at the nodes q (a
        sample of at most eight, node 0 included; NaN nodes ignored), or -1: dV(q) . xi q and
        G(q) xi q relative to the sizes involved (:func:`livens.symmetries.invariance_defects`, the
        criterion of :func:`livens.symmetries.symmetry_defect`)."""
        r = len(self.kept)
        idx = np.unique(np.linspace(0, q.shape[0] - 1, min(8, q.shape[0])).round().astype(int))
        qs = jax.lax.stop_gradient(q[idx])

        def at(x):
            potential, constraint = invariance_defects(
                bound.dV(x), bound.G(x) if bound.m else None, bound.generators(x), xp=jnp
            )
            return potential if constraint is None else potential | jnp.any(constraint, axis=0)

        bad = jnp.any(jax.vmap(at)(qs), axis=0)
        return jnp.where(jnp.any(bad), jnp.argmax(bad), -1) if r else jnp.asarray(-1)

    # the steps
    def segments(self, state, history, failed, sysp):
        """The scan over segments of the XLA loop: (records of every step, nodes reached, a step
        failed, None). Not differentiated (:func:`_forward`)."""
        plan, n_steps = self.flow.plan, self.flow.n_steps
        f64 = jnp.float64

        def body(carry, _):
            state, history, n, failed = carry
            stop = jnp.where(failed, n, jnp.asarray(n_steps, n.dtype))  # a failed run takes no more steps
            out = self.loop(
                state,
                history,
                jnp.asarray(0.0, f64),
                n,
                stop,
                jnp.asarray(plan.h, f64),
                jnp.asarray(plan.tol_num, f64),
                jnp.asarray(plan.max_iter, jnp.int32),
                plan.jparams,
                sysp,
            )
            return (out.state, out.history, out.n, failed | out.failed), out.records

        init = (state, history, jnp.asarray(0, jnp.int64), failed)
        (_, _, n, failed), recs = jax.lax.scan(body, init, None, length=self.n_seg)
        seg = self.seg
        recs = jax.tree_util.tree_map(lambda a: a.reshape((self.n_seg * seg,) + a.shape[2:])[:n_steps], recs)
        return recs, n, failed, None

    def replayed(self, state, xs, sysp):
        """The records q, p, v, lambda, gamma and x of every step, replayed from the steps' solutions
        ``xs`` (:func:`livens.timestep.make_replay`): the run's values, with its derivative. A scan
        over checkpointed segments, so that reverse mode stores the states at the segments' ends
        and recomputes each segment's linearization when it transposes it (memory like
        sqrt(n_steps))."""
        plan, seg, n_steps = self.flow.plan, self.seg, self.flow.n_steps
        n_full = n_steps // seg
        f64 = jnp.float64
        h, t0 = jnp.asarray(plan.h, f64), jnp.asarray(0.0, f64)
        parts = []
        if n_full:

            def body(state, jx):
                j, x = jx
                return self.replay(state, x, t0, j * seg, n_steps, h, plan.jparams, sysp)

            segs = (jnp.arange(n_full, dtype=jnp.int64), xs[: n_full * seg].reshape((n_full, seg) + xs.shape[1:]))
            state, recs = jax.lax.scan(body, state, segs)
            parts.append(jax.tree_util.tree_map(lambda a: a.reshape((n_full * seg,) + a.shape[2:]), recs))
        if self.replay_rest is not None:
            n0 = jnp.asarray(n_full * seg, jnp.int64)
            parts.append(self.replay_rest(state, xs[n_full * seg :], t0, n0, n_steps, h, plan.jparams, sysp)[1])
        return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *parts) if len(parts) > 1 else parts[0]

    def __call__(self, q0, v0, parameters=None, rows: bool = False):
        """The run's FlowResult; ``rows``: with what its failed step started from, ``(result,
        rows)`` (:func:`~livens.driver.flow_failure.failed_rows`, for the diagnosis of a concrete call)."""
        flow, n_steps, d = self.flow, self.flow.n_steps, self.mech.d
        f64 = jnp.float64
        sysp = parameter_values(flow.problem.system, parameters, traced=True)
        q_in, v_in = jnp.asarray(q0, f64), jnp.asarray(v0, f64)
        if q_in.shape != (d,) or v_in.shape != (d,):
            raise ValueError(f"q0 and v0 must have shape ({d},); got {q_in.shape} and {v_in.shape}.")
        if flow.hold:  # a failed run: finite nodes, zero derivatives (:func:`_fenced`)
            outs, aux = _fenced(self.body)(q_in, v_in, sysp)
        else:
            outs, aux = self.body(q_in, v_in, sysp)
            outs = _loud(outs, _input_sum(q_in, v_in, sysp), ~aux["converged"])
        code, failed_step, residual = aux["failure"], aux["failed_step"], aux["residual"]
        nodal = flow.plan.scheme.capabilities.velocity_kind == "nodal"
        start = jax.lax.stop_gradient(failed_rows(outs, failed_step, nodal)) if self.throw or rows else None
        if self.throw:
            fail_res = residual[jnp.clip(failed_step, 0, n_steps - 1)]
            jax.debug.callback(self.raise_failure, code, failed_step, fail_res, start, sysp)
        t = jnp.arange(n_steps + 1, dtype=f64) * self.flow.plan.h
        k = flow.save_every
        v = outs["v"]
        result = FlowResult(
            t[::k],
            outs["q"][::k],
            outs["p"][::k],
            v[::k] if nodal else v,
            outs.get("lam"),
            outs.get("gam"),
            aux["iterations"],
            aux["converged"],
            failed_step,
            residual,
            code,
        )
        return (result, start) if rows else result

    def body(self, q_in, v_in, sysp):
        """The run from (q_in, v_in) with the System's values ``sysp``: (outs, aux), outs the
        differentiable nodes (q, p, v, lam, gam), aux the rest (converged, failure, failed_step,
        residual, iterations). The nodes after a failure are NaN, or with ``on_failure="hold"``
        the last node reached (the multipliers and step velocities the last step's, zero before it;
        zero in place of a value that is not finite)."""
        flow, plan, sch = self.flow, self.flow.plan, self.flow.plan.scheme
        n_steps, h = flow.n_steps, plan.h
        f64 = jnp.float64
        bound = self.mech.bind(sysp)
        q0, v0, start_ok, start_res, start_its = self.start(bound, q_in, v_in)
        p0 = bound.M(q0) @ v0
        state = start_state(self.mech, sch, q0, p0, v0)
        scheme_ok = jnp.bool_(True)
        if sch.start is not None:
            state, (scheme_ok, s_res, s_its) = sch.start(state, jnp.asarray(h, f64), plan.jparams, bound)
            start_res = jnp.where(start_ok, s_res, start_res)
            start_its = jnp.where(start_ok, s_its, start_its)
        history = plan.empty_history(state)
        recs, n, failed = flow.forward(self, state, history, ~(start_ok & scheme_ok), sysp)

        steps = jnp.arange(n_steps)
        step_ok = recs["ok"] & (steps < n)
        nan = jnp.asarray(jnp.nan, f64)
        broken = jnp.asarray(-1)
        if self.kept:  # the nodes of the kept steps (node 0 in place of the others)
            valid = jnp.concatenate([jnp.ones((1,), bool), step_ok])
            q = jnp.where(valid[:, None], jnp.concatenate([q0[None], recs["q"]], axis=0), q0)
            broken = self.broken_symmetry(bound, q)
        start_failed = ~start_ok | ~scheme_ok
        code = jnp.where(
            ~start_ok,
            START,
            jnp.where(
                ~scheme_ok, SCHEME_START, jnp.where(failed, STEP, jnp.where(broken >= 0, SYMMETRY + broken, NONE))
            ),
        ).astype(jnp.int32)
        converged = code == NONE
        step_ok = step_ok & (broken < 0)
        failed_step = jnp.where(converged, -1, jnp.where(start_failed | (broken >= 0), 0, n)).astype(jnp.int64)
        taken = (steps < n) | ((steps == n) & failed & ~start_failed)  # the failed step's record is real
        residual = jnp.where(taken, recs["residual"], nan)
        iterations = jnp.where(taken, recs["iterations"], 0)
        residual = jnp.where(start_failed & (steps == 0), start_res, residual)
        iterations = jnp.where(start_failed & (steps == 0), start_its.astype(iterations.dtype), iterations)

        if flow.hold:  # the last kept row in place of the others: gathered, so that no NaN is touched
            last = jax.lax.cummax(jnp.where(step_ok, steps + 1, 0))

            def nodes(first, rows):
                return jnp.concatenate([first[None], rows], axis=0)[
                    jnp.concatenate([jnp.zeros((1,), last.dtype), last])
                ]

            def per_step(rows):
                return jnp.concatenate([jnp.zeros_like(rows[:1]), rows], axis=0)[last]
        else:

            def nodes(first, rows):  # nodal array: the first node, then the node each kept step ends at
                rows = jnp.where(step_ok.reshape((-1,) + (1,) * (rows.ndim - 1)), rows, nan)
                return jnp.concatenate([first[None], rows], axis=0)

            def per_step(rows):
                return jnp.where(step_ok[:, None], rows, nan)

        nodal = sch.capabilities.velocity_kind == "nodal"
        outs = {
            "q": nodes(q0, recs["q"]),
            "p": nodes(p0, recs["p"]),
            "v": nodes(v0, recs["v"]) if nodal else per_step(recs["v"]),
        }
        rank = plan.rank  # an overconstrained system: multipliers per equation, zero on the redundant
        expand = rank.expand if rank is not None else (lambda x: x)
        for name in ("lam", "gam"):
            if name in recs:
                outs[name] = per_step(expand(recs[name]))
        if flow.hold:  # a start that is NaN itself (a NaN input) holds zeros
            outs = {k: jnp.where(converged | jnp.isfinite(a), a, 0.0) for k, a in outs.items()}
        aux = {
            "converged": converged,
            "failure": code,
            "failed_step": failed_step,
            "residual": residual,
            "iterations": iterations,
        }
        return outs, aux

    def raise_failure(self, code, failed_step, residual, start, sysp):
        """The host side of ``throw=True``: raise :class:`~livens.ConvergenceError` for a failed run
        (called per member under ``vmap``), a failed step's message with the diagnosis of
        :func:`livens.simulate` (from ``start``, what it started from; run on the CPU, beside the
        program that waits for this callback)."""
        code, k, r = int(code), int(failed_step), float(residual)
        if code == NONE:
            return
        f = self.flow
        advice = None
        if code == STEP:
            with jax.default_device(jax.devices("cpu")[0]):
                advice = step_advice(f.plan, self.mech, sysp, k, r, start)
        message = failure_message((code, k, r), f.scheme, f.h, f.n_steps, f.tol, self.kept, None, advice, f.hold)
        raise_thrown(message, k, k * f.h, r)


# ------------------------------------------------------------------ the forward run and its derivative
def _forward(run: "_Run", state, history, failed, sysp):
    """The records of every step, with each step's solution (field "x"): computed by the native
    kernel where the engine runs the loop natively (:class:`~livens.driver.native_flow.NativeForward`),
    else by the XLA scan of :meth:`_Run.segments`; never differentiated. Their derivative is that of
    the replay from the recorded solutions (:meth:`_Run.replayed`): each step's implicit derivative
    at its solution, with no Newton iteration re-run; both modes run natively where the engine
    makes the kernels (:class:`~livens.driver.native_flow.NativeDerivatives`)."""
    native = run.native(state, history, failed, sysp)
    primal = run.segments if native is None else native

    def tangent(primals, out, tangents):
        state, _, _, sysp = primals
        recs, n, _, starts = out
        xs = recs["x"]
        kernels = None if starts is None else run.derivatives(state, sysp)
        if kernels is None:
            _, d = jax.jvp(lambda s, p: run.replayed(s, xs, p), (state, sysp), (tangents[0], tangents[3]))
        else:
            d = kernels.tangent(run.replayed, state, starts, xs, n, sysp, tangents[0], tangents[3])
        d_recs = {k: d[k] if k in d else _zero_tangent(v) for k, v in recs.items()}
        return d_recs, _zero_tangent(n), _zero_tangent(out[2]), jax.tree_util.tree_map(_zero_tangent, starts)

    # the adjoint decides how the records are differentiated (Implicit: the replay's implicit derivative)
    records = run.flow.adjoint.differentiable(primal, tangent)
    recs, n, failed, _ = records(state, history, failed, sysp)
    return recs, n, failed


def _zero_tangent(x):
    """The zero tangent of an output that carries no derivative (float0 for integers and booleans)."""
    if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(jnp.shape(x), dtype=jax.dtypes.float0)


class FlowFunction:
    """``F(q0, v0, parameters=None) -> FlowResult``: the run as a pure function (:func:`livens.flow`).

    ``consistent`` (default True): the given (q0, v0) is mapped onto the constraint manifold of the
    call's parameter values first (derivatives are then along consistent starts); False: a start
    off the manifold is refused (concrete values) or fails the run (traced). ``throw``: under a
    transformation, a failed run raises :class:`~livens.ConvergenceError` at run time (through a
    host callback; inside ``jax.jit`` it arrives wrapped in JAX's runtime error, which
    :func:`livens.raising` turns back into it); concrete calls always raise. ``failed`` ("nan" or
    "hold", :data:`FAILED`, the ``fill`` of its :class:`~livens.driver.options.NaNFlag` policy): what a
    failed run returns (module docstring). :meth:`configured` gives a copy with other options."""

    def __init__(
        self,
        plan,
        executor,
        output,
        on_failure,
        adjoint,
        consistent: bool = True,
        throw: bool = False,
    ):
        self.plan, self.executor, self.output, self.on_failure, self.adjoint = (
            plan,
            executor,
            output,
            on_failure,
            adjoint,
        )
        self.problem, self.scheme = plan.problem, plan.scheme.name
        self.h, self.n_steps, self.tol = float(plan.h), plan.steps, plan.tol
        self.save_every = output.save_every
        self.consistent, self.throw = bool(consistent), bool(throw)
        self.failed = on_failure.fill
        self.hold = on_failure.hold()
        self.segments = executor.segments(self.n_steps)
        self._programs: dict = {}
        self._mechs: dict = {}
        self._checks = None

    def configured(
        self, consistent: bool | None = None, throw: bool | None = None, on_failure: str | None = None
    ) -> "FlowFunction":
        """This flow with other options (None: unchanged)."""
        return FlowFunction(
            self.plan,
            self.executor,
            self.output,
            self.on_failure if on_failure is None else NaNFlag(on_failure),
            self.adjoint,
            self.consistent if consistent is None else consistent,
            self.throw if throw is None else throw,
        )

    def forward(self, run: _Run, state, history, failed, sysp):
        """The records of every step (:func:`_forward`)."""
        return _forward(run, state, history, failed, sysp)

    # the programs
    def _run(self, mech, throw: bool) -> _Run:
        key = (tuple(s.key() for s in mech.symmetries), mech.invariant_constraints, throw)
        hit = self._programs.get(key)
        if hit is None:
            run = _Run(self, mech, throw)
            hit = self._programs[key] = (run, jax.jit(run), jax.jit(functools.partial(run, rows=True)))
        return hit

    @property
    def _fn(self):
        """The run of the default symmetries as a traceable function (for tests and tools)."""
        return self._run(self.plan.mech, self.throw)[0]

    def _mech_for(self, parameters):
        """The Mechanics whose kept symmetries are those of these concrete parameter values
        (:func:`livens.problem.exact_symmetries`, as :func:`livens.simulate` decides them)."""
        plan = self.plan
        if parameters is None or not plan.scheme.capabilities.symmetries or not self.problem.symmetries:
            return plan.mech
        values = parameter_values(self.problem.system, parameters)
        key = tuple((k, np.asarray(v).tobytes()) for k, v in sorted(values.items()))
        hit = self._mechs.get(key)
        if hit is None:
            base = mechanics(self.problem.solved_system, self.problem.q0)
            kept, _, invariant = exact_symmetries(
                self.problem, base.bind({k: jnp.asarray(v) for k, v in values.items()})
            )
            hit = self._mechs[key] = mechanics(self.problem.solved_system, self.problem.q0, kept, invariant)
        return hit

    def _mech_for_traced(self, parameters: dict):
        """The Mechanics of a call whose ``parameters`` are traced (some or all of them): the kept
        symmetries are those exact for every value of the traced parameters (:meth:`kept_symmetries`);
        a symmetry that the concrete values keep and the traced ones drop is named in a
        :class:`TracedSymmetryNotice`, once per flow and set of traced names."""
        traced = tuple(sorted(k for k, v in parameters.items() if _traced(v)))
        concrete = {k: v for k, v in parameters.items() if not _traced(v)}
        mech, dropped = self._symmetries_for(traced, concrete)
        if dropped and ("notice", traced) not in self._mechs:
            self._mechs[("notice", traced)] = True
            kept = ", ".join(repr(s.name) for s in mech.symmetries) or "none"
            why = "; ".join(f"{name!r}: {reason}" for name, reason in dropped.items())
            warnings.warn(
                f"lv.flow of {self.scheme}: with {', '.join(map(repr, traced))} traced, the flow keeps the "
                f"symmetries exact for every value of them ({kept}) and drops {why}. The momentum maps of "
                "the dropped ones are not conserved by construction; call F on concrete values of these "
                "parameters to keep the symmetries those values respect.",
                TracedSymmetryNotice,
                stacklevel=3,
            )
        return mech

    def _symmetries_for(self, traced: tuple, concrete: dict):
        """(Mechanics, {name: why dropped}) for ``traced`` parameter names and ``concrete`` values of
        others: a symmetry is kept where it is exact (:func:`livens.problem.exact_symmetries`) at the
        concrete values with the traced ones at their defaults and at :data:`TRACED_SAMPLES` random
        values about them (default + 0.1 (1 + |default|) N(0, 1), entrywise); the midpoint
        orthogonality of the constraint terms likewise. Dropped: those the concrete values keep."""
        plan, problem = self.plan, self.problem
        if not plan.scheme.capabilities.symmetries or not problem.symmetries:
            return plan.mech, {}
        values = parameter_values(problem.system, concrete)
        key = (traced, tuple((k, np.asarray(v).tobytes()) for k, v in sorted(values.items())))
        hit = self._mechs.get(key)
        if hit is not None:
            return hit
        rng = np.random.default_rng(0)
        samples = [values]
        for _ in range(TRACED_SAMPLES if traced else 0):
            samples.append(
                {
                    k: v + 0.1 * (1.0 + np.abs(v)) * rng.standard_normal(np.shape(v)) if k in traced else v
                    for k, v in values.items()
                }
            )
        base = mechanics(problem.solved_system, problem.q0)
        kept, dropped, invariant = list(problem.symmetries), {}, True
        for j, vals in enumerate(samples):
            bound = base.bind({k: jnp.asarray(v) for k, v in vals.items()})
            here, why, _ = exact_symmetries(problem, bound)
            for sym in kept:
                if not any(sym is k for k in here) and j > 0 and sym.name not in dropped:
                    at = ", ".join(f"{k} = {np.round(vals[k], 4).tolist()}" for k in traced)
                    dropped[sym.name] = f"{why[sym.name]} at {at}"
            kept = [sym for sym in kept if any(sym is k for k in here)]
        for vals in samples:
            bound = base.bind({k: jnp.asarray(v) for k, v in vals.items()})
            invariant = invariant and constraints_midpoint_orthogonal(bound, kept, problem.q0)
        out = (mechanics(problem.solved_system, problem.q0, tuple(kept), invariant), dropped)
        self._mechs[key] = out
        return out

    def kept_symmetries(self, parameters: dict | None = None, traced: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The names of the symmetries the flow keeps (an energy-momentum scheme conserves their
        momentum maps by construction) in a call with these concrete ``parameters`` and the
        parameters named in ``traced`` traced (inside ``jax.grad``, ``jax.jit``): with nothing
        traced, those exact for the values of the call, as :func:`livens.simulate` decides them;
        with traced parameters, those exact at their defaults (or given values) and at random values
        about them, that is for every value of them. Schemes that keep no symmetry: ()."""
        if not self.plan.scheme.capabilities.symmetries:
            return ()
        with _on_values():  # also where called while a program is traced
            if traced:
                concrete = {k: v for k, v in (parameters or {}).items() if k not in traced}
                mech = self._symmetries_for(tuple(sorted(traced)), concrete)[0]
            else:
                mech = self._mech_for(parameters)
        return tuple(s.name for s in mech.symmetries)

    def _refuse_inconsistent(self, q0, v0, parameters) -> None:
        """``consistent=False`` on concrete values: refuse a start off the manifold as
        :func:`livens.simulate` does (:func:`livens.validation.check_initial_state`)."""
        mech = self.plan.mech
        if mech.m == 0:
            return
        if self._checks is None:
            self._checks = jax.jit(lambda q, v, sysp: (mech.bind(sysp).g(q), mech.bind(sysp).G(q)))
        sysp = parameter_values(self.problem.system, parameters, traced=True)
        g0, G0 = (np.asarray(a) for a in self._checks(jnp.asarray(q0, jnp.float64), jnp.asarray(v0, jnp.float64), sysp))
        check_initial_state(
            self.problem.solved_system,
            np.asarray(q0, float),
            np.asarray(v0, float),
            g0,
            G0,
            self.problem.consistency_tol,
        )

    def __call__(self, q0, v0, parameters=None) -> FlowResult:
        if _traced(q0, v0, parameters):
            with _on_values():  # the symmetry checks run on values, not staged
                mech = self._mech_for_traced(parameters) if _traced(parameters) else self._mech_for(parameters)
            with engine.serial_blas():
                try:
                    return self._run(mech, self.throw)[1](q0, v0, parameters)
                except jax.errors.JaxRuntimeError as e:  # a throw run at once (jax.grad, jax.vmap, no jit)
                    reraise_thrown(e)
                    raise
        if not self.consistent:
            self._refuse_inconsistent(q0, v0, parameters)
        mech = self._mech_for(parameters)
        program = self._run(mech, False)[2]
        with engine.serial_blas():  # runs at once where called on concrete values (livens.engine.threads)
            res, start = jax.block_until_ready(program(q0, v0, parameters))
        advice = None
        if int(res.failure) == STEP:  # the words lv.simulate has for the failed step
            k = int(res.failed_step)
            r = float(np.asarray(res.residual)[k])
            advice = step_advice(
                self.plan, mech, parameter_values(self.problem.system, parameters, traced=True), k, r, start
            )
        return self.check(res, advice=advice)

    def check(self, result: FlowResult, parameters: dict | None = None, *, advice: str | None = None) -> FlowResult:
        """Raise :class:`~livens.ConvergenceError` if the start or a step of ``result`` failed (the
        first failed member of a batched result, named with the count). A failed step's message ends
        with the diagnosis :func:`livens.simulate` gives the same step where the result's nodes are
        not thinned (``save_every=1``) and the call's ``parameters`` are given (those of the call;
        under ``jax.vmap`` the batched values, whose member is taken) or the System has none;
        ``advice``: that sentence, known already (:func:`failure_message`)."""
        conv = np.asarray(result.converged)
        if conv.all():
            return result
        codes = np.broadcast_to(np.asarray(result.failure if result.failure is not None else STEP), conv.shape)
        steps = np.broadcast_to(np.asarray(result.failed_step), conv.shape)
        resid = np.asarray(result.residual) if result.residual is not None else np.full(conv.shape + (1,), np.nan)
        bad = np.flatnonzero(~conv.ravel())
        b = int(bad[0])
        k = int(steps.ravel()[b])
        r = float(resid.reshape(conv.size, -1)[b, max(k, 0)])
        code = int(codes.ravel()[b])
        if advice is None and code == STEP:
            advice = self._member_advice(result, np.unravel_index(b, conv.shape), k, r, parameters)
        member = b if conv.ndim else None
        kept = self._fn.kept
        msg = failure_message(
            (code, k, r), self.scheme, self.h, self.n_steps, self.tol, kept, member, advice, self.hold
        )
        if conv.ndim:
            msg += f" {bad.size} of {conv.size} members failed: {bad[:10].tolist()}."
        raise ConvergenceError(msg, step=k, time=k * self.h, residual=r)

    def _member_advice(self, result: FlowResult, idx: tuple, k: int, r: float, parameters) -> str | None:
        """:func:`~livens.driver.flow_failure.step_advice` for the failed step ``k`` of the member
        ``idx`` of ``result`` (``()``: not batched), where the nodes and the call's parameter values
        determine what it started from (:meth:`check`); else None."""
        defaults = self.problem.system.parameters
        if self.save_every != 1 or (defaults and parameters is None) or result.q is None:
            return None
        values = {}
        for name, value in (parameters or {}).items():
            value, shape = np.asarray(value), np.shape(defaults.get(name)) if defaults else ()
            if value.ndim == len(shape) + len(idx):
                value = value[idx]
            elif value.ndim != len(shape):
                return None
            values[name] = value
        fields = ("q", "p", "v", "lam", "gam")
        outs = {f: None if getattr(result, f) is None else np.asarray(getattr(result, f))[idx] for f in fields}
        nodal = self.plan.scheme.capabilities.velocity_kind == "nodal"
        start = failed_rows(outs, k, nodal)
        values = values if defaults else None
        return step_advice(
            self.plan, self._mech_for(values), parameter_values(self.problem.system, values, traced=True), k, r, start
        )

    def __repr__(self):
        return f"FlowFunction({self.scheme}, h={self.h:g}, n_steps={self.n_steps})"


def flow_function(plan, executor, output, on_failure, adjoint) -> FlowFunction:
    """The run of ``plan`` as a :class:`FlowFunction` (module docstring)."""
    return FlowFunction(plan, executor, output, on_failure, adjoint)
