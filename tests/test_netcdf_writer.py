"""The result file written with h5netcdf alone (``Solution.to_netcdf``, ``EnsembleSolution.to_netcdf``)
is the file xarray wrote for the same Dataset: the same variables, dimensions, attributes, encodings
and values, read back by xarray and by ``lv.load``; and writing it does not import xarray."""

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

import livens as lv
from livens.result_files import dataset, write_netcdf

xr = pytest.importorskip("xarray")

_H5_INTERNAL = {"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid", "_Netcdf4Coordinates"}


def _via_xarray(result, path):
    """The file as livens wrote it through xarray before the h5netcdf writer."""
    return write_netcdf(dataset(*result._file_contents()), str(path))


def _h5_dump(path) -> dict:
    """Every HDF5 dataset's dtype, shape, fill value and (user) attributes with their stored dtypes
    and shapes, and the file's attributes, as h5py reads them."""

    def attrs(obj):
        return {
            k: (str(obj.attrs.get_id(k).dtype), obj.attrs.get_id(k).shape, repr(obj.attrs[k]))
            for k in obj.attrs
            if k not in _H5_INTERNAL
        }

    with h5py.File(path, "r") as f:
        out = {"/": attrs(f)}
        for name, d in f.items():
            fill = d.fillvalue
            out[name] = (str(d.dtype), d.shape, d.maxshape, d.chunks, d.compression, repr(fill), attrs(d))
        return out


def _assert_same_file(new, old):
    with xr.open_dataset(new, engine="h5netcdf") as a, xr.open_dataset(old, engine="h5netcdf") as b:
        a, b = a.load(), b.load()
        assert a.identical(b), (a, b)
        assert list(a.variables) == list(b.variables)
        assert dict(a.sizes) == dict(b.sizes)
        for k in a.variables:
            assert a[k].dims == b[k].dims, k
            assert a[k].dtype == b[k].dtype, k
            assert a[k].encoding.get("dtype") == b[k].encoding.get("dtype"), k
            fa, fb = a[k].encoding.get("_FillValue"), b[k].encoding.get("_FillValue")
            assert (fa is None) == (fb is None) and (fa is None or np.isnan(fa) == np.isnan(fb)), (k, fa, fb)
            np.testing.assert_array_equal(a[k].values, b[k].values, err_msg=k)  # bit for bit, NaN where NaN
        assert a.attrs.keys() == b.attrs.keys()
    assert _h5_dump(new) == _h5_dump(old)


def _run(example, scheme, **kw):
    return lv.simulate(lv.examples.load(example), scheme, progress=False, **kw)


CASES = {
    "nodal velocities, every step": ("pendulum-3d", "VI-S", {"t_end": 0.05}),
    "interval velocities, guess history": ("pendulum-3d", "vi-lagrange", {"t_end": 0.05}),
    "multipliers gamma": ("pendulum-3d", "ggl-em", {"t_end": 0.05}),
    "one node in every 3": ("pendulum-3d", "VI-S", {"t_end": 0.1, "save_every": 3}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_solution_file_is_the_file_xarray_wrote(case, tmp_path):
    example, scheme, kw = CASES[case]
    sol = _run(example, scheme, **kw)
    new, old = tmp_path / "new.nc", tmp_path / "old.nc"
    assert sol.to_netcdf(new) == str(new)
    _via_xarray(sol, old)
    _assert_same_file(new, old)
    if case == "interval velocities, guess history":
        with h5py.File(new, "r") as f:
            assert "guess_history" in f and "step" in f["guess_history"].attrs  # the case checks what it says
    for path in (new, old):  # lv.load gives the same Solution from both
        back = lv.load(path)
        for k in ("t", "q", "p", "v", "lam", "gam", "newton_iterations", "newton_residual"):
            a, b = getattr(back, k), getattr(sol, k)
            if b is None:
                assert a is None, k
            else:
                np.testing.assert_array_equal(a, np.asarray(b).reshape(np.shape(a)), err_msg=k)
        assert back.meta.keys() == sol.meta.keys()
        assert json.dumps(back.params) == json.dumps(sol.params)
    # the file is atomic: no temporary file is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.nc", "old.nc"]


def test_the_ensemble_file_is_the_file_xarray_wrote(tmp_path):
    p = lv.examples.load("pendulum-3d")
    v0s = np.stack([p.v0, 1.1 * p.v0])
    ens = lv.simulate_ensemble(p, "VI-S", v0s=v0s, t_end=0.05, progress=False)
    new, old = tmp_path / "new.nc", tmp_path / "old.nc"
    ens.to_netcdf(new)
    _via_xarray(ens, old)
    _assert_same_file(new, old)
    back = lv.load(new)
    assert isinstance(back, lv.EnsembleSolution) and len(back) == 2
    np.testing.assert_array_equal(back.q, ens.q)
    np.testing.assert_array_equal(back.failed, ens.failed)


def test_arrays_of_every_kind_the_files_hold(tmp_path):
    """Empty dimensions, integers of several widths, NaN and infinite values, attributes of several
    types: the same file as xarray's; a bool variable (xarray stores it as int8 with a dtype
    attribute) keeps xarray's encoding."""
    from livens.result_files import write_netcdf_arrays

    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3))
    x[1, 2], x[2, 0] = np.nan, -np.inf
    variables = {
        "x": (("time", "coord"), x, {"step": 3, "advanced": 0.25, "name": "a b", "list": [1, 2]}),
        "empty": (("step", "constraint"), np.zeros((3, 0))),
        "i32": (("step",), np.array([1, -2, 3], np.int32)),
        "u8": (("coord",), np.array([0, 7, 255], np.uint8)),
        "f32": (("coord",), np.array([0.5, np.nan, 1e30], np.float32)),
    }
    coords = {"time": np.linspace(0.0, 1.0, 4), "step": np.arange(3, dtype=np.int64)}
    attrs = {"livens_format": 1, "scheme": "s", "meta": json.dumps({"h": 0.1}), "tol": 1e-9, "n": np.int64(4)}
    new, old = str(tmp_path / "new.nc"), str(tmp_path / "old.nc")
    write_netcdf_arrays(new, variables, coords, attrs)
    write_netcdf(dataset(variables, coords, attrs), old)
    _assert_same_file(new, old)

    flags = {"flag": (("n",), np.array([True, False, True])), "x": (("n",), np.arange(3.0))}
    write_netcdf_arrays(str(tmp_path / "b.nc"), flags, {}, {"a": 1})
    with xr.open_dataset(tmp_path / "b.nc", engine="h5netcdf") as ds:
        assert ds["flag"].dtype == bool and ds["flag"].values.tolist() == [True, False, True]
        assert ds.attrs["a"] == 1


def test_writing_the_files_does_not_import_xarray(tmp_path):
    """``Solution.to_netcdf`` and the whole ``livens run --out`` path (stream, final file, CSV,
    figure) run without importing xarray."""
    out = tmp_path / "out"
    code = (
        "import contextlib, io, sys, livens as lv\n"
        "from livens.cli import main\n"
        "sol = lv.simulate(lv.examples.load('pendulum-3d'), 'VI-S', t_end=0.1, progress=False)\n"
        f"sol.to_netcdf({str(tmp_path / 's.nc')!r})\n"
        "after_to_netcdf = 'xarray' in sys.modules\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['run', 'pendulum-3d', '--t-end', '0.1', '--quiet', '--out', {str(out)!r}]) == 0\n"
        "print(after_to_netcdf, 'xarray' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.stdout.split() == ["False", "False"], run.stdout + run.stderr
    assert lv.load(tmp_path / "s.nc").n_steps == 2
    assert sorted(p.name for p in out.iterdir()) == ["pendulum-3d_VI-S." + e for e in ("csv", "nc", "png")]
    np.testing.assert_array_equal(lv.load(out / "pendulum-3d_VI-S.nc").q, lv.load(tmp_path / "s.nc").q)
