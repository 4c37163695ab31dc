"""Configuration files and the CLI's behaviour on success and failure."""

import textwrap

import numpy as np
import pytest

import livens as lv
from livens.cli import main
from livens.config import ConfigError, load_run_config


def _write(tmp_path, text, name="run.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_config_run_writes_outputs(tmp_path, capsys):
    cfg = _write(
        tmp_path,
        """
        example = "pendulum-3d"
        scheme = "VI-S"
        h = 0.01
        t_end = 0.2
        [parameters]
        mass = 2.0
    """,
    )
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "steps/s" in text and "max |g|" in text and "mean Newton iterations" in text
    sol = lv.load(out / "pendulum-3d_VI-S.nc")
    assert sol.n_steps == 20 and sol.meta["problem_parameters"] == {"mass": 2.0}
    assert (out / "pendulum-3d_VI-S.png").stat().st_size > 10000
    assert (out / "pendulum-3d_VI-S.csv").exists()


@pytest.mark.parametrize(
    "text, match",
    [
        ('example = "pendulum-3d"\nschem = "VI-S"\n', "unknown key 'schem'. Did you mean 'scheme'"),
        ('example = "pendulum-3d"\nh = -1.0\n', "h must be a positive number"),
        ('example = "pendulum-3d"\nh = "small"\n', "h must be float"),
        ('example = "pendulm-3d"\n', "unknown example 'pendulm-3d'. Did you mean 'pendulum-3d'"),
        ('example = "pendulum-3d"\n[parameters]\nmas = 1.0\n', "no parameter 'mas'. Did you mean 'mass'"),
        ('system = "os.system"\n', 'system must be "module:function"'),
        ("h = 0.1\n", "exactly one of 'example'"),
        ('example = "pendulum-3d"\nscheme = "VI-S"\n[scheme_parameters]\ntheta = 0.5\n', "unknown parameter 'theta'"),
        ('example = "pendulum-3d"\nguess = "clever"\n', "guess must be"),
        ('example = "pendulum-3d"\nrescue = "yes"\n', "rescue must be bool"),
        ('example = "pendulum-3d"\nrescue = 1\n', "rescue must be bool"),
        ('example = "pendulum-3d"\nh = 0.1\nh = 0.2\n', "not valid TOML"),
    ],
)
def test_config_errors_name_the_key(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_run_config(_write(tmp_path, text))


def test_config_rescue_switch_reaches_simulate(tmp_path):
    cfg = load_run_config(_write(tmp_path, 'example = "pendulum-3d"\nrescue = false\n'))
    assert cfg.run_kwargs()["rescue"] is False
    assert load_run_config(_write(tmp_path, 'example = "pendulum-3d"\n')).run_kwargs()["rescue"] is True


def test_user_system_imported_as_module_function(tmp_path, monkeypatch):
    (tmp_path / "my_model.py").write_text(
        textwrap.dedent("""
        import jax.numpy as jnp
        import livens as lv

        def make(length=1.0):
            s = lv.System(mass_matrix=jnp.eye(3), potential=lambda q: 9.81 * q[2],
                          constraints=lambda q: jnp.array([0.5 * (q @ q - length**2)]))
            return lv.Problem(s, q0=[length, 0, 0], v0=[0, 1, 0], h=0.01, t_end=0.1)

        def not_a_problem():
            return 42
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_run_config(_write(tmp_path, 'system = "my_model:make"\n[parameters]\nlength = 2.0\n'))
    problem = cfg.problem()
    sol = lv.simulate(problem, **cfg.run_kwargs())
    assert np.allclose(np.linalg.norm(sol.q, axis=1), 2.0)
    bad = load_run_config(_write(tmp_path, 'system = "my_model:not_a_problem"\n', "b.toml"))
    with pytest.raises(ConfigError, match="returned int, not a livens.Problem"):
        bad.problem()
    missing = load_run_config(_write(tmp_path, 'system = "no_such_module_xyz:make"\n', "c.toml"))
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'"):
        missing.problem()
    # a misspelled parameter of the user's function names the file, the key and the nearest parameter
    typo = load_run_config(_write(tmp_path, 'system = "my_model:make"\n[parameters]\nlenght = 2.0\n', "d.toml"))
    with pytest.raises(ConfigError) as err:
        typo.problem()
    msg = str(err.value)
    assert "d.toml" in msg and "'lenght'" in msg and "Did you mean 'length'?" in msg and "make() takes: length" in msg


def test_cli_failed_run_exits_nonzero_with_message_and_partial_files(tmp_path, capsys):
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
    assert code == 3
    assert err.startswith("error: Newton did not converge in step")
    assert "Traceback" not in err
    partial = list(tmp_path.glob("*_partial.nc"))
    assert partial and lv.load(partial[0]).n_steps >= 0


def test_cli_bad_input_exits_2(capsys):
    assert main(["run", "no-such-example"]) == 2
    assert "Unknown example" in capsys.readouterr().err
    assert main(["run", "pendulum-3d", "--h", "-1"]) == 2
    assert "h must be positive" in capsys.readouterr().err


def test_cli_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "pendulum-3d" in out and "heavy-top" in out and "ggl-vi" in out and "VI-S" in out


def test_user_system_found_next_to_the_config_file(tmp_path, capsys):
    """run.toml and the model file side by side work from any working directory."""
    import os
    import sys

    (tmp_path / "beside_model.py").write_text(
        textwrap.dedent("""
        import jax.numpy as jnp
        import livens as lv

        def make(length=1.0):
            s = lv.System(mass_matrix=jnp.eye(3), potential=lambda q: 9.81 * q[2],
                          constraints=lambda q: jnp.array([0.5 * (q @ q - length**2)]))
            return lv.Problem(s, q0=[length, 0, 0], v0=[0, 1, 0], h=0.01, t_end=0.1, name="mine")
    """)
    )
    cfg = _write(tmp_path, 'system = "beside_model:make"\nscheme = "EM"\n[parameters]\nlength = 2.0\n')
    assert str(tmp_path) not in sys.path
    cwd = os.getcwd()
    os.chdir("/")
    try:
        assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    finally:
        os.chdir(cwd)
        sys.modules.pop("beside_model", None)
    assert str(tmp_path) not in sys.path
    sol = lv.load(tmp_path / "out" / "beside_model_make_EM.nc")
    assert sol.n_steps == 10 and np.allclose(np.linalg.norm(sol.q, axis=1), 2.0)
    capsys.readouterr()
