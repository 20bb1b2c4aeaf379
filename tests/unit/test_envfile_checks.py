"""An environment file that others may write or own, or that sits in a directory others may write or
own, is refused; one anyone may read is warned of; and only FLEET_*, OTEL_*, PG* and what the
operator names may be set through it, FLEET_APP and FLEET_JOBS_FILE only when named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.ops.cli import main as fleetctl
from fleet.process import envfile
from fleet.process.envfile import read_env_file


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

    from fleet.process.supervisor import SupervisorOptions, render

    conf = render(SupervisorOptions(bin_dir="/v/bin", directory="/srv", apps=("jobs",), env_allow=("APP_*",)))
    line = next(x for x in conf.splitlines() if x.startswith("command=") and "fleet-worker" in x)
    argv = shlex.split(line.removeprefix("command="))
    assert argv[:4] == ["/v/bin/fleetctl", "exec-env", "--allow=APP_*", "/etc/fleet/fleet.env"]


OTHER_UID = 65534  # nobody


def owned_by_someone_else(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` another user's: given to nobody where this test may (as root), else seen from a
    user that is neither its owner nor root."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, -1)
    else:
        uid = path.stat().st_uid
        monkeypatch.setattr(os, "geteuid", lambda: uid + 1)


def test_a_file_another_user_owns_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = env_file(tmp_path, "FLEET_POLL=1\n", 0o600)
    assert read_env_file(path)[0] == {"FLEET_POLL": "1"}
    owned_by_someone_else(path, monkeypatch)
    with pytest.raises(
        ConfigError, match=r"fleet\.env: owned by uid \d+, neither this user \(uid \d+\) nor root"
    ):
        read_env_file(path)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "etc"
    directory.mkdir()
    path = env_file(directory, "FLEET_POLL=1\n", 0o600)
    directory.chmod(mode)
    with pytest.raises(ConfigError, match=f"etc: writable by group or others \\(mode 0{mode:o}\\)"):
        read_env_file(path)
    directory.chmod(0o1777 if mode == 0o777 else 0o755)  # sticky, as /tmp: none replaces another's file
    assert read_env_file(path)[0] == {"FLEET_POLL": "1"}


def test_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "theirs"
    directory.mkdir()
    path = env_file(directory, "FLEET_POLL=1\n", 0o600)
    if os.geteuid() == 0:  # the file stays root's: only the directory becomes someone else's
        os.chown(directory, OTHER_UID, -1)
        with pytest.raises(ConfigError, match=r"theirs: owned by uid 65534"):
            read_env_file(path)
    # seen from a user that owns neither it nor is root, whoever runs this test
    with pytest.raises(ConfigError, match=r"theirs: owned by uid \d+, neither this user"):
        envfile._check_directory(directory, directory.stat().st_uid + 1)


def test_a_symlinked_file_is_checked_where_it_lives(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    real = env_file(shared, "FLEET_POLL=1\n", 0o600)
    link = tmp_path / "link.env"
    link.symlink_to(real)
    assert read_env_file(link)[0] == {"FLEET_POLL": "1"}
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="shared: writable by group or others"):
        read_env_file(link)


@pytest.mark.parametrize("name", ["FLEET_APP", "FLEET_JOBS_FILE"])
def test_settings_that_choose_code_need_naming(tmp_path: Path, name: str) -> None:
    path = env_file(tmp_path, f"FLEET_POLL=1\n{name}=evil\n", 0o600)
    with pytest.raises(ConfigError, match=f"{name} is not allowed in an environment file unless --env-allow"):
        read_env_file(path)
    with pytest.raises(ConfigError, match=f"{name} is not allowed"):
        read_env_file(path, ["APP_*"])
    assert read_env_file(path, [name])[0][name] == "evil"
    assert read_env_file(path, ["FLEET_*"])[0][name] == "evil"  # a pattern the operator gave matches it
