"""DBOS Transact beside fleet: the process `python -m loadtest.bench` runs with the Python of the
virtual environment it made for DBOS (standard library and `dbos` only, nothing of fleet).

    python dbos_app.py migrate             create DBOS's system tables and exit
    python dbos_app.py run                 serve the bench's workflows until SIGTERM
    python dbos_app.py enqueue N [AT]      enqueue N no-op workflows in one transaction, or N
                                           `at` workflows delayed until AT (Unix seconds)

Environment: DATABASE_URL; DBOS_QUEUE_POLL_S and DBOS_WORKER_CONCURRENCY (the bench queue's
polling interval and per-process limit; unset: DBOS's defaults, every second and no limit); DBOS_SCHEDULE ("bench" or "internal": an every-second schedule enqueued on the bench
queue or on DBOS's internal queue); BENCH_READY, BENCH_WINDOW, BENCH_STAMPS as for the other peers.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import datetime
from types import FrameType
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig

APP = "fleet-bench"
QUEUE = "bench"
URL = os.environ.get("DATABASE_URL", "")

_lock = threading.Lock()
_window = [0, 0.0, 0.0]  # jobs run, first handler start, last handler end


def stamp(slot: float) -> None:
    now = time.time()
    path = os.environ.get("BENCH_STAMPS")
    if path:
        with open(path, "a") as out:
            out.write(f"{slot:.6f} {now:.6f}\n")


@DBOS.workflow(name="noop")
def noop() -> None:
    start = time.time()
    with _lock:
        if _window[0] == 0:
            _window[1] = start
        _window[0] += 1
        _window[2] = time.time()


@DBOS.workflow(name="at")
def at(slot: float) -> None:
    stamp(slot)


@DBOS.workflow(name="stamp")
def every_second(scheduled: datetime, _context: Any) -> None:
    stamp(scheduled.timestamp())


def _stop(_signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt this one
    if path := os.environ.get("BENCH_WINDOW"):
        with _lock, open(path, "w") as out:
            out.write(f"{_window[0]} {_window[1]:.6f} {_window[2]:.6f}\n")
    DBOS.destroy()
    os._exit(0)


def launch() -> None:
    config: DBOSConfig = {"name": APP, "system_database_url": URL}
    DBOS(config=config)
    DBOS.launch()


def run() -> None:
    signal.signal(signal.SIGTERM, _stop)
    launch()
    poll = os.environ.get("DBOS_QUEUE_POLL_S")
    limit = os.environ.get("DBOS_WORKER_CONCURRENCY")
    DBOS.register_queue(
        QUEUE,
        on_conflict="always_update",
        polling_interval_sec=float(poll) if poll else 1.0,  # 1.0: DBOS's default
        worker_concurrency=int(limit) if limit else None,
    )
    if schedule := os.environ.get("DBOS_SCHEDULE"):
        DBOS.create_schedule(
            schedule_name=f"stamp-{schedule}",
            workflow_fn=every_second,
            schedule="* * * * * *",
            queue_name=QUEUE if schedule == "bench" else None,
        )
    if path := os.environ.get("BENCH_READY"):
        with open(path, "w") as out:
            out.write(f"{os.getpid()}\n")
    threading.Event().wait()


def enqueue(n: int, slot: float | None) -> None:
    import sqlalchemy as sa

    client = DBOSClient(system_database_url=URL, application_name=APP)
    engine = sa.create_engine(URL.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            for _ in range(n):
                if slot is None:
                    client.enqueue_in_transaction(conn, {"workflow_name": "noop", "queue_name": QUEUE})
                else:
                    delay = max(0.0, slot - time.time())
                    options = {"workflow_name": "at", "queue_name": QUEUE, "delay_seconds": delay}
                    client.enqueue_in_transaction(conn, options, slot)
    finally:
        engine.dispose()
        client.destroy()


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "migrate":
        launch()
        DBOS.destroy()
    elif mode == "run":
        run()
    elif mode == "enqueue" and len(argv) in (3, 4):
        enqueue(int(argv[2]), float(argv[3]) if len(argv) == 4 else None)
    else:
        print(f"dbos_app.py: mode: expected migrate, run or enqueue N [AT], got {argv[1:]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
