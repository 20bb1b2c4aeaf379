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
import json
import random
import threading
import time
import traceback
import urllib.parse
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types as otel_types

from fleet import logs
from fleet.jobs import slot_iso

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

DEFAULT_ENDPOINT = "http://localhost:4318"
# The exporter's own default is 10 s. A collector that does not answer within this holds only the
# export thread, and the batch is dropped.
DEFAULT_EXPORT_TIMEOUT_S = 3.0
FLUSH_TIMEOUT_S = 2.0  # the most a process's exit waits for its last spans
DEFAULT_JAEGER_URL = "http://localhost:16686"

_MAX_USER_ATTRIBUTES = 128  # what a handler may add to its attempt's span (the SDK's default limits)
_MAX_USER_EVENTS = 128
# Length limits on what a handler or its exception puts in a span: a 1 MB exception text is clipped
# like the database's copy of it, and a span stays small enough for any collector.
MAX_VALUE_CHARS = 4096
MAX_NAME_CHARS = 256
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_ERROR_OUTCOMES = frozenset({"failed", "timeout", "dead", "lease_expired"})
_NO_SCOPE: AbstractContextManager[None] = nullcontext()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ROOT_CONTEXT = otel_context.Context()


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
class _State:
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


_state: _State | None = None
# Guards attempt spans: made once by whichever thread comes first, annotated by the handler's
# thread, ended by the worker's loop. One lock for all: it is held for a few statements at a time.
_lock = threading.Lock()


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
    from fleet import trace_export

    p = trace_export.build(
        service_name, cfg.service_name, instance_id, cfg.exporters, cfg.endpoint, cfg.timeout_s, exporter
    )
    trace.set_tracer_provider(p.provider)
    _state = _State(p.provider, p.processors, p.sampler, p.provider.resource, p.scope, instance_id)
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


# -- attempts -------------------------------------------------------------------------------------


def attempt_span(attempt: Any, ctx: Any) -> AbstractContextManager[None]:
    """Make the attempt's span current in this thread (for the handler's spans and TRACEPARENT)."""
    st = _state
    if st is None:
        return _NO_SCOPE
    span = _span_of(st, attempt)
    return _NO_SCOPE if span is None else _Current(span)


def enabled() -> bool:
    """Whether spans are being made (a collector was named)."""
    return _state is not None


def attempt_recorded(attempt: Any, outcome: str, error: str | None) -> None:
    """End the attempt's span with the outcome that was written (done, failed, timeout, dead, handed_back).

    An attempt whose outcome could not be written (its lease was lost) is not emitted here: the
    worker that reclaimed the run emits it, from the ids stored at claim time.
    """
    st = _state
    if st is None:
        return
    span = _span_of(st, attempt)
    if span is not None:
        span.finish(outcome, error)


def record_lost_attempt(attempt: Any, before: tuple[str | None, str | None] | None = None) -> None:
    """Emit the span of the previous attempt of a reclaimed run, whose worker could not.

    It carries the ids stored at that attempt's claim and its start time from the database, ends at
    this claim (the database's time), and has status ERROR "lease expired". It links to the slot's
    creator and, given `before` (the trace and span ids of the attempt before the lost one, from
    the run's history), to that attempt, for the reason the lost attempt was made: how that one
    ended, as the run recorded it before this claim.
    """
    st = _state
    a = attempt
    if st is None or not a.prev_trace_id or not a.prev_span_id:
        return
    name = f"process {a.schedule}"
    trace_id = int(a.prev_trace_id, 16)
    if not st.sampled(trace_id, name, SpanKind.CONSUMER):
        return
    from opentelemetry.sdk.trace import ReadableSpan

    attributes = _attempt_attributes(a.schedule, a.slot, a.attempt - 1, a.prev_worker, a.job)
    attributes["fleet.outcome"] = "lease_expired"
    attributes["error.type"] = "lease_expired"
    end = _unix_ns(a.started_at)  # this claim, by the database's clock
    st.emit(
        ReadableSpan(
            name=name,
            context=SpanContext(trace_id, int(a.prev_span_id, 16), is_remote=False, trace_flags=_SAMPLED),
            resource=st.resource,
            attributes=attributes,
            links=_link(a.created_trace_id, a.created_span_id, "created_by")
            + (_link(*before, _reason_after(a.prev_outcome)) if before else ()),
            kind=SpanKind.CONSUMER,
            status=Status(StatusCode.ERROR, "lease expired"),
            start_time=_unix_ns(a.prev_started_at) if a.prev_started_at else end,
            end_time=end,
            instrumentation_scope=st.scope,
        )
    )


def record_exception(exc: BaseException) -> None:
    """Record a handler's exception on the current span (the attempt's, while its handler runs)."""
    if _state is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.record_exception(exc)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (the attempt's, in its handler), when tracing is on."""
    if _state is None:
        return None
    sc = trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags) & 0xFF:02x}"


def _span_of(st: _State, a: Any) -> _AttemptSpan | None:
    span: _AttemptSpan | None = a.span
    if span is None:
        made = _AttemptSpan.of(st, a)
        with _lock:
            span = a.span
            if span is None:
                span = a.span = made
    return span


def _previous_reason(a: Any) -> str:
    """Why attempt `a` was made: its run's lease ran out, or how the attempt before it ended."""
    return "lease_reclaimed" if a.prev_status == "running" else _reason_after(a.prev_outcome)


def _reason_after(outcome: str | None) -> str:
    """The link reason of an attempt made after one that ended as `outcome`."""
    if outcome == "lease_expired":
        return "lease_reclaimed"
    return "handed_back" if outcome == "handed_back" else "retry"


def _attempt_attributes(
    schedule: str, slot: datetime, attempt: int, worker_id: str | None, job: str
) -> dict[str, Any]:
    slot_text = slot_iso(slot)
    key = f"{schedule}:{slot_text}"
    attributes: dict[str, Any] = {
        "messaging.system": "fleet",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": schedule,
        "messaging.message.id": key,
        "fleet.schedule": schedule,
        "fleet.slot": slot_text,
        "fleet.attempt": attempt,
        "fleet.idempotency_key": key,
        "fleet.job": job,
    }
    if worker_id:
        attributes["fleet.worker_id"] = worker_id
    return attributes


def _link(trace_hex: str | None, span_hex: str | None, reason: str) -> tuple[Link, ...]:
    if not trace_hex or not span_hex:
        return ()
    context = SpanContext(int(trace_hex, 16), int(span_hex, 16), is_remote=True, trace_flags=_SAMPLED)
    return (Link(context, {"fleet.link.reason": reason}),)


def _unix_ns(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(microseconds=1) * 1000


class _Current:
    """Makes a span current in this thread for the duration of a `with` block."""

    __slots__ = ("span", "token")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.token: Any = None

    def __enter__(self) -> None:
        # On an empty context: the attempt is a root, nothing ambient leaks into its handler.
        self.token = otel_context.attach(trace.set_span_in_context(self.span, _ROOT_CONTEXT))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        otel_context.detach(self.token)


class _AttemptSpan(trace.Span):
    """An attempt's root span. Open while the attempt runs (its handler may annotate it through the
    OpenTelemetry API); when its outcome is written it is queued as is, and `to_readable` builds
    the SDK span, with its attributes and links, on the export thread."""

    @classmethod
    def of(cls, st: _State, a: Any) -> _AttemptSpan | None:
        if not a.trace_id or not a.span_id:
            return None
        trace_id = int(a.trace_id, 16)
        sampled = st.sampler is None or st.sampled(trace_id, f"process {a.schedule}", SpanKind.CONSUMER)
        flags = _SAMPLED if sampled else _NOT_SAMPLED
        # Started when the claim returned: a monotonic instant, on this host's wall clock.
        start = int(a.started_mono * 1e9) + time.time_ns() - time.monotonic_ns()
        context = SpanContext(trace_id, int(a.span_id, 16), is_remote=False, trace_flags=flags)
        # What the exported span needs of the attempt, copied: the attempt refers to its span, and a
        # reference back would make a cycle that only the garbage collector frees, attempt and all.
        about = (
            a.schedule,
            a.slot,
            a.attempt,
            a.job,
            a.prev_trace_id,
            a.prev_span_id,
            _previous_reason(a),
            a.created_trace_id,
            a.created_span_id,
        )
        return cls(st, about, context, start)

    # What the handler or the outcome may set; class-level defaults keep creating a span cheap.
    _outcome: str | None = None
    _error: str | None = None
    _error_type: str | None = None
    _name: str | None = None  # default "process <schedule>"
    _status: Status | None = None  # an error outcome overrides it
    _extra: BoundedAttributes | None = None  # the handler's attributes, validated
    _events: tuple[Event, ...] = ()
    _links: tuple[Link, ...] = ()  # the handler's
    _end = 0

    def __init__(self, st: _State, about: tuple[Any, ...], context: SpanContext, start_ns: int) -> None:
        self._st = st
        self._about = about
        self._context = context
        self._start = start_ns
        self._open = context.trace_flags.sampled

    @property
    def context(self) -> SpanContext:
        """What a span processor checks (sampled?) before queueing."""
        return self._context

    def finish(self, outcome: str, error: str | None) -> None:
        """End with the attempt's written outcome."""
        with _lock:
            if not self._open:
                return
            self._open = False
            self._outcome = outcome
            self._error = error
            self._end = time.time_ns()
        self._st.emit(self)

    def end(self, end_time: int | None = None) -> None:
        with _lock:
            if not self._open:
                return
            self._open = False
            self._end = end_time or time.time_ns()
        self._st.emit(self)

    def to_readable(self) -> ReadableSpan:
        """The SDK span, built once the attempt's span is ended (on the export thread)."""
        from opentelemetry.sdk.trace import ReadableSpan

        st = self._st
        schedule, slot, attempt, job, prev_trace, prev_span, prev_reason, created_trace, created_span = (
            self._about
        )
        attributes = _attempt_attributes(schedule, slot, attempt, st.instance_id, job)
        status = self._status or Status(StatusCode.UNSET)
        if self._outcome is not None:
            attributes["fleet.outcome"] = self._outcome
            if self._outcome in _ERROR_OUTCOMES:
                attributes["error.type"] = self._error_type or self._outcome
                status = Status(StatusCode.ERROR, (self._error or self._outcome)[:500])
        if self._extra:
            attributes = {**self._extra, **attributes}
        links = (
            _link(prev_trace, prev_span, prev_reason)
            + _link(created_trace, created_span, "created_by")
            + self._links
        )
        return ReadableSpan(
            name=self._name or f"process {schedule}",
            context=self._context,
            resource=st.resource,
            attributes=attributes,
            events=self._events,
            links=links,
            kind=SpanKind.CONSUMER,
            status=status,
            start_time=self._start,
            end_time=self._end,
            instrumentation_scope=st.scope,
        )

    # -- the OpenTelemetry Span API, for handlers --

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._open

    def set_attributes(self, attributes: Mapping[str, otel_types.AnyValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_attribute(self, key: str, value: otel_types.AnyValue) -> None:
        with _lock:
            if self._open:
                if self._extra is None:
                    self._extra = BoundedAttributes(
                        _MAX_USER_ATTRIBUTES, immutable=False, max_value_len=MAX_VALUE_CHARS
                    )
                self._extra[key] = value

    def add_event(
        self, name: str, attributes: otel_types.Attributes = None, timestamp: int | None = None
    ) -> None:
        from opentelemetry.sdk.trace import Event

        bounded = BoundedAttributes(_MAX_USER_ATTRIBUTES, attributes, max_value_len=MAX_VALUE_CHARS)
        event = Event(name[:MAX_NAME_CHARS], bounded, timestamp)
        with _lock:
            if self._open and len(self._events) < _MAX_USER_EVENTS:
                self._events = (*self._events, event)

    def add_link(self, context: SpanContext, attributes: otel_types.Attributes = None) -> None:
        if not context.is_valid:
            return
        link = Link(
            context, BoundedAttributes(_MAX_USER_ATTRIBUTES, attributes, max_value_len=MAX_VALUE_CHARS)
        )
        with _lock:
            if self._open:
                self._links = (*self._links, link)

    def update_name(self, name: str) -> None:
        name = name[:MAX_NAME_CHARS]
        with _lock:
            if self._open:
                self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        new = status if isinstance(status, Status) else Status(status, description)
        with _lock:
            if self._open:
                self._status = new

    def record_exception(
        self,
        exception: BaseException,
        attributes: otel_types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        cls = type(exception)
        module = cls.__module__
        qualified = cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"
        event_attributes: dict[str, Any] = {
            "exception.type": qualified,
            "exception.message": _clip(_text_of(exception)),
            "exception.stacktrace": _clip(_stacktrace(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event_attributes.update(attributes)
        with _lock:
            if self._open:
                self._error_type = qualified
        self.add_event("exception", event_attributes, timestamp)


def _text_of(exception: BaseException) -> str:
    """str(exception), or what can be said when its __str__ itself fails."""
    try:
        return str(exception)
    except Exception:  # noqa: BLE001 - a handler's exception may be anything
        return f"<{type(exception).__qualname__} whose message cannot be printed>"


def _stacktrace(exception: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exception))
    except Exception:  # noqa: BLE001 - formatting calls the exception's __str__
        return "".join(traceback.format_tb(exception.__traceback__))


def _clip(text: str) -> str:
    """At most MAX_VALUE_CHARS: the head and the tail (where a traceback ends), the middle left out."""
    if len(text) <= MAX_VALUE_CHARS:
        return text
    half = MAX_VALUE_CHARS // 2 - 20
    return f"{text[:half]}\n… ({len(text) - 2 * half} characters left out) …\n{text[-half:]}"


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


# -- finding a slot in Jaeger ---------------------------------------------------------------------


def jaeger_search_url(base_url: str, schedule: str, slot: datetime, *, service: str = "fleet-worker") -> str:
    """A Jaeger UI search for every attempt of one slot (tags `fleet.schedule` and `fleet.slot`).

    The time range runs from an hour before the slot to a week after it, so attempts of an old slot
    are found too (the UI's default is the last hour).
    """
    if slot.tzinfo is None:
        slot = slot.replace(tzinfo=UTC)
    tags = json.dumps({"fleet.schedule": schedule, "fleet.slot": slot_iso(slot)}, separators=(",", ":"))
    query = urllib.parse.urlencode(
        {
            "service": service,
            "tags": tags,
            "lookback": "custom",
            "start": _unix_ns(slot - timedelta(hours=1)) // 1000,
            "end": _unix_ns(slot + timedelta(days=7)) // 1000,
            "limit": 100,
        }
    )
    return f"{base_url.rstrip('/')}/search?{query}"
