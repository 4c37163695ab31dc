"""What ``livens`` prints besides the results: the summary's figures (steps computed and nodes kept,
times, rate), Python warnings as one line each, and the help texts."""

import dataclasses
import os
import re
import warnings

import pytest

import livens as lv
from livens import examples
from livens.cli import build_parser, main

DOCS_CLI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "guide", "cli.md")


# ------------------------------------------------------------------ the summary
def test_short_run_times_add_up_and_its_rate_is_noted(capsys):
    """vi-lagrange compiles its start step and the time loop before the first step: the wall time
    is the compile time plus the stepping time, the rate is that of the 100 steps over the stepping
    time (no NaN), and a note says that a run this short weighs per-call overhead in it."""
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "vi-lagrange", h=0.001, t_end=0.1, progress=False)
    s = sol.summary()
    assert s["steps"] == 100 and s["nodes kept"] == 101
    assert 0 < s["compile time [s]"] <= s["wall time [s]"]
    assert s["compile time [s]"] + s["stepping time [s]"] == pytest.approx(s["wall time [s]"], rel=1e-12)
    assert s["steps/s"] == pytest.approx(100 / s["stepping time [s]"])
    assert "a short run (100 steps in" in s["steps/s note"]
    assert main(["run", "pendulum-3d", "--scheme", "vi-lagrange", "--h", "0.001", "--t-end", "0.1", "--quiet"]) == 0
    out = capsys.readouterr().out
    wall = float(re.search(r"wall time \[s\] +([\d.e+-]+)", out).group(1))
    compile_ = float(re.search(r"compile time \[s\] +([\d.e+-]+)", out).group(1))
    assert compile_ <= wall
    assert re.search(r"\n  steps/s +[\d.e+]+\n", out) and "steps/s note" in out and "nan" not in out


def test_thinned_run_reports_steps_computed_and_nodes_kept(capsys):
    """save_every 7 over 1000 steps: 1000 steps computed, 143 nodes kept (every 7th and the start);
    the summary and the repr say both, and a file that does not record the steps (one a stopped run
    left) counts the steps its kept nodes span."""
    problem = lv.examples.load("pendulum-3d")
    sol = lv.simulate(problem, "VI-S", h=0.001, t_end=1.0, save_every=7, progress=False)
    assert sol.n_steps == 142  # kept intervals
    s = sol.summary()
    assert s["steps"] == 1000 and s["nodes kept"] == 143
    assert "steps_computed=1000, nodes_kept=143, save_every=7" in repr(sol)
    stopped = dataclasses.replace(sol, meta={k: v for k, v in sol.meta.items() if k != "steps"})
    assert stopped.summary()["steps"] == 142 * 7 and "steps_computed=994, nodes_kept=143" in repr(stopped)
    assert main(["run", "pendulum-3d", "--h", "0.001", "--t-end", "1", "--save-every", "7", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\n  steps +1000\n", out) and re.search(r"\n  nodes kept +143\n", out), out
    assert ", one node in every 7 kept" in out


def test_summary_header_names_the_scheme_and_its_parameters_without_stray_spaces(capsys):
    assert main(["run", "pendulum-3d", "--scheme", "EM", "--t-end", "0.2", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("ggl-em on pendulum-3d, h = 0.05")
    assert main(["run", "pendulum-3d", "--scheme", "ggl-theta-a", "--theta", "0.5", "--t-end", "0.2", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("ggl-theta-a (theta=0.5) on pendulum-3d")


# ------------------------------------------------------------------ warnings
def test_warnings_in_a_cli_run_are_one_clean_line_each(monkeypatch, capsys):
    """Warnings raised during ``livens run`` (here from the example's construction, where livens' own
    notices come from) print as "warning: ..." or "note: ..." on one line, without the file and
    line that raised them, each text once."""
    from livens.engine.native.runner import NativeFallback

    load = examples.load

    def load_and_warn(name, **kw):
        warnings.warn("livens: this run uses XLA, not native code: a reason", NativeFallback, stacklevel=2)
        warnings.warn("a message\n  over two lines", RuntimeWarning, stacklevel=2)
        for _ in range(2):  # the same notice twice (two Problems made): printed once
            warnings.warn("the system has redundant constraints", lv.RedundantConstraintsNotice, stacklevel=2)
        return load(name, **kw)

    monkeypatch.setattr(examples, "load", load_and_warn)
    assert main(["run", "pendulum-3d", "--t-end", "0.1", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: this run uses XLA, not native code: a reason",
        "warning: a message over two lines",
        "note: the system has redundant constraints",
    ]
    # Python's own display is back after the command
    with pytest.warns(RuntimeWarning):
        warnings.warn("after", RuntimeWarning, stacklevel=1)
    assert warnings.showwarning.__module__ == "warnings"


# ------------------------------------------------------------------ help
def _help(*argv) -> None:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0


@pytest.mark.parametrize("command", [[], ["run"], ["list"], ["study"], ["reproduce"]])
def test_help_is_plain_text(command, capsys):
    if command and command[0] not in build_parser()._subparsers._group_actions[0].choices:
        pytest.skip(f"no {command[0]} command here")
    _help(*command)
    text = capsys.readouterr().out
    assert text.startswith("usage: livens")
    for markup in ("``", ":class:", ":func:", ":mod:", ":meth:"):
        assert markup not in text, (markup, text)


def test_run_help_points_to_the_guide_section_that_exists(capsys):
    _help("run")
    text = " ".join(capsys.readouterr().out.split())
    assert "--config CONFIG a run.toml file (format: docs/guide/cli.md, section 'Configuration files')" in text
    assert "README" not in text
    with open(DOCS_CLI) as f:
        assert "\n## Configuration files\n" in f.read()
    assert "--resume FILE continue the run stopped in FILE" in text
