"""Tracing without processes: settings from OTEL_* variables, attempt spans in memory."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from opentelemetry.trace import SpanKind, StatusCode

from fleet.observe import telemetry
from fleet.worker import spans as attempt_spans
from fleet.worker.attempt import Attempt, execute

SLOT = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)


def attempt(n: int = 1, **fields: Any) -> Attempt:
    now = datetime.now(UTC)
    values: dict[str, Any] = dict(
        schedule="nightly-report",
        slot=SLOT,
        job="reports.nightly",
        args={},
        attempt=n,
        failures=0,
        timeout=None,
        max_attempts=6,
        retry_base=timedelta(seconds=30),
        retry_cap=timedelta(minutes=15),
        started_at=now,
        trace_id=os.urandom(16).hex(),
        span_id=os.urandom(8).hex(),
    )
    values.update(fields)
    return Attempt(**values)


# -- configuration from OTEL_* variables ----------------------------------------------------------


def test_tracing_is_off_by_the_standard_switches() -> None:
    assert telemetry.tracing_config({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert telemetry.tracing_config({"OTEL_TRACES_EXPORTER": " None "}) is None
    assert telemetry.tracing_config({"OTEL_SDK_DISABLED": "true"}) is None
    assert telemetry.tracing_config({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}) is None
    assert (
        telemetry.tracing_config({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}) is not None
    )


def test_tracing_is_off_when_no_collector_is_configured() -> None:
    assert telemetry.tracing_config({}) is None
    assert telemetry.tracing_config({"OTEL_SERVICE_NAME": "x"}) is None
    assert telemetry.tracing_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is not None


def test_tracing_defaults_to_otlp_over_http_with_a_short_timeout() -> None:
    cfg = telemetry.tracing_config({"OTEL_TRACES_EXPORTER": "otlp"})
    assert cfg is not None
    assert cfg.exporters == ("otlp",)
    assert cfg.endpoint == "http://localhost:4318/v1/traces"
    assert cfg.timeout_s == telemetry.DEFAULT_EXPORT_TIMEOUT_S < 10
    assert cfg.service_name is None


def test_endpoints_timeouts_and_service_name_follow_the_spec() -> None:
    cfg = telemetry.tracing_config(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "7",
            "OTEL_SERVICE_NAME": "billing-worker",
        }
    )
    assert cfg is not None
    assert (cfg.endpoint, cfg.timeout_s, cfg.service_name) == (
        "http://collector:4318/v1/traces",
        7.0,
        "billing-worker",
    )
    cfg = telemetry.tracing_config(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/custom/path",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1.5",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "9",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
    )
    assert cfg is not None
    assert (cfg.endpoint, cfg.timeout_s) == ("https://traces.example/custom/path", 1.5)
    cfg = telemetry.tracing_config({"OTEL_TRACES_EXPORTER": "console,otlp"})
    assert cfg is not None and cfg.exporters == ("console", "otlp")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ),
    ],
)
def test_unusable_values_are_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        telemetry.tracing_config(environ)


def test_configure_with_tracing_off_leaves_every_hook_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_state", None)  # whatever ran before in this process
    assert telemetry.configure("fleet-worker", "w", {"OTEL_TRACES_EXPORTER": "none"}) is False
    a = attempt(prev_trace_id=os.urandom(16).hex(), prev_span_id=os.urandom(8).hex(), prev_status="running")
    scope = attempt_spans.attempt_span(a, None)
    assert scope is attempt_spans.attempt_span(attempt(), None)  # one shared, empty context manager
    with scope:
        assert telemetry.current_traceparent() is None
    attempt_spans.record_lost_attempt(a)
    attempt_spans.attempt_recorded(a, "done", None)
    assert a.span is None
    with telemetry.tick_span() as span:
        assert span.ids is None
        span.done(1, 1, 0)
    # What the worker pays per attempt with tracing off: a dictionary lookup and a shared object.
    n = 100_000
    started = time.perf_counter()
    for _ in range(n):
        with attempt_spans.attempt_span(a, None):
            pass
        attempt_spans.attempt_recorded(a, "done", None)
    per_attempt_us = (time.perf_counter() - started) / n * 1e6
    assert per_attempt_us < 5, per_attempt_us  # about 0.5 us; lenient for a noisy machine


# -- spans, in memory -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported() -> Iterator[InMemorySpanExporter]:
    """Tracing on for this module, exporting synchronously to memory (the global provider is set once
    per process, so the module shares it)."""
    memory = InMemorySpanExporter()
    assert telemetry.configure("fleet-worker", "worker-7", {}, exporter=memory)
    yield memory
    telemetry.flush()


@pytest.fixture
def spans(exported: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    exported.clear()
    yield exported


def only(memory: InMemorySpanExporter, name: str | None = None) -> ReadableSpan:
    found = [s for s in memory.get_finished_spans() if name is None or s.name == name]
    assert len(found) == 1, [s.name for s in memory.get_finished_spans()]
    return found[0]


def ids(s: ReadableSpan) -> tuple[str, str]:
    ctx = s.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def test_an_attempt_span_has_the_claimed_ids_the_attributes_and_no_parent(
    spans: InMemorySpanExporter,
) -> None:
    a = attempt(
        3,
        created_trace_id="ab" * 16,
        created_span_id="cd" * 8,
        prev_trace_id="12" * 16,
        prev_span_id="34" * 8,
        prev_status="pending",
        prev_outcome="failed",
    )
    with attempt_spans.attempt_span(a, None):
        assert telemetry.current_traceparent() == f"00-{a.trace_id}-{a.span_id}-01"
    assert spans.get_finished_spans() == ()  # ended when its outcome is written, not when the handler returns
    attempt_spans.attempt_recorded(a, "done", None)
    s = only(spans)
    assert ids(s) == (a.trace_id, a.span_id)
    assert s.parent is None and s.kind is SpanKind.CONSUMER and s.name == "process nightly-report"
    assert dict(s.attributes or {}) == {
        "messaging.system": "fleet",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "nightly-report",
        "messaging.message.id": "nightly-report:2026-11-02T01:00:00Z",
        "fleet.schedule": "nightly-report",
        "fleet.slot": "2026-11-02T01:00:00Z",
        "fleet.attempt": 3,
        "fleet.worker_id": "worker-7",
        "fleet.idempotency_key": "nightly-report:2026-11-02T01:00:00Z",
        "fleet.job": "reports.nightly",
        "fleet.outcome": "done",
    }
    assert s.status.status_code is StatusCode.UNSET
    links = {
        (f"{k.context.trace_id:032x}", f"{k.context.span_id:016x}"): dict(k.attributes or {}) for k in s.links
    }
    assert links == {
        ("12" * 16, "34" * 8): {"fleet.link.reason": "retry"},
        ("ab" * 16, "cd" * 8): {"fleet.link.reason": "created_by"},
    }
    assert s.resource.attributes["service.name"] == "fleet-worker"
    assert s.resource.attributes["service.instance.id"] == "worker-7"
    assert (
        s.start_time is not None and s.end_time is not None and s.start_time <= s.end_time <= time.time_ns()
    )


@pytest.mark.parametrize(
    ("prev_status", "prev_outcome", "reason"),
    [
        ("running", "failed", "lease_reclaimed"),
        ("pending", "handed_back", "handed_back"),
        ("pending", "timeout", "retry"),
        ("pending", "failed", "retry"),
    ],
)
def test_the_link_to_the_previous_attempt_says_why(
    spans: InMemorySpanExporter, prev_status: str, prev_outcome: str, reason: str
) -> None:
    a = attempt(
        2, prev_trace_id="12" * 16, prev_span_id="34" * 8, prev_status=prev_status, prev_outcome=prev_outcome
    )
    attempt_spans.attempt_recorded(a, "done", None)
    (link,) = only(spans).links
    assert dict(link.attributes or {}) == {"fleet.link.reason": reason}


def test_a_failed_attempt_records_the_exception_and_is_an_error(spans: InMemorySpanExporter) -> None:
    def handler(ctx: Any) -> None:
        raise KeyError("no such report")

    a = attempt()
    with attempt_spans.attempt_span(a, None):
        verdict, error, _ = execute(handler, a.context("worker-7"))
    assert verdict == "failed" and error
    attempt_spans.attempt_recorded(a, "failed", error)
    s = only(spans)
    assert s.status.status_code is StatusCode.ERROR and "no such report" in (s.status.description or "")
    assert s.attributes is not None
    assert (s.attributes["fleet.outcome"], s.attributes["error.type"]) == ("failed", "KeyError")
    (event,) = s.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "KeyError"
    assert "no such report" in str(event.attributes["exception.message"])
    assert "raise KeyError" in str(event.attributes["exception.stacktrace"])


def test_a_huge_exception_and_huge_attributes_are_clipped(spans: InMemorySpanExporter) -> None:
    def handler(ctx: Any) -> None:
        trace.get_current_span().set_attribute("app.blob", "x" * 1_000_000)
        trace.get_current_span().add_event("e" * 1000, {"big": "y" * 1_000_000})
        raise ValueError("z" * 1_000_000)

    a = attempt()
    with attempt_spans.attempt_span(a, None):
        verdict, error, _ = execute(handler, a.context("worker-7"))
    attempt_spans.attempt_recorded(a, "failed", error)
    s = only(spans)
    assert s.attributes is not None and len(str(s.attributes["app.blob"])) <= attempt_spans.MAX_VALUE_CHARS
    for event in s.events:
        assert len(event.name) <= attempt_spans.MAX_NAME_CHARS
        for value in (event.attributes or {}).values():
            assert len(str(value)) <= attempt_spans.MAX_VALUE_CHARS
    (exc,) = [e for e in s.events if e.name == "exception"]
    assert "characters left out" in str(exc.attributes["exception.message"])  # type: ignore[index]


def test_handler_spans_are_children_of_the_attempt_and_may_annotate_it(spans: InMemorySpanExporter) -> None:
    a = attempt()
    with attempt_spans.attempt_span(a, None):
        current = trace.get_current_span()
        current.set_attribute("app.rows", 42)
        current.set_attribute("fleet.outcome", "overridden?")  # fleet's own attributes win
        current.add_event("checkpoint", {"step": 1})
        with trace.get_tracer("app").start_as_current_span("query") as child:
            child.set_attribute("db.system", "postgresql")
            assert (
                telemetry.current_traceparent()
                == f"00-{a.trace_id}-{child.get_span_context().span_id:016x}-01"
            )
    attempt_spans.attempt_recorded(a, "done", None)
    child_span, root = only(spans, "query"), only(spans, "process nightly-report")
    assert ids(child_span)[0] == a.trace_id
    assert child_span.parent is not None and f"{child_span.parent.span_id:016x}" == a.span_id
    assert root.attributes is not None
    assert (root.attributes["app.rows"], root.attributes["fleet.outcome"]) == (42, "done")
    assert [e.name for e in root.events] == ["checkpoint"]


def test_an_attempt_is_emitted_once_even_if_its_handler_never_ran(spans: InMemorySpanExporter) -> None:
    a = attempt(7)
    attempt_spans.attempt_recorded(a, "dead", "lease lost on attempt 6, the last of 6")
    attempt_spans.attempt_recorded(a, "dead", "again")
    with attempt_spans.attempt_span(a, None):  # a handler thread picking it up late changes nothing
        trace.get_current_span().set_attribute("late", True)
    s = only(spans)
    assert s.attributes is not None and "late" not in s.attributes
    assert s.status.status_code is StatusCode.ERROR and s.attributes["error.type"] == "dead"


def test_the_reclaimer_emits_the_lost_attempt_from_the_stored_ids(spans: InMemorySpanExporter) -> None:
    started = datetime(2026, 11, 2, 1, 0, 3, 250_000, tzinfo=UTC)
    reclaimed = datetime(2026, 11, 2, 1, 1, 4, 500_001, tzinfo=UTC)
    a = attempt(
        2,
        prev_status="running",
        prev_trace_id="ef" * 16,
        prev_span_id="01" * 8,
        prev_worker="host-a:worker-1",
        prev_started_at=started,
        started_at=reclaimed,
        created_trace_id="ab" * 16,
        created_span_id="cd" * 8,
    )
    attempt_spans.record_lost_attempt(a)
    s = only(spans)
    assert ids(s) == ("ef" * 16, "01" * 8) and s.parent is None and s.kind is SpanKind.CONSUMER
    assert s.start_time == 1793581203250000000 and s.end_time == 1793581264500001000
    assert (s.status.status_code, s.status.description) == (StatusCode.ERROR, "lease expired")
    assert s.attributes is not None
    assert (s.attributes["fleet.attempt"], s.attributes["fleet.worker_id"]) == (1, "host-a:worker-1")
    assert (s.attributes["fleet.outcome"], s.attributes["fleet.slot"]) == (
        "lease_expired",
        "2026-11-02T01:00:00Z",
    )
    (link,) = s.links
    assert f"{link.context.span_id:016x}" == "cd" * 8
    assert dict(link.attributes or {}) == {"fleet.link.reason": "created_by"}


@pytest.mark.parametrize(
    ("before_outcome", "reason"),
    [("failed", "retry"), ("lease_expired", "lease_reclaimed"), ("handed_back", "handed_back")],
)
def test_a_lost_attempt_links_to_the_attempt_before_it(
    spans: InMemorySpanExporter, before_outcome: str, reason: str
) -> None:
    # Attempt 3 reclaims the run: attempt 2 was lost; attempt 1 ended as `before_outcome`.
    a = attempt(
        3,
        prev_status="running",
        prev_outcome=before_outcome,
        prev_trace_id="ef" * 16,
        prev_span_id="01" * 8,
        started_at=datetime(2026, 11, 2, 1, 1, 4, tzinfo=UTC),
    )
    attempt_spans.record_lost_attempt(a, ("12" * 16, "34" * 8))
    s = only(spans)
    assert ids(s) == ("ef" * 16, "01" * 8) and s.attributes and s.attributes["fleet.attempt"] == 2
    (link,) = s.links  # no created_by link: this run has no creator's ids
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == ("12" * 16, "34" * 8)
    assert dict(link.attributes or {}) == {"fleet.link.reason": reason}


def test_a_tick_span_is_emitted_only_when_its_batch_created_rows(spans: InMemorySpanExporter) -> None:
    with telemetry.tick_span() as tick:
        tick.done(3, 0, 0)
    assert spans.get_finished_spans() == ()
    with telemetry.tick_span() as tick:
        assert tick.ids is not None
        tick.done(3, 5, 1)
    s = only(spans)
    assert ids(s) == tick.ids and s.kind is SpanKind.PRODUCER and s.parent is None
    assert s.attributes is not None
    assert (s.attributes["fleet.slots.created"], s.attributes["fleet.slots.skipped"]) == (5, 1)
    with pytest.raises(RuntimeError), telemetry.tick_span() as tick:
        tick.done(1, 1, 0)
        raise RuntimeError("the tick's transaction rolled back")
    assert len(spans.get_finished_spans()) == 1


def test_ratio_sampling_works_on_the_claims_uuid_trace_ids(exported: InMemorySpanExporter) -> None:
    # gen_random_uuid() fixes the top bits of the id's low half, which a ratio sampler reads.
    st = telemetry._state
    assert st is not None
    saved = st.sampler
    st.sampler = ParentBasedTraceIdRatio(0.25)
    try:
        ids_ = [bytearray(os.urandom(16)) for _ in range(4000)]
        for b in ids_:
            b[6] = (b[6] & 0x0F) | 0x40  # version 4
            b[8] = (b[8] & 0x3F) | 0x80  # variant 10
        share = sum(st.sampled(int.from_bytes(b, "big"), "x", SpanKind.CONSUMER) for b in ids_) / len(ids_)
    finally:
        st.sampler = saved
    assert 0.2 < share < 0.3, share
