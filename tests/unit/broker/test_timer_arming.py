"""The broker's one timer (issue 24, item 8): deadlines are on the event loop's clock, so
the loop timer is armed for the deadline itself, not for a delay computed from another
clock and rounded; and a wake-up the loop runs for a deadline finds that deadline due."""

from __future__ import annotations

from pathlib import Path

from groupwire.broker.config import BrokerSettings
from groupwire.broker.coordinator import Coordinator, SetTimer
from groupwire.broker.server import Broker

KEY = ("join", "g")


def _broker(tmp_path: Path) -> Broker:
    settings = BrokerSettings(data_dir=tmp_path, port=0, metrics_port=-1)
    broker = Broker(settings)
    broker.coordinator = Coordinator(settings.coordinator_config(), lambda _t: None)
    return broker


async def test_the_loop_timer_is_armed_for_the_exact_deadline(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    deadline = broker.monotonic() + 1234
    broker._apply_timers((SetTimer(KEY, deadline),))
    handle = broker._timer_handle
    assert handle is not None
    assert handle.when() == deadline / 1000  # the loop's clock, in seconds
    handle.cancel()


async def test_a_wake_up_for_a_deadline_fires_it_even_a_hair_early(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    deadline = broker.monotonic() + 1  # not yet reached when the wake-up runs below
    broker._apply_timers((SetTimer(KEY, deadline), SetTimer(("join", "later"), deadline + 5)))
    handle = broker._timer_handle
    assert handle is not None
    handle.cancel()
    broker._fire_timers()  # as the loop runs it, within its clock's resolution
    assert KEY not in broker._timers  # fired, not put back for another turn
    assert broker._timer_deadline == deadline + 5  # and the next one armed
    assert broker._timer_handle is not None
    broker._timer_handle.cancel()
