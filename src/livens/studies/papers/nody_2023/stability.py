"""KBS23b §6.3, Figs 31-33: the stability of the schemes of Table 1 on the four-particle system over long
runs (energy blow-ups and their times), its claims as a table."""

from __future__ import annotations

from ...convergence import _write_rows
from ...paper_registry import Item
from ...stability import COLUMNS, StabilityStudy, first_exit, stability_row
from .._common import ERROR, FAILS, HOLDS, NOT_REPRODUCED, Claim, fmt, missing, present, requirements
from ._base import VIS

EX = "four-particle"

#: a run of the stability study stops as an energy blow-up when |E - E0| > BLOWUP max(|E0|, 1). The
#: papers give no band; 10 was set after VI-A's run at h = 0.25 had been seen (its energy drifts out of
#: the band of factor 1 at t = 13 and grows by an order of magnitude at t = 53), so every stability
#: verdict carries its sensitivity to the factor (BLOWUP_TRIED, from the same run's energy: a smaller
#: band is left earlier; a larger one than BLOWUP is not tried, the run stopped there)
BLOWUP = 10.0
BLOWUP_TRIED = (1.0, 2.0, 3.0, 5.0, 7.0, 10.0)
#: the horizon of KBS23b Figs 31-33 ("keep stable at least until T = 1000")
T_PAPER = 1000.0


def _blew_up(row) -> bool:
    """An energy blow-up: the run stopped early and its energy had left the band (blow-up) or
    grew by more than half of E0 before Newton failed."""
    if row["status"] == "stable":
        return False
    if row["status"] == "blow-up":
        return True
    return row["status"] == "newton failure" and row["max_rel_energy_error"] > 0.5


def _describe(row) -> str:
    """A stability row in words."""
    out = f"{row['scheme']}: "
    if row["status"] == "stable":
        out += f"stable to T = {row['t_end']:g} (max |E-E0|/|E0| = {fmt(row['max_rel_energy_error'])})"
    elif _blew_up(row):
        how = "energy blow-up" if row["status"] == "blow-up" else "Newton fails after the energy grew"
        out += (
            f"{how} at step {row['fail_step']}, t = {row['t_blowup']:.4g} (max |E-E0|/|E0| = "
            f"{fmt(row['max_rel_energy_error'])}; T = {row['t_end']:g})"
        )
    else:
        out += (
            f"{row['status']} at step {row['fail_step']}, t = {row['t_blowup']:.4g} with the energy still "
            f"conserved (max |E-E0|/|E0| = {fmt(row['max_rel_energy_error'])}; T = {row['t_end']:g})"
        )
    if row["t_leaves_E0"] is not None:
        out += f"; |E - E0| first exceeds max(|E0|, 1) at t ≈ {row['t_leaves_E0']:.4g}"
    if row.get("rescue"):
        out += f"; {row['rescued_steps']} step{'s' * (row['rescued_steps'] != 1)} rescued"
    return out


def _judge_row(row, kind, t_claim, quick) -> tuple[str, str]:
    """(verdict, reason) of one stability row against a claim of ``kind`` ("stable", "blow-up" or a
    blow-up time) about the interval [0, t_claim]: a run never judges a horizon it did not reach."""
    short = row["t_end"] < t_claim * (1.0 - 1e-12)
    quick_words = f"{'quick run' if quick else 'run'}: T = {row['t_end']:g} of {t_claim:g}"
    if kind == "stable":
        if row["status"] != "stable":
            return FAILS, ""
        return (NOT_REPRODUCED, quick_words) if short else (HOLDS, "")
    blew = _blew_up(row)
    if kind == "blow-up":
        if blew:
            return HOLDS, ""
        if row["status"] == "stable" and short:
            return NOT_REPRODUCED, quick_words
        return FAILS, ""
    lo, hi = 0.8 * kind, 1.2 * kind
    if blew:
        return (HOLDS, "") if lo <= row["t_blowup"] <= hi else (FAILS, "")
    if row["status"] == "stable" and row["t_end"] < hi:
        return NOT_REPRODUCED, f"{'quick run' if quick else 'run'}: T = {row['t_end']:g} of {hi:g}"
    return FAILS, ""


def _with_band(row, trace, factor: float) -> dict:
    """The stability row the run would have had with the band ``factor`` <= BLOWUP: the same run, stopped
    at the first node with |E - E0| > factor max(|E0|, 1) where that comes before its own end."""
    t = first_exit(trace, factor)
    if t is None or (row["t_blowup"] is not None and t >= row["t_blowup"]):
        return row
    return dict(row, status="blow-up", t_blowup=t)


def _band_sensitivity(ctx, spec, row, kind, t_claim) -> str:
    """The verdict of ``row`` at each band factor of BLOWUP_TRIED, with the blow-up time at each."""
    r = ctx.result(spec)
    if r.trace is None:
        return ""
    got = {}
    for f in BLOWUP_TRIED:
        frow = _with_band(row, r.trace, f) if f < BLOWUP else row
        got[f] = (_judge_row(frow, kind, t_claim, ctx.quick)[0], frow["t_blowup"])
    tried = ", ".join(f"{f:g}" for f in got)
    if len({v for v, _ in got.values()}) == 1 and len({t for _, t in got.values()}) == 1:
        return (
            f"the same at every band factor tried ({tried}; livens' choice {BLOWUP:g}, set after VI-A's h = 0.25 run)"
        )
    times = ", ".join(f"{f:g}: {'-' if t is None else f'{t:.4g}'}" for f, (_, t) in got.items())
    yes = [f"{f:g}" for f, (v, _) in got.items() if v == HOLDS]
    no = [f"{f:g}" for f, (v, _) in got.items() if v == FAILS]
    parts = ([f"holds for {', '.join(yes)}"] if yes else []) + ([f"fails for {', '.join(no)}"] if no else [])
    return (
        f"sensitivity to the band factor (livens' choice, set to {BLOWUP:g} after VI-A's h = 0.25 run was seen): "
        f"end of the run by factor {times}; " + ("; ".join(parts) or "not judged at any factor")
    )


def _stability_verdict(ctx, study, scheme, h, kind, t_claim) -> tuple[str, str, str]:
    """(verdict, measured, reason) of one scheme's stability run with the papers' Newton; where that
    run's Newton failed, its re-run with livens' rescue is judged too and both are stated. The
    measured text ends with the verdict's sensitivity to the band factor (:func:`_band_sensitivity`)."""
    spec = study.spec(scheme, (), h)
    res = ctx.result(spec)
    row = stability_row(res)
    if res.status in ("error", "refused"):
        return ERROR, _describe(row), f"the run raised: {(res.message or '').splitlines()[:1]}"
    verdict, reason = _judge_row(row, kind, t_claim, ctx.quick)
    meas = _describe(row)
    twin = ctx.rescued(spec)
    if twin is not None:
        trow = stability_row(twin)
        tv, treason = _judge_row(trow, kind, t_claim, ctx.quick)
        meas = (
            f"{verdict} with the paper's Newton: {meas}; {tv} with livens' rescue (damped Newton after a failed "
            f"step): {_describe(trow)}"
        )
        if tv != verdict:
            reason = "; ".join(
                x for x in (reason, f"{tv} with livens' rescue" + (f" ({treason})" if treason else "")) if x
            )
    line = _band_sensitivity(ctx, spec, row, kind, t_claim)
    return verdict, meas + (f"; {line}" if line else ""), reason


#: the step sizes and end times of the stability runs: the quick mode's, and the paper's (T = 1000)
PLAN_QUICK = ((0.01, 10.0), (0.04, 40.0), (0.05, 20.0), (0.25, 100.0), (0.675, 100.0))
PLAN = ((0.01, 1000.0), (0.04, 1000.0), (0.05, 1000.0), (0.25, 1000.0), (0.675, 1000.0))

#: KBS23b Figs 31-33, one entry per stability run of PLAN: (where, h, schemes, text, kind, horizon of the
#: claim); kind "stable" (every listed scheme runs to the horizon), "blow-up" (an energy blow-up before the
#: horizon) or a blow-up time
CLAIMS = (
    ("Fig. 31", 0.01, VIS, "for h = 0.01 all of the schemes under investigation remain stable", "stable", T_PAPER),
    ("text", 0.04, VIS,
     "for h ≤ 0.04 all schemes under investigation keep stable at least until T = 1000 (checked at h = 0.04)",
     "stable", 1000.0),
    ("Fig. 32", 0.05, ("VI-S", "VI-B"),
     "the lower-order schemes VI-S and VI-B experience numerical energy blow-up already for h = 0.05",
     "blow-up", T_PAPER),
    ("Fig. 33", 0.25, ("VI-A",), "for h = 0.25, VI-A exhibits an energy blow-up at about t = 55", 55.0, T_PAPER),
    ("Fig. 33", 0.675, ("EM",), "EM keeps stable even for quite large time steps of h = 0.675", "stable", T_PAPER),
)  # fmt: skip
#: the figures of the stability runs: (h, file stem, title)
FIGURES = (
    (0.01, "fig31_fp_stability_h0.01", "four-particle system: energy E, h = 0.01 (KBS23b Fig. 31)"),
    (0.05, "fig32_fp_stability_h0.05", "four-particle system: energy E, h = 0.05 (KBS23b Fig. 32)"),
    (0.25, "fig33_fp_stability_h0.25", "four-particle system: energy E, h = 0.25 (KBS23b Fig. 33)"),
    (0.675, "fp_stability_h0.675", "four-particle system: energy E, h = 0.675"),
)


def _all_stable(ctx, st, entry, stab_schemes) -> Claim:
    """A claim that every listed scheme stays stable: the worst verdict of theirs, every measurement."""
    where, h, who, text, kind, t_claim = entry
    absent = [s for s in who if s not in stab_schemes]
    got = [_stability_verdict(ctx, st, s, h, kind, t_claim) for s in who if s in stab_schemes]
    verdict = next((v for v in (ERROR, FAILS, NOT_REPRODUCED) if any(g == v for g, _, _ in got)), HOLDS)
    reasons = sorted({r for v, _, r in got if r and v == verdict})
    if absent:
        verdict = NOT_REPRODUCED if verdict == HOLDS else verdict
        reasons.append(requirements(absent))
    return Claim(f"§6.3, {where}", text, "; ".join(m for _, m, _ in got), verdict, "; ".join(reasons))


def _per_scheme(ctx, st, entry, stab_schemes) -> list:
    """The claims of one entry of CLAIMS, one per listed scheme."""
    where, h, who, text, kind, t_claim = entry
    c = []
    for s in who:
        t1 = text if len(who) == 1 else text + f" ({s})"
        if isinstance(kind, float):
            t1 += " (about: within ±20 %)"
        if s not in stab_schemes:
            c.append(missing(f"§6.3, {where}", t1, requirements([s])))
            continue
        verdict, meas, reason = _stability_verdict(ctx, st, s, h, kind, t_claim)
        c.append(Claim(f"§6.3, {where}", t1, meas, verdict, reason))
    return c


def _stability_files(ctx, studies, res) -> None:
    """The stability table (and that of the re-runs with rescue) and the figures of Figs 31-33."""
    rows = [r for x in res.values() for r in x.rows]
    twins = [stability_row(tw) for st in studies for sp in st.runs() if (tw := ctx.rescued(sp)) is not None]
    ctx.add(_write_rows(ctx.stem("fig31_33_fp_stability.csv"), rows, COLUMNS))
    if twins:
        ctx.add(_write_rows(ctx.stem("fig31_33_fp_stability_with_rescue.csv"), twins, COLUMNS))
    for h, stem, title in FIGURES:
        ctx.add(res[h].figure(ctx.stem(stem), h, title=title))


def stability_item(quick: bool, have_ex: bool) -> Item:
    """KBS23b Figs 31-33: energy over long runs, blow-ups and their times."""
    stab_schemes = present(VIS) if have_ex else []
    plan = PLAN_QUICK if quick else PLAN
    studies = [StabilityStudy.make(EX, stab_schemes, [h], T, blowup_factor=BLOWUP, tol=1e-9) for h, T in plan]

    def make_stab(ctx) -> list:
        """Figs 31-33: energy over long runs, blow-ups and their times."""
        if not stab_schemes:
            return [
                missing(f"§6.3, {w}", t, requirements(list(VIS), [EX]) or "no scheme") for w, _, _, t, _, _ in CLAIMS
            ]
        res = {h: st.reduce(ctx.results) for (h, _), st in zip(plan, studies)}
        _stability_files(ctx, studies, res)
        c = []
        for entry, st in zip(CLAIMS, studies):
            if entry[4] == "stable" and len(entry[2]) > 1:
                c.append(_all_stable(ctx, st, entry, stab_schemes))
            else:
                c.extend(_per_scheme(ctx, st, entry, stab_schemes))
        return c

    return Item(
        "6.3-stability",
        "Stability (§6.3, Figs. 31-33)",
        [s for st in studies for s in st.runs()] if stab_schemes else [],
        make_stab,
        note=f"an energy blow-up: the run stops at the band, or Newton fails after |E - E0| > E0/2; "
        f"the claims are about T = {T_PAPER:g} (the horizon the paper names)",
    )
