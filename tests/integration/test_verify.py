"""`fleetctl verify` and `fleet.Client.verify` on real rows: every outcome a slot can have, each
reason a missed slot can have, the exit codes, bad input, cron timings across daylight-saving
changes, and a year of a one-minute schedule."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import fleet
from fleet.health.verify import verify
from tests.integration.ops_support import fleetctl, fleetctl_json
from tests.support import apply_text, scalar

Cap = pytest.CaptureFixture[str]
MINUTE = timedelta(minutes=1)
ZERO_SKIPPED = {"catchup": 0, "max_lateness": 0, "overlap": 0, "discarded": 0, "other": 0}
ZERO_MISSED = {
    "paused": 0,
    "broken": 0,
    "disabled": 0,
    "before_created": 0,
    "timing_changed": 0,
    "catchup": 0,
}


def counts(**nonzero: int) -> dict[str, int]:
    base = dict.fromkeys(
        (
            "once",
            "retried",
            "reclaimed",
            "skipped",
            "dead",
            "pending",
            "running",
            "never_started",
            "unplanned",
            "pruned",
            "missed",
            "unexplained",
        ),
        0,
    )
    return {**base, **nonzero}


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def minutely(conn: psycopg.Connection[Any], name: str, **sets: Any) -> None:
    """A schedule every minute, created a day before `base`, then `sets` written as its owner."""
    apply_text(conn, f'[[schedule]]\nname = "{name}"\nevery = "1m"\njob = "noop"\n')
    for column, value in sets.items():
        conn.execute(f"UPDATE fleet.schedules SET {column} = %s WHERE name = %s", (value, name))


def runs(
    conn: psycopg.Connection[Any],
    name: str,
    base: datetime,
    minutes: range | list[int],
    status: str = "done",
    *,
    attempts: int = 1,
    offset: timedelta = timedelta(0),
    origin: str = "schedule",
    error: str | None = None,
    outcome: str | None = None,
) -> None:
    """Runs of `name` at base + m minutes (+ offset) for each m, in one state."""
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, origin, status, attempts, run_after,"
        " finished_at, last_outcome, last_error)"
        " SELECT %(name)s, %(base)s + m * interval '1 minute' + %(offset)s, 'noop', %(origin)s,"
        " %(status)s::fleet.run_status, %(attempts)s, %(base)s,"
        " CASE WHEN %(status)s IN ('done', 'dead', 'skipped') THEN %(base)s END, %(outcome)s, %(error)s"
        " FROM unnest(%(minutes)s::int[]) AS m",
        {
            "name": name,
            "base": base,
            "offset": offset,
            "origin": origin,
            "status": status,
            "attempts": attempts,
            "outcome": outcome or status,
            "error": error,
            "minutes": list(minutes),
        },
    )


def minute_of(base: datetime) -> Callable[[int], str]:
    """The slot `m` minutes after `base`, as fleetctl prints it."""

    def at(m: int) -> str:
        return iso(base + m * MINUTE)

    return at


@pytest.fixture
def base(conn: psycopg.Connection[Any]) -> datetime:
    """The first slot of the window: a whole minute three hours ago (the window is its 60 minutes)."""
    now: datetime = scalar(conn, "SELECT date_trunc('minute', now())")
    return now - timedelta(hours=3)


def ledger_case(conn: psycopg.Connection[Any], base: datetime) -> None:
    """A schedule whose 60 slots show every outcome of a slot that has a run, then a catch-up's drop
    and a pause; a run between two slots (an earlier timing's) and an operator's runs beside them."""
    later = base + timedelta(hours=2)
    minutely(
        conn,
        "ledger",
        created_at=base - timedelta(days=1),
        next_run_at=base + 50 * MINUTE,
        paused_at=base + 50 * MINUTE,
        pause_note="database upgrade",
        missed_slots=3,
    )
    runs(conn, "ledger", base, [0, *range(15, 50)])
    runs(conn, "ledger", base, [1], attempts=3)
    runs(conn, "ledger", base, [2], attempts=2)
    conn.execute(
        "INSERT INTO fleet.job_attempts (schedule_name, scheduled_for, attempt, worker_id, started_at,"
        " finished_at, outcome, error) VALUES ('ledger', %s, 1, 'w1', %s, %s, 'lease_expired', 'lease expired')",
        (base + 2 * MINUTE, later, later),
    )
    runs(conn, "ledger", base, [3], "skipped", error="catchup latest: not started within its grace (30s)")
    runs(conn, "ledger", base, [4], "skipped", error="max_lateness: 0:10:00 late (limit 0:05:00)")
    runs(
        conn,
        "ledger",
        base,
        [5],
        "skipped",
        error="overlap: an earlier run of this schedule was still in progress",
    )
    runs(
        conn,
        "ledger",
        base,
        [6],
        "skipped",
        attempts=6,
        outcome="discarded",
        error="discarded by an operator",
    )
    runs(conn, "ledger", base, [7], "dead", attempts=6, error="boom")
    runs(conn, "ledger", base, [8], "pending", attempts=1, error="boom")
    runs(conn, "ledger", base, [9], "running", attempts=1)
    runs(conn, "ledger", base, [10], "pending", attempts=0)
    # 11, 12, 13: no run (the catch-up counted 3 dropped slots)
    runs(conn, "ledger", base, [14], origin="backfill")
    runs(conn, "ledger", base, [10], offset=timedelta(seconds=30))  # not a slot of every 1m
    runs(conn, "ledger", base, [20], origin="trigger", offset=timedelta(seconds=15))  # an operator's instant


def test_every_outcome_of_a_slot_is_told_and_the_window_proved(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], base: datetime
) -> None:
    ledger_case(conn, base)
    window = ("--since", iso(base), "--until", iso(base + 59 * MINUTE))
    code, doc = fleetctl_json(capsys, db_url, "verify", "--schedule", "ledger", *window)
    assert code == 0 and doc["ok"] is True
    (s,) = doc["schedules"]
    assert s["slots"] == 60 and s["ok"] is True
    assert s["counts"] == counts(
        once=37,
        retried=1,
        reclaimed=1,
        skipped=4,
        dead=1,
        pending=1,
        running=1,
        never_started=1,
        missed=13,
    )
    assert s["skipped"] == {
        "catchup": 1,
        "max_lateness": 1,
        "overlap": 1,
        "calendar": 0,
        "discarded": 1,
        "other": 0,
    }
    assert s["missed"] == {**ZERO_MISSED, "paused": 10, "catchup": 3}
    assert (s["not_a_slot"], s["by_operator"], s["created_twice"]) == (1, 1, 0)
    at = minute_of(base)
    between = iso(base + 10 * MINUTE + timedelta(seconds=30))
    assert [(e["outcome"], e["from"], e["to"], e["slots"], e["reason"]) for e in s["entries"]] == [
        ("retried", at(1), at(1), 1, "done after 3 attempts"),
        ("reclaimed", at(2), at(2), 1, "done after 2 attempts; a lease ran out and the run was reclaimed"),
        ("skipped", at(3), at(3), 1, "skipped by the catch-up policy"),
        ("skipped", at(4), at(4), 1, "skipped: later than max_lateness"),
        ("skipped", at(5), at(5), 1, "skipped: an earlier run was still in progress (overlap)"),
        ("skipped", at(6), at(6), 1, "dead, then discarded by an operator"),
        ("dead", at(7), at(7), 1, "dead after 6 attempt(s)"),
        ("pending", at(8), at(8), 1, "waiting to retry after attempt 1"),
        ("running", at(9), at(9), 1, "attempt 1 running"),
        ("never_started", at(10), at(10), 1, "created, never started (pending past its slot and grace)"),
        ("not_a_slot", between, between, 1, "not a slot of the timing"),
        ("missed", at(11), at(13), 3, "dropped by catch-up latest (counted in missed_slots)"),
        ("missed", at(50), at(59), 10, f"paused since {at(50)} (database upgrade)"),
    ]

    code, out, err = fleetctl(capsys, db_url, "verify", "--schedule", "ledger", *window)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"window {iso(base)} .. {at(59)} (59m)",
        f"ledger (every 1m): 60 slot(s) from {iso(base)}: 37 ran once, 1 after retries, 1 reclaimed,"
        " 4 skipped (catchup 1, max lateness 1, overlap 1, discarded 1), 1 dead, 1 pending, 1 running,"
        " 1 never started, 13 missed (paused 10, catchup 3); 1 run(s) not at a slot of the timing,"
        " 1 slot(s) run by an operator (backfill or trigger)  ok",
        "verify: every slot accounted for (60 slot(s) of 1 schedule(s))",
    ]

    # the client gives the same ledger
    with fleet.Client(db_url) as client:
        result = client.verify(["ledger"], base, base + 59 * MINUTE)
    assert result.ok and result.to_json()["schedules"] == doc["schedules"]


def test_a_missing_slot_without_a_record_fails_and_is_listed(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], base: datetime
) -> None:
    # the ticker planned up to minute 57 (the rest is not created yet); 20-22 and 40 have no run
    minutely(conn, "lost", created_at=base - timedelta(days=1), next_run_at=base + 57 * MINUTE)
    runs(conn, "lost", base, [m for m in range(57) if m not in (20, 21, 22, 40)])
    # the catch-up counted two dropped slots: not enough for a gap of three
    minutely(
        conn, "overcount", created_at=base - timedelta(days=1), next_run_at=base + 60 * MINUTE, missed_slots=2
    )
    runs(conn, "overcount", base, [m for m in range(60) if m not in (30, 31, 32)])
    window = ("--since", iso(base), "--until", iso(base + 59 * MINUTE))
    at = minute_of(base)

    code, out, err = fleetctl(capsys, db_url, "verify", *window)
    assert code == 1 and err == ""
    assert out.splitlines() == [
        f"window {iso(base)} .. {at(59)} (59m)",
        f"lost (every 1m): 60 slot(s) from {iso(base)}: 53 ran once, 3 not created yet, 4 UNEXPLAINED  FAIL",
        f"  unexplained: {at(20)} .. {at(22)} (3 slot(s)): no run and no record",
        f"  unexplained: {at(40)} (1 slot(s)): no run and no record",
        f"overcount (every 1m): 60 slot(s) from {iso(base)}: 57 ran once, 3 UNEXPLAINED  FAIL",
        f"  unexplained: {at(30)} .. {at(32)} (3 slot(s)): no run and no record (3 slot(s) missing, more"
        " than the catch-up counted: missed_slots = 2)",
        "verify: 7 slot(s) missing without a recorded reason in 2 schedule(s)",
    ]
    # capped: the rest counted
    code, out, _ = fleetctl(capsys, db_url, "verify", "--schedule", "lost", "--limit", "1", *window)
    assert code == 1
    assert out.splitlines()[2:4] == [
        f"  unexplained: {at(20)} .. {at(22)} (3 slot(s)): no run and no record",
        "  ... and 1 more unexplained slot(s) (raise --limit, or see --json)",
    ]
    code, doc = fleetctl_json(capsys, db_url, "verify", "--schedule", "lost", "--limit", "1", *window)
    (s,) = doc["schedules"]
    assert code == 1 and doc["ok"] is False and s["ok"] is False
    assert s["counts"] == counts(once=53, unplanned=3, unexplained=4)
    # unexplained ranges come first when the list is cut
    assert [(e["outcome"], e["from"], e["slots"]) for e in s["entries"]] == [("unexplained", at(20), 3)]
    assert s["entries_left_off"] == 2


def test_each_recorded_reason_explains_a_missing_slot(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], base: datetime
) -> None:
    now = base + timedelta(hours=3)
    # broken since minute 30: its next slot stayed there
    minutely(
        conn,
        "broken",
        created_at=base - timedelta(days=1),
        next_run_at=base + 30 * MINUTE,
        broken_at=base + 30 * MINUTE + timedelta(seconds=5),
        broken_error="cron: its next 200 times all fall in daylight-saving gaps",
    )
    runs(conn, "broken", base, range(30))
    # runs kept for an hour: the first half of the window lost its runs to retention
    minutely(
        conn,
        "kept-1h",
        created_at=base - timedelta(days=1),
        next_run_at=now + MINUTE,
        retention=timedelta(hours=1),
    )
    runs(conn, "kept-1h", base, range(30, 60))
    # started an hour before the window, but created half-way through it
    minutely(
        conn,
        "late-start",
        start_at=base - timedelta(hours=1),
        created_at=base + 30 * MINUTE,
        next_run_at=now + MINUTE,
    )
    runs(conn, "late-start", base, range(30, 60))
    # every 1m from :30 until minute 29, every 1m on the minute since
    minutely(conn, "retimed", created_at=base - timedelta(days=1), next_run_at=now + MINUTE)
    runs(conn, "retimed", base, range(30), offset=timedelta(seconds=30))
    runs(conn, "retimed", base, range(30, 60))
    # disabled at minute 40 (no longer applied)
    minutely(conn, "off", created_at=base - timedelta(days=1), next_run_at=base + 40 * MINUTE, enabled=False)
    runs(conn, "off", base, range(40))
    window = ("--since", iso(base), "--until", iso(base + 59 * MINUTE))

    code, doc = fleetctl_json(capsys, db_url, "verify", *window)
    assert code == 0
    found = {s["name"]: s for s in doc["schedules"]}
    assert sorted(found) == ["broken", "kept-1h", "late-start", "retimed"]  # enabled ones by default
    assert found["broken"]["counts"] == counts(once=30, missed=30)
    assert found["broken"]["missed"] == {**ZERO_MISSED, "broken": 30}
    assert found["broken"]["entries"][0]["reason"] == (
        f"broken since {iso(base + 30 * MINUTE + timedelta(seconds=5))}: cron: its next 200 times all fall"
        " in daylight-saving gaps"
    )
    assert found["kept-1h"]["counts"] == counts(once=30, pruned=30)
    assert (
        found["kept-1h"]["entries"][0]["reason"]
        == "older than the retention (1h): its run may have been removed"
    )
    assert found["late-start"]["counts"] == counts(once=30, missed=30)
    assert found["late-start"]["missed"] == {**ZERO_MISSED, "before_created": 30}
    assert found["retimed"]["counts"] == counts(once=30, missed=30)
    assert found["retimed"]["missed"] == {**ZERO_MISSED, "timing_changed": 30}
    assert found["retimed"]["not_a_slot"] == 30

    code, doc = fleetctl_json(capsys, db_url, "verify", "--schedule", "off", *window)
    (off,) = doc["schedules"]
    assert code == 0 and off["counts"] == counts(once=40, missed=20) and off["missed"]["disabled"] == 20

    # without a retention cutoff (off), the slots of kept-1h are missing with no record
    with_retention = verify(conn, ["kept-1h"], base, base + 59 * MINUTE, retention=None)
    assert with_retention.schedules[0].counts["pruned"] == 30  # the schedule's own retention holds
    conn.execute("UPDATE fleet.schedules SET retention = NULL WHERE name = 'kept-1h'")
    code, doc = fleetctl_json(
        capsys, db_url, "verify", "--schedule", "kept-1h", "--retention", "off", *window
    )
    assert code == 1 and doc["schedules"][0]["counts"] == counts(once=30, unexplained=30)
    code, doc = fleetctl_json(capsys, db_url, "verify", "--schedule", "kept-1h", "--retention", "2h", *window)
    assert code == 0 and doc["schedules"][0]["counts"] == counts(once=30, pruned=30)


def test_cron_slots_across_daylight_saving_changes(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "fall"\ncron = "*/5 * * * *"\ntimezone = "Europe/Berlin"\njob = "noop"\n'
        '[[schedule]]\nname = "spring"\ncron = "30 2 * * *"\ntimezone = "Europe/Berlin"\njob = "noop"\n',
    )
    conn.execute("UPDATE fleet.schedules SET created_at = '2026-01-01Z', next_run_at = now() + interval '1h'")
    # every five minutes of real time, through the hour the clocks go back (2026-10-25 01:00Z)
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after)"
        " SELECT 'fall', t, 'noop', 'done', 1, t"
        " FROM generate_series('2026-10-24T22:00Z'::timestamptz, '2026-10-25T04:00Z', interval '5 minutes') t"
    )
    # 02:30 in Berlin: 01:30Z in winter, 00:30Z in summer; on 29 March 02:30 does not exist and the
    # slot moves to the end of the gap, 03:00 CEST = 01:00Z
    spring = ["2026-03-27T01:30Z", "2026-03-28T01:30Z", "2026-03-29T01:00Z", "2026-03-30T00:30Z"]
    for slot in spring:
        conn.execute(
            "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after)"
            " VALUES ('spring', %s, 'noop', 'done', 1, %s)",
            (slot, slot),
        )
    code, doc = fleetctl_json(
        capsys,
        db_url,
        "verify",
        "--since",
        "2026-10-24T22:00Z",
        "--until",
        "2026-10-25T04:00Z",
        "--schedule",
        "fall",
    )
    (s,) = doc["schedules"]
    assert code == 0 and s["slots"] == 73 and s["counts"] == counts(once=73) and s["not_a_slot"] == 0
    code, doc = fleetctl_json(
        capsys,
        db_url,
        "verify",
        "--since",
        "2026-03-27T00:00Z",
        "--until",
        "2026-03-30T23:00Z",
        "--schedule",
        "spring",
    )
    (s,) = doc["schedules"]
    assert code == 0 and s["counts"] == counts(once=4) and s["not_a_slot"] == 0

    # a slot an hour off (as if the zone were ignored) is not a slot, and the real one is missing
    # (past the default retention of 30 days, it would count as pruned: retention off)
    conn.execute(
        "UPDATE fleet.job_runs SET scheduled_for = '2026-03-29T01:30Z' WHERE scheduled_for = '2026-03-29T01:00Z'"
    )
    code, doc = fleetctl_json(
        capsys,
        db_url,
        "verify",
        "--since",
        "2026-03-27T00:00Z",
        "--until",
        "2026-03-30T23:00Z",
        "--schedule",
        "spring",
        "--retention",
        "off",
    )
    (s,) = doc["schedules"]
    assert code == 1 and s["counts"] == counts(once=3, unexplained=1) and s["not_a_slot"] == 1
    assert [e["from"] for e in s["entries"] if e["outcome"] == "unexplained"] == ["2026-03-29T01:00:00Z"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--schedule", "nope"], "no such schedule: 'nope'"),
        (["--since", "yesterday"], "--since: not an ISO-8601 time: 'yesterday'"),
        (["--until", "2026-13-01"], "--until: not an ISO-8601 time"),
        (
            ["--since", "2026-03-02T00:00Z", "--until", "2026-03-01T00:00Z"],
            "--since: 2026-03-02T00:00:00Z is after --until",
        ),
        (["--since", "2020-01-01T00:00Z"], "--since: the window from 2020-01-01T00:00:00Z"),
        (
            ["--since", "2026-03-01T00:00Z", "--until", "2026-03-03T00:00Z", "--max-window", "1d"],
            "--since: the window from 2026-03-01T00:00:00Z to 2026-03-03T00:00:00Z is 2d, longer than"
            " --max-window 1d",
        ),
        (["--since", "2999-01-01T00:00Z"], "--since: 2999-01-01T00:00:00Z is in the future"),
        (["--limit", "0"], "--limit: must be from 1 to 100000"),
        (["--max-window", "9999d"], "--max-window: at most 3660d"),
        (["--retention", "5m"], "--retention: must be from 1h to 3660d, or off"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], args: list[str], message: str
) -> None:
    minutely(conn, "s")
    code, out, err = fleetctl(capsys, db_url, "verify", *args)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(f"fleetctl verify: {message}"), err


def test_the_client_refuses_what_fleetctl_refuses(db_url: str, conn: psycopg.Connection[Any]) -> None:
    minutely(conn, "s")
    with fleet.Client(db_url) as client:
        with pytest.raises(fleet.UnknownSchedule, match="'nope'"):
            client.verify(["s", "nope"])
        with pytest.raises(fleet.RequestError, match="since: a timezone-aware datetime"):
            client.verify("s", datetime(2026, 1, 1))
        with pytest.raises(fleet.RequestError, match="^since: .* is after until"):
            client.verify("s", datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC))
        with pytest.raises(fleet.RequestError, match="longer than max_window 366d"):
            client.verify("s", datetime(2020, 1, 1, tzinfo=UTC))
        with pytest.raises(fleet.RequestError, match="limit"):
            client.verify("s", limit=0)
        # a fresh schedule has nothing to prove yet: its slots are ahead of the ticker
        result = client.verify()
    assert result.ok and [s.name for s in result.schedules] == ["s"]


def test_a_year_of_a_one_minute_schedule(capsys: Cap, db_url: str, conn: psycopg.Connection[Any]) -> None:
    until: datetime = scalar(conn, "SELECT date_trunc('minute', now())")
    since = until - timedelta(days=365)
    minutely(conn, "year", created_at=since - timedelta(days=1), next_run_at=until + MINUTE)
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after,"
        " finished_at, last_outcome)"
        " SELECT 'year', t, 'noop', 'done', 1, t, t + interval '1 second', 'done'"
        " FROM generate_series(%s::timestamptz, %s, interval '1 minute') t",
        (since, until),
    )
    old, recent = since + timedelta(days=100), until - timedelta(days=3)
    # a month-old gap (past the 30-day retention) and a recent one, deleted leaving no outcome in
    # the slot ledger; a few retried runs, a dead one
    with conn.transaction():
        conn.execute("SELECT set_config('fleet.keep_outcomes', 'off', true)")
        conn.execute(
            "DELETE FROM fleet.job_runs WHERE schedule_name = 'year'"
            " AND (scheduled_for BETWEEN %s AND %s OR scheduled_for = %s)",
            (old, old + 4 * MINUTE, recent),
        )
    conn.execute(
        "UPDATE fleet.job_runs SET attempts = 2 WHERE schedule_name = 'year' AND scheduled_for = ANY(%s)",
        ([since + timedelta(days=d) for d in (1, 50, 200, 364)],),
    )
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'dead', attempts = 6 WHERE schedule_name = 'year' AND scheduled_for = %s",
        (until - timedelta(hours=1),),
    )
    conn.execute("VACUUM ANALYZE fleet.job_runs")
    started = time.monotonic()
    result = verify(conn, ["year"], since, until)
    took = time.monotonic() - started
    (s,) = result.schedules
    assert s.slots == 525_601
    assert s.counts == counts(once=525_601 - 5 - 1 - 4 - 1, retried=4, dead=1, pruned=5, unexplained=1)
    assert [(e.outcome, e.first, e.slots) for e in s.entries if e.outcome in ("pruned", "unexplained")] == [
        ("pruned", old, 5),
        ("unexplained", recent, 1),
    ]
    # measured by the benchmark (`python -m loadtest.bench --only verify`); here only a bound that
    # a slot-by-slot round trip or a quadratic merge would break
    assert took < 10, took
    code, out, _ = fleetctl(
        capsys, db_url, "verify", "--schedule", "year", "--since", iso(since), "--until", iso(until)
    )
    assert code == 1 and "525601 slot(s)" in out and f"  unexplained: {iso(recent)} (1 slot(s))" in out


def test_show_says_what_became_of_a_slot_without_a_run(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], base: datetime
) -> None:
    ledger_case(conn, base)
    at = minute_of(base)
    minutely(conn, "old", created_at=base - timedelta(days=60), next_run_at=base + 61 * MINUTE)
    minutely(
        conn, "gaps", created_at=base - timedelta(days=1), next_run_at=base + 10 * MINUTE, missed_slots=1
    )
    runs(conn, "gaps", base, [0, 2, 4])  # 1 and 3 missing: two gaps, one slot counted missed
    minutely(conn, "ahead", next_run_at=base + timedelta(days=2))  # planned a day ahead, then removed
    for schedule, slot, fate in (
        ("ledger", at(12), "missed: dropped by catch-up latest (counted in missed_slots)"),
        ("ledger", at(55), f"missed: paused since {at(50)} (database upgrade)"),
        (
            "ledger",
            iso(base - timedelta(days=2)),
            f"missed: before the schedule existed (created {iso(base - timedelta(days=1))})",
        ),
        ("ledger", iso(base + timedelta(days=1)), "not created yet: the schedule is paused"),
        (
            "old",
            iso(base + timedelta(days=1)),
            f"not created yet: the ticker's next slot to plan is {at(61)}",
        ),
        (
            "old",
            iso(base - timedelta(days=40)),
            "past retention: older than the retention (30d): its run may have been removed",
        ),
        ("gaps", at(3), "whose run was not created (yet) or was pruned"),  # verify: UNEXPLAINED
        ("ahead", iso(base + timedelta(days=1)), "whose run was not created (yet) or was pruned"),
    ):
        code, out, err = fleetctl(capsys, db_url, "show", schedule, slot)
        assert (code, out, err) == (
            2,
            "",
            f"fleetctl show: schedule {schedule!r} has no run at {slot}: it is a slot of the schedule, {fate}\n",
        )
    with fleet.Client(db_url) as client, pytest.raises(fleet.UnknownRun, match="missed: dropped by catch-up"):
        client.show("ledger", base + 11 * MINUTE)

    # runs removed (by retention, prune or a DELETE): the slot ledger kept what became of them
    conn.execute(
        "DELETE FROM fleet.job_runs WHERE schedule_name = 'ledger' AND scheduled_for <= %s",
        (base + 7 * MINUTE,),
    )
    kept = "whose run was removed; the slot ledger keeps its outcome: "
    for m, fate in (
        (0, "ran once"),
        (1, "done after 3 attempts"),
        (3, "skipped by the catch-up policy"),
        (6, "dead, then discarded by an operator"),
        (7, "dead after 6 attempt(s)"),
    ):
        code, out, err = fleetctl(capsys, db_url, "show", "ledger", at(m))
        assert (code, err) == (
            2,
            f"fleetctl show: schedule 'ledger' has no run at {at(m)}: it is a slot of the schedule, {kept}{fate}\n",
        )


def test_a_pause_that_ended_accounts_for_its_slots_as_the_audit_recorded_it(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], base: datetime
) -> None:
    minutely(conn, "pp", created_at=base - timedelta(days=1), next_run_at=base + 60 * MINUTE)
    gaps = {0, 1, 2, *range(10, 15), 30, 31, 45}
    runs(conn, "pp", base, [m for m in range(60) if m not in gaps])
    half = timedelta(seconds=30)
    for when, action, outcome, note in (
        (base - 10 * MINUTE, "pause", "paused", None),  # begun before the window
        (base - 5 * MINUTE, "pause", "note", "maintenance"),  # and given its note before it too
        (base + 2 * MINUTE + half, "resume", None, None),
        (base + 9 * MINUTE + half, "pause", "paused", "db upgrade"),
        (base + 14 * MINUTE + half, "resume", None, None),
        (base + 29 * MINUTE + half, "pause", "paused", None),
        (base + 30 * MINUTE + half, "pause", "note", "disk full"),  # a note given to the pause on
        (base + 31 * MINUTE + half, "resume", None, None),
        (base + 40 * MINUTE, "resume", None, None),  # a resume of nothing: changes nothing
    ):
        conn.execute(
            "INSERT INTO fleet.schedule_audit (at, action, schedule, details, note)"
            " VALUES (%s, %s, 'pp', %s, %s)",
            (when, action, psycopg.types.json.Jsonb({"outcome": outcome} if outcome else {}), note),
        )
    at = minute_of(base)

    def paused(start: datetime, end: datetime, note: str = "") -> str:
        return f"paused from {iso(start)} to {iso(end)}" + (f" ({note})" if note else "")

    window = ("--since", iso(base), "--until", iso(base + 59 * MINUTE))
    code, doc = fleetctl_json(capsys, db_url, "verify", "--schedule", "pp", *window)
    (s,) = doc["schedules"]
    assert code == 1 and s["missed"] == {**ZERO_MISSED, "paused": 10}
    assert [(e["outcome"], e["from"], e["to"], e["reason"]) for e in s["entries"]] == [
        ("missed", at(0), at(2), paused(base - 10 * MINUTE, base + 2 * MINUTE + half, "maintenance")),
        ("missed", at(10), at(14), paused(base + 9 * MINUTE + half, base + 14 * MINUTE + half, "db upgrade")),
        ("missed", at(30), at(31), paused(base + 29 * MINUTE + half, base + 31 * MINUTE + half, "disk full")),
        ("unexplained", at(45), at(45), "no run and no record"),
    ]
    code, out, err = fleetctl(capsys, db_url, "show", "pp", at(12))
    assert err.endswith(
        f"it is a slot of the schedule, missed: {paused(base + 9 * MINUTE + half, base + 14 * MINUTE + half, 'db upgrade')}\n"
    ), err


def test_pausing_and_resuming_leave_the_ledger_accounted_for(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """Through the commands: the slots a pause kept from being created are missed (paused), before
    and after the resume."""
    now: datetime = scalar(conn, "SELECT now()")
    minutely(conn, "live", created_at=now - timedelta(hours=1))
    conn.execute(
        "UPDATE fleet.schedules SET every = interval '1 second', next_run_at = %s WHERE name = 'live'", (now,)
    )
    assert fleetctl(capsys, db_url, "pause", "live", "--note", "upgrade")[0] == 0
    time.sleep(2.5)  # slots come due while paused: none is created
    paused_at: datetime = scalar(conn, "SELECT paused_at FROM fleet.schedules WHERE name = 'live'")
    window = ("--since", iso(paused_at), "--schedule", "live")
    code, doc = fleetctl_json(capsys, db_url, "verify", *window)
    paused_before = doc["schedules"][0]["missed"]["paused"]
    assert code == 0 and paused_before >= 2
    assert fleetctl(capsys, db_url, "resume", "live")[0] == 0
    code, doc = fleetctl_json(capsys, db_url, "verify", *window)
    (s,) = doc["schedules"]
    assert (code, s["missed"]["paused"], s["counts"]["unexplained"]) == (0, paused_before, 0), s
    assert all(
        e["reason"].startswith("paused from ") and e["reason"].endswith(" (upgrade)")
        for e in s["entries"]
        if e["outcome"] == "missed"
    )
