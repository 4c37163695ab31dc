"""Building blocks shared by the papers' reproduction modules: run specs, the checks that turn a run
into a verdict (thresholds in :mod:`livens.studies.report`), and the tables a section's figures and
claims are written as (:class:`Figure` entries drawn by :func:`draw_figures`, :class:`Said` entries
judged by :func:`judge_claims`).

Every check is wrapped by :func:`checked`: an exception while evaluating it gives the verdict
"error" with the message, and where the run failed with the papers' Newton and its re-run with
livens' rescue exists (:meth:`Context.rescued`), the claim reports both outcomes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ... import plots
from ..paper_registry import requirements
from ..report import (
    BY_CONSTRUCTION,
    DRIFT_RATIO,
    ERROR,
    FAILS,
    HOLDS,
    MET,
    NOT_CONSERVED,
    NOT_REPRODUCED,
    ORDER_TOL,
    ROUNDOFF,
    SMALL_AMPLITUDE,
    SMALL_AMPLITUDE_TRIED,
    TOL,
    VIOLATED,
    Claim,
    constructed,
    errored,
    fmt,
    judged,
    missing,
    of_the_order,
    order_ok,
    order_range,
    sensitivity,
)
from ..runs import BLOWUP, NEWTON, OK, REFUSED, RunSpec, available_scheme
from ..runs import ERROR as RUN_ERROR


def traced(
    example: str,
    scheme: str,
    h: float,
    t_end: float,
    tol: float = TOL,
    params=None,
    example_params=None,
    max_points=None,
    **kw,
) -> RunSpec:
    """A run that keeps its full Trace (tolerance 1e-12 by default: round-off claims; the other
    Newton settings are the papers': simple guess, no rescue)."""
    return RunSpec.make(
        example,
        scheme,
        h,
        t_end,
        params=params,
        example_params=example_params,
        tol=tol,
        record="trace",
        max_points=max_points,
        **kw,
    )


def horizon(ctx, spec, t_claim: float) -> str | None:
    """Why a claim about the interval [0, t_claim] cannot be judged from ``spec``'s run: it was
    planned shorter ("quick run: T = 40 of 1000"); None when it reaches the claim's horizon."""
    if spec.t_end < t_claim * (1.0 - 1e-12):
        return f"{'quick run' if ctx.quick else 'run'}: T = {spec.t_end:g} of {t_claim:g}"
    return None


def failure_words(r) -> str:
    """How a run ended, e.g. "the paper's Newton fails at step 120, t = 81"."""
    who = "livens' rescued Newton" if r.spec.rescue else "the paper's Newton"
    if r.status == NEWTON:
        return f"{who} fails at step {r.fail_step}, t = {r.t_fail:.4g}"
    if r.status == OK:
        n = len(r.rescued_steps)
        return f"runs to T = {r.t_reached:.4g}" + (f", {n} step{'s' * (n != 1)} rescued" if r.spec.rescue else "")
    where = f" at t = {r.t_fail:.4g}" if r.t_fail is not None else ""
    return f"{r.status}{where}"


def with_rescue(paper: Claim, rescued: Claim, r_paper, r_rescue) -> Claim:
    """One claim from its verdict with the papers' Newton (``paper``, the verdict that counts) and
    with livens' rescue (``rescued``): "fails with the paper's Newton at step 120, t = 81; holds with
    rescue, 52 steps rescued"."""
    n = len(r_rescue.rescued_steps)
    first = f"{paper.verdict} with the paper's Newton ({failure_words(r_paper)})"
    second = (
        f"{rescued.verdict} with livens' rescue (damped Newton after a failed step), {n} step{'s' * (n != 1)} rescued"
    )
    if paper.measured:
        first += f": {paper.measured}"
    if rescued.measured:
        second += f": {rescued.measured}"
    reason = paper.reason
    if rescued.verdict != paper.verdict:
        reason = (reason + "; " if reason else "") + f"{rescued.verdict} with livens' rescue"
    return Claim(paper.where, paper.text, f"{first}; {second}", paper.verdict, reason)


def checked(check):
    """Wrap a check ``check(where, text, ctx, spec, ...) -> Claim``: an exception gives an "error"
    claim with its message; where the run failed with the papers' Newton and was re-run with
    rescue, the claim states both verdicts (:func:`with_rescue`)."""

    @functools.wraps(check)
    def wrapper(where, text, ctx, spec, *args, **kw):
        try:
            claim = check(where, text, ctx, spec, *args, **kw)
            # every run the check reads (spec and RunSpec arguments) whose papers' Newton failed
            runs = [spec] + [a for a in args if isinstance(a, RunSpec)]
            twins = (
                {s: ctx.rescued(s) for s in runs if ctx.result(s).status == NEWTON} if hasattr(ctx, "rescued") else {}
            )
            twins = {s: t for s, t in twins.items() if t is not None}
            if twins:
                sub = lambda a: twins[a].spec if isinstance(a, RunSpec) and a in twins else a  # noqa: E731
                again = check(where, text, ctx, sub(spec), *[sub(a) for a in args], **kw)
                first = next(iter(twins))
                claim = with_rescue(claim, again, ctx.result(first), twins[first])
            return claim
        except Exception as exc:  # noqa: BLE001 - reported as the claim's verdict
            return errored(where, text, exc)

    return wrapper


#: the first line of every report's Settings section
NEWTON_NOTE = (
    "Newton as in the papers (KBS23b §6): stopping tolerance 1e-9, the unknowns of step n as first guess "
    "('simple'), no damping and no rescue; max_iter = 40 is livens' choice (the papers print none). "
    "Runs behind round-off and order claims use a smaller tolerance where the table says so. A run whose "
    "Newton iteration fails is run once more with livens' rescue (damped least-squares Newton after a "
    "failed step); claims depending on it state both outcomes, the verdict is the paper's setting's."
)
THRESHOLDS = (
    "thresholds (fixed in livens.studies.report, the same for every paper): per-step energy or momentum change "
    "<= 1e-11 of the energy scale (max|T| + max|V|) or of max(1, |J|) is round-off; > 1e-8 is 'not conserved'; "
    "a constraint is met at <= 1e-11 (or ten Newton tolerances) and violated at > 1e-9; a residual the scheme "
    "enforces by its own equations is 'by construction' (true while Newton converges: no evidence, not "
    "counted as a hold); a fitted order agrees with a claimed one within ±0.3; 'of the order of 1e-k' means "
    "within half a decade; an energy error 'typical for symplectic methods' oscillates without drift (max "
    "|E - E0| over the last third <= 2 x over the first third, a fitted line moves <= half of max |E - E0|), "
    "stays <= 0.1 of the energy the motion exchanges (max T - min T), and its amplitude scales like h^order "
    "(h and h/2, ±0.3); 'oscillates around x*': x - x* changes sign at least twice and |mean(x) - x*| <= "
    "0.25 of the range of x. Thresholds that are livens' choice carry a sensitivity line in the claim: the "
    "verdict at other values of the threshold."
)


def run_words(spec, rescued=None) -> str:
    """The settings of a run for a figure's title, e.g. "VI-S, h = 0.001, Newton tol 1e-09" (and
    "; livens' rescue, 1 step rescued" for a re-run with rescue ``rescued``)."""
    out = f"{spec.label}, h = {spec.h:g}, Newton tol {spec.tol:g}"
    if rescued is not None:
        n = len(rescued.rescued_steps)
        out += f"; livens' rescue, {n} step{'s' * (n != 1)} rescued"
    return out


def present(schemes) -> list:
    """The schemes of the list that livens has."""
    return [s for s in schemes if available_scheme(s)]


class Why(str):
    """Why a run cannot be used, with the verdict of the claims that depend on it (``verdict``):
    "fails" where the paper's method failed numerically (Newton, blow-up), "error" where livens
    raised (an exception in a user function, a scheme, the engine, or a refusal of a planned run):
    a crash is never evidence about the paper."""

    verdict: str = FAILS


def run_problem(ctx, spec) -> Why | None:
    """Why a run's trace cannot be used (its status, and the verdict it gives: :class:`Why`), or None."""
    r = ctx.result(spec)
    if r.status == OK and r.trace is not None:
        return None
    where = f" in step {r.fail_step}, t = {r.t_fail:.4g}" if r.t_fail is not None else ""
    if r.status in (NEWTON, BLOWUP):  # the status and the step say it
        return Why(f"run {r.spec.label} h={r.spec.h:g} ended with {r.status}{where} ({r.spec.newton()})")
    if r.status == OK:  # no trace: nothing was recorded
        return Why(f"run {r.spec.label} h={r.spec.h:g} recorded no trace")
    first = (r.message or "").splitlines()[0][:240] if r.message else ""
    why = Why(f"run {r.spec.label} h={r.spec.h:g} raised ({r.status}){where}: {first}")
    why.verdict = ERROR
    return why


def broken(where, text, why, measured: str = "") -> Claim:
    """The claim of a run that cannot be used: "fails" for a numerical failure of the paper's method,
    "error" for an exception (:class:`Why`)."""
    return Claim(where, text, measured, getattr(why, "verdict", FAILS), why)


def run_errors(ctx, specs) -> list:
    """The reasons of the runs among ``specs`` that raised (verdict "error"), de-duplicated."""
    out = []
    for s in specs:
        why = run_problem(ctx, s)
        if why is not None and why.verdict == ERROR and why not in out:
            out.append(why)
    return out


@checked
def status_claim(where, text, ctx, spec) -> Claim:
    """A claim that the run goes through with no numerical failure."""
    r = ctx.result(spec)
    ok = r.status == OK
    return judged(
        where,
        text,
        ok,
        f"{r.steps} steps to t = {r.t_reached:.4g}, status {r.status}"
        + (f" at t = {r.t_fail:.4g}" if r.t_fail is not None else ""),
    )


# ------------------------------------------------------------------------------ conservation
def band(spec) -> float:
    """The round-off band of a run: ROUNDOFF, or ten Newton tolerances where a larger tolerance had
    to be used (a conserved quantity changes by about the Newton residual per step)."""
    return max(ROUNDOFF, 10.0 * spec.tol)


@checked
def energy_conserved(where, text, ctx, spec, key=None) -> Claim:
    """max_n |E^{n+1} - E^n| / (max|T| + max|V|) <= band(spec)."""
    why = run_problem(ctx, spec)
    if why:
        return broken(where, text, why)
    tr = ctx.trace(spec)
    k = key or tr.energy_key
    m = tr.max_energy_increment(k)
    return judged(
        where,
        text,
        m <= band(spec),
        f"{spec.label}: max per-step |Δ{_sym(k)}| / (max|T|+max|V|) = {fmt(m)} (round-off band {band(spec):g})",
    )


@checked
def energy_not_conserved(where, text, ctx, spec, key=None) -> Claim:
    """The energy changes by more than NOT_CONSERVED (relative) somewhere in the run."""
    why = run_problem(ctx, spec)
    if why:
        return broken(where, text, why)
    tr = ctx.trace(spec)
    k = key or tr.energy_key
    m = tr.max_energy_increment(k)
    err = tr.max_energy_error(k)
    return judged(
        where,
        text,
        m > NOT_CONSERVED,
        f"{spec.label}: max per-step |Δ{_sym(k)}| / (max|T|+max|V|) = {fmt(m)}; "
        f"max |{_sym(k)} - {_sym(k)}0| / |{_sym(k)}0| = {fmt(err)} (> {NOT_CONSERVED:g} counts as not conserved)",
    )


@checked
def momentum_conserved(where, text, ctx, spec, names=None) -> Claim:
    """Every momentum map's per-step change <= band(spec) * max(1, max|J|)."""
    why = run_problem(ctx, spec)
    if why:
        return broken(where, text, why)
    tr = ctx.trace(spec)
    worst, parts = 0.0, []
    for k, J in tr.momentum.items():
        if names is not None and k not in names:
            continue
        scale = max(1.0, float(np.max(np.abs(J))))
        inc = float(np.max(np.abs(np.diff(J)), initial=0.0)) / scale
        worst = max(worst, inc)
        parts.append(f"{k} {fmt(inc)}")
    if not parts:
        return Claim(where, text, "", NOT_REPRODUCED, "the problem declares no such momentum map")
    return judged(
        where,
        text,
        worst <= band(spec),
        f"{spec.label}: max per-step |ΔJ| / max(1,|J|): " + ", ".join(parts) + f" (band {band(spec):g})",
    )


def drift(t, E) -> dict:
    """The energy error's drift (thresholds DRIFT_RATIO in :mod:`livens.studies.report`):
    ``first``, ``last``: max |E - E0| over the first and the last third of the run; ``line``: how far
    a least-squares line through E moves over the run; ``amplitude``: max |E - E0|; ``ok``: no
    secular drift (last <= DRIFT_RATIO first and line <= amplitude / 2)."""
    t = np.asarray(t, float)
    E = np.asarray(E, float)
    dev = np.abs(E - E[0])
    k = max(1, len(E) // 3)
    first, last = float(np.max(dev[: k + 1])), float(np.max(dev[-k:]))
    amp = float(np.max(dev))
    line = abs(float(np.polyfit(t - t[0], E, 1)[0])) * float(t[-1] - t[0]) if len(E) > 2 else float("nan")
    ok = bool(np.all(np.isfinite(E)) and last <= DRIFT_RATIO * first and line <= 0.5 * amp)
    return {"first": first, "last": last, "line": line, "amplitude": amp, "ok": ok}


#: "oscillates around x*": |mean(x) - x*| <= AROUND of the range max x - min x (x* near the middle of
#: the oscillation), and x - x* changes sign at least twice; livens' choice, the papers give none
AROUND = 0.25
#: the values of AROUND each verdict's sensitivity line is given for
AROUND_TRIED = (0.125, 0.25, 0.5)


def around(x, true: float) -> dict:
    """Whether the series ``x`` oscillates around ``true`` (AROUND): ``offset`` |mean(x) - true|,
    ``range`` max x - min x, ``above`` the fraction of samples above ``true``, ``crossings`` the
    sign changes of x - true, ``ok``, and ``words`` (the measured text with its sensitivity line)."""
    x = np.asarray(x, float)
    dev = x - true
    rng = float(np.max(x) - np.min(x))
    offset = abs(float(np.mean(dev)))
    sign = np.sign(dev[np.abs(dev) > 1e-14 * max(1.0, abs(true))])
    crossings = int(np.sum(sign[1:] != sign[:-1])) if sign.size else 0
    above = float(np.mean(dev > 0))

    def holds(f):
        return crossings >= 2 and offset <= f * rng

    words = (
        f"x - x* ranges over [{dev.min():.3e}, {dev.max():.3e}], above x* {above:.0%} of the time, "
        f"{crossings} sign changes; |mean(x) - x*| = {offset:.3e} = {offset / rng if rng > 0 else float('nan'):.2f} "
        f"of the range (around: <= {AROUND:g} and at least 2 sign changes; "
        + sensitivity("the bound on the offset", AROUND_TRIED, holds)
        + ")"
    )
    return {"offset": offset, "range": rng, "above": above, "crossings": crossings, "ok": holds(AROUND), "words": words}


def within_horizon(claim: Claim, ctx, spec, t_claim: float, universal: bool = True) -> Claim:
    """A claim about the interval [0, t_claim] judged from a run to ``spec.t_end``: where the run is
    shorter (the quick mode), "not reproduced (quick run: T = 2 of 10)" with the verdict the short
    run would give stated in the reason, except that a ``universal`` claim ("in each time step",
    "throughout") that fails on the shorter interval fails on the whole one."""
    short = horizon(ctx, spec, t_claim)
    if not short or claim.verdict in (NOT_REPRODUCED, ERROR):
        return claim
    if universal and claim.verdict == FAILS:
        return claim
    would = f"the verdict on this run would be '{claim.verdict}'" + (f" ({claim.reason})" if claim.reason else "")
    return Claim(claim.where, claim.text, claim.measured, NOT_REPRODUCED, f"{short}; {would}")


def drift_words(d: dict, unit: str = "") -> str:
    u = f" {unit}" if unit else ""
    return (
        f"max |E - E0| over the first third {d['first']:.3e}{u}, over the last third {d['last']:.3e}{u} "
        f"(no drift: last <= {DRIFT_RATIO:g} x first); fitted line moves {d['line']:.3e}{u} over the run "
        f"(no drift: <= half of max |E - E0| = {d['amplitude']:.3e}{u})"
    )


def exchanged_energy(tr) -> float:
    """The energy the motion exchanges: the range max T - min T of the kinetic energy (independent of
    where the potential has its zero, unlike |E0| or max|V|); :attr:`Trace.energy_scale` where the
    trace has no kinetic energy or it does not change."""
    T = tr.energy.get("kinetic")
    rng = float(np.max(T) - np.min(T)) if T is not None and len(T) else 0.0
    return rng if rng > 0 else tr.energy_scale


def fluctuation_parts(tr, tr_half, order: float, key=None) -> tuple[dict, str]:
    """The parts of :func:`fluctuation_verdict`: {"drift": no secular drift at h and h/2,
    "small": max |E - E0| <= SMALL_AMPLITUDE of the energy exchanged (:func:`exchanged_energy`),
    "scaling": the amplitude ratio of h and h/2 is 2^order within ORDER_TOL}, and the measured text
    (with the sensitivity of "small" to SMALL_AMPLITUDE, livens' choice)."""
    k = key or tr.energy_key
    d = drift(tr.t, tr.energy[k])
    d2 = drift(tr_half.t, tr_half.energy[k])
    scale = exchanged_energy(tr)
    ratio = d["amplitude"] / d2["amplitude"] if d2["amplitude"] > 0 else float("nan")
    p = math.log2(ratio) if ratio == ratio and ratio > 0 else float("nan")
    rel = d["amplitude"] / scale
    parts = {
        "drift": d["ok"] and d2["ok"],
        "small": rel <= SMALL_AMPLITUDE,
        "scaling": order_ok(p, order),
    }
    E0 = float(tr.energy[k][0])
    words = (
        f"h = {tr.h:g}: {drift_words(d)}; max |E - E0| = {rel:.2e} of the energy exchanged max T - min T = "
        f"{scale:.4g} (small: <= {SMALL_AMPLITUDE:g}; {sensitivity('the size bound', SMALL_AMPLITUDE_TRIED, lambda x: rel <= x)}; "
        f"= {d['amplitude'] / max(abs(E0), 1e-300):.2e} of |E0| = {abs(E0):.3g}, a figure that depends on the "
        f"potential's zero); h = {tr_half.h:g}: max |E - E0| = {d2['amplitude']:.3e}, drift "
        f"{'none' if d2['ok'] else 'yes'}; amplitude ratio {ratio:.3f} = 2^{p:.2f} (h^{order:g} expected, "
        f"±{ORDER_TOL:g})"
    )
    return parts, words


def fluctuation_verdict(tr, tr_half, order: float, key=None) -> tuple[bool, str]:
    """The energy error of a symplectic method (KBS23b Fig. 8, KBS23a Figs 14 and 16): it oscillates,
    bounded and without secular drift (:func:`drift`), small (max |E - E0| <= SMALL_AMPLITUDE of the
    energy exchanged, :func:`exchanged_energy`), and its amplitude scales like h^order: log2 of the amplitudes at h and h/2
    agrees with ``order`` within ORDER_TOL. ``tr_half``: the same run with h/2."""
    parts, words = fluctuation_parts(tr, tr_half, order, key)
    return all(parts.values()), words


@checked
def energy_fluctuates(where, text, ctx, spec, half, order: float, key=None) -> Claim:
    """ "Fluctuations of the energy typical for symplectic methods": :func:`fluctuation_verdict` on
    the run ``spec`` and its h/2 twin ``half``."""
    why = run_problem(ctx, spec) or run_problem(ctx, half)
    if why:
        return broken(where, text, why)
    ok, words = fluctuation_verdict(ctx.trace(spec), ctx.trace(half), order, key)
    return judged(where, text, ok, f"{spec.label}: {words}")


@checked
def increments_of_the_order(where, text, ctx, spec, exponent: float, key=None, unit: str = "") -> Claim:
    """ "Increments of the energy are of the order of 10^exponent": max_n |E^{n+1} - E^n| within half
    a decade of it (:func:`~livens.studies.report.of_the_order`)."""
    why = run_problem(ctx, spec)
    if why:
        return broken(where, text, why)
    tr = ctx.trace(spec)
    k = key or tr.energy_key
    m = float(np.max(np.abs(np.diff(tr.energy[k]))))
    u = f" {unit}" if unit else ""
    return judged(
        where,
        text,
        of_the_order(m, exponent),
        f"{spec.label}: max |{_sym(k)}^(n+1) - {_sym(k)}^n| = {m:.2e}{u} (of the order of 1e{exponent:g}: "
        f"{order_range(exponent)})",
    )


@checked
def energy_stays_bounded(where, text, ctx, spec, key=None, unit: str = "") -> Claim:
    """ "The energy error remains stable": no secular drift (:func:`drift`)."""
    why = run_problem(ctx, spec)
    if why:
        return broken(where, text, why)
    tr = ctx.trace(spec)
    d = drift(tr.t, tr.energy[key or tr.energy_key])
    return judged(where, text, d["ok"], f"{spec.label}: {drift_words(d, unit)}")


# ------------------------------------------------------------------------------ constraints
def _residual(tr, level, where_kind, which=None):
    name = tr.nodal_name(level) if where_kind == "nodal" else tr.enforced_name(level)
    if name is None:
        return None, None
    return tr.max_residual(name, which), name


def enforced_equivalent(tr, level, which=None) -> str | None:
    """The name of the residual the scheme enforces by its own equations that is the same quantity
    as the nodal residual of ``level`` over the constraints ``which`` (None: all), or None.

    g(q^{n+1}) is the nodal g(q^n) one node later; G(q^{n+1}) M^-1 p^{n+1} is the nodal momentum-level
    residual; a velocity residual enforced with the nodal momentum p^{n+1} (or velocity v^{n+1}) at any
    configuration equals the nodal one for linear constraints, whose Jacobian is constant."""
    name = tr.enforced_name(level)
    if name is None:
        return None
    if level == "position":
        return name if "g(q^{n+1})" in name else None
    nodal = tr.nodal_name("velocity") or ""
    same_w = ("p^{n+1}" in name and "p^n" in nodal) or ("v^{n+1}" in name and "v^n" in nodal)
    if not same_w:
        return None
    if "G(q^{n+1})" in name:
        return name
    rows = range(tr.nodal[nodal].shape[1]) if which is None else which
    return name if rows and all(k in tr.linear_constraints for k in rows) else None


@checked
def constraint_met(
    where, text, ctx, spec, level, kind="nodal", which=None, met=True, show_enforced=False, construction=None
) -> Claim:
    """The constraint residual of ``level`` at the nodes (``kind="nodal"``: the quantity the papers'
    figures of constraints on configuration and on momentum level show, g(q^n) and G(q^n) M^-1 p^n)
    or where the scheme enforces it (``"enforced"``) is <= MET (``met=True``) or > VIOLATED
    (``met=False``), over the constraints ``which`` (default all).

    A residual the scheme enforces by its own equations (``kind="enforced"``, or a nodal residual that
    is the same quantity as an enforced one, :func:`enforced_equivalent`) cannot fail while Newton
    converges: the verdict is "by construction" (outside the holds), ``construction`` naming the
    equation. ``show_enforced`` adds the enforced residual to the measured text (e.g. VI-B's own
    G(q^{n+1}) v^{n+1}, eq 82e, beside the nodal G M^-1 p its figures show)."""
    if which is not None and len(which) == 0:
        return Claim(where, text, "", NOT_REPRODUCED, f"no {level} constraint of this kind to check (empty selection)")
    why = run_problem(ctx, spec)
    if why:
        return broken(where, text, why)
    tr = ctx.trace(spec)
    r, name = _residual(tr, level, kind, which)
    if r is None:
        return Claim(where, text, "", NOT_REPRODUCED, f"{spec.label} reports no {kind} {level} residual")
    sel = "" if which is None else f" (constraints {', '.join(str(k + 1) for k in which)})"
    lo, hi = max(MET, 10 * spec.tol), max(VIOLATED, 1e3 * spec.tol)
    ok = r <= lo if met else r > hi
    bound = f"<= {lo:g}" if met else f"> {hi:g}"
    extra = ""
    if show_enforced:
        re_, ne = _residual(tr, level, "enforced", which)
        if re_ is not None:
            extra = f"; the scheme's own enforced residual max |{ne}| = {fmt(re_)}"
    meas = f"{spec.label}: max |{name}|{sel} = {fmt(r)} (needs {bound}; Newton tol {spec.tol:g}){extra}"
    if met:
        same = name if kind == "enforced" else enforced_equivalent(tr, level, which)
        if same is not None:
            eq = construction or f"{spec.label}'s enforced residual {same}"
            return constructed(where, text, ok, meas, eq)
    return judged(where, text, ok, meas)


def nonlinear(tr) -> list:
    """Indices of the constraints that are not linear (their Jacobian varies)."""
    m = tr.nodal[tr.nodal_name("position")].shape[1]
    return [k for k in range(m) if k not in tr.linear_constraints]


def direction_changes(x) -> int:
    """Number of local extrema of a sampled curve (sign changes of its first difference)."""
    x = np.asarray(x, float)
    d = np.diff(x)
    d = d[np.abs(d) > 1e-14 * max(1.0, float(np.max(np.abs(x), initial=0.0)))]
    return int(np.sum(np.diff(np.sign(d)) != 0))


# ------------------------------------------------------------------------------ orders
def order_claims(where, text_for, conv, schemes, quantity, claimed: dict, ctx=None) -> list:
    """One claim per scheme: the fitted slope of ``quantity`` agrees with the claimed order."""
    out = []
    for s in schemes:
        text = text_for(s, claimed[s])
        why = requirements(schemes=[s])
        if why:
            out.append(missing(where, text, why))
            continue
        try:
            out.append(_order_claim(where, text, conv, s, quantity, claimed[s]))
        except Exception as exc:  # noqa: BLE001 - reported as the claim's verdict
            out.append(errored(where, text, exc))
    return out


def _order_claim(where, text, conv, s, quantity, claimed) -> Claim:
    """The fitted slope of ``quantity`` for scheme ``s`` against the claimed order."""
    if (s, quantity) not in conv.orders:
        return Claim(where, text, "", NOT_REPRODUCED, f"{s} is not in the convergence study")
    o = conv.orders[(s, quantity)]
    h, e = conv.errors(s, quantity)
    errs = ", ".join(f"{hh:g}: {fmt(ee)}" for hh, ee in zip(h, e))
    status = [x["status"] for x in conv.rows if x["scheme"] == s and x["quantity"] == quantity]
    bad = [f"h = {hh:g}: {st}" for hh, st in zip(h, status) if st != OK]
    meas = (
        f"{s}: fitted slope {o:.2f} (claimed {claimed}; |Δ| <= {ORDER_TOL:g}); errors {errs}; "
        f"against {conv.reference_for(quantity)}" + (f"; failed runs: {', '.join(bad)}" if bad else "")
    )
    raised = [f"h = {hh:g}" for hh, st in zip(h, status) if st in (RUN_ERROR, REFUSED)]
    reference = [n for n in conv.notes if n.startswith("reference run") and " raised: " in n]
    if raised or reference:
        return Claim(where, text, meas, ERROR, "a run of the study raised: " + "; ".join(raised + reference))
    return judged(where, text, order_ok(o, claimed), meas)


# ------------------------------------------------------------------------------ tables
@dataclass(frozen=True)
class Figure:
    """One figure of a paper's section as data: ``draw`` (a ``plots.*_figure`` function) called as
    ``draw(runs, ctx.stem(stem), *args, title=..., **kw)``. ``of``: the names of the section's runs
    it shows (None: every run with a trace), in that order; it is drawn where at least one of them has
    a trace. ``one``: it shows the first of them alone (its name replaces ``{run}`` in ``stem`` and
    ``title``). ``settings``: the section's settings line follows the title on a line of its own.
    Arguments given as :class:`OfTrace` are computed from what it shows (with ``one``: the trace)."""

    stem: str
    draw: Callable
    title: str
    args: tuple = ()
    kw: dict = field(default_factory=dict)
    of: tuple | None = None
    one: bool = False
    settings: bool = True


def draw_figures(ctx, traces: dict, figures, settings: str = "") -> None:
    """Draw the :class:`Figure` entries ``figures`` in their order from ``traces`` (run name ->
    Trace, the runs that have one) into ``ctx``; ``settings``: the line the entries' titles end with."""
    for f in figures:
        names = [s for s in (traces if f.of is None else f.of) if s in traces]
        if not names:
            continue
        runs = traces[names[0]] if f.one else [traces[s] for s in names]
        title = f.title + ("\n" + settings if f.settings else "")
        stem = f.stem
        if f.one:
            stem, title = stem.replace("{run}", names[0]), title.replace("{run}", names[0])
        args = [a.of(runs) if isinstance(a, OfTrace) else a for a in f.args]
        kw = {k: v.of(runs) if isinstance(v, OfTrace) else v for k, v in f.kw.items()}
        ctx.add(f.draw(runs, ctx.stem(stem), *args, title=title, **kw))


@dataclass(frozen=True)
class OfTrace:
    """An argument of a :class:`Said` or :class:`Figure` entry computed from the trace of the entry's run
    when it is judged or drawn, e.g. ``OfTrace(nonlinear)``: the indices of its nonlinear constraints."""

    of: Callable


@dataclass(frozen=True)
class Said:
    """One claim of a paper's section as data: ``text`` at ``where``, judged by
    ``check(where, text, ctx, spec, *args, **kw)`` on the section's run named ``run`` (arguments
    given as :class:`OfTrace` are computed from that run's trace). ``t_claim``: the claim is about
    [0, t_claim] (:func:`within_horizon`, ``universal`` as there); None: about the run as planned."""

    where: str
    text: str
    check: Callable
    run: Any = None
    args: tuple = ()
    kw: dict = field(default_factory=dict)
    t_claim: float | None = None
    universal: bool = True


def linear(tr) -> list:
    """Indices of the linear constraints of a trace (their Jacobian is constant)."""
    return list(tr.linear_constraints)


def judge_claims(ctx, specs: dict, said, example: str | None = None) -> list:
    """The claims of the :class:`Said` entries ``said`` in their order, each judged on its run
    ``specs[entry.run]``; an entry whose run is not among ``specs`` is "not reproduced" with what
    livens lacks for it (the scheme named ``run``, the ``example``)."""
    out = []
    for s in said:
        if s.run not in specs:
            why = requirements(schemes=[s.run], examples=[example] if example else []) or "run not planned"
            out.append(missing(s.where, s.text, why))
            continue
        spec = specs[s.run]

        def value(a, spec=spec):
            return a.of(ctx.trace(spec)) if isinstance(a, OfTrace) else a

        args = [value(a) for a in s.args]
        kw = {k: value(v) for k, v in s.kw.items()}
        claim = s.check(s.where, s.text, ctx, spec, *args, **kw)
        if s.t_claim is not None:
            claim = within_horizon(claim, ctx, spec, s.t_claim, universal=s.universal)
        out.append(claim)
    return out


def _sym(k):
    return {"livens": "E", "total": "H", "kinetic": "T", "potential": "V"}.get(k, k)


__all__ = [
    "Figure",
    "draw_figures",
    "Said",
    "OfTrace",
    "judge_claims",
    "linear",
    "NEWTON_NOTE",
    "THRESHOLDS",
    "traced",
    "present",
    "run_words",
    "band",
    "run_problem",
    "Why",
    "broken",
    "run_errors",
    "enforced_equivalent",
    "constructed",
    "BY_CONSTRUCTION",
    "status_claim",
    "energy_conserved",
    "energy_not_conserved",
    "momentum_conserved",
    "constraint_met",
    "nonlinear",
    "direction_changes",
    "order_claims",
    "horizon",
    "failure_words",
    "with_rescue",
    "checked",
    "drift",
    "drift_words",
    "around",
    "AROUND",
    "within_horizon",
    "exchanged_energy",
    "sensitivity",
    "fluctuation_parts",
    "fluctuation_verdict",
    "energy_fluctuates",
    "increments_of_the_order",
    "energy_stays_bounded",
    "Claim",
    "judged",
    "missing",
    "errored",
    "fmt",
    "requirements",
    "HOLDS",
    "FAILS",
    "NOT_REPRODUCED",
    "ERROR",
    "TOL",
    "MET",
    "VIOLATED",
    "ROUNDOFF",
    "NOT_CONSERVED",
    "order_ok",
    "of_the_order",
    "order_range",
    "plots",
    "np",
]
