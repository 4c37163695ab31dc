"""The in-graph executor: a whole run inside a program that JAX can transform (:func:`livens.flow`).

The call of a :class:`FlowFunction` is one program:

1. the start: the given (q0, v0) mapped onto the constraint manifold of the call's parameter
   values (:func:`livens.manifold.project`, differentiable), or, with ``consistent=False``,
   checked against it (``Problem.consistency_tol``); then the scheme's own start (SLO09 eq 15, 17);
2. the chunk loop of :mod:`livens.timestep` as a ``lax.scan`` over segments of steps, each a
   ``jax.checkpoint``-ed loop, so that reverse mode stores only the states at the ends of the
   segments and recomputes each segment when it is differentiated (memory like sqrt(n_steps)); each
   step's Newton solution carries its derivative by the implicit function theorem
   (:func:`livens.solvers.newton.implicit`). Where the engine compiles the loop natively, a call
   that is not differentiated runs it there (:func:`_native_forward`): the same loop, the speed of
   :func:`livens.simulate`; a derivative recomputes it in the XLA program;
3. the failure policy :class:`~livens.driver.options.NaNFlag`: once the start or a step fails, no
   later segment takes a step, the nodes after it are NaN, ``converged`` is False and the
   derivative of every output with respect to every input is NaN (:func:`_loud`), so that a
   gradient never looks valid where the loss is not;
4. for a scheme that keeps symmetries (EM, EM-G), the kept symmetries checked at the nodes with the
   call's parameter values: values that break one fail the run with a message naming it. Called on
   concrete parameter values, the symmetries are chosen for those values, as :func:`livens.simulate`
   does.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import engine
from ..checks import SYMMETRY_RTOL, check_initial_state, exact_symmetries
from ..errors import ConvergenceError
from ..manifold import project
from ..mechanics import mechanics
from ..schemes.base import State
from ..system import parameter_values
from ..timestep import make_loop
from .records import record_layout

NONE, START, SCHEME_START, STEP, SYMMETRY = 0, 1, 2, 3, 10
"""The codes of :attr:`FlowResult.failure`: nothing failed; the initial state (its projection onto
the manifold did not converge, or with ``consistent=False`` it lies off the manifold); the scheme's
own start (SLO09 eq 15, 17); a time step; SYMMETRY + j: the call's parameter values break the j-th
symmetry the scheme keeps."""


class FlowResult(NamedTuple):
    """The nodes of a run of :func:`livens.flow`: t (N+1,), q, p (N+1, d), v (the scheme's
    velocities: (N+1, d) nodal, else (N, d)), lam (N, m), gam (N, m) or None, iterations (N,) Newton
    iterations per step, converged (a bool: the start and every step converged), failed_step (the
    index of the first failed step, 0 for a failed start, -1 if none), residual (N,) Newton's
    ||R||_inf per step (NaN for steps not taken; for a failed start, entry 0 holds the start's),
    failure (a code: :data:`NONE`, :data:`START`, :data:`SCHEME_START`, :data:`STEP`, or
    :data:`SYMMETRY` + j). With ``save_every = k`` the node arrays hold every k-th node. Under
    ``jax.vmap`` every field has the members' axis first: converged and failed_step are per member."""

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


def _traced(*xs) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for x in xs for leaf in jax.tree_util.tree_leaves(x))


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


def failure_message(result_fields, scheme: str, h: float, n_steps: int, tol, symmetries=(), member=None) -> str:
    """The message of a failed run from (failure, failed_step, residual of what failed)."""
    failure, k, resid = result_fields
    who = f" (member {member} of the vmapped call)" if member is not None else ""
    r = f"{resid:.3e}" if np.isfinite(resid) else "NaN"
    if failure == START:
        return (
            f"lv.flow of {scheme}{who}: the initial state is not on the constraint manifold of this call's parameter "
            f"values: max(|g(q0)|, |G(q0) v0|) = {r}, or its projection did not converge. Pass a consistent (q0, v0) "
            "(lv.consistent_initial_state(system, q0, v0, parameters=...)), or let lv.flow project it "
            "(consistent=True, the default), from a q0 closer to the manifold."
        )
    if failure == SCHEME_START:
        return (
            f"lv.flow of {scheme}{who}: the start step (SLO09 eq 15, 17) did not converge: residual {r} with "
            f"h = {h:g}. Try a smaller h."
        )
    if failure >= SYMMETRY:
        j = failure - SYMMETRY
        name = symmetries[j] if 0 <= j < len(symmetries) else f"#{j}"
        return (
            f"lv.flow of {scheme}{who}: the parameter values of this call break the symmetry {name!r}, which the "
            "flow keeps by construction (it was decided for the System's default values): its discrete gradient "
            "would impose a conservation law these values do not have. Call F on concrete parameter values (the "
            "symmetries are then chosen for them), or build the flow from problem.replace(symmetries=[...]) "
            "without it. The nodes are NaN."
        )
    return (
        f"Newton did not converge in step {k + 1} of {n_steps} (t = {k * h:.6g} -> {(k + 1) * h:.6g}) of {scheme} "
        f"in lv.flow{who} with h = {h:g} (tol = {tol}): residual {r}. The nodes after it are NaN and every "
        "derivative of the run is NaN. The flow has no rescue (its iterations are not differentiable): use a "
        "smaller h, a larger max_iter, or other initial values."
    )


# ------------------------------------------------------------------ the run as a program
class _Run:
    """The traced run of one Mechanics (one set of kept symmetries): :meth:`__call__` is
    ``(q0, v0, parameters) -> FlowResult``."""

    def __init__(self, flow: "FlowFunction", mech, throw: bool):
        self.flow, self.mech, self.throw = flow, mech, throw
        plan = flow.plan
        self.seg, self.n_seg = flow.segments
        self.loop = make_loop(mech, plan.scheme, plan.guess, self.seg, None, plan.newton, differentiable=True)
        self.segment_fn = jax.checkpoint(self.loop)
        self.kept = tuple(s.name for s in mech.symmetries) if plan.scheme.capabilities.symmetries else ()
        self._native = False  # not yet made

    def native(self, state, history, failed, sysp):
        """The :class:`_NativeForward` of this run (made at the first trace), or None."""
        if self._native is False:
            self._native = _NativeForward.make(self, state, history, failed, sysp)
        return self._native

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
        G(q) xi q relative to the sizes involved, at :data:`livens.checks.SYMMETRY_RTOL` (the
        criterion of :func:`livens.checks.symmetry_defect`)."""
        r = len(self.kept)
        idx = np.unique(np.linspace(0, q.shape[0] - 1, min(8, q.shape[0])).round().astype(int))
        qs = jax.lax.stop_gradient(q[idx])

        def at(x):
            Z = bound.generators(x)
            zn = jnp.linalg.norm(Z, axis=0)
            dV = bound.dV(x)
            bad = jnp.abs(dV @ Z) > SYMMETRY_RTOL * (jnp.linalg.norm(dV) * zn + 1e-300)
            if bound.m:
                G = bound.G(x)
                lim = SYMMETRY_RTOL * (jnp.linalg.norm(G, axis=1)[:, None] * zn[None, :] + 1e-300)
                bad = bad | jnp.any(jnp.abs(G @ Z) > lim, axis=0)
            return bad

        bad = jnp.any(jax.vmap(at)(qs), axis=0)
        return jnp.where(jnp.any(bad), jnp.argmax(bad), -1) if r else jnp.asarray(-1)

    # the steps
    def segments(self, state, history, failed, sysp):
        """The scan over segments: (records of every step, nodes reached, a step failed)."""
        plan, n_steps = self.flow.plan, self.flow.n_steps
        f64 = jnp.float64

        def body(carry, _):
            state, history, n, failed = carry
            stop = jnp.where(failed, n, jnp.asarray(n_steps, n.dtype))  # a failed run takes no more steps
            out = self.segment_fn(
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
        return recs, n, failed

    def __call__(self, q0, v0, parameters=None) -> FlowResult:
        flow, plan, sch = self.flow, self.flow.plan, self.flow.plan.scheme
        n_steps, h, d, m = flow.n_steps, plan.h, self.mech.d, self.mech.m
        f64 = jnp.float64
        sysp = flow.system_values(parameters)
        bound = self.mech.bind(sysp)
        q_in, v_in = jnp.asarray(q0, f64), jnp.asarray(v0, f64)
        if q_in.shape != (d,) or v_in.shape != (d,):
            raise ValueError(f"q0 and v0 must have shape ({d},); got {q_in.shape} and {v_in.shape}.")
        q0, v0, start_ok, start_res, start_its = self.start(bound, q_in, v_in)
        p0 = bound.M(q0) @ v0
        z = jnp.zeros((m,), f64)
        comp = (jnp.zeros_like(q0), jnp.zeros_like(p0)) if sch.increments else None
        state = State(q=q0, p=p0, v=v0, lam=z, gam=z, comp=comp)
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

        def nodes(first, rows):  # nodal array: the first node, then the node each kept step ends at
            rows = jnp.where(step_ok.reshape((-1,) + (1,) * (rows.ndim - 1)), rows, nan)
            return jnp.concatenate([first[None], rows], axis=0)

        nodal = sch.capabilities.velocity_kind == "nodal"
        outs = {
            "q": nodes(q0, recs["q"]),
            "p": nodes(p0, recs["p"]),
            "v": nodes(v0, recs["v"]) if nodal else jnp.where(step_ok[:, None], recs["v"], nan),
        }
        if "lam" in recs:
            outs["lam"] = jnp.where(step_ok[:, None], recs["lam"], nan)
        if "gam" in recs:
            outs["gam"] = jnp.where(step_ok[:, None], recs["gam"], nan)
        outs = _loud(outs, _input_sum(q_in, v_in, sysp), ~converged)
        if self.throw:
            fail_res = residual[jnp.clip(failed_step, 0, n_steps - 1)]
            jax.debug.callback(self.raise_failure, code, failed_step, fail_res)
        t = jnp.arange(n_steps + 1, dtype=f64) * h
        k = flow.save_every
        v = outs["v"]
        return FlowResult(
            t[::k],
            outs["q"][::k],
            outs["p"][::k],
            v[::k] if nodal else v,
            outs.get("lam"),
            outs.get("gam"),
            iterations,
            converged,
            failed_step,
            residual,
            code,
        )

    def raise_failure(self, code, failed_step, residual):
        """The host side of ``throw=True``: raise :class:`~livens.ConvergenceError` for a failed run
        (called per member under ``vmap``)."""
        code, k, r = int(code), int(failed_step), float(residual)
        if code == NONE:
            return
        f = self.flow
        raise ConvergenceError(
            failure_message((code, k, r), f.scheme, f.h, f.n_steps, f.tol, self.kept),
            step=k,
            time=k * f.h,
            residual=r,
        )


# ------------------------------------------------------------------ the forward run, native where it can be
class _NativeForward:
    """The records of a run from the engine's native kernel of the same chunk loop (the one
    :func:`livens.simulate` runs), called from the program through a host callback: the forward run
    of a call that is not differentiated. Its derivative is that of the XLA run
    (:meth:`_Run.segments`, a ``custom_jvp``), whose values agree with the kernel's to round-off."""

    def __init__(self, run: "_Run", kernel, layout, shapes):
        self.run, self.kernel, self.layout, self.shapes = run, kernel, layout, shapes

    @classmethod
    def make(cls, run: "_Run", state, history, failed, sysp):
        """The native forward of ``run`` for arguments of these shapes, or None where the engine runs
        no native kernel for it (backend "xla", no C compiler, a loop the translator refuses)."""
        from ..engine.native.runner import runs_natively

        plan, mech, chunk = run.flow.plan, run.mech, _NATIVE_CHUNK
        size = engine.loop_size(plan.unknowns, mech.d, mech.m)
        if not runs_natively(plan.engine, size):
            return None
        spec = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), (state, history)
        )
        layout = record_layout(plan.scheme, mech, plan.guess, spec[0], plan.h, plan.params)

        def build(**opts):
            return make_loop(mech, plan.scheme, plan.guess, chunk, layout, plan.newton, **opts)

        runner = engine.single_loop(build, plan.unknowns, mech.d, mech.m, plan.engine)
        consts = plan.consts()
        sys_spec = None if sysp is None else {k: np.zeros(jnp.shape(v)) for k, v in sysp.items()}
        args = (*spec, np.float64(0.0), np.int64(0), consts[0], *consts[1:5], sys_spec)
        try:
            kernel = runner.kernel(*args)
        except Exception:  # noqa: BLE001 - backend="native" refused: the XLA program runs it
            return None
        if kernel is None:
            return None
        n_steps = run.flow.n_steps
        recs = {k: jax.ShapeDtypeStruct((n_steps, *shape), np.dtype(dtype)) for k, shape, dtype in layout}
        shapes = (recs, jax.ShapeDtypeStruct((), jnp.int64), jax.ShapeDtypeStruct((), jnp.bool_))
        return cls(run, kernel, layout, shapes)

    def host(self, state, history, failed, sysp):
        """The run on the host: chunks of the native kernel until the last step or a failure."""
        plan, n_steps = self.run.flow.plan, self.run.flow.n_steps
        layout, width = self.layout, self.layout.width
        rows = np.zeros((n_steps, width))
        rows[:, layout.column("ok")] = 1.0  # steps not taken: the skipped rows of the loop
        n, bad = 0, bool(failed)
        consts = plan.consts()
        while n < n_steps and not bad:
            out = self.kernel(state, history, np.float64(0.0), np.int64(n), np.int64(n_steps), *consts[1:5], sysp)
            state, history, n_new, f, r = out
            n_new, bad = int(np.asarray(n_new)), bool(np.asarray(f))
            r = np.asarray(r)
            took = min(r.shape[0], n_steps - n)
            rows[n : n + took] = r[:took]
            n = n_new
        recs = layout.unpack(rows)
        recs_shape, n_shape, failed_shape = self.shapes
        recs = {k: np.asarray(recs[k], dtype=recs_shape[k].dtype) for k in recs_shape}
        return recs, np.asarray(n, n_shape.dtype), np.asarray(bad, failed_shape.dtype)

    def __call__(self, state, history, failed, sysp):
        return jax.pure_callback(self.host, self.shapes, state, history, failed, sysp, vmap_method="sequential")


_NATIVE_CHUNK = 512
"""Steps per call of the native kernel in a run of :class:`_NativeForward`."""


def _forward(run: "_Run", state, history, failed, sysp):
    """The records of every step: the native kernel where it runs the loop and the call is not
    differentiated, else (and for every derivative) the XLA scan of :meth:`_Run.segments`."""
    native = run.native(state, history, failed, sysp)
    if native is None:
        return run.segments(state, history, failed, sysp)

    @jax.custom_jvp
    def records(state, history, failed, sysp):
        return native(state, history, failed, sysp)

    @records.defjvp
    def records_jvp(primals, tangents):
        return jax.jvp(run.segments, primals, tangents)

    return records(state, history, failed, sysp)


class FlowFunction:
    """``F(q0, v0, parameters=None) -> FlowResult``: the run as a pure function (:func:`livens.flow`).

    ``consistent`` (default True): the given (q0, v0) is mapped onto the constraint manifold of the
    call's parameter values first (derivatives are then along consistent starts); False: a start
    off the manifold is refused (concrete values) or fails the run (traced). ``throw``: under a
    transformation, a failed run raises :class:`~livens.ConvergenceError` at run time (through a
    host callback; inside ``jax.jit`` it arrives wrapped in JAX's runtime error); concrete calls
    always raise. :meth:`configured` gives a copy with other options."""

    def __init__(self, plan, executor, output, on_failure, adjoint, consistent: bool = True, throw: bool = False):
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
        n = self.n_steps
        seg = executor.segment
        if seg is None:  # about sqrt(n) segments of about sqrt(n) steps, the fewest padded steps
            n_seg = -(-n // max(1, math.isqrt(n)))
            seg = -(-n // n_seg)
        n_seg = -(-n // seg)
        self.segments = (seg, n_seg)
        self._programs: dict = {}
        self._mechs: dict = {}
        self._checks = None

    def configured(self, consistent: bool | None = None, throw: bool | None = None) -> "FlowFunction":
        """This flow with other options (None: unchanged)."""
        return FlowFunction(
            self.plan,
            self.executor,
            self.output,
            self.on_failure,
            self.adjoint,
            self.consistent if consistent is None else consistent,
            self.throw if throw is None else throw,
        )

    def forward(self, run: _Run, state, history, failed, sysp):
        """The records of every step (:func:`_forward`)."""
        return _forward(run, state, history, failed, sysp)

    def system_values(self, parameters):
        """The System's parameter values of a call: the defaults with ``parameters`` in place (JAX arrays)."""
        defaults = self.problem.system.parameters
        if parameters is not None and defaults is None:
            raise ValueError("This System has no parameters; call F(q0, v0) without parameters.")
        if defaults is None:
            return None
        if parameters is not None and not isinstance(parameters, dict):
            raise ValueError(f"parameters must be a dict name -> value; got {type(parameters).__name__}.")
        sysp = {k: jnp.asarray(v, jnp.float64) for k, v in defaults.items()}
        for k, v in (parameters or {}).items():
            if k not in sysp:
                raise ValueError(f"Unknown parameter {k!r}; the System's parameters: {', '.join(sysp)}.")
            v = jnp.asarray(v, jnp.float64)
            if v.shape != sysp[k].shape:
                raise ValueError(
                    f"Parameter {k!r} must have shape {sysp[k].shape} (that of its default); got {v.shape}."
                )
            sysp[k] = v
        return sysp

    # the programs
    def _run(self, mech, throw: bool) -> _Run:
        key = (tuple(s.key() for s in mech.symmetries), mech.invariant_constraints, throw)
        hit = self._programs.get(key)
        if hit is None:
            run = _Run(self, mech, throw)
            hit = self._programs[key] = (run, jax.jit(run))
        return hit

    @property
    def _fn(self):
        """The run of the default symmetries as a traceable function (for tests and tools)."""
        return self._run(self.plan.mech, self.throw)[0]

    def _mech_for(self, parameters):
        """The Mechanics whose kept symmetries are those of these concrete parameter values
        (:func:`livens.checks.exact_symmetries`, as :func:`livens.simulate` decides them)."""
        plan = self.plan
        if parameters is None or not plan.scheme.capabilities.symmetries or not self.problem.symmetries:
            return plan.mech
        values = parameter_values(self.problem.system, parameters)
        key = tuple((k, np.asarray(v).tobytes()) for k, v in sorted(values.items()))
        hit = self._mechs.get(key)
        if hit is None:
            base = mechanics(self.problem.system, self.problem.q0)
            kept, _, invariant = exact_symmetries(
                self.problem, base.bind({k: jnp.asarray(v) for k, v in values.items()})
            )
            hit = self._mechs[key] = mechanics(self.problem.system, self.problem.q0, kept, invariant)
        return hit

    def _refuse_inconsistent(self, q0, v0, parameters) -> None:
        """``consistent=False`` on concrete values: refuse a start off the manifold as
        :func:`livens.simulate` does (:func:`livens.checks.check_initial_state`)."""
        mech = self.plan.mech
        if mech.m == 0:
            return
        if self._checks is None:
            self._checks = jax.jit(lambda q, v, sysp: (mech.bind(sysp).g(q), mech.bind(sysp).G(q)))
        sysp = self.system_values(parameters)
        g0, G0 = (np.asarray(a) for a in self._checks(jnp.asarray(q0, jnp.float64), jnp.asarray(v0, jnp.float64), sysp))
        check_initial_state(
            self.problem.system, np.asarray(q0, float), np.asarray(v0, float), g0, G0, self.problem.consistency_tol
        )

    def __call__(self, q0, v0, parameters=None) -> FlowResult:
        if _traced(q0, v0, parameters):
            mech = self.plan.mech if _traced(parameters) else self._mech_for(parameters)
            with engine.serial_blas():
                return self._run(mech, self.throw)[1](q0, v0, parameters)
        if not self.consistent:
            self._refuse_inconsistent(q0, v0, parameters)
        _, program = self._run(self._mech_for(parameters), False)
        with engine.serial_blas():  # runs at once where called on concrete values (livens.engine.threads)
            res = jax.block_until_ready(program(q0, v0, parameters))
        return self.check(res)

    def check(self, result: FlowResult) -> FlowResult:
        """Raise :class:`~livens.ConvergenceError` if the start or a step of ``result`` failed (the
        first failed member of a batched result, named with the count)."""
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
        member = b if conv.ndim else None
        kept = self._fn.kept
        msg = failure_message((int(codes.ravel()[b]), k, r), self.scheme, self.h, self.n_steps, self.tol, kept, member)
        if conv.ndim:
            msg += f" {bad.size} of {conv.size} members failed: {bad[:10].tolist()}."
        raise ConvergenceError(msg, step=k, time=k * self.h, residual=r)

    def __repr__(self):
        return f"FlowFunction({self.scheme}, h={self.h:g}, n_steps={self.n_steps})"


def flow_function(plan, executor, output, on_failure, adjoint) -> FlowFunction:
    """The run of ``plan`` as a :class:`FlowFunction` (module docstring)."""
    return FlowFunction(plan, executor, output, on_failure, adjoint)
