"""The sections of ``python -m benchmarks`` as :func:`benchmarks.__main__.main` runs them, each
printing its table and storing its figures in ``results``: the (example, scheme) pairs, the
yardsticks, the ensemble with the pendulum chain and the compilation cache, lv.flow's derivatives,
redundant constraints, work against precision, and the chain section alone (``--chain``)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.measure import (
    CHAIN_STEPS,
    _load_average,
    measure_chain,
    measure_compile_cache,
    measure_ensemble,
    measure_pair,
)
from benchmarks.targets import TARGET_PAIRS

NAMED = ("redundancy", "chain-3d", "work-precision", "three-bar-swing", "out-cost", "stage-tangent")
"""The sections ``--only`` names (beside the pairs, whose example or scheme it matches)."""


def named(args, name: str) -> bool:
    """Whether a run with ``args`` (``--only``, ``--yardsticks``) runs the section ``name``: every
    section without ``--only`` (unless ``--yardsticks``), else the one whose name contains its text."""
    if name not in NAMED:
        raise ValueError(f"name must be one of {', '.join(NAMED)}; got {name!r}.")
    return not args.yardsticks and (args.only is None or args.only in name)


def _chain_only(lv, results, json_path) -> int:
    """``--chain``: the pendulum chain section alone (N = 16, 32, 64, 128)."""
    sizes = [16, 32, 64, 128]
    print(
        f"\n== pendulum-chain (VI-S, h = 0.01): cost per step for N = {sizes} (the first {CHAIN_STEPS} steps, "
        f"median of 3)"
    )
    chain = measure_chain(lv, sizes, CHAIN_STEPS, 3)
    results["chain"] = chain
    for n, r in chain["sizes"].items():
        print(f"  N = {n:>4}: {r}")
    if "ratio_128_16" in chain:
        print(
            f"  N = 128 / N = 16: {chain['ratio_128_16']}x per step, {chain['ratio_per_iteration_128_16']}x per "
            f"Newton iteration (target: at most 16x per step)"
        )
    results["machine"]["load_average_end"] = _load_average()
    print(f"load average at the end: {results['machine']['load_average_end']}")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))
    return 0


def pairs(lv, pairs, seconds: float, repeats: int, results: dict) -> None:
    """Steps/s and compile time of each (example, scheme) pair at the papers' h."""
    results["pairs"] = {}
    if pairs:
        print(f"\n== steps/s and compile time, {len(pairs)} (example, scheme) pairs at the papers' h")
        print(f"  {'example':<26} {'scheme':<18} {'compile s':>9} {'steps/s':>11} {'Newton it.':>10} {'backend':>8}")
    for e, s in pairs:
        r = measure_pair(lv, e, s, seconds, repeats)
        results["pairs"][f"{e}|{s}"] = r
        if "skipped" in r:
            print(f"  {e:<26} {s:<18} skipped: {r['skipped'][:70]}")
            continue
        rate = f"{r['steps_per_s']:>11,.0f}" if "steps_per_s" in r else f"{'-':>11}"
        its = f"{r['newton_iterations']:>10.2f}" if "newton_iterations" in r else ""
        comp = f"{r['compile_s']:>9.2f}" if "compile_s" in r else f"{'-':>9}"
        print(
            f"  {e:<26} {s:<18} {comp} {rate} {its} {r.get('backend', '-'):>8}"
            + (f"  (-O0 first; -O2 in use after {r['optimized_s']:.2f} s)" if "optimized_s" in r else "")
            + (
                f"  (timed on runs of {r['steps']:,} steps: longer runs fail at step {r['failed_at_step']:,})"
                if "failed_at_step" in r and "steps_per_s" in r
                else (f"  {r['failed'][:60]}" if "failed" in r else "")
            ),
            flush=True,
        )


def yardsticks(lv, quick: bool, results: dict) -> None:
    """livens beside the compiled VI-S (Numba) and Exudyn (:mod:`benchmarks.yardsticks`)."""
    from benchmarks import yardsticks

    print(
        f"\n== yardsticks: livens beside the compiled VI-S (Numba) and Exudyn, same process, in turns, "
        f"median of 3 (load average {_load_average()})"
    )
    results["yardsticks"] = {}
    for example, h, steps, quick_steps in yardsticks.SYSTEMS:
        y = yardsticks.measure_system(lv, example, h, quick_steps if quick else steps)
        y["ratios"] = yardsticks.ratios(y)
        y["load_average"] = _load_average()
        results["yardsticks"][example] = y
        yardsticks.print_system(example, y)
        print(f"    (load average {y['load_average']})", flush=True)


def ensemble(lv, quick: bool, results: dict) -> None:
    """1000 heavy tops in one ``lv.simulate_ensemble`` call against one run."""
    members = 1000
    steps = 100 if quick else 200
    print(f"\n== ensemble: {members} heavy tops (VI-S), {steps} steps, one call of lv.simulate_ensemble")
    ens = measure_ensemble(lv, members, steps, 3)
    results["ensemble"] = ens
    if ens["backend"] != "native":
        how = "one vmapped XLA call per chunk"
    elif ens.get("lanes"):
        how = f"native lane kernels of {ens['lanes']} members, one thread per core"
    else:
        how = "each member through the native kernel, one thread per core"
    print(
        f"  {ens['ensemble_trajectory_steps_per_s']:,.0f} trajectory-steps/s ({how}) vs one run of 2,000 steps "
        f"{ens['single_steps_per_s']:,.0f} steps/s ({ens['single_backend']}): {ens['ratio']:.1f}x "
        f"(compile {ens['compile_s']:.1f} s)",
        flush=True,
    )


def chain(lv, quick: bool, results: dict) -> None:
    """The pendulum chain's cost per step for growing N, livens and the compiled VI-S (Numba)."""
    from benchmarks import yardsticks

    sizes = [16, 128] if quick else [16, 32, 64, 128]
    print(
        f"\n== pendulum-chain (VI-S, h = 0.01): cost per step for N = {sizes} (the first {CHAIN_STEPS} steps, "
        f"median of 3; load average {_load_average()})"
    )
    chain = measure_chain(lv, sizes, CHAIN_STEPS, 3)
    results["chain"] = chain
    for n, r in chain["sizes"].items():
        if "us_per_step" in r:
            print(
                f"  N = {n:>4} (d = {r['d']:>4}): {r['us_per_step']:>10,.1f} us/step, {r['newton_iterations']:.2f} "
                f"Newton it., {r['us_per_newton_iteration']:>10,.1f} us/iteration (first call {r['first_call_s']:.1f} s)"
            )
        else:
            print(f"  N = {n:>4}: {r}")
    if "ratio_128_16" in chain:
        print(
            f"  N = 128 / N = 16: {chain['ratio_128_16']}x per step, {chain['ratio_per_iteration_128_16']}x per "
            "Newton iteration (quadratic growth would be 64x)",
            flush=True,
        )
    chain["numba"] = yardsticks.measure_chain_numba(sizes, CHAIN_STEPS)
    if "missing" in chain["numba"]:
        print(f"  compiled VI-S (Numba): {chain['numba']['missing']}")
    for n, r in chain["numba"].items():
        if n != "missing":
            lv_r = chain["sizes"].get(n, {})
            rel = (
                f", livens/this {r['us_per_step'] / lv_r['us_per_step']:.2f}x in steps/s"
                if "us_per_step" in lv_r
                else ""
            )
            print(
                f"  compiled VI-S (Numba, band LU), N = {n:>4}: {r['us_per_step']:>10,.1f} us/step, "
                f"{r['newton_iterations']:.2f} Newton it., {r['us_per_newton_iteration']:>10,.1f} us/iteration{rel}"
            )
    nb = chain["numba"]
    if "16" in nb and "128" in nb:
        nb["ratio_128_16"] = round(nb["128"]["us_per_step"] / nb["16"]["us_per_step"], 1)
        print(f"  compiled VI-S, N = 128 / N = 16: {nb['ratio_128_16']}x per step", flush=True)


def compile_cache(cache_dir: str, results: dict) -> None:
    """The first calls of the target pairs in a second process with the same persistent cache."""
    cache_pairs = [list(p) for p in TARGET_PAIRS if f"{p[0]}|{p[1]}" in results["pairs"]]
    print("\n== persistent compilation cache: a second process, same cache")
    cc = measure_compile_cache(cache_dir, cache_pairs)
    results["compile_cache"] = cc
    for key, r in cc.items():
        if isinstance(r, dict) and "first_call_s" in r:
            cold = results["pairs"].get(key, {}).get("first_call_s")
            print(f"  {key:<32} first call {r['first_call_s']:.2f} s (cold, this process: {cold} s)")
    if "import_s" in cc:
        print(f"  import livens: {cc['import_s']:.2f} s")


def gradients(lv, quick: bool, results: dict) -> None:
    """The cost of lv.flow's forward run and derivatives (:mod:`benchmarks.gradients`)."""
    from benchmarks import gradients

    print(
        "\n== lv.flow: us/step of lv.simulate, of flow's forward run (jax.jit), its gradient (jax.grad) "
        f"and a jax.jvp, tol {gradients.TOL:g}, median of 3 (load average {_load_average()})"
    )
    results["gradients"] = {}
    for example, scheme, steps, quick_steps in gradients.SYSTEMS:
        key = f"{example}|{scheme}"
        try:
            r = gradients.measure(lv, example, scheme, quick_steps if quick else steps)
        except Exception as exc:  # noqa: BLE001 - reported in the table, the other sections go on
            r = {"failed": f"{type(exc).__name__}: {str(exc)[:160]}"}
            print(f"  {key:<20} failed: {r['failed']}")
        else:
            gradients.print_row(key, r)
        results["gradients"][key] = r


def redundancy(lv, quick: bool, results: dict) -> None:
    """The four-bar with and without its dependent equations (:mod:`benchmarks.redundancy`)."""
    from benchmarks import redundancy

    steps = 200 if quick else 1000
    print(
        f"\n== redundant constraints: {redundancy.EXAMPLE} with its dependent equations / without them, "
        f"{steps} steps, tol {redundancy.TOL:g}, median of 5 in turns (load average {_load_average()})"
    )
    results["redundancy"] = redundancy.measure(lv, steps)
    redundancy.print_rows(results["redundancy"])


def work_precision(lv, only: str | None, results: dict) -> None:
    """Error against CPU time of the higher-order schemes (:mod:`benchmarks.work_precision`)."""
    from benchmarks import work_precision

    names = ("heavy-top", "double-four-bar") if only else ("heavy-top",)
    print(
        f"\n== work against precision: CPU time at error {work_precision.TARGET:g} (vs SciPy DOP853), "
        f"h halved from 8 h_example, tol {work_precision.TOL:g} (load average {_load_average()})"
    )
    results["work_precision"] = work_precision.measure(lv, names)
    work_precision.print_verdicts(results["work_precision"])
