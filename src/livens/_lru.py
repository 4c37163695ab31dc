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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LRU(OrderedDict):
    """A dict of at most ``maxsize`` entries that drops the least recently used one."""

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = int(maxsize)

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
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)


CompiledCache = LRU
"""The name under which the compiled programs' caches use :class:`LRU`."""

__all__ = ["LRU", "CompiledCache"]
