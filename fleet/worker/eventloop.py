"""The worker's event loop: one thread on which every `async def` handler of the process runs."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from fleet import logs, telemetry
from fleet.jobs import Handler
from fleet.worker import spans
from fleet.worker.attempt import Attempt, error_text, execute_async

Verdict = tuple[str, str | None]


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
    ) -> None:
        super().__init__(name="fleet-async", daemon=True)
        self.handlers = handlers
        self.worker_id = worker_id
        self.may_start = may_start
        self.returned = returned
        self.loop = asyncio.new_event_loop()
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks
        self.halted = False

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(self._unhandled)
        try:
            while not self.halted:
                try:
                    self.loop.run_forever()
                except BaseException as e:  # noqa: BLE001 - a handler's own task ended the loop: run on
                    # (KeyboardInterrupt and SystemExit in a task leave run_forever; the attempts are
                    # awaited inside a guard, but a handler may start tasks of its own.)
                    logs.event("event_loop_error", worker_id=self.worker_id, error=error_text(e))
        finally:
            self.loop.close()

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
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _run(self, a: Attempt, tracing: bool) -> None:
        try:
            if not self.may_start(a):
                verdict: Verdict = ("cancelled", None)
            else:
                task = asyncio.current_task()
                assert task is not None
                # From whichever thread cancels the attempt (heartbeat, lease watch, the worker loop).
                a.cancel.on_set(lambda: self._cancel(task))
                ctx = a.context(self.worker_id)
                if tracing:
                    with spans.attempt_span(a, ctx):
                        verdict = await execute_async(self.handlers[a.job], ctx)
                else:
                    verdict = await execute_async(self.handlers[a.job], ctx)
        except BaseException as e:  # noqa: BLE001 - every attempt gets a verdict, the loop runs on
            verdict = ("cancelled" if isinstance(e, asyncio.CancelledError) else "failed", error_text(e))
        self.returned(a, verdict)
