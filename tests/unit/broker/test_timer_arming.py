"""The broker's one timer (issue 24, item 8): deadlines are on the event loop's clock, so
the loop timer is armed for the deadline itself, not for a delay computed from another
clock and rounded; and a wake-up the loop runs for a deadline finds that deadline due."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.coordinator import SetTimer
from groupwire.broker.group_runtime import GroupRuntime
from groupwire.broker.server import Broker

KEY = ("join", "g")


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[GroupRuntime]:
    """The timer of a started broker with no groups (so none of its own is armed)."""
    broker = Broker(BrokerSettings(data_dir=tmp_path, host="127.0.0.1", port=0,
                                   metrics_port=-1))
    await broker.start()
    try:
        yield broker.started.runtime
    finally:
        await broker.close()


async def test_the_loop_timer_is_armed_for_the_exact_deadline(runtime: GroupRuntime) -> None:
    broker = runtime
    deadline = broker.now() + 1234
    broker._apply_timers((SetTimer(KEY, deadline),))
    handle = broker._timer_handle
    assert handle is not None
    assert handle.when() == deadline / 1000  # the loop's clock, in seconds
    handle.cancel()


async def test_a_wake_up_for_a_deadline_fires_it_even_a_hair_early(
        runtime: GroupRuntime) -> None:
    broker = runtime
    deadline = broker.now() + 1  # not yet reached when the wake-up runs below
    broker._apply_timers((SetTimer(KEY, deadline), SetTimer(("join", "later"), deadline + 5)))
    handle = broker._timer_handle
    assert handle is not None
    handle.cancel()
    broker._fire_timers()  # as the loop runs it, within its clock's resolution
    assert KEY not in broker._timers  # fired, not put back for another turn
    assert broker._timer_deadline == deadline + 5  # and the next one armed
    assert broker._timer_handle is not None
    broker._timer_handle.cancel()
