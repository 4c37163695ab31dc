"""livens beside code at the limit of the method and beside the tool users would otherwise pick.

Each system runs in this one process, in turns (livens, then every reference, three rounds, so that
a change of the machine's load falls on all of them alike), the same number of steps from the same
initial state at the same h, each figure the median of the three rounds, after compilation. In a
round each code runs twice in a row and the second call is timed: on a virtual machine that reclaims
memory left idle for a second or two, the first touch of such memory costs microseconds per page, and
a call right after the other codes' runs measured up to 3x slower than the same call repeated (the
more code and data a call touches, the more it loses; the steps/s of a long run are those of the
warm call):

- livens: ``lv.simulate(problem, "VI-S", h=h, ...)`` with its default first guess ("extrapolated"),
  Newton tolerance 1e-9, the wall time of the call as a user sees it, with its default backend
  (native where the loop translates: the chunk of steps as one C function, :mod:`livens.engine.native`)
  and, as a second row, with ``backend="xla"``;
- the compiled VI-S (:mod:`benchmarks.reference_numba`): the same residual, Newton iteration,
  stopping rule and first guess written by hand in Numba, dense LU, the whole loop compiled; once
  with livens' guess (the same Newton iterations: the ratio compares the code) and once with KBS23b's
  "advanced" guess q^n + h v^n (Table 2; the guess livens' own falls back to);
- Exudyn (:mod:`benchmarks.reference_exudyn`), its generalized-α solver as shipped, on its own model
  of the same mechanical system (its Newton iterations are modified Newton iterations, most
  without a new Jacobian, so its time per iteration is not comparable with the others');
- for the pendulum, the pure-NumPy VI-S (:mod:`benchmarks.reference_numpy`, KBS23b's simple guess),
  over fewer steps.

A reference whose package is not installed (numba, exudyn: the ``bench`` extra) is reported as
such. Ratios are of steps per second in the same run.
"""

from __future__ import annotations

import statistics
import time

# (example, h, steps, quick steps): the papers' h for the heavy top (KBS23b §6.2), h = 0.01 for the
# pendulum (KBS23b §6.1 studies several h)
SYSTEMS = [("pendulum-3d", 0.01, 60_000, 30_000), ("heavy-top", 0.002, 10_000, 5_000)]
NUMPY_STEPS = 2_000
PAPER_GUESS = "advanced"  # the second row of the compiled VI-S: KBS23b Table 2's advanced guess


def _median_rows(samples: dict) -> dict:
    """name -> list of (wall, steps, iterations per step) -> name -> medians."""
    out = {}
    for name, runs in samples.items():
        if isinstance(runs, str):
            out[name] = {"missing": runs}
            continue
        wall = statistics.median(r[0] for r in runs)
        steps = runs[0][1]
        its = statistics.median(r[2] for r in runs)
        row = {
            "steps": steps,
            "wall_s": round(wall, 4),
            "steps_per_s": round(steps / wall, 1),
            "us_per_step": round(wall / steps * 1e6, 3),
            "newton_iterations": round(its, 3),
            "walls_s": [round(r[0], 4) for r in runs],
        }
        if its > 0:
            row["us_per_newton_iteration"] = round(wall / steps / its * 1e6, 3)
        out[name] = row
    return out


def _numba():
    try:
        from benchmarks import reference_numba
    except ImportError as exc:
        return None, f"not installed ({exc.name}; pip install 'livens[bench]')"
    return reference_numba, None


def _exudyn():
    try:
        import exudyn  # noqa: F401

        from benchmarks import reference_exudyn
    except ImportError as exc:
        return None, f"not installed ({exc.name}; pip install 'livens[bench]')"
    return reference_exudyn, None


def measure_system(lv, example: str, h: float, steps: int, rounds: int = 3) -> dict:
    """Steps/s, Newton iterations per step and time per iteration of livens and every reference on
    one system, median of ``rounds`` interleaved rounds; plus the largest differences of the
    trajectories (livens against the Numba VI-S with the same guess)."""
    import numpy as np

    problem = lv.examples.load(example)
    rn, rn_missing = _numba()
    rx, rx_missing = _exudyn()
    runs = {}
    notes = {}

    def livens(backend=None):
        def run():
            t0 = time.perf_counter()
            sol = lv.simulate(problem, "VI-S", h=h, t_end=steps * h, progress=False, backend=backend)
            wall = time.perf_counter() - t0
            return sol, (wall, steps, float(sol.newton_iterations.mean()))

        return run

    t0 = time.perf_counter()
    first = lv.simulate(problem, "VI-S", h=h, t_end=h, progress=False)
    notes["livens_first_call_s"] = round(time.perf_counter() - t0, 2)
    notes["livens_backend"] = first.meta.get("backend", "xla")
    guess = first.meta.get("guess", "extrapolated")
    notes["livens_guess"] = guess
    makers = {"livens": livens()}
    if notes["livens_backend"] != "xla":
        lv.simulate(problem, "VI-S", h=h, t_end=h, progress=False, backend="xla")
        lv.engine.optimize()  # a large XLA loop runs its optimized program, not the quick first one
        makers["livens (xla)"] = livens("xla")

    if rn is not None:
        system = {"pendulum-3d": rn.pendulum_3d, "heavy-top": rn.heavy_top}[example]()
        t0 = time.perf_counter()
        rn.simulate_vis(system, h, 2, guess=guess)
        notes["numba_first_call_s"] = round(time.perf_counter() - t0, 2)

        def numba(g):
            def run():
                r = rn.simulate_vis(system, h, steps, guess=g)
                return r, (r.wall, steps, float(r.iterations.mean()))

            return run

        makers[f"numba ({guess})"] = numba(guess)
        if guess != PAPER_GUESS:
            makers[f"numba ({PAPER_GUESS})"] = numba(PAPER_GUESS)
    else:
        runs[f"numba ({guess})"] = rn_missing

    if rx is not None:
        build = {"pendulum-3d": rx.pendulum_3d, "heavy-top": rx.heavy_top}[example]
        notes["exudyn_version"] = rx.version()

        def exudyn():
            model = build(h, steps)  # the set-up is not timed
            r = rx.run(model)
            return r, (r.wall, steps, r.newton_iterations / steps)

        makers["exudyn"] = exudyn
    else:
        runs["exudyn"] = rx_missing

    if example == "pendulum-3d":
        from benchmarks.reference_numpy import simulate_pendulum_vis

        def numpy_ref():
            n = NUMPY_STEPS
            q, _, its, wall = simulate_pendulum_vis(problem.q0, problem.v0, h, n)
            return q, (wall, n, float(its.mean()))

        makers["numpy (simple)"] = numpy_ref

    last = {}
    for _ in range(rounds):
        for name, fn in makers.items():
            fn()  # untimed: the memory this code touches is touched again before its timed call
            out, sample = fn()
            runs.setdefault(name, []).append(sample)
            last[name] = out
    order = ["livens", "livens (xla)", f"numba ({guess})", f"numba ({PAPER_GUESS})", "exudyn", "numpy (simple)"]
    rows = _median_rows({k: runs[k] for k in sorted(runs, key=lambda k: order.index(k) if k in order else 99)})
    # the same motion: livens against the references (the last round's trajectories)
    sol = last["livens"]
    key = f"numba ({guess})"
    if key in last:
        notes["max_abs_q_difference_numba"] = float(np.max(np.abs(sol.q - last[key].q)))
        notes["same_newton_iterations_numba"] = float(np.mean(sol.newton_iterations == last[key].iterations))
    if "exudyn" in last:
        x = last["exudyn"].x
        n1 = int(round(1.0 / h))  # over the first second: first and second order drift apart in phase later
        notes["max_abs_position_difference_exudyn"] = float(np.max(np.abs(x[: n1 + 1] - sol.q[: n1 + 1, 0:3])))
        if example == "heavy-top":
            notes["exudyn_phi3_range"] = [float(x[:, 2].min()), float(x[:, 2].max())]
            notes["livens_phi3_range"] = [float(sol.q[:, 2].min()), float(sol.q[:, 2].max())]
        else:
            v = last["exudyn"].v
            energy = 0.5 * np.sum(v * v, axis=1) + 9.81 * x[:, 2]
            notes["exudyn_energy_drift"] = float(np.max(np.abs(energy - energy[0])))
            e = sol.energy()["total"]
            notes["livens_energy_drift"] = float(np.max(np.abs(e - e[0])))
    if "numpy (simple)" in last:
        n = NUMPY_STEPS
        notes["max_abs_q_difference_numpy"] = float(np.max(np.abs(last["numpy (simple)"][: n + 1] - sol.q[: n + 1])))
    return {"h": h, "steps": steps, "rows": rows, "notes": notes}


def ratios(result: dict) -> dict:
    """livens' steps/s over each reference's, in the same run."""
    rows = result["rows"]
    lv_rate = rows.get("livens", {}).get("steps_per_s")
    out = {}
    for name, row in rows.items():
        if name != "livens" and lv_rate and row.get("steps_per_s"):
            out[name] = float(f"{lv_rate / row['steps_per_s']:.3g}")
    return out


def print_system(example: str, result: dict) -> None:
    notes, rows = result["notes"], result["rows"]
    numba_first = f", the Numba loop's {notes['numba_first_call_s']} s" if "numba_first_call_s" in notes else ""
    print(
        f"\n  {example}, VI-S, h = {result['h']:g}, {result['steps']:,} steps, tol 1e-9 (first calls: livens' "
        f"{notes.get('livens_first_call_s', '-')} s{numba_first})"
    )
    print(
        f"    {'code':<42} {'steps/s':>11} {'Newton it.':>10} {'us/step':>9} {'us/iteration':>13} {'livens/this':>12}"
    )
    rat = ratios(result)
    labels = {
        "livens": f"livens ({notes.get('livens_backend', 'xla')}, guess {notes.get('livens_guess')})",
        "livens (xla)": f"livens (xla, guess {notes.get('livens_guess')})",
        "exudyn": " ".join(filter(None, ["Exudyn", notes.get("exudyn_version"), "generalized-α"])),
        "numpy (simple)": "NumPy VI-S (simple guess)",
    }
    for name, row in rows.items():
        label = labels.get(
            name,
            "compiled VI-S, Numba (" + name.split("(")[-1].rstrip(")") + " guess)"
            if name.startswith("numba")
            else name,
        )
        if "missing" in row:
            print(f"    {label:<42} {row['missing']}")
            continue
        per_it = row.get("us_per_newton_iteration")
        per_it = f"{per_it:>13,.2f}" if per_it is not None else f"{'-':>13}"
        if name == "exudyn":
            per_it = f"{'(modified)':>13}"
        r = f"{rat[name]:>11.2f}x" if name in rat else f"{'':>12}"
        print(
            f"    {label:<42} {row['steps_per_s']:>11,.0f} {row['newton_iterations']:>10.2f} "
            f"{row['us_per_step']:>9.2f} {per_it} {r}"
        )
    if "max_abs_q_difference_numba" in notes:
        print(
            f"    livens vs Numba (same guess): max |q difference| {notes['max_abs_q_difference_numba']:.1e}, "
            f"same Newton iterations in {100 * notes['same_newton_iterations_numba']:.0f}% of the steps"
        )
    if "max_abs_position_difference_exudyn" in notes:
        extra = ""
        if "exudyn_phi3_range" in notes:
            a, b = notes["exudyn_phi3_range"]
            c, d = notes["livens_phi3_range"]
            extra = f"; phi3 in [{a:.5f}, {b:.5f}] (livens [{c:.5f}, {d:.5f}]; steady precession 0.0375)"
        elif "exudyn_energy_drift" in notes:
            extra = (
                f"; energy drift {notes['exudyn_energy_drift']:.1e} (livens VI-S {notes['livens_energy_drift']:.1e})"
            )
        print(
            f"    livens vs Exudyn: max |position difference| {notes['max_abs_position_difference_exudyn']:.1e} "
            f"in the first second{extra}"
        )
    if "max_abs_q_difference_numpy" in notes:
        print(
            f"    livens vs NumPy: max |q difference| {notes['max_abs_q_difference_numpy']:.1e} "
            f"(first {NUMPY_STEPS:,} steps; simple vs livens' guess)"
        )


def measure_chain_numba(sizes, steps: int, rounds: int = 3) -> dict:
    """The compiled VI-S on the pendulum chain (its band LU): cost per step for each N, the first
    ``steps`` steps at h = 0.01 with the "extrapolated" guess; median of ``rounds``."""
    rn, missing = _numba()
    if rn is None:
        return {"missing": missing}
    out = {}
    for n in sizes:
        system = rn.pendulum_chain(n)
        rn.simulate_vis(system, 0.01, 1)
        runs = [rn.simulate_vis(system, 0.01, steps) for _ in range(rounds)]
        wall = statistics.median(r.wall for r in runs)
        its = float(runs[0].iterations.mean())
        out[str(n)] = {
            "us_per_step": round(wall / steps * 1e6, 1),
            "newton_iterations": round(its, 3),
            "us_per_newton_iteration": round(wall / steps / its * 1e6, 1),
        }
    return out
