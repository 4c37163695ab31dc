"""The benchmarks' page (``docs/benchmarks.md``) from ``benchmarks/baseline.json``, the committed output of
``python -m benchmarks --update-baseline``: the machine and date are in the data, the figures in the tables
and in two plots (``docs/benchmarks/``): steps per second of livens beside its yardsticks, and the pendulum
chain's cost per step against its size."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

NEWTON_ITERATIONS = (
    "The Newton iterations are the mean per step. A step whose first guess already meets the tolerance "
    'takes none: with livens\' default first guess, `"extrapolated"` (`livens.guess`: the polynomial '
    "through the last steps' solutions), many steps of a smooth motion do, so the mean can be below 1 "
    '(with KBS23b\'s `"advanced"` guess every step takes at least one iteration).'
)

YARDSTICK_TOL = 1e-9
"""The Newton tolerance (||R||_inf) of livens and of the compiled VI-S in ``benchmarks.yardsticks``."""

YARDSTICK_TEXT = (
    "VI-S at the step size h of each panel, Newton tolerance {tol} on ||R||_inf, the same number of "
    "steps from the same initial state, in one process and in turns; each bar is the median of three "
    "rounds after compilation, each code's call timed right after an untimed call of its own (memory "
    "left idle while the other codes run can be slow to touch again on a virtual machine). Accuracy "
    "(under each name): livens and the compiled VI-S (Numba) with livens' "
    "first guess solve the same equations to the same tolerance, and their configurations agree to "
    "the max |Δq| shown; "
    "the pure-NumPy VI-S too, over its shorter run; Exudyn integrates its own model with its "
    "generalized-α solver (relative tolerance 1e-8, absolute 1e-10), a different method, and its "
    "positions differ from livens' by the max |Δx| shown over the first second."
)


def main() -> int:
    data = json.loads((HERE.parent / "benchmarks" / "baseline.json").read_text())
    m = data["machine"]
    lines = [
        "# Benchmarks",
        "",
        "`python -m benchmarks` measures steps per second per example and scheme, compile times, ensembles, "
        "the pendulum chain's scaling, the three-bar swing, the cost of `lv.flow`'s derivatives, what `--out` "
        "costs a CLI run, ggl-galerkin's structured stage tangent against the dense one, and livens "
        "beside a compiled VI-S (Numba) and Exudyn; `--update-baseline` writes `benchmarks/baseline.json`, "
        "from which this page is made.",
        "",
        f"Machine of the committed baseline: {m.get('platform')}, {m.get('cpu_count')} CPUs, Python "
        f"{m.get('python')}, jax {m.get('jax')}; run of {m.get('date')} (load average {m.get('load_average')} "
        f"at the start, {m.get('load_average_end')} at the end).",
        "",
        "## Steps per second at the papers' step sizes",
        "",
        NEWTON_ITERATIONS,
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
    grads = {k: r for k, r in data.get("gradients", {}).items() if "grad_us" in r}
    if grads:
        lines += [
            "",
            "## Derivatives through a run (`lv.flow`)",
            "",
            "Microseconds per step of `lv.simulate`, of the forward run of `lv.flow` (`jax.jit` of a loss), "
            "of its gradient (`jax.grad`) and of a `jax.jvp`, at tolerance 1e-12; the first calls with a "
            "fresh compilation cache.",
            "",
            "| example | scheme | steps | simulate | flow | grad | jvp | grad / flow | first call flow [s] | "
            "first call grad [s] |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for key, r in grads.items():
            example, scheme = key.split("|")
            lines.append(
                f"| {example} | {scheme} | {r['steps']:,} | {r['simulate_us']} | {r['forward_us']} | "
                f"{r['grad_us']} | {r['jvp_us']} | {r['grad_over_forward']} | {r['first_forward_s']} | "
                f"{r['first_grad_s']} |"
            )
    lines += _out_cost_and_stage_tangent(data)
    lines += _plots(data)
    (HERE / "benchmarks.md").write_text("\n".join(lines) + "\n")
    return 0


OUT_COST_TEXT = (
    "`python -m benchmarks --only out-cost` runs `livens run three-bar-swing --scheme vi-lagrange` with "
    "`--out DIR` and without it, each as a whole process, in alternating pairs, and reports the CPU time "
    "(`getrusage` of the finished child) and the wall time of each; the target is the median of the "
    "pairs' ratios, with over without, for the command's default run."
)

STAGE_TANGENT_TEXT = (
    "`python -m benchmarks --only stage-tangent` runs ggl-galerkin (s = 2 and 3) on the heavy top and "
    "Andrews' squeezer with the XLA backend, once with its Newton tangent assembled from the per-point "
    "Jacobians and once with the dense AD Jacobian (`SizePolicy.stage_unknowns` replaced while each is "
    "traced), and reports the steps/s of each with XLA's optimized executable in use, the median of "
    "three runs in turns."
)


def _out_cost_and_stage_tangent(data: dict) -> list[str]:
    """The two sections' explanations, and their figures where the baseline has them."""
    lines = ["", "## What `--out` costs a run", "", OUT_COST_TEXT]
    out = data.get("out_cost", {})
    if "cpu_ratio" in out:
        lines.append(
            f"\nWith `--out` / without, median of {len(out['pairs'])} pairs: CPU time {out['cpu_ratio']}x, "
            f"wall time {out['wall_ratio']}x."
        )
    lines += ["", "## ggl-galerkin: the structured stage tangent against the dense one", "", STAGE_TANGENT_TEXT]
    rows = {k: r for k, r in data.get("stage_tangent", {}).items() if "structured_over_dense" in r}
    if rows:
        lines += ["", "| example | s | steps | structured steps/s | dense steps/s | structured / dense |"]
        lines.append("|---|---|---|---|---|---|")
        for key, r in rows.items():
            example, s = key.split("|s=")
            lines.append(
                f"| {example} | {s} | {r['steps']:,} | {r['structured_steps_per_s']:,.1f} | "
                f"{r['dense_steps_per_s']:,.1f} | {r['structured_over_dense']} |"
            )
    return lines


def _plots(data: dict) -> list[str]:
    """The yardsticks' bar chart and the chain's log-log plot as PNG; the page's lines that show them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = HERE / "benchmarks"
    out.mkdir(exist_ok=True)
    lines = []
    yard = {ex: y for ex, y in data.get("yardsticks", {}).items() if "rows" in y}
    if yard:
        fig = yardstick_figure(yard)
        fig.savefig(out / "yardsticks.png", dpi=100)
        plt.close(fig)
        lines += [
            "",
            "## livens beside its yardsticks",
            "",
            YARDSTICK_TEXT.format(tol=_tol(YARDSTICK_TOL)),
            "",
            "![Steps per second of livens, a compiled VI-S (Numba) and Exudyn's generalized-alpha]"
            "(benchmarks/yardsticks.png)",
        ]
    chain = {int(n): r for n, r in data.get("chain", {}).get("sizes", {}).items() if "us_per_step" in r}
    if len(chain) > 1:
        n = sorted(chain)
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        ax.loglog(n, [chain[k]["us_per_step"] for k in n], "o-", label="VI-S per step")
        ax.loglog(n, [chain[n[0]]["us_per_step"] * k / n[0] for k in n], "k--", lw=0.8, label="linear in N")
        ax.set_xlabel("pendulums N")
        ax.set_ylabel("us per step")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "chain.png", dpi=100)
        plt.close(fig)
        lines += ["", "![The pendulum chain's cost per step against N](benchmarks/chain.png)"]
    return lines


def _accuracy(name: str, notes: dict) -> str:
    """The line under a yardstick's name: its distance from livens' trajectory, where measured."""
    guess = notes.get("livens_guess", "extrapolated")
    if name == f"numba ({guess})" and "max_abs_q_difference_numba" in notes:
        return f"max |Δq| {notes['max_abs_q_difference_numba']:.0e}"
    if name == "exudyn" and "max_abs_position_difference_exudyn" in notes:
        return f"max |Δx| {notes['max_abs_position_difference_exudyn']:.0e} (1 s)"
    if name.startswith("numpy") and "max_abs_q_difference_numpy" in notes:
        return f"max |Δq| {notes['max_abs_q_difference_numpy']:.0e}"
    if name.startswith("numba"):
        return "another first guess"
    return {"livens": "the reference", "livens (xla)": "XLA backend"}.get(name, "")


def _tol(x: float) -> str:
    """1e-09 -> 1e-9."""
    return f"{x:.0e}".replace("e-0", "e-")


def yardstick_figure(yard: dict):
    """The yardsticks' bar chart: one panel per system (steps per second, livens orange), its title
    giving the scheme, h, the steps and the Newton tolerance, each bar's name with its accuracy
    against livens' trajectory; x ticks in thousands of steps per second, few enough not to touch."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig = Figure(figsize=(6.2 * len(yard), 3.6))
    axes = fig.subplots(1, len(yard), squeeze=False)[0]
    for ax, (example, y) in zip(axes, yard.items()):
        rows, notes = y["rows"], y.get("notes", {})
        names = [n for n, r in rows.items() if "steps_per_s" in r]
        rates = [rows[n]["steps_per_s"] for n in names]
        labels = [f"{n}\n{_accuracy(n, notes)}" for n in names]
        ax.barh(labels, rates, color=["tab:orange" if n.startswith("livens") else "tab:blue" for n in names])
        for k, rate in enumerate(rates):
            ax.text(rate, k, f" {rate / 1e3:,.0f}k", va="center", fontsize=8)
        ax.set_xlim(0, 1.3 * max(rates))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e3:,.0f}k"))
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("steps/s")
        ax.set_title(f"{example}: VI-S, h = {y['h']:g}, {y['steps']:,} steps, tol {_tol(YARDSTICK_TOL)}", fontsize=10)
    fig.tight_layout(w_pad=2.0)
    return fig


if __name__ == "__main__":
    sys.exit(main())
