"""Native kernels run for many members: the members' pool of threads and :class:`MemberKernel`.

A native kernel of one member's function (a chunk loop, the replay of a chunk and its derivatives)
runs an ensemble's members, or the members of a ``jax.vmap`` of :func:`livens.flow`, through
:class:`MemberKernel`: the single kernel member by member, or a lane kernel of the same function
(:mod:`livens.engine.native.member_lanes`) several members per call, each lane computing the single
kernel's operations, so that every member's outputs are those of its own call, to the bit. Its
groups of members go to :func:`spread`, one pool of threads for every run of the process (a native
kernel releases the GIL, so the threads run kernels side by side); the engine compiles several
kernels side by side on the same pool (:func:`livens.engine.native_kernels`: the C compiler runs in
processes of its own).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from .options import size_policy

THREAD_PREFIX = "livens-member"
"""The name every thread of the members' pool (:func:`spread`) begins with."""

_POOL: list = []  # the members' pool, made at the first need (spread)
_POOL_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it makes its own
    os.register_at_fork(after_in_child=_POOL.clear)


_CORES = os.cpu_count() or 1


def _workers(tasks: int) -> int:
    return max(1, min(_CORES, tasks))


def spread(fn, items) -> list:
    """``[fn(x) for x in items]``, the items spread over the members' pool where there are several
    of both: one pool for the whole process, of one thread per core (named :data:`THREAD_PREFIX`),
    made at the first need and kept for the next run. ``fn`` must not itself call :func:`spread`
    (a task waiting for tasks behind it in the same pool could wait for ever)."""
    items = list(items)
    if _workers(len(items)) == 1:
        return [fn(x) for x in items]
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=_CORES, thread_name_prefix=THREAD_PREFIX))
        pool = _POOL[0]
    return list(pool.map(fn, items))


class MemberKernel:
    """A native kernel of one member's function (a chunk loop, or the replay of a chunk) run for any
    number of members: through ``single``, the kernel of one member, one member per call, or
    through ``lanes``, a lane kernel of the same function (:mod:`livens.engine.native.member_lanes`)
    that runs :attr:`lanes` members per call, each lane computing the single kernel's operations,
    so that every member's outputs are those of its own call, to the bit.

    The lane kernel runs the members where at least ``lanes_from`` of them are to run (always where
    there is no single kernel) and the lane kernel's scratch arrays, ``max_lanes`` times the single
    kernel's, stay within :attr:`SizePolicy.lane_scratch_bytes <livens.engine.SizePolicy>`;
    ``make_lanes``, where given instead of ``lanes``, makes it at that first need (or returns None:
    the single kernel then runs every member). A lane kernel's last group is filled up with copies
    of its last member, whose outputs are dropped. The groups go to the members' pool
    (:func:`spread`); each thread keeps a lane kernel's buffers from one call to the next."""

    def __init__(self, single=None, lanes=None, *, make_lanes=None, lanes_from: int = 1, max_lanes: int = 8):
        self.single, self._lanes, self._make_lanes, self.lanes_from = single, lanes, make_lanes, lanes_from
        self.max_lanes = max_lanes
        self._local = threading.local()

    @property
    def lanes(self) -> int:
        """Members per call of the lane kernel; 0 where none has been made."""
        return self._lanes.lanes if self._lanes is not None else 0

    @property
    def single_only(self) -> bool:
        """Whether every member runs through the single kernel: there is one, and no lane kernel
        has been made or is still to be made at a first need."""
        return self.single is not None and self._lanes is None and self._make_lanes is None

    @property
    def memory_bound(self) -> bool:
        """Whether a lane kernel of the single kernel would hold more scratch than
        :attr:`SizePolicy.lane_scratch_bytes <livens.engine.SizePolicy>`."""
        return getattr(self.single, "scratch", 0) * self.max_lanes > size_policy().lane_scratch_bytes

    def _lane_kernel(self):
        if self._make_lanes is not None:
            self._lanes, self._make_lanes = self._make_lanes(), None
        return self._lanes

    def turns(self) -> tuple[dict, dict]:
        """Two dicts of the calling thread, kept from one run to the next, for :meth:`run`'s
        ``buffers``: a run of many chunks that uses them in turn keeps each chunk's outputs while
        the next one runs."""
        if not hasattr(self._local, "turns"):
            self._local.turns = ({}, {})
        return self._local.turns

    def run(self, members, args_of, take, buffers: dict | None = None) -> None:
        """The kernel for the members ``members`` (indices), group by group: ``args_of(idx)`` gives
        the kernel's arguments for the members ``idx``, and ``take(idx, outputs)`` is given the
        kernel's outputs for them, in the group's thread: ``idx`` an array of the lane kernel's
        members (arguments and outputs member-first), or an integer, the one member of a call of
        the single kernel (its arguments and outputs without the members' axis). The outputs may be
        views of a buffer that the thread's next call overwrites: ``take`` copies what it keeps.
        Groups are disjoint, so ``take`` may write their rows of shared arrays without a lock.
        ``buffers``: where the members are one group of the lane kernel, the dict that keeps its
        buffers (:class:`~livens.engine.native.build.Kernel`) in place of the thread's own (a caller
        that alternates two keeps the outputs of one call while the next runs)."""
        members = np.asarray(members, np.int64)
        many = (members.size >= self.lanes_from and not self.memory_bound) or self.single is None
        lanes = self._lane_kernel() if many else None
        if lanes is None:

            def one(b):
                take(b, self.single(*args_of(b)))

            spread(one, members)
            return
        L = lanes.lanes
        groups = [members[i : i + L] for i in range(0, members.size, L)]
        own = buffers if len(groups) == 1 else None  # one group: it runs in the calling thread

        def group(bs):
            held = own
            if held is None:
                if not hasattr(self._local, "buffers"):
                    self._local.buffers = {}
                held = self._local.buffers
            idx = np.concatenate([bs, np.full(L - bs.size, bs[-1])])
            out = lanes(*args_of(idx), buffers=held)
            take(bs, jax.tree_util.tree_map(lambda a: a[: bs.size], out))

        spread(group, groups)


__all__ = ["MemberKernel", "THREAD_PREFIX", "spread"]
