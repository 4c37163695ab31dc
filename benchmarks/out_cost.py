"""What ``--out`` costs (``--only out-cost``): ``livens run three-bar-swing --scheme vi-lagrange`` with
``--out DIR`` (the run streamed to netCDF, the CSV and the overview figure) against the same run
without it, each a whole CLI process of its own (import, compile, run, files).

CPU time is the process's user and system time (``resource.getrusage(RUSAGE_CHILDREN)`` before and
after it, so the compiler processes it waits for count too), wall time its lifetime. An untimed
pair first fills the compilation caches both then read (a native ``-O2`` library the first process
leaves unfinished is compiled by the next); then ``pairs`` pairs, in turns
(without first, then with first, ...), so that a change of the machine's load falls on both; the
ratios (with over without) are taken per pair and their median reported. The target
(:data:`benchmarks.targets.TARGETS`) is judged on the CLI's default run (SLO09's h = 5e-4 to
t = 1, 2,000 steps), which ``python -m benchmarks`` times; a shorter run (``--t-end``) is reported
but not judged.

``python -m benchmarks.out_cost [--t-end 0.1] [--pairs 3]`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.measure import _load_average
from benchmarks.swing import SWING

SCHEME = "vi-lagrange"
PAIRS = 3
QUICK_PAIRS = 1


def command(out_dir: str | None, t_end: float | None) -> list[str]:
    """The ``livens run`` command line of one process: the installed ``livens`` script beside this
    Python, or the same entry point (``livens.cli.main``) through ``python -c``."""
    argv = ["run", SWING, "--scheme", SCHEME, "--quiet"]
    if t_end is not None:
        argv += ["--t-end", repr(float(t_end))]
    if out_dir is not None:
        argv += ["--out", out_dir]
    script = Path(sys.executable).with_name("livens")
    if script.exists():
        return [str(script), *argv]
    return [sys.executable, "-c", "import sys; from livens.cli import main; sys.exit(main(sys.argv[1:]))", *argv]


def timed_process(cmd: list[str], cwd: str) -> dict:
    """CPU time (user + system, the process and the children it waited for) and wall time of one
    process; a failed one raises with the end of its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd[-8:])} exited with {res.returncode}: {res.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def summarize(pairs: list[dict]) -> dict:
    """The medians over ``pairs`` (each ``{"with": {"cpu_s", "wall_s"}, "without": {...}}``): of each
    run's times, and of the per-pair ratios with over without."""
    if not pairs:
        raise ValueError("summarize needs at least one measured pair; got none.")
    out: dict = {}
    for what in ("cpu", "wall"):
        for run in ("with", "without"):
            out[f"{run}_{what}_s"] = round(statistics.median(p[run][f"{what}_s"] for p in pairs), 3)
        ratios = [p["with"][f"{what}_s"] / p["without"][f"{what}_s"] for p in pairs]
        out[f"{what}_ratio"] = round(statistics.median(ratios), 3)
    return out


def measure(pairs: int = PAIRS, t_end: float | None = None) -> dict:
    """The section's figures (module docstring): the pairs' times, their medians and ratios, and
    which run was timed (``default_run``: the CLI's default, the one the target is judged on)."""
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1; got {pairs}.")
    with tempfile.TemporaryDirectory(prefix="livens-bench-out-") as tmp:
        out_dir = os.path.join(tmp, "out")
        for warm in (None, out_dir):  # untimed: the compilation caches (XLA's, the native -O2 kernels) filled
            timed_process(command(warm, t_end), tmp)
        shutil.rmtree(out_dir)
        measured = []
        for k in range(pairs):
            pair = {}
            for run in ("without", "with") if k % 2 == 0 else ("with", "without"):
                pair[run] = timed_process(command(out_dir if run == "with" else None, t_end), tmp)
                if run == "with":
                    written = sorted(os.listdir(out_dir))
                    if not any(f.endswith(".nc") for f in written):
                        raise RuntimeError(f"--out {out_dir} wrote no netCDF file: {written}")
                    shutil.rmtree(out_dir)
            measured.append(pair)
    row = {
        "example": SWING,
        "scheme": SCHEME,
        "t_end": t_end,
        "default_run": t_end is None,
        "pairs": measured,
        "written": written,
    }
    row.update(summarize(measured))
    return row


def print_rows(r: dict) -> None:
    if "failed" in r:
        print(f"  failed: {r['failed']}", flush=True)
        return
    run = (
        "the CLI's default run"
        if r["default_run"]
        else f"--t-end {r['t_end']:g} (the target is judged on the default run)"
    )
    print(
        f"  {r['example']} {r['scheme']}, {run}: with --out {r['with_cpu_s']:.1f} s CPU, {r['with_wall_s']:.1f} s wall; "
        f"without {r['without_cpu_s']:.1f} s CPU, {r['without_wall_s']:.1f} s wall"
    )
    print(
        f"  with / without, median of {len(r['pairs'])} pairs: CPU {r['cpu_ratio']:.2f}x, wall {r['wall_ratio']:.2f}x "
        f"(written: {', '.join(r['written'])})",
        flush=True,
    )


def flatten(results: dict) -> dict:
    """The comparable figures of the section (``benchmarks.targets._flatten``); the targets' ratios
    from the CLI's default run only."""
    r = results.get("out_cost", {})
    if "cpu_ratio" not in r:
        return {}
    flat = {"out_cost:with_cpu_s": (r["with_cpu_s"], False), "out_cost:without_cpu_s": (r["without_cpu_s"], False)}
    if r.get("default_run"):
        flat["out_cost_cpu_ratio"] = (r["cpu_ratio"], False)
        flat["out_cost_wall_ratio"] = (r["wall_ratio"], False)
    return flat


def section(lv, quick: bool, results: dict, t_end: float | None = None) -> None:
    """The section of ``python -m benchmarks`` (``--only out-cost``): the CLI's default run, median of
    :data:`PAIRS` pairs (:data:`QUICK_PAIRS` with ``quick``), or a run to ``t_end``."""
    pairs = QUICK_PAIRS if quick else PAIRS
    run = "the CLI's default run" if t_end is None else f"--t-end {t_end:g}"
    print(
        f"\n== --out's cost: livens run {SWING} --scheme {SCHEME} ({run}) with --out DIR / without, CPU and "
        f"wall time of the whole process, median of {pairs} pairs in turns (load average {_load_average()})"
    )
    lv.engine.wait()  # no background compile of an earlier section counts in the children's CPU time
    try:
        results["out_cost"] = r = measure(pairs, t_end)
    except RuntimeError as exc:
        results["out_cost"] = r = {"failed": str(exc)[:300]}
    print_rows(r)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.out_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--t-end", type=float, default=None, help="end time of the runs (default: the CLI's, t = 1)")
    ap.add_argument("--pairs", type=int, default=PAIRS)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)
    print(f"--out's cost, median of {args.pairs} pairs (load {_load_average()})")
    r = measure(args.pairs, args.t_end)
    print_rows(r)
    print(f"load average at the end: {_load_average()}")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
