"""``livens run ... --resume FILE``: a run stopped by Ctrl-C continues from the ``_partial.nc`` it left,
to the nodes of one uninterrupted run, with the command the Ctrl-C message prints; a file that does not
fit the command is refused with the option to give."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import livens as lv
from livens.cli import main
from livens.driver import executors

RUN = ["run", "pendulum-3d", "--h", "0.001", "--t-end", "3", "--tol", "1e-12", "--quiet"]
STEM = "pendulum-3d_VI-S"


@pytest.fixture
def ctrl_c_in_chunk(monkeypatch):
    """Ctrl-C (a real SIGINT to this process) as the chunk ``k`` of the next run ends: the time loop
    stops after it, as after a key press while it ran (a native kernel stops within its chunk at once:
    the press comes once the chunk is done, so that the run stops after exactly k chunks)."""
    when = {"chunk": None, "calls": 0}

    def pressing(advance):
        def advance_then_press(self, n, n_stop):
            when["calls"] += 1
            done = advance(self, n, n_stop)
            if when["calls"] == when["chunk"]:
                os.kill(os.getpid(), signal.SIGINT)
            return done

        return advance_then_press

    # a single run's executor: its one member through a native kernel, or XLA's program
    for cls in (executors.NativeMembers, executors.Dispatched):
        monkeypatch.setattr(cls, "advance", pressing(cls.advance))

    def arm(k):
        when["chunk"], when["calls"] = k, 0

    return arm


def _stopped(argv, capsys):
    """Run argv, which Ctrl-C stops: the command its message gives to continue."""
    assert main(argv) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("Interrupted after ") and "_partial.nc" in last, last
    command = last.split("Continue it with: ")[1]
    assert command.startswith("livens run ")
    return shlex.split(command)[1:]


@pytest.mark.parametrize("save_every", [1, 5])
def test_resume_from_the_cli_reaches_the_nodes_of_an_uninterrupted_run(tmp_path, capsys, ctrl_c_in_chunk, save_every):
    """Ctrl-C in the third chunk (512 steps each), Ctrl-C again in the continuation's second chunk, then
    the printed command: the files are those of one run, node for node. With save_every 1 the stopped
    run's last node is its last step, and the file holds the predictor's history and the compensated
    sums' carries there: the continuation takes the uninterrupted run's steps, to the bit. With
    save_every 5 the last kept node lies before the last step, which the continuation computes again
    without that history: to the Newton tolerance."""
    keep = ["--save-every", str(save_every)]
    assert main([*RUN, *keep, "--out", str(tmp_path / "whole")]) == 0
    whole = lv.load(tmp_path / "whole" / f"{STEM}.nc")
    out = str(tmp_path / "stopped")

    ctrl_c_in_chunk(3)
    command = _stopped([*RUN, *keep, "--out", out], capsys)
    partial = os.path.join(out, f"{STEM}_partial.nc")
    assert command == [*RUN, *keep, "--out", out, "--resume", partial]
    first = lv.load(partial)
    assert first.t[-1] == pytest.approx(1536 // save_every * save_every * 1e-3)

    ctrl_c_in_chunk(2)  # the continuation stopped too: its partial file holds the whole run so far
    again = _stopped(command, capsys)
    assert again == command
    second = lv.load(partial)
    assert second.t[0] == 0.0 and second.t[-1] > first.t[-1] + 0.5
    np.testing.assert_array_equal(second.q[: len(first.t)], first.q)

    ctrl_c_in_chunk(None)
    assert main(again) == 0
    printed = capsys.readouterr().out
    assert "resumed at t = " in printed and "  steps " in printed
    done = lv.load(os.path.join(out, f"{STEM}.nc"))
    assert not os.path.exists(partial)  # the complete file holds its nodes
    assert done.t.shape == whole.t.shape and done.save_every == save_every
    np.testing.assert_allclose(done.t, whole.t, rtol=0, atol=1e-12)
    for name in ("q", "p", "v"):
        np.testing.assert_allclose(getattr(done, name), getattr(whole, name), rtol=0, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(done.lam, whole.lam, rtol=0, atol=1e-7)
    if save_every == 1:  # resumed where it stopped, with the history of the stopped run: the same bits
        for name in ("q", "p", "lam"):
            np.testing.assert_array_equal(getattr(done, name), getattr(whole, name), err_msg=name)
    assert done.summary()["steps"] == whole.summary()["steps"] == 3000
    assert done.summary()["nodes kept"] == 3000 // save_every + 1
    assert os.path.exists(os.path.join(out, f"{STEM}.csv")) and os.path.exists(os.path.join(out, f"{STEM}.png"))


@pytest.fixture(scope="module")
def short_file(tmp_path_factory):
    """A finished run of 0.5 s (any livens file of the run can be continued)."""
    out = tmp_path_factory.mktemp("short")
    assert main(["run", "pendulum-3d", "--h", "0.001", "--t-end", "0.5", "--quiet", "--out", str(out)]) == 0
    return out / f"{STEM}.nc"


@pytest.fixture
def short_run(short_file, tmp_path):
    """A copy of ``short_file``: stop.nc."""
    shutil.copyfile(short_file, tmp_path / "stop.nc")
    return str(tmp_path / "stop.nc")


@pytest.mark.parametrize(
    "options, refusal, fix",
    [
        (["--h", "0.002"], "give --h 0.001", ["--h", "0.001"]),
        (["--scheme", "EM"], "give --scheme ggl-vi", ["--scheme", "ggl-vi"]),
        (["--t-end", "0.5"], "give a --t-end beyond it", ["--t-end", "0.8"]),
        (["--save-every", "3"], "give --save-every 1 or leave it out", ["--save-every", "1"]),
        (["--set", "mass=2"], "give the example and the --set options of the stopped run", []),
    ],
)
def test_resume_refuses_a_file_of_another_run_and_names_the_option(short_run, tmp_path, capsys, options, refusal, fix):
    base = ["run", "pendulum-3d", "--h", "0.001", "--t-end", "0.8", "--quiet", "--resume", short_run]
    assert main([*base, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --resume {short_run}: ") and refusal in err, err
    assert main([*base, *fix, "--out", str(tmp_path / "fixed")]) == 0  # the option it names works
    (written,) = (tmp_path / "fixed").glob("*.nc")  # named after the scheme as given
    assert lv.load(written).t[-1] == pytest.approx(0.8)


def test_resume_refuses_the_file_the_run_writes(short_run, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    os.replace(short_run, out / f"{STEM}.nc")
    argv = ["run", "pendulum-3d", "--h", "0.001", "--t-end", "0.8", "--quiet", "--out", str(out)]
    assert main([*argv, "--resume", str(out / f"{STEM}.nc")]) == 2
    err = capsys.readouterr().err
    copy = str(out / f"{STEM}_partial.nc")
    assert "this run writes that file while it goes" in err and copy in err
    os.replace(out / f"{STEM}.nc", copy)
    assert main([*argv, "--resume", copy]) == 0  # the copy it suggests continues
    assert lv.load(out / f"{STEM}.nc").t[-1] == pytest.approx(0.8) and not os.path.exists(copy)


def test_ctrl_c_message_of_a_scheme_with_a_start_step_says_it_cannot_be_continued(tmp_path, capsys, ctrl_c_in_chunk):
    ctrl_c_in_chunk(2)
    argv = ["run", "pendulum-3d", "--scheme", "vi-lagrange", "--h", "0.001", "--t-end", "2", "--quiet"]
    assert main([*argv, "--out", str(tmp_path)]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot be continued from the file" in last and "--resume" not in last
    ctrl_c_in_chunk(None)
    assert main([*argv, "--resume", str(tmp_path / "pendulum-3d_vi-lagrange_partial.nc")]) == 2
    assert "rerun it without --resume" in capsys.readouterr().err


def test_ctrl_c_in_the_last_chunk_says_the_run_reached_its_end(tmp_path, capsys, ctrl_c_in_chunk):
    """1000 steps in chunks of 512: Ctrl-C in the second chunk comes after the last step; the line
    says so instead of giving a command that --resume would refuse (nothing beyond t_end)."""
    ctrl_c_in_chunk(2)
    argv = ["run", "pendulum-3d", "--h", "0.001", "--t-end", "1", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Interrupted after 1000 of 1000 steps" in last and "Continue it with" not in last
    assert "The run had reached its end (t = 1)" in last
    assert lv.load(tmp_path / f"{STEM}_partial.nc").t[-1] == pytest.approx(1.0)


def test_ctrl_c_from_outside_then_the_printed_command_reaches_the_nodes_of_one_run(tmp_path):
    """The user's path end to end, each command in a process of its own: ``livens run`` of 1e7 steps,
    keeping one node in every 10, stopped by a SIGINT from outside (wherever the run is: inside a
    chunk of native code, between chunks, writing the file) once the streamed file holds steps; then
    the command its message prints, with a nearer --t-end (the printed one is 10,000 s away); then
    one uninterrupted run to the same t_end (in Python; the test above checks the files of one).

    The nodes up to the stopped run's last kept one are the same bits as the uninterrupted run's
    (the same steps). From there the continuation agrees to the Newton tolerance (1e-12 on the
    residual: q, p, v to 1e-9, lambda to 1e-7), not to the bit: it starts Newton's extrapolated
    guess afresh, since a file left by Ctrl-C holds no predictor history (and with save_every 10 its
    last kept node lies before the last step computed, which the continuation computes again)."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(lv.__file__)))
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    livens_cli = [sys.executable, "-m", "livens.cli"]
    out = str(tmp_path / "stopped")
    argv = ["run", "pendulum-3d", "--h", "0.001", "--t-end", "10000", "--tol", "1e-12"]
    argv += ["--save-every", "10", "--quiet", "--out", out]
    streamed = os.path.join(out, f"{STEM}.nc")
    proc = subprocess.Popen([*livens_cli, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:  # steps beyond the start node on disk
        time.sleep(0.2)
        if os.path.exists(streamed) and os.path.getsize(streamed) > 200_000:
            break
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    partial = os.path.join(out, f"{STEM}_partial.nc")
    assert last.startswith("Interrupted after ") and "Continue it with: livens run " in last, err
    command = shlex.split(last.split("Continue it with: ")[1])
    assert command == ["livens", *argv, "--resume", partial]
    first = lv.load(partial)
    n_kept = len(first.t)
    assert n_kept > 100 and first.save_every == 10

    # the printed command, to 3 s beyond the stopped run's last kept node (a whole number of kept nodes)
    t_end = round((n_kept - 1 + 300) * 10 * 0.001, 6)
    command[command.index("--t-end") + 1] = repr(t_end)
    res = subprocess.run([*livens_cli, *command[1:]], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"resumed at t = {first.t[-1]:g} from {partial}" in res.stdout
    done = lv.load(streamed)
    assert not os.path.exists(partial)

    whole = lv.simulate(lv.examples.load("pendulum-3d"), "VI-S", h=0.001, t_end=t_end, tol=1e-12, save_every=10)
    assert done.t.shape == whole.t.shape == (n_kept + 300,)
    assert done.summary()["steps"] == whole.summary()["steps"] == round(t_end / 0.001)
    for name in ("q", "p"):  # the stopped run's nodes: the file's bits, which are the uninterrupted run's
        np.testing.assert_array_equal(getattr(done, name)[:n_kept], getattr(first, name), err_msg=name)
        np.testing.assert_array_equal(getattr(done, name)[:n_kept], getattr(whole, name)[:n_kept], err_msg=name)
    np.testing.assert_array_equal(done.v[: n_kept - 1], whole.v[: n_kept - 1])  # per step (VI-S), kept ones
    np.testing.assert_allclose(done.t, whole.t, rtol=0, atol=1e-9)
    for name in ("q", "p", "v"):  # the continuation: to the Newton tolerance
        np.testing.assert_allclose(getattr(done, name), getattr(whole, name), rtol=0, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(done.lam, whole.lam, rtol=0, atol=1e-7)
