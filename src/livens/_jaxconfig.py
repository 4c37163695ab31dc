"""float64 everywhere, set before any array is created.

Also: HDF5 file locking off (before h5py loads), so that a streamed result file can be read while
the run that writes it is still going (see :mod:`livens.stream`).

And JAX's persistent compilation cache: a compiled time step is stored on disk, so that
a second process running the same (example, scheme) pair skips XLA's compilation. The cache lives
in ``$LIVENS_COMPILATION_CACHE`` if that names a directory, else in the user cache directory
(``$XDG_CACHE_HOME/livens/jax`` or ``~/.cache/livens/jax``; ``~/Library/Caches/livens/jax`` on
macOS; ``%LOCALAPPDATA%\\livens\\jax`` on Windows). ``LIVENS_COMPILATION_CACHE=0`` (or ``off``)
switches it off; a cache directory already given to JAX (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config``) is left as it is.
"""
import os
import sys

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def _user_cache_dir() -> str:
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    elif os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "livens", "jax")


def compilation_cache_dir():
    """The directory of the persistent compilation cache livens asks for, or None when off."""
    setting = os.environ.get("LIVENS_COMPILATION_CACHE", "").strip()
    if setting.lower() in ("0", "off", "false", "no", "none"):
        return None
    return setting if setting and setting.lower() not in ("1", "on", "true", "yes") else _user_cache_dir()


def _enable_compilation_cache():
    path = compilation_cache_dir()
    if path is None or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # read-only home, etc.: run without the cache
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


_enable_compilation_cache()
