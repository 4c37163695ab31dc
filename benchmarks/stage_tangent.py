"""ggl-galerkin's structured stage tangent against the dense AD tangent (``--only stage-tangent``).

``ggl-galerkin`` assembles its Newton tangent from the Jacobians of the per-point terms
(:mod:`livens.schemes.stage_tangents`) from ``SizePolicy.stage_unknowns`` Newton unknowns on, and
takes the dense AD Jacobian of its residual below. This section runs the same steps both ways on
the heavy top (120 unknowns) and Andrews' squeezer (76 unknowns) for s = 2 and 3 with
``backend="xla"``: the policy is replaced while a variant's steps are traced (:func:`forced`:
``stage_unknowns`` = 0 for the structured tangent, larger than any system for the dense one), each
variant on a problem object of its own (a run's compiled loop is cached per system, so each
variant keeps the tangent it was traced with; s is a runtime argument of that loop, so one compile
per variant serves s = 2 and 3, and the compile times of s = 3 are the set-up's), warm (XLA's
optimized executable in use, compiled during two untimed runs,
:func:`benchmarks.chain_3d._optimized_xla_at_once`), then timed in turns, median of ``repeats``:
steps/s of the stepping alone (``meta["stepping_time"]``).

``python -m benchmarks.stage_tangent [--steps-scale 0.5] [--repeats 3]`` runs it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys

from benchmarks.measure import _load_average

SCHEME = "ggl-galerkin"
SYSTEMS = (("heavy-top", 500, 200), ("andrews-squeezer", 2000, 1000))
"""(example, steps, steps with --quick) at the example's h."""
STAGES = (2, 3)
VARIANTS = ("structured", "dense")
DENSE = 10**9
"""``stage_unknowns`` for the dense AD tangent: no system has that many Newton unknowns."""


@contextlib.contextmanager
def forced(lv, variant: str):
    """``ggl-galerkin``'s tangent forced to ``variant`` ("structured" or "dense") while the block runs:
    the :class:`livens.engine.SizePolicy` in force (``livens.engine.size_policy()``) replaced by one
    with ``stage_unknowns`` = 0 or :data:`DENSE`, and restored after."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}.")
    with lv.engine.sizes_replaced(stage_unknowns=0 if variant == "structured" else DENSE):
        yield


def summarize(steps: int, stepping: dict) -> dict:
    """The row of one (example, s) from the stepping times of each variant (``{variant: [seconds]}``):
    steps/s of the median time per variant, and structured over dense."""
    row: dict = {"steps": steps}
    for variant, seconds in stepping.items():
        row[f"{variant}_steps_per_s"] = round(steps / statistics.median(seconds), 1)
    if all(f"{v}_steps_per_s" in row for v in VARIANTS):
        row["structured_over_dense"] = round(row["structured_steps_per_s"] / row["dense_steps_per_s"], 2)
    return row


def measure_one(lv, problems: dict, stages: int, steps: int, repeats: int = 3) -> dict:
    """Steps/s of ``ggl-galerkin`` with ``stages`` with each tangent (module docstring); ``problems``:
    {variant: the example loaded for it}."""
    from benchmarks.chain_3d import _optimized_xla_at_once

    h = problems["structured"].h
    kw = dict(h=h, stages=stages, backend="xla", progress=False)
    first, its = {}, {}
    with _optimized_xla_at_once():
        for v, problem in problems.items():
            with forced(lv, v):
                # untimed: the first run compiles the loop (XLA's quick tier first, for a large
                # one), the second its optimized tier
                sol = lv.simulate(problem, SCHEME, t_end=steps * h, **kw)
                first[v] = round(float(sol.meta["compile_time"]), 2)
                lv.simulate(problem, SCHEME, t_end=steps * h, **kw)
        lv.engine.optimize()  # the optimized programs in use (XLA level 0 compiled again)
        stepping: dict = {v: [] for v in VARIANTS}
        for _ in range(repeats):  # in turns: a change of the machine's load falls on both
            for v, problem in problems.items():
                with forced(lv, v):
                    sol = lv.simulate(problem, SCHEME, t_end=steps * h, **kw)
                stepping[v].append(float(sol.meta["stepping_time"]))
                its[v] = round(float(sol.newton_iterations.mean()), 3)
    row = summarize(steps, stepping)
    row.update(compile_s=first, newton_iterations=its, backend=sol.meta["backend"])
    return row


def measure(lv, quick: bool = False, repeats: int = 3, scale: float = 1.0) -> dict:
    """{"<example>|s=<s>": row} for each system of :data:`SYSTEMS` and s of :data:`STAGES`."""
    out = {}
    for example, steps, quick_steps in SYSTEMS:
        n = max(10, int((quick_steps if quick else steps) * scale))
        problems = {v: lv.examples.load(example) for v in VARIANTS}  # a compiled loop of its own each
        for s in STAGES:
            key = f"{example}|s={s}"
            try:
                out[key] = measure_one(lv, problems, s, n, repeats)
            except Exception as exc:  # noqa: BLE001 - reported in the table, the other rows go on
                out[key] = {"failed": f"{type(exc).__name__}: {str(exc)[:160]}"}
            print_row(key, out[key])
    return out


def print_row(key: str, r: dict) -> None:
    if "failed" in r:
        print(f"  {key:<22} failed: {r['failed']}", flush=True)
        return
    print(
        f"  {key:<22} structured {r['structured_steps_per_s']:>9,.1f} steps/s, dense AD "
        f"{r['dense_steps_per_s']:>9,.1f} steps/s: structured/dense {r['structured_over_dense']:.2f}x "
        f"({r['steps']} steps, {r['newton_iterations']['structured']:.2f} / "
        f"{r['newton_iterations']['dense']:.2f} Newton it., compile {r['compile_s']['structured']} / "
        f"{r['compile_s']['dense']} s, {r['backend']})",
        flush=True,
    )


def flatten(results: dict) -> dict:
    """The comparable figures of the section (``benchmarks.targets._flatten``)."""
    flat = {}
    for key, r in results.get("stage_tangent", {}).items():
        for v in VARIANTS:
            if f"{v}_steps_per_s" in r:
                flat[f"stage_tangent:{key}:{v}"] = (r[f"{v}_steps_per_s"], True)
        if "structured_over_dense" in r:
            flat[f"stage_tangent:{key}:ratio"] = (r["structured_over_dense"], True)
    return flat


def section(lv, quick: bool, results: dict) -> None:
    """The section of ``python -m benchmarks`` (``--only stage-tangent``)."""
    print(
        f"\n== {SCHEME}: the structured stage tangent / the dense AD tangent, steps/s, s = {STAGES}, XLA, warm, "
        f"median of 3 in turns (load average {_load_average()})"
    )
    results["stage_tangent"] = measure(lv, quick)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.stage_tangent", description=__doc__.split("\n")[0])
    ap.add_argument("--steps-scale", type=float, default=1.0, help="the steps of SYSTEMS times this")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import livens as lv

    print(f"{SCHEME}, structured vs dense AD tangent, median of {args.repeats} (load {_load_average()})")
    measure(lv, repeats=args.repeats, scale=args.steps_scale)
    print(f"load average at the end: {_load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
