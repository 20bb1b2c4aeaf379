"""Tracing: one OpenTelemetry trace per attempt, configured from the standard OTEL_* variables.

An attempt's root span carries the trace and span ids its claim generated and stored (in `job_runs`
and the attempt history). So the worker that reclaims a crashed attempt can emit that attempt's
span from the database, links between attempts point at spans that exist, and a log line or
`fleetctl show` leads straight to the trace. Spans a handler makes through the OpenTelemetry API are
ordinary SDK spans, children of the attempt's span, which is current while the handler runs.

A worker pays a few microseconds per attempt: the attempt's span is a small object, queued for the
batch processor when the attempt's outcome is written, and its attributes and links are built on
the export thread (`to_readable`); the SDK's `Tracer.start_span` validates every attribute and
would cost tens of microseconds. A slow or unreachable collector never delays a claim: spans that
do not fit the export queue are dropped before they are ever built.
"""

from __future__ import annotations

import atexit
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from fleet.observe import logs

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

DEFAULT_ENDPOINT = "http://localhost:4318"
# The exporter's own default is 10 s. A collector that does not answer within this holds only the
# export thread, and the batch is dropped.
DEFAULT_EXPORT_TIMEOUT_S = 3.0
FLUSH_TIMEOUT_S = 2.0  # the most a process's exit waits for its last spans
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


@dataclass(frozen=True)
class TracingConfig:
    """What the OTEL_* variables ask of this process's tracing."""

    exporters: tuple[str, ...]  # "otlp" (OTLP over HTTP/protobuf), "console"
    endpoint: str  # the full OTLP/HTTP traces URL
    timeout_s: float
    service_name: str | None  # OTEL_SERVICE_NAME; None: the process kind's default name


def tracing_config(environ: Mapping[str, str]) -> TracingConfig | None:
    """Read the standard variables; None when tracing is off. ValueError names an unusable value.

    On when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER names an exporter; a process with
    no collector configured sends nothing anywhere. Off: OTEL_SDK_DISABLED=true or
    OTEL_TRACES_EXPORTER=none. The exporter is OTLP over
    HTTP/protobuf (the only protocol supported here); OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as
    given, OTEL_EXPORTER_OTLP_ENDPOINT gets `/v1/traces` appended. Timeouts are in seconds, as the
    Python exporter reads them.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    configured = any(
        environ.get(v, "").strip()
        for v in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
    if not configured:
        return None
    requested = environ.get("OTEL_TRACES_EXPORTER", "").strip() or "otlp"
    names = tuple(n.strip().lower() for n in requested.split(",") if n.strip())
    if not names or "none" in names:
        return None
    unknown = sorted(set(names) - {"otlp", "console"})
    if unknown:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER: unsupported {', '.join(unknown)} (use otlp, console or none)"
        )
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if "otlp" in names and protocol != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported (use http/protobuf)")
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if not endpoint:
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or DEFAULT_ENDPOINT
        endpoint = f"{base.removesuffix('/')}/v1/traces"
    timeout_s = DEFAULT_EXPORT_TIMEOUT_S
    for var in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        raw = environ.get(var, "").strip()
        if raw:
            try:
                timeout_s = float(raw)
            except ValueError:
                raise ValueError(f"{var}: not a number of seconds: {raw!r}") from None
            break
    return TracingConfig(names, endpoint, timeout_s, environ.get("OTEL_SERVICE_NAME", "").strip() or None)


@dataclass
class State:
    provider: TracerProvider
    processors: tuple[SpanProcessor, ...]
    sampler: Sampler | None  # None: every new trace is sampled (the default), decided without a call
    resource: Resource
    scope: InstrumentationScope
    instance_id: str

    def sampled(self, trace_id: int, name: str, kind: SpanKind) -> bool:
        if self.sampler is None:
            return True
        from opentelemetry.sdk.trace.sampling import Decision

        # The claim's trace ids are UUIDv4s: only their rightmost 7 bytes are random (what W3C trace
        # context requires), while the ratio sampler reads the rightmost 8. Give it those 7 bytes.
        key = (trace_id >> 64 << 64) | (trace_id & 0xFFFFFFFFFFFFFF) << 8
        return self.sampler.should_sample(None, key, name, kind).decision is Decision.RECORD_AND_SAMPLE

    def emit(self, span: Any) -> None:
        """Queue a finished span: an SDK `ReadableSpan`, or a deferred one built at export."""
        for p in self.processors:
            p.on_end(cast("ReadableSpan", span))


_state: State | None = None
# Guards attempt spans: made once by whichever thread comes first, annotated by the handler's
# thread, ended by the worker's loop. One lock for all: it is held for a few statements at a time.
SPAN_LOCK = threading.Lock()


def configure(
    service_name: str, instance_id: str, environ: Mapping[str, str], *, exporter: SpanExporter | None = None
) -> bool:
    """Set up tracing for this process from the OTEL_* variables in `environ`; True when it is on.

    `service_name` is the default when OTEL_SERVICE_NAME (or `service.name` in
    OTEL_RESOURCE_ATTRIBUTES) does not name the service; `instance_id`, the process's id, becomes
    `service.instance.id`. The SDK reads the other standard variables it supports (headers,
    certificates, compression, OTEL_BSP_*, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES) from the
    process environment itself. An `exporter` given here (tests) receives spans synchronously.
    """
    global _state
    if _state is not None:
        return True
    if exporter is not None:  # an exporter handed in turns tracing on, unless switched off
        environ = {"OTEL_TRACES_EXPORTER": "otlp", **environ}
    try:
        cfg = tracing_config(environ)
    except ValueError as e:
        logs.event("tracing_off", error=str(e))
        return False
    if cfg is None:
        return False
    from fleet.observe import trace_export

    p = trace_export.build(
        service_name, cfg.service_name, instance_id, cfg.exporters, cfg.endpoint, cfg.timeout_s, exporter
    )
    trace.set_tracer_provider(p.provider)
    _state = State(p.provider, p.processors, p.sampler, p.provider.resource, p.scope, instance_id)
    atexit.register(flush)
    logs.event(
        "tracing_on",
        service=p.provider.resource.attributes.get("service.name"),
        instance=instance_id,
        exporters=list(cfg.exporters),
        endpoint=cfg.endpoint if "otlp" in cfg.exporters and exporter is None else None,
    )
    return True


def flush(timeout_s: float = FLUSH_TIMEOUT_S) -> None:
    """Export what is buffered and stop tracing, waiting at most `timeout_s` (for process exit).

    With an unreachable collector the export thread may still be retrying when the time is up; the
    spans it holds are then dropped with the process.
    """
    global _state
    st, _state = _state, None
    if st is None:
        return
    t = threading.Thread(target=st.provider.shutdown, name="fleet-trace-flush", daemon=True)
    t.start()
    t.join(timeout_s)


# -- the attempt's span lives with the worker (fleet.worker.spans); what the core shares --------


def enabled() -> bool:
    """Whether spans are being made (a collector was named)."""
    return _state is not None


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (the attempt's, in its handler), when tracing is on."""
    if _state is None:
        return None
    sc = trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags) & 0xFF:02x}"


def unix_ns(t: datetime) -> int:
    """`t` as OpenTelemetry's nanoseconds since the Unix epoch."""
    return (t - _EPOCH) // timedelta(microseconds=1) * 1000


def record_exception(exc: BaseException) -> None:
    """Record a handler's exception on the current span (the attempt's, while its handler runs)."""
    if _state is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.record_exception(exc)


def state() -> State | None:
    """Tracing's state in this process: None while tracing is off."""
    return _state


# -- ticks ----------------------------------------------------------------------------------------


class TickSpan:
    """The span of one ticker batch. Its `ids` (None when tracing is off) are stored in the slots the
    batch creates, as their `created_by` link; it is emitted only if the batch created rows."""

    def __init__(self) -> None:
        self._st = _state
        self.ids: tuple[str, str] | None = None
        self._counts: tuple[int, int, int] | None = None
        self._start = 0
        if self._st is not None:
            self.ids = (f"{random.getrandbits(128) or 1:032x}", f"{random.getrandbits(64) or 1:016x}")
            self._start = time.time_ns()

    def done(self, schedules: int, created: int, skipped: int) -> None:
        """What the batch did: due schedules handled, runs created, rows recorded as skipped."""
        self._counts = (schedules, created, skipped)

    def __enter__(self) -> TickSpan:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        st = self._st
        if st is None or self.ids is None or exc is not None or self._counts is None:
            return  # a failed tick rolled back: no row refers to this span
        schedules, created, skipped = self._counts
        name = "materialize slots"
        trace_id = int(self.ids[0], 16)
        if not (created or skipped) or not st.sampled(trace_id, name, SpanKind.PRODUCER):
            return
        from opentelemetry.sdk.trace import ReadableSpan

        st.emit(
            ReadableSpan(
                name=name,
                context=SpanContext(trace_id, int(self.ids[1], 16), is_remote=False, trace_flags=_SAMPLED),
                resource=st.resource,
                attributes={
                    "messaging.system": "fleet",
                    "messaging.operation.type": "create",
                    "messaging.operation.name": "materialize",
                    "messaging.batch.message_count": created + skipped,
                    "fleet.schedules": schedules,
                    "fleet.slots.created": created,
                    "fleet.slots.skipped": skipped,
                    "fleet.ticker_id": st.instance_id,
                },
                kind=SpanKind.PRODUCER,
                start_time=self._start,
                end_time=time.time_ns(),
                instrumentation_scope=st.scope,
            )
        )


def tick_span() -> TickSpan:
    """`with tick_span() as span:` around one ticker batch: pass `span.ids` to it, then `span.done(...)`."""
    return TickSpan()
