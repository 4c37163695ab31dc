"""The pure parts of two sections of ``python -m benchmarks``, on given numbers (no timing):

- ``--only out-cost`` (benchmarks/out_cost.py): the medians of the pairs' times and of their per-pair
  ratios, the figures the target is judged on (the CLI's default run only), the verdicts, and a
  command line that livens' CLI parser accepts;
- ``--only stage-tangent`` (benchmarks/stage_tangent.py): steps/s from median stepping times, and
  the forcing of ggl-galerkin's tangent through a replaced SizePolicy (restored after, also on an
  error);
- ``--only`` knows both names (and ``--help`` lists them), no pair of the table matches them, and the
  comparison with a baseline that lacks their rows (or has rows this run lacks) runs.
"""

import dataclasses
import os
import sys

import jax.numpy as jnp
import pytest

import livens as lv

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks import out_cost, sections, stage_tangent  # noqa: E402
from benchmarks.__main__ import _arguments  # noqa: E402
from benchmarks.targets import _flatten, compare, verdict  # noqa: E402


def _pair(with_cpu, without_cpu, with_wall, without_wall):
    return {"with": {"cpu_s": with_cpu, "wall_s": with_wall}, "without": {"cpu_s": without_cpu, "wall_s": without_wall}}


def test_out_cost_takes_the_median_of_the_per_pair_ratios():
    # per-pair CPU ratios 1.5, 1.1, 1.2 (median 1.2), wall ratios 2.0, 1.0, 1.25 (median 1.25)
    pairs = [_pair(15.0, 10.0, 20.0, 10.0), _pair(11.0, 10.0, 8.0, 8.0), _pair(12.0, 10.0, 10.0, 8.0)]
    s = out_cost.summarize(pairs)
    assert s["cpu_ratio"] == 1.2 and s["with_cpu_s"] == 12.0 and s["without_cpu_s"] == 10.0
    assert s["wall_ratio"] == 1.25 and s["with_wall_s"] == 10.0 and s["without_wall_s"] == 8.0
    # the ratio is the median of the pairs' ratios (1, 3, 1), not the ratio of the medians (30 / 10)
    skewed = [_pair(10.0, 10.0, 1, 1), _pair(30.0, 10.0, 1, 1), _pair(40.0, 40.0, 1, 1)]
    s = out_cost.summarize(skewed)
    assert s["cpu_ratio"] == 1.0 and s["with_cpu_s"] / s["without_cpu_s"] == 3.0  # per pair, not of medians
    with pytest.raises(ValueError, match="at least one measured pair"):
        out_cost.summarize([])


def test_out_cost_target_is_judged_on_the_default_run_only(capsys):
    row = {"t_end": None, "default_run": True, "pairs": [_pair(1.14, 1.0, 1.1, 1.0)], "written": ["x.nc"]}
    row.update(out_cost.summarize(row["pairs"]))
    flat = _flatten({"out_cost": row})
    assert flat["out_cost_cpu_ratio"] == (1.14, False) and flat["out_cost_wall_ratio"] == (1.1, False)
    short = dict(row, t_end=0.1, default_run=False)
    flat = _flatten({"out_cost": short})
    assert "out_cost_cpu_ratio" not in flat and "out_cost:with_cpu_s" in flat
    compare({"out_cost": short}, None)
    assert "judged on the CLI's default run, not --t-end 0.1" in capsys.readouterr().out
    assert verdict(1.14, "<=", 1.25) == "MET" and verdict(1.3, "<=", 1.25) == "not met"
    assert verdict(None, "<=", 1.25) == "not measured" and verdict(3.5, ">=", 3.0) == "MET"
    with pytest.raises(ValueError, match="op must be"):
        verdict(1.0, "<", 1.25)


def test_out_cost_command_is_a_livens_run_the_cli_accepts():
    from livens.cli import build_parser

    for out_dir, t_end in ((None, None), ("/tmp/x", None), ("/tmp/x", 0.25)):
        cmd = out_cost.command(out_dir, t_end)
        argv = cmd[cmd.index("run") :]
        args = build_parser().parse_args(argv)
        assert args.example == "three-bar-swing" and args.scheme == "vi-lagrange" and args.quiet
        assert args.out == out_dir and args.t_end == t_end


def test_stage_tangent_rows_from_median_times():
    row = stage_tangent.summarize(300, {"structured": [1.0, 3.0, 1.5], "dense": [2.0, 3.0, 10.0]})
    assert row == {
        "steps": 300,
        "structured_steps_per_s": 200.0,
        "dense_steps_per_s": 100.0,
        "structured_over_dense": 2.0,
    }
    assert "structured_over_dense" not in stage_tangent.summarize(10, {"structured": [1.0]})
    flat = _flatten({"stage_tangent": {"heavy-top|s=2": row, "andrews-squeezer|s=3": {"failed": "x"}}})
    assert flat["stage_tangent:heavy-top|s=2:ratio"] == (2.0, True)
    assert not any(k.startswith("stage_tangent:andrews") for k in flat)


def test_stage_tangent_forcing_switches_the_tangent_and_restores_the_policy():
    from livens.schemes import stage_tangents

    before = lv.engine.size_policy()
    small, large = {"x": jnp.zeros(20)}, {"x": jnp.zeros(120)}
    assert not stage_tangents.use_structured(small) and stage_tangents.use_structured(large)
    with stage_tangent.forced(lv, "structured"):
        assert stage_tangents.use_structured(small) and stage_tangents.use_structured(large)
    with stage_tangent.forced(lv, "dense"):
        assert not stage_tangents.use_structured(large)
        # only the stage threshold changes
        assert dataclasses.replace(lv.engine.size_policy(), stage_unknowns=before.stage_unknowns) == before
    assert lv.engine.size_policy() is before
    with pytest.raises(RuntimeError), stage_tangent.forced(lv, "dense"):
        raise RuntimeError("a failed run")
    assert lv.engine.size_policy() is before
    with pytest.raises(ValueError, match="variant must be one of structured, dense"):
        with stage_tangent.forced(lv, "banded"):
            pass


def test_only_knows_the_new_sections(capsys):
    for name in ("out-cost", "stage-tangent"):
        args = _arguments(["--only", name])
        assert sections.named(args, name)
        assert [n for n in sections.NAMED if sections.named(args, n)] == [name]
        # --only also selects the pairs whose example or scheme contains its text: none here
        assert not any(name in e for e in lv.examples.names()) and not any(name in s for s in lv.schemes.names())
    assert sections.named(_arguments([]), "out-cost") and not sections.named(_arguments(["--yardsticks"]), "out-cost")
    with pytest.raises(ValueError, match="name must be one of"):
        sections.named(_arguments([]), "out_cost")
    with pytest.raises(SystemExit):
        _arguments(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "out-cost" in text and "stage-tangent" in text


def test_comparison_tolerates_rows_missing_on_either_side(capsys):
    row = stage_tangent.summarize(300, {"structured": [1.0], "dense": [2.0]})
    now = {"stage_tangent": {"heavy-top|s=2": row}, "pairs": {"heavy-top|VI-S": {"steps_per_s": 900.0}}}
    base = {"machine": {"date": "then"}, "pairs": {"heavy-top|VI-S": {"steps_per_s": 1000.0}}}
    compare(now, base)  # the baseline has no stage-tangent rows
    compare(base, {"machine": {}, **now})  # this run has none
    parts = capsys.readouterr().out.split("== against the baseline")
    assert len(parts) == 3
    for part in parts[1:]:
        table = part.split("== targets")[0]
        assert "pair:heavy-top|VI-S" in table and "stage_tangent:" not in table
