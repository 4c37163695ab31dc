"""Results written to netCDF chunk by chunk while a run goes (issue: long runs, reliability).

The file has unlimited ``time`` and ``step`` dimensions; after every chunk the new rows are appended
and the file is closed, so a crash or Ctrl-C leaves a loadable file with every step written so far
(``lv.load`` reads it). At the end of a successful run the complete Solution, with its diagnostics,
replaces it atomically.
"""
from __future__ import annotations

import json
import os

import numpy as np

from .solution import FORMAT_VERSION, _jsonable


class NetCDFStream:
    """Append-only writer of a run's nodal and per-step arrays."""

    def __init__(self, path, d: int, m: int, has_gamma: bool, velocity_kind: str, attrs: dict):
        import h5netcdf

        self.path = os.fspath(path)
        self.nodal_v = velocity_kind == "nodal"
        self.has_gamma = has_gamma
        os.makedirs(os.path.dirname(os.path.abspath(self.path)) or ".", exist_ok=True)
        tmp = self.path + f".{os.getpid()}.tmp"
        with h5netcdf.File(tmp, "w") as f:
            f.dimensions = {"time": None, "step": None, "coord": d, "constraint": m}
            f.create_variable("time", ("time",), float)
            f.create_variable("step", ("step",), np.int64)
            for name in ("q", "p"):
                f.create_variable(name, ("time", "coord"), float)
            f.create_variable("v", ("time" if self.nodal_v else "step", "coord"), float)
            f.create_variable("lam", ("step", "constraint"), float)
            if has_gamma:
                f.create_variable("gam", ("step", "constraint"), float)
            f.create_variable("newton_iterations", ("step",), np.int32)
            f.create_variable("newton_residual", ("step",), float)
            full = {"livens_format": FORMAT_VERSION, "d": d, "m": m, "velocity_kind": velocity_kind,
                    "complete": 0}
            for k, v in attrs.items():
                full[k] = json.dumps(_jsonable(v)) if isinstance(v, dict) else v
            f.attrs.update(full)
        os.replace(tmp, self.path)
        self.n_time = 0
        self.n_step = 0

    def append(self, t, q, p, v_nodes, steps: dict):
        """Append nodes (t, q, p[, v]) and per-step rows (v, lam, gam, iterations, residual, index)."""
        import h5netcdf

        with h5netcdf.File(self.path, "a") as f:
            a, b = self.n_time, self.n_time + len(t)
            if b > a:
                f.resize_dimension("time", b)
                f["time"][a:b] = t
                f["q"][a:b] = q
                f["p"][a:b] = p
                if self.nodal_v:
                    f["v"][a:b] = v_nodes
            c, e = self.n_step, self.n_step + len(steps["index"])
            if e > c:
                f.resize_dimension("step", e)
                f["step"][c:e] = steps["index"]
                if not self.nodal_v:
                    f["v"][c:e] = steps["v"]
                f["lam"][c:e] = steps["lam"]
                if self.has_gamma:
                    f["gam"][c:e] = steps["gam"]
                f["newton_iterations"][c:e] = steps["iterations"]
                f["newton_residual"][c:e] = steps["residual"]
            self.n_time, self.n_step = b, e
