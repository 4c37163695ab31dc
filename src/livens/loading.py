"""Reading result files back: :func:`load` gives the :class:`~livens.Solution` or the
:class:`~livens.EnsembleSolution` a netCDF file holds, with the system reattached from the example it
names or from a given Problem; loading never executes code from the file."""

from __future__ import annotations

import json
import os

import numpy as np

from . import _jaxconfig  # noqa: F401
from .ensemble_solution import EnsembleSolution
from .errors import FileFormatError
from .problem import Problem
from .result_files import FORMAT_VERSION, node_arrays
from .solution import Solution


def load(path: str | os.PathLike, problem: Problem | None = None) -> Solution | EnsembleSolution:
    """Read a Solution written by :meth:`Solution.to_netcdf` (or streamed by a running
    :func:`livens.simulate`), or an :class:`~livens.EnsembleSolution` (a file with a ``member``
    dimension, from ``simulate_ensemble(..., out=...)``).

    The system is reattached from the example named in the file (with its recorded parameters),
    or from ``problem`` for a user-defined system; without it the stored diagnostics are used.
    Loading never executes code from the file.
    """
    import xarray as xr

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such result file: {path!r}.")
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds = ds.load()
    except Exception as exc:
        raise FileFormatError(
            f"{path!r} is not a readable livens result file (truncated, corrupted or not netCDF4/HDF5): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    version = ds.attrs.get("livens_format")
    if version is None:
        raise FileFormatError(f"{path!r} is a netCDF file but not a livens result file (no 'livens_format' attribute).")
    if int(version) > FORMAT_VERSION:
        raise FileFormatError(
            f"{path!r} has livens file format {int(version)}, newer than this livens reads ({FORMAT_VERSION}); "
            "upgrade livens."
        )
    if "members" in ds.attrs:
        if problem is None:
            problem = _example_problem(json.loads(ds.attrs.get("meta", "{}")))
        try:
            return EnsembleSolution.from_dataset(ds, problem)
        except (KeyError, ValueError) as exc:
            raise FileFormatError(
                f"{path!r} is missing livens data ({exc}); the file is incomplete or foreign."
            ) from None
    try:
        meta = json.loads(ds.attrs["meta"])
        if "guess_history" in ds:
            gh = ds["guess_history"]
            meta["guess_history"] = {
                **{
                    k: gh.attrs[k].item() if hasattr(gh.attrs[k], "item") else gh.attrs[k]
                    for k in ("step", "k", "advanced", "since")
                    if k in gh.attrs
                },
                "x": np.asarray(gh.values),
            }
        params = json.loads(ds.attrs["params"])
        stored = {
            k: np.asarray(ds[k].values)
            for k in ds.data_vars
            if k.startswith(("energy_", "J:", "residual_", "enforced:", "dissipated_work"))
        }
        sol = Solution(
            **node_arrays(ds),
            velocity_kind=str(ds.attrs["velocity_kind"]),
            scheme=str(ds.attrs["scheme"]),
            params=params,
            meta=meta,
            problem=None,
            stored=stored,
        )
    except (KeyError, ValueError) as exc:
        raise FileFormatError(f"{path!r} is missing livens data ({exc}); the file is incomplete or foreign.") from None
    if problem is None:
        problem = _example_problem(meta)
    sol.problem = problem
    return sol


def _example_problem(meta: dict):
    """The Problem of the example a file's metadata names (with its recorded parameters), or None."""
    if not meta.get("example"):
        return None
    from . import examples

    if meta["example"] not in examples.names():
        return None
    try:
        return examples.load(meta["example"], **meta.get("problem_parameters", {}))
    except Exception:  # noqa: BLE001 - the stored diagnostics are used instead
        return None
