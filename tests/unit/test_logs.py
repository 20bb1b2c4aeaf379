"""Event lines: JSON with the same fields however a line is made, or text for people."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import orjson
import pytest

from fleet.observe import logs

SLOT = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)


@pytest.fixture
def out() -> Iterator[io.BytesIO]:
    stream = io.BytesIO()
    logs.configure("json", stream=stream, process="worker")
    yield stream
    logs.configure()


def attempt() -> logs.Fields:
    return logs.Fields(
        schedule="nightly",
        slot=SLOT,
        attempt=2,
        worker_id='w"1',
        job="reports.nightly",
        trace_id=None,
        span_id=None,
    )


def lines(out: io.BytesIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_carries_time_event_process_fields_in_order(out: io.BytesIO) -> None:
    logs.event("worker_started", worker_id="w1", jobs=["a", "b"], lease_s=30.0)
    (line,) = lines(out)
    assert list(line) == ["ts", "event", "process", "worker_id", "jobs", "lease_s"]
    assert line["event"] == "worker_started" and line["process"] == "worker" and line["jobs"] == ["a", "b"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(line["ts"]))


@pytest.mark.parametrize(
    ("outcome", "duration_ms", "error"),
    [
        (None, None, None),
        ("done", 12.5, None),
        ("failed", 3.0, 'ValueError: "x"\n at y'),
        ("done", None, None),
    ],
)
def test_attempt_lines_equal_the_general_ones(
    out: io.BytesIO, outcome: str | None, duration_ms: float | None, error: str | None
) -> None:
    shared = attempt()
    logs.attempt_event("finished", shared, outcome, duration_ms, error)
    logs.event("finished", shared, outcome=outcome, duration_ms=duration_ms, error=error)
    fast, general = lines(out)
    fast.pop("ts")
    general.pop("ts")
    assert list(fast.items()) == list(general.items())
    assert fast["slot"] == "2026-11-02T01:00:00Z" and fast["worker_id"] == 'w"1' and fast["error"] == error


@pytest.mark.parametrize(("outcome", "durations_ms"), [(None, None), ("done", [12.5, 0.25])])
def test_a_round_of_attempt_lines_equals_the_lines_one_by_one(
    out: io.BytesIO, outcome: str | None, durations_ms: list[float] | None
) -> None:
    other = logs.Fields.of({"schedule": "other", "slot": SLOT, "attempt": 1, "worker_id": "w1", "job": "j"})
    shared = [attempt(), other]
    logs.attempt_events("claimed", shared, outcome, durations_ms)
    for i, f in enumerate(shared):
        logs.attempt_event("claimed", f, outcome, durations_ms[i] if durations_ms else None, None)
    got = lines(out)
    for line in got:
        line.pop("ts")
    assert [list(line.items()) for line in got[:2]] == [list(line.items()) for line in got[2:]]
    assert [line["schedule"] for line in got[:2]] == ["nightly", "other"]


def test_a_round_of_attempt_lines_in_text_and_its_misuse() -> None:
    stream = io.BytesIO()
    logs.configure("text", stream=stream, process="worker")
    try:
        logs.attempt_events("finished", [attempt()], "done", [1.5])
    finally:
        logs.configure()
    text = stream.getvalue().decode()
    assert " finished " in text and "outcome=done" in text and "duration_ms=1.5" in text
    with pytest.raises(ValueError, match="durations"):
        logs.attempt_events("finished", [attempt()], "done")


def test_batched_lines_are_written_together_in_order(out: io.BytesIO) -> None:
    with logs.batched():
        logs.attempt_event("claimed", attempt(), None, None, None)
        logs.event("skipped", schedule="s")
        assert out.getvalue() == b""
    assert [line["event"] for line in lines(out)] == ["claimed", "skipped"]


def test_text_format_for_people() -> None:
    stream = io.BytesIO()
    logs.configure("text", stream=stream, process="worker")
    try:
        logs.attempt_event("retried", attempt(), "failed", 3.0, "boom here")
    finally:
        logs.configure()
    text = stream.getvalue().decode()
    assert " retried " in text and "slot=2026-11-02T01:00:00Z" in text and 'error="boom here"' in text
    assert "trace_id" not in text  # None values are left out


def test_text_lines_escape_what_values_hold() -> None:
    """A value in a text line cannot break the line, send a control sequence to the terminal, or
    forge a field: newlines and escapes are written as escapes, quotes and backslashes escaped."""
    stream = io.BytesIO()
    logs.configure("text", stream=stream, process="worker")
    hostile = 'boom\nfake line event=x\r\x1b[2J\x1b]0;title\x07 \u202eevil "q" back\\slash'
    try:
        logs.attempt_event("retried", attempt(), "failed", 3.0, hostile)
        logs.event("worker_error", schedule="a=b", note="", other="plain")
    finally:
        logs.configure()
    text = stream.getvalue().decode()
    first, second = text.splitlines()
    assert text.count("\n") == 2 and "\r" not in text and "\x1b" not in text and "\x07" not in text
    assert "\u202e" not in text
    assert (
        'error="boom\\nfake line event=x\\r\\x1b[2J\\x1b]0;title\\x07 \\u202eevil \\"q\\" back\\\\slash"'
        in first
    )
    assert second.endswith('schedule="a=b" note="" other=plain')


def test_library_warnings_become_lines_and_their_info_does_not(out: io.BytesIO) -> None:
    import logging

    import fleet.store.pool  # noqa: F401 - its filter drops the pool's line per failed connection attempt

    pool = logging.getLogger("psycopg.pool")
    pool.info("connection returned")
    pool.warning("error connecting in %r: %s", "fleet-worker w1", "connection refused")
    pool.warning("discarding broken connection: %s", "<conn>")
    (line,) = lines(out)
    assert line["event"] == "library_log" and line["process"] == "worker"
    assert line["logger"] == "psycopg.pool" and line["level"] == "warning"
    assert line["message"] == "discarding broken connection: <conn>"
    logs.configure("json", stream=out)
    assert logging.getLogger().handlers.count(logs._BRIDGE) == 1


def test_a_throttle_says_the_first_time_then_after_its_period() -> None:
    t = logs.Throttle(period_s=0.2)
    assert [t.due(), t.due()] == [True, False]
    t.reset()
    assert t.due()
    import time

    time.sleep(0.25)
    assert t.due() and not t.due()
