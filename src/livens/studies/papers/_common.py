"""Building blocks shared by the papers' reproduction modules: run specs, figure sets, and the
checks that turn a run into a verdict (thresholds in :mod:`livens.studies.report`)."""
from __future__ import annotations

import numpy as np

from ... import plots
from ..report import (FAILS, HOLDS, MET, NOT_CONSERVED, NOT_REPRODUCED, ROUNDOFF, TOL, VIOLATED, Claim, fmt,
                      judged, missing, order_ok)
from ..reproduce import requirements
from ..runs import OK, RunSpec, available_scheme


def traced(example: str, scheme: str, h: float, t_end: float, tol: float = TOL, params=None, example_params=None,
           max_points=None, **kw) -> RunSpec:
    """A run that keeps its full Trace (tolerance 1e-12 by default: round-off claims)."""
    return RunSpec.make(example, scheme, h, t_end, params=params, example_params=example_params, tol=tol,
                        record="trace", max_points=max_points, **kw)


def present(schemes) -> list:
    """The schemes of the list that livens has."""
    return [s for s in schemes if available_scheme(s)]


def run_problem(ctx, spec) -> str | None:
    """Why a run's trace cannot be used (its status), or None."""
    r = ctx.result(spec)
    if r.status == OK and r.trace is not None:
        return None
    where = f" at t = {r.t_fail:.4g}" if r.t_fail is not None else ""
    first = (r.message or "").splitlines()[0][:160] if r.message else ""
    return f"run {r.spec.label} h={r.spec.h:g} ended with {r.status}{where}: {first}"


def status_claim(where, text, ctx, spec) -> Claim:
    """A claim that the run goes through with no numerical failure."""
    r = ctx.result(spec)
    ok = r.status == OK
    return judged(where, text, ok, f"{r.steps} steps to t = {r.t_reached:.4g}, status {r.status}"
                  + (f" at t = {r.t_fail:.4g}" if r.t_fail is not None else ""))


# ------------------------------------------------------------------------------ conservation
def band(spec) -> float:
    """The round-off band of a run: ROUNDOFF, or ten Newton tolerances where a larger tolerance had
    to be used (a conserved quantity changes by about the Newton residual per step)."""
    return max(ROUNDOFF, 10.0 * spec.tol)


def energy_conserved(where, text, ctx, spec, key=None) -> Claim:
    """max_n |E^{n+1} - E^n| / (max|T| + max|V|) <= band(spec)."""
    why = run_problem(ctx, spec)
    if why:
        return Claim(where, text, "", FAILS, why)
    tr = ctx.trace(spec)
    k = key or tr.energy_key
    m = tr.max_energy_increment(k)
    return judged(where, text, m <= band(spec),
                  f"{spec.label}: max per-step |Δ{_sym(k)}| / (max|T|+max|V|) = {fmt(m)} (round-off band {band(spec):g})")


def energy_not_conserved(where, text, ctx, spec, key=None) -> Claim:
    """The energy changes by more than NOT_CONSERVED (relative) somewhere in the run."""
    why = run_problem(ctx, spec)
    if why:
        return Claim(where, text, "", FAILS, why)
    tr = ctx.trace(spec)
    k = key or tr.energy_key
    m = tr.max_energy_increment(k)
    err = tr.max_energy_error(k)
    return judged(where, text, m > NOT_CONSERVED,
                  f"{spec.label}: max per-step |Δ{_sym(k)}| / (max|T|+max|V|) = {fmt(m)}; "
                  f"max |{_sym(k)} - {_sym(k)}0| / |{_sym(k)}0| = {fmt(err)} (> {NOT_CONSERVED:g} counts as not conserved)")


def momentum_conserved(where, text, ctx, spec, names=None) -> Claim:
    """Every momentum map's per-step change <= band(spec) * max(1, max|J|)."""
    why = run_problem(ctx, spec)
    if why:
        return Claim(where, text, "", FAILS, why)
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
    return judged(where, text, worst <= band(spec),
                  f"{spec.label}: max per-step |ΔJ| / max(1,|J|): " + ", ".join(parts) + f" (band {band(spec):g})")


# ------------------------------------------------------------------------------ constraints
def _residual(tr, level, where_kind, which=None):
    name = tr.nodal_name(level) if where_kind == "nodal" else tr.enforced_name(level)
    if name is None:
        return None, None
    return tr.max_residual(name, which), name


def constraint_met(where, text, ctx, spec, level, kind="nodal", which=None, met=True, show_nodal=False) -> Claim:
    """The constraint residual of ``level`` at the nodes (``kind="nodal"``) or where the scheme
    enforces it (``"enforced"``) is <= MET (``met=True``) or > VIOLATED (``met=False``), over the
    constraints ``which`` (default all). ``show_nodal`` adds the nodal residual to the measured
    text (for schemes whose enforced constraint sits at the node in other variables, e.g. VI-B's
    G(q^{n+1}) v^{n+1})."""
    why = run_problem(ctx, spec)
    if why:
        return Claim(where, text, "", FAILS, why)
    tr = ctx.trace(spec)
    r, name = _residual(tr, level, kind, which)
    if r is None:
        return Claim(where, text, "", NOT_REPRODUCED, f"{spec.label} reports no {kind} {level} residual")
    sel = "" if which is None else f" (constraints {', '.join(str(k + 1) for k in which)})"
    lo, hi = max(MET, 10 * spec.tol), max(VIOLATED, 1e3 * spec.tol)
    ok = r <= lo if met else r > hi
    bound = f"<= {lo:g}" if met else f"> {hi:g}"
    extra = ""
    if show_nodal:
        rn, nn = _residual(tr, level, "nodal", which)
        if rn is not None:
            extra = f"; for comparison max |{nn}| = {fmt(rn)}"
    return judged(where, text, ok,
                  f"{spec.label}: max |{name}|{sel} = {fmt(r)} (needs {bound}; Newton tol {spec.tol:g}){extra}")


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
        o = conv.orders.get((s, quantity), float("nan"))
        h, e = conv.errors(s, quantity)
        errs = ", ".join(f"{hh:g}: {fmt(ee)}" for hh, ee in zip(h, e))
        out.append(judged(where, text, order_ok(o, claimed[s]),
                          f"{s}: fitted slope {o:.2f} (claimed {claimed[s]}; |Δ| <= 0.3); errors {errs}; "
                          f"reference {conv.reference or 'analytic'}"))
    return out


def _sym(k):
    return {"livens": "E", "total": "H", "kinetic": "T", "potential": "V"}.get(k, k)


__all__ = [
    "traced", "present", "band", "run_problem", "status_claim", "energy_conserved", "energy_not_conserved",
    "momentum_conserved", "constraint_met", "nonlinear", "direction_changes", "order_claims",
    "Claim", "judged", "missing", "fmt", "requirements", "HOLDS", "FAILS", "NOT_REPRODUCED", "TOL", "MET",
    "VIOLATED", "ROUNDOFF", "NOT_CONSERVED", "order_ok", "plots", "np",
]
