"""The OpenTelemetry SDK side of tracing: resource, provider and batched export over OTLP/HTTP.

Imported by `fleet.telemetry.configure` only when tracing is on, so processes and commands that do
not trace never load the SDK or the exporter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, DEFAULT_ON, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

MAX_PAUSE_S = 16.0  # the longest a worker goes without trying a collector that refused spans
PROBE_SPANS = 16  # what a worker sends to find out whether such a collector is back

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pipeline:
    provider: TracerProvider
    processors: tuple[SpanProcessor, ...]
    sampler: Sampler | None  # None: every new trace is sampled, decided without asking
    scope: InstrumentationScope  # of the spans fleet builds itself


def build(
    default_service: str,
    service_name: str | None,
    instance_id: str,
    exporters: Sequence[str],
    endpoint: str,
    timeout_s: float,
    exporter: SpanExporter | None = None,
) -> Pipeline:
    """A tracer provider exporting through batch processors (or synchronously to `exporter`).

    The service is `service_name` (OTEL_SERVICE_NAME), else `service.name` of
    OTEL_RESOURCE_ATTRIBUTES, else `default_service`.
    """
    resource = Resource.create({SERVICE_INSTANCE_ID: instance_id})  # plus OTEL_RESOURCE_ATTRIBUTES
    if service_name or str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name or default_service}))
    resource = _Resource(resource.attributes, resource.schema_url)
    # The SDK's default attribute length is unlimited; a span carries at most 4 kB per value.
    limits = SpanLimits(max_attribute_length=4096, max_span_attribute_length=4096)
    provider = TracerProvider(resource=resource, shutdown_on_exit=False, span_limits=limits)
    processors: list[SpanProcessor] = []
    if exporter is not None:
        processors.append(SimpleSpanProcessor(_Materializing(exporter)))
    for kind in () if exporter is not None else exporters:
        sink: SpanExporter = (
            ConsoleSpanExporter()
            if kind == "console"
            else OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
        )
        processors.append(BatchSpanProcessor(_Materializing(sink)))
    for p in processors:
        provider.add_span_processor(p)
    # OTEL_TRACES_SAMPLER unset (or always_on) samples every new trace: no need to ask per span.
    default = provider.sampler.get_description() in (
        DEFAULT_ON.get_description(),  # type: ignore[no-untyped-call]
        ALWAYS_ON.get_description(),
    )
    _quiet_export_failures()
    return Pipeline(
        provider, tuple(processors), None if default else provider.sampler, InstrumentationScope("fleet")
    )


class _Resource(Resource):
    """A resource whose hash is computed once: the OTLP encoder hashes it for every span it encodes
    (the SDK's hash serialises all attributes to JSON)."""

    @cached_property
    def _hash(self) -> int:
        return super().__hash__()

    def __hash__(self) -> int:
        return self._hash


class _Materializing(SpanExporter):
    """Turns deferred spans (ended on a hot path, with a `to_readable()` method) into SDK spans on the
    export thread, then hands the batch on. Spans dropped from a full queue are never built.

    After a failed export, batches are dropped unbuilt for a pause that doubles up to
    `MAX_PAUSE_S`: building and encoding spans costs the worker CPU, and a collector that is down
    would only refuse them. After the pause a few spans of the next batch probe it again.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.pause_s = 0.0
        self.resume_at = 0.0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if time.monotonic() < self.resume_at:
            return SpanExportResult.FAILURE
        if self.pause_s:  # probing a collector that refused the last batch: a few spans will do
            spans = spans[:PROBE_SPANS]
        result = self.inner.export(self._build(spans))
        if result is SpanExportResult.SUCCESS:
            self.pause_s = 0.0
        else:
            self.pause_s = min(max(1.0, self.pause_s * 2), MAX_PAUSE_S)
            self.resume_at = time.monotonic() + self.pause_s
        return result

    def _build(self, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        batch: list[ReadableSpan] = []
        for s in spans:
            to_readable = getattr(s, "to_readable", None)
            if to_readable is None:
                batch.append(s)
                continue
            try:
                batch.append(to_readable())
            except Exception:  # noqa: BLE001 - one bad span must not cost the batch
                _log.exception("dropping a span that could not be built")
        return batch

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _Throttle(logging.Filter):
    """Lets one record through per `period_s`: an unreachable collector is reported, not shouted."""

    def __init__(self, period_s: float) -> None:
        super().__init__()
        self.period_s = period_s
        self.next = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + self.period_s
        return True


def _quiet_export_failures() -> None:
    # The batch processor logs a warning for every span dropped from a full queue, each with a
    # stack walk on the thread that ended the span; the exporter logs every retry of every batch.
    logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)
    exporter_log = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    exporter_log.setLevel(logging.ERROR)
    if not any(isinstance(f, _Throttle) for f in exporter_log.filters):
        exporter_log.addFilter(_Throttle(60.0))
