"""Who did what: each operator action (pause, resume, trigger, retry, discard, backfill, apply) leaves
an audit row, through fleetctl and through fleet.Client alike; `fleetctl audit` lists them; the
database, not the operator, says when and which role; readers read them and the tickers' retention
removes old ones."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import fleet
from fleet.admin import apply as apply_module
from fleet.errors import RequestError
from fleet.ops.cli import main
from fleet.store import chores
from fleet.store.db import connect
from fleet.ticker.retention import retention_chore
from tests.integration.ops_support import add_run, fleetctl, fleetctl_json, hourly
from tests.support import apply_text, login_roles, scalar

Cap = pytest.CaptureFixture[str]
SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)
SLOT_ISO = "2026-03-01T10:00:00Z"


def rows(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT action, schedule, by_name, note, role, details, at FROM fleet.schedule_audit ORDER BY id"
    ).fetchall()


def test_each_command_records_who_did_what(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text('[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\noverlap = "allow"\n')

    def ok(*args: str) -> bool:
        return fleetctl(capsys, db_url, *args)[0] == 0

    assert ok("apply", str(f), "--by", "alice", "--note", "first version")
    assert ok("pause", "s", "--by", "bob", "--note", "maintenance")
    assert ok("resume", "s", "--by", "bob")
    assert ok("trigger", "s", "--by", "carol", "--note", "by hand", "--args", '{"x": 1}')
    add_run(conn, "s", SLOT, "dead", attempts=3)
    add_run(conn, "s", SLOT + timedelta(hours=1), "dead", attempts=3)
    assert ok("retry", "s", SLOT_ISO, "--by", "dave", "--note", "fixed the disk")
    conn.execute("UPDATE fleet.job_runs SET status = 'dead' WHERE scheduled_for = %s", (SLOT,))
    assert ok("discard", "s", "--all-dead", "--by", "erin")
    assert ok(
        "backfill", "s", "--from", "2026-02-01T00:00:00Z", "--to", "2026-02-01T02:00:00Z", "--by", "frank"
    )
    f.write_text('[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\noverlap = "allow"\ntimeout = "5m"\n')
    assert ok("apply", str(f))

    got = rows(conn)
    who = scalar(conn, "SELECT current_user")
    assert [(r["action"], r["schedule"], r["by_name"], r["note"]) for r in got] == [
        ("apply", "s", "alice", "first version"),
        ("pause", "s", "bob", "maintenance"),
        ("resume", "s", "bob", None),
        ("trigger", "s", "carol", "by hand"),
        ("retry", "s", "dave", "fixed the disk"),
        ("discard", "s", "erin", None),
        ("backfill", "s", "frank", None),
        ("apply", "s", None, None),
    ]
    assert {r["role"] for r in got} == {who}
    details = [r["details"] for r in got]
    assert details[0] == {"outcome": "create", "timing": "every 1h, job noop"}
    assert details[1] == {"outcome": "paused"} and set(details[2]) == {"next_slot"}
    assert details[3]["args"] == "given" and details[3]["slot"].endswith("Z")
    assert details[4] == {"count": 1, "slots": [SLOT_ISO]}
    assert details[5] == {"count": 2, "slots": [SLOT_ISO, "2026-03-01T11:00:00Z"]}
    assert details[6] == {
        "count": 3,
        "slots": ["2026-02-01T00:00:00Z", "2026-02-01T01:00:00Z", "2026-02-01T02:00:00Z"],
        "from": "2026-02-01T00:00:00Z",
        "to": "2026-02-01T02:00:00Z",
    }
    assert details[7] == {"outcome": "update", "fields": {"timeout": ["-", "5m"]}}

    # a command that changes nothing records nothing
    before = len(got)
    assert ok("resume", "s", "--by", "bob")  # not paused
    assert ok("retry", "s", SLOT_ISO, "--by", "dave")  # discarded: retried again, so it is recorded
    assert ok("retry", "s", SLOT_ISO, "--by", "dave")  # pending already: nothing
    assert ok("apply", str(f), "--by", "alice")  # unchanged
    assert len(rows(conn)) == before + 1

    code, out, err = fleetctl(capsys, db_url, "audit", "--schedule", "s")
    lines = out.splitlines()
    assert code == 0 and len(lines) == before + 1, err
    assert "retry     s  by dave (role " in lines[0] and "1 slot(s): 2026-03-01T10:00:00Z" in lines[0]
    assert "pause     s  by bob (role" in lines[-2] and "note: maintenance" in lines[-2]
    assert "apply     s  by alice (role" in lines[-1] and "create; timing every 1h, job noop" in lines[-1]
    code, doc = fleetctl_json(capsys, db_url, "audit", "--limit", "2")
    assert code == 0 and [d["action"] for d in doc] == ["retry", "apply"]
    assert doc[1]["details"]["fields"] == {"timeout": ["-", "5m"]} and doc[0]["by"] == "dave"
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert fleetctl(capsys, db_url, "audit", "--since", future)[1] == "no audit row\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("pause", "s", "--by", "x" * 101), "--by: at most 100 characters, got 101"),
        (("trigger", "s", "--by", "eve\x1b[2J"), "--by: must not hold control characters"),
        (("retry", "s", "--all-dead", "--note", "n" * 501), "--note: at most 500 characters, got 501"),
        (("audit", "--since", "yesterday"), "--since: not an ISO-8601 time"),
        (("audit", "--limit", "0"), "--limit: must be from 1 to 10000, got 0"),
        (("audit", "--schedule", "nope"), "no such schedule: 'nope'"),
    ],
)
def test_bad_input_exits_2_in_one_line_and_records_nothing(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], args: tuple[str, ...], line: str
) -> None:
    hourly(conn, "s")
    add_run(conn, "s", SLOT, "dead")
    conn.execute("DELETE FROM fleet.schedule_audit")  # the apply's
    code, out, err = fleetctl(capsys, db_url, *args)
    assert code == 2 and line in err and len(err.strip().splitlines()) == 1, err
    assert scalar(conn, "SELECT count(*) FROM fleet.schedule_audit") == 0
    assert scalar(conn, "SELECT paused_at FROM fleet.schedules") is None


def test_the_client_records_its_by_and_reads_the_rows_back(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    specs = fleet.timing.schedfile.load('[[schedule]]\nname = "c"\nevery = "1h"\njob = "noop"\n')
    with fleet.Client(db_url, by="app") as client:
        client.apply(specs, note="deploy 42")
        assert client.pause("c", note="hold")
        client.resume("c", by="someone else")
        client.trigger("c")
        add_run(conn, "c", SLOT, "dead")
        assert client.retry("c", SLOT, note="again") == [SLOT]
        conn.execute("UPDATE fleet.job_runs SET status = 'dead' WHERE scheduled_for = %s", (SLOT,))
        assert client.discard("c", SLOT) == [SLOT]
        conn.execute(
            "UPDATE fleet.job_runs SET status = 'dead', last_outcome = NULL WHERE scheduled_for = %s", (SLOT,)
        )
        assert client.retry_dead("c") == [SLOT]
        conn.execute("UPDATE fleet.job_runs SET status = 'dead' WHERE scheduled_for = %s", (SLOT,))
        assert client.discard_dead("c", by="ops") == [SLOT]
        got = client.audit("c")
        assert [(a.action, a.by, a.note) for a in reversed(got)] == [
            ("apply", "app", "deploy 42"),
            ("pause", "app", "hold"),
            ("resume", "someone else", None),
            ("trigger", "app", None),
            ("retry", "app", "again"),
            ("discard", "app", None),
            ("retry", "app", None),
            ("discard", "ops", None),
        ]
        assert all(a.role == scalar(conn, "SELECT current_user") and a.at.tzinfo is UTC for a in got)
        assert got[0].to_json()["details"] == {"count": 1, "slots": [SLOT_ISO]}
        assert client.audit(since=datetime.now(UTC) + timedelta(hours=1)) == []
        assert len(client.audit(limit=3)) == 3
        with pytest.raises(RequestError, match="^by: at most 100 characters"):
            client.pause("c", by="x" * 101)
        with pytest.raises(RequestError, match="^limit: must be from 1 to 10000"):
            client.audit(limit=0)
    with pytest.raises(RequestError, match="^by: must not hold control characters"):
        fleet.Client(db_url, by="a\nb")


def test_a_large_apply_records_one_row_for_every_schedule(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_module, "AUDIT_ROWS_PER_APPLY", 2)
    apply_text(conn, "".join(f'[[schedule]]\nname = "s{i}"\nevery = "1h"\njob = "noop"\n' for i in range(3)))
    (row,) = rows(conn)
    assert row["schedule"] is None and row["details"] == {
        "created": 3,
        "updated": 0,
        "replanned": 0,
        "disabled": 0,
    }
    code, out, _ = fleetctl(capsys, db_url, "audit", "--schedule", "s1")
    assert code == 0 and "apply     (every schedule)" in out and "3 created" in out


def test_old_audit_rows_go_with_the_retention_of_their_schedule(conn: psycopg.Connection[Any]) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "kept"\nevery = "1h"\njob = "noop"\n'
        '[[schedule]]\nname = "short"\nevery = "1h"\njob = "noop"\nretention = "2d"\n',
    )
    conn.execute("DELETE FROM fleet.schedule_audit")
    now = datetime.now(UTC)
    for schedule, age_days in (
        ("kept", 40),
        ("kept", 20),
        ("short", 3),
        ("short", 1),
        (None, 40),
        (None, 20),
    ):
        conn.execute(
            "INSERT INTO fleet.schedule_audit (at, action, schedule) VALUES (%s, 'pause', %s)",
            (now - timedelta(days=age_days), schedule),
        )
    chore = retention_chore(timedelta(days=30), every_s=3600, batch=100)
    chores.register(conn, [chore], now=now)
    while chores.run_due(conn, [chore], now=now):
        pass
    left = conn.execute(
        "SELECT schedule, round(extract(epoch FROM %s - at) / 86400) AS days FROM fleet.schedule_audit ORDER BY 1, 2",
        (now,),
    ).fetchall()
    assert [(r["schedule"], int(r["days"])) for r in left] == [("kept", 20), ("short", 1), (None, 20)]


@pytest.fixture
def role_urls(db_url: str, server_url: str) -> Iterator[dict[str, str]]:
    """A login role granted fleet_operator, fleet_reader and fleet_ticker each (unique to this test)."""
    assert main(["--database-url", db_url, "migrate", "--roles"]) == 0
    with login_roles(server_url, db_url, ("operator", "reader", "ticker"), "t_audit") as urls:
        yield urls


def test_the_database_says_who_and_when_and_only_the_operator_writes(
    capsys: Cap, conn: psycopg.Connection[Any], role_urls: dict[str, str], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text('[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\n')
    operator, reader = role_urls["operator"], role_urls["reader"]
    assert fleetctl(capsys, operator, "apply", str(f), "--by", "alice")[0] == 0
    assert fleetctl(capsys, operator, "pause", "s", "--by", "alice")[0] == 0
    got = rows(conn)
    assert {r["role"] for r in got} == {f"t_audit_operator_{os.getpid()}"}
    # a reader reads them, through fleetctl too
    code, out, _ = fleetctl(capsys, reader, "audit", "--schedule", "s")
    assert code == 0 and len(out.splitlines()) == 2
    with connect(operator, "fleet-tests forge") as c:
        # the operator writes no role nor time of its own, and changes no row
        for sql in (
            "INSERT INTO fleet.schedule_audit (role, action) VALUES ('someone', 'pause')",
            "INSERT INTO fleet.schedule_audit (at, action) VALUES ('2000-01-01', 'pause')",
            "UPDATE fleet.schedule_audit SET by_name = 'mallory'",
            "DELETE FROM fleet.schedule_audit",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(sql)
    for kind in ("reader", "ticker"):
        with (
            connect(role_urls[kind], "fleet-tests forge") as c,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            c.execute("INSERT INTO fleet.schedule_audit (action) VALUES ('pause')")
    code, _, err = fleetctl(capsys, reader, "resume", "s")
    assert code == 2 and "permission denied" in err
    assert len(rows(conn)) == 2 and scalar(conn, "SELECT paused_at IS NOT NULL FROM fleet.schedules")
    # the ticker's retention removes old rows only: none an operator just wrote
    conn.execute(
        "INSERT INTO fleet.schedule_audit (at, action, schedule) VALUES (now() - interval '2 h', 'pause', 's')"
    )
    with connect(role_urls["ticker"], "fleet-tests retention") as c:
        assert c.execute("DELETE FROM fleet.schedule_audit").rowcount == 1
    assert len(rows(conn)) == 2


def test_apply_records_each_schedule_it_disables_and_a_plan_records_nothing(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        '[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n[[schedule]]\nname = "b"\nevery = "1h"\njob = "noop"\n'
    )
    assert fleetctl(capsys, db_url, "apply", str(f))[0] == 0
    f.write_text('[[schedule]]\nname = "a"\nevery = "1h"\njob = "noop"\n')
    before = len(rows(conn))
    assert fleetctl(capsys, db_url, "apply", "--plan", "--prune", str(f), "--by", "ci")[0] == 0
    assert len(rows(conn)) == before
    assert fleetctl(capsys, db_url, "apply", "--prune", str(f), "--by", "ci", "--note", "b retired")[0] == 0
    last = rows(conn)[-1]
    assert (last["action"], last["schedule"], last["by_name"], last["note"], last["details"]) == (
        "apply",
        "b",
        "ci",
        "b retired",
        {"outcome": "disable"},
    )
