"""Native code beyond the default size limit: the chain of 3D rods on spherical joints (``chain-3d``).

For chains of N rods (d = 12 N, m = 9 N; ggl-em and ggl-vi solve 3 d + 2 m = 54 N Newton unknowns per
step) this measures side by side in one process, in turns, median of ``repeats``: steps/s with
``backend="native"``, ``backend="xla"`` and the default (``"auto"``, which runs XLA above
``EngineOptions.max_native_unknowns`` unless the step's tangent is factorized by bodies in dense
blocks within it, as EM's is from four rods on, or the step is a large program of at most
``EngineOptions.large_program_unknowns`` unknowns, as EM's is with two and three rods), the C translation's
length in lines and gcc's time to compile
it at -O2 alone (the library the timed runs use: the benchmark waits until the background -O2 compile
is in use, :func:`livens.engine.wait`, and XLA's optimized executable, compiled during a whole untimed
run of each backend, :func:`_optimized_xla_at_once`).

``python -m benchmarks.chain_3d [--sizes 2,4,6] [--steps 200]`` runs it alone; ``python -m benchmarks
--only chain-3d`` runs it as a section of the benchmarks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import warnings

EXAMPLE = "chain-3d"
SIZES = (2, 4, 6)
SCHEMES = ("ggl-em", "ggl-vi")
STEPS = 200


def _unknowns(lv, problem, scheme: str) -> int:
    sch, _ = lv.schemes.get(scheme)
    d, m = len(problem.q0), len(problem.system.constraint_names)
    return sum(n for _, n in sch.sizes(d, m))


def _first_native_call(lv, problem, scheme: str) -> dict:
    """The first native call (tracing, translation, -O0 compile) and the time until -O2 is in use;
    the translation's source is taken from the translator as it is made."""
    from livens import engine
    from livens.engine import native

    sources, trace = [], native.trace_function

    def keep(*args, **kwargs):
        traced = trace(*args, **kwargs)
        sources.append(traced.source)
        return traced

    native.trace_function = keep
    out: dict = {}
    try:
        t0 = time.perf_counter()
        sol = lv.simulate(problem, scheme, t_end=problem.h, progress=False, backend="native")
        out["first_call_s"] = round(time.perf_counter() - t0, 2)
        engine.wait()
        out["o2_in_use_s"] = round(time.perf_counter() - t0, 2)
        out["backend"] = sol.meta["backend"]
    except ValueError as exc:  # NativeUnavailable: the translator refused the loop
        out["unavailable"] = str(exc)
    finally:
        native.trace_function = trace
    if sources:
        source = max(sources, key=len)  # the chunk loop (the start step is a shorter program)
        out["c_lines"] = source.count("\n")
        out["gcc_o2_s"] = _gcc_o2(source)
    return out


def _gcc_o2(source: str) -> float | None:
    """gcc's time to compile ``source`` with the native kernels' -O2 flags, alone."""
    from livens.engine.native import build

    cc = build.compiler()
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.c")
        with open(path, "w") as f:
            f.write(source)
        t0 = time.perf_counter()
        subprocess.run([cc, *build.flags(cc), path, "-o", os.path.join(tmp, "kernel.so")], check=True)
        return round(time.perf_counter() - t0, 2)


@contextlib.contextmanager
def _optimized_xla_at_once():
    """XLA's tiers (:mod:`livens.engine.tiers`) switch to the optimized executable at the first call
    after the quick one, not after its runs have paid for it: the untimed run before the timed ones
    compiles it, and the timed runs compare native code with XLA's optimized code."""
    from livens.engine import tiers

    payback, tiers.PAYBACK = tiers.PAYBACK, 0.0
    try:
        yield
    finally:
        tiers.PAYBACK = payback


def measure_one(lv, n_bodies: int, scheme: str, steps: int = STEPS, repeats: int = 3) -> dict:
    """One chain size and scheme (module docstring)."""
    from livens import engine

    problem = lv.examples.load(EXAMPLE, n_bodies=n_bodies)
    h = problem.h
    row = {"n_bodies": n_bodies, "unknowns": _unknowns(lv, problem, scheme), "steps": steps}
    row.update(_first_native_call(lv, problem, scheme))
    backends = {"xla": "xla", "default": None}
    if "unavailable" not in row:
        backends["native"] = "native"
    with warnings.catch_warnings(), _optimized_xla_at_once():
        warnings.simplefilter("ignore", engine.NativeFallback)
        for key, b in backends.items():
            t0 = time.perf_counter()
            sol = lv.simulate(problem, scheme, t_end=h, progress=False, backend=b)
            row[f"{key}_first_call_s"] = round(time.perf_counter() - t0, 2)
            row[f"{key}_backend"] = sol.meta["backend"]
        engine.wait()
        for b in backends.values():  # a whole run each, so that XLA's tiers (level 0 first) are optimized
            lv.simulate(problem, scheme, t_end=steps * h, progress=False, backend=b)
        engine.wait()
        walls: dict = {k: [] for k in backends}
        for _ in range(repeats):  # in turns: a change of the machine's load falls on every backend
            for key, b in backends.items():
                t0 = time.perf_counter()
                sol = lv.simulate(problem, scheme, t_end=steps * h, progress=False, backend=b)
                walls[key].append(time.perf_counter() - t0)
                row["newton_iterations"] = round(float(sol.newton_iterations.mean()), 3)
    for key, w in walls.items():
        row[f"{key}_steps_per_s"] = round(steps / sorted(w)[len(w) // 2], 1)
    for key in ("native", "default"):
        if f"{key}_steps_per_s" in row:
            row[f"{key}_over_xla"] = round(row[f"{key}_steps_per_s"] / row["xla_steps_per_s"], 2)
    return row


def measure(lv, sizes=SIZES, schemes=SCHEMES, steps: int = STEPS, repeats: int = 3) -> dict:
    """{"<N>|<scheme>": row} for each chain size and scheme (:func:`measure_one`)."""
    return {f"{n}|{s}": measure_one(lv, n, s, steps, repeats) for n in sizes for s in schemes}


def print_row(key: str, r: dict) -> None:
    n, scheme = key.split("|")
    head = f"  N = {n} {scheme:<7} {r['unknowns']:>4} unknowns"
    if "unavailable" in r:
        print(f"{head}: native unavailable ({r['unavailable'][:90]}); xla {r['xla_steps_per_s']:,.0f} steps/s")
        return
    print(
        f"{head}, C {r.get('c_lines', 0):>6,} lines, gcc -O2 {r.get('gcc_o2_s') or 0:5.1f} s: native "
        f"{r['native_steps_per_s']:>8,.0f} steps/s, xla {r['xla_steps_per_s']:>7,.0f}, native/xla "
        f"{r['native_over_xla']:.2f}x; default ({r['default_backend']}) {r['default_over_xla']:.2f}x xla "
        f"({r['newton_iterations']:.2f} Newton it.)",
        flush=True,
    )


def verdict(rows: dict) -> str | None:
    """The issue's done-when, from the row of six rods with EM: the default backend at least 3x
    ``backend="xla"`` (the target ``chain3d_default_over_xla`` of :mod:`benchmarks.targets`); None
    where that row was not measured."""
    em = rows.get("6|ggl-em")
    if not em or "default_over_xla" not in em:
        return None
    met = "met" if em["default_over_xla"] >= 3.0 else "not met"
    return (
        f"  verdict: 6 rods, EM: the default ({em['default_backend']}) runs at {em['default_over_xla']:.2f}x "
        f"backend='xla' (native {em.get('native_over_xla', float('nan')):.2f}x); the target >= 3x is {met}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.chain_3d", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="numbers of rods, comma-separated")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import livens as lv

    print(f"chain-3d, h = 0.005, {args.steps} steps, median of {args.repeats} in turns (load {os.getloadavg()})")
    rows = {}
    for n in (int(x) for x in args.sizes.split(",")):
        for scheme in args.schemes.split(","):
            rows[f"{n}|{scheme}"] = r = measure_one(lv, n, scheme, args.steps, args.repeats)
            print_row(f"{n}|{scheme}", r)
    line = verdict(rows)
    if line:
        print(line)
    print(f"load average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def section(lv, quick: bool, results: dict) -> None:
    """The section of ``python -m benchmarks``: N = 6 (with --quick) or every size of :data:`SIZES`."""
    sizes = (6,) if quick else SIZES
    print(
        f"\n== {EXAMPLE}: N rods on spherical joints, steps/s native vs xla vs the default, N = {sizes}, "
        f"{STEPS} steps, median of 3 in turns (load average {os.getloadavg()[0]:.2f})"
    )
    results["chain_3d"] = {}
    for n in sizes:
        for scheme in SCHEMES:
            key = f"{n}|{scheme}"
            results["chain_3d"][key] = r = measure_one(lv, n, scheme)
            print_row(key, r)
    line = verdict(results["chain_3d"])
    if line:
        print(line)


def flatten(results: dict) -> dict:
    """The comparable figures of the section (``benchmarks.__main__._flatten``)."""
    flat = {}
    for key, r in results.get("chain_3d", {}).items():
        for what in ("native", "xla", "default"):
            if f"{what}_steps_per_s" in r:
                flat[f"chain3d:{key}:{what}"] = (r[f"{what}_steps_per_s"], True)
    em = results.get("chain_3d", {}).get("6|ggl-em", {})
    if "default_over_xla" in em:
        flat["chain3d_default_over_xla"] = (em["default_over_xla"], True)
    return flat
