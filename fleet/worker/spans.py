"""An attempt's span: made from the ids its claim stored, current while its handler runs, ended with
the outcome the worker wrote; and the span of an attempt whose worker died, emitted by the worker
that reclaims its run. (Tracing's set-up and the tick spans are the core's: fleet.observe.telemetry.)"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types as otel_types

from fleet.jobs import slot_iso
from fleet.observe import telemetry
from fleet.worker.attempt import Attempt

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Event, ReadableSpan


_MAX_USER_ATTRIBUTES = 128  # what a handler may add to its attempt's span (the SDK's default limits)
_MAX_USER_EVENTS = 128
# Length limits on what a handler or its exception puts in a span: a 1 MB exception text is clipped
# like the database's copy of it, and a span stays small enough for any collector.
MAX_VALUE_CHARS = 4096
MAX_NAME_CHARS = 256
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_ERROR_OUTCOMES = frozenset({"failed", "timeout", "dead", "lease_expired"})
_NO_SCOPE: AbstractContextManager[None] = nullcontext()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ROOT_CONTEXT = otel_context.Context()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


# -- attempts -------------------------------------------------------------------------------------


def attempt_span(attempt: Attempt, ctx: Any) -> AbstractContextManager[None]:
    """Make the attempt's span current in this thread (for the handler's spans and TRACEPARENT)."""
    st = telemetry.state()
    if st is None:
        return _NO_SCOPE
    span = _span_of(st, attempt)
    return _NO_SCOPE if span is None else _Current(span)


def attempt_recorded(attempt: Attempt, outcome: str, error: str | None) -> None:
    """End the attempt's span with the outcome that was written (done, failed, timeout, dead, handed_back).

    An attempt whose outcome could not be written (its lease was lost) is not emitted here: the
    worker that reclaimed the run emits it, from the ids stored at claim time.
    """
    st = telemetry.state()
    if st is None:
        return
    span = _span_of(st, attempt)
    if span is not None:
        span.finish(outcome, error)


def record_lost_attempt(attempt: Attempt, before: tuple[str | None, str | None] | None = None) -> None:
    """Emit the span of the previous attempt of a reclaimed run, whose worker could not.

    It carries the ids stored at that attempt's claim and its start time from the database, ends at
    this claim (the database's time), and has status ERROR "lease expired". It links to the slot's
    creator and, given `before` (the trace and span ids of the attempt before the lost one, from
    the run's history), to that attempt, for the reason the lost attempt was made: how that one
    ended, as the run recorded it before this claim.
    """
    st = telemetry.state()
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
    end = telemetry.unix_ns(a.started_at)  # this claim, by the database's clock
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
            start_time=telemetry.unix_ns(a.prev_started_at) if a.prev_started_at else end,
            end_time=end,
            instrumentation_scope=st.scope,
        )
    )


def _span_of(st: telemetry.State, a: Attempt) -> _AttemptSpan | None:
    span: _AttemptSpan | None = a.span
    if span is None:
        made = _AttemptSpan.of(st, a)
        with telemetry.SPAN_LOCK:
            span = a.span
            if span is None:
                span = a.span = made
    return span


def _previous_reason(a: Attempt) -> str:
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
    def of(cls, st: telemetry.State, a: Attempt) -> _AttemptSpan | None:
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

    def __init__(
        self, st: telemetry.State, about: tuple[Any, ...], context: SpanContext, start_ns: int
    ) -> None:
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
        with telemetry.SPAN_LOCK:
            if not self._open:
                return
            self._open = False
            self._outcome = outcome
            self._error = error
            self._end = time.time_ns()
        self._st.emit(self)

    def end(self, end_time: int | None = None) -> None:
        with telemetry.SPAN_LOCK:
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
        with telemetry.SPAN_LOCK:
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
        with telemetry.SPAN_LOCK:
            if self._open and len(self._events) < _MAX_USER_EVENTS:
                self._events = (*self._events, event)

    def add_link(self, context: SpanContext, attributes: otel_types.Attributes = None) -> None:
        if not context.is_valid:
            return
        link = Link(
            context, BoundedAttributes(_MAX_USER_ATTRIBUTES, attributes, max_value_len=MAX_VALUE_CHARS)
        )
        with telemetry.SPAN_LOCK:
            if self._open:
                self._links = (*self._links, link)

    def update_name(self, name: str) -> None:
        name = name[:MAX_NAME_CHARS]
        with telemetry.SPAN_LOCK:
            if self._open:
                self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        new = status if isinstance(status, Status) else Status(status, description)
        with telemetry.SPAN_LOCK:
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
        with telemetry.SPAN_LOCK:
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
