"""Event logs: one JSON line (orjson) per event, with the same field names in every process."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from fleet.observe.printable import printable

_OPTIONS = orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z
_lock = threading.Lock()
_local = threading.local()
_format = "json"
_stream: IO[bytes] | None = None
_base: dict[str, Any] = {}
_base_json = b""  # `_base` serialised: b',"k":v,...', or empty
_second = -1
_prefix = ""
_milli = -1
_rendered = b""
_EVENT_KEYS: dict[str, bytes] = {}
# The exit code of a process that stopped because its output's reader went away, as a program that
# SIGPIPE ended (and `fleetctl` when its reader goes away).
EXIT_OUTPUT_GONE = 141
_gone = False  # the output's reader went away: lines are dropped
_on_gone: Callable[[], None] | None = None


def configure(
    fmt: str = "json",
    stream: IO[bytes] | None = None,
    on_output_gone: Callable[[], None] | None = None,
    **base: Any,
) -> None:
    """Choose json or text, the output stream (stdout by default) and fields every line carries.
    Warnings and errors that libraries log (the connection pool, the trace exporter) become lines
    of their own, `library_log`, instead of plain text on stderr. When the output's reader goes away
    (`fleet-ticker | head -1`), lines are dropped from then on and `on_output_gone` is called, once,
    on the thread that wrote: a long-running process stops there as on SIGTERM. Without it, the
    write raises BrokenPipeError, as any other."""
    global _format, _stream, _base, _base_json, _gone, _on_gone
    _format = fmt
    _stream = stream
    _gone = False
    _on_gone = on_output_gone
    _base = dict(base)
    _base_json = b"," + orjson.dumps(_base, option=_OPTIONS)[1:-1] if _base else b""
    root = logging.getLogger()
    if _BRIDGE not in root.handlers:
        root.addHandler(_BRIDGE)


class Throttle:
    """Says when a repeating condition (the database out of reach) is worth a line: the first time,
    then at most every `period_s` seconds until `reset()`."""

    def __init__(self, period_s: float = 30.0) -> None:
        self.period_s = period_s
        self.last = -math.inf

    def due(self) -> bool:
        now = time.monotonic()
        if now < self.last + self.period_s:
            return False
        self.last = now
        return True

    def reset(self) -> None:
        self.last = -math.inf


class _Bridge(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            event(
                "library_log",
                logger=record.name,
                level=record.levelname.lower(),
                message=record.getMessage().strip()[:500],
            )
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


_BRIDGE = _Bridge(logging.WARNING)


class Fields:
    """Fields that several lines carry (an attempt's identity), serialised once for all of them."""

    __slots__ = ("_json", "values")

    def __init__(self, **values: Any) -> None:
        self.values = values
        self._json: bytes | None = None

    @classmethod
    def of(cls, values: dict[str, Any]) -> Fields:
        """Fields from a dict made for them (kept as it is): cheaper than keywords, for a worker's
        attempts."""
        f = cls.__new__(cls)
        f.values = values
        f._json = None
        return f

    def json(self) -> bytes:
        """b',"k":v,...' (empty when there are no fields)."""
        if self._json is None:
            self._json = b"," + orjson.dumps(self.values, option=_OPTIONS)[1:-1] if self.values else b""
        return self._json


def _timestamp() -> str:
    return _timestamp_bytes().decode()


def _timestamp_bytes() -> bytes:
    # Wall-clock time is only a label on the log line; nothing is decided with it. Lines written
    # in the same millisecond (a worker's round) share one rendering.
    global _second, _prefix, _milli, _rendered
    milli = time.time_ns() // 1_000_000
    if milli != _milli:
        sec, ms = divmod(milli, 1000)
        if sec != _second:
            _prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
            _second = sec
        _rendered = f"{_prefix}.{ms:03d}Z".encode()
        _milli = milli
    return _rendered


def _event_key(name: str) -> bytes:
    key = _EVENT_KEYS.get(name)
    if key is None:
        key = _EVENT_KEYS[name] = b'","event":' + orjson.dumps(name)
    return key


def error_text(e: BaseException) -> str:
    """An unexpected error as an `error` field: its type and its message's first line, in one line
    of at most 500 characters."""
    text = str(e).strip()
    first = text.splitlines()[0].strip() if text else ""
    return f"{type(e).__name__}: {first}"[:500] if first else type(e).__name__


def event(name: str, shared: Fields | None = None, /, **fields: Any) -> None:
    """Write one event line: `event`, the process's fields, the `shared` ones, then `fields` (None
    values are kept as null). A name must appear only once among them."""
    if _format == "json":
        line = b"".join(
            (
                b'{"ts":"',
                _timestamp_bytes(),
                _event_key(name),
                _base_json,
                shared.json() if shared is not None else b"",
                b"," + orjson.dumps(fields, option=_OPTIONS)[1:] if fields else b"}",
                b"\n",
            )
        )
    else:
        record = {"ts": _timestamp(), "event": name, **_base, **(shared.values if shared else {}), **fields}
        rest = " ".join(
            f"{k}={_text(v)}" for k, v in record.items() if k not in ("ts", "event") and v is not None
        )
        line = f"{record['ts']} {name:<16} {rest}\n".encode()
    _emit(line)


_NO_OUTCOME = b',"outcome":null,"duration_ms":null,"error":null}\n'


def attempt_event(
    name: str, attempt: Fields, outcome: str | None, duration_ms: float | None, error: str | None
) -> None:
    """`event(name, attempt, outcome=..., duration_ms=..., error=...)`, the worker's line for each
    attempt event, made with fewer steps: a worker writes two of them for every run."""
    if _format != "json":
        event(name, attempt, outcome=outcome, duration_ms=duration_ms, error=error)
        return
    if outcome is None and duration_ms is None and error is None:
        tail = _NO_OUTCOME
    elif outcome == "done" and error is None and isinstance(duration_ms, float):
        tail = b"".join((b',"outcome":"done","duration_ms":', orjson.dumps(duration_ms), b',"error":null}\n'))
    else:
        tail = (
            b"," + orjson.dumps({"outcome": outcome, "duration_ms": duration_ms, "error": error})[1:] + b"\n"
        )
    _emit(b"".join((b'{"ts":"', _timestamp_bytes(), _event_key(name), _base_json, attempt.json(), tail)))


def attempt_events(
    name: str,
    shared: Sequence[Fields],
    outcome: str | None = None,
    durations_ms: Sequence[float] | None = None,
) -> None:
    """`attempt_event(name, f, outcome, d, None)` for each `f` of `shared` and its `d` of
    `durations_ms` (without them, neither outcome nor duration), in order, with the time rendered
    once: the lines of one kind that a worker writes for a whole round (claimed, finished)."""
    if durations_ms is None and outcome is not None:
        raise ValueError("an outcome needs the durations")
    if _format != "json":
        for i, f in enumerate(shared):
            event(name, f, outcome=outcome, duration_ms=durations_ms[i] if durations_ms else None, error=None)
        return
    head = b"".join((b'{"ts":"', _timestamp_bytes(), _event_key(name), _base_json))
    if durations_ms is None:
        lines = [head + f.json() + _NO_OUTCOME for f in shared]
    else:
        mid = b',"outcome":' + orjson.dumps(outcome) + b',"duration_ms":'
        dumps = orjson.dumps
        lines = [
            b"".join((head, f.json(), mid, dumps(d), b',"error":null}\n'))
            for f, d in zip(shared, durations_ms, strict=True)
        ]
    _emit(b"".join(lines))


def _emit(line: bytes) -> None:
    """Write `line` now, or keep it for the end of this thread's `batched()` block."""
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


def output_gone() -> bool:
    """Whether the output's reader went away (its lines are dropped since)."""
    return _gone


def exit_code(code: int) -> int:
    """A long-running process's exit code: EXIT_OUTPUT_GONE for a stop that its output's reader
    going away caused, any other code as it is."""
    return EXIT_OUTPUT_GONE if code == 0 and _gone else code


def _write(data: bytes) -> None:
    global _gone
    on_gone = _on_gone
    with _lock:
        if _gone:
            return
        try:
            out = _stream or sys.stdout.buffer
            out.write(data)
            out.flush()
            return
        except BrokenPipeError:
            if on_gone is None:
                raise  # a command's own: it ends as a program that SIGPIPE ended (fleetctl's main)
            # No reader: each line would fail in the middle of the work that logged it (a tick, a
            # claim), and the process would record a crash that says nothing true. Lines are
            # dropped instead, and the process is told to stop.
            _gone = True
            if _stream is None:  # nor fail when what is left in the buffer is flushed at exit
                with contextlib.suppress(OSError, ValueError):
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, sys.stdout.fileno())
                    os.close(null)
    on_gone()


def _text(v: Any) -> str:
    """A value of a text line: as it is when it is one plain word, else in double quotes with `"`
    and `\\` escaped and every control character written as an escape, so that no value can
    break the line, forge a field, or reach the terminal as a control sequence."""
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat().replace("+00:00", "Z")
    s = str(v)
    if s and not any(c in _QUOTED for c in s) and printable(s) == s:
        return s
    return '"' + printable(s.replace("\\", "\\\\").replace('"', '\\"')) + '"'


_QUOTED = frozenset(' "=\\')
