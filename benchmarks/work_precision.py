"""Work against precision: the error at the end time of a run against the CPU time the run took, for the
higher-order GGL schemes beside the papers' second-order ones (VI-A, EM, RATTLE).

The point of a higher-order scheme is less work for a given accuracy. For each (example, scheme) the
step size is halved from eight times the example's h (a step at which Newton fails is skipped) until
the error falls below a tenth of :data:`TARGET`, an error below 1e-5 no longer falls (a floor), or a
run would exceed :data:`MAX_STEPS`. The error is max_k |q_k(T) - q_k^ref(T)| against SciPy's DOP853
on the index-1 equations (:func:`livens.studies.index1_reference`, rtol 1e-13), which no livens scheme
computes. The CPU time is the wall-clock time of ``lv.simulate`` with its default settings but the
Newton tolerance :data:`TOL` (the examples' own, up to 1e-9, would put a floor above the target
error), compiled beforehand (with the optimized tier of a large XLA loop), the best of
:data:`REPEATS`. The time at the error :data:`TARGET` is read off the log-log line between the two
runs that bracket it; "not reached" where no run does. The verdicts compare the fastest scheme of
order 4 or more, and the fastest of order exactly 4 (:data:`ORDER_FOUR`), with the fastest of order 2,
side by side in one process.
"""

from __future__ import annotations

import math
import time

TARGET = 1e-8
"""The error at which the schemes' CPU times are compared."""
TOL = 1e-12
"""The Newton tolerance of every run, below the errors measured."""
MAX_STEPS = 200_000
REPEATS = 2
EXAMPLES = {"heavy-top": 0.1, "double-four-bar": 0.1}
"""The examples and their end times T (a fraction of a period: the SciPy reference stays accurate)."""
SECOND_ORDER = ("VI-A", "EM", "rattle")
HIGHER_ORDER = ("ggl-galerkin(stages=2)", "ggl-galerkin(stages=3)", "ggl-spark(stages=3)", "ggl-em4")
ORDER_FOUR = ("ggl-galerkin(stages=2)", "ggl-spark(stages=3)", "ggl-em4")
"""The schemes of HIGHER_ORDER of order exactly 4 (ggl-galerkin with three stages is of order 6)."""


def _run_time(lv, problem, name, params, h, t_end):
    """(q at T, best wall-clock time of REPEATS runs) of one scheme at step h."""
    best, sol = math.inf, None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        sol = lv.simulate(problem, name, h=h, t_end=t_end, tol=TOL, progress=False, **params)
        best = min(best, time.perf_counter() - t0)
    return sol.q[-1], best


def _at_target(points: list) -> float | None:
    """The CPU time at the error TARGET on the log-log line between the bracketing points (error,
    seconds), or None where no pair brackets it."""
    pts = sorted(points, reverse=True)  # decreasing error
    for (e1, s1), (e2, s2) in zip(pts, pts[1:]):
        if e1 >= TARGET >= e2 and e1 > e2 > 0:
            w = (math.log(e1) - math.log(TARGET)) / (math.log(e1) - math.log(e2))
            return math.exp((1 - w) * math.log(s1) + w * math.log(s2))
    return None


def curve(lv, problem, scheme: str, t_end: float, q_ref) -> dict:
    """The (h, steps, error, seconds) points of one scheme and its time at the error TARGET."""
    import numpy as np

    from livens import engine
    from livens.studies import parse_scheme

    name, params = parse_scheme(scheme)
    if name not in lv.schemes.names() and name.lower() not in lv.schemes.aliases():
        return {"skipped": f"{name} is not a scheme of this livens"}
    points, h = [], t_end / round(t_end / (8 * problem.h))
    while t_end / h <= MAX_STEPS:
        try:
            lv.simulate(problem, name, h=h, t_end=t_end, tol=TOL, progress=False, **params)  # compile, or fail
        except lv.ConvergenceError:
            h /= 2
            continue
        engine.optimize()  # the optimized tier of a large XLA loop in use
        q, seconds = _run_time(lv, problem, name, params, h, t_end)
        error = float(np.max(np.abs(np.asarray(q) - q_ref)))
        points.append({"h": h, "steps": int(round(t_end / h)), "error": error, "seconds": seconds})
        floor = len(points) >= 3 and error < 1e-5 and error > 0.7 * points[-2]["error"]
        if error < TARGET / 10 or floor:
            break
        h /= 2
    slope = None
    if len(points) >= 2 and points[-1]["error"] > 0 and points[-2]["error"] > 0:
        a, b = points[-2], points[-1]
        slope = math.log(a["error"] / b["error"]) / math.log(a["h"] / b["h"])
    at = _at_target([(p["error"], p["seconds"]) for p in points])
    return {"points": points, "order": None if slope is None else round(slope, 2), "seconds_at_target": at}


def measure(lv, examples: tuple = tuple(EXAMPLES)) -> dict:
    """{example: {scheme: curve}} with, per example, the fastest second-order and higher-order
    schemes at the error TARGET and the ratio of their times."""
    from livens.studies import index1_reference

    out: dict = {}
    for example in examples:
        t_end = EXAMPLES[example]
        problem = lv.examples.load(example)
        q_ref, _ = index1_reference(problem, t_end)
        print(f"  {example} (T = {t_end:g}): CPU time at error {TARGET:g}, measured order, [steps:error/time]")
        rows = {}
        for scheme in SECOND_ORDER + HIGHER_ORDER:
            rows[scheme] = curve(lv, problem, scheme, t_end, q_ref)
            print_row(scheme, rows[scheme])
        best = {}
        for group, schemes in (("second", SECOND_ORDER), ("higher", HIGHER_ORDER), ("order4", ORDER_FOUR)):
            timed = [(rows[s]["seconds_at_target"], s) for s in schemes if rows[s].get("seconds_at_target")]
            best[group] = min(timed) if timed else None

        def over_second(group):
            return best[group][0] / best["second"][0] if best[group] and best["second"] else None

        out[example] = {
            "t_end": t_end,
            "schemes": rows,
            "best": best,
            "ratio": over_second("higher"),
            "ratio_order4": over_second("order4"),
        }
    return out


def print_row(scheme: str, row: dict) -> None:
    if "skipped" in row:
        print(f"    {scheme:<24} skipped: {row['skipped']}")
        return
    at = row["seconds_at_target"]
    when = f"{1e3 * at:9.2f} ms" if at else "not reached"
    pts = ", ".join(f"{p['steps']}:{p['error']:.1e}/{1e3 * p['seconds']:.1f}ms" for p in row["points"])
    print(f"    {scheme:<24} {when:>12}  order {row['order']}  [{pts}]", flush=True)


def print_verdicts(results: dict) -> None:
    for example, r in results.items():
        b = r["best"]
        if r["ratio"] is not None:
            print(
                f"  {example}: fastest higher-order {b['higher'][1]} / fastest second-order {b['second'][1]}: "
                f"{r['ratio']:.3f} of the CPU time at error {TARGET:g}"
            )
        else:
            print(f"  {example}: no ratio (a group reached no error {TARGET:g})")
        if r.get("ratio_order4") is not None:
            print(
                f"  {example}: fastest of order 4 {b['order4'][1]} / fastest second-order {b['second'][1]}: "
                f"{r['ratio_order4']:.3f} of the CPU time at error {TARGET:g}"
            )
