"""How the chunk loop of a run advances its members: the executors of the host loop.

Every executor holds the state of a run's B members and advances each member that has not
reached its stop by one chunk of steps per call of :meth:`advance`, returning, per member, the
node reached, whether a step failed, and one row of records per step (:mod:`livens.driver.records`):

- :class:`NativeMembers`: the members through a native kernel of one member's chunk loop
  (:class:`~livens.engine.MemberKernel`: the single run's kernel member by member, or a lane
  kernel :attr:`~livens.engine.MemberKernel.lanes` members at a time). It runs every native run of
  the host loop: the one member of :func:`livens.simulate`, the members of
  :func:`livens.simulate_ensemble`, and every native forward run of :func:`livens.flow` (one run, or
  the members of a ``jax.vmap`` of it, keeping the state at each chunk's start for the flow's
  derivatives, which replay the chunks through the same :class:`~livens.engine.MemberKernel`);
- :class:`Batched`: the loop ``vmap``-ped over the members, one XLA call per chunk for all of them;
- :class:`Dispatched`: one member through XLA's program of the loop (a single run that XLA runs);
  the next chunk is dispatched to the device while the records of the last one are copied, on the
  guess that no step fails (XLA runs asynchronously; a native kernel runs synchronously, and gains
  nothing from a chunk run ahead).

A native kernel run for many members (:class:`~livens.engine.MemberKernel`) and the members' one
pool of threads (:func:`~livens.engine.spread`, its threads named :data:`THREAD_PREFIX`) are the
engine's (:mod:`livens.engine.members`); this module names them too. Each member takes exactly the
steps of its single run; members of an ensemble agree with their single runs to round-off (XLA's
batched programs) or to the bit (native kernels).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..engine import MEMBER_THREAD_PREFIX as THREAD_PREFIX
from ..engine import MemberKernel, spread

__all__ = [
    "Batched",
    "Dispatched",
    "MemberKernel",
    "NativeMembers",
    "THREAD_PREFIX",
    "for_members",
    "member_index",
    "member_rows",
    "set_member_rows",
    "spread",
]


def member_index(idx):
    """``idx`` (members) as a slice where it is a run of consecutive members (every member of a
    ``jax.vmap``, usually), so that indexing with it gives views rather than copies; else as it is."""
    if np.ndim(idx) == 1 and np.size(idx) > 1:
        first, last = int(idx[0]), int(idx[-1])
        if last - first == idx.size - 1 and np.all(np.diff(idx) == 1):
            return slice(first, last + 1)
    return idx


def per_group(kept: dict, idx, make):
    """``make()`` for the group of members ``idx`` (an index array, or one member), made at its
    first need and kept in ``kept`` for the group's later chunks."""
    key = (np.ndim(idx), np.asarray(idx).tobytes())
    got = kept.get(key)
    if got is None:
        got = kept[key] = make()
    return got


def member_rows(tree, idx):
    """The rows ``idx`` of every leaf of a member-first tree (``idx`` an integer: one member's
    values, without the members' axis)."""
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[idx], tree)


def for_members(idx, tree):
    """Every leaf of ``tree`` (one value for all members) for the members ``idx``: repeated along a
    members' axis where ``idx`` is an array of them, as it is for one member (an integer)."""
    if np.ndim(idx) == 0:
        return tree
    return jax.tree_util.tree_map(lambda x: np.broadcast_to(np.asarray(x), (len(idx), *np.shape(x))), tree)


def set_member_rows(tree, idx, rows) -> None:
    """Rows ``idx`` of the member-first arrays of ``tree`` set to ``rows``."""
    for dst, src in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(rows)):
        dst[idx] = src


class _Members:
    """The state of B members, member-first arrays (NumPy or device)."""

    def __init__(self, state, history):
        self.state, self.history = state, history

    def close(self) -> None:
        pass

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


class Dispatched:
    """One member through XLA's program of the chunk loop (module docstring): ``runner``, the
    engine's loop of one member (:func:`livens.engine.single_loop`), which XLA runs."""

    backend = "xla"

    def __init__(self, runner, state, history, t_start, consts, chunk: int):
        self.runner, self.state, self.history = runner, state, history
        self.t_start, self.consts, self.chunk = np.float64(t_start), consts, chunk
        self.pending = None
        self.members = 1

    @property
    def reason(self):
        """Why XLA runs the loop where native code was possible in principle (None: by design)."""
        return getattr(self.runner, "reason", None)

    def _call(self, state, history, n0, n_stop):
        return self.runner(state, history, self.t_start, n0, np.int64(n_stop), *self.consts[1:])

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        n0, stop = int(n[0]), int(n_stop[0])
        if self.pending is None:
            # a NumPy scalar, as the loop was compiled for (an eager jnp.asarray compiles a program of its own)
            self.pending = self._call(self.state, self.history, np.int64(n0), stop)
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


class Batched(_Members):
    """The members through one ``vmap``-ped XLA call per chunk (module docstring)."""

    backend = "xla"
    reason = None

    def __init__(self, runner, state, history, t_start, consts):
        super().__init__(state, history)
        self.runner, self.t_start, self.consts = runner, jnp.asarray(t_start, jnp.float64), consts
        self.members = int(jax.tree_util.tree_leaves(state)[0].shape[0])

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
    """The members through a native kernel of one member's chunk loop (module docstring; ``kernel``:
    a :class:`~livens.engine.MemberKernel`), every member that has not reached its stop one chunk per call.
    ``consts``: the chunk loop's arguments after n0 (:meth:`~livens.driver.setup.Plan.consts`), the
    System's parameters (the last) shared by the members or, where ``member_sys`` is given, its
    member-first values instead. ``starts``: a member-first tree of arrays (B, chunks, ...) like the
    state, or None; the state of member b at the start of its chunk c (node c * chunk) is written to
    ``starts[b, c]`` before the chunk runs (the replayed derivatives of :func:`livens.flow` start
    there)."""

    backend = "native"
    reason = None

    def __init__(self, kernel, state, history, t_start, consts, chunk: int, width: int, starts=None, member_sys=None):
        self._one = None  # one member's (state, history) without the members' axis, where _advance_one keeps them
        state, history = jax.tree_util.tree_map(np.array, (state, history))  # writable copies
        super().__init__(state, history)
        self.kernel, self.chunk, self.width, self.starts = kernel, chunk, width, starts
        self.members = int(jax.tree_util.tree_leaves(state)[0].shape[0])
        self.consts = jax.tree_util.tree_map(np.asarray, (np.float64(t_start), *consts[1:5]))
        self.member_sys = member_sys is not None
        self.sys = jax.tree_util.tree_map(np.asarray, consts[5] if member_sys is None else member_sys)
        # one member through the single kernel (a single run): _advance_one
        self._single = self.members == 1 and starts is None and kernel.single_only
        self._sys0 = member_rows(self.sys, 0) if self.member_sys else self.sys
        # a run that keeps its chunks' starts (lv.flow's): the lane kernel's buffers, two dicts used in
        # turn, so that a chunk's rows can be views of its outputs while the next chunk runs (advance)
        self._turns = kernel.turns() if starts is not None else None
        self._calls = 0
        self._same = {}  # per group of members: the arguments that every chunk gives them alike (advance)

    # the members' states and histories (member-first), made from the one member's where _advance_one keeps them
    def _batched(self) -> None:
        if self._one is not None:
            self._state, self._history = jax.tree_util.tree_map(lambda a: a[None], self._one)
            self._one = None

    @property
    def state(self):
        self._batched()
        return self._state

    @state.setter
    def state(self, value):
        self._batched()
        self._state = value

    @property
    def history(self):
        self._batched()
        return self._history

    @history.setter
    def history(self, value):
        self._batched()
        self._history = value

    def member(self, b):
        if self._one is not None:
            return self._one
        return super().member(b)

    @property
    def lanes(self) -> int:
        """Members per lane kernel call; 0 where the single run's kernel runs them one by one."""
        return self.kernel.lanes

    def advance(self, n: np.ndarray, n_stop: np.ndarray):
        if self._single:
            return self._advance_one(n, n_stop)
        alive = np.flatnonzero(n < n_stop)
        leaves, tree = jax.tree_util.tree_flatten((self.state, self.history))  # the state's leaves first
        if self.starts is not None:
            if np.any(n[alive] % self.chunk):  # a chunk ended early (not failed, not interrupted) and the run went on
                raise AssertionError(
                    f"native run: a chunk ended at nodes {n[alive].tolist()} (not multiples of {self.chunk})"
                )
            c = n[alive] // self.chunk
            members = member_index(alive)
            if isinstance(members, slice) and c[0] == c[-1] and np.all(c == c[0]):  # basic indexing: no gather
                at = (members, int(c[0]))
            else:
                at = (int(alive[0]), int(c[0])) if alive.size == 1 else (alive, c)  # one member: no fancy indexing
            for dst, src in zip(jax.tree_util.tree_leaves(self.starts), leaves):
                dst[at] = src[at[0]]
        n_new, failed = n.copy(), np.zeros(self.members, bool)
        steps = min(self.chunk, int(np.max(n_stop - n)))
        # every member in one call of the lane kernel: the rows are a view of its output, in the
        # buffers of this call's turn, which the next call leaves as they are (the call after it
        # overwrites them: the records' recorder copies them before, _RecordsInto)
        whole = self._turns is not None and alive.size == self.members == self.lanes
        buffers = self._turns[self._calls % 2] if whole else None
        self._calls += 1
        rows = None if whole else np.empty((self.members, steps, self.width))  # written by the kernel, or zeroed
        if not whole and alive.size < self.members:
            rows[n >= n_stop] = 0
        viewed = []

        def args_of(idx):
            at = member_index(idx)  # consecutive members: views of their rows, not copies
            state, history = jax.tree_util.tree_unflatten(tree, [a[at] for a in leaves])
            t0, consts, sys = self._fixed(idx, at)
            return (state, history, t0, n[at], n_stop[at], *consts, sys)

        def take(idx, out):
            state, history, nb, fb, rb = out
            at = member_index(idx)  # consecutive members: basic indexing, no scatter
            n_new[at], failed[at] = nb, fb
            if rows is None:  # every member (whole)
                viewed.append(rb[..., :steps, :])
            else:
                rows[at] = rb[..., :steps, :]
            for dst, src in zip(leaves, jax.tree_util.tree_leaves((state, history))):
                dst[at] = src

        self.kernel.run(alive, args_of, take, buffers)
        if rows is None:
            (rows,) = viewed  # one call, of every member
        return n_new, failed, rows

    def _fixed(self, idx, at):
        """(t_start, (h, tol, max_iter, params), the System's parameters) for the members ``idx``
        (``at``: :func:`member_index` of them), made once per group of members."""
        t_start, h, tol, max_iter, params = self.consts

        def make():
            sys = member_rows(self.sys, at) if self.member_sys else for_members(idx, self.sys)
            return for_members(idx, t_start), for_members(idx, (h, tol, max_iter, params)), sys

        return per_group(self._same, idx, make)

    def _advance_one(self, n: np.ndarray, n_stop: np.ndarray):
        """The one member (a single run) through the single kernel, in the calling thread: the call
        :meth:`~livens.engine.MemberKernel.run` makes for a member, its outputs (fresh arrays) kept as
        they are, the state and history without the members' axis, the records as the rows."""
        one = self._one
        if one is None:
            one = jax.tree_util.tree_map(lambda a: a[0], (self._state, self._history))
        t_start, h, tol, max_iter, params = self.consts
        out = self.kernel.single(*one, t_start, n[0], n_stop[0], h, tol, max_iter, params, self._sys0)
        state, history, n_new, failed, rows = out
        self._one = (state, history)
        steps = min(self.chunk, int(n_stop[0] - n[0]))
        return np.reshape(np.asarray(n_new, np.int64), 1), np.reshape(np.asarray(failed, bool), 1), rows[None, :steps]
