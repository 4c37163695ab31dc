"""Bounded caches (least recently used entries kept): of compiled functions (long sessions that
compile for many systems), and of the objects derived from a System.

Every compiled time loop, rescue, diagnostic or vmapped helper holds XLA executables, and each
executable holds a few hundred memory mappings of machine code. A process that compiles a few
hundred of them (a whole test suite, ``livens reproduce all``, a parameter sweep over many systems)
reaches Linux's default limit of 65530 mappings per process, and XLA then crashes in its next
compilation (a segmentation fault in ``backend_compile_and_load`` or while
reading the persistent compilation cache). These caches therefore keep the most recently used
entries only; an evicted entry is compiled again on its next use (from the persistent compilation
cache, in well under a second).

Bounded caches are not enough on their own: JAX's own caches keep the executables of every
``jax.jit`` function still alive, and a long process (the test suite) still reached the limit. So
before a cache takes a new entry, :func:`relieve_mapping_pressure` counts the process's mappings
(on Linux, at most once a second): past :data:`PRESSURE` of the limit it empties every cache of this
module but for the entry each used last (the programs of the run in progress) and, outside any
trace, JAX's caches (``jax.clear_caches``), so that the executables nobody else holds are freed.
Programs compile again on their next use, from the persistent cache.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

PRESSURE = 0.5
"""The share of the process's mapping limit past which the caches are emptied."""
_CHECK_EVERY = 1.0  # seconds between two counts of the mappings
_CACHES: list = []  # weak references to every LRU
_LAST_CHECK = [0.0]


def _mapping_limit() -> int | None:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):  # not Linux: no known limit
        return None


_LIMIT = _mapping_limit()


def mapping_count() -> int | None:
    """The memory mappings of this process (Linux), else None."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return None


def _outside_traces() -> bool:
    try:
        from jax._src import core
    except ImportError:  # pragma: no cover - a JAX without it: leave JAX's caches alone
        return False
    check = getattr(core, "trace_state_clean", None)
    return bool(check()) if check is not None else False


def relieve_mapping_pressure(force: bool = False) -> bool:
    """Empty every :class:`LRU` but for its most recently used entry (and, outside any trace, JAX's
    caches) when the process's memory mappings exceed :data:`PRESSURE` of the system's limit (module
    docstring); with ``force``, empty them whatever the count. Returns whether the caches were
    emptied. Only the main thread acts: a worker thread's call returns False."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if not force:
        now = time.monotonic()
        if _LIMIT is None or now - _LAST_CHECK[0] < _CHECK_EVERY:
            return False
        _LAST_CHECK[0] = now
        count = mapping_count()
        if count is None or count < PRESSURE * _LIMIT:
            return False
    alive = [ref for ref in _CACHES if ref() is not None]
    _CACHES[:] = alive
    for ref in alive:
        cache = ref()
        if cache:  # keep the entry used last: the program of the run in progress, or of the one before
            key = next(reversed(cache))
            value = OrderedDict.__getitem__(cache, key)
            OrderedDict.clear(cache)
            OrderedDict.__setitem__(cache, key, value)
    if _outside_traces():
        import jax

        jax.clear_caches()
    gc.collect()
    return True


class LRU(OrderedDict):
    """A dict of at most ``maxsize`` entries that drops the least recently used one."""

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = int(maxsize)
        if len(_CACHES) >= 256 and len(_CACHES) % 256 == 0:  # drop the references to dead caches
            _CACHES[:] = [ref for ref in _CACHES if ref() is not None]
        _CACHES.append(weakref.ref(self))

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key in self:
            self.move_to_end(key)
            return super().__getitem__(key)
        return default

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def __setitem__(self, key, value):
        if key not in self:
            relieve_mapping_pressure()
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)


CompiledCache = LRU
"""The name under which the compiled programs' caches use :class:`LRU`."""

__all__ = ["LRU", "CompiledCache", "PRESSURE", "mapping_count", "relieve_mapping_pressure"]
