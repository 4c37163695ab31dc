"""The cache of native libraries (livens.engine.native.cache): stable names, verified and atomic
entries, private directories, a bounded size, compiles with a time limit.

Every case that could crash the interpreter (loading a damaged library) runs in a child process,
so that a crash fails the test instead of ending the test run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from livens.engine import native
from livens.engine.native import build, cache

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache directory under ``tmp_path``, checked anew (the process remembers its checks)."""
    monkeypatch.setenv("LIVENS_COMPILATION_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "_CHECKED", {})
    monkeypatch.setattr(cache, "_WARNED", set())
    return tmp_path / "native"


def _child(code: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


COUNT_COMPILES = """
import livens as lv
from livens.engine import native
from livens.engine.native import cache
compiles = []
original = cache._compile
def counted(cc, opts, source, lib_path):
    compiles.append(opts[0])
    return original(cc, opts, source, lib_path)
cache._compile = counted
"""


def test_a_second_process_loads_every_kernel_without_compiling(tmp_path):
    """The key must not change from process to process (it held the compiler's temporary file name):
    the second process, small kernels and the -O2 library of a large one alike, compiles nothing."""
    code = (
        COUNT_COMPILES
        + """
for example, scheme in (("pendulum-3d", "VI-S"), ("heavy-top", "EM")):
    p = lv.examples.load(example)
    s = lv.simulate(p, scheme, t_end=20 * p.h, chunk=10, progress=False, backend="native")
    assert s.meta["backend"] == "native", s.meta
    native.wait()
print(len(compiles), sorted(set(compiles)))
"""
    )
    env = {"LIVENS_COMPILATION_CACHE": str(tmp_path)}
    first = _child(code, env)
    assert first.returncode == 0, first.stderr
    n_first = int(first.stdout.split()[0])
    assert n_first >= 2
    libraries = sorted(p.name for p in (tmp_path / "native").glob("*.so"))
    second = _child(code, env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split()[0] == "0", second.stdout
    assert sorted(p.name for p in (tmp_path / "native").glob("*.so")) == libraries  # nothing new


def test_the_target_options_hold_no_file_names():
    cc = native.compiler()
    if not build.is_gcc(cc):
        pytest.skip("the target options are GCC's")
    line = '/usr/lib/gcc/cc1 -quiet /dev/null "-march=znver3" -mavx2 --param "l1-cache-size=32" -o /tmp/ccwIQb4p.s'
    assert build.target_options(line) == "-march=znver3 -mavx2 l1-cache-size=32"
    build._TARGET.pop(cc, None)
    first = build.native_target(cc)
    build._TARGET.pop(cc, None)
    assert build.native_target(cc) == first and "/tmp" not in first


def _square(x):
    return x * x + 1.0


X = np.arange(4.0)


def _kernel_library(directory) -> str:
    (lib,) = [p for p in directory.glob("*.so")]
    return str(lib)


LOAD_SQUARE = """
import numpy as np, warnings
from livens.engine import native
warnings.simplefilter("always")
k = native.compile_function(lambda x: x * x + 1.0, np.arange(4.0))
print(k(np.arange(4.0)).tolist())
"""


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "empty", "no hash"])
def test_a_damaged_library_is_detected_and_replaced(fresh, damage):
    """Before the fix a truncated library crashed every later run (SIGBUS), random bytes gave
    SIGSEGV inside dlopen, and an empty file a warning on every run."""
    env = {"LIVENS_COMPILATION_CACHE": str(fresh.parent)}
    first = _child(LOAD_SQUARE, env)
    assert first.returncode == 0, first.stderr
    lib = _kernel_library(fresh)
    data = open(lib, "rb").read()
    if damage == "truncated":
        open(lib, "wb").write(data[: len(data) // 2])
    elif damage == "random bytes":
        open(lib, "wb").write(np.random.default_rng(0).bytes(len(data)))
    elif damage == "empty":
        open(lib, "wb").close()
    else:
        os.remove(lib + ".sha256")
    again = _child(LOAD_SQUARE, env)
    assert again.returncode == 0, (again.returncode, again.stderr)
    assert again.stdout.strip() == "[1.0, 2.0, 5.0, 10.0]"
    if damage != "no hash":
        assert "damaged" in again.stderr
    assert cache.verified(lib)  # compiled again, with its hash
    third = _child(LOAD_SQUARE, env)  # and loaded from now on, without a word
    assert third.returncode == 0 and "damaged" not in third.stderr


PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w"); if (f) { fputs("ran", f); fclose(f); }
}
void livens_kernel(void **a) { double *y = (double *)a[1]; for (int i = 0; i < 4; i++) y[i] = 42.0; }
"""


def _plant(lib: str, marker, with_hash: bool) -> None:
    cc = native.compiler()
    src = lib + ".planted.c"
    open(src, "w").write(f'#define MARKER "{marker}"\n' + PLANTED)
    subprocess.run([*cache.compiler_words(cc), "-shared", "-fPIC", "-o", lib, src], check=True)
    os.remove(src)
    if with_hash:
        open(lib + ".sha256", "w").write(cache._digest_file(lib) + "\n")


def test_a_planted_library_is_not_loaded(fresh, tmp_path):
    """A library put in place of a cached one (its name is predictable) is not loaded: its hash
    does not match; it is replaced by the compiled one."""
    env = {"LIVENS_COMPILATION_CACHE": str(fresh.parent)}
    assert _child(LOAD_SQUARE, env).returncode == 0
    lib = _kernel_library(fresh)
    marker = tmp_path / "marker"
    _plant(lib, marker, with_hash=False)
    run = _child(LOAD_SQUARE, env)
    assert run.returncode == 0 and run.stdout.strip() == "[1.0, 2.0, 5.0, 10.0]", run.stderr
    assert not marker.exists()


def test_a_cache_writable_by_others_is_refused(fresh, tmp_path):
    """Where others may write, they may also write the hash: such a directory is not used at all
    (a warning names it and the fix) and a library planted there, hash and all, never runs."""
    env = {"LIVENS_COMPILATION_CACHE": str(fresh.parent)}
    assert _child(LOAD_SQUARE, env).returncode == 0
    lib = _kernel_library(fresh)
    marker = tmp_path / "marker"
    _plant(lib, marker, with_hash=True)
    os.chmod(fresh, 0o777)
    run = _child(LOAD_SQUARE, env)
    assert run.returncode == 0 and run.stdout.strip() == "[1.0, 2.0, 5.0, 10.0]", run.stderr
    assert not marker.exists()
    assert "writable by group and others" in run.stderr and "chmod go-w" in run.stderr
    os.chmod(fresh, 0o700)  # the user's fix: the planted library (with its matching hash) is now the user's own
    assert cache.unsafe(str(fresh)) is None


def test_new_directories_and_libraries_are_private_whatever_the_umask(fresh):
    old = os.umask(0)
    try:
        native.compile_function(_square, X)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700
    for p in fresh.iterdir():
        assert stat.S_IMODE(os.stat(p).st_mode) & 0o077 == 0, p


@pytest.mark.skipif(hasattr(os, "getuid") and os.getuid() == 0, reason="root writes anywhere")
def test_a_read_only_cache_is_named_as_such(fresh):
    native.compile_function(_square, X)
    os.chmod(fresh, 0o500)
    try:
        cache._CHECKED.clear()
        with pytest.warns(RuntimeWarning, match="is not writable"):
            k = native.compile_function(lambda x: x * 3.0, X)
        np.testing.assert_array_equal(k(X), X * 3.0)
    finally:
        os.chmod(fresh, 0o700)


def test_the_cache_keeps_the_least_recently_used_within_its_limit(fresh, monkeypatch):
    fns = [lambda x, c=c: x * x + c for c in (1.0, 2.0, 3.0)]
    native.compile_function(fns[0], X)
    size = os.path.getsize(_kernel_library(fresh))
    monkeypatch.setenv("LIVENS_NATIVE_CACHE_MB", str(2.5 * size / 2**20))  # room for two
    native.compile_function(fns[1], X)
    time.sleep(0.05)
    native.compile_function(fns[0], X)  # used again: the second is now the least recently used
    time.sleep(0.05)
    names = {p.name for p in fresh.glob("*.so")}
    native.compile_function(fns[2], X)
    left = {p.name for p in fresh.glob("*.so")}
    assert len(left) == 2
    first = cache.path(
        build._parts(native.compiler(), build.flags(native.compiler()), _source(fns[0])), "livens_kernel"
    )
    assert os.path.basename(first) in left and len(names & left) == 1
    for lib in fresh.glob("*.so"):
        assert cache.verified(str(lib))
    assert not [p for p in fresh.iterdir() if p.name.endswith(".sha256") and not p.with_suffix("").exists()]


def _source(fn) -> str:
    return build.trace_function(fn, X).source


def test_stale_temporary_files_are_removed(fresh):
    fresh.mkdir(mode=0o700)
    old = time.time() - 2 * cache.STALE_S
    stale = [fresh / f"{cache.TMP_PREFIX}abc.c", fresh / "tmpk3j2.c", fresh / "tmpk3j2.so", fresh / "orphan_1234.so"]
    recent = fresh / f"{cache.TMP_PREFIX}now.c"  # a compile of another process, under way
    for p in [*stale, recent]:
        p.write_text("x")
    for p in stale:
        os.utime(p, (old, old))
    native.compile_function(_square, X)
    assert not any(p.exists() for p in stale) and recent.exists()


def test_a_hanging_compiler_is_stopped(fresh, tmp_path, monkeypatch):
    """A compiler that never ends is stopped, with its children, after LIVENS_NATIVE_COMPILE_TIMEOUT."""
    pidfile = tmp_path / "child.pid"
    cc = tmp_path / "stuckcc"
    cc.write_text(
        f'#!/bin/sh\ncase "$1" in --version) echo stuckcc 1.0; exit 0;; esac\nsleep 300 &\necho $! > {pidfile}\nwait\n'
    )
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("LIVENS_NATIVE_COMPILE_TIMEOUT", "1")
    t0 = time.perf_counter()
    with pytest.raises(native.CompileError, match="did not finish within 1 s"):
        native.compile_function(_square, X)
    assert time.perf_counter() - t0 < 10
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    try:
        with open(f"/proc/{pid}/status") as f:
            state = [ln for ln in f if ln.startswith("State:")][0]
        assert "Z" in state or "X" in state, state  # killed (a zombie until reaped)
    except FileNotFoundError:
        pass
    assert not [p for p in fresh.iterdir() if p.name.startswith(cache.TMP_PREFIX)]


def test_a_compiler_command_of_several_words_and_a_cpp_compiler(fresh, monkeypatch):
    """$CC of several words (``ccache gcc``, ``gcc -O1``) was "no C compiler found"; a C++
    compiler left a library without the kernel's function."""
    gcc = build._resolve("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    monkeypatch.setenv("CC", "gcc -O1")
    assert native.compiler() == f"{gcc} -O1"
    np.testing.assert_array_equal(native.compile_function(lambda x: x * 5.0, X)(X), X * 5.0)
    if build._resolve("g++") is not None:
        monkeypatch.setenv("CC", "g++")
        np.testing.assert_array_equal(native.compile_function(lambda x: x * 7.0, X)(X), X * 7.0)
    monkeypatch.setenv("CC", "nosuchcache gcc")
    assert native.compiler() is None
    with pytest.raises(native.CompileError, match="names 'nosuchcache', which is not an executable"):
        native.compile_function(lambda x: x * 9.0, X)


def test_processes_and_threads_compiling_one_kernel_take_turns(fresh):
    """Four processes at once: one compiles, the others load its library; threads the same."""
    env = {"LIVENS_COMPILATION_CACHE": str(fresh.parent)}
    code = COUNT_COMPILES + LOAD_SQUARE + "print(len(compiles))\n"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert sorted(o[0].split()[-1] for o in outs) == ["0", "0", "0", "1"]
    assert len(list(fresh.glob("*.so"))) == 1

    compiles = []
    original = cache._compile

    def counted(*args):
        compiles.append(1)
        return original(*args)

    results, errors = [], []

    def work():
        try:
            results.append(native.compile_function(lambda x: x * 11.0, X)(X))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    cache._compile = counted
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        cache._compile = original
    assert not errors and len(results) == 4 and len(compiles) == 1


def test_a_compiler_that_fails_silently_is_named_with_its_exit_status(fresh, monkeypatch):
    """A compiler that fails without a word (``CC=false``) left a message ending in "failed: "."""
    false = build._resolve("false")
    if false is None:
        pytest.skip("no false(1)")
    monkeypatch.setenv("CC", false)
    with pytest.raises(native.CompileError, match=r"failed \(exit status 1\): it printed nothing"):
        native.compile_function(lambda x: x * 11.0, X)
