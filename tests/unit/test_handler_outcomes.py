"""Every way a handler can end is an outcome of its attempt, sync or async."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from fleet import Permanent
from fleet.jobs import JobContext, is_async
from fleet.worker.attempt import execute, execute_async

from .test_job_context import SLOT


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text")


def ctx() -> JobContext:
    return JobContext("s", SLOT, 1, {}, "w")


def raising(e: BaseException) -> Any:
    def handler(_: JobContext) -> None:
        raise e

    return handler


@pytest.mark.parametrize(
    ("exc", "verdict", "text"),
    [
        (SystemExit(3), "failed", "SystemExit: 3"),
        (KeyboardInterrupt(), "failed", "KeyboardInterrupt"),
        (GeneratorExit(), "failed", "GeneratorExit"),
        (Unprintable(), "failed", "Unprintable: <unprintable: str() raised ValueError>"),
        (RuntimeError("boom"), "failed", "RuntimeError: boom"),
        (Permanent("never"), "permanent", "Permanent: never"),
    ],
)
def test_any_exception_is_an_outcome(exc: BaseException, verdict: str, text: str) -> None:
    got, error, _ = execute(raising(exc), ctx())
    assert got == verdict and error is not None and error.startswith(text + " (at "), error
    got, error, _ = asyncio.run(execute_async(raising(exc), ctx()))
    assert got == verdict and error is not None and error.startswith(text + " (at "), error


def test_a_sync_handler_returning_an_awaitable_fails_and_its_coroutine_is_closed() -> None:
    ran = []

    async def work() -> None:
        ran.append(1)

    coro = work()
    verdict, error, _ = execute(lambda _: coro, ctx())
    assert verdict == "failed" and error is not None
    assert "returned coroutine, an awaitable that a handler thread cannot run" in error
    assert "async def" in error and inspect.getcoroutinestate(coro) == "CORO_CLOSED" and not ran
    assert execute(lambda _: 42, ctx()) == ("done", None, b"42")  # a return value is the result


def test_an_async_handler_runs_to_completion_and_cancellation_is_cancelled() -> None:
    steps: list[str] = []

    async def handler(c: JobContext) -> None:
        steps.append("start")
        await asyncio.sleep(0)
        steps.append("done")

    assert asyncio.run(execute_async(handler, ctx())) == ("done", None, None) and steps == ["start", "done"]

    async def cancelled() -> tuple[str, str | None, bytes | None]:
        async def forever(c: JobContext) -> None:
            await asyncio.sleep(3600)

        task = asyncio.ensure_future(execute_async(forever, ctx()))
        await asyncio.sleep(0)
        task.cancel()
        return await task

    assert asyncio.run(cancelled())[0] == "cancelled"


def test_is_async_is_what_python_says_of_the_function() -> None:
    import functools

    async def a(c: JobContext) -> None: ...

    def s(c: JobContext) -> None: ...

    @functools.wraps(a)
    def plain_wrapper(c: JobContext) -> Any:
        return a(c)

    @functools.wraps(a)
    async def async_wrapper(c: JobContext) -> None:
        await a(c)

    class Callable:
        async def __call__(self, c: JobContext) -> None: ...

    assert is_async(a) and is_async(async_wrapper) and is_async(Callable()) and is_async(functools.partial(a))
    assert not is_async(s) and not is_async(print)
    # A plain `def` wrapper is sync (it might run the coroutine itself); returning one fails clearly.
    assert not is_async(plain_wrapper)
    verdict, error, _ = execute(plain_wrapper, ctx())
    assert verdict == "failed" and error is not None and "(a decorator's wrapper too)" in error


def test_the_sync_wait_refuses_to_block_an_event_loop_and_sleep_returns_early_when_cancelled() -> None:
    async def handler(c: JobContext) -> None:
        c.wait(1)

    verdict, error, _ = asyncio.run(execute_async(handler, ctx()))
    assert verdict == "failed" and error is not None and "use `await ctx.sleep(seconds)`" in error

    async def sleeps() -> tuple[bool, bool]:
        c = ctx()
        slept = await c.sleep(0.01)
        c.cancel_event.set()
        return slept, await c.sleep(3600)

    assert asyncio.run(sleeps()) == (False, True)
