"""The supervisor of the broker's background tasks: a crash is logged, counted and
restarted; repeated crashes are fatal; a stop is not a crash."""

from __future__ import annotations

import asyncio

import pytest
import structlog.testing

from groupwire.broker.supervisor import Restart, Supervisor

QUICK = Restart(initial_backoff_s=0.001, max_backoff_s=0.002, max_failures=3,
                failure_window_s=60.0)


async def test_a_crash_is_logged_counted_and_restarted() -> None:
    counted: list[str] = []
    runs: list[int] = []
    again = asyncio.Event()

    async def job() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise KeyError(7)
        again.set()
        await asyncio.Event().wait()

    supervisor = Supervisor(on_failure=counted.append, restart=QUICK)
    with structlog.testing.capture_logs() as logs:
        service = supervisor.spawn("replica-fetcher-2", job, kind="replica-fetcher")
        await asyncio.wait_for(again.wait(), 5)
    assert counted == ["replica-fetcher"]
    assert service.failures == 1 and isinstance(service.last_error, KeyError)
    failed = [e for e in logs if e["event"] == "background_task_failed"]
    assert failed and failed[0]["log_level"] == "error"
    assert failed[0]["task"] == "replica-fetcher-2"
    assert isinstance(failed[0]["exc_info"], KeyError)  # the traceback is rendered
    await supervisor.close()
    assert not service.running


async def test_a_service_that_keeps_crashing_is_fatal() -> None:
    fatal: list[str] = []
    stopped = asyncio.Event()

    async def job() -> None:
        raise RuntimeError("broken for good")

    def on_fatal(name: str, error: BaseException) -> None:
        fatal.append(f"{name}: {error}")
        stopped.set()

    supervisor = Supervisor(on_fatal=on_fatal, restart=QUICK)
    service = supervisor.spawn("controller", job)
    await asyncio.wait_for(stopped.wait(), 5)
    assert fatal == ["controller: broken for good"]
    assert service.failures == QUICK.max_failures + 1
    assert supervisor.fatal_error is not None and supervisor.fatal_error[0] == "controller"
    await asyncio.wait_for(service.task, 5)  # it stays down


async def test_never_restart_makes_the_first_crash_fatal() -> None:
    fatal: list[str] = []

    async def job() -> None:
        raise ValueError("x")

    supervisor = Supervisor(on_fatal=lambda name, _e: fatal.append(name))
    service = supervisor.spawn("once", job, restart=Restart(max_failures=0))
    await asyncio.wait_for(service.task, 5)
    assert fatal == ["once"] and service.failures == 1


async def test_crashes_outside_the_window_are_forgotten() -> None:
    now = [0.0]
    fatal: list[str] = []
    crashes = 0
    done = asyncio.Event()

    async def job() -> None:
        nonlocal crashes
        crashes += 1
        now[0] += 100.0  # each crash lands in a window of its own
        if crashes == 6:
            done.set()
            return
        raise OSError("transient")

    supervisor = Supervisor(on_fatal=lambda name, _e: fatal.append(name),
                            clock=lambda: now[0],
                            restart=Restart(initial_backoff_s=0.001, max_backoff_s=0.001,
                                            max_failures=1, failure_window_s=50.0))
    service = supervisor.spawn("retention", job)
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.wait_for(service.task, 5)
    assert fatal == [] and service.failures == 5


async def test_stop_and_normal_return_are_not_failures() -> None:
    counted: list[str] = []
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async def short() -> None:
        return

    supervisor = Supervisor(on_failure=counted.append, restart=QUICK)
    finished = supervisor.spawn("short", short)
    await asyncio.wait_for(finished.task, 5)
    service = supervisor.spawn("forever", forever)
    await started.wait()
    await service.stop()
    assert service.task.cancelled() and counted == []
    assert supervisor.get("forever") is None


async def test_two_running_services_cannot_share_a_name() -> None:
    supervisor = Supervisor()

    async def forever() -> None:
        await asyncio.Event().wait()

    supervisor.spawn("watch", forever)
    with pytest.raises(RuntimeError, match="already running"):
        supervisor.spawn("watch", forever)
    await supervisor.close()
