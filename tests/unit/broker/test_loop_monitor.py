"""The loop monitor reports a stall as long as the one that happened, and nothing else."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prometheus_client import generate_latest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.loop_monitor import LoopMonitor
from groupwire.broker.server import Broker


def test_only_lateness_is_observed() -> None:
    seen: list[float] = []
    monitor = LoopMonitor(seen.append)
    for late in (-0.001, 0.0, 0.004, 0.25, 0.1):
        monitor.record(late)
    assert seen == [0.004, 0.25, 0.1]
    assert monitor.max_stall_s == 0.25


async def test_a_blocked_loop_is_seen_as_at_least_that_long() -> None:
    seen: list[float] = []
    monitor = LoopMonitor(seen.append, interval_s=0.005)
    monitor.start()
    try:
        await asyncio.sleep(0.02)  # the monitor's task is asleep in its interval
        time.sleep(0.2)  # the stall under test: the loop can run nothing meanwhile
        async with asyncio.timeout(5):  # a bound on the wait, not a timing under test
            while not seen or max(seen) < 0.15:
                await asyncio.sleep(0.005)  # until the monitor has woken and recorded it
    finally:
        await monitor.close()
    assert monitor.max_stall_s >= 0.15


async def test_the_broker_exports_its_stalls(tmp_path: Path) -> None:
    broker = Broker(BrokerSettings(host="127.0.0.1", port=0, data_dir=tmp_path,
                                   metrics_port=-1, log_level="error"))
    await broker.start()
    try:
        await asyncio.sleep(0.03)  # the monitor is now asleep in its interval
        time.sleep(0.05)  # the stall under test
        async with asyncio.timeout(5):
            while broker.loop_monitor.max_stall_s < 0.03:
                await asyncio.sleep(0.005)
        text = generate_latest(broker.metrics.registry).decode()
        count = next(line for line in text.splitlines()
                     if line.startswith("groupwire_event_loop_stall_seconds_count"))
        assert float(count.split()[1]) >= 1
        longest = next(line for line in text.splitlines()
                       if line.startswith("groupwire_event_loop_longest_stall_seconds "))
        assert float(longest.split()[1]) >= 0.03
    finally:
        await broker.close()
