"""An environment file that others may write is refused, one anyone may read is warned of, and only
FLEET_*, OTEL_*, PG* and what the operator names may be set through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.envfile import read_env_file
from fleet.errors import ConfigError
from fleet.ops.cli import main as fleetctl


def env_file(tmp_path: Path, text: str, mode: int) -> Path:
    path = tmp_path / "fleet.env"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602, 0o660])
def test_a_file_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    with pytest.raises(ConfigError, match="writable by group or others"):
        read_env_file(env_file(tmp_path, "FLEET_POLL=1\n", mode))


def test_a_file_anyone_may_read_is_read_with_a_warning(tmp_path: Path) -> None:
    env, warnings = read_env_file(env_file(tmp_path, "FLEET_DATABASE_URL=postgresql:///x\n", 0o644))
    assert env == {"FLEET_DATABASE_URL": "postgresql:///x"}
    assert len(warnings) == 1 and "readable by anyone" in warnings[0]
    assert read_env_file(env_file(tmp_path, "FLEET_POLL=1\n", 0o640))[1] == []


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "PATH", "APP_TOKEN"])
def test_variables_outside_the_allow_list_are_refused_naming_them(tmp_path: Path, name: str) -> None:
    path = env_file(tmp_path, f"FLEET_POLL=1\n{name}=x\n", 0o600)
    with pytest.raises(ConfigError, match=f"{name} is not allowed"):
        read_env_file(path)


def test_named_patterns_are_allowed(tmp_path: Path) -> None:
    path = env_file(tmp_path, "OTEL_SERVICE_NAME=a\nPGSSLMODE=require\nAPP_TOKEN=t\nPYTHONPATH=/srv\n", 0o600)
    env, _ = read_env_file(path, ["APP_*", "PYTHONPATH"])
    assert set(env) == {"OTEL_SERVICE_NAME", "PGSSLMODE", "APP_TOKEN", "PYTHONPATH"}


def test_exec_env_refuses_with_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = env_file(tmp_path, "LD_PRELOAD=/tmp/evil.so\n", 0o600)
    assert fleetctl(["exec-env", str(path), "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "LD_PRELOAD is not allowed" in err[0]
    bad = env_file(tmp_path, "FLEET_POLL=1\n", 0o666)
    assert fleetctl(["exec-env", str(bad), "--", "true"]) == 2
    assert "writable by group or others" in capsys.readouterr().err


def test_allowed_patterns_reach_exec_env_through_the_supervisord_command(tmp_path: Path) -> None:
    import shlex

    from fleet.supervisor import SupervisorOptions, render

    conf = render(SupervisorOptions(bin_dir="/v/bin", directory="/srv", apps=("jobs",), env_allow=("APP_*",)))
    line = next(x for x in conf.splitlines() if x.startswith("command=") and "fleet-worker" in x)
    argv = shlex.split(line.removeprefix("command="))
    assert argv[:4] == ["/v/bin/fleetctl", "exec-env", "--allow=APP_*", "/etc/fleet/fleet.env"]
