"""Real ticker processes: several at once, a wrong host clock, leader fail-over."""

from __future__ import annotations

import shutil
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.support import Proc, apply_text, env_for, processes, scalar, ticker_cmd, wait_for


def tick_events(p: Proc, name: str) -> list[dict[str, Any]]:
    out = []
    for line in p.output().splitlines():
        if line.startswith("{"):
            rec = orjson.loads(line)
            if rec.get("event") == name:
                out.append(rec)
    return out


def test_three_tickers_create_288_slots_for_a_day_of_5_minute_slots(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    db_now = scalar(conn, "SELECT now()")
    # The next slot, 3 minutes away, is beyond the tickers' lookahead (60 s): only the day's are due.
    start = db_now - timedelta(days=1) + timedelta(minutes=2)
    # Twenty such schedules and small batches keep the three tickers busy at the same time.
    apply_text(
        conn,
        "".join(
            f'[[schedule]]\nname = "five-{i}"\nevery = "5m"\njob = "noop"\ncatchup = "all"\n'
            f'start_at = "{start.isoformat()}"\n'
            for i in range(20)
        ),
    )
    with processes() as procs:
        for i in range(3):
            procs.append(
                Proc(
                    ticker_cmd("--until-idle", "--batch", "2", "--catchup-limit", "7", "--id", f"t{i}"),
                    env_for(db_url),
                    tmp_path / f"t{i}.log",
                )
            )
        codes = [p.wait(timeout=60) for p in procs]
        assert codes == [0, 0, 0], [p.output() for p in procs]
        created = [sum(e["created"] for e in tick_events(p, "tick")) for p in procs]
    per_schedule = {
        r["schedule_name"]: r["n"]
        for r in conn.execute("SELECT schedule_name, count(*) AS n FROM fleet.job_runs GROUP BY 1")
    }
    assert per_schedule == {f"five-{i}": 288 for i in range(20)}  # not 864
    assert sum(created) == 20 * 288, created
    assert sum(1 for c in created if c) >= 2, f"the tickers did not overlap: {created}"
    print(f"3 concurrent tickers created {created} slots: 288 per schedule")
    assert scalar(conn, "SELECT min(next_run_at) FROM fleet.schedules") > db_now


@pytest.mark.skipif(
    shutil.which("faketime") is None, reason="libfaketime (Debian package faketime) not installed"
)
def test_a_wrong_host_clock_changes_nothing(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    db_now = scalar(conn, "SELECT now()")
    minute = (db_now.minute + 30) % 60  # half an hour away from the current minute: no slot boundary nearby
    start = db_now - timedelta(hours=5, minutes=30)
    apply_text(
        conn,
        f"""
[[schedule]]
name = "hourly-interval"
every = "1h"
job = "noop"
catchup = "all"
start_at = "{start.isoformat()}"

[[schedule]]
name = "hourly-cron"
cron = "{minute} * * * *"
timezone = "Europe/Berlin"
job = "noop"
catchup = "all"
start_at = "{start.isoformat()}"
""",
    )
    initial = conn.execute("SELECT name, next_run_at FROM fleet.schedules").fetchall()
    results = {}
    for label, prefix in (
        ("right", []),
        ("3h behind", ["faketime", "-f", "-3h"]),
        ("3h ahead", ["faketime", "-f", "+3h"]),
    ):
        conn.execute("DELETE FROM fleet.job_runs")
        for row in initial:
            conn.execute(
                "UPDATE fleet.schedules SET next_run_at = %s WHERE name = %s",
                (row["next_run_at"], row["name"]),
            )
        with processes() as procs:
            p = Proc(
                ticker_cmd("--until-idle"),
                env_for(db_url, FAKETIME_DONT_FAKE_MONOTONIC="1"),
                tmp_path / f"{label}.log",
                prefix=prefix,
            )
            procs.append(p)
            assert p.wait(timeout=60) == 0, p.output()
        runs = conn.execute(
            "SELECT schedule_name, scheduled_for, run_after FROM fleet.job_runs ORDER BY 1, 2"
        ).fetchall()
        nexts = conn.execute("SELECT name, next_run_at FROM fleet.schedules ORDER BY name").fetchall()
        results[label] = (runs, nexts)
    assert len(results["right"][0]) == 11  # 6 interval slots (anchored at start_at) + 5 cron slots
    assert results["3h behind"] == results["right"]
    assert results["3h ahead"] == results["right"]


def test_leader_fail_over_keeps_every_slot_once(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply_text(conn, '[[schedule]]\nname = "sec"\nevery = "1s"\njob = "noop"\ncatchup = "all"\n')
    with processes() as procs:
        for name in ("a", "b"):
            procs.append(
                Proc(
                    ticker_cmd("--leader", "--id", name, "--poll", "0.5"),
                    env_for(db_url),
                    tmp_path / f"{name}.log",
                )
            )
        wait_for(lambda: sum(len(tick_events(p, "leader_acquired")) for p in procs) >= 1, what="a leader")
        time.sleep(1.0)
        leaders = [p for p in procs if tick_events(p, "leader_acquired")]
        assert len(leaders) == 1
        leader = leaders[0]
        standby = procs[1 - procs.index(leader)]
        before = scalar(conn, "SELECT count(*) FROM fleet.job_runs")
        assert before >= 1
        leader.signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: tick_events(standby, "leader_acquired"), timeout=10, what="the standby to take over")
        took_over = time.monotonic() - killed
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs") >= before + 3,
            what="slots after fail-over",
        )
        standby.signal(signal.SIGTERM)
        assert standby.wait(timeout=10) == 0
    slots = [r["scheduled_for"] for r in conn.execute("SELECT scheduled_for FROM fleet.job_runs ORDER BY 1")]
    assert all((b - a) == timedelta(seconds=1) for a, b in zip(slots, slots[1:], strict=False)), (
        "a slot is missing"
    )
    assert len(slots) == len(set(slots))
    assert took_over < 3, took_over
    print(
        f"leader fail-over in {took_over:.2f}s; {len(slots)} consecutive 1 s slots, none missing or doubled"
    )


def test_ticker_stops_cleanly_on_sigterm(db_url: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    apply_text(conn, '[[schedule]]\nname = "m"\nevery = "1m"\njob = "noop"\n')
    with processes() as procs:
        p = Proc(ticker_cmd(), env_for(db_url), tmp_path / "t.log")
        procs.append(p)
        wait_for(lambda: "ticker_started" in p.output(), what="start")
        p.signal(signal.SIGTERM)
        assert p.wait(timeout=5) == 0
        assert "ticker_stopped" in p.output()
        assert scalar(conn, "SELECT count(*) FROM fleet.processes") == 0


def test_a_flood_of_notifications_costs_a_ticker_ten_ticks_a_second(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Any session may NOTIFY the schedules' channel: thousands of notifications in two seconds
    wake an idle ticker at most ten times a second, and a real change is still picked up."""
    hourly = '[[schedule]]\nname = "{}"\nevery = "1h"\njob = "noop"\nstart_at = "2026-01-01T00:00:00Z"\n'
    apply_text(conn, hourly.format("m"))
    with processes() as procs:
        p = Proc(ticker_cmd("--poll", "30", "--lookahead", "0"), env_for(db_url), tmp_path / "t.log")
        procs.append(p)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 1, what="the first slot")
        flood_s, sent = 2.0, 0
        with psycopg.connect(db_url, autocommit=True) as noisy:
            end = time.monotonic() + flood_s
            while time.monotonic() < end and sent < 100_000:
                noisy.execute("SELECT pg_notify('fleet_schedules', '')")
                sent += 1
        assert sent > 500
        # A real change after the flood: a new schedule's first slot comes within the gap.
        apply_text(conn, hourly.format("m") + hourly.format("n"))
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM fleet.job_runs") == 2, timeout=5, what="the new slot"
        )
        p.signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
        (stopped,) = tick_events(p, "ticker_stopped")
    assert stopped["ticks"] <= 10 * (flood_s + 2) + 5, (stopped["ticks"], sent)
