"""A schedule's calendar on real rows: apply stores and refuses it, the ticker records excluded slots
skipped (across a daylight-saving change) and ends a schedule at its `until`, `verify` accounts for
both and exits 0, and `status` calls an ended schedule ENDED, not LATE."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

import fleet
from fleet.health.reading import schedule_health
from fleet.health.verdicts import verdict
from fleet.ticker.tick import run_once
from tests.integration.ops_support import fleetctl, fleetctl_json
from tests.support import apply_text, live_ticker, scalar

Cap = pytest.CaptureFixture[str]
HOUR = timedelta(hours=1)
BERLIN = ZoneInfo("Europe/Berlin")


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def tick_hourly(conn: psycopg.Connection[Any], start: datetime, end: datetime) -> None:
    """A ticker on time every hour from `start` to `end`; every run it creates is then done once."""
    at = start
    while at <= end:
        run_once(conn, batch_size=100, catchup_limit=1000, now=at)
        at += HOUR
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'done', attempts = 1, finished_at = scheduled_for + interval '1 s'"
        " WHERE status = 'pending'"
    )


def test_excluded_slots_across_a_dst_change_are_skipped_and_verify_proves_the_window(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    # Hourly in Berlin; Sunday 25 October 2026 (clocks fall back at 03:00 to 02:00: 25 local hours)
    # is excluded. The 25 slots of that local day are recorded skipped with the calendar's reason.
    start = datetime(2026, 10, 24, 20, tzinfo=UTC)
    apply_text(
        conn,
        """
[[schedule]]
name = "hourly"
cron = "0 * * * *"
timezone = "Europe/Berlin"
job = "noop"
start_at = "2026-10-24T20:00:00Z"
exclude = ["2026-10-25"]
""",
        now=start,
    )
    end = datetime(2026, 10, 26, 4, tzinfo=UTC)
    tick_hourly(conn, start, end)
    skipped = conn.execute(
        "SELECT scheduled_for, last_error FROM fleet.job_runs WHERE status = 'skipped' ORDER BY 1"
    ).fetchall()
    assert len(skipped) == 25
    assert {r["scheduled_for"].astimezone(BERLIN).date().isoformat() for r in skipped} == {"2026-10-25"}
    assert {r["last_error"] for r in skipped} == {"calendar: excluded 2026-10-25 (Europe/Berlin)"}
    done = scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'done'")
    # 22:00 and 23:00 local on the 24th (CEST), and 00:00 to 05:00 local on the 26th (CET)
    assert done == 2 + 6
    window = ("--since", iso(start), "--until", iso(end))
    code, out, err = fleetctl(capsys, db_url, "verify", "--schedule", "hourly", *window)
    assert code == 0, out + err
    assert "25 skipped (calendar 25)" in out and "ok" in out
    code, doc = fleetctl_json(capsys, db_url, "verify", "--schedule", "hourly", *window)
    (s,) = doc["schedules"]
    assert code == 0 and s["ok"] and s["skipped"]["calendar"] == 25 and s["counts"]["unexplained"] == 0
    assert s["counts"]["once"] == s["slots"] - 25
    entry = next(e for e in s["entries"] if e["outcome"] == "skipped")
    assert entry["reason"] == "skipped: a date the schedule's calendar excludes" and entry["slots"] == 25


def test_until_ends_the_schedule_status_says_ended_and_verify_cuts_the_window(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    start = datetime(2026, 10, 24, 20, tzinfo=UTC)
    apply_text(
        conn,
        '[[schedule]]\nname = "ending"\nevery = "1h"\njob = "noop"\nstart_at = "2026-10-24T20:00:00Z"\n'
        'until = "2026-10-25"\n',
        now=start,
    )
    end = datetime(2026, 10, 26, 3, tzinfo=UTC)
    tick_hourly(conn, start, end)
    last = scalar(conn, "SELECT max(scheduled_for) FROM fleet.job_runs")
    assert last == datetime(2026, 10, 25, 23, tzinfo=UTC)
    assert scalar(conn, "SELECT next_run_at FROM fleet.schedules") is None
    # never due again: a tick finds nothing to do
    assert run_once(conn, batch_size=10, catchup_limit=100, now=end + 10 * HOUR).schedules == 0
    live_ticker(conn)
    code, doc = fleetctl_json(capsys, db_url, "status")
    assert code == 0
    assert doc[0]["verdict"] == "ENDED" and doc[0]["healthy"] and doc[0]["next_run_at"] is None
    with fleet.Client(db_url) as client:
        (health,) = client.status(["ending"])
    assert health.numbers.ended and verdict(health.numbers) == "ENDED"  # the numbers give the verdict back
    window = ("--since", iso(start), "--until", iso(end))
    code, out, _ = fleetctl(capsys, db_url, "verify", "--schedule", "ending", *window)
    assert code == 0
    assert "28 slot(s)" in out and "ended at 2026-10-26T00:00:00Z (until)" in out
    code, out, _ = fleetctl(capsys, db_url, "verify", "--schedule", "ending", "--since", iso(end))
    assert code == 0 and "it ended at 2026-10-26T00:00:00Z (until), before the window  ok" in out

    # Extending `until` re-plans the ended schedule from now: it runs again.
    apply_text(
        conn,
        '[[schedule]]\nname = "ending"\nevery = "1h"\njob = "noop"\nstart_at = "2026-10-24T20:00:00Z"\n'
        'until = "2027-10-25"\n',
        now=end + HOUR,
    )
    assert scalar(conn, "SELECT next_run_at FROM fleet.schedules") == end + 2 * HOUR


def test_an_exclusion_keeps_a_schedule_from_being_late(conn: psycopg.Connection[Any]) -> None:
    # Daily at 09:00 UTC, last success on 23 December; 24 to 26 December excluded.
    apply_text(
        conn,
        '[[schedule]]\nname = "daily"\ncron = "0 9 * * *"\njob = "noop"\nexclude = ["2026-12-24..2026-12-26"]\n'
        '[[schedule]]\nname = "plain"\ncron = "0 9 * * *"\njob = "noop"\n',
        now=datetime(2026, 12, 20, tzinfo=UTC),
    )
    for name in ("daily", "plain"):
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after,"
            " finished_at) VALUES (%s, '2026-12-23T09:00Z', 'noop', 'done', 1, '2026-12-23T09:00Z',"
            " '2026-12-23T09:00:05Z')",
            (name,),
        )
    conn.execute("UPDATE fleet.schedules SET updated_at = '2026-12-20T00:00Z'")
    for at, daily, plain in (
        (datetime(2026, 12, 26, 12, tzinfo=UTC), "OK", "LATE"),  # inside the exclusion
        (datetime(2026, 12, 27, 12, tzinfo=UTC), "OK", "LATE"),  # quiet since it ended, not since the 23rd
        (datetime(2026, 12, 29, 12, tzinfo=UTC), "LATE", "LATE"),  # two days after it ended: late
    ):
        live_ticker(conn, at)
        verdicts = {h.name: h.verdict for h in schedule_health(conn, None, at)}
        assert verdicts == {"daily": daily, "plain": plain}, at


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ('exclude = ["2026-02-30"]', "schedule 'bad': exclude[0]: not a date: '2026-02-30'"),
        ('exclude = "2026-12-25"', "schedule 'bad': exclude: must be a list of dates"),
        ('until = "tomorrow"', "schedule 'bad': until: not an ISO-8601 date or date-time: 'tomorrow'"),
        (
            'exclude = ["2026-01-01..2037-12-31"]',
            "schedule 'bad': exclude: every slot is excluded in the 10 years",
        ),
        (
            'start_at = "2030-01-01T00:00:00Z"\nexclude = ["2030-01-01..2030-06-30"]\nuntil = "2030-06-30"',
            "schedule 'bad': until: no slot runs from 2030-01-01 to 2030-06-30 (every one is excluded)",
        ),
    ],
)
def test_apply_refuses_a_bad_or_silent_calendar_and_writes_nothing(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, fields: str, line: str
) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        f'[[schedule]]\nname = "ok"\nevery = "1h"\njob = "noop"\n\n[[schedule]]\nname = "bad"\nevery = "1d"\njob = "noop"\n{fields}\n'
    )
    code, out, err = fleetctl(capsys, db_url, "apply", str(f))
    assert code == 2
    lines = [x for x in err.splitlines() if x.strip()]
    assert any(x.strip().startswith(line) or line in x for x in lines), err
    assert scalar(conn, "SELECT count(*) FROM fleet.schedules") == 0
    assert scalar(conn, "SELECT count(*) FROM fleet.schedule_audit") == 0


def test_a_calendar_is_shown_by_apply_plan_field_by_field(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text('[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\n')
    assert fleetctl(capsys, db_url, "apply", str(f))[0] == 0
    f.write_text(
        '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\nexclude = ["2026-12-25"]\nuntil = 2027-06-30\n'
    )
    code, out, err = fleetctl(capsys, db_url, "apply", "--plan", str(f))
    assert code == 0, err
    assert "exclude" in out and '["2026-12-25"]' in out and "until" in out and "'2027-06-30'" in out
    assert fleetctl(capsys, db_url, "apply", str(f))[0] == 0
    assert scalar(conn, "SELECT calendar FROM fleet.schedules") == {
        "exclude": ["2026-12-25"],
        "until": "2027-06-30",
    }
    # applied again unchanged: nothing to do
    code, out, _ = fleetctl(capsys, db_url, "apply", str(f))
    assert code == 0 and "unchanged 1" in out


def test_excluded_slots_recorded_ahead_are_withdrawn_when_the_calendar_changes(
    conn: psycopg.Connection[Any],
) -> None:
    t0 = datetime(2026, 12, 24, 22, 30, tzinfo=UTC)
    text = '[[schedule]]\nname = "h"\nevery = "1h"\njob = "noop"\n'
    apply_text(conn, text + 'exclude = ["2026-12-25"]\n', now=t0)
    run_once(conn, batch_size=10, catchup_limit=100, lookahead=3 * HOUR, now=t0)
    got = conn.execute(
        "SELECT scheduled_for, status::text, last_error FROM fleet.job_runs ORDER BY 1"
    ).fetchall()
    midnight = datetime(2026, 12, 25, tzinfo=UTC)
    assert [(r["scheduled_for"], r["status"]) for r in got] == [
        (t0 + 30 * timedelta(minutes=1), "pending"),
        (midnight, "skipped"),
        (midnight + HOUR, "skipped"),
    ]
    assert scalar(conn, "SELECT next_run_at FROM fleet.schedules") == midnight + 2 * HOUR
    # the exclusion is dropped before its slots come: they are withdrawn and created to run
    apply_text(conn, text, now=t0 + timedelta(minutes=1))
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'skipped'") == 0
    run_once(conn, batch_size=10, catchup_limit=100, lookahead=3 * HOUR, now=t0 + timedelta(minutes=1))
    pending = conn.execute(
        "SELECT scheduled_for FROM fleet.job_runs WHERE status = 'pending' ORDER BY 1"
    ).fetchall()
    assert [r["scheduled_for"] for r in pending] == [
        t0 + 30 * timedelta(minutes=1),
        midnight,
        midnight + HOUR,
    ]
