"""The OpenTelemetry SDK side of tracing: resource, provider and batched export over OTLP/HTTP.

Imported by `fleet.observe.telemetry.configure` only when tracing is on, so processes and commands that do
not trace never load the SDK or the exporter.
"""

from __future__ import annotations

import logging
import re
import socket
import time
import urllib.parse
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

from fleet.observe import logs

MAX_PAUSE_S = 16.0  # the longest a worker goes without trying a collector that refused spans
FAILURE_REPORT_S = 60.0  # a collector that stays out of reach is reported once a minute
PROBE_SPANS = 16  # what a worker sends to find out whether such a collector is back

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pipeline:
    provider: TracerProvider
    processors: tuple[SpanProcessor, ...]
    sampler: Sampler | None  # None: every new trace is sampled, decided without asking
    scope: InstrumentationScope  # of the spans fleet builds itself
    sinks: tuple[_Materializing, ...] = ()  # what each processor exports through


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
    sinks: list[_Materializing] = []
    if exporter is not None:
        sinks.append(_Materializing(exporter))
        processors.append(SimpleSpanProcessor(sinks[-1]))
    for kind in () if exporter is not None else exporters:
        if kind == "console":
            sinks.append(_Materializing(ConsoleSpanExporter()))
        else:
            otlp = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
            sinks.append(_Materializing(otlp, endpoint, timeout_s))
        processors.append(BatchSpanProcessor(sinks[-1]))
    for p in processors:
        provider.add_span_processor(p)
    # OTEL_TRACES_SAMPLER unset (or always_on) samples every new trace: no need to ask per span.
    default = provider.sampler.get_description() in (
        DEFAULT_ON.get_description(),  # type: ignore[no-untyped-call]
        ALWAYS_ON.get_description(),
    )
    _quiet_export_failures()
    return Pipeline(
        provider,
        tuple(processors),
        None if default else provider.sampler,
        InstrumentationScope("fleet"),
        tuple(sinks),
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

    A failed export of an OTLP `endpoint` is one `trace_export_failed` event naming the endpoint
    and the cause, at most every `FAILURE_REPORT_S`; `trace_export_resumed` says when it works again.
    """

    def __init__(self, inner: SpanExporter, endpoint: str | None = None, timeout_s: float = 1.0) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.pause_s = 0.0
        self.resume_at = 0.0
        self.failed_exports = 0  # since the process started
        self.report = logs.Throttle(FAILURE_REPORT_S)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if time.monotonic() < self.resume_at:
            return SpanExportResult.FAILURE
        batch = len(spans)
        if self.pause_s:  # probing a collector that refused the last batch: a few spans will do
            spans = spans[:PROBE_SPANS]
        _EXPORTER_LINES.cause = None
        result = self.inner.export(self._build(spans))
        if result is SpanExportResult.SUCCESS:
            if self.pause_s and self.endpoint:
                logs.event("trace_export_resumed", endpoint=self.endpoint)
                self.report.reset()
            self.pause_s = 0.0
        else:
            self.failed_exports += 1
            self.pause_s = min(max(1.0, self.pause_s * 2), MAX_PAUSE_S)
            self.resume_at = time.monotonic() + self.pause_s
            if self.endpoint and self.report.due():
                logs.event(
                    "trace_export_failed",
                    endpoint=self.endpoint,
                    error=_EXPORTER_LINES.cause or _connect_error(self.endpoint, self.timeout_s),
                    dropped_spans=batch,
                    next_try_s=self.pause_s,
                )
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


class _ExporterLines(logging.Handler):
    """Takes the OTLP exporter's own log lines (a warning per retry, an error per batch, each a long
    line of nested exception text) off the log, keeping only the cause of the latest failure for
    the one `trace_export_failed` event that reports it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.cause: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.cause = _cause_of(record) or self.cause
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


_EXPORTER_LINES = _ExporterLines()
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _cause_of(record: logging.LogRecord) -> str | None:
    """The cause a library line names, briefly: the operating system's reason for a failed
    connection (``Connection refused``), else the error or the line itself; None for a line that
    only says that an export failed."""
    args = record.args if isinstance(record.args, tuple) else ()
    for arg in args:
        if isinstance(arg, BaseException):
            return _reason(arg)
    text = record.getMessage()
    if "due to timeout, max retries or shutdown" in text:
        return None
    found = _ERRNO.search(text)
    return found.group(1).strip() if found else text.strip().splitlines()[0][:300]


def _reason(error: BaseException) -> str:
    """The innermost operating-system reason in an exception's chain, else its first line."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        todo += [
            x
            for x in (e.__cause__, e.__context__, getattr(e, "reason", None))
            if isinstance(x, BaseException)
        ]
        todo += [x for x in e.args if isinstance(x, BaseException)]
    text = str(error).strip()
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def _connect_error(endpoint: str, timeout_s: float) -> str:
    """Why a failed export failed, when the exporter did not say (it gives up on a connection
    error without a word once its deadline is near): what connecting to the endpoint gives now."""
    url = urllib.parse.urlsplit(endpoint)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname or "localhost", port), timeout=min(timeout_s, 2.0)):
            pass
    except ValueError as e:  # a port out of range
        return str(e)
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
    return "the collector answers but did not accept the spans in time"


def _quiet_export_failures() -> None:
    # The batch processor logs a warning for every span dropped from a full queue, each with a
    # stack walk on the thread that ended the span: errors only.
    logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)
    # The exporters log every retry of every batch: their lines become the cause of one event.
    exporters = logging.getLogger("opentelemetry.exporter")
    exporters.setLevel(logging.WARNING)
    exporters.propagate = False
    if _EXPORTER_LINES not in exporters.handlers:
        exporters.addHandler(_EXPORTER_LINES)
