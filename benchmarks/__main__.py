"""``python -m benchmarks``: speed and scale of livens, compared with a committed baseline.

Usage::

    python -m benchmarks                     # everything (more than 15 minutes on 2 cores)
    python -m benchmarks --quick             # the targets only (a few minutes)
    python -m benchmarks --update-baseline   # write benchmarks/baseline.json from this run
    python -m benchmarks --only heavy-top    # pairs whose example or scheme matches
    python -m benchmarks --only three-bar-swing   # the swing's section alone (SLO09 §4.2, 10 and 40 elements)
    python -m benchmarks --yardsticks        # livens beside the compiled VI-S and Exudyn only
    python -m benchmarks --only redundancy   # the four-bar with and without its dependent equations
    python -m benchmarks --only chain-3d     # 3D rods on spherical joints: native vs xla beyond the size limit
    python -m benchmarks --only work-precision   # error against CPU time, heavy top and double four-bar
    python -m benchmarks --only out-cost     # livens run three-bar-swing with --out DIR / without (whole processes)
    python -m benchmarks --only stage-tangent    # ggl-galerkin's structured stage tangent / the dense AD one

Sections: the (example, scheme) pairs, the yardsticks, an ensemble, the pendulum chain, the cost
of lv.flow's derivatives (:mod:`benchmarks.gradients`), the cost of redundant constraint equations
(:mod:`benchmarks.redundancy`), work against precision of the higher-order schemes on the heavy top
(:mod:`benchmarks.work_precision`; the double four-bar too with ``--only work-precision``), the
three-bar swing, the targets and the comparison with the baseline.

Every figure is measured after compilation (compile times are reported separately) as the best of
a few repeats (the yardsticks and the chain: the median of three), in wall-clock time, with the
load average printed next to it: on a shared machine the figures vary by tens of percent, so the
targets are judged by ratios measured side by side in the same run (:mod:`benchmarks.yardsticks`:
livens beside a compiled VI-S written by hand in Numba and beside Exudyn, where they are installed,
the ``bench`` extra). Compile times are cold: the run uses a fresh persistent
compilation cache (``LIVENS_COMPILATION_CACHE`` set to a temporary directory before livens is
imported), and a second process then shows what the cache saves (``--warm-cache`` uses the
user's cache instead).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import chain_3d, out_cost, sections, stage_tangent, swing
from benchmarks.measure import HERE, _load_average
from benchmarks.swing import SWING
from benchmarks.targets import BASELINE, TARGET_PAIRS, _compile_context, _flatten, compare

# the report's helpers, imported from here by tests/test_benchmark_report.py
__all__ = ["main", "_compile_context", "_flatten"]


def _arguments(argv):
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the targets only, shorter runs")
    ap.add_argument("--update-baseline", action="store_true", help=f"write {BASELINE.name} from this run")
    ap.add_argument(
        "--only",
        default=None,
        help="only pairs whose example or scheme contains this text, or one section: " + ", ".join(sections.NAMED),
    )
    ap.add_argument(
        "--warm-cache", action="store_true", help="use the user's compilation cache (compile times not cold)"
    )
    ap.add_argument(
        "--yardsticks",
        action="store_true",
        help="only livens beside the compiled VI-S, Exudyn and NumPy (the ratio targets, about a minute)",
    )
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument(
        "--chain",
        action="store_true",
        help="only the pendulum chain's cost per step for N = 16, 32, 64, 128 (a few minutes)",
    )
    args = ap.parse_args(argv)
    if args.chain and (args.update_baseline or args.yardsticks or args.quick):
        ap.error("--chain runs the chain section alone: drop --quick, --yardsticks and --update-baseline")
    if args.yardsticks and args.update_baseline:
        ap.error("--update-baseline needs a run of every section: drop --yardsticks")

    return args


def _machine(quick: bool) -> dict:
    """The run's machine, versions and options, printed and stored with its figures."""
    import jax

    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "load_average": _load_average(),
        "quick": quick,
        "fuse_dots": os.environ.get("LIVENS_FUSE_DOTS", "1"),
    }


def main(argv=None) -> int:
    args = _arguments(argv)
    tmp = None
    if not args.warm_cache:
        tmp = tempfile.TemporaryDirectory(prefix="livens-bench-cache-")
        os.environ["LIVENS_COMPILATION_CACHE"] = tmp.name
    sys.path.insert(0, str(HERE.parent))
    import jax

    import livens as lv

    seconds = 0.4 if args.quick else 0.5
    repeats = 3 if args.quick else 2
    results = {"machine": _machine(args.quick)}
    print(
        f"livens benchmarks: {results['machine']['platform']}, {os.cpu_count()} CPUs, jax {jax.__version__}, "
        f"load average {results['machine']['load_average']}"
    )

    if args.chain:
        return sections._chain_only(lv, results, args.json)

    examples, schemes = lv.examples.names(), lv.schemes.names()
    # the swing has its own section (two sizes, a profile); its compile time and step cost would
    # dominate the table of pairs
    pairs = TARGET_PAIRS if args.quick else [(e, s) for e in examples for s in schemes if e not in (SWING, "chain-3d")]
    pairs = [(e, s) for e, s in pairs if e in examples and s in schemes]
    if args.yardsticks:
        pairs = []
    if args.only:
        pairs = [(e, s) for e, s in pairs if args.only in e or args.only in s]
    sections.pairs(lv, pairs, seconds, repeats, results)
    if args.only is None:
        sections.yardsticks(lv, args.quick, results)
    if args.only is None and not args.yardsticks:
        sections.ensemble(lv, args.quick, results)
        sections.chain(lv, args.quick, results)
        if tmp is not None:
            sections.compile_cache(tmp.name, results)
    if args.only is None and not args.yardsticks:
        sections.gradients(lv, args.quick, results)
    if not args.yardsticks and (args.only is None or args.only in "four-bar-3d redundancy"):
        sections.redundancy(lv, args.quick, results)
    if not args.yardsticks and (args.only is None or args.only in "chain-3d"):
        chain_3d.section(lv, args.quick, results)
    if not args.yardsticks and not args.quick and (args.only is None or args.only in "work-precision"):
        sections.work_precision(lv, args.only, results)
    if not args.yardsticks and SWING in examples and (args.only is None or args.only in SWING):
        swing.section(lv, args.quick, results)
    if sections.named(args, "out-cost") and SWING in examples:
        out_cost.section(lv, args.quick, results)
    if sections.named(args, "stage-tangent") and (not args.quick or args.only):
        stage_tangent.section(lv, args.quick, results)

    results["machine"]["load_average_end"] = _load_average()
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else None
    compare(results, baseline)
    print(f"\nload average at the end: {results['machine']['load_average_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.update_baseline:
        BASELINE.write_text(json.dumps(results, indent=1) + "\n")
        print(f"baseline written: {BASELINE}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
