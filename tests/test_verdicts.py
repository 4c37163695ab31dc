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
- KBS23b Table 2's timing claim is judged only beyond the timing spread.
"""

import csv

import numpy as np
import pytest

from livens.studies.papers import _common as cm
from livens.studies.report import ERROR, FAILS, HOLDS, NOT_REPRODUCED, of_the_order
from livens.studies.reproduce import Context
from livens.studies.runs import NEWTON, OK, RunResult, RunSpec, execute
from livens.studies.trace import Trace


def _trace(t, E, h, T=None, V=None, nodal=None, scheme="VI-S"):
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
        enforced={},
        t_step=t[1:],
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
            "p-x", "00x", "stand-in", lambda quick: [rp.Item("f1", "Fig. 1", [], make)], lambda quick: ["stand-in"]
        )
    }
    monkeypatch.setattr(rp, "papers", lambda: fake)
    assert main(["reproduce", "p-x", "--out", str(tmp_path), "--quiet"]) == 1
    assert "broken claim builder" in capsys.readouterr().err
    with open(tmp_path / "claims.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["verdict"] == "error" and "RuntimeError: broken claim builder" in row["reason"]
    assert "0 not reproduced, 1 error" in (tmp_path / "report.md").read_text()
    # and in the index of `reproduce all`
    assert main(["reproduce", "all", "--out", str(tmp_path / "all"), "--quiet"]) == 1
    index = (tmp_path / "all" / "report.md").read_text()
    assert "| holds | fails | not reproduced | error |" in index and "(p-x) | 0 | 0 | 0 | 1 |" in index


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
