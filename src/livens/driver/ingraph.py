"""The in-graph executor: a whole run inside a program that JAX can transform (:func:`livens.flow`).

The chunk loop of :mod:`livens.timestep` runs as a ``lax.scan`` over segments of steps, each a
``jax.checkpoint``-ed loop, so that reverse mode stores only the states at the ends of the segments
and recomputes each segment when it is differentiated (memory like sqrt(n_steps)). Each step's
Newton solution carries its derivative by the implicit function theorem
(:func:`livens.solvers.newton.implicit`). The failure policy is :class:`~livens.driver.options.NaNFlag`:
the nodes after a failed step are NaN and the result says so.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import engine
from ..errors import ConvergenceError
from ..schemes.base import State
from ..timestep import make_loop


class FlowResult(NamedTuple):
    """The nodes of a run of :func:`livens.flow`: t (N+1,), q, p (N+1, d), v (the scheme's
    velocities: (N+1, d) nodal, else (N, d)), lam (N, m), gam (N, m) or None, iterations (N,) Newton
    iterations per step, converged (a bool: every step converged), failed_step (the index of the
    first failed step, -1 if none). With ``save_every = k`` the node arrays hold every k-th node."""

    t: Any
    q: Any
    p: Any
    v: Any
    lam: Any
    gam: Any
    iterations: Any
    converged: Any
    failed_step: Any


def _traced(*xs) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for x in xs for leaf in jax.tree_util.tree_leaves(x))


class FlowFunction:
    """``F(q0, v0, parameters=None) -> FlowResult``: the run as a pure function (:func:`livens.flow`)."""

    def __init__(self, fn, problem, scheme, h, n_steps, tol):
        self._fn = fn
        self.problem, self.scheme, self.h, self.n_steps, self.tol = problem, scheme, h, n_steps, tol
        self._jit = jax.jit(fn)

    def __call__(self, q0, v0, parameters=None) -> FlowResult:
        with engine.serial_blas():  # runs at once where called on concrete values (livens.engine.threads)
            res = self._jit(q0, v0, parameters)
            if not _traced(res.converged):
                jax.block_until_ready(res)
        if not _traced(res.converged):
            self.check(res)
        return res

    def check(self, result: FlowResult) -> FlowResult:
        """Raise :class:`~livens.ConvergenceError` if a step of ``result`` did not converge."""
        if not bool(result.converged):
            k = int(result.failed_step)
            raise ConvergenceError(
                f"Newton did not converge in step {k + 1} of {self.n_steps} (t = {k * self.h:.6g} -> "
                f"{(k + 1) * self.h:.6g}) of {self.scheme} in lv.flow with h = {self.h:g} (tol = {self.tol}): the "
                "nodes after it are NaN. The flow has no rescue (its iterations are not differentiable): use a "
                "smaller h, a larger max_iter, or other initial values.",
                step=k,
                time=k * self.h,
            )
        return result

    def __repr__(self):
        return f"FlowFunction({self.scheme}, h={self.h:g}, n_steps={self.n_steps})"


def flow_function(plan, executor, output, on_failure, adjoint) -> FlowFunction:
    """The run of ``plan`` as a :class:`FlowFunction` (module docstring)."""
    sch, mech, problem = plan.scheme, plan.mech, plan.problem
    n_steps, h = plan.steps, plan.h
    seg = executor.segment if executor.segment is not None else max(1, int(math.isqrt(n_steps)))
    n_seg = -(-n_steps // seg)
    differentiable = adjoint is not None
    loop = make_loop(mech, sch, plan.guess, seg, None, plan.newton, differentiable=differentiable)
    segment_fn = jax.checkpoint(loop) if differentiable else loop
    jparams = plan.jparams
    defaults = problem.system.parameters
    d, m = mech.d, mech.m
    f64 = jnp.float64
    save_every = output.save_every
    tol_num, max_iter = plan.tol_num, plan.max_iter

    def run(q0, v0, parameters=None):
        if parameters is not None and defaults is None:
            raise ValueError("This System has no parameters; call F(q0, v0) without parameters.")
        sysp = None
        if defaults is not None:
            sysp = {k: jnp.asarray(v, f64) for k, v in defaults.items()}
            for k, v in (parameters or {}).items():
                if k not in sysp:
                    raise ValueError(f"Unknown parameter {k!r}; the System's parameters: {', '.join(sysp)}.")
                sysp[k] = jnp.asarray(v, f64)
        bound = mech.bind(sysp)
        q0 = jnp.asarray(q0, f64)
        v0 = jnp.asarray(v0, f64)
        if q0.shape != (d,) or v0.shape != (d,):
            raise ValueError(f"q0 and v0 must have shape ({d},); got {q0.shape} and {v0.shape}.")
        p0 = bound.M(q0) @ v0
        z = jnp.zeros((m,), f64)
        comp = (jnp.zeros_like(q0), jnp.zeros_like(p0)) if sch.increments else None
        state = State(q=q0, p=p0, v=v0, lam=z, gam=z, comp=comp)
        start_ok = jnp.bool_(True)
        if sch.start is not None:
            state, (start_ok, _, _) = sch.start(state, jnp.asarray(h, f64), jparams, bound)
        history = plan.empty_history(state)

        def body(carry, _):
            state, history, n, failed = carry
            out = segment_fn(
                state,
                history,
                jnp.asarray(0.0, f64),
                n,
                jnp.asarray(n_steps, n.dtype),
                jnp.asarray(h, f64),
                jnp.asarray(tol_num, f64),
                jnp.asarray(max_iter, jnp.int32),
                jparams,
                sysp,
            )
            return (out.state, out.history, out.n, failed | out.failed), out.records

        init = (state, history, jnp.asarray(0, jnp.int64), ~start_ok)
        (state, _, n, failed), recs = jax.lax.scan(body, init, None, length=n_seg)
        recs = jax.tree_util.tree_map(lambda a: a.reshape((n_seg * seg,) + a.shape[2:])[:n_steps], recs)
        step_ok = recs["ok"] & (jnp.arange(n_steps) < n)
        converged = ~failed & (n == n_steps)
        nan = jnp.asarray(jnp.nan, f64)

        def nodes(first, steps):  # nodal array: the first node, then the node each kept step ends at
            steps = jnp.where(step_ok.reshape((-1,) + (1,) * (steps.ndim - 1)), steps, nan)
            return jnp.concatenate([first[None], steps], axis=0)

        q = nodes(q0, recs["q"])
        p = nodes(p0, recs["p"])
        nodal = sch.capabilities.velocity_kind == "nodal"
        v = nodes(v0, recs["v"]) if nodal else jnp.where(step_ok[:, None], recs["v"], nan)
        lam = jnp.where(step_ok[:, None], recs["lam"], nan) if "lam" in recs else None
        gam = jnp.where(step_ok[:, None], recs["gam"], nan) if "gam" in recs else None
        t = jnp.arange(n_steps + 1, dtype=f64) * h
        failed_step = jnp.where(converged, -1, n).astype(jnp.int64)
        k = save_every
        return FlowResult(
            t[::k], q[::k], p[::k], v[::k] if nodal else v, lam, gam, recs["iterations"], converged, failed_step
        )

    return FlowFunction(run, problem, sch.name, float(h), n_steps, plan.tol)
