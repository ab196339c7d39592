"""Ownership of a client's background tasks, in one ``asyncio.TaskGroup``.

Every task the consumer starts on the application's loop (join/sync, fetch, the revoke
and leave after ``unsubscribe()``) is a child of one task group, held open by a
supervising task. A child that ends with an exception it was not meant to raise (a bug)
stops the group; the crash is kept as :attr:`TaskSupervisor.error` and the client raises
it from its next call, instead of the task vanishing with an unread exception. Closing
cancels the children and waits for them, bounded in time; cancellation is never
swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from groupwire.client.errors import BackgroundTaskError, ClientClosedError

__all__ = ["TaskSupervisor", "cancel_and_wait"]

log = logging.getLogger("groupwire.client.supervisor")

T = TypeVar("T")


class TaskSupervisor:
    """A task group that outlives any one call: ``start()``, ``spawn()``, ``close()``."""

    def __init__(self, name: str, *, on_crash: Callable[[], None] | None = None) -> None:
        self._name = name
        self._on_crash = on_crash
        self._group: asyncio.TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._children: set[asyncio.Task[Any]] = set()
        self.error: BackgroundTaskError | None = None

    async def start(self) -> None:
        """Open the group; returns once ``spawn`` may be called."""
        if self._runner is not None:
            return
        ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._runner = asyncio.get_running_loop().create_task(
            self._supervise(ready), name=f"{self._name}-supervisor")
        ready_wait = asyncio.ensure_future(ready.wait())
        await asyncio.wait({ready_wait, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        ready_wait.cancel()

    async def _supervise(self, ready: asyncio.Event) -> None:
        assert self._stop is not None
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                ready.set()
                await self._stop.wait()
        except* Exception as crashed:  # CancelledError (close) is not caught here
            first = crashed.exceptions[0]
            log.error("%s: a background task crashed: %r", self._name, first,
                      exc_info=first)
            err = BackgroundTaskError(f"a background task of {self._name} crashed: {first!r}")
            err.__cause__ = crashed
            self.error = err
            if self._on_crash is not None:
                self._on_crash()
        finally:
            self._group = None

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``coro`` as a child of the group (ClientClosedError once it has ended)."""
        group = self._group
        if group is None:
            coro.close()
            if self.error is not None:
                raise self.error
            raise ClientClosedError(f"{self._name} is closed")
        task = group.create_task(coro, name=name)
        self._children.add(task)
        task.add_done_callback(self._children.discard)
        return task

    async def close(self, timeout: float, *, keep: Iterable[asyncio.Task[Any]] = ()) -> None:
        """Cancel every child but ``keep`` (those may finish), then end the group; each
        wait is bounded by ``timeout`` seconds."""
        kept = set(keep)
        await cancel_and_wait([t for t in self._children if t not in kept], timeout,
                              also=kept)
        if self._stop is not None:
            self._stop.set()
        runner = self._runner
        if runner is not None:
            await cancel_and_wait([], timeout, also=[runner])
            if not runner.done():  # a child ignores cancellation: give up the group
                runner.cancel()
                await cancel_and_wait([], timeout, also=[runner])


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], timeout: float | None, *,
                          also: Iterable[asyncio.Task[Any]] = ()) -> None:
    """Cancel ``tasks``, then wait up to ``timeout`` s (None: no bound) for them and
    ``also`` to end.

    Unlike awaiting each task under ``suppress(CancelledError)``, a cancellation of the
    caller itself still propagates; the tasks' own outcomes are read so none is reported
    as never retrieved.
    """
    cancelled = list(tasks)
    for task in cancelled:
        task.cancel()
    waiting = {*cancelled, *also}
    if not waiting:
        return
    done, _ = await asyncio.wait(waiting, timeout=timeout)
    for task in done:
        if not task.cancelled():
            with contextlib.suppress(Exception):
                task.exception()
