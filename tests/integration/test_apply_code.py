"""`fleetctl apply --app MODULE [FILE...] [--plan]`: schedules declared in code beside the files'."""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet import declare, jobs
from fleet.store.registry import process_register
from tests.integration.ops_support import fleetctl, snapshot
from tests.support import apply_text, scalar

App = Callable[[str], str]

APP = """
import fleet

@fleet.job("reports.nightly", schedule=fleet.Cron("0 2 * * *", timezone="Europe/Berlin"))
def nightly(ctx):
    pass

@fleet.job("tick", schedule=fleet.Every("5m", catchup="skip"))
def tick(ctx):
    pass

cleanup = fleet.Schedule(
    name="cleanup", every="1h", job="cleanup.run", args={"days": 30}, overlap="queue",
    retry={"max_attempts": 3, "base": "10s"}, retention="90d",
)
"""

FILE = '[[schedule]]\nname = "from-file"\nevery = "10m"\njob = "tick"\n'


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """Write an app module into a fresh current directory; returns its (unique) module name. The
    job and schedule registries start empty, as in a fresh fleetctl process."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(declare, "_DECLARED", [])
    monkeypatch.setattr(jobs, "_REGISTRY", {})
    written: list[str] = []

    def write(source: str) -> str:
        name = f"fleet_app_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def rows(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in conn.execute("SELECT * FROM fleet.schedules")}


def test_code_and_file_schedules_are_applied_together(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], app: App, tmp_path: Path
) -> None:
    module = app(APP)
    f = tmp_path / "more.toml"
    f.write_text(FILE)
    code, out, err = fleetctl(capsys, db_url, "apply", "--app", module, str(f))
    assert code == 0, err
    assert "created: from-file, reports.nightly, tick, cleanup" in out
    assert (
        "created 4, updated 0, replanned 0, unchanged 0, disabled 0: "
        f"applied 4 schedule(s) from {f} and --app {module}" in out
    )
    got = rows(conn)
    assert set(got) == {"reports.nightly", "tick", "cleanup", "from-file"}
    assert (got["reports.nightly"]["cron"], got["reports.nightly"]["timezone"]) == (
        "0 2 * * *",
        "Europe/Berlin",
    )
    assert (got["tick"]["every"], got["tick"]["catchup"], got["tick"]["job"]) == (
        timedelta(minutes=5),
        "skip",
        "tick",
    )
    c = got["cleanup"]
    assert (c["job"], c["args"], c["overlap"], c["max_attempts"], c["retry_base"], c["retention"]) == (
        "cleanup.run",
        {"days": 30},
        "queue",
        3,
        timedelta(seconds=10),
        timedelta(days=90),
    )
    assert got["tick"]["retention"] is None

    # The same module and file again: nothing to write.
    before = snapshot(conn)
    code, out, _ = fleetctl(capsys, db_url, "apply", "--app", module, str(f))
    assert code == 0 and "created 0, updated 0, replanned 0, unchanged 4, disabled 0" in out
    assert snapshot(conn) == before


def test_code_alone_with_prune_disables_the_rest(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], app: App
) -> None:
    apply_text(conn, FILE)
    code, out, err = fleetctl(capsys, db_url, "apply", "--app", app(APP), "--prune")
    assert code == 0, err
    assert "disabled: from-file" in out and "created 3," in out
    assert scalar(conn, "SELECT enabled FROM fleet.schedules WHERE name = 'from-file'") is False


@pytest.mark.parametrize("where", ["code and file", "code twice"])
def test_a_name_declared_twice_exits_2_naming_both_places(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    conn: psycopg.Connection[Any],
    app: App,
    tmp_path: Path,
    where: str,
) -> None:
    apply_text(conn, FILE)
    before = snapshot(conn)
    f = tmp_path / "dup.toml"
    f.write_text('[[schedule]]\nname = "tick"\nevery = "1m"\njob = "tick"\n')
    extra = "\nagain = fleet.Every('1m', name='cleanup', job='x')\n" if where == "code twice" else ""
    module = app(APP + extra)
    files = [str(f)] if where == "code and file" else []
    code, out, err = fleetctl(capsys, db_url, "apply", "--app", module, *files)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    if where == "code and file":
        assert line == f"fleetctl apply: schedule 'tick': name: declared twice, at {f} and at {module}.py:8"
    else:
        assert line == (
            f"fleetctl apply: schedule 'cleanup': name: declared twice, at {module}.py:12 "
            f"and at {module}.py:17"
        )
    assert snapshot(conn) == before


def test_an_invalid_declaration_is_the_files_error_naming_schedule_and_field(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], app: App, tmp_path: Path
) -> None:
    before = snapshot(conn)
    module = app("import fleet\nbad = fleet.Every('0s', name='x', job='j')\n")
    code, out, err = fleetctl(capsys, db_url, "apply", "--app", module)
    assert (code, out) == (2, "")
    assert err == f"fleetctl apply: {module}.py:2: schedule 'x': every: must be positive\n"
    f = tmp_path / "bad.toml"
    f.write_text('[[schedule]]\nname = "x"\nevery = "0s"\njob = "j"\n')
    _, _, file_err = fleetctl(capsys, db_url, "apply", str(f))
    assert file_err == "fleetctl apply: schedule 'x': every: must be positive\n"
    assert snapshot(conn) == before


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        (None, "No module named"),
        ("import fleet\nraise RuntimeError('no config\\nsecond line')\n", "RuntimeError: no config ("),
        ("def broken(:\n", "SyntaxError"),
        (
            "import fleet\n@fleet.job('a')\ndef a(ctx): pass\n@fleet.job('a')\ndef b(ctx): pass\n",
            "registered twice",
        ),
    ],
)
def test_a_module_that_fails_to_import_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    conn: psycopg.Connection[Any],
    app: App,
    source: str | None,
    needle: str,
) -> None:
    module = app(source) if source is not None else "no_such_fleet_app"
    before = snapshot(conn)
    code, out, err = fleetctl(capsys, db_url, "apply", "--app", module)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"fleetctl apply: --app: cannot import '{module}': ") and needle in line, line
    assert snapshot(conn) == before


def test_no_source_is_a_usage_error(capsys: pytest.CaptureFixture[str], db_url: str, app: App) -> None:
    code, _, err = fleetctl(capsys, db_url, "apply")
    assert code == 2 and err == "fleetctl apply: give a schedules FILE or --app MODULE (or both)\n"
    module = app("import fleet\n")
    code, _, err = fleetctl(capsys, db_url, "apply", "--app", module, "--prune")
    assert code == 2 and err.startswith(f"fleetctl apply: --app {module}: declared no schedule (")


def test_plan_prints_field_by_field_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "keep"\nevery = "5m"\njob = "noop"\n'
        '[[schedule]]\nname = "timing"\nevery = "5m"\njob = "noop"\n'
        '[[schedule]]\nname = "same"\nevery = "5m"\njob = "noop"\n'
        '[[schedule]]\nname = "gone"\nevery = "5m"\njob = "noop"\n',
    )
    f = tmp_path / "next.toml"
    f.write_text(
        '[[schedule]]\nname = "keep"\nevery = "5m"\njob = "noop2"\nargs = { a = true }\n'
        'retry = { max_attempts = 2 }\nretention = "7d"\n'
        '[[schedule]]\nname = "timing"\nevery = "10m"\njob = "noop"\n'
        '[[schedule]]\nname = "same"\nevery = "5m"\njob = "noop"\n'
        '[[schedule]]\nname = "new"\ncron = "0 2 * * *"\ntimezone = "Europe/Berlin"\njob = "noop"\n'
    )
    before = snapshot(conn)
    code, out, err = fleetctl(capsys, db_url, "apply", str(f), "--prune", "--plan")
    assert code == 0, err
    assert out.splitlines() == [
        "~ update   keep",
        "      job: 'noop' → 'noop2'",
        '      args: {} → {"a":true}',
        "      retry.max_attempts: 6 → 2",
        "      retention: - → 7d",
        "~ replan   timing",
        "      every: 5m → 10m",
        "+ create   new: cron 0 2 * * * (Europe/Berlin), job noop",
        "- disable  gone",
        f"plan: created 1, updated 1, replanned 1, unchanged 1, disabled 1 of 4 schedule(s) from {f}; "
        "nothing was written",
    ]
    assert snapshot(conn) == before
    # What the plan said is what apply then does.
    code, out, _ = fleetctl(capsys, db_url, "apply", str(f), "--prune")
    assert code == 0 and "created 1, updated 1, replanned 1, unchanged 1, disabled 1" in out
    code, out, _ = fleetctl(capsys, db_url, "apply", str(f), "--prune", "--plan")
    assert out.splitlines()[0].startswith("plan: created 0, updated 0, replanned 0, unchanged 4, disabled 0")


def test_a_disabled_schedule_coming_back_is_planned_as_a_replan(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(conn, '[[schedule]]\nname = "back"\nevery = "5m"\njob = "noop"\n')
    conn.execute("UPDATE fleet.schedules SET enabled = false")
    f = tmp_path / "s.toml"
    f.write_text('[[schedule]]\nname = "back"\nevery = "5m"\njob = "noop"\n')
    _, out, _ = fleetctl(capsys, db_url, "apply", str(f), "--plan")
    assert out.splitlines()[:2] == ["~ replan   back", "      enabled: false → true"]


def test_names_and_plans_stop_at_a_screenful(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "many.toml"
    f.write_text("".join(f'[[schedule]]\nname = "s{i:02d}"\nevery = "5m"\njob = "noop"\n' for i in range(30)))
    _, plan, _ = fleetctl(capsys, db_url, "apply", str(f), "--plan")
    assert len(plan.splitlines()) == 22 and plan.splitlines()[20] == "... and 10 more"
    code, out, _ = fleetctl(capsys, db_url, "apply", str(f))
    assert code == 0
    assert out.splitlines() == [
        "created: " + ", ".join(f"s{i:02d}" for i in range(20)) + " ... and 10 more",
        f"created 30, updated 0, replanned 0, unchanged 0, disabled 0: applied 30 schedule(s) from {f}",
    ]


def test_a_job_no_live_worker_serves_is_named(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        '[[schedule]]\nname = "served"\nevery = "5m"\njob = "noop"\n'
        '[[schedule]]\nname = "orphan"\nevery = "5m"\njob = "nc.tik"\n'
    )
    code, _, err = fleetctl(capsys, db_url, "apply", str(f))
    assert code == 0
    assert err.splitlines() == [
        "fleetctl apply: warning: no worker is live (none seen in the last 60 s): the schedules' runs wait "
        "until workers that register their jobs start"
    ]
    process_register(conn, "w1", "worker", ["noop", "other"])
    process_register(conn, "t1", "ticker", ["nc.tik"])  # a ticker serves no job
    code, _, err = fleetctl(capsys, db_url, "apply", str(f))
    assert code == 0
    assert err.splitlines() == [
        "fleetctl apply: warning: schedule 'orphan': job 'nc.tik' is registered on no live worker; "
        "its runs wait for one"
    ]
    # a registered job one typo away is named
    process_register(conn, "w3", "worker", ["nc.tick"])
    code, _, err = fleetctl(capsys, db_url, "apply", str(f))
    assert err.splitlines() == [
        "fleetctl apply: warning: schedule 'orphan': job 'nc.tik' is registered on no live worker "
        "(did you mean 'nc.tick'?); its runs wait for one"
    ]
    conn.execute("DELETE FROM fleet.processes WHERE id = 'w3'")
    process_register(conn, "w2", "worker", ["nc.tik"])
    conn.execute("UPDATE fleet.processes SET seen_at = now() - interval '2 minutes' WHERE id = 'w2'")  # gone
    assert fleetctl(capsys, db_url, "apply", str(f))[2].count("warning") == 1
    conn.execute("UPDATE fleet.processes SET seen_at = now() WHERE id = 'w2'")
    code, _, err = fleetctl(capsys, db_url, "apply", str(f))
    assert (code, err) == (0, "")


def test_status_names_the_job_of_no_worker(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any]
) -> None:
    apply_text(
        conn, '[[schedule]]\nname = "nc"\nevery = "1h"\njob = "nc.tik"\nstart_at = "2099-01-01T00:00:00Z"\n'
    )
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, overlap, run_after) "
        "VALUES ('nc', now(), 'nc.tik', 'allow', now())"
    )
    process_register(conn, "t1", "ticker")
    code, out, _ = fleetctl(capsys, db_url, "status")
    assert code == 1
    (row,) = [line for line in out.splitlines() if line.startswith("nc ")]
    assert "NO-WORKER (job nc.tik)" in row


@pytest.mark.parametrize("with_file", [False, True])
def test_up_applies_the_schedules_its_app_modules_declare_not_the_examples(
    capsys: pytest.CaptureFixture[str],
    conn: psycopg.Connection[Any],
    app: App,
    tmp_path: Path,
    with_file: bool,
) -> None:
    # `fleetctl up --app MODULE [--schedules FILE]`: what `apply --app MODULE [FILE]` would apply
    import argparse

    from fleet.ops.up import Up

    module = app(APP)
    (tmp_path / "more.toml").write_text(FILE)
    args = argparse.Namespace(app=[module], jobs=None, schedules="more.toml" if with_file else None)
    up = Up(args, tmp_path, tmp_path / ".fleet")
    up._load_jobs([module], None)
    up._apply(conn, up._gather_schedules())
    expected = {"reports.nightly", "tick", "cleanup"} | ({"from-file"} if with_file else set())
    assert set(rows(conn)) == expected
    source = f"more.toml and --app {module}" if with_file else f"--app {module}"
    assert (
        f"fleetctl up: applied {source}: {len(expected)} created, 0 changed, 0 unchanged"
        in capsys.readouterr().out
    )
