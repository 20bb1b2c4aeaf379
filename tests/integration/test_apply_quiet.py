"""Apply writes and locks only what changed: re-applying a large unchanged file costs tickers
nothing, and concurrent applies serialise among themselves."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.admin.apply import ApplyResult, apply_specs
from fleet.errors import ScheduleFileError
from fleet.store.db import connect
from fleet.timing.schedfile import load
from tests.integration.ops_support import fleetctl
from tests.support import Proc, apply_text, env_for, processes, scalar, ticker_cmd, wait_for

LARGE = 20_000
TICK = '[[schedule]]\nname = "tick"\nevery = "1s"\njob = "noop"\ncatchup = "skip"\n'


def large_file(n: int) -> str:
    # Far in the future: the ticker has nothing to do for them, only the 1-second schedule.
    return "".join(
        f'[[schedule]]\nname = "bulk-{i:05d}"\nevery = "1h"\njob = "noop"\n'
        'start_at = "2099-01-01T00:00:00Z"\n'
        for i in range(n)
    )


def tick_slots(conn: psycopg.Connection[Any]) -> list[datetime]:
    return [
        r["scheduled_for"]
        for r in conn.execute(
            "SELECT scheduled_for FROM fleet.job_runs WHERE schedule_name = 'tick' ORDER BY scheduled_for"
        )
    ]


def test_reapplying_a_large_unchanged_file_costs_a_ticker_no_slot(
    capsys: pytest.CaptureFixture[str], db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    text = TICK + large_file(LARGE)
    f = tmp_path / "large.toml"
    f.write_text(text)
    apply_text(conn, TICK)
    # The large file's rows, made in one statement (they share one timing, so one timing hash); the
    # applies below must find each unchanged, the columns' defaults being the file's.
    (bulk,) = load(large_file(1))
    conn.execute(
        "INSERT INTO fleet.schedules (name, every, job, start_at, next_run_at, timing_hash) "
        "SELECT 'bulk-' || lpad(g::text, 5, '0'), %(every)s, 'noop', %(start)s, %(start)s, %(hash)s "
        "FROM generate_series(0, %(n)s - 1) g",
        {"every": bulk.timing.every, "start": bulk.start_at, "hash": bulk.timing_hash(), "n": LARGE},
    )
    with processes() as procs:
        # slots created when due (no lookahead): an apply that held the ticker up would make them late
        procs.append(
            Proc(
                ticker_cmd("--poll", "0.5", "--id", "t1", "--lookahead", "0"),
                env_for(db_url),
                tmp_path / "t1.log",
            )
        )
        wait_for(lambda: len(tick_slots(conn)) >= 2, what="the ticker to materialise the 1-second slots")
        window_start = scalar(conn, "SELECT now()")
        # Slots due before the ticker started were missed (catch-up skip): only later ones count.
        missed_before = scalar(conn, "SELECT missed_slots FROM fleet.schedules WHERE name = 'tick'")
        logged_before = procs[0].output().count('"slots_missed"')
        timings = []
        for _ in range(3):
            t0 = time.monotonic()
            code, out, err = fleetctl(capsys, db_url, "apply", str(f))
            timings.append(time.monotonic() - t0)
            assert code == 0, err
            assert (
                f"unchanged {LARGE + 1:,}, disabled 0" in out and "created 0, updated 0, replanned 0" in out
            )
        window_end = scalar(conn, "SELECT now()")
        # The slot after the window, materialised on time, closes it.
        wait_for(lambda: tick_slots(conn)[-1] > window_end, what="a slot after the applies")
        logged_after = procs[0].output().count('"slots_missed"')
    slots = tick_slots(conn)
    print(
        f"\nre-applied {LARGE + 1} unchanged schedules in {', '.join(f'{t:.1f}s' for t in timings)}; "
        f"{len(slots)} one-second slots"
    )
    assert slots[0] < window_start and slots[-1] > window_end
    gaps = [(a, b) for a, b in zip(slots, slots[1:], strict=False) if (b - a).total_seconds() != 1]
    assert not gaps, f"slots missed while applying: {gaps}"
    assert scalar(conn, "SELECT missed_slots FROM fleet.schedules WHERE name = 'tick'") == missed_before
    assert logged_after == logged_before


def test_an_unchanged_apply_takes_no_row_lock(db_url: str, conn: psycopg.Connection[Any]) -> None:
    text = TICK + large_file(50)
    apply_text(conn, text)
    versions = conn.execute("SELECT name, xmin::text AS v FROM fleet.schedules ORDER BY name").fetchall()
    with connect(db_url, "ticker-like") as other:
        # A tick in progress holds a schedule's row: an unchanged apply does not wait for it.
        with other.transaction():
            other.execute("SELECT 1 FROM fleet.schedules WHERE name = 'tick' FOR UPDATE")
            conn.execute("SET lock_timeout = '2s'")
            assert len(apply_text(conn, text).unchanged) == 51
        # And while an apply's transaction is open, a ticker can still take every row.
        with conn.transaction():
            assert len(apply_specs(conn, load(text), prune=True).unchanged) == 51
            n = scalar(other, "SELECT count(*) FROM (SELECT 1 FROM fleet.schedules FOR UPDATE SKIP LOCKED) s")
            assert n == 51
    assert (
        conn.execute("SELECT name, xmin::text AS v FROM fleet.schedules ORDER BY name").fetchall() == versions
    )


def test_a_changed_apply_locks_only_the_changed_rows(db_url: str, conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, TICK + large_file(50))
    changed = TICK + large_file(50).replace(
        'name = "bulk-00007"\nevery = "1h"\njob = "noop"', 'name = "bulk-00007"\nevery = "1h"\njob = "other"'
    )
    with connect(db_url, "ticker-like") as other, conn.transaction():
        r = apply_specs(conn, load(changed), prune=False)
        assert (r.updated, len(r.unchanged)) == (["bulk-00007"], 50)
        locked = [
            row["name"]
            for row in other.execute(
                "SELECT name FROM fleet.schedules WHERE name NOT IN "
                "(SELECT name FROM fleet.schedules FOR UPDATE SKIP LOCKED)"
            )
        ]
        assert locked == ["bulk-00007"]


def test_concurrent_applies_serialise(db_url: str, conn: psycopg.Connection[Any]) -> None:
    specs = load(large_file(300))
    results: list[ApplyResult] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def one() -> None:
        try:
            with connect(db_url, "apply") as c:
                start.wait()
                results.append(apply_specs(c, specs, prune=True))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # One of them created every schedule; the others, serialised after it, found nothing to do.
    assert sorted(len(r.created) for r in results) == [0, 0, 0, 300]
    assert sorted(len(r.unchanged) for r in results) == [0, 300, 300, 300]
    assert scalar(conn, "SELECT count(*) FROM fleet.schedules") == 300


def test_apply_specs_refuses_a_name_given_twice(conn: psycopg.Connection[Any]) -> None:
    specs = load(large_file(2)) + load(large_file(1))
    with pytest.raises(ScheduleFileError) as e:
        apply_specs(conn, specs, prune=False)
    assert e.value.problems == ["schedule 'bulk-00000': name: declared twice"]
    assert scalar(conn, "SELECT count(*) FROM fleet.schedules") == 0
