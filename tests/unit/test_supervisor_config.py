"""The configuration `fleetctl supervisor-config` renders, read back by supervisord's own parser."""

from __future__ import annotations

import platform
import shlex
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from supervisor.datatypes import RestartUnconditionally
from supervisor.options import ServerOptions

from fleet.errors import ConfigError
from fleet.process.envfile import parse_env, render_env
from fleet.process.supervisor import STOP_MARGIN_S, SupervisorOptions, render, slot_number, worker_name

HOST = platform.node()


def options(tmp: Path, **kw: Any) -> SupervisorOptions:
    base: dict[str, Any] = dict(
        bin_dir="/opt/fleet/venv/bin",
        directory=str(tmp),
        workers=2,
        max_workers=5,
        apps=("myapp.jobs",),
        env_file="/etc/fleet/fleet.env",
        socket=str(tmp / "s.sock"),
        pidfile=str(tmp / "sd.pid"),
    )
    base.update(kw)
    return SupervisorOptions(**base)


def parse(tmp: Path, text: str, name: str = "supervisord.conf") -> ServerOptions:
    path = tmp / name
    path.write_text(text)
    so = ServerOptions()
    so.realize(args=["-c", str(path)])
    assert so.parse_criticals == []
    return so


def processes(so: ServerOptions) -> dict[str, Any]:
    return {p.name: (g.name, p) for g in so.process_group_configs for p in g.process_configs}


def test_supervisord_accepts_it_ticker_and_worker_slots(tmp_path: Path) -> None:
    so = parse(tmp_path, render(options(tmp_path)))
    procs = processes(so)
    assert sorted(procs) == [
        "alert_00",
        "ticker_00",
        "worker_00",
        "worker_01",
        "worker_02",
        "worker_03",
        "worker_04",
    ]
    assert procs["alert_00"][0] == "fleet-alert"
    assert {procs[n][0] for n in procs if n.startswith("worker")} == {"fleet-workers"}
    assert procs["ticker_00"][0] == "fleet-ticker"
    # The first N slots start with supervisord; the others wait for `fleetctl scale`.
    assert [procs[worker_name(i)][1].autostart for i in range(5)] == [True, True, False, False, False]
    w = procs["worker_03"][1]
    assert shlex.split(w.command) == [
        "/opt/fleet/venv/bin/fleetctl",
        "exec-env",
        "/etc/fleet/fleet.env",
        "--",
        "/opt/fleet/venv/bin/fleet-worker",
        "--app",
        "myapp.jobs",
        "--grace",
        "30",
        "--id",
        f"{HOST}:worker_03",
    ]
    assert shlex.split(procs["ticker_00"][1].command)[-2:] == ["--id", f"{HOST}:ticker_00"]
    # the alert process: `fleetctl alert` under exec-env, like the others
    assert shlex.split(procs["alert_00"][1].command)[-5:] == [
        "--",
        "/opt/fleet/venv/bin/fleetctl",
        "alert",
        "--id",
        f"{HOST}:alert_00",
    ]
    for _group, p in procs.values():
        assert p.stopsignal == signal.SIGTERM and p.autorestart is RestartUnconditionally
        assert p.killasgroup and not p.stopasgroup
        assert p.startsecs >= 1 and p.startretries >= 3
        assert p.directory == str(tmp_path)
        assert p.environment["PYTHONUNBUFFERED"] == "1"
        assert "FLEET_DATABASE_URL" not in p.environment  # it comes from the environment file
    assert w.stopwaitsecs == 30 + STOP_MARGIN_S


def test_control_socket_is_a_unix_socket_closed_to_others(tmp_path: Path) -> None:
    so = parse(tmp_path, render(options(tmp_path)))
    [server] = so.server_configs
    assert server["family"] == 1 and server["file"] == str(tmp_path / "s.sock")  # AF_UNIX
    assert server["chmod"] == 0o700
    assert so.nodaemon is True and so.pidfile == str(tmp_path / "sd.pid")
    assert f"serverurl=unix://{tmp_path / 's.sock'}" in render(options(tmp_path))


def test_stopwaitsecs_follows_the_grace_period(tmp_path: Path) -> None:
    so = parse(tmp_path, render(options(tmp_path, grace_s=90.5)))
    w = processes(so)["worker_00"][1]
    assert w.stopwaitsecs == 91 + STOP_MARGIN_S
    assert "--grace 90.5" in w.command


def test_logs_to_rotated_files_or_to_stdout(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    so = parse(tmp_path, render(options(tmp_path, logs_dir=str(logs))))
    w = processes(so)["worker_01"][1]
    assert w.stdout_logfile == str(logs / "worker_01.log") and w.redirect_stderr
    assert w.stdout_logfile_maxbytes > 0 and w.stdout_logfile_backups > 0
    assert so.logfile == str(logs / "supervisord.log")

    so = parse(tmp_path, render(options(tmp_path)))
    w = processes(so)["worker_01"][1]
    assert w.stdout_logfile == "/dev/stdout" and w.stdout_logfile_maxbytes == 0 and w.redirect_stderr


def test_logs_to_syslog_for_journald(tmp_path: Path) -> None:
    so = parse(tmp_path, render(options(tmp_path, syslog=True)))
    w = processes(so)["worker_01"][1]
    assert w.stdout_syslog and w.stdout_logfile is None and w.redirect_stderr
    with pytest.raises(ConfigError, match="either"):
        render(options(tmp_path, syslog=True, logs_dir=str(tmp_path)))


def test_several_tickers_and_no_spare_slots(tmp_path: Path) -> None:
    so = parse(tmp_path, render(options(tmp_path, tickers=3, workers=4, max_workers=4, user="root")))
    procs = processes(so)
    assert sorted(n for n in procs if n.startswith("ticker")) == ["ticker_00", "ticker_01", "ticker_02"]
    assert all(p.autostart for _g, p in procs.values())
    assert "fleet-worker-spare" not in render(options(tmp_path, workers=4, max_workers=4))


def test_default_slots_leave_room_to_scale(tmp_path: Path) -> None:
    o = options(tmp_path, max_workers=None, workers=3)
    assert o.slots == 16
    assert len([n for n in processes(parse(tmp_path, render(o))) if n.startswith("worker")]) == 16
    assert options(tmp_path, max_workers=None, workers=20).slots == 20


def test_awkward_paths_survive_quoting_and_percent_signs(tmp_path: Path) -> None:
    odd = tmp_path / "my app 100%"
    odd.mkdir()
    env = odd / "fleet env"
    o = options(tmp_path, directory=str(odd), env_file=str(env), jobs_file=str(odd / "j.toml"))
    so = parse(tmp_path, render(o))
    w = processes(so)["worker_00"][1]
    argv = shlex.split(w.command)
    assert argv[2] == str(env) and argv[argv.index("--jobs") + 1] == str(odd / "j.toml")
    assert w.directory == str(odd)


def test_no_env_file_runs_the_programs_directly(tmp_path: Path) -> None:
    so = parse(tmp_path, render(options(tmp_path, env_file=None)))
    assert shlex.split(processes(so)["worker_00"][1].command)[0] == "/opt/fleet/venv/bin/fleet-worker"


def test_programs_only_can_be_included_into_an_existing_supervisord(tmp_path: Path) -> None:
    text = render(options(tmp_path, programs_only=True))
    assert "[supervisord]" not in text and "[unix_http_server]" not in text
    (tmp_path / "fleet.conf").write_text(text)
    main = f"[supervisord]\nnodaemon=true\npidfile={tmp_path}/x.pid\n[include]\nfiles = fleet.conf\n"
    assert "worker_04" in processes(parse(tmp_path, main))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"workers": 6}, "--max-workers"),
        ({"apps": ()}, "--app"),
        ({"tickers": -1}, "--tickers"),
        ({"directory": "/srv/a ;b"}, "cannot render"),
        ({"env_file": "/etc/a\nb"}, "cannot render"),
        ({"socket": "/" + "s" * 120}, "too long"),
        ({"max_workers": 101, "workers": 2}, "at most 100"),
        ({"grace_s": -1.0}, "--grace"),
    ],
)
def test_options_that_cannot_be_rendered_say_why(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        render(replace(options(tmp_path), **change))


def test_command_jobs_alone_are_enough(tmp_path: Path) -> None:
    text = render(options(tmp_path, apps=(), jobs_file="/etc/fleet/jobs.toml"))
    assert "--jobs /etc/fleet/jobs.toml" in text and "--app" not in text


def test_slot_numbers() -> None:
    assert worker_name(7) == "worker_07" and slot_number("worker_07") == 7
    assert slot_number("worker_123") == 123
    assert slot_number("ticker_00") is None and slot_number("worker_x") is None


# -- environment files -----------------------------------------------------------------------------


def test_env_file_reads_like_systemd() -> None:
    text = """
# comment
; another
FLEET_DATABASE_URL=postgresql://fleet:s3cr=t@db.internal:5432/fleet?sslmode=require
export FLEET_LEASE = 30
QUOTED="a \\"b\\" \\\\ c"
SINGLE='no $expansion \\n here'
EMPTY=
SPACES =  padded value\t
"""
    assert parse_env(text) == {
        "FLEET_DATABASE_URL": "postgresql://fleet:s3cr=t@db.internal:5432/fleet?sslmode=require",
        "FLEET_LEASE": "30",
        "QUOTED": 'a "b" \\ c',
        "SINGLE": "no $expansion \\n here",
        "EMPTY": "",
        "SPACES": "padded value",
    }


@pytest.mark.parametrize("line", ["no equals sign", "1BAD=x", "A-B=x", "X='open", 'Y="open'])
def test_env_file_errors_name_the_line(line: str) -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_env(f"OK=1\n{line}\n", "fleet.env")


def test_env_file_round_trip() -> None:
    env = {"A": "plain", "B": " padded ", "C": 'it\'s "both" \\', "D": "'quoted'", "E": ""}
    assert parse_env(render_env(env)) == env
    assert (
        render_env({"FLEET_DATABASE_URL": "postgresql://u:p@h/db"})
        == "FLEET_DATABASE_URL=postgresql://u:p@h/db\n"
    )


def test_alert_processes_scale_like_tickers_and_can_be_left_out(tmp_path: Path) -> None:
    procs = processes(parse(tmp_path, render(options(tmp_path, alerts=2))))
    assert sorted(n for n in procs if n.startswith("alert")) == ["alert_00", "alert_01"]
    assert all(procs[n][1].autostart for n in ("alert_00", "alert_01"))
    none = processes(parse(tmp_path, render(options(tmp_path, alerts=0)), "none.conf"))
    assert not [n for n in none if n.startswith("alert")]
    with pytest.raises(ConfigError, match="--alerts"):
        render(options(tmp_path, alerts=-1))
