"""Run a request's steps (``protocol.steps``) in time slices, so no request holds the
event loop for longer than one slice (docs/protocol.md §2, rule 6).

Most requests finish inside their first slice and are answered as before, in the same
call, at no extra cost. One that does not is carried on by a task: the connection takes
none of its later requests until it is done (``Peer.hold``), so a client still sees its
requests take effect in order, while every other connection, heartbeat and timer gets a
turn of the loop between slices.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from groupwire.protocol.steps import Steps

T = TypeVar("T")

_clock = time.perf_counter


def run_slice(steps: Steps[T], slice_s: float) -> tuple[bool, T | None]:
    """Run steps until they finish or ``slice_s`` has passed: ``(done, result)``.

    At least one step runs, so work always moves on, however short the slice.
    """
    deadline = _clock() + slice_s
    try:
        while True:
            next(steps)
            if _clock() >= deadline:
                return False, None
    except StopIteration as finished:
        return True, finished.value


async def finish_in_slices(steps: Steps[T], slice_s: float) -> T:
    """Run what is left of ``steps``, yielding the loop once per slice."""
    while True:
        await asyncio.sleep(0)
        done, result = run_slice(steps, slice_s)
        if done:
            return result  # type: ignore[return-value]


def sliced(steps: Steps[T], slice_s: float, finish: Callable[[T], None],
           defer: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    """Run ``steps``; call ``finish(result)`` now if one slice was enough, else hand the
    rest to ``defer`` (which holds the connection) as a coroutine that finishes it."""
    done, result = run_slice(steps, slice_s)
    if done:
        finish(result)  # type: ignore[arg-type]
        return

    async def rest() -> None:
        finish(await finish_in_slices(steps, slice_s))

    defer(rest())
