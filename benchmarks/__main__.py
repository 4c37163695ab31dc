"""``python -m benchmarks``: speed and scale of livens, compared with a committed baseline.

Usage::

    python -m benchmarks                     # everything (about 15 minutes on 2 cores)
    python -m benchmarks --quick             # the targets only (a few minutes)
    python -m benchmarks --update-baseline   # write benchmarks/baseline.json from this run
    python -m benchmarks --only heavy-top    # pairs whose example or scheme matches
    python -m benchmarks --only three-bar-swing   # the swing's section alone (SLO09 §4.2, 10 and 40 elements)
    python -m benchmarks --yardsticks        # livens beside the compiled VI-S and Exudyn only
    python -m benchmarks --only redundancy   # the four-bar with and without its dependent equations
    python -m benchmarks --only chain-3d     # 3D rods on spherical joints: native vs xla beyond the size limit
    python -m benchmarks --only work-precision   # error against CPU time, heavy top and double four-bar

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import chain_3d

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baseline.json"
CHUNK = 512
CHAIN_STEPS = 300

# the speed targets: (key, description, comparison, value); the ratios are measured side by side
# in one run (livens' steps/s over the reference's)
TARGETS = [
    ("yard:pendulum-3d:exudyn", "pendulum-3d (h = 0.01): livens / Exudyn, steps/s", ">=", 2.0),
    ("yard:pendulum-3d:numba", "pendulum-3d (h = 0.01): livens / compiled VI-S (Numba)", ">=", 0.6),
    ("yard:heavy-top:exudyn", "heavy-top (h = 0.002): livens / Exudyn, steps/s", ">=", 0.5),
    ("yard:heavy-top:numba", "heavy-top (h = 0.002): livens / compiled VI-S (Numba)", ">=", 2.5),
    ("chain_ratio", "pendulum-chain cost per step, N = 128 / N = 16 (300 steps)", "<=", 16.0),
    ("three_bar_ratio", "three-bar swing cost per step, 40 / 10 elements", "<=", 6.0),
    ("swing_loop_over_parts", "three-bar swing, 10 elements: default run per step / its parts", "<=", 3.0),
    ("swing_fresh_max", "three-bar swing's default run in a fresh process, s", "<=", 20.0),
    ("first_call_max", "cold first lv.simulate call per (example, scheme) of the papers, s", "<=", 3.0),
    ("ensemble_ratio", "1000 heavy tops in one call / one run (trajectory-steps/s)", ">=", 3.0),
    ("grad_over_forward_max", "lv.flow: a gradient / its forward run, per step (max)", "<=", 3.0),
    ("flow_over_simulate_max", "lv.flow's forward run / lv.simulate, per step (max)", "<=", 1.5),
    ("redundancy_ratio_max", "four-bar-3d: 38 equations (3 redundant) / the 35 independent ones, per step", "<=", 1.5),
    ("chain3d_default_over_xla", "chain-3d, 6 rods, EM: the default backend / backend='xla', steps/s", ">=", 3.0),
    (
        "work_precision:heavy-top",
        "heavy-top at error 1e-8: fastest order >= 4 / fastest order-2 scheme, CPU time",
        "<=",
        1 / 3,
    ),
]
TARGET_PAIRS = [
    ("pendulum-3d", "ggl-vi"),
    ("heavy-top", "ggl-vi"),
    ("heavy-top", "ggl-em"),
    ("double-four-bar", "ggl-vi"),
]
# not in the compile target: livens' own scalable example, the DAE test set's squeezer (HW96), and the
# overconstrained mechanisms (livens' own test cases of redundant equations and a singular start)
NOT_OF_THE_PAPERS = ("pendulum-chain", "andrews-squeezer", "four-bar-3d", "bennett-linkage", "parallelogram")


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def _best(fn, repeats: int):
    """Run fn() ``repeats`` times; the result of the fastest run and its wall time."""
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        if best is None or dt < best[1]:
            best = (out, dt)
    return best


def _median(fn, repeats: int):
    """Run fn() ``repeats`` times; the last result and the median wall time."""
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
    return out, sorted(walls)[len(walls) // 2]


def _steps_for(rate: float, seconds: float, lo: int, hi: int) -> int:
    n = int(rate * seconds)
    return max(lo, min(hi, n))


def _wait_optimized() -> None:
    """Wait until the optimized programs compiling in the background (native -O2, XLA's default
    level) are in use."""
    from livens import engine

    engine.wait()


def measure_pair(lv, example: str, scheme: str, seconds: float, repeats: int) -> dict:
    """Compile time and steps/s of ``lv.simulate`` for one (example, scheme) at the paper's h."""
    problem = lv.examples.load(example)
    h = problem.h
    try:
        t0 = time.perf_counter()
        first = lv.simulate(problem, scheme, h=h, t_end=h, progress=False)
        first_call = time.perf_counter() - t0
    except ValueError as exc:  # the scheme refuses the system (e.g. singular M)
        return {"skipped": str(exc).split(". ")[0]}
    except lv.SimulationError as exc:
        return {"failed": f"{type(exc).__name__}: {str(exc)[:160]}"}
    out = {
        "compile_s": round(float(first.meta.get("compile_time", first_call)), 3),
        "first_call_s": round(first_call, 3),
        "backend": first.meta.get("backend", "xla"),
    }
    # a large native kernel starts at -Og while -O2 compiles in the background, a large XLA program
    # at XLA's level 0 likewise: steps/s are measured with the optimized one, and the time until it
    # is in use is kept beside the compile time
    t0 = time.perf_counter()
    _wait_optimized()
    if time.perf_counter() - t0 > 0.01:
        out["optimized_s"] = round(first_call + time.perf_counter() - t0, 3)
    try:
        t0 = time.perf_counter()
        lv.simulate(problem, scheme, h=h, t_end=CHUNK * h, progress=False)
        rate = CHUNK / (time.perf_counter() - t0)
        n = _steps_for(rate, seconds, CHUNK, 400 * CHUNK)
        sol, wall = _best(lambda: lv.simulate(problem, scheme, h=h, t_end=n * h, progress=False), repeats)
    except lv.SimulationError as exc:
        out["failed"] = f"{type(exc).__name__} at the paper's h = {h:g}: {str(exc)[:120]}"
        return out
    out.update(steps=n, steps_per_s=round(n / wall, 1), newton_iterations=round(float(sol.newton_iterations.mean()), 3))
    return out


def _rotated_tops(lv, problem, members: int, seed: int = 0):
    """Consistent heavy-top states: the paper's, rotated about e3 and spun faster or slower."""
    import numpy as np

    rng = np.random.default_rng(seed)
    q0s, v0s = [], []
    for _ in range(members):
        a = rng.uniform(0.0, 2.0 * np.pi)
        c, s = np.cos(a), np.sin(a)
        R = np.kron(np.eye(4), np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]))
        q0s.append(R @ problem.q0)
        v0s.append(rng.uniform(0.9, 1.1) * (R @ problem.v0))  # G(q) v = 0 is linear in v
    return np.array(q0s), np.array(v0s)


def measure_ensemble(lv, members: int, steps: int, repeats: int) -> dict:
    """Trajectory-steps/s of ``members`` heavy tops in one ``simulate_ensemble`` call, against one run's
    steady rate (a run of at least 2,000 steps, so that the per-call cost of a short run does not
    lower the single-run figure and flatter the ratio)."""
    problem = lv.examples.load("heavy-top")
    h = problem.h
    q0s, v0s = _rotated_tops(lv, problem, members)
    t0 = time.perf_counter()
    lv.simulate_ensemble(problem, "VI-S", q0s, v0s, h=h, t_end=h)
    compile_s = time.perf_counter() - t0
    _wait_optimized()  # the lane kernel's source is large: measured with its -O2 library, as the single run
    ens, wall = _best(lambda: lv.simulate_ensemble(problem, "VI-S", q0s, v0s, h=h, t_end=steps * h), repeats)
    lv.simulate(problem, "VI-S", h=h, t_end=h, progress=False)
    _wait_optimized()  # the single run too: not its -Og library
    single_steps = max(steps, 2000)
    single, wall_1 = _best(lambda: lv.simulate(problem, "VI-S", h=h, t_end=single_steps * h, progress=False), repeats)
    ens_rate = members * steps / wall
    single_rate = single_steps / wall_1
    return {
        "members": members,
        "steps": steps,
        "compile_s": round(compile_s, 2),
        "ensemble_trajectory_steps_per_s": round(ens_rate, 1),
        "single_steps_per_s": round(single_rate, 1),
        "ratio": round(ens_rate / single_rate, 2),
        "failed_members": int(ens.failed.sum()),
        "backend": ens.meta["backend"],
        "lanes": ens.meta.get("lanes", 0),
        "single_backend": single.meta["backend"],
        "threads": os.cpu_count(),
    }


def measure_chain(lv, sizes, chain_steps: int, repeats: int) -> dict:
    """Cost per step of VI-S on the pendulum chain for each N: the first ``chain_steps`` steps
    (h = 0.01) from the example's start, median of ``repeats``."""
    rows = {}
    for n in sizes:
        problem = lv.examples.load("pendulum-chain", n_bodies=n)
        h = 0.01  # the same step for every N (the example's default step follows N)
        t0 = time.perf_counter()
        lv.simulate(problem, "VI-S", h=h, t_end=h, progress=False)
        first = time.perf_counter() - t0
        steps = chain_steps  # the same stretch of the motion for every N
        try:
            sol, wall = _median(lambda: lv.simulate(problem, "VI-S", h=h, t_end=steps * h, progress=False), repeats)
        except lv.SimulationError as exc:
            rows[str(n)] = {"failed": str(exc)[:160]}
            continue
        its = float(sol.newton_iterations.mean())
        rows[str(n)] = {
            "d": 3 * n,
            "m": n,
            "first_call_s": round(first, 2),
            "steps": steps,
            "us_per_step": round(wall / steps * 1e6, 1),
            "newton_iterations": round(its, 3),
            "us_per_newton_iteration": round(wall / steps / its * 1e6, 1),
        }
    out = {"sizes": rows}
    ok = [str(n) for n in sizes if "us_per_step" in rows.get(str(n), {})]
    if "16" in ok and "128" in ok:
        out["ratio_128_16"] = round(rows["128"]["us_per_step"] / rows["16"]["us_per_step"], 1)
        out["ratio_per_iteration_128_16"] = round(
            rows["128"]["us_per_newton_iteration"] / rows["16"]["us_per_newton_iteration"], 1
        )
    return out


SWING = "three-bar-swing"
SWING_SCHEMES = ("vi-lagrange", "vi-nullspace", "livens-em", "livens-midpoint")
SWING_PAPER_SCHEMES = ("vi-lagrange", "vi-nullspace")  # SLO09 §4.2 runs these, with 10 elements
SWING_FRESH_SCHEMES = ("vi-lagrange", "livens-em")  # the default run in a fresh process
SWING_SHORT = {(40, "vi-nullspace"): 100}
"""Runs timed over their first steps instead of the example's whole default run (2,000 steps):
the null space method with 40 elements takes minutes for the whole run."""


def _swing_profile(lv, problem, repeats: int = 20) -> dict:
    """Where a vi-lagrange step of the swing spends its time: one evaluation of the residual (SLO09 eq 14),
    one Newton matrix as the time loop forms it together with its solve (``newton_matrix_solve_ms``;
    the form in ``newton_matrix``: "banded" or "dense"), the state update, and for comparison the
    dense AD matrix (block by block) and its dense LU solve, each jit-compiled alone and timed as
    the best of ``repeats`` calls (ms)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from livens.mechanics import mechanics
    from livens.schemes import get
    from livens.schemes.base import State
    from livens.solvers import ad_jacobian, tangent_operator

    mech = mechanics(problem.system, problem.q0)
    d, m = mech.d, mech.m
    sch, _ = get("vi-lagrange")
    q0 = jnp.asarray(problem.q0)
    q1 = q0 + 1e-4 * jnp.asarray(np.random.default_rng(0).standard_normal(d))
    s = State(
        q=q0,
        p=jnp.zeros(d),
        v=jnp.zeros(d),
        lam=jnp.zeros(m),
        gam=jnp.zeros(m),
        extra={"q_next": q1, "c_next": jnp.zeros(d), "dq": q1 - q0},
    )
    h = problem.h
    # the state is an argument, as in the time loop (closed over, XLA would fold it into constants)
    res = lambda u, s: sch.residual(u, s, h, 0.0, {}, mech)  # noqa: E731
    x = jnp.concatenate([q1 - q0, jnp.zeros(m)])  # the unknowns (dq2, lambda), SLO09 eq 14 in increments
    R = jax.jit(lambda x, s: res(sch.unpack(x, d, m), s))
    J = jax.jit(lambda x, s: ad_jacobian(lambda u: res(u, s), x, lambda z: sch.unpack(z, d, m)))
    U = jax.jit(lambda x, s: sch.update(sch.unpack(x, d, m), s, h, 0.0, {}, mech))
    solve = jax.jit(jnp.linalg.solve)
    A, b = J(x, s), R(x, s)
    kinds = []

    def tangent_solve(x, r, s):
        T = tangent_operator(sch, sch.unpack(x, d, m), s, h, 0.0, {}, mech)
        kinds.append(type(T).__name__)
        return T.solve(r)

    TS = jax.jit(tangent_solve)
    jax.block_until_ready(TS(x, b, s))
    out = {"unknowns": int(x.shape[0]), "newton_matrix": "banded" if "Band" in kinds[0] else "dense"}
    for name, fn, args in (
        ("residual_ms", R, (x, s)),
        ("newton_matrix_solve_ms", TS, (x, b, s)),
        ("update_ms", U, (x, s)),
        ("jacobian_ms", J, (x, s)),
        ("lu_solve_ms", solve, (A, b)),
    ):
        jax.block_until_ready(fn(*args))
        _, wall = _best(lambda: jax.block_until_ready(fn(*args)), repeats)
        out[name] = round(wall * 1e3, 3)
    return out


def loop_over_parts(row: dict, profile: dict) -> float | None:
    """The whole run's cost per step (``row``: a vi-lagrange row of :func:`measure_swing`) over the sum
    of its parts (``profile``: :func:`_swing_profile`): per step, Newton evaluates the residual once
    more than it iterates, forms and solves the Newton matrix once per iteration, and updates the
    state once. About 1 where the compiled loop costs what its parts cost."""
    if "steps_per_s" not in row or "residual_ms" not in profile:
        return None
    its = row["newton_iterations"]
    parts = (its + 1) * profile["residual_ms"] + its * profile["newton_matrix_solve_ms"] + profile["update_ms"]
    return round(1e3 / row["steps_per_s"] / parts, 2)


def fresh_default_run(scheme: str, n_elements: int = 10) -> dict:
    """The swing's default run (``lv.simulate(lv.examples.load("three-bar-swing"), scheme)``: 10 elements,
    2,000 steps) in a new process with an empty compilation cache, as a new user runs it: the
    process's wall time, import included, and the call's."""
    code = (
        "import time, json, sys; t0 = time.perf_counter(); import livens as lv\n"
        "p = lv.examples.load('three-bar-swing', n_elements=int(sys.argv[2])); t1 = time.perf_counter()\n"
        "s = lv.simulate(p, sys.argv[1], progress=False); t2 = time.perf_counter()\n"
        "print(json.dumps({'steps': int(s.n_steps), 'call_s': round(t2 - t1, 2), 'process_s': round(t2 - t0, 2)}))\n"
    )
    with tempfile.TemporaryDirectory(prefix="livens-bench-fresh-") as cache:
        env = dict(os.environ, LIVENS_COMPILATION_CACHE=cache)
        t0 = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-c", code, scheme, str(n_elements)],
            env=env,
            capture_output=True,
            text=True,
            cwd=str(HERE.parent),
        )
        wall = time.perf_counter() - t0
    if res.returncode:
        return {"failed": res.stderr.strip().splitlines()[-1][:160] if res.stderr.strip() else "no output"}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["wall_s"] = round(wall, 2)
    return out


def measure_swing(
    lv, sizes=(10, 40), repeats: int = 1, schemes=SWING_SCHEMES, profile: bool = True, fresh=SWING_FRESH_SCHEMES
) -> dict:
    """The three-bar swing (SLO09 §4.2) at SLO09's h = 5e-4 for each of ``schemes``: the first call of one
    step (compile time, cold), then steps/s of the call a user makes, ``lv.simulate`` of the
    example's whole default run (2,000 steps; :data:`SWING_SHORT` the exceptions), Newton iterations;
    with ``profile``, where one vi-lagrange step (SLO09 eq 14) spends its time (residual, Newton matrix,
    update, dense LU) and the whole run's cost against those parts (:func:`loop_over_parts`);
    ``fresh``: the schemes whose default run is also timed in a new process (:func:`fresh_default_run`).
    The target's ratio, 40 over 10 elements with vi-lagrange, is :func:`swing_ratio`."""
    rows = {}
    for n in sizes:
        problem = lv.examples.load(SWING, n_elements=n)
        h = problem.h
        default_steps = int(round(problem.t_end / h))
        for sc in schemes:
            key = f"{n}|{sc}"
            t0 = time.perf_counter()
            try:
                first = lv.simulate(problem, sc, h=h, t_end=h, progress=False)
            except (ValueError, lv.SimulationError) as exc:
                rows[key] = {"failed": f"{type(exc).__name__}: {str(exc)[:120]}"}
                continue
            first_call = time.perf_counter() - t0
            _wait_optimized()
            k = SWING_SHORT.get((n, sc))
            run = (
                (lambda: lv.simulate(problem, sc, progress=False))
                if k is None
                else (lambda: lv.simulate(problem, sc, t_end=k * h, progress=False))
            )
            sol, wall = _best(run, repeats)
            rows[key] = {
                "elements": n,
                "scheme": sc,
                "compile_s": round(float(first.meta.get("compile_time", first_call)), 2),
                "first_call_s": round(first_call, 2),
                "steps": int(sol.n_steps),
                "run": "default" if k is None else f"first {k} steps",
                "steps_per_s": round(sol.n_steps / wall, 2),
                "newton_iterations": round(float(sol.newton_iterations.mean()), 3),
            }
            assert k is not None or sol.n_steps == default_steps
        if not profile:
            continue
        try:
            rows[f"{n}|profile"] = prof = _swing_profile(lv, problem)
        except Exception as exc:  # noqa: BLE001 - the measured rates above are kept
            rows[f"{n}|profile"] = {"failed": f"{type(exc).__name__}: {str(exc)[:120]}"}
        else:
            ratio = loop_over_parts(rows.get(f"{n}|vi-lagrange", {}), prof)
            if ratio is not None:
                prof["loop_over_parts"] = ratio
    for sc in fresh:
        rows[f"fresh|{sc}"] = fresh_default_run(sc)
    return rows


def swing_ratio(swing: dict) -> dict:
    """The swing's target: cost per step of vi-lagrange with 40 elements over 10 (from
    :func:`measure_swing`'s rows); {} where either was not measured."""
    fast, large = swing.get("10|vi-lagrange", {}), swing.get("40|vi-lagrange", {})
    if "steps_per_s" not in fast or "steps_per_s" not in large:
        return {}
    return {
        "elements": [10, 40],
        "us_per_step": [round(1e6 / fast["steps_per_s"], 1), round(1e6 / large["steps_per_s"], 1)],
        "ratio": round(fast["steps_per_s"] / large["steps_per_s"], 2),
    }


def measure_compile_cache(cache_dir: str, pairs) -> dict:
    """First-call times in a second process that finds the compiled steps in the persistent cache."""
    code = (
        "import time, json, sys; t0 = time.perf_counter(); import livens as lv; t_imp = time.perf_counter() - t0; r = {}\n"
        "for ex, sc in json.loads(sys.argv[1]):\n"
        "    p = lv.examples.load(ex); t0 = time.perf_counter()\n"
        "    s = lv.simulate(p, sc, h=p.h, t_end=p.h, progress=False)\n"
        "    r[ex + '|' + sc] = {'first_call_s': round(time.perf_counter() - t0, 3), 'compile_s': round(s.meta['compile_time'], 3)}\n"
        "r['import_s'] = round(t_imp, 3); print(json.dumps(r))\n"
    )
    env = dict(os.environ, LIVENS_COMPILATION_CACHE=cache_dir)
    res = subprocess.run(
        [sys.executable, "-c", code, json.dumps(pairs)], env=env, capture_output=True, text=True, cwd=str(HERE.parent)
    )
    if res.returncode:
        return {"error": res.stderr[-400:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _flatten(results: dict) -> dict:
    """The comparable figures: name -> (value, higher_is_better)."""
    flat = {}
    for key, r in results.get("pairs", {}).items():
        if "steps_per_s" in r:
            flat[f"pair:{key}"] = (r["steps_per_s"], True)
        if "compile_s" in r:
            flat[f"compile:{key}"] = (r["compile_s"], False)
    ens = results.get("ensemble", {})
    if "ratio" in ens:
        flat["ensemble_ratio"] = (ens["ratio"], True)
        flat["ensemble_trajectory_steps_per_s"] = (ens["ensemble_trajectory_steps_per_s"], True)
    chain = results.get("chain", {})
    for n, r in chain.get("sizes", {}).items():
        if "us_per_step" in r:
            flat[f"chain:{n}:us_per_step"] = (r["us_per_step"], False)
    if "ratio_128_16" in chain:
        flat["chain_ratio"] = (chain["ratio_128_16"], False)
    for key, r in results.get("swing", {}).items():
        if "steps_per_s" in r:
            flat[f"swing:{key}"] = (r["steps_per_s"], True)
        if key == "10|profile" and "loop_over_parts" in r:
            flat["swing_loop_over_parts"] = (r["loop_over_parts"], False)
    fresh = [r["wall_s"] for k, r in results.get("swing", {}).items() if k.startswith("fresh|") and "wall_s" in r]
    if fresh:
        flat["swing_fresh_max"] = (max(fresh), False)
    for example, y in results.get("yardsticks", {}).items():
        for name, row in y.get("rows", {}).items():
            if "steps_per_s" in row:
                flat[f"yard_steps_per_s:{example}:{name}"] = (row["steps_per_s"], True)
        # the targets' ratios: against the compiled VI-S with livens' own guess, and Exudyn
        rat = y.get("ratios", {})
        guess = y.get("notes", {}).get("livens_guess", "extrapolated")
        if f"numba ({guess})" in rat:
            flat[f"yard:{example}:numba"] = (rat[f"numba ({guess})"], True)
        if "numba (advanced)" in rat:
            flat[f"yard:{example}:numba-advanced"] = (rat["numba (advanced)"], True)
        if "exudyn" in rat:
            flat[f"yard:{example}:exudyn"] = (rat["exudyn"], True)
    grads = results.get("gradients", {})
    for key, r in grads.items():
        if "grad_us" in r:
            flat[f"grad_us:{key}"] = (r["grad_us"], False)
            flat[f"flow_us:{key}"] = (r["forward_us"], False)
    if any("grad_us" in r for r in grads.values()):
        flat["grad_over_forward_max"] = (max(r["grad_over_forward"] for r in grads.values() if "grad_us" in r), False)
        flat["flow_over_simulate_max"] = (
            max(r["forward_over_simulate"] for r in grads.values() if "grad_us" in r),
            False,
        )
    red = results.get("redundancy", {})
    if "ratio_max" in red:
        flat["redundancy_ratio_max"] = (red["ratio_max"], False)
    for example, r in results.get("work_precision", {}).items():
        if r.get("ratio") is not None:
            flat[f"work_precision:{example}"] = (r["ratio"], False)
    flat.update(chain_3d.flatten(results))
    tb = results.get("three_bar", {})
    if "ratio" in tb:
        flat["three_bar_ratio"] = (tb["ratio"], False)
    pairs = _paper_pairs(results)
    if pairs:
        flat["compile_max"] = (max(r["compile_s"] for r in pairs.values()), False)
        flat["first_call_max"] = (max(r["first_call_s"] for r in pairs.values()), False)
    return flat


def _paper_pairs(results: dict) -> dict:
    """The measured (example, scheme) pairs on the papers' examples (the compile target's): the
    table of pairs, and the three-bar swing as SLO09 §4.2 runs it (10 elements, vi-lagrange and
    vi-nullspace), timed in its own section."""
    pairs = {
        k: r
        for k, r in results.get("pairs", {}).items()
        if "compile_s" in r and "first_call_s" in r and k.split("|")[0] not in NOT_OF_THE_PAPERS
    }
    for sc in SWING_PAPER_SCHEMES:
        r = results.get("swing", {}).get(f"10|{sc}", {})
        if "compile_s" in r and "first_call_s" in r:
            pairs[f"{SWING}|{sc}"] = r
    return pairs


def _compile_context(results: dict) -> list[str]:
    """Beside the compile target (the whole first ``lv.simulate`` call of each pair: set-up, a start
    solver's compilation and the time loop's): the time loop's compilation alone, how many pairs are
    over 3 s, and the three-bar swing, which is timed in its own section."""
    pairs = _paper_pairs(results)
    lines = []
    if pairs:
        worst = max(pairs, key=lambda k: pairs[k]["compile_s"])
        over = [k for k, r in pairs.items() if r["first_call_s"] > 3.0]
        lines.append(
            f"({len(over)} of {len(pairs)} pairs over 3 s{': ' + ', '.join(sorted(over)) if over else ''}; "
            f"the time loop's compilation alone: at most {pairs[worst]['compile_s']} s, {worst})"
        )
    swing = {
        k: r["first_call_s"]
        for k, r in results.get("swing", {}).items()
        if "first_call_s" in r and k not in [f"10|{sc}" for sc in SWING_PAPER_SCHEMES]
    }
    if swing:
        lines.append(
            f"(the three-bar swing beyond SLO09's runs, not in the target: first call "
            f"{min(swing.values())} to {max(swing.values())} s over {', '.join(sorted(swing))})"
        )
    return lines


def _why_not_measured(results: dict, key: str) -> str:
    """For a yardstick target: the reason its reference did not run (e.g. its package is missing)."""
    if not key.startswith("yard:"):
        return ""
    _, example, ref = key.split(":")
    y = results.get("yardsticks", {}).get(example)
    if y is None:
        return ""
    name = f"numba ({y.get('notes', {}).get('livens_guess', 'extrapolated')})" if ref == "numba" else ref
    missing = y.get("rows", {}).get(name, {}).get("missing")
    return f": {missing}" if missing else ""


def compare(results: dict, baseline: dict | None) -> None:
    flat = _flatten(results)
    print(f"\n== targets (load average now {_load_average()})")
    for key, what, op, value in TARGETS:
        got = flat.get(key, (None, True))[0]
        if got is None:
            status = "not measured" + _why_not_measured(results, key)
        else:
            ok = got >= value if op == ">=" else got <= value
            status = "MET" if ok else "not met"
        print(f"  {what:<62} {op} {value:<6g} measured {got if got is not None else '-':<8} {status}")
        other = flat.get(key + "-advanced")
        if other is not None:
            print(f"    (against the compiled VI-S with KBS23b's advanced guess instead: {other[0]})")
        if key == "first_call_max" and got is not None:
            for line in _compile_context(results):
                print(f"    {line}")
    if "first_call_max" in flat and len(results.get("pairs", {})) < 10:
        print(f"  (compile times of the {len(results['pairs'])} pairs measured; the full run measures every pair)")
    if not baseline:
        print("\n(no baseline to compare with)")
        return
    base = _flatten(baseline)
    # raw figures: the baseline ran on another day, under another load; the same-run ratios above
    # are what compares livens with the method's limit and with other tools
    print(
        f"\n== against the baseline ({baseline.get('machine', {}).get('date', '?')}, load "
        f"{baseline.get('machine', {}).get('load_average', '?')}): raw figures, the machine's day included"
    )
    print(f"  {'figure':<48} {'baseline':>12} {'now':>12} {'now/base':>9}")
    for key in sorted(set(flat) & set(base)):
        now, higher = flat[key]
        was, _ = base[key]
        if not was:
            continue
        r = now / was
        better = (r > 1.0) == higher
        flag = "" if 0.8 <= r <= 1.25 else ("  better" if better else "  worse")
        print(f"  {key:<48} {was:>12g} {now:>12g} {r:>9.2f}{flag}")


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the targets only, shorter runs")
    ap.add_argument("--update-baseline", action="store_true", help=f"write {BASELINE.name} from this run")
    ap.add_argument("--only", default=None, help="only pairs whose example or scheme contains this text")
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

    tmp = None
    if not args.warm_cache:
        tmp = tempfile.TemporaryDirectory(prefix="livens-bench-cache-")
        os.environ["LIVENS_COMPILATION_CACHE"] = tmp.name
    sys.path.insert(0, str(HERE.parent))
    import jax

    import livens as lv

    seconds = 0.4 if args.quick else 0.5
    repeats = 3 if args.quick else 2
    results = {
        "machine": {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "load_average": _load_average(),
            "quick": args.quick,
            "fuse_dots": os.environ.get("LIVENS_FUSE_DOTS", "1"),
        }
    }
    print(
        f"livens benchmarks: {results['machine']['platform']}, {os.cpu_count()} CPUs, jax {jax.__version__}, "
        f"load average {results['machine']['load_average']}"
    )

    if args.chain:
        return _chain_only(lv, results, args.json)

    examples, schemes = lv.examples.names(), lv.schemes.names()
    # the swing has its own section (two sizes, a profile); its compile time and step cost would
    # dominate the table of pairs
    pairs = TARGET_PAIRS if args.quick else [(e, s) for e in examples for s in schemes if e not in (SWING, "chain-3d")]
    pairs = [(e, s) for e, s in pairs if e in examples and s in schemes]
    if args.yardsticks:
        pairs = []
    if args.only:
        pairs = [(e, s) for e, s in pairs if args.only in e or args.only in s]
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
            + (f"  (-Og first; -O2 in use after {r['optimized_s']:.2f} s)" if "optimized_s" in r else "")
            + (f"  {r['failed'][:60]}" if "failed" in r else ""),
            flush=True,
        )

    if args.only is None:
        from benchmarks import yardsticks

        print(
            f"\n== yardsticks: livens beside the compiled VI-S (Numba) and Exudyn, same process, in turns, "
            f"median of 3 (load average {_load_average()})"
        )
        results["yardsticks"] = {}
        for example, h, steps, quick_steps in yardsticks.SYSTEMS:
            y = yardsticks.measure_system(lv, example, h, quick_steps if args.quick else steps)
            y["ratios"] = yardsticks.ratios(y)
            y["load_average"] = _load_average()
            results["yardsticks"][example] = y
            yardsticks.print_system(example, y)
            print(f"    (load average {y['load_average']})", flush=True)

    if args.only is None and not args.yardsticks:
        members = 1000
        steps = 100 if args.quick else 200
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

        sizes = [16, 128] if args.quick else [16, 32, 64, 128]
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

        if tmp is not None:
            cache_pairs = [list(p) for p in TARGET_PAIRS if f"{p[0]}|{p[1]}" in results["pairs"]]
            print("\n== persistent compilation cache: a second process, same cache")
            cc = measure_compile_cache(tmp.name, cache_pairs)
            results["compile_cache"] = cc
            for key, r in cc.items():
                if isinstance(r, dict) and "first_call_s" in r:
                    cold = results["pairs"].get(key, {}).get("first_call_s")
                    print(f"  {key:<32} first call {r['first_call_s']:.2f} s (cold, this process: {cold} s)")
            if "import_s" in cc:
                print(f"  import livens: {cc['import_s']:.2f} s")

    if args.only is None and not args.yardsticks:
        from benchmarks import gradients

        print(
            "\n== lv.flow: us/step of lv.simulate, of flow's forward run (jax.jit), its gradient (jax.grad) "
            f"and a jax.jvp, tol {gradients.TOL:g}, median of 3 (load average {_load_average()})"
        )
        results["gradients"] = {}
        for example, scheme, steps, quick_steps in gradients.SYSTEMS:
            key = f"{example}|{scheme}"
            try:
                r = gradients.measure(lv, example, scheme, quick_steps if args.quick else steps)
            except Exception as exc:  # noqa: BLE001 - reported in the table, the other sections go on
                r = {"failed": f"{type(exc).__name__}: {str(exc)[:160]}"}
                print(f"  {key:<20} failed: {r['failed']}")
            else:
                gradients.print_row(key, r)
            results["gradients"][key] = r

    if not args.yardsticks and (args.only is None or args.only in "four-bar-3d redundancy"):
        from benchmarks import redundancy

        steps = 200 if args.quick else 1000
        print(
            f"\n== redundant constraints: {redundancy.EXAMPLE} with its dependent equations / without them, "
            f"{steps} steps, tol {redundancy.TOL:g}, median of 5 in turns (load average {_load_average()})"
        )
        results["redundancy"] = redundancy.measure(lv, steps)
        redundancy.print_rows(results["redundancy"])

    if not args.yardsticks and (args.only is None or args.only in "chain-3d"):
        chain_3d.section(lv, args.quick, results)

    if not args.yardsticks and not args.quick and (args.only is None or args.only in "work-precision"):
        from benchmarks import work_precision

        names = ("heavy-top", "double-four-bar") if args.only else ("heavy-top",)
        print(
            f"\n== work against precision: CPU time at error {work_precision.TARGET:g} (vs SciPy DOP853), "
            f"h halved from 8 h_example, tol {work_precision.TOL:g} (load average {_load_average()})"
        )
        results["work_precision"] = work_precision.measure(lv, names)
        work_precision.print_verdicts(results["work_precision"])

    if not args.yardsticks and SWING in examples and (args.only is None or args.only in SWING):
        print(
            "\n== three-bar swing (SLO09 §4.2), h = 5e-4: steps/s of lv.simulate's whole default run at 10 and 40 "
            "elements"
            + (" (vi-lagrange only, --quick)" if args.quick else " per scheme")
            + "; where a vi-lagrange step spends its time"
        )
        swing = measure_swing(lv, schemes=("vi-lagrange",) if args.quick else SWING_SCHEMES)
        results["swing"] = swing
        results["three_bar"] = swing_ratio(swing)
        tb = results["three_bar"]
        if tb:
            print(f"  vi-lagrange, 40 / 10 elements: {tb['ratio']}x the cost per step ({tb['us_per_step']} us)")
        for key, r in swing.items():
            n, sc = key.split("|")
            if n == "fresh":
                what = (
                    f"{r['wall_s']:.1f} s (the call {r['call_s']:.1f} s, {r['steps']} steps)"
                    if "wall_s" in r
                    else r.get("failed", "?")
                )
                print(f"  the default run of {sc} in a fresh process (import, compile, run): {what}", flush=True)
            elif sc == "profile" and "failed" in r:
                print(f"  {n:>3} elements, profile of a vi-lagrange step failed: {r['failed']}")
            elif sc == "profile":
                print(
                    f"  {n:>3} elements, one vi-lagrange step's parts ({r['unknowns']} unknowns): residual "
                    f"{r['residual_ms']:.2f} ms, Newton matrix ({r['newton_matrix']}) and its solve "
                    f"{r['newton_matrix_solve_ms']:.2f} ms, update {r['update_ms']:.2f} ms; the whole run's "
                    f"step costs {r.get('loop_over_parts', '-')}x its parts; for comparison the dense AD matrix "
                    f"{r['jacobian_ms']:.2f} ms and its LU solve {r['lu_solve_ms']:.2f} ms",
                    flush=True,
                )
            elif "failed" in r:
                print(f"  {n:>3} elements  {sc:<16} {r['failed']}")
            else:
                print(
                    f"  {n:>3} elements  {sc:<16} compile {r['compile_s']:>6.1f} s  {r['steps_per_s']:>9,.1f} steps/s  "
                    f"{r['newton_iterations']:.2f} Newton it.  ({r['run']} run of {r['steps']} steps)",
                    flush=True,
                )

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
