"""The worker's event loop: one thread on which every `async def` handler of the process runs, and
the watch that notices when a handler blocks it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from fleet.jobs import Handler
from fleet.observe import logs, telemetry
from fleet.worker import spans
from fleet.worker.attempt import Attempt, Look, Verdict, error_text, execute_async

# A loop that has not run its beat for this long is blocked: a handler runs code that does not await
# (`time.sleep`, a synchronous client, a long computation), and every other async run waits for it.
BLOCKED_AFTER_S = 1.0
_BEAT_S = 0.1


class EventLoop(threading.Thread):
    """Runs async attempts as tasks of one asyncio loop, each to a verdict handed to `returned`.

    The worker bounds how many it gives at once (`--async-concurrency`); the loop holds no queue of
    its own. An attempt cancelled by the worker (lease lost, timed out, handed back) has its task
    cancelled: the handler sees `asyncio.CancelledError` at the await it is in.
    """

    def __init__(
        self,
        handlers: dict[str, Handler],
        worker_id: str,
        may_start: Callable[[Attempt], bool],
        returned: Callable[[Attempt, Verdict], None],
        look: Look | None = None,
    ) -> None:
        super().__init__(name="fleet-async", daemon=True)
        self.look = look  # the windows' previous successes, looked up at a handler's first read
        self.handlers = handlers
        self.worker_id = worker_id
        self.may_start = may_start
        self.returned = returned
        self.loop = asyncio.new_event_loop()
        # The loop keeps only weak references to tasks; an attempt's task maps to its attempt.
        self.tasks: dict[asyncio.Task[None], Attempt] = {}
        self.halted = False
        self.beat = time.monotonic()  # when the loop last ran its beat
        self.watch = LoopWatch(self, BLOCKED_AFTER_S)

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(self._unhandled)
        self.loop.call_soon(self._beat)
        self.watch.start()
        try:
            while not self.halted:
                try:
                    self.loop.run_forever()
                except BaseException as e:  # noqa: BLE001 - a handler's own task ended the loop: run on
                    # (KeyboardInterrupt and SystemExit in a task leave run_forever; the attempts are
                    # awaited inside a guard, but a handler may start tasks of its own.)
                    logs.event("event_loop_error", worker_id=self.worker_id, error=error_text(e))
        finally:
            self.watch.halt.set()
            self.loop.close()

    def _beat(self) -> None:
        self.beat = time.monotonic()
        self.loop.call_later(_BEAT_S, self._beat)

    def _unhandled(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An error no task awaited (a handler's own background task): logged, as a line of ours."""
        e = context.get("exception")
        text = error_text(e) if isinstance(e, BaseException) else str(context.get("message"))
        logs.event("event_loop_error", worker_id=self.worker_id, error=text)

    def submit(self, attempts: Sequence[Attempt]) -> None:
        """Start `attempts` on the loop (callable from any thread)."""
        self.loop.call_soon_threadsafe(self._start, list(attempts))

    def halt(self) -> None:
        """Stop the loop; tasks still running are dropped with it (the worker handed their runs back)."""
        self.halted = True
        with contextlib.suppress(RuntimeError):  # closed already
            self.loop.call_soon_threadsafe(self.loop.stop)

    def _cancel(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is exiting
            self.loop.call_soon_threadsafe(task.cancel)

    def _start(self, attempts: list[Attempt]) -> None:
        tracing = telemetry.enabled()
        for a in attempts:
            task = self.loop.create_task(self._run(a, tracing))
            self.tasks[task] = a
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)

    def blocked(self) -> tuple[Attempt | None, str | None, int]:
        """What blocks the loop now, read from another thread: the attempt whose task runs (None when
        the code is no attempt's, a handler's own background task), where its code is, and how many
        async runs are in flight."""
        task = asyncio.current_task(self.loop)  # a read of the loop's current task: any thread may
        attempt = self.tasks.get(task) if task is not None else None
        frame = sys._current_frames().get(self.ident) if self.ident is not None else None
        return attempt, _where(frame), len(self.tasks)

    async def _run(self, a: Attempt, tracing: bool) -> None:
        try:
            if not self.may_start(a):
                verdict: Verdict = ("cancelled", None, None)
            else:
                task = asyncio.current_task()
                assert task is not None
                # From whichever thread cancels the attempt (heartbeat, lease watch, the worker loop).
                a.cancel.on_set(lambda: self._cancel(task))
                ctx = a.context(self.worker_id, self.look)
                if tracing:
                    with spans.attempt_span(a, ctx):
                        verdict = await execute_async(self.handlers[a.job], ctx)
                else:
                    verdict = await execute_async(self.handlers[a.job], ctx)
        except BaseException as e:  # noqa: BLE001 - every attempt gets a verdict, the loop runs on
            verdict = (
                "cancelled" if isinstance(e, asyncio.CancelledError) else "failed",
                error_text(e),
                None,
            )
        self.returned(a, verdict)


class LoopWatch(threading.Thread):
    """Notices a blocked event loop (its beat late by `blocked_after_s`) and logs it once per
    stretch: `event_loop_blocked` when it is noticed, naming the attempt whose code blocks the loop
    and where, and `event_loop_resumed` with how long it lasted when the loop runs again."""

    def __init__(self, aio: EventLoop, blocked_after_s: float) -> None:
        super().__init__(name="fleet-async-watch", daemon=True)
        self.aio = aio
        self.blocked_after_s = blocked_after_s
        self.halt = threading.Event()

    def run(self) -> None:
        reported: tuple[logs.Fields, float] | None = None  # a stretch logged: its fields, its last beat
        period = min(_BEAT_S, self.blocked_after_s / 4)
        woke = time.monotonic()
        while not self.halt.wait(period):
            beat = self.aio.beat
            overslept = time.monotonic() - woke - period
            woke = time.monotonic()
            if overslept > self.blocked_after_s / 2:
                continue  # the whole process was paused (SIGSTOP, a suspended VM): the loop was not blocked
            if reported is not None:
                fields, last = reported
                if beat != last:  # the loop runs again: its first beat came as soon as it could
                    logs.event("event_loop_resumed", fields, blocked_s=round(beat - last, 1))
                    reported = None
            elif time.monotonic() - beat >= self.blocked_after_s and not self.aio.halted:
                a, where, in_flight = self.aio.blocked()
                fields = logs.Fields(
                    worker_id=self.aio.worker_id,
                    schedule=a.schedule if a else None,
                    slot=a.slot if a else None,
                    attempt=a.attempt if a else None,
                    job=a.job if a else None,
                )
                late = time.monotonic() - beat
                logs.event(
                    "event_loop_blocked", fields, blocked_s=round(late, 1), where=where, in_flight=in_flight
                )
                reported = (fields, beat)


# Frames that are not the application's: fleet's own, the standard library's (asyncio's), frozen ones.
_NOT_THE_APPS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    sysconfig.get_paths()["stdlib"] + os.sep,
    sysconfig.get_paths()["platstdlib"] + os.sep,
    "<",
)


def _where(frame: FrameType | None) -> str | None:
    """`file:line` of the innermost frame of the application's code on a thread's stack (the
    innermost frame when none is)."""
    found = frame
    while found is not None and found.f_code.co_filename.startswith(_NOT_THE_APPS):
        found = found.f_back
    found = found or frame
    return f"{found.f_code.co_filename}:{found.f_lineno}" if found is not None else None
