"""Executors: where the independent runs of a study execute.

By default on the local machine with no set-up: in this process, or in a pool of ``processes``
worker processes (spawned, so JAX is never forked). Given ``scheduler="tcp://host:port"`` the
runs go to an existing Dask distributed cluster (``dask.distributed.Client(address)``); nothing is
distributed by hand. Results are the same either way: every run is a pure function of its
:class:`~livens.studies.runs.RunSpec` (only wall-clock timings differ).

Progress: a bar with runs done and the current rate of time steps per second, shown only on a
terminal and never with ``progress=False`` (``--quiet``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from .runs import RunResult, RunSpec, execute

if TYPE_CHECKING:  # dask is an optional dependency (the dask extra), imported where it is used
    from dask.distributed import Client


class Executor(Protocol):
    """What :func:`run_specs` runs on: ``map(fn, items, done)`` returns ``[fn(x) for x in items]`` in
    order, calling ``done(result)`` as each finishes (:class:`LocalExecutor`, :class:`DaskExecutor`)."""

    def map(self, fn: Callable, items: Sequence, done: Callable | None = None) -> list: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Runs in this process (``processes`` None, 0 or 1) or in a spawned process pool."""

    def __init__(self, processes: int | None = None) -> None:
        if processes is not None and (not isinstance(processes, int) or processes < 0):
            raise ValueError(f"processes must be a non-negative integer; got {processes!r}.")
        self.processes = processes or 0

    def map(self, fn: Callable, items: Sequence, done: Callable | None = None) -> list:
        """[fn(x) for x in items], in order; ``done(result)`` is called as each finishes."""
        items = list(items)
        if self.processes <= 1 or len(items) <= 1:
            out = []
            for x in items:
                r = fn(x)
                out.append(r)
                if done:
                    done(r)
            return out
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")
        out = [None] * len(items)
        with ProcessPoolExecutor(max_workers=self.processes, mp_context=ctx) as pool:
            futs = {pool.submit(fn, x): i for i, x in enumerate(items)}
            for fut in as_completed(futs):
                out[futs[fut]] = fut.result()
                if done:
                    done(out[futs[fut]])
        return out

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"LocalExecutor(processes={self.processes})"


class DaskExecutor:
    """Runs on an existing Dask distributed cluster: ``DaskExecutor("tcp://host:port")`` or a
    ``dask.distributed.Client``. A client created here is closed by :meth:`close`."""

    def __init__(self, scheduler: str | Client, timeout: float = 30.0) -> None:
        try:
            from dask.distributed import Client
        except ImportError as exc:  # pragma: no cover
            raise ImportError("Running on a Dask cluster needs dask[distributed]: pip install 'livens[dask]'.") from exc
        if isinstance(scheduler, Client):
            self.client, self._own = scheduler, False
        else:
            if not isinstance(scheduler, str) or "://" not in scheduler:
                raise ValueError(f"scheduler must be an address like 'tcp://host:8786'; got {scheduler!r}.")
            try:
                self.client = Client(scheduler, timeout=timeout, set_as_default=False)
            except OSError as exc:
                raise ValueError(
                    f"Could not reach the Dask scheduler at {scheduler!r} within {timeout:g} s: {exc}. "
                    "Start one (dask scheduler / dask worker) or leave --scheduler out to run locally."
                ) from None
            self._own = True

    def map(self, fn: Callable, items: Sequence, done: Callable | None = None) -> list:
        """[fn(x) for x in items] on the cluster, in order; ``done(result)`` as each finishes."""
        from dask.distributed import as_completed

        items = list(items)
        futures = self.client.map(fn, items, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out = [None] * len(items)
        for fut in as_completed(futures, loop=self.client.loop):  # this client, not a global default
            out[index[fut.key]] = fut.result()
            if done:
                done(out[index[fut.key]])
        return out

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __repr__(self) -> str:
        return f"DaskExecutor({self.client.scheduler.address if self.client.scheduler else '?'})"


def make_executor(scheduler: str | Client | None = None, processes: int | None = None) -> LocalExecutor | DaskExecutor:
    """The executor for ``scheduler`` (Dask address or Client) or the local default."""
    if scheduler is not None:
        return DaskExecutor(scheduler)
    return LocalExecutor(processes)


class _Progress:
    """Runs done and the current rate of time steps per second; silent when not a terminal."""

    def __init__(self, total: int, enabled: bool | None, desc: str):
        self.bar = None
        self.steps = 0
        self.t0 = time.perf_counter()
        if total == 0:
            return
        from livens._progress import progress_bar

        self.bar = progress_bar(total, enabled, unit="run", delay=0.0, desc=desc)

    def __call__(self, res: RunResult):
        if self.bar is None:
            return
        self.steps += res.steps * (1 + res.spec.repeat)
        rate = self.steps / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(f"{rate:,.0f} steps/s, last {res.spec.example} {res.spec.label} h={res.spec.h:g}")
        self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_specs(
    specs: Iterable[RunSpec],
    executor: Executor | None = None,
    *,
    scheduler: str | Client | None = None,
    processes: int | None = None,
    progress: bool | None = None,
    desc: str = "runs",
) -> dict[RunSpec, RunResult]:
    """Execute every distinct spec once; returns {spec: RunResult}.

    executor: an object with ``map(fn, items, done)`` (LocalExecutor, DaskExecutor); by default
    the one for ``scheduler`` / ``processes`` (see :func:`make_executor`), closed afterwards.
    Identical specs are executed once. The order of execution groups runs of the same example,
    scheme and guess so that each process compiles each time loop once.
    """
    unique = list(dict.fromkeys(specs))
    unique.sort(key=lambda s: (s.example, s.example_params, s.scheme, s.scheme_params, s.guess, -s.h))
    own = executor is None
    ex = make_executor(scheduler, processes) if own else executor
    bar = _Progress(len(unique), progress, desc)
    try:
        results = ex.map(execute, unique, bar)
    finally:
        bar.close()
        if own:
            ex.close()
    return dict(zip(unique, results))
