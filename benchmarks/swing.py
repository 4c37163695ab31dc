"""The three-bar swing's section of ``python -m benchmarks`` (SLO09 §4.2, 10 and 40 elements):
steps/s of the default run per scheme, where a vi-lagrange step spends its time, the default run
in a fresh process, and the target's ratio of 40 over 10 elements."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.measure import HERE, _best, _wait_optimized

SWING = "three-bar-swing"
SWING_SCHEMES = ("vi-lagrange", "vi-nullspace", "livens-em", "livens-midpoint")
SWING_PAPER_SCHEMES = ("vi-lagrange", "vi-nullspace")  # SLO09 §4.2 runs these, with 10 elements
SWING_FRESH_SCHEMES = ("vi-lagrange", "livens-em")  # the default run in a fresh process
SWING_SHORT = {(40, "vi-nullspace"): 100}
"""Runs timed over their first steps instead of the example's whole default run (2,000 steps):
the null space method with 40 elements takes minutes for the whole run."""


def vi_lagrange_step_inputs(problem):
    """(scheme, mechanics, state, h, unknowns) of one vi-lagrange step of ``problem`` near its start:
    q^n = q0, q^{n+1} perturbed by 1e-4, the unknowns (dq2, lambda) of SLO09 eq 14 in increments. Used
    by the swing's profile and by the test of its cost on a busy machine."""
    import jax.numpy as jnp
    import numpy as np

    from livens.mechanics import mechanics
    from livens.schemes import get
    from livens.schemes.base import State

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
    return sch, mech, s, problem.h, jnp.concatenate([q1 - q0, jnp.zeros(m)])


def _swing_profile(lv, problem, repeats: int = 20) -> dict:
    """Where a vi-lagrange step of the swing spends its time: one evaluation of the residual (SLO09 eq 14),
    one Newton matrix as the time loop forms it together with its solve (``newton_matrix_solve_ms``;
    the form in ``newton_matrix``: "banded" or "dense"), the state update, and for comparison the
    dense AD matrix (block by block) and its dense LU solve, each jit-compiled alone and timed as
    the best of ``repeats`` calls (ms)."""
    import jax
    import jax.numpy as jnp

    from livens.solvers import ad_jacobian, tangent_operator

    sch, mech, s, h, x = vi_lagrange_step_inputs(problem)
    d, m = mech.d, mech.m
    # the state is an argument, as in the time loop (closed over, XLA would fold it into constants)
    res = lambda u, s: sch.residual(u, s, h, 0.0, {}, mech)  # noqa: E731
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


def section(lv, quick: bool, results: dict) -> None:
    """The swing's section of ``python -m benchmarks``: measured (:func:`measure_swing`; vi-lagrange
    only with ``quick``), printed, and stored in ``results`` ("swing", and "three_bar": :func:`swing_ratio`)."""
    print(
        "\n== three-bar swing (SLO09 §4.2), h = 5e-4: steps/s of lv.simulate's whole default run at 10 and 40 "
        "elements"
        + (" (vi-lagrange only, --quick)" if quick else " per scheme")
        + "; where a vi-lagrange step spends its time"
    )
    swing = measure_swing(lv, schemes=("vi-lagrange",) if quick else SWING_SCHEMES)
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
