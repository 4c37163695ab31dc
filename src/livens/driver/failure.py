"""What a run does when a step fails: the damped rescue of the step, the blow-up check, and the
errors that stop a run with every step computed before.

Every message of a failed run is built here from its :class:`~livens.run_record.Failure` record:
:func:`raise_failure` (:func:`livens.simulate`), :func:`warn_failed_members` and
:func:`raise_ensemble_interrupt` (:func:`livens.simulate_ensemble`), :func:`start_error` (a
scheme's start step), :func:`flow_message` (:func:`livens.flow`).

A failure policy (:mod:`livens.driver.options`) decides what follows: stop the run and raise
(:func:`livens.simulate`), stop only the member that failed (:func:`livens.simulate_ensemble`), or
mark the nodes after it NaN (:func:`livens.flow`, in-graph). Where the rescue is on, a failed
Newton step is first retried once with the damped least-squares method
(:class:`~livens.solvers.newton.DampedLeastSquares`), and the steps so rescued are recorded.
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .. import engine
from ..errors import BlowUpError, ConvergenceError, SimulationInterrupted
from ..run_record import Failure
from ..run_status import Status
from ..timestep import step

RESCUE_ITER_FACTOR = 5
"""The rescue takes up to this many times max_iter damped iterations (damped steps make slow
progress far from the root)."""

_RESCUERS = engine.CompiledCache(16)


def _rescuer(plan, mode: str):
    """The compiled rescue of one failed step from ``mode``'s first guess (cached per system, scheme,
    guess): a program run once or a few times, compiled as the engine compiles those (``once``: XLA's
    quick level, where the time loop's first chunks also run), not optimized for runs it never has."""
    mech, sch = plan.mech, plan.scheme
    key = (mech, sch, mode, plan.engine)
    fn = _RESCUERS.get(key)
    if fn is None:
        fn = engine.program(
            lambda state, t, h, tol, max_iter, params, sys_params: step(
                mech, sch, mode, state, t, h, tol, max_iter, params, sys_params, robust=True
            ),
            plan.engine,
            once=True,
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


_PROBES = engine.CompiledCache(16)

FLOOR_SPREAD = 100.0
"""A failed step's residual within FLOOR_SPREAD of the round-off floor that the probe of
:func:`diagnosis` reaches (or of tol) ended at that floor: the values of a residual at its floor
scatter over a decade or so from iterate to iterate."""

# the user's functions a failed step is probed with, in the words of a message
_FUNCTIONS = (
    ("potential V(q)", lambda mech, q, v, t: mech.V(q)),
    ("constraints g(q)", lambda mech, q, v, t: mech.g(q)),
    ("mass matrix M(q)", lambda mech, q, v, t: mech.M(q)),
    ("external force F(q, v, t)", lambda mech, q, v, t: mech.F(q, v, t)),
    ("dissipation matrix C(q)", lambda mech, q, v, t: mech.C(q)),
)


def _prober(plan):
    """The compiled probe of a failed step (cached per system, scheme, guess): the step again from
    the run's first guess with at most ``max_iter`` Newton iterations iterated to round-off; its
    residual, whether it stopped, whether the last iterate q is finite, and for each of the user's
    functions whether its values and first derivatives are finite at that iterate. A program run
    once or a few times, compiled as the rescue is (:func:`_rescuer`)."""
    from ..solvers.newton import ROUNDOFF

    mech, sch = plan.mech, plan.scheme
    mode = "advanced" if plan.guess == "extrapolated" else plan.guess
    key = (mech, sch, mode, plan.engine)
    fn = _PROBES.get(key)
    if fn is None:

        def probe(state, t, h, max_iter, params, sys_params):
            new, _, res, _ = step(
                mech, sch, mode, state, t, h, 0.0, max_iter, params, sys_params, newton_opts=(ROUNDOFF, False, None)
            )
            bound, q = mech.bind(sys_params), new.q
            v = jnp.zeros_like(q)

            def finite(f):
                value, tangent = jax.jvp(lambda x: f(bound, x, v, t), (q,), (jnp.ones_like(q),))
                return jnp.all(jnp.isfinite(value)) & jnp.all(jnp.isfinite(tangent))

            fns = jnp.stack([finite(f) for _, f in _FUNCTIONS])
            return res.residual, res.converged, jnp.all(jnp.isfinite(q)), fns

        fn = _PROBES[key] = engine.program(probe, plan.engine, once=True)
    return fn


_RANKS = engine.CompiledCache(16)


def _lost_rank(plan, state) -> str:
    """Where an overconstrained problem's independent equations (:mod:`livens.redundancy`) lose rank at
    the failed step's q^n: the sentence that says so and what to do, else ""."""
    if plan.rank is None:
        return ""
    mech = plan.mech
    fn = _RANKS.get(mech)
    if fn is None:
        fn = _RANKS[mech] = jax.jit(lambda q, sysp: jnp.linalg.svd(mech.bind(sysp).G(q), compute_uv=False))
    try:
        s_n = np.asarray(fn(state.q, plan.jsys))
        s_0 = np.asarray(fn(jnp.asarray(plan.problem.q0), plan.jsys))
    except Exception:  # the probe only adds words
        return ""
    if not s_n.size or s_n[-1] > 1e-6 * s_0[0]:
        return ""
    return (
        " The independent equations livens chose at q0 (of the redundant ones) lose rank at q^n (smallest "
        f"singular value of their Jacobian {s_n[-1]:.1e}, {s_0[-1]:.1e} at q0): they no longer describe the "
        "mechanism there. Start a new run from a node of the error's .solution a few steps before it "
        "(problem.replace(q0=sol.q[k], v0=sol.v[k])): its set-up chooses the independent equations there."
    )


GENERIC_ADVICE = " Try a smaller h, a larger max_iter or another guess."
"""The advice of a failed Newton step where :func:`diagnosis` names no cause (every driver's)."""


def advice(plan, state, t: float, resid: float) -> str:
    """The sentence that ends the message of a failed Newton step: :func:`diagnosis` where it names
    a cause, else :data:`GENERIC_ADVICE`; ``state`` None (the step's start unknown): the latter."""
    why = diagnosis(plan, state, t, resid) if state is not None else ""
    return why if why else GENERIC_ADVICE


def flow_advice(plan, mech, system_values, result, save_every: int = 1) -> str:
    """:func:`advice` for the first failed step of a concrete, unbatched run of :func:`livens.flow`
    (``result``, a FlowResult; ``mech`` and ``system_values``: those of the call), from the state
    the step started from, rebuilt from the result's nodes as a resumed run rebuilds it: so that the
    flow's message says what :func:`livens.simulate`'s says of the same step. Where the nodes do not
    determine that state (a scheme with its own start, thinned nodes, a failed start), or the run
    did not fail in a step: :data:`GENERIC_ADVICE`."""
    import dataclasses

    from ..schemes.base import State

    k = int(np.asarray(result.failed_step))
    sch = plan.scheme
    if k < 0 or save_every != 1 or sch.start is not None or np.ndim(result.converged):
        return GENERIC_ADVICE
    resid = float(np.asarray(result.residual)[k])
    sysp = None if system_values is None else {key: jnp.asarray(val) for key, val in system_values.items()}
    q, p = jnp.asarray(result.q[k]), jnp.asarray(result.p[k])
    nodal = sch.capabilities.velocity_kind == "nodal"
    if nodal or k > 0:
        v = jnp.asarray(result.v[k] if nodal else result.v[k - 1])
    else:  # the start's velocity, from its momentum p0 = M(q0) v0
        v = jnp.linalg.solve(mech.bind(sysp).M(q), p)
        if not bool(jnp.all(jnp.isfinite(v))):
            return GENERIC_ADVICE
    zeros = jnp.zeros(mech.m)

    def last(x):  # the multipliers of step k - 1, per equation the scheme solves
        x = np.asarray(x[k - 1])
        return jnp.asarray(plan.rank.restrict(x) if x.shape[0] != mech.m and plan.rank is not None else x)

    lam = last(result.lam) if k > 0 and mech.m else zeros
    gam = last(result.gam) if (k > 0 and mech.m and result.gam is not None) else zeros
    comp = (jnp.zeros_like(q), jnp.zeros_like(p)) if sch.increments else None
    state = State(q=q, p=p, v=v, lam=lam, gam=gam, comp=comp)
    call = dataclasses.replace(plan, mech=mech, jsys=sysp)
    return advice(call, state, plan.t_start + k * plan.h, resid)


def diagnosis(plan, state, t: float, resid: float) -> str:
    """Why the Newton iteration of the step from ``state`` at ``t`` failed, in words, where livens
    can tell: a user function whose values or derivatives were not finite at the last finite Newton
    iterate, or a tolerance below the round-off floor of the residual (and the floor's value); ""
    where neither is the cause."""
    lost = _lost_rank(plan, state)
    if lost:
        return lost
    probe = _prober(plan)

    def run(iterations):
        args = (np.float64(t), np.float64(plan.h), np.int32(iterations), plan.jparams, plan.jsys)
        return jax.device_get(probe(state, *args))

    try:
        probe_floor, stopped, q_finite, _ = run(max(plan.max_iter, 50))
        if np.isfinite(resid) and q_finite:
            floor = max(float(probe_floor), float(resid))
            # the failed iteration ended at the floor (within FLOOR_SPREAD of the probe's, or of tol),
            # however far below it tol lies (livens' rule accepts floors up to FLOOR_FACTOR tol times
            # the size of the step's terms, so that a floor it fails at lies decades above tol)
            near = float(resid) <= FLOOR_SPREAD * max(float(probe_floor), plan.tol_num)
            if bool(stopped) and np.isfinite(floor) and plan.tol_num < floor and near:
                return (
                    f" The residual stops decreasing at about {floor:.1e}, its round-off floor in this step, "
                    f'above tol: use tol="roundoff" or tol >= {floor:.1e}.'
                )
            return ""
        # the last iterate whose q is finite: the first guess (0 iterations), then one more each time
        last = None
        for k in range(plan.max_iter + 1):
            _, _, q_ok, fns = run(k)
            if not q_ok:
                break
            last = (k, np.asarray(fns))
        if last is not None:
            k, fns = last
            where = "the first guess of q^(n+1)" if k == 0 else f"Newton iterate {k} of q^(n+1)"
            for (name, _), ok in zip(_FUNCTIONS, fns):
                if not ok:
                    return f" The {name} returned non-finite values or derivatives at {where}."
    except Exception:  # the probe only adds words: the failure's own message stands without it
        return ""
    return " The residual became non-finite while V, g, M and the forces were finite at every iterate: Newton diverged."


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


def _continue_sentence(plan, n_done: int) -> str:
    """How to continue an interrupted run: ``resume=`` with the error's Solution (a scheme with a start
    step carries state between steps that a Solution does not hold, and cannot be continued)."""
    if n_done == 0:
        return ""
    if plan.scheme.start is not None:
        return f" A {plan.scheme.name} run cannot be continued (its steps carry state a Solution does not hold)."
    return (
        " Continue it with the same call and resume=err.solution (or resume=lv.load(file) of the file it wrote), "
        "e.g. lv.simulate(problem, scheme, h=..., t_end=..., resume=err.solution)."
    )


def warn_failed_members(failures: list, members: int) -> None:
    """Warn that the ensemble members of ``failures`` (their :class:`~livens.run_record.Failure`
    records, the first first) stopped at their failed steps and kept their converged steps."""
    first = failures[0]
    warnings.warn(
        f"Newton did not converge for {len(failures)} of {members} ensemble members (first: member {first.member} "
        f"in step {first.step + 1}, counted from 1); they keep their converged steps (ens.failed_step, ens.status). "
        "Try a smaller h, a larger max_iter, or guess='advanced'.",
        RuntimeWarning,
        stacklevel=6,
    )


def raise_ensemble_interrupt(plan, fail: Failure, ensemble, out) -> None:
    """Raise the :class:`~livens.SimulationInterrupted` of an ensemble that every member ran
    ``fail.step`` steps of, with the ensemble computed so far (and the file ``out`` it streamed to,
    where not None)."""
    done = fail.step
    raise SimulationInterrupted(
        f"Interrupted after {done} of {plan.steps} steps of every member; the ensemble computed so far is kept in "
        "the error's .solution" + (f" and in {out!r}." if out is not None else "."),
        solution=ensemble,
        step=done,
        time=done * plan.h,
        reason=f"Interrupted after {done} of {plan.steps} steps.",
    )


def start_error(plan, fail: Failure, count: int | None = None) -> ValueError:
    """The error of a scheme's start step that did not converge (SLO09 eq 15, 17): ``fail`` of
    status SCHEME_START_FAILED; ``count``: the members whose start failed (an ensemble's), None for
    a single run."""
    name = plan.scheme.name
    eq = "15" if name == "vi-lagrange" else "17" if name == "vi-nullspace" else "of the start"
    who = f" for member {fail.member} ({count} member(s) in all)" if count is not None else ""
    return ValueError(
        f"{name}: the start step (SLO09 eq {eq}) did not converge{who}: residual "
        f"{fail.residual:.3e} after {fail.iterations} Newton iterations with h = {plan.h:g}. Try a smaller h."
    )


def raise_failure(
    plan,
    fail: Failure,
    n_done: int,
    solution,
    out,
    rescue_on: bool,
    blowup_factor=None,
    save_every: int = 1,
    state=None,
):
    """Raise the error of a run stopped as ``fail`` says (STEP_FAILED, BLOWUP, INTERRUPTED; its
    ``step`` run-local), with the Solution of its ``n_done`` kept steps (whose status says the
    same). ``state``: the state the failed step started from; with it a Newton failure says why,
    where :func:`diagnosis` can tell."""
    h, offset = plan.h, plan.offset
    step_index, resid, its = fail.step, fail.residual, fail.iterations
    t_fail = plan.t_start + step_index * h
    total = offset + plan.steps  # steps of the whole run; messages count steps from 1
    name = plan.scheme.name
    where = {Status.STEP_FAILED: "before it", Status.BLOWUP: "up to and including it"}.get(fail.status, "so far")
    kept = kept_sentence(n_done, save_every, out, where)
    if fail.status is Status.STEP_FAILED:
        tol = plan.tol if isinstance(plan.tol, str) else format(plan.tol, "g")
        reason = (
            f"Newton did not converge in step {offset + step_index + 1} of {total} (t = {t_fail:.6g} -> "
            f"{t_fail + h:.6g}) of {name} with h = {h:g}: residual ||R||_inf = {resid:.3e} after {its} "
            f"iterations (tol = {tol}, max_iter = {plan.max_iter})."
            f"{' The damped least-squares rescue failed too.' if rescue_on else ''}"
        )
        reason += advice(plan, state, t_fail, resid)
        raise ConvergenceError(
            f"{reason} {kept}", solution=solution, step=offset + step_index, time=t_fail, residual=resid, reason=reason
        )
    if fail.status is Status.BLOWUP:
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
        f"{reason} {kept}{_continue_sentence(plan, n_done)}",
        solution=solution,
        step=offset + n_done,
        time=t_fail,
        residual=resid,
        reason=reason,
    )


def flow_message(
    fail: Failure, scheme: str, h: float, n_steps: int, tol, symmetries=(), advice=None, hold=False
) -> str:
    """The message of a failed run of :func:`livens.flow` (``fail``: START_FAILED,
    SCHEME_START_FAILED, SYMMETRY_BROKEN, STEP_FAILED; ``member``: of a vmapped call); ``advice``:
    the sentence that ends a failed step's (default :data:`GENERIC_ADVICE`, the words of
    :func:`livens.simulate`); ``symmetries``: the names of those the flow keeps; ``hold``: the run's
    ``on_failure`` is "hold" (its nodes after the failure hold the last node reached)."""
    k, resid = fail.step, fail.residual
    who = f" (member {fail.member} of the vmapped call)" if fail.member is not None else ""
    r = f"{resid:.3e}" if np.isfinite(resid) else "NaN"
    if fail.status is Status.START_FAILED:
        return (
            f"lv.flow of {scheme}{who}: the initial state is not on the constraint manifold of this call's parameter "
            f"values: max(|g(q0)|, |G(q0) v0|) = {r}, or its projection did not converge. Pass a consistent (q0, v0) "
            "(lv.consistent_initial_state(system, q0, v0, parameters=...)), or let lv.flow project it "
            "(consistent=True, the default), from a q0 closer to the manifold."
        )
    if fail.status is Status.SCHEME_START_FAILED:
        return (
            f"lv.flow of {scheme}{who}: the start step (SLO09 eq 15, 17) did not converge: residual {r} with "
            f"h = {h:g}. Try a smaller h."
        )
    if fail.status is Status.SYMMETRY_BROKEN:
        j = fail.symmetry
        name = symmetries[j] if 0 <= j < len(symmetries) else f"#{j}"
        return (
            f"lv.flow of {scheme}{who}: the parameter values of this call break the symmetry {name!r}, which the "
            "flow keeps by construction (it is exact at the defaults of the traced parameters and at random values "
            "about them, not at the values of this call): its discrete gradient "
            "would impose a conservation law these values do not have. Call F on concrete parameter values (the "
            "symmetries are then chosen for them), or build the flow from problem.replace(symmetries=[...]) "
            "without it. " + ("The nodes hold the initial state (on_failure='hold')." if hold else "The nodes are NaN.")
        )
    after = (
        "The nodes after it hold the last node reached and every derivative of the run is zero (on_failure='hold')."
        if hold
        else "The nodes after it are NaN and every derivative of the run is NaN."
    )
    return (
        f"Newton did not converge in step {k + 1} of {n_steps} (t = {k * h:.6g} -> {(k + 1) * h:.6g}) of {scheme} "
        f"in lv.flow{who} with h = {h:g} (tol = {tol}): residual {r}. {after} The flow has no rescue (its "
        "iterations are not differentiable)." + (GENERIC_ADVICE if advice is None else advice)
    )
