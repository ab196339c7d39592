"""Every long-lived task of a running broker is supervised: a failure injected into
each is logged, counted in groupwire_background_task_failures_total{task} and the task
runs again; one that keeps failing stops the broker with an error (issue 24, item 1)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.offsets_log import OffsetsLog
from groupwire.broker.server import Broker
from groupwire.broker.supervisor import Restart
from groupwire.cli import broker as broker_command
from groupwire.cli.errors import CliError
from tests.integration.cluster.harness import LocalCluster
from tests.integration.conftest import fast_settings

QUICK = Restart(initial_backoff_s=0.001, max_backoff_s=0.01, max_failures=2)
BOUND_S = 10.0


def failures(broker: Broker, task: str) -> float:
    value = broker.metrics.registry.get_sample_value(
        "groupwire_background_task_failures_total", {"task": task})
    return value or 0.0


def fail_once(real: Any, ran_again: asyncio.Event) -> Any:
    """``real`` with its first call raising; calls after it set ``ran_again``."""
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("injected")
        ran_again.set()
        return real(*args, **kwargs)
    return wrapper


async def start(tmp_path: Path, **overrides: Any) -> Broker:
    broker = Broker(fast_settings(tmp_path / "data", **overrides), restart=QUICK)
    await broker.start()
    return broker


async def test_log_retention_restarts_after_a_crash(tmp_path: Path) -> None:
    broker = Broker(fast_settings(tmp_path / "data", log_retention_check_interval_ms=5),
                    restart=QUICK)
    ran_again = asyncio.Event()
    broker.apply_log_retention = fail_once(  # type: ignore[method-assign]
        broker.apply_log_retention, ran_again)
    await broker.start()
    try:
        await asyncio.wait_for(ran_again.wait(), BOUND_S)
        assert failures(broker, "log-retention") == 1
        assert broker.fatal_error is None
    finally:
        await broker.close()


async def test_interval_fsync_restarts_after_a_crash(tmp_path: Path) -> None:
    broker = await start(tmp_path, fsync="interval", flush_interval_ms=5)
    try:
        assert broker.store is not None
        ran_again = asyncio.Event()
        broker.store.take_dirty = fail_once(  # type: ignore[method-assign]
            broker.store.take_dirty, ran_again)
        await asyncio.wait_for(ran_again.wait(), BOUND_S)
        assert failures(broker, "interval-fsync") == 1
    finally:
        await broker.close()


async def test_loop_monitor_restarts_after_a_crash(tmp_path: Path) -> None:
    broker = await start(tmp_path)
    try:
        ran_again = asyncio.Event()
        monitor = broker.loop_monitor
        monitor.record = fail_once(monitor.record, ran_again)  # type: ignore[method-assign]
        await asyncio.wait_for(ran_again.wait(), BOUND_S)
        assert failures(broker, "loop-monitor") == 1
    finally:
        await broker.close()


async def test_a_task_that_keeps_failing_stops_the_broker(tmp_path: Path) -> None:
    broker = Broker(fast_settings(tmp_path / "data", log_retention_check_interval_ms=1),
                    restart=QUICK)

    def broken() -> None:
        raise RuntimeError("disk on fire")
    broker.apply_log_retention = broken  # type: ignore[method-assign]
    await broker.start()
    try:
        await asyncio.wait_for(broker.serve_until_stopped(), BOUND_S)
        assert broker.fatal_error is not None
        assert "log-retention" in broker.fatal_error and "disk on fire" in broker.fatal_error
        assert failures(broker, "log-retention") == QUICK.max_failures + 1
    finally:
        await broker.close()


async def test_the_broker_command_exits_non_zero_when_a_task_is_fatal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Broker) -> None:
        raise RuntimeError("disk on fire")
    monkeypatch.setattr(Broker, "apply_log_retention", broken)
    monkeypatch.setattr(broker_command, "Broker", functools.partial(Broker, restart=QUICK))
    settings = fast_settings(tmp_path / "data", log_retention_check_interval_ms=1)
    with pytest.raises(CliError, match="stopped: background task log-retention failed"):
        await asyncio.wait_for(broker_command.run_broker(settings), BOUND_S)


async def test_a_group_load_that_fails_is_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster mode: an offsets partition's load that raises leaves its groups loading
    only until the retry, not answering COORDINATOR_LOAD_IN_PROGRESS forever."""
    real = OffsetsLog.replay_partition
    failed: list[int] = []

    def replay(self: OffsetsLog, p: int) -> Any:
        if not failed:
            failed.append(p)
            raise KeyError("injected")
        return real(self, p)
    monkeypatch.setattr(OffsetsLog, "replay_partition", replay)
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=2,
                     offsets_topic_replication_factor=1)
    try:
        await c.start(1)
        broker = c.brokers[1]
        await c.serving(2)
        loads = [s for s in broker.supervisor.services() if s.kind == "group-load"]
        assert len(loads) == 2
        await asyncio.wait_for(asyncio.gather(*(s.task for s in loads)), BOUND_S)
        assert broker._hosted == {0, 1}
        assert failed and failures(broker, "group-load") == 1
        assert broker.fatal_error is None
    finally:
        await c.close()
