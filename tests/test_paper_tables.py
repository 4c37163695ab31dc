"""The tables the papers' reproduction modules are written as (livens.studies.papers._common): a
:class:`Figure` entry is drawn only from the runs it names that have a trace, in the table's order, with
the section's settings line under its title; a :class:`Said` entry is judged on its run, with its
:class:`OfTrace` arguments computed from that run's trace, "not reproduced" where livens lacks the run,
and about its horizon where it names one."""

from types import SimpleNamespace

from livens.studies.papers import _common as cm
from livens.studies.report import FAILS, HOLDS, NOT_REPRODUCED
from livens.studies.reproduce import Context
from livens.studies.runs import OK, RunResult, RunSpec


def _ctx(pairs, out="/tmp", quick=True):
    return Context(dict(pairs), out, quick)


def _drawn():
    """A stand-in for a plots.*_figure function that records its calls."""
    calls = []

    def draw(runs, stem, *args, **kw):
        calls.append((runs, stem, args, kw))
        return [stem + ".png"]

    return draw, calls


def test_figures_are_drawn_in_order_from_the_runs_they_name():
    draw, calls = _drawn()
    traces = {"VI-S": "trace S", "EM": "trace EM"}
    figures = (
        cm.Figure("all", draw, "every run", ("q", 0), {"ylabel": "$q_1$"}),
        cm.Figure("pair", draw, "VI-A and EM", of=("VI-A", "EM")),
        cm.Figure("none", draw, "VI-A alone", of=("VI-A",), one=True),
        cm.Figure("energy_{run}", draw, "energy, {run}", one=True, settings=False),
        cm.Figure("count", draw, "n", kw={"n": cm.OfTrace(len)}, of=("EM", "VI-S")),
    )
    ctx = _ctx([], out="/out")
    cm.draw_figures(ctx, traces, figures, "h = 0.05")
    assert [c[1] for c in calls] == ["/out/all", "/out/pair", "/out/energy_VI-S", "/out/count"]
    assert calls[0] == (
        ["trace S", "trace EM"],
        "/out/all",
        ("q", 0),
        {"title": "every run\nh = 0.05", "ylabel": "$q_1$"},
    )
    assert calls[1][0] == ["trace EM"]  # VI-A has no trace: the figure shows EM only
    assert calls[2][0] == "trace S" and calls[2][3] == {"title": "energy, VI-S"}  # one run, no settings line
    assert calls[3][0] == ["trace EM", "trace S"] and calls[3][3]["n"] == 2  # OfTrace of what it shows
    assert ctx.files == ["/out/all.png", "/out/pair.png", "/out/energy_VI-S.png", "/out/count.png"]


def _run(scheme, t_end, trace):
    spec = RunSpec.make("pendulum-3d", scheme, 0.05, t_end)
    return spec, RunResult(spec, OK, steps=10, trace=trace)


def _check(where, text, ctx, spec, bound, scale=1.0):
    """A check that holds when the trace's value times ``scale`` is below ``bound``."""
    x = ctx.trace(spec).x * scale
    return cm.judged(where, text, x < bound, f"{spec.scheme}: x = {x:g}")


def test_claims_are_judged_on_their_runs_in_order():
    s, rs = _run("VI-S", 10.0, SimpleNamespace(x=1.0, n=4))
    e, re_ = _run("EM", 10.0, SimpleNamespace(x=3.0, n=2))
    ctx = _ctx([(s, rs), (e, re_)])
    said = (
        cm.Said("Fig. 1", "VI-S is small", _check, "VI-S", (2.0,)),
        cm.Said("Fig. 1", "EM is small", _check, "EM", (2.0,)),
        cm.Said("Fig. 2", "EM scaled by 1/n is small", _check, "EM", (2.0,), {"scale": cm.OfTrace(lambda t: 1 / t.n)}),
        cm.Said("Fig. 3", "BS99 is small", _check, "BS99-not-planned", (2.0,)),
    )
    c = cm.judge_claims(ctx, {"VI-S": s, "EM": e}, said, "pendulum-3d")
    assert [x.text for x in c] == [x.text for x in said]
    assert [x.verdict for x in c] == [HOLDS, FAILS, HOLDS, NOT_REPRODUCED]
    assert c[2].measured == "EM: x = 1.5"  # 3 / n of EM's own trace
    assert "BS99-not-planned not available" in c[3].reason


def test_a_claim_about_a_longer_horizon_is_not_judged_from_a_short_run():
    s, rs = _run("VI-S", 2.0, SimpleNamespace(x=1.0))
    ctx = _ctx([(s, rs)])
    said = (
        cm.Said("Fig. 1", "holds to T = 10", _check, "VI-S", (2.0,), t_claim=10.0),
        cm.Said("Fig. 1", "fails to T = 10, throughout", _check, "VI-S", (0.5,), t_claim=10.0),
        cm.Said("Fig. 1", "fails to T = 10, not throughout", _check, "VI-S", (0.5,), t_claim=10.0, universal=False),
        cm.Said("Fig. 1", "holds to T = 2", _check, "VI-S", (2.0,), t_claim=2.0),
    )
    c = cm.judge_claims(ctx, {"VI-S": s}, said)
    assert [x.verdict for x in c] == [NOT_REPRODUCED, FAILS, NOT_REPRODUCED, HOLDS]
    assert c[0].reason.startswith("quick run: T = 2 of 10; the verdict on this run would be 'holds'")
