"""The cold first ``lv.simulate`` call of (example, scheme) pairs, old tree against new, as the
benchmark's first_call_s means it: for each pair and tree a fresh process with an empty compilation
cache (``LIVENS_COMPILATION_CACHE``), one warm-up call of another pair first (pendulum-3d ggl-vi, one
step: the imports and JAX's start-up not counted), then one step at the paper's h, timed: wall and
CPU time (the process's and its children's, the C compiler's processes included). The trees
alternate within each round, and their order swaps from round to round.

    python -m benchmarks.cold ROUNDS TREE [TREE ...] -- PAIR [PAIR ...]

TREE: a checkout's root (its ``src`` is imported; a second checkout: ``git worktree add``); PAIR:
``example:scheme`` or ``example:scheme:n_elements`` (the swing's size). Prints each run, then the
min and median of wall and CPU per pair and tree, and the load average."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1] + "/src")
import livens as lv

warm = lv.examples.load("pendulum-3d")
lv.simulate(warm, "ggl-vi", h=warm.h, t_end=warm.h, progress=False)
example, scheme, n = sys.argv[2], sys.argv[3], sys.argv[4]
p = lv.examples.load(example, n_elements=int(n)) if n != "-" else lv.examples.load(example)


def cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


c0, t0 = cpu(), time.perf_counter()
s = lv.simulate(p, scheme, h=p.h, t_end=p.h, progress=False)
wall, used = time.perf_counter() - t0, cpu() - c0
print(json.dumps({"wall": wall, "cpu": used, "backend": s.meta.get("backend"), "file": lv.__file__}))
"""


def first_call(tree: str, example: str, scheme: str, n: str) -> dict:
    """The timed first call of one pair in a fresh process importing ``tree``'s livens."""
    with tempfile.TemporaryDirectory(prefix="livens-cold-") as cache:
        env = dict(os.environ, LIVENS_COMPILATION_CACHE=cache)
        res = subprocess.run(
            [sys.executable, "-c", CHILD, tree, example, scheme, n], env=env, capture_output=True, text=True, cwd="/"
        )
    if res.returncode:
        return {"error": res.stderr.strip()[-300:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if "--" not in argv or len(argv) < 4:
        print(__doc__)
        return 2
    cut = argv.index("--")
    rounds, trees, pairs = int(argv[0]), argv[1:cut], argv[cut + 1 :]
    runs: dict = {}
    for r in range(rounds):
        for pair in pairs:
            example, scheme, *n = pair.split(":")
            for tree in trees if r % 2 == 0 else trees[::-1]:
                out = first_call(tree, example, scheme, n[0] if n else "-")
                if "file" in out and not out["file"].startswith(os.path.abspath(tree)):
                    out = {"error": f"imported {out['file']}, not {tree}'s livens"}
                runs.setdefault((pair, tree), []).append(out)
                print(r, pair, tree, json.dumps(out), f"load {os.getloadavg()[0]:.2f}", flush=True)
    print("pair, tree: wall min/median, cpu min/median (s)")
    for (pair, tree), outs in runs.items():
        walls, cpus = [o["wall"] for o in outs if "wall" in o], [o["cpu"] for o in outs if "cpu" in o]
        if walls:
            print(
                f"{pair:36s} {tree:24s} wall {min(walls):.3f}/{statistics.median(walls):.3f}"
                f"  cpu {min(cpus):.3f}/{statistics.median(cpus):.3f}"
            )
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
