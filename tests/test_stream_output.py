"""``livens run --out`` writes complete files without slowing the run: the files hold what the run
computed (compared with a run of ``lv.simulate`` without a file), the stream writes less often where
a write is slow, a Solution computes its diagnostics once for the summary, the files and the figure,
and a line names each file whose writing takes more than a moment."""

import numpy as np
import pytest

import livens as lv
from livens import cli, stream


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The files of ``livens run pendulum-3d --t-end 0.5 --out DIR`` with the progress lines shown
    at once (PROGRESS_AFTER = 0), and what the command wrote to stderr."""
    out = tmp_path_factory.mktemp("out")
    mp = pytest.MonkeyPatch()
    mp.setattr(cli, "PROGRESS_AFTER", 0.0)
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["run", "pendulum-3d", "--t-end", "0.5", "--out", str(out)]) == 0
    finally:
        mp.undo()
    return out, err.getvalue()


def test_the_files_hold_the_run(written):
    out, _ = written
    ref = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", t_end=0.5, progress=False)
    sol = lv.load(out / "pendulum-3d_VI-S.nc")
    assert sol.n_steps == ref.n_steps == 10
    for k in ("t", "q", "p", "lam", "newton_iterations"):
        np.testing.assert_allclose(getattr(sol, k), getattr(ref, k), rtol=1e-13, atol=1e-14, err_msg=k)
    # the diagnostics stored in the file are those of the run (this file is read without the system)
    E = ref.energy()
    np.testing.assert_allclose(sol.energy()["total"], E["total"], rtol=1e-12)
    np.testing.assert_allclose(sol.constraint_residual("position"), ref.constraint_residual("position"), atol=1e-15)
    header = open(out / "pendulum-3d_VI-S.csv").readline().strip().split(",")
    table = np.loadtxt(out / "pendulum-3d_VI-S.csv", delimiter=",", skiprows=1)
    assert table.shape == (11, len(header))
    np.testing.assert_allclose(table[:, header.index("q1")], ref.q[:, 0], rtol=1e-15)
    np.testing.assert_allclose(table[:, header.index("energy_total")], E["total"], rtol=1e-15)
    from PIL import Image

    with Image.open(out / "pendulum-3d_VI-S.png") as im:
        im.load()  # a complete PNG
        assert im.size == (1210, 880)  # 11 x 8 in at 110 dpi


def test_a_line_names_each_file_that_takes_more_than_a_moment(written, tmp_path, capsys, monkeypatch):
    out, err = written
    for ext in ("csv", "png"):
        assert f"writing {out / ('pendulum-3d_VI-S.' + ext)}" in err, err
    assert err.count("  done (") == 2, err
    # --quiet: no lines; and none where the files take less than PROGRESS_AFTER
    sol = lv.load(out / "pendulum-3d_VI-S.nc")
    monkeypatch.setattr(cli, "PROGRESS_AFTER", 0.0)
    cli._write_outputs(sol, str(tmp_path), "q", quiet=True, netcdf=False)
    monkeypatch.setattr(cli, "PROGRESS_AFTER", 60.0)
    cli._write_outputs(sol, str(tmp_path), "s", quiet=False, netcdf=False)
    assert capsys.readouterr().err == ""


def test_the_stream_writes_less_often_where_a_write_is_slow(tmp_path, monkeypatch):
    """A fake clock: every append comes 10 ms after the last, every write to the file takes
    ``cost`` seconds; the writes take at most about write_share of the run's time."""
    clock = [0.0]
    monkeypatch.setattr(stream.time, "monotonic", lambda: clock[0])
    for cost, most in ((0.01, 11), (0.5, 2)):
        writes = []

        def slow_append(self, nodes, steps, cost=cost, writes=writes):
            clock[0] += cost
            writes.append(cost)

        monkeypatch.setattr(stream._Pending, "_append", slow_append)
        s = stream.NetCDFStream(tmp_path / f"s{cost}.nc", 2, 1, False, "nodal", {"scheme": "x"})
        began = clock[0]
        for i in range(1000):  # 10 s of steps
            clock[0] += 0.01
            s.append([i * 0.01], np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 2)), {"index": np.zeros(0)})
        elapsed = clock[0] - began
        assert 1 <= len(writes) <= most, (cost, len(writes))  # at least once a second: at most 11 of 10 s
        assert sum(writes) <= stream.NetCDFStream.write_share * elapsed + cost, (cost, writes)
        s.close()
        assert len(writes) >= 2 or sum(writes) <= cost  # close writes the rows still held


def test_diagnostics_are_computed_once_and_follow_new_arrays():
    sol = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", t_end=0.05, progress=False)
    mech = sol.mechanics
    g = sol.constraint_residual("position")
    g[:] = 1.0  # a copy: the kept residuals do not change
    again = sol.constraint_residual("position")
    np.testing.assert_allclose(again, np.stack([np.asarray(mech.g(q)) for q in sol.q]), atol=0)
    assert sol.__dict__["_diagnostics"]["residual_position"][1] is not again
    # new arrays: computed afresh (a q off the sphere has g = |x|^2 - L^2 != 0)
    sol.q = sol.q * 1.5
    moved = sol.constraint_residual("position")
    np.testing.assert_allclose(moved, np.stack([np.asarray(mech.g(q)) for q in sol.q]), rtol=1e-12)
    assert np.max(np.abs(moved)) > 0.1
