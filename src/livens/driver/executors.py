"""How the chunk loop of a run advances its members: the executors of the host loop.

Every executor holds the state of a run's B members and advances each member that has not
reached its stop by one chunk of steps per call of :meth:`advance`, returning, per member, the
node reached, whether a step failed, and one row of records per step (:mod:`livens.driver.records`):

- :class:`Single`: one member through the engine's compiled loop (a native kernel or XLA); the next
  chunk is dispatched from the device while the records of the last one are copied, on the guess
  that no step fails (XLA runs asynchronously);
- :class:`SingleNative`: one member through a native kernel known beforehand (the forward run of
  :func:`livens.flow`), a chunk per call, nothing dispatched ahead (a native kernel runs in the
  calling thread), keeping the state at each chunk's start where asked;
- :class:`Batched`: the loop ``vmap``-ped over the members, one XLA call per chunk for all of them;
- :class:`NativeMembers`: each member through the single run's native kernel, the members spread
  over one thread per CPU core (a kernel releases the GIL);
- :class:`NativeLanes`: the members :attr:`lanes` at a time through a lane kernel
  (:mod:`livens.engine.native.member_lanes`), the groups spread over one thread per core.

Each member takes exactly the steps of its single run; members of an ensemble agree with their
single runs to round-off (XLA's batched programs) or to the bit (native kernels).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np


def _workers(tasks: int) -> int:
    return max(1, min(os.cpu_count() or 1, tasks))


class _Members:
    """The state of B members, member-first arrays (NumPy or device), and the threads that run
    native kernels for them (made at the first need, ended by :meth:`close`)."""

    def __init__(self, state, history):
        self.state, self.history = state, history
        self._pool = None

    def _map(self, fn, items) -> None:
        items = list(items)
        if _workers(len(items)) == 1:
            for item in items:
                fn(item)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=_workers(self.members), thread_name_prefix="livens-member")
        list(self._pool.map(fn, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def discard(self):
        pass

    def member(self, b):
        """Member b's (state, history)."""
        return jax.tree_util.tree_map(lambda a: a[b], (self.state, self.history))

    def replace(self, b, state, history):
        """Member b's state and history set to (state, history) (after a rescue)."""

        def put(a, x):
            if isinstance(a, np.ndarray):
                a = a.copy()
                a[b] = np.asarray(x)
                return a
            return a.at[b].set(x)

        self.state, self.history = jax.tree_util.tree_map(put, (self.state, self.history), (state, history))


class Single:
    """One member through the engine's compiled chunk loop ``runner`` (module docstring)."""

    backend_name = None

    def __init__(self, runner, state, history, t_start, consts, chunk: int):
        self.runner, self.state, self.history = runner, state, history
        self.t_start, self.consts, self.chunk = np.float64(t_start), consts, chunk
        self.pending = None
        self.members = 1
        self.kernel = None  # the native kernel, once the first call has shown that one runs the loop

    @property
    def backend(self) -> str:
        return getattr(self.runner, "backend", None) or "xla"

    @property
    def reason(self):
        return getattr(self.runner, "reason", None)

    def _call(self, state, history, n0, n_stop):
        args = (state, history, self.t_start, n0, np.int64(n_stop), *self.consts[1:])
        if self.kernel:  # the same argument shapes chunk after chunk: the kernel itself, no lookup
            return self.kernel(*args)
        out = self.runner(*args)
        if self.kernel is None:
            native = getattr(self.runner, "backend", None) == "native"
            self.kernel = (native and self.runner.kernel(*args)) or False
        return out

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        n0, stop = int(n[0]), int(n_stop[0])
        if self.pending is None:
            self.pending = self._call(self.state, self.history, jnp.asarray(n0, jnp.int64), stop)
        state, history, n_dev, failed_dev, rows_dev = self.pending
        self.pending = None
        expected = min(n0 + self.chunk, stop)
        if expected < stop:  # the next chunk, from the device, while this one's records are copied
            self.pending = self._call(state, history, n_dev, stop)
        rows, n_new, failed = jax.device_get((rows_dev, n_dev, failed_dev))
        self.state, self.history = state, history
        if bool(failed) or int(n_new) != expected:
            self.pending = None
        return np.array([int(n_new)]), np.array([bool(failed)]), np.asarray(rows)[None]

    def member(self, b):
        return self.state, self.history

    def replace(self, b, state, history):
        self.state, self.history = state, history
        self.pending = None

    def discard(self):
        """Forget a chunk dispatched ahead (the host loop stops or changes course)."""
        self.pending = None

    def close(self):
        self.pending = None


class SingleNative(Single):
    """One member through the native kernel ``kernel`` of the chunk loop (module docstring).
    ``starts``: a tree of arrays (chunks, ...) like the state, or None; the state at the start of
    chunk c (node c * chunk) is written to row c before the chunk runs (the replayed derivatives of
    :func:`livens.flow` start there)."""

    backend = "native"
    reason = None

    def __init__(self, kernel, state, history, t_start, consts, chunk: int, starts=None):
        super().__init__(None, state, history, t_start, consts, chunk)
        self.kernel, self.starts = kernel, starts

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        n0 = int(n[0])
        if self.starts is not None:
            if n0 % self.chunk:  # a chunk ended early (not failed, not interrupted) and the run went on
                raise AssertionError(f"native run: a chunk ended at node {n0} (not a multiple of {self.chunk})")
            for dst, src in zip(jax.tree_util.tree_leaves(self.starts), jax.tree_util.tree_leaves(self.state)):
                dst[n0 // self.chunk] = src
        args = (self.t_start, np.int64(n0), np.int64(n_stop[0]), *self.consts[1:])
        self.state, self.history, n_new, failed, rows = self.kernel(self.state, self.history, *args)
        return np.array([int(n_new)]), np.array([bool(failed)]), np.asarray(rows)[None]


class Batched(_Members):
    """The members through one ``vmap``-ped XLA call per chunk (module docstring)."""

    backend = "xla"
    reason = None

    def __init__(self, runner, state, history, t_start, consts):
        super().__init__(state, history)
        self.runner, self.t_start, self.consts = runner, jnp.asarray(t_start, jnp.float64), consts
        self.members = int(jax.tree_util.tree_leaves(state)[0].shape[0])

    def close(self):
        pass

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        _, h, tol, max_iter, params, sys = self.consts
        self.state, self.history, n_new, failed, rows = self.runner(
            self.state,
            self.history,
            self.t_start,
            jnp.asarray(n),
            jnp.asarray(n_stop),
            jnp.asarray(h),
            jnp.asarray(tol),
            jnp.asarray(max_iter),
            params,
            sys,
        )
        rows, n_new, failed = jax.device_get((rows, n_new, failed))
        return np.asarray(n_new), np.asarray(failed), np.asarray(rows)


class NativeMembers(_Members):
    """Each member through the single run's native kernel, one thread per core (module docstring)."""

    backend = "native"
    reason = None

    def __init__(self, kernel, state, history, t_start, consts, chunk: int, width: int):
        state, history = jax.tree_util.tree_map(np.array, (state, history))  # writable copies
        super().__init__(state, history)
        self.kernel, self.t_start, self.consts, self.chunk, self.width = (
            kernel,
            np.float64(t_start),
            consts,
            chunk,
            width,
        )
        self.members = int(jax.tree_util.tree_leaves(state)[0].shape[0])

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        B = self.members
        _, h, tol, max_iter, params, sys = self.consts
        n_new, failed = n.copy(), np.zeros(B, bool)
        rows = np.zeros((B, min(self.chunk, int(np.max(n_stop - n))), self.width))
        results = {}

        def member(b):
            sb, hb = self.member(b)
            results[b] = self.kernel(
                sb, hb, self.t_start, np.int64(n[b]), np.int64(n_stop[b]), h, tol, max_iter, params, sys
            )

        alive = [b for b in range(B) if n[b] < n_stop[b]]
        self._map(member, alive)
        states = []
        for b in alive:
            sb, hb, nb, fb, rb = results[b]
            n_new[b], failed[b], rows[b] = int(nb), bool(fb), rb[: rows.shape[1]]
            states.append((b, sb, hb))
        for b, sb, hb in states:
            for a, x in zip(jax.tree_util.tree_leaves((self.state, self.history)), jax.tree_util.tree_leaves((sb, hb))):
                a[b] = x
        return n_new, failed, rows


class NativeLanes(_Members):
    """The members :attr:`lanes` at a time through a lane kernel, one thread per core (module
    docstring); the last group is filled up with copies of its last member, which take no step."""

    backend = "native"
    reason = None

    def __init__(self, kernel, state, history, t_start, consts, chunk: int, width: int):
        state, history = jax.tree_util.tree_map(np.array, (state, history))  # writable copies
        super().__init__(state, history)
        self.kernel, self.chunk, self.width = kernel, chunk, width
        self.lanes = L = kernel.lanes
        self.members = B = int(jax.tree_util.tree_leaves(state)[0].shape[0])
        self.groups = [np.arange(first, min(first + L, B)) for first in range(0, B, L)]
        self.args = jax.tree_util.tree_map(
            lambda x: np.broadcast_to(np.asarray(x), (L,) + np.shape(x)), (np.float64(t_start),) + tuple(consts[1:])
        )
        self.local = threading.local()  # each thread's kernel buffers, reused group after group

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        L = self.lanes
        n_new, failed = n.copy(), np.zeros(self.members, bool)
        rows = np.zeros((self.members, min(self.chunk, int(np.max(n_stop - n))), self.width))
        t_start, h, tol, max_iter, params, sys = self.args

        def group(g):
            bs = self.groups[g]
            lanes = np.concatenate([bs, np.full(L - bs.size, bs[-1])])
            real = np.arange(L) < bs.size
            stop = np.where(real, n_stop[lanes], n[lanes])  # the filling lanes take no step
            if not np.any(n[bs] < n_stop[bs]):
                return
            sb, hb = jax.tree_util.tree_map(lambda a: a[lanes], (self.state, self.history))
            if not hasattr(self.local, "buffers"):
                self.local.buffers = {}
            # the outputs are views of this thread's buffers: copied out before its next call
            out = self.kernel(
                sb,
                hb,
                t_start,
                n[lanes].astype(np.int64),
                stop.astype(np.int64),
                h,
                tol,
                max_iter,
                params,
                sys,
                buffers=self.local.buffers,
            )
            s2, h2, nb, fb, rb = out
            k = bs.size
            n_new[bs], failed[bs] = np.asarray(nb)[:k], np.asarray(fb)[:k]
            rows[bs] = np.asarray(rb)[:k, : rows.shape[1]]
            for a, x in zip(jax.tree_util.tree_leaves((self.state, self.history)), jax.tree_util.tree_leaves((s2, h2))):
                a[bs] = np.asarray(x)[:k]

        self._map(group, range(len(self.groups)))
        return n_new, failed, rows
