"""Event logs: one JSON line (orjson) per event, with the same field names in every process."""

from __future__ import annotations

import sys
import threading
from datetime import datetime
from typing import IO, Any

import orjson

_lock = threading.Lock()
_format = "json"
_stream: IO[bytes] | None = None
_base: dict[str, Any] = {}


def configure(fmt: str = "json", stream: IO[bytes] | None = None, **base: Any) -> None:
    """Choose json or text, the output stream (stdout by default) and fields every line carries."""
    global _format, _stream, _base
    _format = fmt
    _stream = stream
    _base = dict(base)


def _now_iso() -> str:
    # Wall-clock time is only a label on the log line; nothing is decided with it.
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def event(name: str, **fields: Any) -> None:
    """Write one event line: `event` plus the given fields (None values are kept as null)."""
    record = {"ts": _now_iso(), "event": name, **_base, **fields}
    if _format == "json":
        line = orjson.dumps(record, option=orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z) + b"\n"
    else:
        rest = " ".join(
            f"{k}={_text(v)}" for k, v in record.items() if k not in ("ts", "event") and v is not None
        )
        line = f"{record['ts']} {name:<16} {rest}\n".encode()
    out = _stream or sys.stdout.buffer
    with _lock:
        out.write(line)
        out.flush()


def _text(v: Any) -> str:
    if isinstance(v, datetime):
        return v.isoformat()
    s = str(v)
    return f'"{s}"' if " " in s else s
