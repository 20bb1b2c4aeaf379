"""fleetctl retry, discard, trigger, pause, resume, backfill and prune on a real database: each
twice (the second call changes nothing), and on unknown schedules and slots (exit 2, nothing changed)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from fleet.admin.repair import run_trigger
from fleet.health.results import Triggered
from fleet.ticker.tick import run_once as tick
from tests.integration.ops_support import add_run, fleetctl, fleetctl_json, snapshot
from tests.support import apply_text, live_ticker, scalar

Cap = pytest.CaptureFixture[str]
SLOT = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
SLOT_ISO = "2026-03-01T10:00:00Z"


def hourly(conn: psycopg.Connection[Any], name: str = "s", overlap: str = "skip", **extra: str) -> None:
    more = "".join(f"{k} = {v}\n" for k, v in extra.items())
    apply_text(
        conn, f'[[schedule]]\nname = "{name}"\nevery = "1h"\njob = "noop"\noverlap = "{overlap}"\n{more}'
    )


def run(conn: psycopg.Connection[Any], slot: datetime = SLOT, name: str = "s") -> dict[str, Any]:
    r = conn.execute(
        "SELECT *, status::text AS status FROM fleet.job_runs WHERE schedule_name = %s AND scheduled_for = %s",
        (name, slot),
    ).fetchone()
    assert r is not None
    return dict(r)


def refused(capsys: Cap, db_url: str, conn: psycopg.Connection[Any], *args: str) -> str:
    """Run a command that must be refused: exit 2, one line on stderr, nothing changed."""
    before = snapshot(conn)
    code, out, err = fleetctl(capsys, db_url, *args)
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert snapshot(conn) == before
    return err.strip()


# -- retry -----------------------------------------------------------------------------------------


def test_retry_makes_a_dead_run_pending_keeps_history_and_frees_the_gate(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn)
    add_run(conn, "s", SLOT, "dead", overlap="skip", attempts=3, error="boom 3")
    conn.execute("INSERT INTO fleet.schedule_gates VALUES ('s', %s)", (SLOT,))  # a gate left on a dead slot
    code, out, _ = fleetctl(capsys, db_url, "retry", "s", SLOT_ISO)
    assert code == 0 and "retried 1 run(s) of s: 2026-03-01T10:00:00Z" in out
    r = run(conn)
    assert (r["status"], r["attempts"], r["failures"], r["finished_at"]) == ("pending", 3, 0, None)
    assert r["run_after"] <= scalar(conn, "SELECT now()")
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 3
    assert scalar(conn, "SELECT running_slot FROM fleet.schedule_gates") is None
    code, payload = fleetctl_json(capsys, db_url, "status", "s")
    assert payload[0]["dead_runs"] == 0

    before = snapshot(conn)
    code, out, _ = fleetctl(capsys, db_url, "retry", "s", SLOT_ISO)
    assert code == 0 and "already pending" in out
    assert snapshot(conn) == before


def test_retry_all_dead_and_its_refusals(capsys: Cap, db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn)
    for h in range(3):
        add_run(conn, "s", SLOT + timedelta(hours=h), "dead")
    add_run(conn, "s", SLOT + timedelta(hours=3), "done")
    code, out, _ = fleetctl(capsys, db_url, "retry", "--all-dead", "s")
    assert code == 0 and "retried 3 run(s)" in out
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE status = 'pending'") == 3
    code, out, _ = fleetctl(capsys, db_url, "retry", "--all-dead", "s")
    assert code == 0 and "no dead run" in out

    assert "'nope'" in refused(capsys, db_url, conn, "retry", "nope", SLOT_ISO)
    assert "'nope'" in refused(capsys, db_url, conn, "retry", "--all-dead", "nope")
    assert "2026-03-01T09:00:00Z" in refused(capsys, db_url, conn, "retry", "s", "2026-03-01T09:00:00Z")
    assert "done, not dead" in refused(capsys, db_url, conn, "retry", "s", "2026-03-01T13:00:00Z")
    assert "ISO-8601" in refused(capsys, db_url, conn, "retry", "s", "yesterday")
    refused(capsys, db_url, conn, "retry", "s")  # neither SLOT nor --all-dead


# -- discard ---------------------------------------------------------------------------------------


def test_discard_acknowledges_a_dead_run_and_health_turns_ok(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn)
    live_ticker(conn)
    now = scalar(conn, "SELECT now()")
    add_run(conn, "s", SLOT, "dead", overlap="skip", attempts=2, error="boom 2")
    add_run(conn, "s", now - timedelta(minutes=5), "done")  # a later success does not hide the dead run
    conn.execute("INSERT INTO fleet.schedule_gates VALUES ('s', %s)", (SLOT,))
    code, payload = fleetctl_json(capsys, db_url, "status", "s")
    assert code == 1 and payload[0]["verdict"] == "DEAD" and payload[0]["dead_runs"] == 1

    code, out, _ = fleetctl(capsys, db_url, "discard", "s", SLOT_ISO)
    assert code == 0 and "discarded 1 dead run(s)" in out
    r = run(conn)
    assert (r["status"], r["last_outcome"]) == ("skipped", "discarded")
    assert (
        "boom 2" in r["last_error"]
        and scalar(conn, "SELECT count(*) FROM fleet.job_attempts WHERE attempt <= 2") == 3
    )
    assert scalar(conn, "SELECT running_slot FROM fleet.schedule_gates") is None
    code, payload = fleetctl_json(capsys, db_url, "status", "s")
    assert code == 0 and payload[0]["verdict"] == "OK" and payload[0]["dead_runs"] == 0
    code, payload = fleetctl_json(capsys, db_url, "runs", "s", "--status", "discarded")
    assert [p["slot"] for p in payload] == [SLOT_ISO]

    before = snapshot(conn)
    code, out, _ = fleetctl(capsys, db_url, "discard", "s", SLOT_ISO)
    assert code == 0 and "already discarded" in out and snapshot(conn) == before

    # an operator can change their mind: a discarded run can be retried
    code, out, _ = fleetctl(capsys, db_url, "retry", "s", SLOT_ISO)
    assert code == 0 and run(conn)["status"] == "pending"
    assert "pending, not dead" in refused(capsys, db_url, conn, "discard", "s", SLOT_ISO)
    assert "'nope'" in refused(capsys, db_url, conn, "discard", "nope", SLOT_ISO)
    assert "2026-03-02T00:00:00Z" in refused(capsys, db_url, conn, "discard", "s", "2026-03-02")


# -- trigger ---------------------------------------------------------------------------------------


def test_trigger_twice_in_the_same_second_creates_one_run(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, start_at='"2099-01-01T00:00:00Z"')
    at = datetime(2026, 3, 1, 10, 0, 7, 250000, tzinfo=UTC)
    slot = datetime(2026, 3, 1, 10, 0, 7, tzinfo=UTC)
    assert run_trigger(conn, "s", now=at) == Triggered("s", slot, True)
    assert run_trigger(conn, "s", now=at + timedelta(milliseconds=700)) == Triggered("s", slot, False)
    r = run(conn, datetime(2026, 3, 1, 10, 0, 7, tzinfo=UTC))
    assert (r["origin"], r["status"], r["overlap"]) == ("trigger", "pending", "queue")  # skip -> queue

    # the command itself, twice within one second of the database's clock
    while time.time() % 1 > 0.5:
        time.sleep(0.05)
    first = fleetctl(capsys, db_url, "trigger", "s")
    second = fleetctl(capsys, db_url, "trigger", "s", "--args", '{"full": true}')
    assert first[0] == 0 and "triggered s @" in first[1]
    assert (
        second[0] == 0 and "exists already: not triggered again; the --args given were not used" in second[1]
    )
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE origin = 'trigger'") == 2
    assert "'nope'" in refused(capsys, db_url, conn, "trigger", "nope")


# -- pause, resume ---------------------------------------------------------------------------------


def test_pause_stops_slots_and_resume_does_not_catch_up(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    apply_text(conn, '[[schedule]]\nname = "s"\nevery = "1m"\njob = "noop"\ncatchup = "all"\n')
    code, out, _ = fleetctl(capsys, db_url, "pause", "s")
    assert code == 0 and out.strip() == "paused s"
    paused_at = scalar(conn, "SELECT paused_at FROM fleet.schedules")
    code, out, _ = fleetctl(capsys, db_url, "pause", "s")
    assert code == 0 and "paused already" in out
    assert scalar(conn, "SELECT paused_at FROM fleet.schedules") == paused_at
    code, payload = fleetctl_json(capsys, db_url, "status")
    assert code == 0 and payload[0]["verdict"] == "PAUSED" and payload[0]["paused"] is True

    # a long pause: three days of slots came due meanwhile, and catch-up is 'all'
    conn.execute("UPDATE fleet.schedules SET next_run_at = now() - interval '3 days'")
    assert tick(conn, batch_size=10, catchup_limit=10_000).created == 0  # paused: the ticker skips it
    code, out, _ = fleetctl(capsys, db_url, "resume", "s")
    assert code == 0 and out.startswith("resumed s: next slot ")
    now = scalar(conn, "SELECT now()")
    nxt = scalar(conn, "SELECT next_run_at FROM fleet.schedules")
    assert now - timedelta(seconds=1) <= nxt <= now + timedelta(minutes=1)
    assert scalar(conn, "SELECT paused_at FROM fleet.schedules") is None
    tick(conn, batch_size=10, catchup_limit=10_000)
    assert scalar(conn, "SELECT count(*) FROM fleet.job_runs") <= 1  # no catch-up of the paused days
    code, out, _ = fleetctl(capsys, db_url, "resume", "s")
    assert code == 0 and "not paused" in out
    assert scalar(conn, "SELECT next_run_at FROM fleet.schedules") >= nxt

    assert "'nope'" in refused(capsys, db_url, conn, "pause", "nope")
    assert "'nope'" in refused(capsys, db_url, conn, "resume", "nope")


def test_pause_note_is_shown_by_status_and_resume_replaces_it(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn)
    code, _, _ = fleetctl(capsys, db_url, "pause", "s", "--note", "  disk full on the report host ")
    assert code == 0
    code, payload = fleetctl_json(capsys, db_url, "status")
    assert payload[0]["pause_note"] == "disk full on the report host"
    code, out, _ = fleetctl(capsys, db_url, "status")
    header, line = out.splitlines()
    assert header.split()[-1] == "NOTE" and line.endswith("disk full on the report host")
    fleetctl(capsys, db_url, "pause", "s", "--note", "moved to Tuesday")  # paused already: the note changes
    assert scalar(conn, "SELECT pause_note FROM fleet.schedules") == "moved to Tuesday"
    fleetctl(capsys, db_url, "resume", "s")
    assert scalar(conn, "SELECT pause_note FROM fleet.schedules") is None
    too_long = refused(capsys, db_url, conn, "pause", "s", "--note", "x" * 501)
    assert "--note: at most 500 characters" in too_long


# -- times at the far ends ------------------------------------------------------------------------

YEAR_1 = "0001-01-01T00:00:00"
YEAR_9999 = "9999-12-31T23:59:59"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "s", YEAR_1 + "+01:00"), "SLOT: out of range in UTC (years 1 to 9999)"),
        (("show", "c", YEAR_9999 + "-01:00"), "SLOT: out of range in UTC (years 1 to 9999)"),
        (("show", "c", YEAR_1 + "Z"), "has no run at 0001-01-01T00:00:00Z"),
        (("show", "s", YEAR_9999 + ".999999Z"), "has no run at 9999-12-31T23:59:59.999999Z"),
        (("trace", "c", YEAR_1 + "+05:00"), "SLOT: out of range in UTC"),
        (("retry", "s", YEAR_1 + "+05:00"), "SLOT: out of range in UTC"),
        (("discard", "c", YEAR_9999 + "-02:00"), "SLOT: out of range in UTC"),
        (("backfill", "s", "--from", YEAR_1 + "Z", "--to", "0001-01-01T05:00:00Z"), "--from 0001-01-01T00:00:00Z is before 1970"),
        (("backfill", "c", "--from", YEAR_1 + "Z", "--to", "2026-01-01T00:00:00Z"), "is before 1970"),
        (("backfill", "c", "--from", YEAR_1 + "+05:00", "--to", "2026-01-01T00:00:00Z"), "--from: out of range in UTC"),
        (("backfill", "s", "--from", "9999-12-31T00:00:00Z", "--to", YEAR_9999 + ".999999Z"), "is in the future"),
        (("backfill", "s", "--from", "2026-01-01T00:00:00Z", "--to", YEAR_9999 + "-05:00"), "--to: out of range in UTC"),
    ],
)  # fmt: skip
def test_times_at_the_far_ends_are_refused_in_one_line(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], args: tuple[str, ...], message: str
) -> None:
    """Years 1 and 9999, with offsets that move them out of range in UTC: one line, exit 2, nothing
    changed (they printed a traceback, or created runs in year 1)."""
    hourly(conn)
    apply_text(
        conn, '[[schedule]]\nname = "c"\ncron = "0 * * * *"\ntimezone = "Europe/Berlin"\njob = "noop"\n'
    )
    err = refused(capsys, db_url, conn, *args)
    assert message in err and "Traceback" not in err, err


def test_the_client_refuses_slots_out_of_range_in_utc(db_url: str, conn: psycopg.Connection[Any]) -> None:
    import fleet

    hourly(conn)
    far = (
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-2))),
    )
    with fleet.Client(db_url) as c:
        for slot in far:
            for method in (c.show, c.retry, c.discard):
                with pytest.raises(fleet.RequestError, match="^slot: out of range in UTC"):
                    method("s", slot)


# -- backfill --------------------------------------------------------------------------------------


def test_backfill_creates_missing_slots_once(capsys: Cap, db_url: str, conn: psycopg.Connection[Any]) -> None:
    hourly(conn, start_at='"2099-01-01T00:00:00Z"')
    conn.execute("UPDATE fleet.schedules SET start_at = NULL")  # slots on the hour
    add_run(conn, "s", SLOT + timedelta(hours=2), "done")
    code, out, _ = fleetctl(
        capsys, db_url, "backfill", "s", "--from", "2026-03-01T09:30:00Z", "--to", "2026-03-01T14:00:00Z"
    )
    assert code == 0, out
    assert "backfilled 4 slot(s)" in out and "1 slot(s) in the range had a run already" in out
    rows = conn.execute(
        "SELECT scheduled_for, origin, status::text, overlap, run_after <= now() AS due "
        "FROM fleet.job_runs WHERE origin = 'backfill' ORDER BY scheduled_for"
    ).fetchall()
    assert [r["scheduled_for"] for r in rows] == [SLOT + timedelta(hours=h) for h in (0, 1, 3, 4)]
    assert {(r["status"], r["overlap"], r["due"]) for r in rows} == {("pending", "queue", True)}

    before = snapshot(conn)
    code, out, _ = fleetctl(
        capsys, db_url, "backfill", "s", "--from", "2026-03-01T09:30:00Z", "--to", "2026-03-01T14:00:00Z"
    )
    assert code == 0 and "backfilled" not in out and "5 slot(s) in the range had a run already" in out
    assert snapshot(conn) == before

    assert "'nope'" in refused(
        capsys, db_url, conn, "backfill", "nope", "--from", "2026-03-01", "--to", "2026-03-02"
    )
    assert "after" in refused(
        capsys, db_url, conn, "backfill", "s", "--from", "2026-03-02", "--to", "2026-03-01"
    )
    assert "future" in refused(
        capsys, db_url, conn, "backfill", "s", "--from", "2026-03-01", "--to", "2999-01-01"
    )
    assert "narrow" in refused(
        capsys, db_url, conn, "backfill", "s", "--from", "2000-01-01", "--to", "2026-01-01"
    )


# -- prune -----------------------------------------------------------------------------------------


def test_prune_deletes_old_finished_runs_but_keeps_dead_and_the_newest(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn)
    hourly(conn, "t")
    old = "now() - interval '3 days'"
    for h in range(5):
        add_run(conn, "s", SLOT + timedelta(hours=h), "done", finished=old, attempts=2)
    add_run(conn, "s", SLOT + timedelta(hours=5), "skipped", finished=old, history=False)
    add_run(conn, "s", SLOT + timedelta(hours=6), "dead", finished=old)  # nobody acknowledged it: kept
    add_run(conn, "s", SLOT + timedelta(hours=7), "dead", finished=old, error="x")
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'skipped', last_outcome = 'discarded' WHERE scheduled_for = %s",
        (SLOT + timedelta(hours=7),),
    )
    add_run(conn, "s", SLOT + timedelta(hours=8), "done", finished="now()")  # recent: kept
    add_run(conn, "s", SLOT + timedelta(hours=9), "pending", finished=None, history=False)
    add_run(conn, "t", SLOT, "done", finished=old)  # t's only success: the newest, kept
    add_run(
        conn, "t", SLOT + timedelta(hours=1), "skipped", finished=old, history=False
    )  # t's newest finished

    code, out, _ = fleetctl(capsys, db_url, "prune", "--older-than", "1d", "--batch", "2")
    assert code == 0 and "pruned 7 run(s) and 11 attempt(s)" in out and "in 4 batch(es)" in out
    left = [
        (r["schedule_name"], r["h"], r["status"])
        for r in conn.execute(
            "SELECT schedule_name, extract(hour FROM scheduled_for AT TIME ZONE 'UTC')::int - 10 AS h,"
            " status::text FROM fleet.job_runs ORDER BY 1, 2"
        )
    ]
    assert left == [
        ("s", 6, "dead"),
        ("s", 8, "done"),
        ("s", 9, "pending"),
        ("t", 0, "done"),
        ("t", 1, "skipped"),
    ]
    assert scalar(conn, "SELECT count(*) FROM fleet.job_attempts") == 3  # of s 6, s 8 and t 0
    code, payload = fleetctl_json(capsys, db_url, "status", "t")
    assert payload[0]["since_last_success_s"] > 86400  # still computable

    code, out, _ = fleetctl(capsys, db_url, "prune", "--older-than", "1d")
    assert code == 0 and "pruned 0 run(s)" in out
    assert "'nope'" in refused(capsys, db_url, conn, "prune", "--older-than", "1d", "--schedule", "nope")
    assert "--older-than" in refused(capsys, db_url, conn, "prune", "--older-than", "soon")
