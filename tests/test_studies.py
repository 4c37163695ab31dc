"""Studies: reducers against direct runs, fitted orders, blow-up detection, effort,
velocity bound, executors (local, process pool, Dask LocalCluster give identical numbers), CLI.

All runs use pendulum-3d with VI-S (and VI-A, EM), so each compiles once.
"""

import csv
import math

import numpy as np
import pytest

import livens as lv
from livens import studies
from livens.studies.runs import RunSpec, execute, problem_for
from livens.studies.trace import Trace

EX = "pendulum-3d"


# ------------------------------------------------------------------------------ order fit
def test_fit_order_recovers_exact_power_laws():
    h = np.array([0.1, 0.05, 0.025, 0.0125])
    assert studies.fit_order(h, 3.0 * h**2) == pytest.approx(2.0, abs=1e-12)
    assert studies.fit_order(h, 0.5 * h) == pytest.approx(1.0, abs=1e-12)
    # unusable points are dropped, not fitted
    assert studies.fit_order(h, [np.nan, 0.05, 0.025, 0.0125]) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(studies.fit_order(h, [np.nan, np.nan, np.nan, 1.0]))


# ------------------------------------------------------------------------------ convergence
# a second-order reference (its own error must be far below the errors measured)
REF = "VI-A"


@pytest.fixture(scope="module")
def conv():
    schemes = ["VI-S", "VI-A"]
    st = studies.ConvergenceStudy.make(
        EX,
        schemes,
        [0.01, 0.005, 0.0025],
        0.1,
        [studies.Quantity("q", "q"), studies.Quantity("p3", "p", (2,))],
        reference={"scheme": REF, "h": 0.0001},
        tol=1e-12,
    )
    return st, studies.run_study(st, progress=False)


def test_convergence_errors_equal_direct_runs(conv):
    """The reducer's errors are ||x_h(t) - x_ref(t)|| / ||x_ref(t)|| of independent simulate calls."""
    st, res = conv
    p = lv.examples.load(EX)
    ref = lv.simulate(p, REF, h=0.0001, t_end=0.1, tol=1e-12)
    for h in (0.01, 0.0025):
        sol = lv.simulate(p, "VI-S", h=h, t_end=0.1, tol=1e-12)
        hs, e = res.errors("VI-S", "q")
        want = np.linalg.norm(sol.q[-1] - ref.q[-1]) / np.linalg.norm(ref.q[-1])
        assert e[list(hs).index(h)] == pytest.approx(want, rel=1e-9)
        hs, e = res.errors("VI-S", "p3")
        want = abs(sol.p[-1, 2] - ref.p[-1, 2]) / abs(ref.p[-1, 2])
        assert e[list(hs).index(h)] == pytest.approx(want, rel=1e-9)


def test_convergence_orders_match_the_papers(conv):
    """VI-S is first order (KBS23b Figs 18-19), VI-A second order."""
    st, res = conv
    assert res.order("VI-S", "q") == pytest.approx(1.0, abs=0.15)
    assert res.order("VI-A", "q") == pytest.approx(2.0, abs=0.15)


def test_convergence_against_an_exact_value():
    """A quantity with an analytic value needs no reference run: the pendulum's length |q| = 1
    is exact, so an 'error' against (1, 0, 0) at t = h is just the displacement."""
    st = studies.ConvergenceStudy.make(
        EX, ["VI-S"], [0.01, 0.005], 0.01, [studies.Quantity("q", "q", exact=(1.0, 0.0, 0.0))]
    )
    assert all(r.h in (0.01, 0.005) for r in st.runs())  # no reference run planned
    res = studies.run_study(st, progress=False)
    p = lv.examples.load(EX)
    sol = lv.simulate(p, "VI-S", h=0.005, t_end=0.01, tol=1e-12)
    assert res.errors("VI-S", "q")[1][1] == pytest.approx(np.linalg.norm(sol.q[-1] - [1, 0, 0]), rel=1e-9)


# ------------------------------------------------------------------------------ stability
def test_stability_detects_blow_up_and_its_time():
    st = studies.StabilityStudy.make(EX, ["VI-S"], [0.01, 0.2], 4.0, blowup_factor=1.0)
    res = studies.run_study(st, progress=False)
    assert res.stable("VI-S", 0.01)
    assert not res.stable("VI-S", 0.2)
    row = res.row("VI-S", 0.2)
    # the same run directly: it must stop with a blow-up or Newton failure at the reported time
    p = lv.examples.load(EX)
    with pytest.raises(lv.SimulationError) as info:
        lv.simulate(p, "VI-S", h=0.2, t_end=4.0, blowup_factor=1.0, guess="simple")  # studies: the papers' guess
    assert row["t_blowup"] == pytest.approx(info.value.time)
    assert row["status"] in ("blow-up", "newton failure")
    # the stable run's energy error equals that of a direct run
    sol = lv.simulate(p, "VI-S", h=0.01, t_end=4.0, guess="simple")
    E = sol.energy()["total"]
    assert res.row("VI-S", 0.01)["max_rel_energy_error"] == pytest.approx(
        np.max(np.abs(E - E[0])) / abs(E[0]), rel=1e-9
    )


def test_blow_up_before_a_failed_newton_step_is_found_whatever_the_chunk():
    """An energy that leaves the band before Newton fails is a blow-up at its own time: the steps
    before the failed one are checked too, so the status does not depend on the chunk size (KBS23b
    §6.3: VI-S at h = 0.05 blows up at t = 0.3, its Newton fails at t = 0.55)."""
    p = lv.examples.load("four-particle")
    got = []
    for chunk in (4, 512):
        with pytest.raises(lv.BlowUpError) as info:
            lv.simulate(p, "VI-S", h=0.05, t_end=2.0, blowup_factor=1.0, guess="simple", rescue=False, chunk=chunk)
        got.append((info.value.step, info.value.time))
    assert got[0] == got[1] and got[0][1] == pytest.approx(0.3)


def test_stability_study_keeps_the_papers_newton_and_counts_rescued_steps():
    """The default is the papers' Newton (no rescue); with rescue=True the rows count the rescued steps."""
    plain = studies.StabilityStudy.make("four-particle", ["EM"], [0.675], 82.0, blowup_factor=10.0)
    assert all(not s.rescue and s.guess == "simple" for s in plain.runs())
    res = studies.run_study(plain, progress=False)
    row = res.row("EM", 0.675)
    assert row["status"] == "newton failure" and row["fail_step"] == 120 and row["rescued_steps"] == 0
    rescued = studies.StabilityStudy.make("four-particle", ["EM"], [0.675], 82.0, blowup_factor=10.0, rescue=True)
    row = studies.run_study(rescued, progress=False).row("EM", 0.675)
    assert row["status"] == "stable" and row["rescued_steps"] >= 1 and row["rescue"]


def test_thinned_trace_keeps_the_energy_envelope():
    p = lv.examples.load(EX)
    sol = lv.simulate(p, "VI-S", h=0.01, t_end=5.0)
    full = Trace.from_solution(sol)
    thin = Trace.from_solution(sol, max_points=50)
    assert len(thin.t) < 60 < len(full.t)
    assert thin.E.max() == full.E.max() and thin.E.min() == full.E.min()
    assert thin.t[0] == 0.0 and thin.t[-1] == full.t[-1]


# ------------------------------------------------------------------------------ effort, velocity bound
def test_effort_iterations_equal_direct_runs_and_normalization():
    st = studies.EffortStudy.make(EX, ["VI-S"], 0.05, 1.0, repeat=1)
    res = studies.run_study(st, progress=False)
    p = lv.examples.load(EX)
    for g in ("simple", "advanced"):
        sol = lv.simulate(p, "VI-S", h=0.05, t_end=1.0, guess=g)
        assert res.row("VI-S", g)["mean_iterations"] == pytest.approx(np.mean(sol.newton_iterations))
        assert res.row("VI-S", g)["normalized_time"] == 1.0
    # KBS23b Table 2: the advanced guess needs fewer iterations
    assert res.row("VI-S", "advanced")["mean_iterations"] < res.row("VI-S", "simple")["mean_iterations"]


def test_velocity_bound_equals_direct_computation():
    st = studies.VelocityBoundStudy.make(EX, "VI-S", [0.05, 0.025], 1.0)
    res = studies.run_study(st, progress=False)
    p = lv.examples.load(EX)
    for row in res.rows:
        sol = lv.simulate(p, "VI-S", h=row["h"], t_end=1.0, tol=1e-12)
        want = np.max(np.linalg.norm(np.diff(sol.q, axis=0), axis=1)) / row["h"]
        assert row["max_velocity"] == pytest.approx(want, rel=1e-12)


def test_failed_and_refused_runs_are_results_not_exceptions():
    bad = execute(RunSpec.make(EX, "no-such-scheme", 0.1, 1.0))
    assert bad.status == "refused" and "Unknown scheme" in bad.message
    bad = execute(RunSpec.make("no-such-example", "VI-S", 0.1, 1.0))
    assert bad.status == "error" and "no-such-example" in bad.message


def test_problem_cache_reuses_one_system():
    assert problem_for(EX) is problem_for(EX)
    assert problem_for(EX, (("mass", 2.0),)) is not problem_for(EX)


def test_system_parameter_sweep_runs_one_compiled_loop():
    """Runs that differ in a System parameter share the Problem (and the compiled loop) and give
    the results of lv.simulate with those values."""
    from livens.driver.run import _LOOPS as _RUNNERS
    from livens.studies.runs import execute

    specs = [
        RunSpec.make("pendulum-3d", "VI-S", 0.01, 0.2, system_params={"gravity": g}, tol=1e-12)
        for g in (9.0, 9.81, 10.5)
    ]
    n_before = len(_RUNNERS)
    results = [execute(s) for s in specs]
    assert len(_RUNNERS) <= n_before + 1
    problem = problem_for("pendulum-3d")
    for g, r in zip((9.0, 9.81, 10.5), results):
        sol = lv.simulate(
            problem,
            "VI-S",
            h=0.01,
            t_end=0.2,
            tol=1e-12,
            guess="simple",
            rescue=False,
            progress=False,
            parameters={"gravity": g},
        )
        np.testing.assert_allclose(r.final["q"], sol.q[-1], rtol=0, atol=1e-13)
    assert not np.allclose(results[0].final["q"], results[2].final["q"])


# ------------------------------------------------------------------------------ executors
def _small_study():
    return studies.ConvergenceStudy.make(
        EX,
        ["VI-S"],
        [0.02, 0.01],
        0.2,
        [studies.Quantity("q", "q")],
        reference={"scheme": "VI-S", "h": 0.001},
        tol=1e-12,
    )


def _numbers(res):
    return [(r["scheme"], r["quantity"], r["h"], r["error"], r["status"]) for r in res.rows], res.orders


@pytest.fixture(scope="module")
def local_numbers():
    st = _small_study()
    res = studies.run_study(st, progress=False)
    raw = studies.run_specs(st.runs(), progress=False)
    return _numbers(res), {s: r.numbers() for s, r in raw.items()}


def test_dask_local_cluster_gives_identical_numbers(local_numbers):
    """A real Dask cluster on loopback, reached through its tcp address like any remote one."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, host="127.0.0.1", protocol="tcp"
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        st = _small_study()
        res = studies.run_study(st, scheduler=address, progress=False)
        raw = studies.run_specs(st.runs(), scheduler=address, progress=False)
    assert _numbers(res) == local_numbers[0]  # exactly, not approximately
    assert {s: r.numbers() for s, r in raw.items()} == local_numbers[1]


@pytest.mark.slow
def test_dask_cluster_in_worker_processes_gives_identical_numbers(local_numbers):
    """Workers in separate processes (each compiles its own time loop) give the same numbers."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
    ) as cluster:
        res = studies.run_study(_small_study(), scheduler=cluster.scheduler_address, progress=False)
    assert _numbers(res) == local_numbers[0]


@pytest.mark.slow
def test_local_process_pool_gives_identical_numbers(local_numbers):
    res = studies.run_study(_small_study(), processes=2, progress=False)
    assert _numbers(res) == local_numbers[0]


def test_unreachable_scheduler_is_a_clear_error():
    pytest.importorskip("dask.distributed")
    with pytest.raises(ValueError, match="Dask scheduler"):
        studies.DaskExecutor("tcp://127.0.0.1:9", timeout=1.0)
    with pytest.raises(ValueError, match="address"):
        studies.DaskExecutor("localhost")


# ------------------------------------------------------------------------------ CLI
def test_cli_study_convergence_writes_named_columns(tmp_path, capsys):
    from livens.cli import main

    rc = main(
        [
            "study",
            "convergence",
            EX,
            "--schemes",
            "VI-S",
            "--h",
            "0.02,0.01",
            "--t-end",
            "0.2",
            "--reference",
            "VI-S:0.001",
            "--quantity",
            "q[0:2]",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "VI-S" in out and "order" in out
    with open(tmp_path / "errors.csv") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"scheme", "quantity", "h", "error", "status"}
    assert [float(r["h"]) for r in rows] == [0.02, 0.01]
    assert all(float(r["error"]) > 0 for r in rows)
    assert (tmp_path / "convergence.png").exists() and (tmp_path / "convergence.pdf").exists()


def test_cli_rejects_bad_study_arguments(capsys):
    from livens.cli import main

    assert main(["study", "convergence", EX, "--schemes", "VI-S", "--h", "0.1", "--t-end", "1"]) == 2
    assert "--reference" in capsys.readouterr().err
    assert main(["study", "convergence", EX, "--schemes", "VI-S", "--h", "a,b", "--t-end", "1", "--exact", "1"]) == 2
    assert (
        main(
            [
                "study",
                "convergence",
                EX,
                "--schemes",
                "VI-S",
                "--h",
                "0.1",
                "--t-end",
                "1",
                "--exact",
                "1",
                "--quantity",
                "x[1]",
            ]
        )
        == 2
    )
    assert main(["reproduce", "no-such-paper", "--out", "/tmp/never"]) == 2
    assert "Known" in capsys.readouterr().err


def test_split_and_parse_helpers():
    from livens.studies.cli import parse_quantity, split_list
    from livens.studies.runs import parse_scheme

    assert split_list("VI-S,ggl-theta-b(theta=0.5,vartheta=0.5),EM") == [
        "VI-S",
        "ggl-theta-b(theta=0.5,vartheta=0.5)",
        "EM",
    ]
    assert parse_scheme("ggl-theta-b(theta=0.5, vartheta=0.5)") == ("ggl-theta-b", {"theta": 0.5, "vartheta": 0.5})
    assert parse_quantity("q[9:12]").indices == (9, 10, 11)
    assert parse_quantity("lam").field == "lam"


def test_progress_bar_is_quiet_off_a_terminal(capsys):
    from livens.studies.executors import _Progress

    assert _Progress(5, None, "x").bar is None  # pytest's stderr is not a terminal
    assert _Progress(5, False, "x").bar is None  # --quiet
    bar = _Progress(2, True, "runs")  # forced on: runs done and the rate of time steps
    res = execute(RunSpec.make(EX, "VI-S", 0.1, 0.5))
    bar(res)
    assert bar.bar.n == 1 and "steps/s" in str(bar.bar)
    bar.close()


def test_reproduce_all_writes_each_paper_and_an_index(tmp_path, monkeypatch, capsys):
    """`livens reproduce all`: every registered paper into OUT/<key>/ and an index with the counts.
    Two small stand-in papers (one pendulum run each) keep the test fast."""
    from livens.studies import reproduce as rp
    from livens.studies.report import judged
    from livens.studies.runs import RunSpec

    def paper(key, h):
        spec = RunSpec("pendulum-3d", "EM", h, 20 * h, (), (), 1e-12, 40)

        def make(ctx):
            r = ctx.result(spec)
            return [judged("Fig. 1", f"EM finishes at h = {h}", r.status == "ok", f"status {r.status}")]

        return rp.Paper(
            key,
            "00x",
            f"stand-in {key}",
            lambda quick: [rp.Item("f1", "Fig. 1", [spec], make)],
            lambda quick, sections=None: ["stand-in"],
        )

    fake = {"p-a": paper("p-a", 0.01), "p-b": paper("p-b", 0.02)}
    monkeypatch.setattr(rp, "papers", lambda: fake)
    from livens.cli import main

    assert main(["reproduce", "all", "--quick", "--out", str(tmp_path), "--quiet"]) == 0
    index = (tmp_path / "report.md").read_text()
    for key in fake:
        assert (tmp_path / key / "report.md").exists() and (tmp_path / key / "claims.csv").exists()
        assert f"({key}) | 1 |" in index and f"[{key}/report.md]" in index
    assert "index:" in capsys.readouterr().out


def test_cli_study_takes_the_roundoff_tolerance_its_failure_message_advises(tmp_path, capsys):
    """A study whose tolerance lies below the residual's round-off floor fails its runs, and the
    message advises tol="roundoff"; ``--tol roundoff`` then runs the study, each error that of a
    direct lv.simulate run at tol="roundoff"."""
    from livens.cli import main

    args = ["study", "convergence", EX, "--schemes", "EM", "--h", "0.02,0.01", "--t-end", "0.2"]
    args += ["--exact", "0.5", "--quantity", "q[0]", "--quiet"]
    assert main([*args, "--tol", "1e-17", "--out", str(tmp_path / "below")]) == 0
    out = capsys.readouterr().out
    assert "round-off floor" in out and 'tol="roundoff"' in out
    assert main([*args, "--tol", "roundoff", "--out", str(tmp_path / "roundoff")]) == 0
    with open(tmp_path / "roundoff" / "errors.csv") as f:
        rows = list(csv.DictReader(f))
    problem = lv.examples.load(EX)
    for row in rows:
        h = float(row["h"])
        direct = lv.simulate(problem, "EM", h=h, t_end=0.2, tol="roundoff", guess="simple", rescue=False)
        assert float(row["error"]) == pytest.approx(abs(direct.q[-1, 0] - 0.5) / 0.5, rel=1e-12)  # relative
    with pytest.raises(SystemExit):  # argparse's usage error
        main([*args, "--tol", "tiny"])
    assert "'roundoff'; got 'tiny'" in capsys.readouterr().err
