"""Results written to netCDF while a run goes (``lv.simulate(..., out=path)``, ``livens run --out``).

The file has unlimited ``time`` and ``step`` dimensions (and, for an ensemble, a ``member``
dimension before them: every member's rows are appended together). The time loop hands every chunk of kept
nodes and steps to :meth:`NetCDFStream.append`; the rows are written at most every
``flush_interval`` seconds, or less often where a write takes more than ``write_share`` of the
time between two (and at :meth:`~NetCDFStream.flush` / :meth:`~NetCDFStream.close`),
each time by opening the file, appending and closing it again, so that the file on disk is a
complete, loadable netCDF file at every moment (``lv.load`` reads it while the run goes: HDF5
file locking is off) and holds the steps of all but the last second or so. Opening the file is
slow next to a chunk of a small system's steps, hence the batching.

A run that stops (failure, Ctrl-C) closes the stream, which writes the rows still held; a stream
dropped without closing writes them when it is garbage collected or at exit. At the end of a
successful run the complete Solution, with its diagnostics, replaces the file atomically; rows
still held by the stream are then dropped (the replaced file is recognized by its inode).
"""

from __future__ import annotations

import json
import os
import time
import weakref

import numpy as np

from .result_files import FORMAT_VERSION, jsonable


class _Pending:
    """Rows held in memory until the next write, with the file's row counts (member-first where
    the file holds an ensemble: the time and step axes are then the second)."""

    def __init__(self, path: str, nodal_v: bool, has_gamma: bool, inode: int, members: int | None = None):
        self.path, self.nodal_v, self.has_gamma, self.inode = path, nodal_v, has_gamma, inode
        self.members = members
        self.nodes: list = []
        self.steps: list = []
        self.n_time = 0
        self.n_step = 0
        self.nbytes = 0
        self.last_write = time.monotonic()
        self.write_seconds = 0.0  # how long the last write took

    def add(self, t, q, p, v_nodes, steps: dict):
        if len(t):
            node = {"time": np.asarray(t, float), "q": np.asarray(q), "p": np.asarray(p)}
            if self.nodal_v:
                node["v"] = np.asarray(v_nodes)
            self.nodes.append(node)
        if len(steps["index"]):
            step = {
                "step": np.asarray(steps["index"]),
                "lam": np.asarray(steps["lam"]),
                "newton_iterations": np.asarray(steps["iterations"]),
                "newton_residual": np.asarray(steps["residual"]),
            }
            if not self.nodal_v:
                step["v"] = np.asarray(steps["v"])
            if self.has_gamma:
                step["gam"] = np.asarray(steps["gam"])
            self.steps.append(step)
        self.nbytes += sum(a.nbytes for part in (self.nodes[-1:], self.steps[-1:]) for d in part for a in d.values())

    def write(self):
        """Append the rows held to the file (nothing where the file was replaced meanwhile)."""
        nodes, steps = self.nodes, self.steps
        self.nodes, self.steps, self.nbytes = [], [], 0
        began = self.last_write = time.monotonic()
        if not (nodes or steps):
            return
        try:
            self._append(nodes, steps)
        finally:
            self.last_write = time.monotonic()
            self.write_seconds = self.last_write - began

    def _append(self, nodes: list, steps: list):
        try:
            if os.stat(self.path).st_ino != self.inode:
                return  # the finished run's complete file replaced the streamed one
        except FileNotFoundError:
            return
        import h5netcdf

        with h5netcdf.File(self.path, "a") as f:
            for dim, parts, count in (("time", nodes, "n_time"), ("step", steps, "n_step")):
                if not parts:
                    continue
                axis = {k: (1 if self.members is not None and k not in (dim, "index") else 0) for k in parts[0]}
                cat = {k: np.concatenate([d[k] for d in parts], axis=axis[k]) for k in parts[0]}
                a = getattr(self, count)
                b = a + len(cat[dim])
                f.resize_dimension(dim, b)
                for k, arr in cat.items():
                    if axis[k]:
                        f[k][:, a:b] = arr
                    else:
                        f[k][a:b] = arr
                setattr(self, count, b)


class NetCDFStream:
    """Append-only writer of a run's nodal and per-step arrays (see the module's text)."""

    flush_interval = 1.0
    """Seconds between two writes to the file, at least."""
    write_share = 0.05
    """The largest share of the run's time that the writes take: where one write takes longer than
    ``write_share * flush_interval`` (a slow disk, a large system), the next comes that much later."""
    max_pending_bytes = 64 * 2**20
    """Rows held beyond this many bytes are written at once."""

    def __init__(
        self, path, d: int, m: int, has_gamma: bool, velocity_kind: str, attrs: dict, members: int | None = None
    ):
        import h5netcdf

        self.path = os.fspath(path)
        self.nodal_v = velocity_kind == "nodal"
        self.has_gamma = has_gamma
        self.members = members
        lead = ("member",) if members is not None else ()
        os.makedirs(os.path.dirname(os.path.abspath(self.path)) or ".", exist_ok=True)
        tmp = self.path + f".{os.getpid()}.tmp"
        with h5netcdf.File(tmp, "w") as f:
            f.dimensions = {
                "time": None,
                "step": None,
                "coord": d,
                "constraint": m,
                **({"member": members} if members is not None else {}),
            }
            f.create_variable("time", ("time",), float)
            f.create_variable("step", ("step",), np.int64)
            for name in ("q", "p"):
                f.create_variable(name, lead + ("time", "coord"), float)
            f.create_variable("v", lead + ("time" if self.nodal_v else "step", "coord"), float)
            f.create_variable("lam", lead + ("step", "constraint"), float)
            if has_gamma:
                f.create_variable("gam", lead + ("step", "constraint"), float)
            f.create_variable("newton_iterations", lead + ("step",), np.int32)
            f.create_variable("newton_residual", lead + ("step",), float)
            full = {
                "livens_format": FORMAT_VERSION,
                "d": d,
                "m": m,
                "velocity_kind": velocity_kind,
                "complete": 0,
                **({"members": members} if members is not None else {}),
            }
            for k, v in attrs.items():
                full[k] = json.dumps(jsonable(v)) if isinstance(v, dict) else v
            f.attrs.update(full)
        os.replace(tmp, self.path)
        self._pending = _Pending(self.path, self.nodal_v, has_gamma, os.stat(self.path).st_ino, members)
        # rows still held when the stream is dropped (an exception unwinding the time loop) or at exit
        self._finalizer = weakref.finalize(self, self._pending.write)

    @property
    def n_time(self) -> int:
        """Nodes written to the file so far."""
        return self._pending.n_time

    @property
    def n_step(self) -> int:
        """Steps written to the file so far."""
        return self._pending.n_step

    def append(self, t, q, p, v_nodes, steps: dict):
        """Append nodes (t, q, p[, v]) and per-step rows (v, lam, gam, iterations, residual, index);
        written to the file at once when ``flush_interval`` has passed since the last write."""
        pending = self._pending
        pending.add(t, q, p, v_nodes, steps)
        interval = max(self.flush_interval, pending.write_seconds / self.write_share)
        if time.monotonic() - pending.last_write >= interval or pending.nbytes >= self.max_pending_bytes:
            pending.write()

    def append_rows(self, kept, lo: int, hi: int, start: bool = False):
        """Append the kept rows lo..hi of :class:`livens.driver.records.KeptNodes` (of every member of
        an ensemble); ``start``: the start node (node 0) first."""
        b = slice(None) if self.members is not None else 0
        first = 0 if start else 1 + lo
        t = kept.t[first : 1 + hi]
        q, p = kept.q[b, first : 1 + hi], kept.p[b, first : 1 + hi]
        v_nodes = kept.v[b, first : 1 + hi] if self.nodal_v else None
        steps = {
            "index": kept.nodes[lo:hi] - 1,
            "lam": kept.lam[b, lo:hi],
            "iterations": kept.iterations[b, lo:hi],
            "residual": kept.residual[b, lo:hi],
            "v": None if self.nodal_v else kept.v[b, lo:hi],
        }
        if self.has_gamma:
            steps["gam"] = kept.gam[b, lo:hi]
        self.append(t, q, p, v_nodes, steps)

    def flush(self):
        """Write every row held to the file."""
        self._pending.write()

    def close(self):
        """Write every row held; the stream is not used afterwards."""
        self._finalizer()

    def continue_from(self, guess_history: dict | None, compensation: dict | None) -> None:
        """Store in the closed file of a stopped run what continues it exactly from its last node:
        the predictor's history (:meth:`livens.guess.GuessHistory.to_meta`, the variable
        ``guess_history`` as :meth:`livens.Solution.to_netcdf` writes it) and the carries of the
        compensated summation (``compensation`` in the ``meta`` attribute); ``None``: not stored."""
        import h5netcdf

        if guess_history is None and compensation is None:
            return
        with h5netcdf.File(self.path, "a") as f:
            if compensation is not None:
                meta = json.loads(f.attrs.get("meta", "{}"))
                meta["compensation"] = jsonable(compensation)
                f.attrs["meta"] = json.dumps(meta)
            if guess_history is not None:
                X = np.asarray(guess_history["x"], dtype=float)
                f.dimensions.update({"history": X.shape[0], "unknown": X.shape[1]})
                var = f.create_variable("guess_history", ("history", "unknown"), float, data=X)
                for k in ("step", "k", "advanced", "since"):
                    var.attrs[k] = guess_history[k]
