"""The priority of the native backend's background compile where Linux schedules sessions as groups
(autogroup): a niceness counts only among the processes of one group, and each compile runs in a
session of its own, so the ``-O2`` compile that nothing waits for has its session's priority lowered
too (``/proc/<pid>/autogroup``); the ``-O0`` compile that the first call waits for keeps the
process's. No timing is asserted here."""

from __future__ import annotations

import os
import re
import stat

import jax.numpy as jnp
import numpy as np
import pytest

from livens.engine import native
from livens.engine.native import build as native_build
from livens.engine.native import cache as native_cache

pytestmark = [
    pytest.mark.skipif(native.compiler() is None, reason="no C compiler"),
]


def _group_nice(text: str) -> int | None:
    """The niceness of a session's group, from what /proc/<pid>/autogroup says ("/autogroup-N nice K");
    None where it says nothing of the kind (some containers' kernels have the file but an empty one)."""
    found = re.search(r"nice\s+(-?\d+)", text)
    return None if found is None else int(found.group(1))


def _own_group_nice() -> int | None:
    """This process's session group niceness, or None where Linux does not schedule by autogroup here."""
    try:
        with open("/proc/self/autogroup") as f:
            return _group_nice(f.read())
    except OSError:
        return None


def test_the_background_compile_runs_in_a_session_of_lower_priority(tmp_path, monkeypatch):
    """The compiler of the -O2 library (background) runs in a session whose group is
    BACKGROUND_NICE lower than this process's; the -O0 one's keeps this process's group
    niceness. Each compile's shell, after the compile, logs its session group's niceness (the
    -O2 one waits up to 5 s for it to be lowered: it is lowered just after the compiler starts)."""
    own = _own_group_nice()
    if own is None:
        pytest.skip("no autogroup scheduling here (/proc/self/autogroup absent or says no niceness)")
    want = min(19, os.getpriority(os.PRIO_PROCESS, 0) + native_cache.BACKGROUND_NICE)
    if own >= want:
        pytest.skip("this process's session already runs at the lowest priority")
    monkeypatch.setenv("LIVENS_COMPILATION_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native_cache, "_CHECKED", {})
    monkeypatch.setattr(native_cache, "_WARNED", set())
    monkeypatch.setattr(native_build, "LARGE_SOURCE", 0)
    real = native.compiler()
    log = tmp_path / "compiles.log"
    script = tmp_path / "cc.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'{real} "$@"; rc=$?\n'
        'case " $* " in *" -O2 "*) i=0; while [ $i -lt 50 ] && grep -q "nice 0$" /proc/$$/autogroup; '
        "do sleep 0.1; i=$((i+1)); done;; esac\n"
        f'echo "$(cat /proc/$$/autogroup)|$*" >> "{log}"\n'
        "exit $rc\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(script))

    x = np.linspace(0.0, 1.0, 5)
    k = native.compile_function(lambda v: jnp.cos(v) * v + 1.0, x)
    quick = np.asarray(k(x))
    native.wait()
    assert k.level == "-O2"
    np.testing.assert_array_equal(np.asarray(k(x)), quick)
    seen = {}
    for line in log.read_text().splitlines():
        group, args = line.split("|", 1)
        words = args.split()
        if "-shared" in words:
            seen[next(w for w in words if w.startswith("-O"))] = _group_nice(group)
    assert seen == {"-O0": own, "-O2": want}, seen
