"""The result files' common parts: the format version, atomic netCDF writes, JSON-safe metadata, CSV
column names and the choice of thinned rows (:class:`~livens.Solution`, :class:`~livens.EnsembleSolution`
and the netCDF stream of a running simulation write through them)."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _jaxconfig  # noqa: F401

if TYPE_CHECKING:  # xarray is an optional dependency (the io extra), imported where it is used
    import xarray as xr

FORMAT_VERSION = 1


Variables = dict[str, tuple]
"""A result file's variables: name -> (dims, array) or (dims, array, attrs), in file order."""


def write_netcdf(ds: xr.Dataset, path: str) -> str:
    """Write the xarray Dataset ``ds`` to the netCDF4 file ``path`` atomically (a temporary file
    beside it, then a rename), so that a reader never sees half a file; returns the path."""
    return _atomic(path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf", invalid_netcdf=True))


def write_netcdf_arrays(path: str, variables: Variables, coords: dict[str, np.ndarray], attrs: dict) -> str:
    """Write ``variables``, the dimension coordinates ``coords`` (name -> 1-d array) and the global
    ``attrs`` to the netCDF4 file ``path`` atomically, with h5netcdf alone: the file that
    :func:`write_netcdf` writes for ``dataset(variables, coords, attrs)`` as xarray encodes it (a
    NaN ``_FillValue`` on floating-point variables, none on integers), without importing xarray.
    Arrays of other kinds (bool, strings, objects) go through xarray's encoding instead."""
    arrays = [np.asarray(v[1]) for v in variables.values()] + [np.asarray(c) for c in coords.values()]
    if any(a.dtype.kind not in "fiu" for a in arrays):
        return write_netcdf(dataset(variables, coords, attrs), path)
    return _atomic(path, lambda tmp: _write_h5netcdf(tmp, variables, coords, attrs))


def dataset(variables: Variables, coords: dict[str, np.ndarray], attrs: dict) -> xr.Dataset:
    """The xarray Dataset of :func:`write_netcdf_arrays`' arguments."""
    import xarray as xr

    ds = xr.Dataset(dict(variables), coords=coords)
    ds.attrs.update(attrs)
    return ds


def _write_h5netcdf(tmp: str, variables: Variables, coords: dict[str, np.ndarray], attrs: dict) -> None:
    import h5netcdf

    sizes: dict[str, int] = {}
    for dims, arr, *_ in variables.values():
        sizes.update(zip(dims, np.shape(arr)))
    sizes.update({name: len(c) for name, c in coords.items()})
    with h5netcdf.File(tmp, "w", invalid_netcdf=True) as f:
        f.attrs.update(attrs)
        f.dimensions = sizes
        entries = [(name, *v) for name, v in variables.items()] + [(name, (name,), c) for name, c in coords.items()]
        for name, dims, arr, *extra in entries:
            arr = np.asarray(arr)
            if arr.dtype.kind == "f":  # xarray's default encoding of floating-point data
                var = f.create_variable(name, tuple(dims), arr.dtype, fillvalue=arr.dtype.type(np.nan))
            else:
                var = f.create_variable(name, tuple(dims), arr.dtype)
            if arr.size:
                var[...] = arr
            for k, v in (extra[0] if extra else {}).items():
                var.attrs[k] = v


def _atomic(path: str, write) -> str:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def thinned_nodes(n_nodes: int, rows: int | None) -> np.ndarray:
    """Indices of at most ``rows`` of ``n_nodes`` nodes: 0, k, 2k, ... and the last (every node
    for ``rows=None`` or where they fit)."""
    if rows is None or n_nodes <= rows:
        return np.arange(n_nodes)
    k = -(-(n_nodes - 1) // (rows - 1))  # ceil: 0, k, ..., and the last node fit in ``rows``
    sel = np.arange(0, n_nodes, k)
    if sel[-1] != n_nodes - 1:
        sel = np.append(sel[: rows - 1], n_nodes - 1)
    return sel


def csv_name(key: str) -> str:
    """A diagnostic's key as a CSV column name: runs of other characters than letters, digits and _ as one _."""
    import re

    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


def jsonable(x: Any) -> Any:
    """``x`` with NumPy scalars and arrays as Python numbers and lists, and dict keys as strings (for JSON)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


def result_attrs(scheme: str, velocity_kind: str, params: dict, meta: dict, d: int, m: int, **more: Any) -> dict:
    """The global attributes of a result file (a run's or an ensemble's): format, scheme, velocity
    kind, parameters and metadata as JSON, the sizes, and ``more``."""
    import json

    attrs = {
        "livens_format": FORMAT_VERSION,
        "scheme": scheme,
        "velocity_kind": velocity_kind,
        "params": json.dumps(params),
        "meta": json.dumps(jsonable(meta)),
        "d": int(d),
        "m": int(m),
    }
    attrs.update(more)
    return attrs


@functools.cache
def livens_version() -> str:
    """The installed livens version (recorded in result files; read once per process)."""
    try:
        from importlib.metadata import version

        return version("livens")
    except Exception:  # pragma: no cover
        return "0+unknown"


def node_arrays(ds: Any) -> dict[str, np.ndarray | None]:
    """The arrays of a result file that a Solution and an EnsembleSolution share: t, q, p, v, lam,
    gam (None where the scheme has none), newton_iterations and newton_residual."""
    return {
        "t": np.asarray(ds["time"].values),
        **{k: np.asarray(ds[k].values) for k in ("q", "p", "v", "lam")},
        "gam": np.asarray(ds["gam"].values) if "gam" in ds else None,
        **{k: np.asarray(ds[k].values) for k in ("newton_iterations", "newton_residual")},
    }
