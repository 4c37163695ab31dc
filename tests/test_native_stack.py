"""The records of a large chunk live off the C stack: a kernel whose scan keeps 2.5 MB of records
runs in a thread with a 1 MiB stack (it ended the interpreter with SIGSEGV when the records were
local arrays). It runs in a child process, so that a crash fails the test, not the test run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from livens.engine import native
from livens.engine.native import build

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

SMALL_STACK = """
import threading
import jax, jax.numpy as jnp, numpy as np
from livens.engine import native

def chunk(x):
    def step(c, _):
        c = c + 0.001 * jnp.sin(c)
        return c, c
    return jax.lax.scan(step, x, None, length=20000)

x = np.linspace(0.0, 1.0, 16)
LANES = {lanes}
if LANES:
    k = native.compile_function(chunk, x, lanes=LANES)
    args = (np.stack([x + 0.01 * l for l in range(LANES)]),)
    want = jax.vmap(jax.jit(chunk))(*args)
else:
    k = native.compile_function(chunk, x)
    args = (x,)
    want = jax.jit(chunk)(x)
assert k.scratch >= 20000 * 16 * 8 * max(LANES, 1), k.scratch
out = []
threading.stack_size(1 << 20)
t = threading.Thread(target=lambda: out.append(k(*args)))
t.start()
t.join()
for g, w in zip(jax.tree_util.tree_leaves(out[0]), jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-14, atol=0)  # the C library's sin and XLA's, to round-off
print("ok")
"""


@pytest.mark.parametrize("lanes", [0, 8])
def test_records_of_a_large_chunk_fit_a_thread_with_a_small_stack(lanes):
    if lanes and not build.is_gcc(native.compiler()):
        pytest.skip("lane kernels need GCC")
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SMALL_STACK.format(lanes=lanes))],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert run.stdout.strip() == "ok"
