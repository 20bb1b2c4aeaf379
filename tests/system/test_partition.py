"""A worker cut off from the database by the network (a link taken down, not a process stopped).

The worker runs in a network namespace this test makes, and reaches the database through a veth pair
and a TCP relay in this process; taking the link down drops its packets mid-conversation, as a
partition does. What must hold: the cut-off worker gives its attempt up at its local lease deadline,
before the database lease runs out and another worker takes the run over; the other worker finishes
the run once; and when the link comes back the cut-off worker serves runs again within seconds (its
connections fail after `tcp_user_timeout` instead of hanging for the kernel's retransmissions).

Needs root and iproute2 (as CI has); skipped where a namespace cannot be made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support import apply_text, job_events, log_events, processes, start_worker, wait_for

LEASE = ["--lease", "3", "--heartbeat", "0.5", "--poll", "0.5"]


class Relay:
    """Forwards TCP connections accepted on (host, 0) to the database's address, byte for byte."""

    def __init__(self, host: str, target: Any) -> None:
        self.target = target
        self.server = socket.create_server((host, 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.socks: list[socket.socket] = [self.server]
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _upstream(self) -> socket.socket:
        if isinstance(self.target, str):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.target)
            return s
        return socket.create_connection(self.target, timeout=5)

    def _accept(self) -> None:
        while not self.halt.is_set():
            try:
                down, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            up = self._upstream()
            up.settimeout(None)
            down.settimeout(None)
            self.socks += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.halt.set()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
        self.thread.join(5)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def netns() -> Iterator[dict[str, str]]:
    """A namespace joined to this one by a veth pair: 10.231.N.1 here, 10.231.N.2 there."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and iproute2")
    n = os.getpid() % 250 + 1
    ns, here, there = f"fleet-part-{os.getpid()}", f"fpa{os.getpid()}"[:15], f"fpb{os.getpid()}"[:15]
    try:
        _ip("netns", "add", ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot make a network namespace: {e.stderr.decode().strip()}")
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", ns)
        _ip("addr", "add", f"10.231.{n}.1/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"10.231.{n}.2/30", "dev", there)
        _ip("netns", "exec", ns, "ip", "link", "set", there, "up")
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield {"ns": ns, "link": here, "host": f"10.231.{n}.1"}
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10, check=False)


def _target(db_url: str) -> Any:
    d = conninfo_to_dict(db_url)
    host, port = str(d.get("host") or "/var/run/postgresql"), int(d.get("port") or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def at(tmp: Path, event: str, worker: str) -> float:
    """When `worker`'s handler first recorded `event` (wall-clock seconds)."""
    return next(float(e[5]) for e in job_events(tmp) if e[0] == event and e[3] == worker)


def test_a_worker_cut_off_gives_its_run_up_before_its_lease_ends_and_serves_again_after(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, netns: dict[str, str]
) -> None:
    apply_text(
        conn,
        '[[schedule]]\nname = "s"\nevery = "1d"\njob = "sleep"\nargs = { seconds = 6 }\n'
        'start_at = "2099-01-01T00:00:00Z"\n',
    )
    add_run = (
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, %s::timestamptz, job, %s::jsonb, overlap, now() FROM fleet.schedules"
    )
    conn.execute(add_run, ("2026-01-01T00:00:00Z", '{"seconds": 6}'))
    relay = Relay(netns["host"], _target(db_url))
    try:
        # Connections through the link fail 1.5 s after their data stops being acknowledged.
        cut_url = make_conninfo(db_url, host=netns["host"], port=str(relay.port), tcp_user_timeout="1500")
        with processes() as procs:
            try:
                inside = ["ip", "netns", "exec", netns["ns"]]
                a = start_worker(procs, cut_url, tmp_path, "a", *LEASE, prefix=inside)
                wait_for(
                    lambda: any(e[0] == "start" for e in job_events(tmp_path)), what="a to start attempt 1"
                )
                b = start_worker(procs, db_url, tmp_path, "b", *LEASE)
                time.sleep(1.0)  # a renews its lease a few times with b beside it
                _ip("link", "set", netns["link"], "down")
                cut_at = time.time()
                wait_for(
                    lambda: any(e[0] == "start" and e[3] == "b" for e in job_events(tmp_path)),
                    timeout=15,
                    what="b to take the run over after the lease ran out",
                )
                wait_for(
                    lambda: any(e[0] == "cancelled" and e[3] == "a" for e in job_events(tmp_path)),
                    timeout=5,
                    what="a's handler to see its attempt cancelled",
                )
                a_cancelled, b_started = at(tmp_path, "cancelled", "a"), at(tmp_path, "start", "b")
                # The line may wait for the end of a round that is itself waiting on the network.
                lost = wait_for(
                    lambda: [x for x in log_events(a) if x.get("event") == "heartbeat_lost"],
                    timeout=10,
                    what="a to log that it gave its attempt up",
                )
                # a gave up while still cut off, before b could start (by the trust margin, a tenth
                # of the lease), and said so in its log at the time.
                assert a_cancelled < b_started, (a_cancelled - cut_at, b_started - cut_at)
                assert lost[0]["outcome"] == "cancelled", lost
                lost_at = datetime.fromisoformat(lost[0]["ts"].replace("Z", "+00:00")).timestamp()
                assert lost_at < b_started, (lost_at - cut_at, b_started - cut_at)
                assert b_started - cut_at < 3 + 0.5 + 2.5, b_started - cut_at

                # b finishes the run and leaves; the link comes back; a must serve a new run within seconds.
                wait_for(
                    lambda: any(e[0] == "done" and e[3] == "b" for e in job_events(tmp_path)),
                    timeout=15,
                    what="b to finish the run",
                )
                b.signal(signal.SIGTERM)
                assert b.wait(15) == 0
                _ip("link", "set", netns["link"], "up")
                healed = time.time()
                conn.execute(add_run, ("2026-01-02T00:00:00Z", '{"seconds": 0}'))
                wait_for(
                    lambda: any(e[0] == "done" and e[3] == "a" for e in job_events(tmp_path)),
                    timeout=20,
                    what="a to serve a run after the link came back",
                )
                served_after = at(tmp_path, "done", "a") - healed
            except BaseException:
                print("events:", *job_events(tmp_path), sep="\n  ")
                for p in procs:
                    print(f"--- {p.log_path.name}", *p.output().splitlines()[-40:], sep="\n")
                raise
    finally:
        relay.close()
    rows = conn.execute(
        "SELECT scheduled_for, attempt, worker_id, outcome FROM fleet.job_attempts ORDER BY scheduled_for, attempt"
    ).fetchall()
    outcomes = [(r["attempt"], r["worker_id"], r["outcome"]) for r in rows]
    # Slot 1: a's attempt lost with its lease (recorded by b), b's finished; never a's result.
    assert outcomes[:2] == [(1, "a", "lease_expired"), (2, "b", "done")], outcomes
    assert outcomes[2:] == [(1, "a", "done")], outcomes
    print(
        f"cut off: a gave up {a_cancelled - cut_at:.2f}s after the cut (lease 3 s), b started "
        f"{b_started - cut_at:.2f}s after it; after the link came back a served a run in {served_after:.2f}s"
    )
