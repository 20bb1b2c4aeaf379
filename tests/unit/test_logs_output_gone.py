"""The log's reader gone: a process that asked to be told is told once and its lines are dropped; any
other write raises BrokenPipeError, as a command's own output does."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fleet.observe import logs


class Closed(io.BytesIO):
    """A pipe whose reader went away after `keep` writes."""

    def __init__(self, keep: int = 0) -> None:
        super().__init__()
        self.keep = keep
        self.lines: list[bytes] = []

    def write(self, b: Any, /) -> int:
        if len(self.lines) >= self.keep:
            raise BrokenPipeError(32, "Broken pipe")
        self.lines.append(bytes(b))
        return len(self.lines[-1])


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    logs.configure()


def test_the_reader_gone_the_process_is_told_once_and_lines_are_dropped() -> None:
    told: list[str] = []
    stream = Closed(keep=1)
    logs.configure("json", stream=stream, on_output_gone=lambda: told.append(threading.current_thread().name))
    logs.event("ticker_started", ticker_id="t")
    assert not logs.output_gone()
    logs.event("tick", created=1)  # no reader from here on: no error
    with logs.batched():
        logs.event("tick", created=2)
    logs.attempt_event("claimed", logs.Fields(schedule="s"), None, None, None)
    assert told == [threading.current_thread().name]  # once, on the thread that wrote
    assert logs.output_gone()
    assert len(stream.lines) == 1 and b'"ticker_started"' in stream.lines[0]
    logs.configure("json", stream=io.BytesIO())
    assert not logs.output_gone()  # a new output


def test_without_a_callback_the_write_raises_as_a_commands_output_does() -> None:
    logs.configure("json", stream=Closed())
    with pytest.raises(BrokenPipeError):
        logs.event("metrics_started")
    with pytest.raises(BrokenPipeError):
        logs.event("metrics_started")
    assert not logs.output_gone()
