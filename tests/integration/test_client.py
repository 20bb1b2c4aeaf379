"""fleet.Client on a real database: each method, its errors (fleet's own, never the driver's), the
documented example run as a program and checked by mypy --strict, and fleetctl giving the same
answers as the client on the same database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import fleet
from fleet.store.db import connect
from fleet.timing.schedfile import load
from tests.integration.ops_support import add_run, fleetctl, fleetctl_json, snapshot
from tests.support import ROOT, apply_text, env_for, free_port, live_ticker, scalar, wait_for

Cap = pytest.CaptureFixture[str]
SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)
DOC = ROOT / "docs" / "reference" / "python-api.md"


def hourly(conn: psycopg.Connection[Any], name: str = "s", **extra: str) -> None:
    more = "".join(f"{k} = {v}\n" for k, v in extra.items())
    apply_text(
        conn,
        f'[[schedule]]\nname = "{name}"\nevery = "1h"\njob = "noop"\nargs = {{ format = "pdf" }}\n'
        f'overlap = "allow"\n{more}',
    )


def status_of(conn: psycopg.Connection[Any], slot: datetime, name: str = "s") -> str:
    return str(
        scalar(
            conn,
            "SELECT status::text FROM fleet.job_runs WHERE schedule_name = %s AND scheduled_for = %s",
            (name, slot),
        )
    )


# -- schedules -------------------------------------------------------------------------------------


def test_apply_pause_and_resume(db_url: str, conn: psycopg.Connection[Any]) -> None:
    specs = load(
        '[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n'
        '[[schedule]]\nname = "b"\nevery = "5m"\njob = "noop"\n'
    )
    with fleet.Client(db_url) as c:
        r = c.apply(specs)
        assert (r.created, r.unchanged) == (["a", "b"], [])
        r = c.apply(specs[:1], prune=True)
        assert (r.unchanged, r.disabled) == (["a"], ["b"])

        assert c.pause("a") is True
        assert c.pause("a") is False  # paused already: nothing changes
        assert scalar(conn, "SELECT paused_at IS NOT NULL FROM fleet.schedules WHERE name = 'a'")
        (h,) = c.status(["a"])
        assert (h.paused, h.verdict, h.healthy) == (True, "PAUSED", True)

        nxt = c.resume("a")
        assert nxt is not None and nxt.tzinfo is not None and nxt.utcoffset() == timedelta(0)
        db_now: datetime = scalar(conn, "SELECT now()")
        assert db_now <= nxt <= db_now + timedelta(hours=1)
        assert scalar(conn, "SELECT next_run_at FROM fleet.schedules WHERE name = 'a'") == nxt
        assert c.resume("a") is None  # not paused
        assert not c.status("a")[0].paused


# -- trigger ---------------------------------------------------------------------------------------


def test_trigger_with_and_without_args(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn, start_at='"2099-01-01T00:00:00Z"')
    with fleet.Client(db_url) as c:
        t = c.trigger("s", args={"format": "csv", "pages": [1, 2]})
        assert t.created and t.schedule == "s" and t.slot.microsecond == 0
        run = c.show("s", t.slot).run
        assert (run.origin, run.status, run.job) == ("trigger", "pending", "noop")
        assert run.args == {"format": "csv", "pages": [1, 2]}
        # the override is this run's only: the schedule keeps its arguments
        assert scalar(conn, "SELECT args FROM fleet.schedules WHERE name = 's'") == {"format": "pdf"}

        conn.execute("DELETE FROM fleet.job_runs")
        t = c.trigger("s")
        assert c.show("s", t.slot).run.args == {"format": "pdf"}


def test_trigger_refuses_bad_args_and_unknown_schedules(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn)
    before = snapshot(conn)
    with fleet.Client(db_url) as c:
        with pytest.raises(fleet.RequestError, match="^args: must be a JSON object"):
            c.trigger("s", args=[1, 2])  # type: ignore[arg-type]
        with pytest.raises(fleet.RequestError, match="^args: not representable as JSON"):
            c.trigger("s", args={"when": object()})
        # what a schedules file's args may not hold either: a NUL, more than 64 KiB of JSON
        with pytest.raises(fleet.RequestError, match=r"^args\.note: holds a NUL character"):
            c.trigger("s", args={"note": "a\x00b"})
        with pytest.raises(fleet.RequestError, match=r"^args key 'a\\x00': holds a NUL character"):
            c.trigger("s", args={"a\x00": 1})
        with pytest.raises(fleet.RequestError, match="^args: 65,544 bytes of JSON, more than 65,536$"):
            c.trigger("s", args={"x": "y" * 65_536})
        with pytest.raises(fleet.UnknownSchedule, match="no such schedule: 'nope'") as e:
            c.trigger("nope")
        assert e.value.names == ["nope"]
    assert snapshot(conn) == before


def test_fleetctl_trigger_args(capsys: Cap, db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn, start_at='"2099-01-01T00:00:00Z"')
    code, out, err = fleetctl(capsys, db_url, "trigger", "s", "--args", '{"format": "csv"}')
    assert code == 0 and out.startswith("triggered s @"), err
    assert scalar(conn, "SELECT args FROM fleet.job_runs WHERE origin = 'trigger'") == {"format": "csv"}

    at_most = '{"x": "' + "y" * (65_536 - 10) + '"}'  # 65,536 bytes once written back
    code, out, err = fleetctl(capsys, db_url, "trigger", "s", "--args", at_most)
    assert code == 0, err  # (triggered, or exists already within the same second)

    before = snapshot(conn)
    too_large = '{"x": "' + "y" * 65_536 + '"}'
    for bad in ("{format: csv}", "[1, 2]", '"csv"', "null", "", '{"a": "\\u0000"}', too_large):
        code, out, err = fleetctl(capsys, db_url, "trigger", "s", "--args", bad)
        assert code == 2 and err.startswith("fleetctl trigger: --args"), (bad[:60], err[:300])
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and len(err) < 300
    assert snapshot(conn) == before


# -- retry and discard -----------------------------------------------------------------------------


def test_retry_and_discard(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn)
    later = SLOT + timedelta(hours=1)
    add_run(conn, "s", SLOT, "dead", attempts=3, error="boom 3")
    add_run(conn, "s", later, "dead", attempts=2, error="boom 2")
    add_run(conn, "s", SLOT + timedelta(hours=2), "done")
    with fleet.Client(db_url) as c:
        assert c.status()[0].dead_runs == 2
        assert c.discard("s", SLOT) == [SLOT]
        assert c.discard("s", SLOT) == []  # discarded already
        assert [r.slot for r in c.runs("s", status="discarded")] == [SLOT]
        assert c.retry("s", SLOT) == [SLOT]  # a discarded run can be retried
        assert c.retry("s", SLOT) == []  # pending already
        assert status_of(conn, SLOT) == "pending"
        assert scalar(conn, "SELECT failures FROM fleet.job_runs WHERE scheduled_for = %s", (SLOT,)) == 0
        assert len(c.show("s", SLOT).attempts) == 3  # the history stays

        assert c.discard_dead("s") == [later]
        assert c.discard_dead("s") == []
        assert c.retry_dead("s") == []  # a discarded run is not dead
        conn.execute("UPDATE fleet.job_runs SET status = 'dead' WHERE scheduled_for = %s", (later,))
        assert c.retry_dead("s") == [later]
        assert status_of(conn, later) == "pending"


def test_retry_and_discard_refusals_change_nothing(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn)
    add_run(conn, "s", SLOT, "done")
    before = snapshot(conn)
    with fleet.Client(db_url) as c:
        with pytest.raises(fleet.RunStateError, match=r"^s @ 2026-03-01T10:00:00Z is done, not dead") as e:
            c.retry("s", SLOT)
        assert e.value.status == "done"
        with pytest.raises(fleet.RunStateError, match="nothing to discard"):
            c.discard("s", SLOT)
        with pytest.raises(
            fleet.UnknownRun,
            match=r"^schedule 's' has no run at 2026-03-01T09:00:00Z: it is a slot of the schedule",
        ) as u:
            c.retry("s", SLOT - timedelta(hours=1))
        assert (u.value.schedule, u.value.slot) == ("s", SLOT - timedelta(hours=1))
        with pytest.raises(fleet.UnknownSchedule):
            c.discard("nope", SLOT)
        with pytest.raises(fleet.UnknownSchedule):
            c.retry_dead("nope")
        with pytest.raises(fleet.RequestError, match="^slot: a timezone-aware datetime"):
            c.retry("s", SLOT.replace(tzinfo=None))
    assert snapshot(conn) == before


# -- reading ---------------------------------------------------------------------------------------


def test_runs_and_show(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn)
    add_run(conn, "s", SLOT, "dead", attempts=3, error="boom 3")
    add_run(conn, "s", SLOT + timedelta(hours=1), "done", attempts=2)
    add_run(conn, "s", SLOT + timedelta(hours=2), "pending", attempts=0, finished=None)
    with fleet.Client(db_url) as c:
        runs = c.runs("s")
        assert [(r.slot, r.status, r.attempts) for r in runs] == [
            (SLOT + timedelta(hours=2), "pending", 0),
            (SLOT + timedelta(hours=1), "done", 2),
            (SLOT, "dead", 3),
        ]
        assert all(isinstance(r, fleet.Run) and r.slot.tzinfo is not None for r in runs)
        assert [r.slot for r in c.runs("s", status="dead")] == [SLOT]
        assert len(c.runs("s", limit=1)) == 1
        with pytest.raises(fleet.RequestError, match="^limit: "):
            c.runs("s", limit=0)
        with pytest.raises(fleet.RequestError, match="^status: "):
            c.runs("s", status="weird")  # type: ignore[arg-type]
        with pytest.raises(fleet.UnknownSchedule):
            c.runs("nope")

        h = c.show("s", SLOT)
        assert (h.run.status, h.run.last_error, h.run.failures) == ("dead", "boom 3", 3)
        assert [(a.attempt, a.worker_id, a.outcome, a.error) for a in h.attempts] == [
            (1, "w1", "failed", "boom 1"),
            (2, "w2", "failed", "boom 2"),
            (3, "w3", "failed", "boom 3"),
        ]
        with pytest.raises(fleet.UnknownRun):
            c.show("s", SLOT - timedelta(hours=1))

        # the attempt in flight comes from the run row until it ends
        conn.execute(
            "UPDATE fleet.job_runs SET status = 'running', attempts = 1, locked_by = 'w9',"
            " started_at = now(), locked_until = now() + interval '1 minute', trace_id = 'abc'"
            " WHERE scheduled_for = %s",
            (SLOT + timedelta(hours=2),),
        )
        (a,) = c.show("s", SLOT + timedelta(hours=2)).attempts
        assert (a.attempt, a.worker_id, a.outcome, a.finished_at) == (1, "w9", "running", None)
        with pytest.raises(AttributeError):
            a.outcome = "done"  # type: ignore[misc]  # records are frozen


def test_status_gives_each_schedule_its_verdict(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn, "broken")
    hourly(conn, "fine")
    live_ticker(conn)
    add_run(conn, "broken", SLOT, "dead", attempts=6, error="boom")
    with fleet.Client(db_url) as c:
        broken, fine = c.status()
        assert (broken.name, broken.verdict, broken.healthy, broken.dead_runs) == ("broken", "DEAD", False, 1)
        assert broken.problems[0] == "DEAD" and broken.last_error == "boom"
        assert broken.last_run_at == SLOT and broken.last_outcome == "dead"
        assert (fine.verdict, fine.healthy, fine.dead_runs, fine.last_run_at) == ("OK", True, 0, None)
        assert fine.next_run_at is not None and fine.next_run_at.utcoffset() == timedelta(0)
        assert [h.name for h in c.status(["fine"])] == ["fine"]
        with pytest.raises(fleet.UnknownSchedule, match="'nope', 'other'") as e:
            c.status(["fine", "nope", "other"])
        assert e.value.names == ["nope", "other"]


# -- fleetctl and the client agree -----------------------------------------------------------------


def test_fleetctl_and_the_client_give_the_same_answers(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a")
    hourly(conn, "b")
    live_ticker(conn)
    add_run(conn, "a", SLOT, "dead", attempts=2, error="boom 2")
    add_run(conn, "a", SLOT + timedelta(hours=1), "done")
    add_run(conn, "b", SLOT, "pending", attempts=0, finished=None, run_after="now() - interval '2 hours'")
    with fleet.Client(db_url) as c:
        code, printed = fleetctl_json(capsys, db_url, "status")
        assert code == 1  # a is DEAD, b has a BACKLOG
        mine = [h.to_json() for h in c.status()]
        clocked = ("since_last_success_s", "quiet_s", "oldest_pending_age_s")
        for p, m in zip(printed, mine, strict=True):
            assert {k: v for k, v in p.items() if k not in clocked} == {
                k: v for k, v in m.items() if k not in clocked
            }
            for k in clocked:  # read a moment apart
                assert (p[k] is None) == (m[k] is None) and abs((p[k] or 0) - (m[k] or 0)) < 5, k
        assert [(h["name"], h["verdict"]) for h in printed] == [("a", "DEAD"), ("b", "NO-WORKER")]

        code, printed = fleetctl_json(capsys, db_url, "runs", "a")
        assert printed == [r.to_json() for r in c.runs("a")] and len(printed) == 2

        code, printed = fleetctl_json(capsys, db_url, "show", "a", "2026-03-01T10:00:00Z")
        assert printed.pop("jaeger_url") is None  # no attempt of it was traced: no link
        assert printed == c.show("a", SLOT).to_json()

        # a change made by one is what the other sees
        assert fleetctl(capsys, db_url, "discard", "a", "--all-dead")[0] == 0
        assert c.status(["a"])[0].verdict == "OK" and c.runs("a", status="discarded")[0].slot == SLOT
        c.retry("a", SLOT)
        code, printed = fleetctl_json(capsys, db_url, "runs", "a", "--status", "pending")
        assert [r["slot"] for r in printed] == ["2026-03-01T10:00:00Z"]

    # the refusals are the client's errors, as one line and exit 2
    created = scalar(
        conn,
        "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        " FROM fleet.schedules WHERE name = 'a'",
    )
    for args, line in (
        (
            ("retry", "a", "2026-03-01T11:00:00Z"),
            "a @ 2026-03-01T11:00:00Z is done, not dead: nothing to retry",
        ),
        (
            ("show", "a", "2026-03-01T09:00:00Z"),
            "schedule 'a' has no run at 2026-03-01T09:00:00Z: it is a slot of the schedule, missed: before "
            f"the schedule existed (created {created})",
        ),
        (("pause", "nope"), "no such schedule: 'nope'"),
    ):
        code, out, err = fleetctl(capsys, db_url, *args)
        assert (code, err) == (2, f"fleetctl {args[0]}: {line}\n")


# -- connections and the database's errors ---------------------------------------------------------


@pytest.fixture
def bare_db_url(server_url: str) -> Iterator[str]:
    """A database without fleet's schema."""
    name = f"fleet_bare_{uuid.uuid4().hex}"
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_url, dbname=name)
    with connect(server_url, "fleet-tests admin") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_errors_are_fleets_own(capsys: Cap, bare_db_url: str) -> None:
    with fleet.Client(bare_db_url) as c:
        for call in (c.status, lambda: c.pause("s"), lambda: c.runs("s"), lambda: c.trigger("s")):
            with pytest.raises(fleet.SchemaMissing, match="fleetctl migrate"):
                call()
        with pytest.raises(fleet.SchemaMissing, match="no fleet schema"):
            c.apply(load('[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n'))
    code, _, err = fleetctl(capsys, bare_db_url, "status")
    assert (code, err) == (2, "fleetctl status: the database has no fleet schema; run `fleetctl migrate`\n")

    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(fleet.DatabaseUnavailable, match="cannot connect"):
        fleet.Client(nowhere)

    c = fleet.Client(bare_db_url)
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(fleet.FleetError, match="closed"):
        c.status()


def test_a_broken_connection_is_reported_then_replaced(db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn)
    with fleet.Client(db_url, application_name="fleet-client-test") as c:
        assert c.status()[0].name == "s"
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'fleet-client-test'"
        )
        wait_for(
            lambda: (
                not scalar(
                    conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fleet-client-test'"
                )
            ),
            what="the client's connection to end",
        )
        with pytest.raises(fleet.DatabaseUnavailable):
            c.status()
        assert c.status()[0].name == "s"  # connected again


def test_without_a_url_the_client_uses_fleet_database_url(
    db_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    hourly(conn, "only-here")
    monkeypatch.setenv("FLEET_DATABASE_URL", db_url)
    with fleet.Client() as c:
        assert [h.name for h in c.status()] == ["only-here"]


# -- the documented example ------------------------------------------------------------------------


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert blocks, f"no Python example in {DOC}"
    return str(blocks[0])


def test_the_documented_example_runs(db_url: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    live_ticker(conn)  # as the page says: a ticker runs, no worker does
    script = tmp_path / "example.py"
    script.write_text(_example())
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env_for(db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:5] == [
        "triggered: True",
        "run: pending trigger {'format': 'csv'}",
        "attempts so far: 0",
        "health: nightly-report NO-WORKER 0 1",
        "paused: True",
    ], done.stdout
    assert re.fullmatch(r"next slot after resume: \d{4}-\d\d-\d\d 01:00:00\+00:00", lines[5]), lines[5]
    assert lines[6].startswith(
        "error: schedule 'nightly-report' has no run at 2020-01-01T00:00:00Z: not a slot"
    )


def test_the_public_api_is_typed(tmp_path: Path) -> None:
    """mypy --strict accepts the documented example, and sees a misuse of the API (so the types
    reach an application through py.typed rather than turning into Any)."""
    good = tmp_path / "good.py"
    good.write_text(_example())
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import fleet\n\n"
        "def f(c: fleet.Client) -> str:\n"
        "    c.trigger('s', args=[1])\n"
        "    h: fleet.ScheduleHealth = c.status()[0]\n"
        "    return h.dead_runs\n"
    )
    # the package as the editable install has it: from the source tree (whose py.typed the wheel ships)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    mypy = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--no-error-summary",
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
    ]

    def check(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*mypy, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
            check=False,
        )

    done = check(good)
    assert done.returncode == 0, done.stdout + done.stderr
    done = check(bad)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1 and len(errors) == 2, done.stdout
    assert '"args" to "trigger"' in errors[0] and errors[0].endswith("[arg-type]"), errors
    assert errors[1].endswith("[return-value]"), errors
