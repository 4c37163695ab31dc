"""Long runs: streaming to netCDF, save_every, resume, SIGINT, energy blow-up."""

import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import livens as lv

TOL = 1e-12


@pytest.fixture(scope="module")
def top():
    return lv.examples.load("heavy-top")


@pytest.fixture(scope="module")
def full(top):
    return lv.simulate(top, "VI-S", t_end=0.2, tol=TOL)


def test_streamed_file_equals_solution_and_resume_is_exact(tmp_path, top, full):
    path = tmp_path / "a.nc"
    first = lv.simulate(top, "VI-S", t_end=0.1, tol=TOL, out=path, chunk=16)
    back = lv.load(path)
    np.testing.assert_array_equal(back.q, first.q)
    rest = lv.simulate(top, "VI-S", t_end=0.2, tol=TOL, resume=back)
    assert rest.t[0] == pytest.approx(0.1) and rest.t[-1] == pytest.approx(0.2)
    # the continuation is the same computation as one long run
    np.testing.assert_array_equal(rest.q, full.q[50:])
    with pytest.raises(ValueError, match="same h"):
        lv.simulate(top, "VI-S", h=0.001, t_end=0.2, resume=back)


def test_save_every_decimates_memory_and_file(tmp_path, top, full):
    dec = lv.simulate(top, "VI-S", t_end=0.2, tol=TOL, save_every=10, out=tmp_path / "d.nc", chunk=32)
    assert dec.q.shape == (11, 12) and dec.lam.shape == (10, 9)
    np.testing.assert_array_equal(dec.q, full.q[::10])
    np.testing.assert_array_equal(dec.lam, full.lam[9::10])
    assert dec.summary()["steps"] == 100
    with pytest.raises(ValueError, match="consecutive steps"):
        dec.enforced_residuals()
    loaded = lv.load(tmp_path / "d.nc")
    np.testing.assert_array_equal(loaded.t, dec.t)


def test_convergence_failure_keeps_streamed_steps(tmp_path):
    problem = lv.examples.load("pendulum-3d")
    path = tmp_path / "fail.nc"
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(problem, "VI-S", h=0.05, t_end=10.0, max_iter=3, out=path, chunk=8, rescue=False, guess="simple")
    sol = info.value.solution
    on_disk = lv.load(path)
    assert on_disk.n_steps == sol.n_steps
    np.testing.assert_array_equal(on_disk.q, sol.q)


def test_energy_blowup_stops_the_run():
    problem = lv.examples.load("pendulum-3d")
    with pytest.raises(lv.BlowUpError) as info:
        # VI-S at h = 0.05 oscillates by more than 10% of the energy (KBS23b Fig 8)
        lv.simulate(problem, "VI-S", t_end=10.0, blowup_factor=0.1)
    err = info.value
    E = err.solution.energy()["total"]
    assert abs(E[-1] - E[0]) > 0.1 * max(abs(E[0]), 1.0)
    assert np.all(np.abs(E[:-1] - E[0]) <= 0.1 * max(abs(E[0]), 1.0))
    assert err.time == pytest.approx(err.solution.t[-1])


def test_sigint_leaves_a_loadable_file(tmp_path):
    path = tmp_path / "long.nc"
    script = textwrap.dedent(f"""
        import livens as lv
        pb = lv.examples.load("pendulum-3d")
        lv.simulate(pb, "VI-S", h=1e-4, t_end=1e4, out={str(path)!r}, chunk=256, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, stdout=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            if lv.load(path).n_steps > 1000:
                break
        except Exception:  # not yet created, or being written at this moment
            pass
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"SimulationInterrupted" in err or b"interrupted" in err.lower()
    sol = lv.load(path)
    assert sol.n_steps > 100
    assert np.all(np.isfinite(sol.q))
    assert np.max(np.abs(np.diff(sol.t) - 1e-4)) < 1e-12
