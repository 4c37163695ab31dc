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

And the options XLA compiles livens' programs with (:func:`jit`): on the CPU, XLA's newer MLIR
fusion emitters are switched off (``xla_cpu_use_fusion_emitters``); the classic emitters compile
the large time loops of the beams and the double four-bar in about two thirds of the time, and the
benchmark's loops run as fast with them but one (livens-midpoint on the 40-element swing runs slower;
``python -m benchmarks``, README "XLA's compilation"). Where the installed jaxlib does not know the option,
or ``XLA_FLAGS`` names it, livens' programs compile with XLA's defaults.
"""
import functools
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


#: XLA's compile options for livens' own programs (see the module docstring)
XLA_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
#: added for a program that runs once or a few times: LLVM's optimization off (it compiles in about
#: half the time and runs about half as fast; :mod:`livens._tiered`)
ONCE_OPTIONS = {"xla_backend_optimization_level": 0}


@functools.cache
def _supported(options: tuple) -> dict:
    """The options (pairs) as a dict where this jaxlib takes them and ``XLA_FLAGS`` does not set
    them, else {} (found out once, by compiling the identity)."""
    flags = os.environ.get("XLA_FLAGS", "")
    options = {k: v for k, v in options if k not in flags}
    if not options:
        return {}
    try:
        jax.jit(lambda x: x, compiler_options=options).lower(0.0).compile()
    except Exception:  # noqa: BLE001 - an older jax (no compiler_options) or an XLA without the option
        return {}
    return options


def compiler_options(once: bool = False) -> dict:
    """:data:`XLA_OPTIONS` (and with ``once``, :data:`ONCE_OPTIONS`), each set where this jaxlib takes
    it and ``XLA_FLAGS`` does not set it."""
    options = dict(_supported(tuple(XLA_OPTIONS.items())))
    if once:
        options.update(_supported(tuple(ONCE_OPTIONS.items())))
    return options


def jit(fn, once: bool = False, **kwargs):
    """``jax.jit(fn, **kwargs)`` compiling with :func:`compiler_options` (``once``: for a program run
    once or a few times). Only for a program called at the top level: JAX refuses compile options
    on a ``jit`` called inside another traced function."""
    options = compiler_options(once)
    return jax.jit(fn, compiler_options=options, **kwargs) if options else jax.jit(fn, **kwargs)
