"""An OTLP/HTTP receiver for tests: what Jaeger's port 4318 would ingest, decoded into plain records.

It accepts `POST /v1/traces` (protobuf, gzip or not) on 127.0.0.1 and keeps every span it receives;
`search` filters them the way a Jaeger tag search does (span or resource attributes, as strings).
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

KINDS = {
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_PRODUCER: "producer",
    Span.SPAN_KIND_CONSUMER: "consumer",
}
STATUSES = {Status.STATUS_CODE_UNSET: "unset", Status.STATUS_CODE_OK: "ok", Status.STATUS_CODE_ERROR: "error"}


@dataclass
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass
class Event:
    name: str
    attributes: dict[str, Any]


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: str
    status_message: str
    links: list[Link] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @property
    def service(self) -> str:
        return str(self.resource.get("service.name", ""))

    def link(self, reason: str) -> Link | None:
        found = [k for k in self.links if k.attributes.get("fleet.link.reason") == reason]
        assert len(found) <= 1, found
        return found[0] if found else None


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return _attributes(v.kvlist_value.values)
    return getattr(v, kind) if kind else None


def _attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = _value(kv.value)
    return out


def decode(body: bytes) -> list[ReceivedSpan]:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    spans = []
    for rs in req.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        name=s.name,
                        kind=KINDS[s.kind],
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=_attributes(s.attributes),
                        resource=resource,
                        status=STATUSES[s.status.code],
                        status_message=s.status.message,
                        links=[
                            Link(k.trace_id.hex(), k.span_id.hex(), _attributes(k.attributes))
                            for k in s.links
                        ],
                        events=[Event(e.name, _attributes(e.attributes)) for e in s.events],
                    )
                )
    return spans


class Receiver:
    """The spans received so far (thread-safe), and Jaeger-like searches over them."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.requests = 0
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.requests += 1
            self._spans.extend(spans)

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def search(self, service: str | None = None, **tags: Any) -> list[ReceivedSpan]:
        """Spans of `service` whose span or resource attributes match every tag, compared as strings
        (as Jaeger does). Keyword names use `__` for dots: fleet__slot="..."."""
        want = {k.replace("__", "."): str(v) for k, v in tags.items()}

        def matches(s: ReceivedSpan) -> bool:
            merged = {**s.resource, **s.attributes}
            return all(k in merged and str(merged[k]) == v for k, v in want.items())

        return [s for s in self.spans if (service is None or s.service == service) and matches(s)]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening on a free loopback port; `receiver.endpoint` is the OTLP base URL."""
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            received.add(decode(body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
