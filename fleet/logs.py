"""Event logs: one JSON line (orjson) per event, with the same field names in every process."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

import orjson

_OPTIONS = orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z
_lock = threading.Lock()
_local = threading.local()
_format = "json"
_stream: IO[bytes] | None = None
_base: dict[str, Any] = {}
_second = -1
_prefix = ""


def configure(fmt: str = "json", stream: IO[bytes] | None = None, **base: Any) -> None:
    """Choose json or text, the output stream (stdout by default) and fields every line carries."""
    global _format, _stream, _base
    _format = fmt
    _stream = stream
    _base = dict(base)


def _timestamp() -> str:
    # Wall-clock time is only a label on the log line; nothing is decided with it.
    global _second, _prefix
    now = time.time()
    sec = int(now)
    if sec != _second:
        _prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _second = sec
    return f"{_prefix}.{int((now - sec) * 1000):03d}Z"


def event(name: str, **fields: Any) -> None:
    """Write one event line: `event` plus the given fields (None values are kept as null)."""
    record = {"ts": _timestamp(), "event": name, **_base, **fields}
    if _format == "json":
        line = orjson.dumps(record, option=_OPTIONS) + b"\n"
    else:
        rest = " ".join(
            f"{k}={_text(v)}" for k, v in record.items() if k not in ("ts", "event") and v is not None
        )
        line = f"{record['ts']} {name:<16} {rest}\n".encode()
    buffer: list[bytes] | None = getattr(_local, "buffer", None)
    if buffer is not None:
        buffer.append(line)
    else:
        _write(line)


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Lines this thread logs inside the block are written together, in order, when it ends."""
    buffer: list[bytes] = []
    _local.buffer = buffer
    try:
        yield
    finally:
        _local.buffer = None
        if buffer:
            _write(b"".join(buffer))


def _write(data: bytes) -> None:
    out = _stream or sys.stdout.buffer
    with _lock:
        out.write(data)
        out.flush()


def _text(v: Any) -> str:
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat().replace("+00:00", "Z")
    s = str(v)
    return f'"{s}"' if " " in s else s
