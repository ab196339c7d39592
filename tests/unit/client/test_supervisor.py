"""The task supervisor: crashes are kept, close cancels and awaits, cancellation flows."""

from __future__ import annotations

import asyncio

import pytest

from groupwire.client.errors import BackgroundTaskError, ClientClosedError
from groupwire.client.supervisor import TaskSupervisor, cancel_and_wait


async def test_a_crashed_task_is_kept_and_reported_not_lost() -> None:
    crashed = asyncio.Event()
    tasks = TaskSupervisor("test", on_crash=crashed.set)
    await tasks.start()
    sibling_cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            sibling_cancelled.set()
            raise

    async def bug() -> None:
        raise KeyError("boom")

    tasks.spawn(sibling(), name="sibling")
    tasks.spawn(bug(), name="bug")
    await crashed.wait()
    assert isinstance(tasks.error, BackgroundTaskError)
    cause = tasks.error.__cause__
    assert isinstance(cause, BaseExceptionGroup)
    assert isinstance(cause.exceptions[0], KeyError)
    assert sibling_cancelled.is_set()  # the group stopped its other tasks
    with pytest.raises(BackgroundTaskError):
        tasks.spawn(sibling(), name="late")
    await tasks.close(1.0)


async def test_a_cancelled_child_is_not_a_crash() -> None:
    tasks = TaskSupervisor("test")
    await tasks.start()
    child = tasks.spawn(asyncio.Event().wait(), name="child")
    await cancel_and_wait([child], 1.0)
    assert child.cancelled() and tasks.error is None
    other = tasks.spawn(asyncio.sleep(0), name="other")  # the group is still open
    await other
    await tasks.close(1.0)


async def test_close_cancels_children_but_lets_kept_ones_finish() -> None:
    tasks = TaskSupervisor("test")
    await tasks.start()
    release = asyncio.Event()
    idle = tasks.spawn(asyncio.Event().wait(), name="idle")

    async def finishing() -> str:
        await release.wait()
        return "done"

    kept = tasks.spawn(finishing(), name="kept")
    closing = asyncio.ensure_future(tasks.close(5.0, keep=[kept]))
    await asyncio.wait({idle})
    assert idle.cancelled() and not kept.done() and not closing.done()
    release.set()
    await closing
    assert kept.result() == "done" and tasks.error is None
    with pytest.raises(ClientClosedError):
        tasks.spawn(asyncio.sleep(0), name="after")


async def test_close_waits_a_bounded_time_for_a_child_that_ignores_cancellation() -> None:
    tasks = TaskSupervisor("test")
    await tasks.start()
    stubborn_stop = asyncio.Event()

    async def stubborn() -> None:
        while not stubborn_stop.is_set():
            try:
                await stubborn_stop.wait()
            except asyncio.CancelledError:
                continue  # ignores cancellation (a bug this must survive)

    child = tasks.spawn(stubborn(), name="stubborn")
    await asyncio.sleep(0)  # let it start, so it sees the cancellation
    await tasks.close(0.01)  # returns although the child still runs
    assert not child.done()
    stubborn_stop.set()
    await asyncio.wait({child})


async def test_cancel_and_wait_does_not_swallow_its_callers_cancellation() -> None:
    stop = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await stop.wait()
            raise

    child = asyncio.ensure_future(slow_to_stop())
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(cancel_and_wait([child], None))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.wait({waiter})
    assert waiter.cancelled()
    stop.set()
    await asyncio.wait({child})
    assert child.cancelled()
