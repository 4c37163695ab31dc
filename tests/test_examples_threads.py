"""The example registry under threads: ``lv.examples.load`` from eight threads at once, in a fresh
process (the registry fills at the first call), with a Dask-like pool of threads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CONCURRENT_LOADS = """
import threading
import livens as lv
barrier = threading.Barrier(8)
errors, problems = [], []
def work(name):
    barrier.wait()
    try:
        problems.append(lv.examples.load(name))
    except Exception as exc:
        errors.append(repr(exc))
names = ["pendulum-3d", "heavy-top", "double-four-bar", "pendulum-3d"] * 2
threads = [threading.Thread(target=work, args=(n,)) for n in names]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(problems), errors)
"""


def test_eight_threads_load_examples_concurrently_without_error():
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CONCURRENT_LOADS)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "8 []", run.stdout
