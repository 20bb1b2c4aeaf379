"""The line each test job writes to $FLEET_TEST_DIR/events.log per event: event, idempotency key,
attempt, worker id, pid, time."""

from __future__ import annotations

import os
import time

from fleet import JobContext


def record(event: str, ctx: JobContext) -> None:
    d = os.environ.get("FLEET_TEST_DIR")
    if not d:
        return
    line = f"{event} {ctx.idempotency_key} {ctx.attempt} {ctx.worker_id} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.path.join(d, "events.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
