"""The cache of compiled native libraries: stable names, atomic and verified entries, private.

A library is kept under ``{name}_{key}.so``, where the key hashes everything that decides its
bytes: the C source, the compiler (its path and what ``--version`` prints), the flags and what
``-march=native`` means on this CPU (without the temporary file names that the compiler's own
command line holds). A second process running the same system and scheme finds the same name
and loads the library without compiling.

Each entry is written atomically: the compiler writes a temporary file in the cache directory,
which is flushed to disk (``fsync``) and renamed into place, with the SHA-256 of its bytes beside
it (``.so.sha256``, written the same way). Before a library is loaded (``dlopen`` runs the code of
its constructors), its bytes are hashed and compared with the stored hash: a truncated,
overwritten or half-written library, or one without its hash, is removed and compiled again, and
never loaded. Processes and threads compiling the same entry take turns through a lock file
(``.so.lock``, :func:`fcntl.flock`): the first compiles, the others load its library.

Loading a library runs code in this process, so the directory must be the user's own and
writable by no one else: a directory owned by another user, or writable by group or others (a
shared ``XDG_CACHE_HOME`` or ``LIVENS_COMPILATION_CACHE``), is refused with a warning that names
it and the fix, as is one this process cannot write; the process then keeps its libraries in a
private temporary directory removed at exit. New directories and libraries are created private
(mode 0700) whatever the umask.

The cache is bounded: beyond ``LIVENS_NATIVE_CACHE_MB`` megabytes of libraries (default
:data:`DEFAULT_LIMIT_MB`), the least recently used entries (a load marks its entry used) are
removed. Temporary files left by a process killed while compiling are removed once they are an
hour old. A compile that runs longer than ``LIVENS_NATIVE_COMPILE_TIMEOUT`` seconds (default
:data:`DEFAULT_TIMEOUT_S`) is stopped, with its compiler's child processes, and the run falls back
to XLA.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import hashlib
import hmac
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings

from .. import xla
from .codegen import Unsupported

FORMAT = "livens-native-1"
"""Part of every key: changed when what a library is (its calling convention) changes."""
DEFAULT_LIMIT_MB = 256
"""The cache's size limit in megabytes where ``LIVENS_NATIVE_CACHE_MB`` is not set."""
DEFAULT_TIMEOUT_S = 600
"""The limit of one compile in seconds where ``LIVENS_NATIVE_COMPILE_TIMEOUT`` is not set."""
TMP_PREFIX = "livens-tmp-"
"""The prefix of the temporary files of a compile (removed when stale)."""
STALE_S = 3600
"""Age in seconds after which a temporary file, or a library without its hash, is stale."""
BACKGROUND_NICE = 10
"""How much lower the priority of a compile that nothing waits for (an ``-O2`` library while the
``-O0`` one runs) is than this process's: it takes the CPU that the run's own work (its other
compiles, tracing, its first steps) leaves, rather than sharing it with that work. Each compile
runs in a session of its own; a background compile's session has this lower priority too, where
Linux schedules sessions as groups (:func:`_lower_session_priority`)."""
_BACKGROUND = threading.local()  # .on: the calling thread's compile runs at a lower priority (load)
_LOCK = threading.Lock()
_TMP: list[str] = []  # this process's private directory, where the cache directory is refused
_CHECKED: dict = {}  # cache directory -> the directory used (itself, or the private one)
_WARNED: set = set()
_RUNNING: set = set()  # (compiler process, its files) of compiles under way, stopped at exit


class CompileError(Unsupported):
    """The C compiler failed, is missing or timed out (the caller falls back to XLA)."""


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number; set it to a positive number or unset it.") from None
    if not value > 0:
        raise ValueError(f"{name}={text!r} must be positive; set it to a positive number or unset it.")
    return value


def compile_timeout() -> float:
    """Seconds one compile may take (``LIVENS_NATIVE_COMPILE_TIMEOUT``, default :data:`DEFAULT_TIMEOUT_S`)."""
    return _env_number("LIVENS_NATIVE_COMPILE_TIMEOUT", DEFAULT_TIMEOUT_S)


def size_limit() -> int:
    """Bytes of libraries the cache keeps (``LIVENS_NATIVE_CACHE_MB``, default :data:`DEFAULT_LIMIT_MB`)."""
    return int(_env_number("LIVENS_NATIVE_CACHE_MB", DEFAULT_LIMIT_MB) * 2**20)


def _warn_once(key, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _private_tmp() -> str:
    with _LOCK:
        if not _TMP:
            path = tempfile.mkdtemp(prefix="livens-native-")  # mode 0700
            _TMP.append(path)
            atexit.register(shutil.rmtree, path, True)
        return _TMP[0]


def unsafe(path: str) -> str | None:
    """Why the directory ``path`` must not hold libraries this process loads, or None where it
    may: it must be a directory owned by this user, writable by no one else, writable by us."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be used ({exc.strerror})"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by another user (uid {st.st_uid}), so a library planted there would run in this process"
    if st.st_mode & 0o022:
        return (
            f"is writable by {'group and others' if st.st_mode & 0o022 == 0o022 else 'group' if st.st_mode & 0o020 else 'others'} "
            f"(mode {oct(st.st_mode & 0o777)}), so a library planted there would run in this process; "
            f"fix: chmod go-w {shlex.quote(path)}"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable by this user"
    return None


def cache_dir() -> str:
    """The directory of the native libraries: ``native/`` inside JAX's persistent compilation
    cache (:func:`livens.engine.xla.compilation_cache_dir`) where that is on and safe (module
    docstring), else a private temporary directory of this process."""
    base = xla.compilation_cache_dir()
    if base is None:
        return _private_tmp()
    path = os.path.join(base, "native")
    if path in _CHECKED:
        return _CHECKED[path]
    try:
        old = os.umask(0o077)  # new directories private whatever the umask
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        finally:
            os.umask(old)
        why = unsafe(path)
    except OSError as exc:
        why = f"cannot be created ({exc.strerror})"
    if why is None:
        _clean(path)
        used = path
    else:
        _warn_once(
            ("dir", path),
            f"livens: the native kernel cache {path} {why}. This process compiles its native kernels into a "
            "private temporary directory instead (set LIVENS_COMPILATION_CACHE to a directory of your own "
            "to keep them between processes).",
        )
        used = _private_tmp()
    _CHECKED[path] = used
    return used


def compiler_words(cc: str) -> list[str]:
    """The compiler command ``cc`` (as ``$CC`` spells it: ``"ccache gcc"``, ``"gcc -m64"``) as words."""
    return shlex.split(cc)


def _digest_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(*paths: str) -> None:
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def verified(lib_path: str) -> bool:
    """Whether ``lib_path`` is a whole library of this cache: a regular file of this user,
    writable by no one else, whose bytes hash to the stored hash."""
    try:
        st = os.lstat(lib_path)
        with open(lib_path + ".sha256") as f:
            stored = f.read().strip()
        if not os.path.isfile(lib_path) or os.path.islink(lib_path):
            return False
        if (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
            return False
        return hmac.compare_digest(_digest_file(lib_path), stored)
    except OSError:
        return False


def key(parts) -> str:
    """The name's hash of ``parts`` (strings: the source, the compiler's identity, the flags, ...)."""
    return hashlib.sha256("\0".join([FORMAT, *parts]).encode()).hexdigest()[:32]


def _stop(proc) -> None:
    """Stop the compiler ``proc`` and the processes it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()


def _compile(cc: str, opts: tuple, source: str, lib_path: str) -> None:
    """Compile ``source`` with ``opts`` into ``lib_path`` and its hash (atomically: another process
    sees all of it or nothing; module docstring); at a lower priority (:data:`BACKGROUND_NICE`)
    where the calling thread compiles in the background (:func:`load`)."""
    directory = os.path.dirname(lib_path)
    fd, c_path = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".c", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_lib = c_path[:-2] + ".so"
    tmp_hash = c_path[:-2] + ".sha256"
    language = () if "-x" in opts else ("-x", "c")  # C even where $CC is a C++ compiler
    words = compiler_words(cc)
    entry = None
    timeout = compile_timeout()
    try:
        low = getattr(_BACKGROUND, "on", False)
        nice = shutil.which("nice") if low else None
        proc = subprocess.Popen(
            [
                *([nice, "-n", str(BACKGROUND_NICE)] if nice else []),
                *words,
                *opts,
                "-o",
                tmp_lib,
                *language,
                c_path,
                "-lm",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: stopped with its children
        )
        entry = (proc, c_path, tmp_lib, tmp_hash)
        _RUNNING.add(entry)
        if low and not nice:
            _lower_priority(proc)
        if low:
            _lower_session_priority(proc)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise CompileError(
                f"the C compiler {cc!r} did not finish within {timeout:g} s (LIVENS_NATIVE_COMPILE_TIMEOUT)"
            ) from None
        if proc.returncode != 0:
            said = err.strip()[:2000] or "it printed nothing"
            raise CompileError(f"the C compiler {cc!r} failed (exit status {proc.returncode}): {said}")
        os.chmod(tmp_lib, 0o700)
        _fsync(tmp_lib)
        digest = _digest_file(tmp_lib)
        with os.fdopen(os.open(tmp_hash, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(digest + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_lib, lib_path)  # a library without its hash is not loaded: hash last
        os.replace(tmp_hash, lib_path + ".sha256")
        try:
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    except OSError as exc:
        raise CompileError(f"cannot write the native library in {directory} ({exc.strerror})") from None
    finally:
        _RUNNING.discard(entry)
        _remove(c_path, tmp_lib, tmp_hash)


def _lower_priority(proc) -> None:
    """Lower the priority of the compiler ``proc`` and of its process group (the compiler proper it
    starts inherits it) by :data:`BACKGROUND_NICE`, where there is no ``nice`` command to start it
    with (which lowers it before the compiler runs); where the system does not allow it, nothing."""
    try:
        os.setpriority(os.PRIO_PGRP, proc.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICE))
    except (AttributeError, OSError):
        pass


def _lower_session_priority(proc) -> None:
    """Lower the priority of the session of the compiler ``proc`` (a session of its own: it and the
    compiler proper it starts) by :data:`BACKGROUND_NICE`, where Linux schedules sessions as groups
    (autogroup, ``/proc/<pid>/autogroup``): a niceness counts only among the processes of one group,
    and the groups share the CPU by their own niceness, so without this the background compile
    would take as much CPU as the compile the run waits for, in a session of its own too. Where
    the system has no such groups or refuses, nothing."""
    try:
        with open(f"/proc/{proc.pid}/autogroup", "w") as f:
            f.write(str(min(19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICE)))
    except (AttributeError, OSError):
        pass


@atexit.register
def _stop_compiles() -> None:
    """At exit, stop the background compiles (their threads are not waited for) and remove their files."""
    for proc, *paths in list(_RUNNING):
        _stop(proc)
        _remove(*paths)


class _FileLock:
    """An exclusive :func:`fcntl.flock` on ``path`` (between processes and between threads, each
    opening the file anew), waited for at most ``timeout`` seconds."""

    def __init__(self, path: str, timeout: float):
        self.path, self.timeout, self.fd = path, timeout, None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise CompileError(f"another process has compiled {self.path[:-5]} for more than {self.timeout:g} s")
            time.sleep(0.02)

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock


def _open(lib_path: str, name: str):
    try:
        lib = ctypes.CDLL(lib_path)
    except OSError as exc:
        raise CompileError(f"the compiled library {lib_path} cannot be loaded ({exc})") from None
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise CompileError(
            f"the library compiled from C has no function {name!r}: is $CC ({os.environ.get('CC', '')!r}) a C compiler?"
        ) from None
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    fn.restype = None
    fn._livens_lib = lib  # keep the library loaded as long as the function lives
    return fn


def path(parts, name: str) -> str:
    """Where the library of ``parts`` (:func:`key`) named ``name`` lives."""
    return os.path.join(cache_dir(), f"{name}_{key(parts)}.so")


def load(cc: str, opts: tuple, source: str, name: str, parts, background: bool = False) -> object:
    """The ctypes function ``name`` of ``source`` compiled by ``cc`` with ``opts``: from the cache
    where a verified library of ``parts`` is there, else compiled into it first (module docstring;
    ``background``: a compile that nothing waits for now, run at a lower priority, :data:`BACKGROUND_NICE`)."""
    lib_path = path(parts, name)
    if not verified(lib_path):
        try:
            with _FileLock(lib_path + ".lock", compile_timeout() + 60):
                if not verified(lib_path):
                    if os.path.exists(lib_path) or os.path.exists(lib_path + ".sha256"):
                        _warn_once(
                            ("damaged", lib_path),
                            f"livens: the cached native library {lib_path} was damaged or incomplete; it was removed and is compiled again.",
                        )
                    _remove(lib_path, lib_path + ".sha256")
                    _BACKGROUND.on = background
                    try:
                        _compile(cc, opts, source, lib_path)
                    finally:
                        _BACKGROUND.on = False
                    evict(os.path.dirname(lib_path), keep=lib_path)
        except OSError as exc:
            raise CompileError(
                f"the native kernel cache {os.path.dirname(lib_path)} cannot be written ({exc})"
            ) from None
    try:
        os.utime(lib_path + ".sha256")  # used now (least recently used eviction)
    except OSError:
        pass
    return _open(lib_path, name)


def _entries(directory: str) -> list:
    """(last use, bytes, library path) of the libraries in ``directory``."""
    out = []
    for entry in os.scandir(directory):
        if entry.name.endswith(".so") and not entry.name.startswith(TMP_PREFIX):
            try:
                size = entry.stat().st_size
                try:
                    used = os.stat(entry.path + ".sha256").st_mtime
                except OSError:
                    used = entry.stat().st_mtime
            except OSError:
                continue
            out.append((used, size, entry.path))
    return out


def evict(directory: str, keep: str | None = None) -> None:
    """Remove the least recently used libraries of ``directory`` until they hold at most
    :func:`size_limit` bytes (``keep``, the one just made, stays)."""
    entries = _entries(directory)
    total, limit = sum(e[1] for e in entries), size_limit()
    for _, size, lib in sorted(entries):
        if total <= limit:
            break
        if lib == keep:
            continue
        _remove(lib, lib + ".sha256")
        try:  # the lock file only where no one holds it
            fd = os.open(lib + ".lock", os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _remove(lib + ".lock")
            except OSError:
                pass
            finally:
                os.close(fd)
        except OSError:
            pass
        total -= size


def _clean(directory: str) -> None:
    """Remove what killed processes left in ``directory``: temporary files of a compile and
    libraries without their hash, once :data:`STALE_S` old."""
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat().st_mtime < STALE_S:
                continue
            old_tmp = entry.name.startswith("tmp") and entry.name.endswith((".c", ".so"))  # earlier releases
            if (
                entry.name.startswith(TMP_PREFIX)
                or old_tmp
                or (entry.name.endswith(".so") and not os.path.exists(entry.path + ".sha256"))
            ):
                _remove(entry.path)
        except OSError:
            pass
