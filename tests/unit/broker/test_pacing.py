"""Steps run a slice at a time: a short request is finished in the call, a long one is
handed on, and the loop turns between its slices."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from groupwire.broker.pacing import run_slice, sliced
from groupwire.protocol.steps import Steps, run_steps


def counting(n: int, done: list[int]) -> Steps[str]:
    for i in range(n):
        done.append(i)
        yield
    return f"{n} steps"


def test_a_slice_always_moves_on_and_stops_when_spent() -> None:
    done: list[int] = []
    steps = counting(3, done)
    assert run_slice(steps, 0.0) == (False, None)
    assert done == [0]  # one step even with no time at all
    assert run_slice(steps, 3600.0) == (True, "3 steps")
    assert done == [0, 1, 2]


def test_run_steps_runs_everything() -> None:
    assert run_steps(counting(4, [])) == "4 steps"


def test_short_work_finishes_in_the_call_without_deferring() -> None:
    finished: list[str] = []
    deferred: list[Coroutine[Any, Any, None]] = []
    sliced(counting(2, []), 3600.0, finished.append, deferred.append)
    assert finished == ["2 steps"] and not deferred


async def test_long_work_is_deferred_and_lets_the_loop_turn_between_slices() -> None:
    finished: list[str] = []
    deferred: list[Coroutine[Any, Any, None]] = []
    done: list[int] = []
    sliced(counting(5, done), 0.0, finished.append, deferred.append)
    assert not finished and len(deferred) == 1 and done == [0]
    turns = 0

    async def other() -> None:
        nonlocal turns
        while not finished:
            turns += 1
            await asyncio.sleep(0)

    await asyncio.gather(deferred[0], other())
    assert finished == ["5 steps"] and done == [0, 1, 2, 3, 4]
    assert turns >= 4  # the other task ran between the slices
