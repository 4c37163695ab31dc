"""The persistent cache entries of livens' XLA compiles are kept back while a run compiles and
written after it (livens.engine.xla.write_cache_entries), by livens.engine.wait, or at the process's
exit: a second process still finds every program of the first in the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

COMPILE = """
import json, os, sys
import jax, jax.numpy as jnp
from livens import engine
from livens.engine import xla

directory = os.environ["LIVENS_COMPILATION_CACHE"]
entries = lambda: sorted(f for f in os.listdir(directory) if f.startswith("jit_scaled"))
options = xla.compiler_options()


def scaled(x):
    return jnp.sin(x) * 3.0 + 17.5


lowered = jax.jit(scaled, compiler_options=options).lower(jax.ShapeDtypeStruct((7,), jnp.float64))
xla.compile_lowered(lowered, options)
kept = entries()
if sys.argv[1] == "wait":
    engine.wait()
print(json.dumps({"kept": kept, "after": entries()}))
"""

RUN = """
import json, logging, sys
import jax
import livens as lv

misses = []


class Misses(logging.Handler):
    def emit(self, record):
        if "CACHE MISS" in record.getMessage():
            misses.append(record.getMessage())


jax.config.update("jax_log_compiles", True)
logging.getLogger("jax").addHandler(Misses())
logging.getLogger("jax").setLevel(logging.DEBUG)
p = lv.examples.load("three-bar-swing", n_elements=2)
s = lv.simulate(p, "vi-nullspace", h=p.h, t_end=3 * p.h, progress=False, backend="xla")
print(json.dumps({"misses": len(misses), "backend": s.meta["backend"], "q": s.q[-1].tolist()}))
"""


def _python(code: str, cache: Path, *args: str) -> dict:
    env = dict(os.environ, LIVENS_COMPILATION_CACHE=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["wait", "exit"])
def test_an_entry_is_kept_back_at_the_compile_and_written_by_wait_or_at_exit(tmp_path, how):
    out = _python(COMPILE, tmp_path, how)
    assert out["kept"] == []  # nothing written while livens compiles
    if how == "wait":
        assert len(out["after"]) == 1  # written by engine.wait()
    # the process's exit writes what is still kept back
    assert len([f for f in os.listdir(tmp_path) if f.startswith("jit_scaled")]) == 1


def test_a_second_process_finds_every_program_of_a_run_in_the_cache(tmp_path):
    first = _python(RUN, tmp_path)
    assert first["backend"] == "xla" and first["misses"] > 0
    second = _python(RUN, tmp_path)
    assert second["misses"] == 0  # the start, the loop and the band search's program: all written
    assert second["q"] == first["q"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
def test_a_forked_child_compiles_while_a_parent_thread_held_the_compile_lock():
    """A thread of the parent that holds the compile lock (a compile beside the calling thread, a
    cache write) does not exist in a forked child: the child takes the lock at once, and keeps back
    none of the parent's entries."""
    import threading

    from livens.engine import xla

    held, release = threading.Event(), threading.Event()

    def hold():
        with xla.COMPILE_LOCK:
            xla._KEPT.append(("the parent's entry", (), {}))
            held.set()
            release.wait(10)
            xla._KEPT.clear()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only where the lock is free and nothing is kept back
            ok = xla.COMPILE_LOCK.acquire(timeout=5) and not xla._KEPT
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join(10)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
