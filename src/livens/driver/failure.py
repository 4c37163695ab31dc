"""What a run does when a step fails: the damped rescue of the step, the blow-up check, and the
errors that stop a run with every step computed before.

A failure policy (:mod:`livens.driver.options`) decides what follows: stop the run and raise
(:func:`livens.simulate`), stop only the member that failed (:func:`livens.simulate_ensemble`), or
mark the nodes after it NaN (:func:`livens.flow`, in-graph). Where the rescue is on, a failed
Newton step is first retried once with the damped least-squares method
(:class:`~livens.solvers.newton.DampedLeastSquares`), and the steps so rescued are recorded.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from .. import engine
from ..errors import BlowUpError, ConvergenceError, SimulationInterrupted
from ..timestep import step

RESCUE_ITER_FACTOR = 5
"""The rescue takes up to this many times max_iter damped iterations (damped steps make slow
progress far from the root)."""

_RESCUERS = engine.CompiledCache(16)


def _rescuer(plan, mode: str):
    """The compiled rescue of one failed step from ``mode``'s first guess (cached per system, scheme, guess)."""
    mech, sch = plan.mech, plan.scheme
    key = (mech, sch, mode, plan.engine)
    fn = _RESCUERS.get(key)
    if fn is None:
        fn = engine.program(
            lambda state, t, h, tol, max_iter, params, sys_params: step(
                mech, sch, mode, state, t, h, tol, max_iter, params, sys_params, robust=True
            ),
            plan.engine,
        )
        _RESCUERS[key] = fn
    return fn


def rescue(plan, state, t: float, its_failed: int):
    """Retry the failed step from ``state`` at time ``t`` with the damped least-squares method,
    from the run's first guess and, if that fails, from the other one ("advanced" first for a run
    with the "extrapolated" guess). Returns (state, record of the step) or None; the record's
    iteration count adds all attempts to the failed one's ``its_failed``."""
    f64 = np.float64
    guess = plan.guess
    modes = (
        ("advanced", "simple") if guess == "extrapolated" else (guess, "advanced" if guess == "simple" else "simple")
    )
    for mode in modes:
        new, out, res, _ = _rescuer(plan, mode)(
            state,
            f64(t),
            f64(plan.h),
            f64(plan.tol_num),
            np.int32(RESCUE_ITER_FACTOR * plan.max_iter),
            plan.jparams,
            plan.jsys,
        )
        new, out, res = jax.device_get((new, out, res))
        its_failed += int(res.iterations)
        if bool(res.converged) and np.all(np.isfinite(new.q)) and np.all(np.isfinite(new.p)):
            rec = {
                "q": np.asarray(new.q),
                "p": np.asarray(new.p),
                "iterations": np.int32(its_failed),
                "residual": np.float64(res.residual),
                **{k: np.asarray(v) for k, v in out.items()},
            }
            return jax.tree_util.tree_map(jnp.asarray, new), rec
    return None


_ENERGY = engine.CompiledCache(32)


def blowup_energy(mech):
    """H(q, p) over a member's nodes, compiled (cached per system); None where H needs an M^-1
    that the system does not have (no blow-up check then)."""
    if mech.Minv_const is None:
        return None
    fn = _ENERGY.get(mech)
    if fn is None:
        fn = _ENERGY[mech] = jax.jit(jax.vmap(mech.H))
    return fn


def first_blowup(mech, energy0: float, q, p, factor: float):
    """(index, |E - E0|) of the first of the nodes (q, p) whose energy leaves the band
    factor * max(|E0|, 1) (or is not finite), or None."""
    fn = blowup_energy(mech)
    if fn is None or not len(q):
        return None
    E = np.asarray(fn(jnp.asarray(q), jnp.asarray(p)))
    dev = np.abs(E - energy0)
    over = np.flatnonzero(~(dev <= factor * max(abs(energy0), 1.0)))
    return (int(over[0]), float(dev[over[0]])) if over.size else None


def kept_sentence(n_done: int, save_every: int, out, where: str) -> str:
    """Where the steps of a stopped run are: the error's ``.solution`` and the streamed file."""
    if n_done == 0:
        what = "No step was completed; the initial state is kept"
    else:
        nodes = f" (one node in every {save_every})" if save_every > 1 else ""
        what = f"The one step {where} is kept{nodes}" if n_done == 1 else f"The {n_done} steps {where} are kept{nodes}"
    return f"{what} in the error's .solution" + (f" and in {os.fspath(out)!r}." if out is not None else ".")


def raise_failure(
    plan,
    kind: str,
    step_index: int,
    resid: float,
    its: int,
    n_done: int,
    solution,
    out,
    rescue_on: bool,
    blowup_factor=None,
    save_every: int = 1,
):
    """Raise the error of a run stopped by ``kind`` ("convergence", "blowup", "interrupt") at its
    run-local step ``step_index``, with the Solution of its ``n_done`` kept steps."""
    h, offset = plan.h, plan.offset
    t_fail = plan.t_start + step_index * h
    total = offset + plan.steps  # steps of the whole run; messages count steps from 1
    name = plan.scheme.name
    kept = kept_sentence(
        n_done,
        save_every,
        out,
        "before it" if kind == "convergence" else "up to and including it" if kind == "blowup" else "so far",
    )
    if kind == "convergence":
        tol = plan.tol if isinstance(plan.tol, str) else format(plan.tol, "g")
        reason = (
            f"Newton did not converge in step {offset + step_index + 1} of {total} (t = {t_fail:.6g} -> "
            f"{t_fail + h:.6g}) of {name} with h = {h:g}: residual ||R||_inf = {resid:.3e} after {its} "
            f"iterations (tol = {tol}, max_iter = {plan.max_iter})."
            f"{' The damped least-squares rescue failed too.' if rescue_on else ''} "
            f"Try a smaller h, a larger max_iter or another guess."
        )
        raise ConvergenceError(
            f"{reason} {kept}", solution=solution, step=offset + step_index, time=t_fail, residual=resid, reason=reason
        )
    if kind == "blowup":
        reason = (
            f"Energy blow-up in step {offset + step_index} of {total} (t = {t_fail - h:.6g} -> {t_fail:.6g}) "
            f"of {name} with h = {h:g}: |E - E0| = {resid:.3e} exceeds blowup_factor = "
            f"{blowup_factor:g} times max(|E0|, 1)."
        )
        raise BlowUpError(
            f"{reason} {kept}",
            solution=solution,
            step=offset + step_index - 1,
            time=t_fail,
            residual=resid,
            reason=reason,
        )
    reason = f"Interrupted after {n_done} of {plan.steps} steps (t = {t_fail:.6g})."
    raise SimulationInterrupted(
        f"{reason} {kept}", solution=solution, step=offset + n_done, time=t_fail, residual=resid, reason=reason
    )
