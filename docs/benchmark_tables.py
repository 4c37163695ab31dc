"""The benchmarks' page (``docs/benchmarks.md``) from ``benchmarks/baseline.json``, the committed output of
``python -m benchmarks --update-baseline``: the machine and date are in the data, the figures in the tables."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    data = json.loads((HERE.parent / "benchmarks" / "baseline.json").read_text())
    m = data["machine"]
    lines = [
        "# Benchmarks",
        "",
        "`python -m benchmarks` measures steps per second per example and scheme, compile times, ensembles, "
        "the pendulum chain's scaling, the three-bar swing, and livens beside a compiled VI-S (Numba) and "
        "Exudyn; `--update-baseline` writes `benchmarks/baseline.json`, from which this page is made.",
        "",
        f"Machine of the committed baseline: {m.get('platform')}, {m.get('cpu_count')} CPUs, Python "
        f"{m.get('python')}, jax {m.get('jax')}; run of {m.get('date')} (load average {m.get('load_average')} "
        f"at the start, {m.get('load_average_end')} at the end).",
        "",
        "## Steps per second at the papers' step sizes",
        "",
        "| example | scheme | backend | compile [s] | steps/s | Newton iterations |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in sorted(data.get("pairs", {}).items()):
        example, scheme = key.split("|")
        if "steps_per_s" in r:
            lines.append(
                f"| {example} | {scheme} | {r.get('backend', '')} | {r.get('compile_s', '')} | "
                f"{r['steps_per_s']:,.0f} | {r.get('newton_iterations', '')} |"
            )
    lines += [
        "",
        "## The three-bar swing",
        "",
        "| elements | scheme | run | steps/s | Newton iterations |",
        "|---|---|---|---|---|",
    ]
    for r in data.get("swing", {}).values():
        if "steps_per_s" in r:
            lines.append(
                f"| {r['elements']} | {r['scheme']} | {r.get('run', '')} | {r['steps_per_s']:,.1f} | "
                f"{r['newton_iterations']} |"
            )
    for key, r in data.get("swing", {}).items():
        if key.startswith("fresh|") and "wall_s" in r:
            lines.append(
                f"\nThe default run of {key[6:]} in a fresh process (import, compilation, run): {r['wall_s']} s."
            )
    chain = data.get("chain", {}).get("sizes", {})
    if chain:
        lines += [
            "",
            "## The pendulum chain (VI-S, h = 0.01)",
            "",
            "| N | d | us per step | Newton iterations |",
            "|---|---|---|---|",
        ]
        for n, r in chain.items():
            if "us_per_step" in r:
                lines.append(f"| {n} | {r['d']} | {r['us_per_step']:,.1f} | {r['newton_iterations']} |")
    ens = data.get("ensemble", {})
    if "ratio" in ens:
        lines += [
            "",
            f"## Ensembles\n\n{ens['members']} heavy tops in one `simulate_ensemble` call: "
            f"{ens['ensemble_trajectory_steps_per_s']:,.0f} trajectory-steps/s ({ens['backend']}, lanes "
            f"{ens.get('lanes', 0)}) against one run's {ens['single_steps_per_s']:,.0f} steps/s: "
            f"{ens['ratio']}x.",
        ]
    (HERE / "benchmarks.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
