"""The time loop: chunks of ``lax.scan`` over jit-compiled Newton steps (DESIGN: Newton, time loop).

h, t_end, the tolerance, max_iter and scheme parameters are runtime values: changing them never
recompiles. Between chunks the loop updates the progress bar, stops on a failed step (Newton
non-convergence, NaN) or an energy blow-up, and keeps every converged step.
"""
from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _jaxconfig  # noqa: F401
from .checks import check_step
from .errors import BlowUpError, ConvergenceError, SimulationInterrupted
from .mechanics import Mechanics, mechanics
from ._fusion import fuse_small_dots
from . import guess as _guess
from .newton import damped_newton, newton, newton_increment
from .schemes import get as get_scheme
from .schemes.base import Scheme, State
from ._cache import CompiledCache
from .system import Problem

DEFAULT_CHUNK = 512
RESCUE_ITER_FACTOR = 5
_RUNNERS = CompiledCache(32)


def _mass_requirements(scheme: Scheme, mech: Mechanics):
    """Refuse a singular or configuration-dependent M for a scheme that needs M^-1."""
    from .schemes import names, get

    if not scheme.needs_mass_inverse:
        return
    if mech.constant_mass and mech.Minv_const is not None:
        return
    accepting = [n for n in names() if not get(n)[0].needs_mass_inverse]
    what = "configuration dependent" if not mech.constant_mass else "singular"
    raise ValueError(
        f"Scheme {scheme.name!r} needs M^-1, but the mass matrix of this system is {what}. "
        f"Schemes that accept it: {', '.join(accepting) or '(none registered)'}."
    )


GUESSES = ("simple", "advanced", "extrapolated")
"""The first guesses of Newton's method: 002 Table 2's "simple" (the unknowns of step n) and
"advanced" (q^n + h v^n), and livens' "extrapolated" (:mod:`livens.guess`)."""


def check_guess(guess) -> None:
    """A guess name, or None for the scheme's own (``Scheme.preferred_guess``)."""
    if guess is not None and guess not in GUESSES:
        raise ValueError(f"guess must be one of {', '.join(map(repr, GUESSES))} (or None: the scheme's "
                         f"preferred one); got {guess!r}.")


def _scheme_mode(mode: str) -> str:
    """The scheme's own guess behind ``mode``: "extrapolated" starts from (and compares with) "advanced"."""
    return "advanced" if mode == "extrapolated" else mode


def _one_step(mech: Mechanics, scheme: Scheme, mode: str, state: State, t, h, tol, max_iter, params,
              fuse=None, robust: bool = False, history=None):
    """One time step: the first guess, Newton on the scheme's residual, the state update.
    Returns (new state, outputs, Newton result, history).

    ``robust=True`` solves with :func:`~livens.newton.damped_newton` (the rescue of a failed step)
    instead of plain Newton with the scheme's tangent. ``mode="extrapolated"`` needs ``history``
    (a :class:`~livens.guess.GuessHistory`; returned with the guess's bookkeeping updated, the
    solution not yet pushed: the caller does that once it knows the step is kept).
    """
    d, m = mech.d, mech.m
    u0 = scheme.guess(state, h, t, params, mech, _scheme_mode(mode))
    x0 = scheme.pack(u0, d, m)

    def R(x):
        return scheme.residual(scheme.unpack(x, d, m), state, h, t, params, mech)

    f = fuse if (fuse is not None and x0.shape[0] <= 256) else (lambda g: g)
    fR = f(R)
    r0 = None
    if mode == "extrapolated" and not robust:
        x0, r0, history = _guess.extrapolated_guess(fR, x0, history)
    if robust:
        res = damped_newton(R, x0, tol, max_iter)
    else:
        if scheme.tangent is not None:
            tangent = lambda x: scheme.tangent(scheme.unpack(x, d, m), state, h, t, params, mech)  # noqa: E731
        else:
            tangent = lambda x: scheme.jacobian_by_blocks(  # noqa: E731
                lambda u: scheme.residual(u, state, h, t, params, mech), x, d, m)
        # the residual and the whole Newton update with small matrix products fused (issue 7);
        # measured to help up to a few hundred unknowns, and to cost a little beyond
        res = newton(fR, x0, tol, max_iter, linear_step=f(newton_increment(R, tangent)), r0=r0)
    new_state, out = scheme.update(scheme.unpack(res.x, d, m), state, h, t, params, mech)
    return new_state, out, res, history


_RESCUERS = CompiledCache(16)


def _make_rescuer(mech: Mechanics, scheme: Scheme, mode: str):
    """The compiled rescue of one failed step (:func:`~livens.newton.damped_newton`), built on first need."""
    key = (mech, scheme, mode)
    fn = _RESCUERS.get(key)
    if fn is None:
        fn = jax.jit(lambda state, t, h, tol, max_iter, params: _one_step(
            mech, scheme, mode, state, t, h, tol, max_iter, params, robust=True))
        _RESCUERS[key] = fn
    return fn


class RecordLayout(tuple):
    """The record of one step, (name, shape, dtype) per field, packed into one float64 row.

    The time loop writes each step's record (q, p, Newton iterations and residual, the "ok" flag
    and the scheme's outputs v, lambda, gamma) as one row of one buffer: one write per step instead
    of one per field (issue 7: the bookkeeping was ~40% of a pendulum step). Integers (iteration
    counts) and flags are exact in float64.
    """

    @classmethod
    def of(cls, shapes: dict) -> "RecordLayout":
        return cls((k, tuple(v.shape), np.dtype(v.dtype).str) for k, v in shapes.items())

    @property
    def width(self) -> int:
        return int(sum(math.prod(shape) for _, shape, _ in self))

    def column(self, name: str) -> int:
        """The first column of field ``name``."""
        i = 0
        for k, shape, _ in self:
            if k == name:
                return i
            i += math.prod(shape)
        raise KeyError(name)

    def pack(self, rec: dict):
        """The row of one record (traced)."""
        return jnp.concatenate([jnp.ravel(rec[k]).astype(jnp.float64) for k, _, _ in self])

    def unpack(self, rows) -> dict:
        """Rows (n, width) back to the fields, each of shape (n, *shape) and its own dtype (NumPy)."""
        rows = np.asarray(rows)
        out, i = {}, 0
        for k, shape, dtype in self:
            w = math.prod(shape)
            col = rows[:, i:i + w].reshape((rows.shape[0],) + shape)
            out[k] = col != 0 if np.dtype(dtype) == np.bool_ else col.astype(dtype)
            i += w
        return out


def record_layout(scheme: Scheme, mech: Mechanics, mode: str, state: State, h, params) -> RecordLayout:
    """The :class:`RecordLayout` of a step of ``scheme`` from ``state`` (shapes only, no computation)."""
    out = jax.eval_shape(
        lambda s: scheme.update(scheme.guess(s, h, 0.0, params, mech, _scheme_mode(mode)),
                                s, h, 0.0, params, mech)[1], state)
    f64 = jax.ShapeDtypeStruct((), jnp.float64)
    return RecordLayout.of({"q": state.q, "p": state.p, "iterations": jax.ShapeDtypeStruct((), jnp.int32),
                            "residual": f64, "ok": jax.ShapeDtypeStruct((), jnp.bool_), **out})


def _make_runner(mech: Mechanics, scheme: Scheme, mode: str, chunk: int, layout: RecordLayout):
    """The compiled chunk of ``chunk`` time steps (cached per system, scheme, guess, chunk); it
    returns the records as rows of ``layout`` (:meth:`RecordLayout.unpack`).

    Ensembles have their own batched runner (:mod:`livens.ensemble`).
    """
    key = (mech, scheme, mode, chunk, layout)
    hit = _RUNNERS.get(key)
    if hit is not None:
        return hit
    ok_col = layout.column("ok")

    def one_step(state: State, history, t, h, tol, max_iter, params):
        return _one_step(mech, scheme, mode, state, t, h, tol, max_iter, params, fuse_small_dots, history=history)

    def run_chunk(state: State, history, t_start, n0, n_stop, h, tol, max_iter, params):
        # history: the solutions of the last steps for the "extrapolated" guess (new_history),
        # passed through unchanged by the other guesses
        # node n is at time t_start + n h (n counts from the run's first node)
        t0 = t_start + n0.astype(t_start.dtype) * h
        # a while loop over the steps of the chunk: it stops at n_stop or at the first failed step
        # (no step is computed past the end; under vmap it runs until every member has stopped),
        # writing each step's record as a row of a preallocated buffer (rows past the stop stay
        # zero, with "ok" True)
        bufs = jnp.zeros((chunk, layout.width)).at[:, ok_col].set(1.0)

        def cond(carry):
            i, _, _, n, failed, _ = carry
            return (i < chunk) & (n < n_stop) & ~failed

        def body(carry):
            i, state, history, n, failed, bufs = carry
            t = t_start + n.astype(t_start.dtype) * h
            new, out, res, history = one_step(state, history, t, h, tol, max_iter, params)
            ok = res.converged & jnp.all(jnp.isfinite(new.q)) & jnp.all(jnp.isfinite(new.p))
            if mode == "extrapolated":
                history = _guess.push(history, res.x, ok)
            keep = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, b, a), state, new)
            rec = {"q": new.q, "p": new.p, "iterations": res.iterations, "residual": res.residual, "ok": ok, **out}
            bufs = lax.dynamic_update_index_in_dim(bufs, layout.pack(rec), i, 0)
            return i + 1, keep, history, n + ok.astype(n.dtype), failed | ~ok, bufs

        _, state, history, n, failed, recs = lax.while_loop(
            cond, body, (jnp.int32(0), state, history, n0, jnp.bool_(False), bufs))
        return state, history, n, failed, recs

    runner = jax.jit(run_chunk)
    _RUNNERS[key] = runner
    return runner


def resolve(problem: Problem, scheme, params: dict):
    """(Scheme, parameter values) for a name or alias, checked against the problem."""
    sch, alias_params = get_scheme(scheme)
    vals = sch.resolve_params(params, alias_params)
    mech = mechanics(problem.system, problem.q0)
    reason = sch.applies_to(problem, mech)
    if reason is not None:
        raise ValueError(reason)
    _mass_requirements(sch, mech)
    if mech.has_dissipation and not sch.supports_dissipation:
        from .schemes import names, get

        ok = [n for n in names() if get(n)[0].supports_dissipation]
        raise ValueError(
            f"Scheme {sch.name!r} does not treat a dissipation matrix C(q); schemes that do: {', '.join(ok)}."
        )
    if mech.has_external_force and not sch.supports_external_force:
        from .schemes import names, get

        ok = [n for n in names() if get(n)[0].supports_external_force]
        raise ValueError(
            f"Scheme {sch.name!r} has no external force term F(q, v, t) in its equations, so it would ignore "
            f"this system's external_force; schemes that apply it: {', '.join(ok)}."
        )
    return sch, vals, mech


def new_history(scheme: Scheme, mech: Mechanics, state: State, h, params) -> _guess.GuessHistory:
    """An empty history of step solutions for the "extrapolated" guess (:mod:`livens.guess`)."""
    nx = jax.eval_shape(lambda s: scheme.pack(scheme.guess(s, h, 0.0, params, mech, "simple"), mech.d, mech.m),
                        state).shape[0]
    return _guess.GuessHistory.empty(nx)


def initial_state(problem: Problem, mech: Mechanics) -> State:
    z = jnp.zeros((mech.m,))
    return State(q=jnp.asarray(problem.q0), p=jnp.asarray(problem.p0), v=jnp.asarray(problem.v0), lam=z, gam=z)


def simulate(
    problem: Problem,
    scheme: str = "VI-S",
    h: float | None = None,
    t_end: float | None = None,
    tol: float = 1e-9,
    max_iter: int = 40,
    guess: str | None = None,
    progress: bool | None = None,
    blowup_factor: float | None = None,
    chunk: int = DEFAULT_CHUNK,
    out=None,
    save_every: int = 1,
    resume=None,
    rescue: bool = True,
    **params: Any,
):
    """Integrate ``problem`` with ``scheme`` from t = 0 to ``t_end`` with step ``h``.

    Parameters
    ----------
    problem: a :class:`~livens.Problem` (e.g. ``lv.examples.load("heavy-top")``).
    scheme: canonical name or paper alias (``lv.schemes.names()``), e.g. "VI-S", "ggl-theta-a".
    h, t_end: step size and end time; default to the problem's (the paper's) values.
    tol, max_iter: Newton stops on ||R||_inf <= tol; a step that needs more than max_iter
        iterations stops the run with :class:`~livens.ConvergenceError`.
    guess: Newton's first guess: "extrapolated" (livens' own, :mod:`livens.guess`): the solutions
        of the last five steps extrapolated (quartic), where its residual is smaller than that of
        the advanced guess; or 002 Table 2's "simple" (the unknowns of step n) or "advanced"
        (q^n + h v^n). Same equations, same tolerance, results equal to the tolerance. None (the
        default): the scheme's ``preferred_guess``, "extrapolated" for every scheme but
        ggl-theta-a ("advanced": its gamma oscillates from step to step, and from the
        extrapolation Newton needs an iteration more; measured).
    progress: show a progress bar (default: on a terminal, for runs longer than 2 s).
    blowup_factor: stop with :class:`~livens.BlowUpError` when |E - E0| exceeds
        blowup_factor * max(|E0|, 1).
    chunk: steps per compiled ``lax.scan`` chunk (fixed, so that h and t_end never recompile).
    out: a netCDF path; results are appended chunk by chunk while the run goes, so a crash or
        Ctrl-C leaves a loadable file; a finished run rewrites it atomically with its diagnostics.
    save_every: keep every k-th node (and the step ending there); memory and file stay bounded
        for very long runs. Diagnostics that need consecutive steps then refuse with a message.
    resume: a Solution (e.g. ``lv.load(path)``) to continue from its last saved node up to ``t_end``;
        the returned Solution holds the continuation only. The continuation is the same computation
        as one long run, bit for bit, when the solution ends at its last step (with the
        "extrapolated" guess, the predictor's history is stored in ``meta["guess_history"]``);
        from a partial file (a crash, Ctrl-C) the extrapolation restarts and the two agree to the
        Newton tolerance.
    rescue: retry a step whose Newton iteration fails once with the damped least-squares Newton
        method (:func:`~livens.newton.damped_newton`) before giving up; the steps so rescued are
        listed in ``solution.meta["rescued_steps"]`` (global step indices, the step from node n to
        n + 1 has index n) and their Newton iterations count both attempts. ``rescue=False`` stops
        at the first failed plain Newton iteration (002's setting for its effort study).
    **params: scheme parameters, e.g. ``theta=0.5``.

    Returns a :class:`~livens.Solution`. The failed-run errors carry ``.solution`` with every
    converged (saved) step.
    """
    from .solution import Solution

    h = problem.h if h is None else h
    t_end = problem.t_end if t_end is None else t_end
    if h is None or t_end is None:
        raise ValueError("Give h and t_end: the problem has no default step size or end time.")
    t_start = 0.0 if resume is None else float(resume.t[-1])
    check_step(h, t_end - t_start if resume is not None else t_end, tol, max_iter)
    check_guess(guess)
    if blowup_factor is not None and not (blowup_factor > 0):
        raise ValueError(f"blowup_factor must be positive; got {blowup_factor!r}.")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk must be a positive integer; got {chunk!r}.")
    if isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1:
        raise ValueError(f"save_every must be a positive integer; got {save_every!r}.")
    sch, vals, mech = resolve(problem, scheme, params)
    guess = sch.preferred_guess if guess is None else guess
    n_steps = max(1, int(round((t_end - t_start) / h)))
    if resume is None:
        state = initial_state(problem, mech)
        if sch.start is not None:
            state = sch.start(state, float(h), vals, mech)
        offset = 0
    else:
        state, offset = _resume_state(resume, sch, mech, h)
    layout = record_layout(sch, mech, guess, state, h, vals)
    runner = _make_runner(mech, sch, guess, chunk, layout)
    jparams = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
    empty_history = history = new_history(sch, mech, state, h, jparams)
    if resume is not None and guess == "extrapolated":
        history = _guess.GuessHistory.from_meta(resume.meta.get("guess_history"), offset, empty_history)
    meta = dict(h=float(h), t_end=float(t_start + n_steps * h), tol=float(tol), max_iter=int(max_iter), guess=guess,
                save_every=int(save_every), t_start=t_start, step_offset=offset)
    start_node = {"t": t_start, "q": np.asarray(state.q), "p": np.asarray(state.p), "v": np.asarray(state.v)}
    stream = None
    if out is not None:
        from .stream import NetCDFStream

        stream = NetCDFStream(out, mech.d, mech.m, sch.has_gamma, sch.velocity_kind,
                              {"scheme": sch.name, "params": vals, "meta": {**meta, "example": problem.name,
                               "problem_parameters": dict(problem.parameters)}})
        stream.append([t_start], start_node["q"][None], start_node["p"][None], start_node["v"][None],
                      {"index": np.zeros(0, np.int64)})
    collected: list[dict] = []
    rescued: list[int] = []
    wall0 = time.perf_counter()
    compile_time = None
    n_done = 0
    failure = None
    energy0 = None
    bar = _progress_bar(n_steps, progress)
    interrupted = _install_sigint_flag()
    try:
        # the same argument kinds on every call (one cache entry): n0 a device value like the n a
        # chunk returns, the rest NumPy scalars
        i64 = jnp.int64
        consts = (np.int64(n_steps), np.float64(h), np.float64(tol), np.int32(max_iter), jparams)
        t_start_dev = np.float64(t_start)
        # chunks are dispatched one ahead (JAX runs them asynchronously): while one computes, the
        # records of the previous one are copied and written. The next chunk starts from the
        # current one's device-side end state, on the guess that no step fails; after a failure,
        # a rescue or a blow-up it is discarded and the loop restarts from the kept state.
        pending = None
        while n_done < n_steps:
            if interrupted["flag"]:
                raise KeyboardInterrupt
            t0 = time.perf_counter()
            if pending is None:
                pending = runner(state, history, t_start_dev, jnp.asarray(n_done, i64), *consts)
            state, history, n, failed, recs = pending
            pending = None
            if n_done + chunk < n_steps:
                pending = runner(state, history, t_start_dev, n, *consts)
            recs, n, failed = jax.device_get((recs, n, failed))
            recs = layout.unpack(recs)
            n_new = int(n) - n_done
            if compile_time is None:
                compile_time = time.perf_counter() - t0
            rec = {k: np.asarray(v)[:n_new] for k, v in recs.items() if k != "ok"}
            if bool(failed):
                i_bad = int(np.flatnonzero(~np.asarray(recs["ok"]))[0])
                its, resid = int(recs["iterations"][i_bad]), float(recs["residual"][i_bad])
                step_rec = None
                if rescue:
                    state, step_rec, resid = _rescue(mech, sch, guess, state, t_start + (n_done + n_new) * h, h,
                                                     tol, max_iter, jparams, its)
                    history = empty_history  # the extrapolation restarts after a rescued step
                pending = None
                if step_rec is None:
                    failure = ("convergence", n_done + n_new, resid, its)
                else:
                    rescued.append(offset + n_done + n_new)
                    rec = {k: np.concatenate([v, step_rec[k][None]]) for k, v in rec.items()}
                    n_new += 1
            if failure is None and blowup_factor is not None and n_new:
                energy0, blown = _check_blowup(mech, problem, rec, energy0, blowup_factor)
                if blown is not None:
                    keep = blown[0] + 1  # the steps up to and including the first blown-up one
                    rec = {k: v[:keep] for k, v in rec.items()}
                    failure = ("blowup", n_done + keep, blown[1], 0)
                    n_new = keep
                    pending = None
            _collect(rec, n_done, offset, save_every, h, t_start, collected, stream, sch.velocity_kind)
            n_done += n_new
            if bar is not None:
                bar.update(n_new)
            if failure is not None:
                break
            if interrupted["flag"]:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        failure = ("interrupt", n_done, float("nan"), 0)
    finally:
        interrupted["restore"]()
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - wall0
    meta.update(wall_time=wall, compile_time=compile_time or 0.0, steps=n_done, rescued_steps=rescued)
    if guess == "extrapolated" and failure is None:
        # the predictor's history at the last node, so that a resumed run continues exactly
        meta["guess_history"] = history.to_meta(offset + n_done)
    sol = Solution.from_records(problem, sch, vals, mech, collected, meta, start_node)
    if stream is not None and failure is None:
        sol.to_netcdf(out)
    if failure is not None:
        kind, step, resid, its = failure
        t_fail = t_start + step * h
        where = f" Saved in {out!r}." if out is not None else ""
        if kind == "convergence":
            raise ConvergenceError(
                f"Newton did not converge in step {offset + step} (t = {t_fail:.6g} -> {t_fail + h:.6g}) of "
                f"{sch.name} with h = {h:g}: residual ||R||_inf = {resid:.3e} after {its} iterations "
                f"(tol = {tol:g}, max_iter = {max_iter}). The {n_done} converged steps are kept in "
                f"error.solution.{where}{' The damped least-squares rescue failed too.' if rescue else ''} "
                f"Try a smaller h, a larger max_iter, or guess='advanced'.",
                solution=sol, step=offset + step, time=t_fail, residual=resid,
            )
        if kind == "blowup":
            raise BlowUpError(
                f"Energy blow-up in step {offset + step - 1} (t = {t_fail:.6g}) of {sch.name} with h = {h:g}: "
                f"|E - E0| = {resid:.3e} exceeds blowup_factor = {blowup_factor:g} times max(|E0|, 1). "
                f"The {n_done} steps up to it are kept in error.solution.{where}",
                solution=sol, step=offset + step - 1, time=t_fail, residual=resid,
            )
        raise SimulationInterrupted(
            f"Run interrupted after {n_done} steps (t = {t_fail:.6g}); the steps so far are in "
            f"error.solution.{where}",
            solution=sol, step=offset + n_done, time=t_fail, residual=resid,
        )
    return sol


def _rescue(mech, sch, guess, state, t, h, tol, max_iter, jparams, its_failed):
    """Retry the failed step from ``state`` with :func:`~livens.newton.damped_newton`.

    Damped Newton starts from the run's first guess and, if that fails, from the other one
    ("simple" / "advanced"; "advanced" first for a run with the "extrapolated" guess), each with up to RESCUE_ITER_FACTOR * max_iter iterations (damped
    steps make slow progress far from the root). Returns (state, record of the step or None,
    residual); the record's iteration count adds all attempts to the failed one's ``its_failed``.
    """
    f64 = np.float64
    for mode in (("advanced", "simple") if guess == "extrapolated" else
                 (guess, "advanced" if guess == "simple" else "simple")):
        new, out, res, _ = _make_rescuer(mech, sch, mode)(state, f64(t), f64(h), f64(tol),
                                                          np.int32(RESCUE_ITER_FACTOR * max_iter), jparams)
        new, out, res = jax.device_get((new, out, res))
        its_failed += int(res.iterations)
        if bool(res.converged) and np.all(np.isfinite(new.q)) and np.all(np.isfinite(new.p)):
            break
    else:
        return state, None, float(res.residual)
    rec = {"q": np.asarray(new.q), "p": np.asarray(new.p), "iterations": np.int32(its_failed),
           "residual": np.float64(res.residual), **{k: np.asarray(v) for k, v in out.items()}}
    return jax.tree_util.tree_map(jnp.asarray, new), rec, float(res.residual)


def _collect(rec, n_done, offset, save_every, h, t_start, collected, stream, velocity_kind):
    """Keep the nodes whose global index is a multiple of save_every (and the steps ending there)."""
    n_new = len(rec["iterations"])
    if n_new == 0:
        return
    node = offset + n_done + np.arange(1, n_new + 1)  # global index of the node each step ends at
    keep = node % save_every == 0
    kept = {k: v[keep] for k, v in rec.items()}
    kept["t"] = t_start + (n_done + np.arange(1, n_new + 1))[keep] * h
    kept["index"] = node[keep] - 1
    collected.append(kept)
    if stream is not None:
        steps = {k: kept[k] for k in ("v", "lam", "iterations", "residual", "index")}
        if "gam" in kept:
            steps["gam"] = kept["gam"]
        stream.append(kept["t"], kept["q"], kept["p"], kept["v"], steps)


def _resume_state(sol, sch: Scheme, mech: Mechanics, h) -> tuple[State, int]:
    """The State at the last saved node of ``sol`` and its global step index."""
    if sol.scheme != sch.name:
        raise ValueError(f"Cannot resume a {sol.scheme!r} run with scheme {sch.name!r}; use the same scheme.")
    if abs(sol.h - h) > 1e-14 * max(1.0, abs(h)):
        raise ValueError(f"Cannot resume a run made with h = {sol.h:g} with h = {h:g}; use the same h.")
    if sch.start is not None:
        raise ValueError(f"Scheme {sch.name!r} carries extra state between steps and cannot be resumed from a file.")
    m = mech.m
    lam = sol.lam[-1] if len(sol.lam) else np.zeros(m)
    gam = sol.gam[-1] if (sol.gam is not None and len(sol.gam)) else np.zeros(m)
    v = sol.v[-1] if len(sol.v) else sol.problem.v0
    offset = int(sol.meta.get("step_offset", 0)) + int(round((sol.t[-1] - sol.t[0]) / sol.h))
    st = State(q=jnp.asarray(sol.q[-1]), p=jnp.asarray(sol.p[-1]), v=jnp.asarray(v), lam=jnp.asarray(lam),
               gam=jnp.asarray(gam))
    return st, offset


def _install_sigint_flag() -> dict:
    """Turn SIGINT into a flag checked between chunks, so Ctrl-C never lands inside a file write.

    Only in the main thread; elsewhere the default behaviour stays. ``restore()`` puts the previous
    handler back.
    """
    import signal
    import threading

    state = {"flag": False, "restore": lambda: None}
    if threading.current_thread() is not threading.main_thread():
        return state
    try:
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            state["flag"] = True

        signal.signal(signal.SIGINT, handler)
        state["restore"] = lambda: signal.signal(signal.SIGINT, previous)
    except (ValueError, OSError):  # pragma: no cover
        pass
    return state


def _progress_bar(total: int, progress: bool | None):
    if progress is False:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    import sys

    disable = None if progress is None else False
    if progress is None and not sys.stderr.isatty():
        return None
    return tqdm(total=total, unit="step", delay=2.0, disable=disable, leave=False)


_ENERGY_FN = CompiledCache(32)


def _energy_batch(mech: Mechanics):
    fn = _ENERGY_FN.get(mech)
    if fn is None:
        if mech.Minv_const is not None:
            fn = jax.jit(jax.vmap(mech.H))
        else:
            fn = None
        _ENERGY_FN[mech] = fn
    return fn


def _check_blowup(mech, problem, rec, energy0, factor):
    fn = _energy_batch(mech)
    if fn is None:
        return energy0, None
    if energy0 is None:
        energy0 = float(mech.H(jnp.asarray(problem.q0), jnp.asarray(problem.p0)))
    E = np.asarray(fn(jnp.asarray(rec["q"]), jnp.asarray(rec["p"])))
    dev = np.abs(E - energy0)
    lim = factor * max(abs(energy0), 1.0)
    over = np.flatnonzero(~(dev <= lim))
    if over.size:
        return energy0, (int(over[0]), float(dev[over[0]]))
    return energy0, None
