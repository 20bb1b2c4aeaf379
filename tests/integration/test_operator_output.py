"""What an operator reads from status, runs and show: paused schedules, every schedule's runs,
errors whole and escaped, and a slot's history that fits a terminal."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.integration.ops_support import add_run, fleetctl, fleetctl_json, hourly, snapshot
from tests.support import apply_text, env_for, fleetctl_cmd, live_ticker

Cap = pytest.CaptureFixture[str]
SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)
ESC = "\x1b"


def test_status_says_paused_instead_of_a_stale_next_slot_and_shows_dead_with_paused(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a", "b", "c")
    live_ticker(conn)
    add_run(conn, "b", SLOT, "dead", error="boom")
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name IN ('a', 'b')")
    stale = conn.execute("SELECT next_run_at FROM fleet.schedules WHERE name = 'a'").fetchone()
    assert stale and stale["next_run_at"] is not None  # the row keeps it; status must not show it

    code, out, _ = fleetctl(capsys, db_url, "status")
    assert code == 1
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["a"][1] == "PAUSED" and "paused" in rows["a"]
    assert rows["b"][1] == "DEAD+PAUSED" and "paused" in rows["b"]
    assert rows["c"][1] == "OK" and any(cell.endswith("Z") for cell in rows["c"])
    assert not any(cell.startswith("20") for name in ("a", "b") for cell in rows[name])

    _, payload = fleetctl_json(capsys, db_url, "status")
    by = {s["name"]: s for s in payload}
    assert by["a"]["next_run_at"] is None and by["a"]["paused"] and by["a"]["paused_at"].endswith("Z")
    assert by["b"]["problems"] == ["DEAD", "PAUSED"] and by["b"]["verdict"] == "DEAD"
    assert by["c"]["next_run_at"].endswith("Z") and by["c"]["paused_at"] is None


def test_runs_all_lists_every_schedule_newest_first_with_the_same_filters(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a", "b", "quiet")
    for h in range(3):
        add_run(conn, "a", SLOT + timedelta(hours=2 * h), "done")
        add_run(conn, "b", SLOT + timedelta(hours=2 * h + 1), "dead" if h == 1 else "done", error="x")

    _, runs = fleetctl_json(capsys, db_url, "runs", "--all")
    assert [(r["schedule"], r["slot"][11:13]) for r in runs] == [
        ("b", "15"),
        ("a", "14"),
        ("b", "13"),
        ("a", "12"),
        ("b", "11"),
        ("a", "10"),
    ]
    _, runs = fleetctl_json(capsys, db_url, "runs", "--all", "--limit", "2")
    assert [(r["schedule"], r["slot"][11:13]) for r in runs] == [("b", "15"), ("a", "14")]
    _, runs = fleetctl_json(capsys, db_url, "runs", "--all", "--status", "dead")
    assert [(r["schedule"], r["slot"][11:13]) for r in runs] == [("b", "13")]
    code, out, _ = fleetctl(capsys, db_url, "runs", "--all")
    assert (
        code == 0 and out.splitlines()[0].split()[:2] == ["SCHEDULE", "SLOT"] and len(out.splitlines()) == 7
    )
    assert fleetctl(capsys, db_url, "runs", "--all", "--status", "pending")[1] == (
        "no runs of any schedule with status pending\n"
    )

    for args, named in (
        (("runs",), "--all"),
        (("runs", "a", "--all"), "--all"),
        (("runs", "a", "--limit", "-5"), "--limit"),
        (("runs", "--all", "--limit", "0"), "--limit"),
        (("runs", "a", "--limit", "1e20"), "--limit"),
        (("runs", "a", "--limit", "99999999999999999999"), "--limit"),
        (("dead", "--limit", "1e20"), "--limit"),
        (("dead", "--limit", "-1"), "--limit"),
    ):
        code, out, err = fleetctl(capsys, db_url, *args)
        assert code == 2 and named in err and len(err.strip().splitlines()) == 1, (args, err)
        assert "Traceback" not in err


def test_the_runs_query_reads_each_schedule_through_its_primary_key(conn: psycopg.Connection[Any]) -> None:
    from fleet.store.queries import q

    hourly(conn, "a")
    plan = conn.execute(
        "EXPLAIN (FORMAT TEXT) " + q("run_list_all"),
        {"name": None, "status": None, "outcome": None, "limit": 20},
    ).fetchall()
    text = "\n".join(next(iter(r.values())) for r in plan)
    assert "job_runs_pkey" in text and "Seq Scan on job_runs" not in text, text


def test_errors_are_escaped_everywhere_and_whole_with_full(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a")
    error = f"first {ESC}[2J line\nsecond line\r\n" + "Z" * 150 + "\u202eevil"
    add_run(conn, "a", SLOT, "dead", attempts=2, error=error)
    conn.execute("UPDATE fleet.job_attempts SET error = %s, worker_id = %s", (error, f"w{ESC}]0;x"))

    outputs = [
        fleetctl(capsys, db_url, *args)[1]
        for args in (
            ("runs", "a"),
            ("runs", "a", "--full"),
            ("runs", "--all", "--full"),
            ("show", "a", "2026-03-01T10:00:00Z"),
            ("trace", "a", "2026-03-01T10:00:00Z"),
            ("dead",),
        )
    ]
    for out in outputs:
        assert ESC not in out and "\r" not in out and "\u202e" not in out
    short, full = outputs[0], outputs[1]
    assert "\\x1b[2J" in short and "second line" not in short and "..." in short
    body = full.splitlines()[1:]
    assert body[1:] == ["    first \\x1b[2J line", "    second line", "    " + "Z" * 150 + "\\u202eevil"]
    assert "ERROR" not in full.splitlines()[0]
    assert "w\\x1b]0;x" in outputs[3] and "w\\x1b]0;x" in outputs[4]


def test_show_fits_a_hundred_columns_and_keeps_every_field(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a")
    add_run(conn, "a", SLOT, "dead", attempts=3, error="E" * 300 + "\nat line 2")
    conn.execute(
        "UPDATE fleet.job_attempts SET worker_id = 'host-1.example.com:worker-17',"
        " host = 'host-1.example.com',"
        " pid = 4242, span_id = lpad(attempt::text, 16, '0'), error = 'failed ' || repeat('e', 200),"
        " started_at = '2026-03-01T10:00:01.25Z', finished_at = '2026-03-01T10:00:03.5Z'"
    )
    conn.execute(
        "UPDATE fleet.job_runs SET created_trace_id = repeat('c', 32), created_span_id = repeat('d', 16)"
    )
    code, out, _ = fleetctl(capsys, db_url, "show", "a", "2026-03-01T10:00:00Z")
    assert code == 0
    lines = [line for line in out.splitlines() if not line.startswith("jaeger: ")]
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    _, shown = fleetctl_json(capsys, db_url, "show", "a", "2026-03-01T10:00:00Z")
    for value in ("dead", "schedule", "noop", "3 attempt(s), 3 counted as failures", "c" * 32, "d" * 16):
        assert value in out, value
    last_error = out.split("last error:\n")[1].splitlines()[:4]
    assert "".join(line.strip() for line in last_error) == "E" * 300
    for a in shown["attempt_history"]:
        block = out.split(f"attempt {a['attempt']}: {a['outcome']}\n")[1].split("\nattempt ")[0]
        for value in (a["worker_id"], a["host"], str(a["pid"]), a["trace_id"], a["span_id"], "failed eee"):
            assert value in block, (value, block)
        assert "10:00:01.250Z" in block and "10:00:03.500Z" in block and "took 2s" in block


def test_prune_needs_a_unit_says_what_it_would_delete_and_what_it_deleted_by_status(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a")
    old = "now() - interval '3 days'"
    for h in range(3):
        add_run(conn, "a", SLOT + timedelta(hours=h), "done", finished=old, attempts=2)
    add_run(conn, "a", SLOT + timedelta(hours=3), "skipped", finished=old, history=False)
    add_run(conn, "a", SLOT + timedelta(hours=4), "dead", finished=old, error="x")
    conn.execute(
        "UPDATE fleet.job_runs SET status = 'skipped', last_outcome = 'discarded' WHERE scheduled_for = %s",
        (SLOT + timedelta(hours=4),),
    )
    add_run(conn, "a", SLOT + timedelta(hours=5), "done", finished="now()")  # the newest: kept
    before = snapshot(conn)

    for args, flag in (
        (("--older-than", "7"), "--older-than"),
        (("--older-than", "1.5"), "--older-than"),
        (("--older-than", "999999999d"), "--older-than"),
        (("--older-than=-1d",), "--older-than"),
        (("--older-than", "-1d"), "--older-than"),
        (("--older-than", "7d", "--batch", "1e20"), "--batch"),
        (("--older-than", "7d", "--batch", "0"), "--batch"),
        (("--older-than", "7d", "--batch", "99999999999999999999"), "--batch"),
    ):
        code, out, err = fleetctl(capsys, db_url, "prune", *args)
        assert code == 2 and flag in err and len(err.strip().splitlines()) == 1, (args, err)
        assert out == "" and "Traceback" not in err
    assert "give a unit" in fleetctl(capsys, db_url, "prune", "--older-than", "7")[2]

    code, out, _ = fleetctl(capsys, db_url, "prune", "--older-than", "1d", "--dry-run")
    assert code == 0 and snapshot(conn) == before
    assert out.startswith("would prune 5 run(s) and 7 attempt(s) finished before ")
    assert ": 3 done, 1 skipped, 1 discarded" in out and "nothing deleted" in out

    code, out, _ = fleetctl(capsys, db_url, "prune", "--older-than", "0s")
    assert code == 0 and out.startswith("pruned 5 run(s) and 7 attempt(s) finished before ")
    assert ": 3 done, 1 skipped, 1 discarded (dead runs an operator discarded" in out
    assert [r["status"] for r in conn.execute("SELECT status::text FROM fleet.job_runs")] == ["done"]
    code, out, _ = fleetctl(capsys, db_url, "prune", "--older-than", "0s", "--dry-run")
    assert out.startswith("would prune 0 run(s) and 0 attempt(s)")


def test_a_slot_off_the_grid_names_the_nearest_slots(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    apply_text(
        conn, '[[schedule]]\nname = "q"\nevery = "15m"\njob = "noop"\nstart_at = "2025-01-01T00:00:00Z"\n'
    )
    apply_text(conn, '[[schedule]]\nname = "c"\ncron = "0 9 * * 1-5"\njob = "noop"\n')
    for args, expected in (
        (
            ("show", "q", "2026-01-01T10:07"),
            "not a slot of the schedule; its nearest slots are 2026-01-01T10:00:00Z before and "
            "2026-01-01T10:15:00Z after",
        ),
        (
            ("trace", "c", "2026-03-07T12:00:00Z"),  # a Saturday
            "its nearest slots are 2026-03-06T09:00:00Z before and 2026-03-09T09:00:00Z after",
        ),
        (
            ("show", "q", "2026-01-01T10:15:00Z"),
            "it is a slot of the schedule, missed: before the schedule existed",
        ),
        (("retry", "q", "2026-01-01T10:07:00Z"), "2026-01-01T10:00:00Z before"),
    ):
        code, out, err = fleetctl(capsys, db_url, *args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "has no run at" in err and expected in err, err


def test_the_live_view_reads_verdicts_paused_schedules_and_the_runs_this_hosts_workers_hold(
    conn: psycopg.Connection[Any],
) -> None:
    import socket

    from fleet.ops import live
    from fleet.ops.control import ProcInfo

    hourly(conn, "a", "b")
    add_run(conn, "b", SLOT, "dead", error="boom")
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'b'")
    here = socket.gethostname()
    for wid, host, pid in (("w1", here, 101), ("w2", here, 102), ("w3", "elsewhere", 101)):
        conn.execute(
            "INSERT INTO fleet.processes (id, kind, host, pid) VALUES (%s, 'worker', %s, %s)",
            (wid, host, pid),
        )
    for h, wid in enumerate(("w1", "w1", "w2", "w3", "w3")):
        add_run(conn, "a", SLOT + timedelta(hours=h + 1), "running", finished=None, history=False)
        conn.execute(
            "UPDATE fleet.job_runs SET locked_by = %s WHERE scheduled_for = %s",
            (wid, SLOT + timedelta(hours=h + 1)),
        )
    snap = live.Snapshot(
        processes=[
            ProcInfo("fleet-workers", "worker_00", "RUNNING", 101, ""),
            ProcInfo("fleet-workers", "worker_01", "RUNNING", 102, ""),
        ]
    )
    live.read_database(conn, snap)
    cells = {c[0]: c for c in (live.schedule_cells(r) for r in snap.schedules)}
    assert cells["b"][1:4] == ["DEAD+PAUSED", cells["b"][2], "paused"] and cells["a"][3] != "paused"
    assert snap.runs_here == 3  # not the other host's worker with the same pid
    # No ticker was ever seen: the view says so first, as `fleetctl status` does.
    assert snap.fleet == [
        "fleet: NO-TICKER: no ticker is registered: none has started, or the last one stopped (start fleet-ticker)"
    ]
    assert live.frame(snap, "h")[2] == snap.fleet[0]


def test_status_json_stops_at_once_when_its_reader_goes_away(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    # `fleetctl status --json | head -1` over more schedules than the socket buffers hold: the server
    # is still sending rows when the pipe breaks; the command ends as SIGPIPE would end it, quiet
    apply_text(
        conn, "".join(f'[[schedule]]\nname = "s{i:05d}"\nevery = "1h"\njob = "noop"\n' for i in range(30_000))
    )
    with subprocess.Popen(
        fleetctl_cmd("status", "--json"), env=env_for(db_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as p:
        assert p.stdout is not None and p.stderr is not None
        assert p.stdout.read(2) == b"[\n"
        p.stdout.close()
        try:
            code = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
        assert code == 141
        assert p.stderr.read() == b""
