"""A real ticker process and a schedule's calendar: the slots of excluded dates are recorded skipped
with the calendar's reason as they come (never run, never a busy ticker), a schedule stops at its
`until` and is ENDED, and `fleetctl verify` accounts for every slot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg

from fleet.ops.cli import main
from tests.support import Proc, apply_text, env_for, processes, scalar, ticker_cmd, wait_for


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_a_real_ticker_skips_excluded_dates_and_ends_at_until(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, capsys: Any
) -> None:
    now = scalar(conn, "SELECT now()")
    today = now.astimezone(UTC).date()
    until = now + timedelta(seconds=4)
    apply_text(
        conn,
        f"""
[[schedule]]
name = "holiday"
every = "1s"
job = "noop"
exclude = ["{today - timedelta(days=1)}..{today + timedelta(days=1)}"]

[[schedule]]
name = "ending"
every = "1s"
job = "noop"
until = "{until.astimezone(UTC).isoformat()}"
""",
    )
    with processes() as procs:
        ticker = Proc(ticker_cmd("--poll", "0.5"), env_for(db_url), tmp_path / "ticker.log")
        procs.append(ticker)
        wait_for(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(*) FROM fleet.job_runs WHERE schedule_name = 'holiday' AND scheduled_for <= now()",
                )
                >= 5
            ),
            what="five due slots of the excluded day",
        )
        wait_for(
            lambda: scalar(conn, "SELECT next_run_at IS NULL FROM fleet.schedules WHERE name = 'ending'"),
            timeout=30,
            what="the ending schedule to end",
        )
        assert '"event":"schedule_ended"' in ticker.output()
    held = conn.execute(
        "SELECT status::text AS status, last_error FROM fleet.job_runs WHERE schedule_name = 'holiday'"
    ).fetchall()
    assert {r["status"] for r in held} == {"skipped"}
    assert {r["last_error"].split(" (")[0] for r in held} == {
        f"calendar: excluded {today - timedelta(days=1)}..{today + timedelta(days=1)}"
    }
    last = scalar(conn, "SELECT max(scheduled_for) FROM fleet.job_runs WHERE schedule_name = 'ending'")
    assert until - timedelta(seconds=1) < last <= until

    # the runs of the ending schedule done, every slot of both is accounted for, and the ended
    # schedule is healthy
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'done', attempts = 1, finished_at = now() WHERE status = 'pending'"
    )
    capsys.readouterr()
    assert main(["--database-url", db_url, "verify", "--since", iso(now), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    by_name = {s["name"]: s for s in doc["schedules"]}
    assert by_name["holiday"]["skipped"]["calendar"] == by_name["holiday"]["slots"] > 0
    assert by_name["ending"]["ended_at"] is not None and by_name["ending"]["counts"]["unexplained"] == 0
    main(["--database-url", db_url, "status", "ending", "--json"])
    (ending,) = orjson.loads(capsys.readouterr().out)
    # no ticker runs now, and an ended schedule expects no slot: ENDED, not NO-TICKER
    assert ending["verdict"] == "ENDED" and ending["healthy"]
