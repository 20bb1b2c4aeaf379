"""A collector out of reach: one fleet event naming the endpoint and the cause, at most once a
minute, and none of the exporter library's own lines."""

from __future__ import annotations

import io
from collections.abc import Iterator

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from fleet.observe import logs, trace_export
from tests.support import free_port, wait_for


@pytest.fixture
def out() -> Iterator[io.BytesIO]:
    stream = io.BytesIO()
    logs.configure("json", stream=stream, process="worker")
    yield stream
    logs.configure()


def events(out: io.BytesIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_a_refused_collector_is_one_event_a_minute_naming_endpoint_and_cause(out: io.BytesIO) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there: refused
    p = trace_export.build("fleet-worker", None, "w1", ("otlp",), endpoint, 0.5)
    (sink,) = p.sinks
    (processor,) = p.processors
    n = 0

    def export_one() -> None:
        nonlocal n
        n += 1
        context = SpanContext(n, n, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        processor.on_end(ReadableSpan(name="process s", context=context, start_time=1, end_time=2))
        processor.force_flush(5_000)

    def failed_after_one_more(failures: int) -> bool:
        export_one()
        return sink.failed_exports >= failures

    try:
        export_one()
        wait_for(lambda: sink.failed_exports >= 1, timeout=10, what="a failed export")
        # the exporter pauses after a failure, then probes again: a second failure within the minute
        wait_for(lambda: failed_after_one_more(2), timeout=10, interval=0.2, what="a probe")
        lines = events(out)
        assert [e["event"] for e in lines] == ["trace_export_failed"], lines
        (failed,) = lines
        assert failed["endpoint"] == endpoint and failed["error"] == "Connection refused"
        assert failed["process"] == "worker"

        sink.report.last -= trace_export.FAILURE_REPORT_S  # a minute later, still refused
        failures = sink.failed_exports
        wait_for(lambda: failed_after_one_more(failures + 1), timeout=20, interval=0.2)
        assert [e["event"] for e in events(out)] == ["trace_export_failed", "trace_export_failed"]
    finally:
        p.provider.shutdown()
    assert all(e["event"] != "library_log" for e in events(out))
