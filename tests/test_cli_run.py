"""``livens run`` as a user meets it: the progress bar on a terminal (a real pseudo-terminal),
Ctrl-C on a long run, peak memory of a long streamed run, the files and the messages.

The long versions (3e6 steps, a minute of a 1e8-step run before Ctrl-C) are marked slow; the
default suite runs the same checks on fewer steps.
"""

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import livens as lv
from livens.cli import CSV_ROWS, KEEP_BUDGET, _choose_save_every, _row_bytes, main

SRC = os.path.dirname(os.path.dirname(os.path.abspath(lv.__file__)))
LIVENS = [sys.executable, "-m", "livens.cli"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    for k in ("COLUMNS", "LINES"):
        env.pop(k, None)
    return env


def run_in_pty(argv, timeout=300, **env):
    """Run argv with its stdout and stderr on a fresh pseudo-terminal (size 0 x 0, as under
    script(1) or a CI runner); returns (exit code, everything it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env={**_env(), **env}, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.time() + timeout
    try:
        while time.time() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, b"".join(chunks).decode(errors="replace")


BAR = re.compile(r"\d+%\|.*\| *[\d.]+k?M?/[\d.]+[kM]? \[\d\d:\d\d<\d\d:\d\d, *[\d.]+[kM]?step/s\]")


def test_progress_bar_on_a_terminal_from_the_cli():
    # 4e6 steps of the pendulum, a node kept in every 100: at least a second of stepping on a fast,
    # quiet machine (4e5 steps took 0.2 s there, less than the bar's first refresh), the bar asked
    # for at once
    argv = ["run", "pendulum-3d", "--h", "1e-6", "--t-end", "4", "--save-every", "100"]
    code, text = run_in_pty(LIVENS + argv, LIVENS_PROGRESS_DELAY="0")
    assert code == 0, text[-2000:]
    bars = BAR.findall(text)
    assert bars, text[-2000:]  # steps done/total, time elapsed<left, rate
    assert "steps/s" in text and "Nothing was saved" in text


def test_progress_bar_on_a_terminal_from_python():
    script = (
        "import livens as lv\n"
        "lv.simulate(lv.examples.load('pendulum-3d'), 'VI-S', h=1e-6, t_end=4.0, save_every=100)\n"
        "print('finished')\n"
    )
    code, text = run_in_pty([sys.executable, "-c", script], LIVENS_PROGRESS_DELAY="0")
    assert code == 0, text[-2000:]
    assert BAR.findall(text) and "finished" in text, text[-2000:]


def _wait_for_steps(path, n, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            if lv.load(path).n_steps >= n:
                return True
        except Exception:  # not created yet
            pass
    return False


def _interrupt(argv, path, min_steps):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert _wait_for_steps(path, min_steps, proc), proc.communicate()
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, time.perf_counter() - t0, out.decode(), err.decode()


def _check_interrupted(rc, exit_s, err, out_dir, stem, h, save_every=1):
    assert rc == 130, err
    assert exit_s < 5.0, exit_s
    assert "%|" not in err  # no progress bar where standard error is not a terminal
    last = err.strip().splitlines()[-1]  # one line: how far, and which file holds the steps
    partial = os.path.join(out_dir, f"{stem}_partial.nc")
    assert last.startswith("Interrupted after ") and partial in last, err
    assert not os.path.exists(os.path.join(out_dir, f"{stem}.nc"))
    n_done = int(re.search(r"Interrupted after (\d+) of", last).group(1))
    sol = lv.load(partial)
    # every computed step is on disk (every kept node with save_every)
    assert sol.n_steps == n_done // save_every
    np.testing.assert_allclose(np.diff(sol.t), save_every * h, rtol=0, atol=1e-9)
    assert np.all(np.isfinite(sol.q)) and np.all(np.isfinite(sol.p))
    return sol, n_done


def test_ctrl_c_exits_at_once_with_every_step_on_disk(tmp_path):
    out = str(tmp_path)
    rc, exit_s, _, err = _interrupt(
        LIVENS + ["run", "pendulum-3d", "--h", "1e-6", "--t-end", "100", "--save-every", "1", "--out", out],
        os.path.join(out, "pendulum-3d_VI-S.nc"),
        20000,
    )
    sol, n_done = _check_interrupted(rc, exit_s, err, out, "pendulum-3d_VI-S", 1e-6)
    assert "warning: keeping 100,000,001 nodes" in err  # --save-every 1 asked for all of them
    assert np.max(np.abs(np.linalg.norm(sol.q, axis=1) - 1.0)) < 1e-8  # on the constraint


@pytest.mark.slow
def test_ctrl_c_on_the_heavy_top_after_a_minute(tmp_path):
    """The run of the report: 1e8 steps of the heavy top, Ctrl-C after about a minute."""
    out = str(tmp_path)
    proc_argv = LIVENS + ["run", "heavy-top", "--h", "1e-6", "--t-end", "100", "--out", out]
    proc = subprocess.Popen(proc_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    time.sleep(60)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    exit_s = time.perf_counter() - t0
    err = err.decode()
    k = int(re.search(r"keeping one node in every (\d+)", err).group(1))  # chosen to bound memory
    sol, n_done = _check_interrupted(proc.returncode, exit_s, err, out, "heavy-top_VI-S", 1e-6, k)
    print(
        f"heavy top: {n_done} steps in a minute, {sol.n_steps + 1} nodes kept (one in {k}), "
        f"exit {exit_s:.2f} s after SIGINT"
    )


def _peak_rss_run(argv):
    """Peak resident memory (MiB) of the process running argv, alone in a wrapper process."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:])\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    res = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True, text=True, env=_env())
    rc, kib = res.stdout.strip().splitlines()[-1].split()
    return int(rc), int(kib) / 1024, res


def _check_long_run(tmp_path, t_end, nodes):
    out = str(tmp_path)
    rc, mib, res = _peak_rss_run(
        LIVENS
        + ["run", "pendulum-3d", "--h", "1e-4", "--t-end", str(t_end), "--save-every", "100", "--out", out, "--quiet"]
    )
    assert rc == 0, res.stderr
    sol = lv.load(os.path.join(out, "pendulum-3d_VI-S.nc"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(
        f"pendulum {round(t_end / 1e-4)} steps, --save-every 100: peak RSS {mib:.0f} MiB, "
        f"{sol.t.shape[0]} nodes on disk, output {size / 1e6:.2f} MB"
    )
    assert sol.t.shape[0] == nodes and sol.meta["steps"] == round(t_end / 1e-4)
    assert mib < 900
    assert size < 50e6
    with open(os.path.join(out, "pendulum-3d_VI-S.csv")) as f:
        assert sum(1 for _ in f) <= CSV_ROWS + 1
    return mib


def test_long_run_memory_and_files(tmp_path):
    _check_long_run(tmp_path, 10.0, 1001)


@pytest.mark.slow
def test_three_million_steps_memory_and_files(tmp_path):
    _check_long_run(tmp_path, 300.0, 30001)


def test_save_every_chosen_to_bound_memory():
    # a short run keeps every node; a very long one the smallest 1-2-5 step within the budget
    assert _choose_save_every(1000, 12, 9, None) == (1, None)
    k, note = _choose_save_every(10**8, 12, 9, None)
    assert (10**8 // k + 1) * _row_bytes(12, 9) <= KEEP_BUDGET
    assert (10**8 // (k // 2) + 1) * _row_bytes(12, 9) > KEEP_BUDGET or k in (1, 2)
    assert str(k)[0] in "125" and set(str(k)[1:]) <= {"0"}
    assert f"one node in every {k}" in note and "--save-every 1" in note
    # what the user gives is kept, with a warning where it cannot fit in memory
    assert _choose_save_every(10**8, 12, 9, 7)[0] == 7
    k1, warn = _choose_save_every(10**10, 12, 9, 1)
    assert k1 == 1 and warn.startswith("warning: keeping 10,000,000,001 nodes")


def test_files_have_the_usual_permissions_and_a_small_csv(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        assert main(["run", "heavy-top", "--t-end", "6", "--out", str(tmp_path), "--quiet"]) == 0
    finally:
        os.umask(old)
    names = sorted(os.listdir(tmp_path))
    assert names == ["heavy-top_VI-S.csv", "heavy-top_VI-S.nc", "heavy-top_VI-S.png"]
    for name in names:
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o644, name
    header = open(tmp_path / "heavy-top_VI-S.csv").readline().strip().split(",")
    data = np.loadtxt(tmp_path / "heavy-top_VI-S.csv", delimiter=",", skiprows=1)
    sol = lv.load(tmp_path / "heavy-top_VI-S.nc")
    assert sol.n_steps == 3000 and data.shape[1] == len(header)
    assert CSV_ROWS // 2 <= data.shape[0] <= CSV_ROWS  # evenly spaced nodes
    assert data[0, 0] == 0.0 and data[-1, 0] == pytest.approx(6.0)  # first and last node
    # the summary columns: coordinates, energies, momentum map, the largest residuals, Newton iterations
    assert {
        "q1",
        "q12",
        "energy_total",
        "J_J3",
        "max_abs_residual_position",
        "max_abs_residual_velocity",
        "newton_iterations",
    } <= set(header)
    assert not any(h.startswith(("p", "lambda")) for h in header)
    i = header.index("max_abs_residual_position")
    rows = np.searchsorted(sol.t, data[:, 0])
    np.testing.assert_allclose(data[:, i], np.max(np.abs(sol.constraint_residual("position")[rows]), axis=1))
    # the full table on request: every node, every column
    from livens.cli import _write_outputs

    files = _write_outputs(sol, str(tmp_path / "f"), "full", csv="full", netcdf=False)
    header = open(files[1]).readline().strip().split(",")
    assert {"p12", "lambda9", "gamma9", "residual_position_9"} <= set(header)
    assert np.loadtxt(files[1], delimiter=",", skiprows=1).shape == (3001, len(header))
    capsys.readouterr()


def test_without_out_the_run_says_nothing_was_saved(capsys):
    assert main(["run", "pendulum-3d", "--t-end", "0.5", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("Nothing was saved: give --out DIR")
    # the summary's first line names what ran the steps
    assert ", backend native" in out or ", backend xla" in out


def test_failure_messages_count_steps_from_one_and_name_the_file(tmp_path, capsys):
    args = dict(h=0.05, t_end=10.0, max_iter=3, guess="simple", rescue=False)
    with pytest.raises(lv.ConvergenceError) as info:
        lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", progress=False, **args)
    exc = info.value
    # the step with index n goes from node n to n + 1: "step n + 1 of N (t = t_n -> t_n+1)"
    assert f"in step {exc.step + 1} of 200 (t = {exc.time:.6g} -> {exc.time + 0.05:.6g})" in str(exc)
    assert f"The {exc.step} steps before it are kept in the error's .solution." in str(exc)
    assert exc.solution.n_steps == exc.step
    code = main(
        [
            "run",
            "pendulum-3d",
            "--h",
            "0.05",
            "--max-iter",
            "3",
            "--guess",
            "simple",
            "--no-rescue",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {exc.reason} Every computed step ({exc.step}) is in {tmp_path}")
    assert "error.solution" not in err and ".solution" not in err
    for ext in ("nc", "csv", "png"):
        assert (tmp_path / f"pendulum-3d_VI-S_partial.{ext}").exists()
    assert not (tmp_path / "pendulum-3d_VI-S.nc").exists()
    assert lv.load(tmp_path / "pendulum-3d_VI-S_partial.nc").n_steps == exc.step


def test_blowup_message_names_the_step_that_ends_at_its_time(capsys):
    with pytest.raises(lv.BlowUpError) as info:
        lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", t_end=10.0, blowup_factor=0.1, progress=False)
    exc = info.value
    # the first step (index 0) blows up: it ends at t = 0.05
    assert exc.step == 0 and exc.time == pytest.approx(0.05)
    assert "Energy blow-up in step 1 of 200 (t = 0 -> 0.05)" in str(exc)
    assert "The one step up to and including it is kept" in str(exc)
    assert main(["run", "pendulum-3d", "--blowup-factor", "0.1", "--quiet"]) == 3
    err = capsys.readouterr().err
    assert err.strip() == f"error: {exc.reason} Nothing was saved (no --out)."


def test_unconstrained_system_runs_and_saves(tmp_path, capsys):
    assert main(["run", "spring-pendulum-spherical", "--scheme", "livens-em", "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "max |g|" not in out  # no constraints, no residual lines
    sol = lv.load(tmp_path / "spring-pendulum-spherical_livens-em.nc")
    assert sol.n_steps == 100 and sol.lam.shape == (100, 0)


def test_config_save_every_and_command_line_override(tmp_path, capsys):
    from livens.config import load_run_config

    cfg = tmp_path / "run.toml"
    cfg.write_text('example = "pendulum-3d"\nh = 0.01\nt_end = 1.0\nsave_every = 10\n')
    loaded = load_run_config(cfg)
    assert loaded.run_kwargs()["save_every"] == 10 and "save_every" in loaded.given
    # the command line's --save-every overrides the file's
    assert main(["run", "--config", str(cfg), "--save-every", "25", "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert lv.load(tmp_path / "b" / "pendulum-3d_VI-S.nc").t.shape[0] == 5
    other = tmp_path / "other.toml"
    other.write_text('example = "pendulum-3d"\n')
    assert "save_every" not in load_run_config(other).given  # then livens run chooses it
    capsys.readouterr()


def test_chunks_of_large_systems_are_short():
    """Ctrl-C is answered between chunks: large systems get fewer steps per chunk."""
    from livens.cli import _chunk_for
    from livens.driver import DEFAULT_CHUNK

    assert _chunk_for(3, 1) == _chunk_for(30, 29) == DEFAULT_CHUNK  # pendulum, double four-bar
    sizes = [_chunk_for(3 * n, n) for n in (32, 64, 128)]  # pendulum chains
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 4
    assert all(s & (s - 1) == 0 for s in sizes)  # powers of two


_BLOCKED = """
import hashlib
import signal
# as in a terminal's foreground job, whatever the test runner's own SIGINT disposition (a shell's
# background job starts with SIGINT ignored, and Python then installs no handler)
signal.signal(signal.SIGINT, signal.default_int_handler)
from livens.cli import _exit_on_ctrl_c_before_the_first_step
from livens.driver.host import NothingComputed as _NothingComputed
undo = _exit_on_ctrl_c_before_the_first_step({path!r})
_NothingComputed.set({flag})
print("ready", flush=True)
# seconds in one C call (OpenSSL), where Python runs no signal handler (like XLA's compiler)
hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10_000_000)
"""


@pytest.mark.parametrize("nothing_computed", [True, False])
def test_ctrl_c_before_the_first_step_exits_at_once(tmp_path, nothing_computed):
    """Ctrl-C while the run has computed nothing (its set-up, the first compilation) exits at once
    with one line and removes the streamed file that holds only the start; once results exist the
    watcher leaves Ctrl-C to the flag checked between chunks (the call returns first)."""
    path = tmp_path / "run.nc"
    path.write_bytes(b"start only")
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED.format(path=str(path), flag=nothing_computed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.3)  # into the C call
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if nothing_computed:
        assert proc.returncode == 130 and time.perf_counter() - t0 < 1.0, (proc.returncode, err)
        assert err.decode().strip().splitlines()[-1].startswith("Interrupted before the first step was computed")
        assert not path.exists()
    else:  # Python raised KeyboardInterrupt once the C call returned: nothing removed
        assert b"KeyboardInterrupt" in err and path.exists() and time.perf_counter() - t0 > 0.5
        assert b"Interrupted before" not in err


def test_ctrl_c_is_a_keyboard_interrupt_that_except_exception_does_not_swallow():
    """A loop over runs with ``except Exception`` (or ``except lv.SimulationError``) stops on Ctrl-C; the
    partial Solution is still on the error."""
    err = lv.SimulationInterrupted("Interrupted after 3 of 10 steps.", solution="partial", step=3, time=0.3)
    assert isinstance(err, KeyboardInterrupt) and not isinstance(err, Exception)
    done = []
    with pytest.raises(KeyboardInterrupt) as got:
        for k in range(3):
            try:
                done.append(k)
                raise err
            except Exception:  # noqa: BLE001 - what a user's loop over schemes does
                continue
    assert done == [0] and got.value.solution == "partial" and got.value.step == 3


def test_run_without_a_scheme_picks_one_that_accepts_the_system(capsys):
    """The three-bar swing has a singular mass matrix, which VI-S (the default) cannot run: livens run picks
    vi-lagrange, says why, and runs; a system VI-S accepts keeps VI-S without a note."""
    from livens.cli import _default_scheme

    name, note = _default_scheme(lv.examples.load("three-bar-swing", n_elements=2))
    assert name == "vi-lagrange" and "VI-S cannot run this system" in note and "singular" in note
    assert _default_scheme(lv.examples.load("pendulum-3d")) == ("VI-S", None)
    assert main(["run", "three-bar-swing", "--set", "n_elements=2", "--t-end", "0.002", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "running vi-lagrange instead" in captured.err and captured.out.startswith("vi-lagrange")
