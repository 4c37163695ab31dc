"""The checks that turn runs into verdicts (livens.studies.papers._common, report, reproduce), on
synthetic traces and results, so that each can be shown to fail where it must:

- "fluctuations typical for symplectic methods" needs a bounded oscillation without secular drift
  whose amplitude scales like h^order (a drifting 140 % energy error fails);
- "of the order of 1e-3" is half a decade either side;
- an empty selection of constraints is "not reproduced", never "holds";
- a quick stability run is never judged against a horizon it did not reach;
- an exception while evaluating a claim is an "error" verdict, and `livens reproduce` exits non-zero;
- a run with the papers' Newton that fails is a "newton failure"; with rescue its rescued steps are
  counted, and a claim on it states both verdicts;
- KBS23b Table 2's timing claim is judged only beyond the timing spread;
- a fault injected into a scheme or into the checks gives the verdict "error" to each claim that
  depends on it, in its own row, and `livens reproduce` exits 1;
- a quantity a scheme enforces by its own equations is "by construction", never a hold, and the
  momentum-level constraint of the papers' figures is judged where a scheme enforces another one;
- "oscillates around" needs both sides and a centred mean; a short run never holds a claim about a
  longer horizon; a threshold that is livens' choice carries its sensitivity line (the blow-up band).
"""

import csv

import numpy as np
import pytest

from livens.studies.papers import _common as cm
from livens.studies.report import BY_CONSTRUCTION, ERROR, FAILS, HOLDS, NOT_REPRODUCED, of_the_order, sensitivity
from livens.studies.reproduce import Context
from livens.studies.runs import NEWTON, OK, RunResult, RunSpec, execute
from livens.studies.trace import Trace


def _trace(t, E, h, T=None, V=None, nodal=None, scheme="VI-S", enforced=None, linear=()):
    t = np.asarray(t, float)
    E = np.asarray(E, float)
    T = np.full_like(E, 10.0) if T is None else T
    V = E - T if V is None else V
    return Trace(
        label=scheme,
        scheme=scheme,
        h=h,
        t=t,
        energy={"total": E, "kinetic": T, "potential": V},
        energy_key="total",
        momentum={},
        nodal=nodal or {},
        enforced=enforced or {},
        t_step=t[1:],
        linear_constraints=tuple(linear),
    )


def _ctx(pairs, quick=False, rescue=None):
    """A reproduction Context over synthetic results: pairs of (spec, RunResult)."""
    return Context(dict(pairs), "/tmp", quick, rescue_results=dict(rescue or {}))


def _ok(spec, tr):
    return spec, RunResult(spec, OK, steps=len(tr.t) - 1, trace=tr)


def _oscillation(h, amp, T=10.0, drift=0.0, E0=0.5):
    """Energy of a symplectic-like run: E0 + amp sin^2(3t) (+ a linear drift), sampled with step h."""
    t = np.arange(0.0, T + h / 2, h)
    return t, E0 + amp * np.sin(3 * t) ** 2 + drift * t / T


@pytest.mark.parametrize("order", [1, 2])
def test_bounded_oscillation_scaling_like_h_to_the_order_holds(order):
    h = 0.05
    specs, pairs = [], []
    for hh in (h, h / 2):
        t, E = _oscillation(hh, 0.7 * (hh / h) ** order)
        sp = RunSpec.make("pendulum-3d", "VI-S", hh, 10.0, record="trace")
        specs.append(sp)
        pairs.append(_ok(sp, _trace(t, E, hh)))
    c = cm.energy_fluctuates("Fig. 8", "typical fluctuations", _ctx(pairs), specs[0], specs[1], order)
    assert c.verdict == HOLDS, c.measured
    # the same amplitudes against the other order fail
    c = cm.energy_fluctuates("Fig. 8", "typical fluctuations", _ctx(pairs), specs[0], specs[1], 3 - order)
    assert c.verdict == FAILS, c.measured


def test_a_drifting_140_percent_energy_error_is_not_a_symplectic_fluctuation():
    """Today's check passed any energy that is not conserved; a drift of 140 % of E0 (with the
    amplitude even halving with h) must fail."""
    h = 0.05
    specs, pairs = [], []
    for hh in (h, h / 2):
        t, E = _oscillation(hh, 0.01 * hh / h, drift=0.7 * hh / h)  # E0 = 0.5: 140 % at h
        sp = RunSpec.make("pendulum-3d", "VI-S", hh, 10.0, record="trace")
        specs.append(sp)
        pairs.append(_ok(sp, _trace(t, E, hh)))
    assert np.max(np.abs(pairs[0][1].trace.E - 0.5)) / 0.5 == pytest.approx(1.4, rel=0.02)
    c = cm.energy_fluctuates("Fig. 8", "typical fluctuations", _ctx(pairs), specs[0], specs[1], 1)
    assert c.verdict == FAILS and "over the last third" in c.measured, c.measured


def test_a_bounded_but_large_oscillation_is_not_small():
    """An oscillation as large as the energies exchanged (140 % of max|T| + max|V|) fails."""
    h = 0.05
    specs, pairs = [], []
    for hh in (h, h / 2):
        t, E = _oscillation(hh, 14.0 * hh / h)
        sp = RunSpec.make("pendulum-3d", "VI-S", hh, 10.0, record="trace")
        specs.append(sp)
        tr = _trace(t, E, hh, T=np.full_like(E, 5.0), V=np.full_like(E, 5.0))
        pairs.append(_ok(sp, tr))
    c = cm.energy_fluctuates("Fig. 8", "typical fluctuations", _ctx(pairs), specs[0], specs[1], 1)
    assert c.verdict == FAILS and "small: <=" in c.measured, c.measured


def test_of_the_order_is_half_a_decade():
    assert of_the_order(1e-3, -3) and of_the_order(3e-3, -3) and of_the_order(3.2e-4, -3)
    # accepted before (two decades, 1e-4 ... 1e-2), rejected now
    for x in (1e-4, 2e-4, 5e-3, 1e-2):
        assert not of_the_order(x, -3), x
    assert not of_the_order(0.0, -3) and not of_the_order(float("nan"), -3)


def test_increments_of_the_order_use_half_a_decade():
    h = 1e-3
    t = np.arange(0, 1 + h / 2, h)
    E = 1.0 + np.cumsum(np.r_[0.0, 8e-3 * np.cos(40 * t[1:])])  # max |E^(n+1) - E^n| = 8e-3
    sp = RunSpec.make("double-four-bar", "VI-S", h, 1.0, record="trace")
    c = cm.increments_of_the_order(
        "Fig. 16", "increments of the order of 1e-3", _ctx([_ok(sp, _trace(t, E, h))]), sp, -3
    )
    assert c.verdict == FAILS and "8.00e-03" in c.measured, c.measured  # 8e-3 is 10^-2.1: two decades accepted it


def test_an_empty_selection_is_not_reproduced():
    h = 0.1
    t = np.arange(0, 1 + h / 2, h)
    big = np.ones((len(t), 3))
    tr = _trace(t, np.ones_like(t), h, nodal={"velocity G(q^n) M^-1 p^n": big})
    sp = RunSpec.make("heavy-top", "VI-S", h, 1.0, record="trace")
    ctx = _ctx([_ok(sp, tr)])
    c = cm.constraint_met("Fig. 20", "the linear constraints are fulfilled", ctx, sp, "velocity", which=[])
    assert c.verdict == NOT_REPRODUCED and "empty selection" in c.reason
    # the same check over every constraint is judged (and fails here)
    assert cm.constraint_met("Fig. 20", "all", ctx, sp, "velocity").verdict == FAILS


def test_quick_stability_run_is_not_judged_beyond_its_horizon():
    """A run stable to T = 40 says nothing about T = 1000; one that fails before does."""
    from livens.studies.papers.nody_2023 import _judge_row

    row = {"status": "stable", "t_end": 40.0, "t_blowup": None, "max_rel_energy_error": 1e-3}
    assert _judge_row(row, "stable", 1000.0, True) == (NOT_REPRODUCED, "quick run: T = 40 of 1000")
    assert _judge_row(row, "stable", 40.0, True) == (HOLDS, "")
    assert _judge_row(row, "blow-up", 1000.0, True) == (NOT_REPRODUCED, "quick run: T = 40 of 1000")
    failed = dict(row, status="newton failure", t_blowup=20.0, max_rel_energy_error=1e-10)
    assert _judge_row(failed, "stable", 1000.0, True)[0] == FAILS
    blown = dict(row, status="blow-up", t_blowup=53.0, max_rel_energy_error=12.0)
    assert _judge_row(blown, 55.0, 1000.0, True)[0] == HOLDS
    assert _judge_row(dict(blown, t_blowup=13.0), 55.0, 1000.0, True)[0] == FAILS
    assert _judge_row(dict(row, t_end=20.0), 55.0, 1000.0, True)[0] == NOT_REPRODUCED


def test_an_exception_in_a_check_is_an_error_verdict():
    h = 0.1
    t = np.arange(0, 1 + h / 2, h)
    tr = _trace(t, np.ones_like(t), h)
    sp = RunSpec.make("pendulum-3d", "VI-S", h, 1.0, record="trace")
    c = cm.energy_conserved("Fig. 1", "E is conserved", _ctx([_ok(sp, tr)]), sp, key="no-such-energy")
    assert c.verdict == ERROR and "KeyError" in c.reason


def test_an_exception_in_a_claim_builder_is_an_error_and_a_nonzero_exit(tmp_path, monkeypatch, capsys):
    from livens.cli import main
    from livens.studies import reproduce as rp

    def make(ctx):
        raise RuntimeError("broken claim builder")

    fake = {
        "p-x": rp.Paper(
            "p-x",
            "00x",
            "stand-in",
            lambda quick: [rp.Item("f1", "Fig. 1", [], make)],
            lambda quick, sections=None: ["stand-in"],
        )
    }
    monkeypatch.setattr(rp, "papers", lambda: fake)
    assert main(["reproduce", "p-x", "--out", str(tmp_path), "--quiet"]) == 1
    assert "broken claim builder" in capsys.readouterr().err
    with open(tmp_path / "claims.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["verdict"] == "error" and "RuntimeError: broken claim builder" in row["reason"]
    assert "0 not reproduced, 0 true by construction, 1 error" in (tmp_path / "report.md").read_text()
    # and in the index of `reproduce all`
    assert main(["reproduce", "all", "--out", str(tmp_path / "all"), "--quiet"]) == 1
    index = (tmp_path / "all" / "report.md").read_text()
    assert "| holds | fails | not reproduced | by construction | error |" in index
    assert "(p-x) | 0 | 0 | 0 | 0 | 1 |" in index


# ------------------------------------------------------------------------------ injected faults
def _claims(path):
    with open(path / "claims.csv") as f:
        return list(csv.DictReader(f))


def test_a_fault_in_a_scheme_is_an_error_for_each_claim_and_exit_1(tmp_path, monkeypatch, capsys):
    """An exception inside livens-em's residual: every claim of KB23 that rests on its runs is
    "error" in its own row (never "fails": a crash is no evidence about the paper), the summary
    counts them, `livens reproduce` exits 1 and the reason names the exception."""
    import dataclasses

    from livens import schemes
    from livens.cli import main

    schemes._load()
    good = schemes._SCHEMES["livens-em"]

    def broken(*args, **kw):
        raise RuntimeError("injected fault in the livens-em residual")

    monkeypatch.setitem(schemes._SCHEMES, "livens-em", dataclasses.replace(good, residual=broken))
    assert main(["reproduce", "livens-2023", "--quick", "--out", str(tmp_path), "--quiet"]) == 1
    claims = _claims(tmp_path)
    assert len(claims) == 7 and len({c["claim"] for c in claims}) == 7
    for c in claims:
        assert c["verdict"] == "error" and "injected fault in the livens-em residual" in c["reason"], c
    assert (
        "0 claims hold, 0 fail, 0 not reproduced, 0 true by construction, 7 error"
        in (tmp_path / "report.md").read_text()
    )
    assert "7 claim(s) could not be evaluated" in capsys.readouterr().err


def test_a_fault_while_checking_keeps_each_claim_in_its_own_error_row(tmp_path, monkeypatch):
    """An exception while an item draws its figures (before any claim is judged): the item's claims
    are listed one by one, each "error" with the exception named, and the other items are judged."""
    from livens.cli import main
    from livens.studies.papers import livens_2023

    real = livens_2023.plots.energy_increments_figure

    def broken(*args, **kw):
        if "KB23 Fig. 7" in kw.get("title", ""):  # a figure of item 6.2 only
            raise ValueError("injected fault in a figure")
        return real(*args, **kw)

    monkeypatch.setattr(livens_2023.plots, "energy_increments_figure", broken)
    assert main(["reproduce", "livens-2023", "--quick", "--out", str(tmp_path), "--quiet"]) == 1
    claims = _claims(tmp_path)
    spring = [c for c in claims if "§6.2" in c["where"]]  # the item whose figures raise
    assert len(spring) == 3 and len({c["claim"] for c in spring}) == 3
    for c in spring:
        assert c["verdict"] == "error", c
        assert "ValueError while checking the claims of item 6.2: injected fault in a figure" in c["reason"], c
    others = [c for c in claims if "§6.1" in c["where"]]
    assert len(others) == 4 and not [c for c in others if c["verdict"] == "error"], others


# ------------------------------------------------------------------------------ by construction
def _constraint_ctx(nodal, enforced, linear=()):
    h = 0.1
    t = np.arange(0, 1 + h / 2, h)
    tr = _trace(t, np.ones_like(t), h, nodal=nodal, enforced=enforced, linear=linear)
    sp = RunSpec.make("heavy-top", "VI-B", h, 1.0, record="trace")
    return _ctx([_ok(sp, tr)]), sp, len(t)


def test_a_residual_the_scheme_enforces_is_by_construction_not_a_hold():
    n = 11
    small = np.full((n, 2), 1e-15)
    ctx, sp, _ = _constraint_ctx({"position g(q^n)": small}, {"position g(q^{n+1})": small[1:]})
    c = cm.constraint_met("Fig. 12", "g is captured", ctx, sp, "position", construction="eq 55d")
    assert c.verdict == BY_CONSTRUCTION and "eq 55d" in c.reason, c
    # the same quantity above the bound is a fault of the implementation: "fails"
    big = np.full((n, 2), 1e-6)
    ctx, sp, _ = _constraint_ctx({"position g(q^n)": big}, {"position g(q^{n+1})": big[1:]})
    assert cm.constraint_met("Fig. 12", "g", ctx, sp, "position").verdict == FAILS
    # where the scheme enforces g elsewhere (VI-A: g(q^{n+theta})), the nodal g is evidence
    ctx, sp, _ = _constraint_ctx({"position g(q^n)": small}, {"position g(q^{n+theta})": small[1:]})
    assert cm.constraint_met("Fig. 12", "g", ctx, sp, "position").verdict == HOLDS
    # a check of the enforced residual itself is always by construction
    c = cm.constraint_met("Fig. 13", "g(q^{n+theta})", ctx, sp, "position", kind="enforced", construction="eq 79d")
    assert c.verdict == BY_CONSTRUCTION


def test_the_momentum_constraint_of_the_figures_is_judged_where_a_scheme_enforces_another():
    """VI-B enforces G(q^{n+1}) v^{n+1} (KBS23b eq 83e): its own residual is round-off while the
    momentum-level constraint G M^-1 p the figures show is not; the claim is judged on the latter."""
    n = 11
    nodal = {"velocity G(q^n) M^-1 p^n": np.full((n, 2), 0.316)}
    enforced = {"velocity G(q^{n+theta}) v^{n+1}": np.full((n - 1, 2), 1e-14)}
    ctx, sp, _ = _constraint_ctx(nodal, enforced)
    c = cm.constraint_met("Fig. 14", "captured by VI-B", ctx, sp, "velocity", show_enforced=True)
    assert c.verdict == FAILS and "3.16e-01" in c.measured and "G(q^{n+theta}) v^{n+1}| = 1.00e-14" in c.measured


def test_linear_constraints_enforced_at_another_configuration_are_by_construction():
    """VI-S enforces G(q_bar) M^-1 p^{n+1}: for constraints with a constant Jacobian that is the nodal
    residual (KBS23a Fig. 21, KBS23b Fig. 20), for the others it is not."""
    n = 11
    r = np.full((n, 3), 1e-15)
    nodal = {"velocity G(q^n) M^-1 p^n": r}
    enforced = {"velocity G(q_bar) M^-1 p^{n+1}": r[1:]}
    ctx, sp, _ = _constraint_ctx(nodal, enforced, linear=(1, 2))
    assert cm.constraint_met("Fig. 21", "linear", ctx, sp, "velocity", which=[1, 2]).verdict == BY_CONSTRUCTION
    assert cm.constraint_met("Fig. 14", "all", ctx, sp, "velocity").verdict == HOLDS


# ------------------------------------------------------------------------------ around, horizons, sensitivity
def test_oscillating_around_a_value_needs_both_sides_and_a_centred_mean():
    t = np.linspace(0, 10, 2001)
    assert cm.around(0.0375 + 1e-3 * np.sin(3 * t), 0.0375)["ok"]
    # H - H0 >= 0 all the time (KBS23a Fig. 5 as measured): not around H0
    one_sided = cm.around(1.0 + 1e-4 * np.sin(3 * t) ** 2, 1.0)
    assert not one_sided["ok"] and one_sided["crossings"] == 0 and one_sided["above"] > 0.99
    # both sides but centred far off (the mean at 0.35 of the range from the value): not around it
    off = cm.around(0.7 + np.sin(3 * t), 0.0)
    assert off["crossings"] >= 2 and not off["ok"] and "holds for 0.5" in off["words"], off["words"]


def test_a_short_run_never_holds_a_claim_about_a_longer_horizon():
    sp = RunSpec.make("double-four-bar", "VI-S", 1e-3, 2.0, record="trace")
    ctx = _ctx([], quick=True)
    held = cm.judged("Fig. 18", "fulfilled in each time step", True, "1e-15")
    c = cm.within_horizon(held, ctx, sp, 10.0)
    assert c.verdict == NOT_REPRODUCED and "quick run: T = 2 of 10" in c.reason and "would be 'holds'" in c.reason
    # a claim about every step that fails on [0, 2] fails on [0, 10]
    assert cm.within_horizon(cm.judged("Fig. 18", "x", False, "1"), ctx, sp, 10.0).verdict == FAILS
    # one about the whole run is not judged from a part either way
    assert cm.within_horizon(cm.judged("Fig. 15", "varies", False, "1"), ctx, sp, 10.0, universal=False).verdict == (
        NOT_REPRODUCED
    )
    # a run that reaches the horizon is judged
    assert cm.within_horizon(held, ctx, sp.with_(t_end=10.0), 10.0).verdict == HOLDS


def test_sensitivity_line_gives_the_verdict_at_each_value_tried():
    line = sensitivity("the band factor", (1, 2, 5, 10), lambda f: f >= 5)
    assert line == "sensitivity to the band factor (livens' choice): holds for 5, 10; fails for 1, 2"


def test_the_blow_up_band_carries_its_sensitivity():
    """KBS23b Fig. 33 with a synthetic energy that drifts linearly, E = E0 (1 + t/10): it leaves the band
    of factor f at t = 10 f, so "a blow-up at about t = 55 (±20 %)" holds for f = 5 only of 1, 2, 3, 5 and
    the run's own stop at f = 10 (t = 100) fails."""
    from livens.studies.papers import nody_2023 as nd
    from livens.studies.stability import stability_row

    h = 0.25
    t = np.arange(0, 100 + h / 2, h)
    E = 1.0 + t / 10.0
    sp = RunSpec.make("four-particle", "VI-A", h, 1000.0, blowup_factor=10.0, record="energy")
    res = RunResult(sp, "blow-up", t_fail=100.25, steps=len(t) - 1, fail_step=len(t) - 1, trace=_trace(t, E, h))
    row = stability_row(res)
    line = nd._band_sensitivity(_ctx([(sp, res)]), sp, row, 55.0, 1000.0)
    assert "1: 10.25, 2: 20.25, 3: 30.25, 5: 50.25, 7: 70.25, 10: 100.2" in line, line
    assert "holds for 5; fails for 1, 2, 3, 7, 10" in line, line


def test_an_order_against_an_exact_value_names_it():
    from livens.studies.convergence import ConvergenceResult, ConvergenceStudy, Quantity

    st = ConvergenceStudy.make("heavy-top", ["VI-S"], (1e-4, 5e-5), 0.001, [Quantity("phi3", "q", (2,), exact=0.0375)])
    rows = [
        {"scheme": "VI-S", "quantity": "phi3", "h": h, "error": e, "status": OK}
        for h, e in ((1e-4, 2e-6), (5e-5, 1e-6))
    ]
    res = ConvergenceResult(st, rows, {("VI-S", "phi3"): 1.0}, "EM, h = 5e-07")
    c = cm.order_claims("Fig. 18", lambda s, o: "first order", res, ["VI-S"], "phi3", {"VI-S": 1})[0]
    assert c.verdict == HOLDS and "against the analytic value 0.0375" in c.measured and "EM" not in c.measured


# ------------------------------------------------------------------------------ rescue
@pytest.fixture(scope="module")
def em_0675():
    """KBS23b Fig. 33's EM at h = 0.675 to just past the step the papers' Newton fails in."""
    spec = RunSpec.make("four-particle", "EM", 0.675, 82.0, blowup_factor=10.0, record="energy")
    return spec, execute(spec), execute(spec.with_(rescue=True))


def test_papers_newton_fails_where_the_rescue_goes_through(em_0675):
    spec, plain, rescued = em_0675
    assert not spec.rescue and spec.guess == "simple" and spec.tol == 1e-9  # the papers' Newton by default
    assert plain.status == NEWTON and plain.fail_step == 120 and plain.t_fail == pytest.approx(81.0)
    assert plain.rescued_steps == () and plain.numbers()["rescued_steps"] == []
    assert rescued.status == OK and rescued.rescued_steps[0] == 120
    assert rescued.numbers()["rescued_steps"] == list(rescued.rescued_steps)


def test_a_claim_on_a_failed_run_states_both_verdicts(em_0675):
    spec, plain, rescued = em_0675
    ctx = Context({spec: plain}, "/tmp", False, rescue_results={rescued.spec: rescued})
    c = cm.status_claim("Fig. 33", "EM keeps stable", ctx, spec)
    assert c.verdict == FAILS
    assert c.measured.startswith("fails with the paper's Newton (the paper's Newton fails at step 120, t = 81)")
    n = len(rescued.rescued_steps)
    assert (
        f"holds with livens' rescue (damped Newton after a failed step), {n} step{'s' * (n != 1)} rescued" in c.measured
    )
    assert "holds with livens' rescue" in c.reason


# ------------------------------------------------------------------------------ timing (KBS23b Table 2)
class _Eff:
    repeat = 3

    @staticmethod
    def spec(s, params, guess):
        return RunSpec.make("four-particle", s, 0.01, 10.0, guess=guess, repeat=3)


class _Res:
    def __init__(self, cpu):
        self.cpu = cpu

    def row(self, s, g):
        return {"normalized_cpu": min(self.cpu[s]) / min(self.cpu["VI-S"]), "normalized_time": float("nan")}


@pytest.mark.parametrize(
    "em, spread, verdict",
    [(2.0, 0.02, HOLDS), (0.5, 0.02, FAILS), (1.05, 0.02, NOT_REPRODUCED), (1.3, 0.5, NOT_REPRODUCED)],
)
def test_timing_claim_counts_only_differences_beyond_the_spread(em, spread, verdict):
    from livens.studies.papers.nody_2023 import _timing_claim

    cpu = {"VI-S": (1.0, 1.0, 1.0), "VI-A": (1.0, 1.0 + spread, 1.0 + spread), "EM": (em, em, em)}
    results = {}
    for s, times in cpu.items():
        sp = _Eff.spec(s, (), "simple")
        results[sp] = RunResult(sp, OK, cpu_times=times, wall_times=times)
    c = _timing_claim(_ctx(results.items()), _Eff, _Res(cpu), list(cpu), "simple", "EM is the slowest")
    assert c.verdict == verdict, c.measured


# ------------------------------------------------------------------------------ the stability figure
def test_the_stability_figure_tells_a_blow_up_from_a_newton_failure(tmp_path, monkeypatch):
    """KBS23b Figs 31-33: each stopped run is marked by how it ended (a blow-up, Newton after the energy
    grew, Newton with the energy conserved), and where a run stops in the first part of a long horizon a
    second panel shows the interval up to the stop."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from livens.studies import stability as st

    def row(status, err, t):
        return {"status": status, "max_rel_energy_error": err, "t_blowup": t}

    assert st.how_it_ended(row("stable", 1e-3, None)) is None
    assert st.how_it_ended(row("blow-up", 12.0, 53.0)) == "blow-up"
    assert st.how_it_ended(row("newton failure", 3.0, 40.0)) == "grew"
    assert st.how_it_ended(row("newton failure", 1e-10, 81.0)) == "newton"
    assert st.how_it_ended(row("error", float("nan"), None)) == "error"
    h = 0.25
    long_t = np.arange(0, 1000 + h / 2, h)
    short_t = np.arange(0, 53 + h / 2, h)
    traces = [("EM", _trace(long_t, np.ones_like(long_t), h, scheme="EM")),
              ("VI-A", _trace(short_t, 1.0 + short_t / 5.0, h, scheme="VI-A"))]  # fmt: skip
    status = {"EM": row("stable", 1e-10, None), "VI-A": row("blow-up", 10.6, 53.0)}
    drawn, real = [], plt.subplots
    monkeypatch.setattr(plt, "subplots", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    paths = st.stability_figure(traces, status, str(tmp_path / "fig33"), title="h = 0.25")
    assert any(p.endswith(".png") for p in paths) and any(p.endswith(".csv") for p in paths)
    fig, axes = drawn[0]
    assert len(axes) == 2 and axes[1].get_xlim()[1] == pytest.approx(1.2 * 53.0)  # the zoom on the stop
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert "energy blow-up (left the band)" in labels and "Newton failed, energy conserved" not in labels


def test_the_settings_of_a_section_describe_its_runs_only():
    """SLO09: `--section 4.2` lists the swing's settings (the 'extrapolated' guess and the tolerances up to
    max(1e-9, 2e-13/h) at the smallest h), not §4.1's; the whole paper lists both."""
    from livens.studies.papers import jns_2009 as jns

    only = " ".join(jns.settings(False, ["4.2"]))
    assert "three-bar swing" in only and "double spherical pendulum" not in only
    assert "'extrapolated' first guess" in only and f"up to {jns.swing_tol(jns.FIG9_REF):g}" in only
    assert "assumed geometry" in only
    both = " ".join(jns.settings(False, None))
    assert "double spherical pendulum" in both and "three-bar swing" in both
    assert "three-bar swing" not in " ".join(jns.settings(True, ["4.1"]))


def test_eq_14_and_16_are_judged_at_a_tolerance_the_null_space_form_reaches():
    """SLO09 names no Newton tolerance. Where vi-nullspace's Newton fails at livens' 1e-12 (its round-off
    floor), eq 14 = eq 16 is judged with vi-nullspace at EQ_NULLSPACE_TOL, and the outcomes at 1e-12 (with
    and without rescue) are stated beside; a real difference there still fails."""
    from livens.studies.papers import jns_2009 as jns

    def res(spec, status, vb=float("nan"), step=None):
        return RunResult(spec, status, t_fail=None if step is None else step * spec.h, steps=10, fail_step=step,
                         velocity_bound=vb)  # fmt: skip

    hs = (0.1, 1e-3)
    lag = {h: RunSpec.make("double-spherical-pendulum", "vi-lagrange", h, 10.0, tol=1e-12) for h in hs}
    nsp = {h: lag[h].with_(scheme="vi-nullspace") for h in hs}
    reach = {h: sp.with_(tol=jns.EQ_NULLSPACE_TOL) for h, sp in nsp.items()}

    def claim(v_reach):
        pairs = [(lag[h], res(lag[h], OK, 12.0)) for h in hs] + [(nsp[0.1], res(nsp[0.1], OK, 12.0))]
        pairs += [(nsp[1e-3], res(nsp[1e-3], NEWTON, step=405))]
        pairs += [(reach[h], res(reach[h], OK, v_reach)) for h in hs]
        rescued = nsp[1e-3].with_(rescue=True)
        ctx = _ctx(pairs, rescue=[(rescued, res(rescued, NEWTON, step=1472))])
        return jns._equivalence_41("§4.1, eq 14, 16", "equivalent", ctx, nsp, lag, reach)

    c = claim(12.0 * (1 + 1e-13))
    assert c.verdict == HOLDS and "Newton tol 1e-11 (the verdict)" in c.measured, c
    assert "fails without rescue" in c.measured and "fails at step 405" in c.measured and "step 1472" in c.measured
    assert "SLO09 names no Newton tolerance" in c.reason
    assert claim(12.0 * (1 + 1e-6)).verdict == FAILS
