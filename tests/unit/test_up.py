"""Pieces of `fleetctl up` that need no processes: its lock, its socket path, its live view."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fleet.ops import live
from fleet.ops.control import ProcInfo
from fleet.ops.up import UpLock, control_socket


def test_a_second_up_finds_the_first_ones_pid(tmp_path: Path) -> None:
    first = UpLock(tmp_path / "up.lock")
    assert first.acquire() is None
    assert UpLock(tmp_path / "up.lock").acquire() == os.getpid()
    first.release()
    again = UpLock(tmp_path / "up.lock")
    assert again.acquire() is None  # released: free again (the kernel also frees it when a process dies)
    again.release()


def test_control_socket_stays_short(tmp_path: Path) -> None:
    assert control_socket(tmp_path) == tmp_path / "supervisor.sock"
    deep = tmp_path / ("d" * 90) / ".fleet"
    deep.mkdir(parents=True)
    sock = control_socket(deep)
    assert len(str(sock)) < 100 and sock.parent.stat().st_mode & 0o777 == 0o700
    assert control_socket(deep) == sock  # the same directory every time
    sock.parent.rmdir()


def row(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        name="reports",
        job="r",
        verdict="OK",
        next_in_s=4.2,
        last_status="done",
        last_ago_s=3.0,
        pending=1,
        running=2,
        done=30,
        skipped=0,
        dead=0,
        retried=1,
    )
    base.update(kw)
    return base


def snapshot() -> live.Snapshot:
    return live.Snapshot(
        schedules=[
            row(),
            row(name="nightly", verdict="DEAD", dead=2, last_status=None, last_ago_s=None, next_in_s=7200.0),
        ],
        seen={"worker": {"n": 3, "hosts": 2}, "ticker": {"n": 1, "hosts": 1}},
        processes=[
            ProcInfo("fleet-ticker", "ticker_00", "RUNNING", 10, "pid 10"),
            ProcInfo("fleet-workers", "worker_00", "RUNNING", 11, "pid 11"),
            ProcInfo("fleet-workers", "worker_01", "FATAL", 0, "Exited too quickly"),
            ProcInfo("fleet-workers", "worker_02", "STOPPED", 0, "Not started"),
        ],
    )


def test_the_view_shows_schedules_and_processes() -> None:
    lines = live.frame(snapshot(), "header")
    text = "\n".join(lines)
    assert lines[0] == "header"
    assert "reports" in text and "3s ago done" in text and "in 4s" in text and "in 2h" in text
    nightly = next(line for line in lines if line.startswith("nightly"))
    assert "DEAD" in nightly and nightly.split()[-2] == "2"
    assert "this host: 1 ticker, 1 worker; `fleetctl scale N` runs up to 3" in text
    assert "worker_01 FATAL Exited too quickly" in text
    assert "worker_02" not in text  # stopped spare slots are not listed
    assert "in the database: 1 ticker on 1 host, 3 workers on 2 hosts" in text


def test_plain_lines_are_one_per_schedule() -> None:
    lines = live.plain_lines(snapshot())
    expected = "schedule=reports verdict=OK last=3s_ago_done next=in_4s pending=1 running=2 done_1h=30"
    assert any(expected in line for line in lines)
    assert any("schedule=nightly verdict=DEAD" in line and "dead=2" in line for line in lines)


def test_the_fleet_lines_come_before_the_schedules() -> None:
    snap = snapshot()
    snap.fleet = ["fleet: NO-TICKER: no ticker seen for 1m15s"]
    frame = live.frame(snap, "h")
    assert frame[2] == "fleet: NO-TICKER: no ticker seen for 1m15s" and frame[3].startswith("SCHEDULE")
    plain = live.plain_lines(snap)
    assert plain[0].endswith(" fleet: NO-TICKER: no ticker seen for 1m15s") and "schedule=" in plain[1]


def test_the_view_survives_a_database_outage() -> None:
    snap = live.Snapshot(db_error="connection refused", processes=snapshot().processes)
    text = "\n".join(live.frame(snap, "h"))
    assert "database: connection refused" in text and "this host: 1 ticker, 1 worker" in text


def test_the_first_screen_counts_starting_processes_like_the_database_does() -> None:
    # supervisord still calls them starting while each has registered in the database already
    starting = [
        ProcInfo("fleet-ticker", "ticker_00", "STARTING", 10, ""),
        ProcInfo("fleet-workers", "worker_00", "STARTING", 11, ""),
        ProcInfo("fleet-workers", "worker_01", "STARTING", 12, ""),
    ]
    snap = live.Snapshot(
        schedules=[row(next_in_s=-0.4), row(name="late", next_in_s=-42.0), row(name="soon", next_in_s=0.6)],
        seen={"worker": {"n": 2, "hosts": 1}, "ticker": {"n": 1, "hosts": 1}},
        processes=starting,
    )
    lines = live.frame(snap, "header")
    text = "\n".join(lines)
    assert "this host: 1 ticker, 2 workers (3 starting); `fleetctl scale N` runs up to 2" in text
    assert "in the database: 1 ticker on 1 host, 2 workers on 1 host" in text
    assert "0s late" not in text
    snap.seen = {}  # the processes have not registered yet
    assert "in the database: no live process yet" in "\n".join(live.frame(snap, "header"))
    cells = {c[0]: c for c in (live.schedule_cells(r) for r in snap.schedules)}
    assert (
        cells["reports"][3] == "due now" and cells["soon"][3] == "due now" and cells["late"][3] == "42s late"
    )
    assert not any(" STARTING" in line for line in lines)  # starting is not a failure to list


def test_a_paused_schedule_has_no_next_slot_in_the_view() -> None:
    cells = live.schedule_cells(row(verdict="DEAD+PAUSED", state="paused", next_in_s=-3600.0))
    assert cells[1:4] == ["DEAD+PAUSED", "3s ago done", "paused"]


def test_stopping_counts_worker_processes_and_the_runs_they_hold_apart() -> None:
    procs = snapshot().processes  # a ticker, a running worker, a failed one, a stopped slot
    two = [*procs, ProcInfo("fleet-workers", "worker_03", "STARTING", 13, "")]
    assert live.stopping_line(two, 3, 45) == (
        "stopping 2 worker processes (3 runs in progress: finished or handed back, up to 45s), "
        "then the ticker; Ctrl-C again to kill at once"
    )
    assert "stopping 1 worker process (no run in progress), then" in live.stopping_line(procs, 0, 45)
    assert "1 worker process (their runs finish or are handed back, up to 45s)" in live.stopping_line(
        procs, None, 45
    )


def test_text_from_logs_and_errors_reaches_the_view_escaped() -> None:
    failed = ProcInfo("fleet-workers", "worker_01", "FATAL", 0, "Exited too quickly · \x1b[2Jboom")
    snap = live.Snapshot(db_error="down\x1b]0;x", processes=[failed])
    for lines in (live.frame(snap, "h"), live.plain_lines(snap)):
        text = "\n".join(lines)
        assert "\x1b" not in text and "\\x1b[2Jboom" in text and "down\\x1b]0;x" in text


def test_no_ticker_says_this_hosts_ticker_is_starting_in_the_first_seconds_of_up() -> None:
    snap = snapshot()
    snap.seen = {"worker": {"n": 1, "hosts": 1}}  # the ticker has not registered yet
    snap.fleet = [
        "fleet: NO-TICKER: no ticker is registered: none has started, or the last one stopped (start fleet-ticker)"
    ]
    starting = "fleet: NO-TICKER until this host's ticker, starting now, registers"
    for up_for_s, ticker_state, seen_ticker, expected in (
        (2.0, "STARTING", False, starting),
        (2.0, "RUNNING", False, starting),
        # Too long since `up` started it, not up under supervisord, or in the database: the verdict.
        (live.TICKER_STARTING_S + 1, "RUNNING", False, snap.fleet[0]),
        (2.0, "BACKOFF", False, snap.fleet[0]),
        (2.0, "STARTING", True, snap.fleet[0]),
        (None, "STARTING", False, snap.fleet[0]),
    ):
        snap.up_for_s = up_for_s
        snap.processes[0] = ProcInfo("fleet-ticker", "ticker_00", ticker_state, 10, "")
        snap.seen = {"ticker": {"n": 1, "hosts": 1}} if seen_ticker else {}
        frame = live.frame(snap, "h")
        assert frame[2] == expected, (up_for_s, ticker_state, seen_ticker, frame[2])
        assert live.plain_lines(snap)[0].endswith(f" {expected}")
