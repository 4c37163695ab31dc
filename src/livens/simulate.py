"""The time loop of :func:`simulate`: the host side around the compiled step loop of
:mod:`livens.core`.

The run goes in chunks of ``chunk`` steps, each one call of the compiled loop (a ``lax.scan``).
h, t_end, the tolerance, max_iter and the scheme's and System's parameters are runtime values:
changing them never recompiles. Between chunks the host streams the kept nodes to the file,
updates the progress bar, answers Ctrl-C, rescues a failed Newton step with damped Newton (or
stops), checks the energy for a blow-up, and keeps every converged step.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _jaxconfig
from .checks import check_step
from .engine import serial_blas
from .errors import BlowUpError, ConvergenceError, SimulationInterrupted
from .mechanics import Mechanics, mechanics
from ._fusion import fuse_small_dots
from ._tiered import TieredJit
from . import guess as _guess
from .core import NEWTON_DEFAULT, make_loop, scheme_mode as _scheme_mode, step as core_step
from .newton import ROUNDOFF
from .schemes import get as get_scheme
from .schemes.base import Scheme, State
from ._cache import CompiledCache
from .system import Problem, parameter_values

DEFAULT_CHUNK = 512
RESCUE_ITER_FACTOR = 5
RESCUE_TOL = 1e-12
"""The damped rescue's tolerance in a run with ``tol="roundoff"`` (the rescue stops on a residual)."""
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


def newton_options(tol, final_iteration: bool = False) -> tuple:
    """The static Newton options of a run: ("roundoff", False) for ``tol="roundoff"``, else
    ("tol", final_iteration)."""
    if isinstance(tol, str):
        return (ROUNDOFF, False)
    return ("tol", bool(final_iteration))


def _one_step(mech: Mechanics, scheme: Scheme, mode: str, state: State, t, h, tol, max_iter, params,
              fuse=None, robust: bool = False, history=None, newton_opts: tuple = NEWTON_DEFAULT, sys_params=None):
    """One time step (:func:`livens.core.step`)."""
    return core_step(mech, scheme, mode, state, t, h, tol, max_iter, params, sys_params, fuse, robust=robust,
                     history=history, newton_opts=newton_opts)


_RESCUERS = CompiledCache(16)


def _make_rescuer(mech: Mechanics, scheme: Scheme, mode: str):
    """The compiled rescue of one failed step (:func:`~livens.newton.damped_newton`), built on first need."""
    key = (mech, scheme, mode)
    fn = _RESCUERS.get(key)
    if fn is None:
        fn = _jaxconfig.jit(lambda state, t, h, tol, max_iter, params, sys_params: _one_step(
            mech, scheme, mode, state, t, h, tol, max_iter, params, robust=True, sys_params=sys_params))
        _RESCUERS[key] = fn
    return fn


class RecordLayout(tuple):
    """The record of one step, (name, shape, dtype) per field, packed into one float64 row.

    The time loop writes each step's record (q, p, Newton iterations and residual, the "ok" flag
    and the scheme's outputs v, lambda, gamma) as one row of one buffer: one write per step instead
    of one per field (the bookkeeping is a large part of a small system's step). Integers (iteration
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


_LAYOUTS = CompiledCache(64)


def record_layout(scheme: Scheme, mech: Mechanics, mode: str, state: State, h, params) -> RecordLayout:
    """The :class:`RecordLayout` of a step of ``scheme`` from ``state`` (shapes only, no computation).

    Found by tracing the scheme's update, which for a large system takes longer than a short run
    itself (the three-bar swing with 40 elements), so it is kept per scheme, system, guess and the
    shapes of the state and the scheme's parameters: it depends on nothing else."""
    leaves, tree = jax.tree_util.tree_flatten(state)
    key = (id(scheme), mech, mode, tree, tuple((jnp.shape(a), str(jnp.result_type(a))) for a in leaves),
           tuple(sorted((k, jnp.shape(v)) for k, v in params.items())))
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is scheme:
        return hit[1]
    out = jax.eval_shape(
        lambda s: scheme.update(scheme.guess(s, h, 0.0, params, mech, _scheme_mode(mode)),
                                s, h, 0.0, params, mech)[1], state)
    f64 = jax.ShapeDtypeStruct((), jnp.float64)
    layout = RecordLayout.of({"q": state.q, "p": state.p, "iterations": jax.ShapeDtypeStruct((), jnp.int32),
                              "residual": f64, "ok": jax.ShapeDtypeStruct((), jnp.bool_), **out})
    _LAYOUTS[key] = (scheme, layout)
    return layout


def _make_runner(mech: Mechanics, scheme: Scheme, mode: str, chunk: int, layout: RecordLayout,
                 newton_opts: tuple = NEWTON_DEFAULT, backend: str = "xla"):
    """The compiled chunk of ``chunk`` time steps (:func:`livens.core.make_loop`, cached per system,
    scheme, guess, chunk, Newton options and backend):

        (state, history, t_start, n0, n_stop, h, tol, max_iter, params, sys_params)
            -> (state, history, n, failed, rows)

    with the records as rows of ``layout`` (:meth:`RecordLayout.unpack`). Ensembles run the same
    loop under ``vmap`` (:mod:`livens.ensemble`). ``backend`` "auto" or "native": a
    :class:`livens.native.runner.ChunkRunner`, which compiles the loop to one C function at its
    first call (the loop without the rewriting of small products, which helps XLA only).
    """
    key = (mech, scheme, mode, chunk, layout, newton_opts, backend)
    hit = _RUNNERS.get(key)
    if hit is not None:
        return hit
    runner = TieredJit(make_loop(mech, scheme, mode, chunk, layout, newton_opts, fuse_small_dots))
    if backend != "xla":
        from .native.runner import ChunkRunner, system_size

        runner = ChunkRunner(make_loop(mech, scheme, mode, chunk, layout, newton_opts), runner, backend,
                             system_size(scheme, mech))
    _RUNNERS[key] = runner
    return runner


def resolve(problem: Problem, scheme, params: dict, system_values: dict | None = None):
    """(Scheme, parameter values, Mechanics) for a name or alias, checked against the problem.
    ``system_values``: the run's System parameter values (None: the System's defaults); the
    declared symmetries are checked for exactness with them (:func:`livens.checks.exact_symmetries`)."""
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
    if sch.uses_symmetries and problem.symmetries:
        from .checks import exact_symmetries

        checked = mech if system_values is None else mech.bind({k: jnp.asarray(v) for k, v in system_values.items()})
        kept, _, invariant = exact_symmetries(problem, checked)
        mech = mechanics(problem.system, problem.q0, kept, invariant)
    return sch, vals, mech


def new_history(scheme: Scheme, mech: Mechanics, state: State, h, params) -> _guess.GuessHistory:
    """An empty history of step solutions for the "extrapolated" guess (:mod:`livens.guess`)."""
    nx = jax.eval_shape(lambda s: scheme.pack(scheme.guess(s, h, 0.0, params, mech, "simple"), mech.d, mech.m),
                        state).shape[0]
    return _guess.GuessHistory.empty(nx)


def initial_state(problem: Problem, mech: Mechanics, scheme: Scheme | None = None) -> State:
    """The state at t = 0 (before the scheme's own ``start``): multipliers zero, and zero carries
    of the compensated summation for a scheme in increment form."""
    z = jnp.zeros((mech.m,))
    q, p = jnp.asarray(problem.q0), jnp.asarray(problem.p0)
    comp = (jnp.zeros_like(q), jnp.zeros_like(p)) if (scheme is not None and scheme.increments) else None
    return State(q=q, p=p, v=jnp.asarray(problem.v0), lam=z, gam=z, comp=comp)


def simulate(
    problem: Problem,
    scheme: str = "VI-S",
    h: float | None = None,
    t_end: float | None = None,
    tol: float | str = 1e-9,
    max_iter: int = 40,
    guess: str | None = None,
    progress: bool | None = None,
    blowup_factor: float | None = None,
    chunk: int = DEFAULT_CHUNK,
    out=None,
    save_every: int = 1,
    resume=None,
    rescue: bool = True,
    final_iteration: bool = False,
    parameters: dict | None = None,
    backend: str | None = None,
    **params: Any,
):
    """Integrate ``problem`` with ``scheme`` from t = 0 to ``t_end`` with step ``h``.

    Parameters
    ----------
    problem: a :class:`~livens.Problem` (e.g. ``lv.examples.load("heavy-top")``).
    scheme: canonical name or paper alias (``lv.schemes.names()``), e.g. "VI-S", "ggl-theta-a".
    h, t_end: step size and end time; default to the problem's (the paper's) values.
    tol, max_iter: Newton stops on ||R||_inf <= tol (the papers' rule, default 1e-9); a step that
        needs more than max_iter iterations stops the run with :class:`~livens.ConvergenceError`.
        ``tol="roundoff"`` iterates instead until the Newton increment stops decreasing or is a few
        ulps of the state (:func:`livens.newton.newton`): no bias from stopping on one side of the
        root, the setting for long runs at the round-off limit.
    final_iteration: with a numeric tol, take one more Newton iteration after ||R|| <= tol
        (removes most of the stopping bias at the price of one iteration per step).
    guess: Newton's first guess: "extrapolated" (livens' own, :mod:`livens.guess`): the solutions
        of the last five steps extrapolated (quartic), where its residual is smaller than that of
        the advanced guess; or 002 Table 2's "simple" (the unknowns of step n) or "advanced"
        (q^n + h v^n). Same equations, same tolerance, results equal to the tolerance. None (the
        default): the scheme's ``preferred_guess``, "extrapolated" for every scheme but
        ggl-theta-a ("advanced": its gamma oscillates from step to step, and from the
        extrapolation Newton needs an iteration more).
    progress: show a progress bar (default: on a terminal, for runs longer than 2 s).
    blowup_factor: stop with :class:`~livens.BlowUpError` when |E - E0| exceeds
        blowup_factor * max(|E0|, 1).
    chunk: steps per compiled ``lax.scan`` chunk (fixed, so that h and t_end never recompile).
    out: a netCDF path; the kept nodes are appended while the run goes (at least once a second,
        :mod:`livens.stream`), so the file is loadable at every moment and a failure or Ctrl-C
        leaves every kept step in it; a finished run rewrites it atomically with its diagnostics.
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
    parameters: values of the System's parameters (``System(parameters=...)``) in place of its
        defaults; runtime values, so a sweep over them compiles once. Stored in
        ``solution.meta["parameters"]``.
    backend: what runs the compiled chunks of steps: "native" (the chunk loop translated to one C
        function and compiled by the system's C compiler, :mod:`livens.native`), "xla" (JAX's
        compiler), or "auto" (native where the loop translates, a C compiler is found and the
        system has at most ``livens.native.runner.MAX_UNKNOWNS`` Newton unknowns per step and
        coordinates plus multipliers, else XLA). Default: ``$LIVENS_BACKEND``, else "auto". The two compute the same equations with
        the same Newton iteration; results agree to round-off. ``solution.meta["backend"]`` says
        which ran (and ``meta["native_fallback"]`` why XLA did where native was possible in principle).
    **params: scheme parameters, e.g. ``theta=0.5``.

    Returns a :class:`~livens.Solution`. The failed-run errors carry ``.solution`` with every
    converged (saved) step. ``solution.meta["solver"]`` names the nonlinear solve: "newton", or
    "newton+rescue" (Newton, and the damped least-squares rescue of a failed step).
    """
    h = problem.h if h is None else h
    t_end = problem.t_end if t_end is None else t_end
    if h is None or t_end is None:
        raise ValueError("Give h and t_end: the problem has no default step size or end time.")
    t_start = 0.0 if resume is None else float(resume.t[-1])
    check_step(h, t_end - t_start if resume is not None else t_end, tol, max_iter)
    nopts = newton_options(tol, final_iteration)
    tol_num = RESCUE_TOL if nopts[0] == ROUNDOFF else float(tol)  # the rescue needs a number
    check_guess(guess)
    from .native.runner import resolve_backend

    backend = resolve_backend(backend)
    if blowup_factor is not None and not (blowup_factor > 0):
        raise ValueError(f"blowup_factor must be positive; got {blowup_factor!r}.")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk must be a positive integer; got {chunk!r}.")
    if isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1:
        raise ValueError(f"save_every must be a positive integer; got {save_every!r}.")
    _NothingComputed.set(True)
    try:
        with serial_blas():
            return _simulate(problem, scheme, h, t_end, t_start, tol, tol_num, nopts, max_iter, guess, params,
                             parameters, rescue, blowup_factor, chunk, save_every, resume, out, progress, backend)
    finally:
        _NothingComputed.set(False)


def _simulate(problem, scheme, h, t_end, t_start, tol, tol_num, nopts, max_iter, guess, params, parameters,
              rescue, blowup_factor, chunk, save_every, resume, out, progress, backend="xla"):
    """:func:`simulate` after its arguments are checked."""
    from .solution import Solution

    sys_values = parameter_values(problem.system, parameters)
    sch, vals, mech = resolve(problem, scheme, params, sys_values)
    jsys = None if sys_values is None else {k: jnp.asarray(v) for k, v in sys_values.items()}
    guess = sch.preferred_guess if guess is None else guess
    n_steps = max(1, int(round((t_end - t_start) / h)))
    finish_start = None
    if resume is None:
        state = initial_state(problem, mech, sch)
        if sch.start_ahead is not None:  # the state's shapes now, the state once the time loop is compiled
            from .native.runner import runs_natively

            start_backend = "native" if runs_natively(backend, sch, mech) else "xla"
            state, finish_start = sch.start_ahead(state, float(h), vals, mech.bind(jsys), backend=start_backend)
        elif sch.start is not None:
            state = sch.start(state, float(h), vals, mech.bind(jsys))
        offset = 0
    else:
        state, offset = _resume_state(resume, sch, mech, h)
    layout = record_layout(sch, mech, guess, state, h, vals)
    runner = _make_runner(mech, sch, guess, chunk, layout, nopts, backend)
    jparams = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
    empty_history = history = new_history(sch, mech, state, h, jparams)
    # the same argument kinds on every call (one cache entry): n0 a device value like the n a
    # chunk returns, the rest NumPy scalars
    consts = (np.int64(n_steps), np.float64(h), np.float64(tol_num), np.int32(max_iter), jparams, jsys)
    t_start_dev = np.float64(t_start)
    ahead_compile = 0.0
    if finish_start is not None:  # the time loop is compiled while the start compiles
        t0 = time.perf_counter()
        runner.prepare(state, history, t_start_dev, jnp.asarray(0, jnp.int64), *consts)
        ahead_compile = time.perf_counter() - t0
        state = finish_start()
    if resume is not None and guess == "extrapolated":
        history = _guess.GuessHistory.from_meta(resume.meta.get("guess_history"), offset, empty_history)
    meta = dict(h=float(h), t_end=float(t_start + n_steps * h), tol=tol if nopts[0] == ROUNDOFF else float(tol),
                final_iteration=nopts[1], max_iter=int(max_iter), guess=guess,
                save_every=int(save_every), t_start=t_start, step_offset=offset,
                solver="newton+rescue" if rescue else "newton")
    if sys_values is not None:
        meta["parameters"] = {k: v.tolist() for k, v in sys_values.items()}
    if sch.uses_symmetries:  # the symmetries whose momentum maps the scheme keeps by construction
        meta["kept_symmetries"] = [s.name for s in mech.symmetries]
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
        i64 = jnp.int64
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
            _NothingComputed.set(False)  # from here on, results are kept and written
            recs = layout.unpack(recs)
            n_new = int(n) - n_done
            if compile_time is None:
                compile_time = ahead_compile + time.perf_counter() - t0
            rec = {k: np.asarray(v)[:n_new] for k, v in recs.items() if k != "ok"}
            if bool(failed):
                i_bad = int(np.flatnonzero(~np.asarray(recs["ok"]))[0])
                its, resid = int(recs["iterations"][i_bad]), float(recs["residual"][i_bad])
                step_rec = None
                if rescue:
                    state, step_rec, resid = _rescue(mech, sch, guess, state, t_start + (n_done + n_new) * h, h,
                                                     tol_num, max_iter, jparams, its, jsys)
                    history = empty_history  # the extrapolation restarts after a rescued step
                pending = None
                if step_rec is None:
                    failure = ("convergence", n_done + n_new, resid, its)
                else:
                    rescued.append(offset + n_done + n_new)
                    rec = {k: np.concatenate([v, step_rec[k][None]]) for k, v in rec.items()}
                    n_new += 1
            # the steps before a failed Newton step are checked too: an energy that left the band
            # before the failure is a blow-up, whatever the chunk size
            if blowup_factor is not None and n_new and (failure is None or failure[0] == "convergence"):
                energy0, blown = _check_blowup(mech, problem, rec, energy0, blowup_factor)
                if blown is not None:
                    keep = blown[0] + 1  # the steps up to and including the first blown-up one
                    rec = {k: v[:keep] for k, v in rec.items()}
                    failure = ("blowup", n_done + keep, blown[1], 0)
                    n_new = keep
                    rescued = [i for i in rescued if i < offset + n_done + keep]  # only the kept steps
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
        if stream is not None:
            stream.close()  # the rows it still holds (written once a second): the file has every kept step
        interrupted["restore"]()
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - wall0
    meta.update(wall_time=wall, compile_time=compile_time or 0.0, steps=n_done, rescued_steps=rescued,
                backend=getattr(runner, "backend", None) or "xla")
    if getattr(runner, "reason", None) and meta["backend"] == "xla":
        meta["native_fallback"] = runner.reason
    if guess == "extrapolated" and failure is None:
        # the predictor's history at the last node, so that a resumed run continues exactly
        meta["guess_history"] = history.to_meta(offset + n_done)
    if state.comp is not None and failure is None:
        # the carries of the compensated summation at the last node, so that a resumed run continues exactly
        meta["compensation"] = {"q": np.asarray(state.comp[0]).tolist(), "p": np.asarray(state.comp[1]).tolist()}
    sol = Solution.from_records(problem, sch, vals, mech, collected, meta, start_node)
    if stream is not None and failure is None:
        sol.to_netcdf(out)
    if failure is not None:
        kind, step, resid, its = failure
        t_fail = t_start + step * h
        total = offset + n_steps  # steps of the whole run; messages count steps from 1
        kept = _kept_sentence(n_done, save_every, out, "before it" if kind == "convergence" else
                              "up to and including it" if kind == "blowup" else "so far")
        if kind == "convergence":
            reason = (f"Newton did not converge in step {offset + step + 1} of {total} (t = {t_fail:.6g} -> "
                      f"{t_fail + h:.6g}) of {sch.name} with h = {h:g}: residual ||R||_inf = {resid:.3e} after "
                      f"{its} iterations (tol = {tol if isinstance(tol, str) else format(tol, 'g')}, max_iter = {max_iter})."
                      f"{' The damped least-squares rescue failed too.' if rescue else ''} "
                      f"Try a smaller h, a larger max_iter or another guess.")
            raise ConvergenceError(f"{reason} {kept}", solution=sol, step=offset + step, time=t_fail,
                                   residual=resid, reason=reason)
        if kind == "blowup":
            reason = (f"Energy blow-up in step {offset + step} of {total} (t = {t_fail - h:.6g} -> {t_fail:.6g}) "
                      f"of {sch.name} with h = {h:g}: |E - E0| = {resid:.3e} exceeds blowup_factor = "
                      f"{blowup_factor:g} times max(|E0|, 1).")
            raise BlowUpError(f"{reason} {kept}", solution=sol, step=offset + step - 1, time=t_fail,
                              residual=resid, reason=reason)
        reason = f"Interrupted after {n_done} of {n_steps} steps (t = {t_fail:.6g})."
        raise SimulationInterrupted(f"{reason} {kept}", solution=sol, step=offset + n_done, time=t_fail,
                                    residual=resid, reason=reason)
    return sol


def _kept_sentence(n_done: int, save_every: int, out, where: str) -> str:
    """Where the steps of a stopped run are: the error's ``.solution`` and the streamed file."""
    if n_done == 0:
        what = "No step was completed; the initial state is kept"
    else:
        nodes = f" (one node in every {save_every})" if save_every > 1 else ""
        what = (f"The one step {where} is kept{nodes}" if n_done == 1 else
                f"The {n_done} steps {where} are kept{nodes}")
    return f"{what} in the error's .solution" + (f" and in {os.fspath(out)!r}." if out is not None else ".")


def _rescue(mech, sch, guess, state, t, h, tol, max_iter, jparams, its_failed, jsys=None):
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
                                                          np.int32(RESCUE_ITER_FACTOR * max_iter), jparams, jsys)
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
    q, p = jnp.asarray(sol.q[-1]), jnp.asarray(sol.p[-1])
    comp = None
    if sch.increments:
        # the carries of the compensated summation where the finished run stored them (bit for bit),
        # else (a partial file) zero: the continuation then agrees to round-off
        stored = sol.meta.get("compensation")
        if stored is not None:
            comp = (jnp.asarray(stored["q"], q.dtype), jnp.asarray(stored["p"], p.dtype))
        else:
            comp = (jnp.zeros_like(q), jnp.zeros_like(p))
    st = State(q=q, p=p, v=jnp.asarray(v), lam=jnp.asarray(lam), gam=jnp.asarray(gam), comp=comp)
    return st, offset


class _NothingComputed:
    """Whether the running ``simulate`` has computed nothing yet (set-up, the first chunk's
    compilation and computation): a Ctrl-C then loses nothing, and the command line may exit at
    once instead of waiting for XLA's compiler, which does not return to Python until it is done
    (:func:`livens.cli._exit_on_ctrl_c_before_the_first_step`). ``lock`` is held while the flag is
    cleared, so that whoever acts on the flag does so before any result is written."""

    import threading as _threading

    lock = _threading.Lock()
    flag = False

    @classmethod
    def set(cls, value: bool) -> None:
        with cls.lock:
            cls.flag = value


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
    """The run's progress bar (steps, rate, time left; :mod:`livens._progress`), or None.

    ``progress=None``: on a terminal, once the run has taken 2 s; ``True``: always; ``False``: never.
    """
    from ._progress import progress_bar

    return progress_bar(total, progress, unit="step")


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
