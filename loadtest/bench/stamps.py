"""Handler start times: each handler under test appends "slot start" (Unix seconds) to the file named
by $BENCH_STAMPS as its first act, so lag is measured to the moment user code starts, the same way
for fleet and for the peers."""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "BENCH_STAMPS"


def record(slot: float, extra: str = "") -> None:
    """Append one line: the slot's time, now, and an optional token (no spaces)."""
    now = time.time()
    path = os.environ.get(ENV)
    if not path:
        return
    line = f"{slot:.6f} {now:.6f} {extra}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(path: Path) -> list[tuple[float, float, str]]:
    """(slot, start, token) per line, in the order written."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out.append((float(parts[0]), float(parts[1]), parts[2] if len(parts) > 2 else ""))
    return out
