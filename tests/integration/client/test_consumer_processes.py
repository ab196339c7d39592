"""Consumers as real processes: frozen with SIGSTOP, killed with SIGKILL."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable

import pytest

from ..rawgroup import create_topic, produce
from .procs import ConsumerProcess

TOPIC = "jobs"
PARTITIONS = 4


@pytest.fixture
async def spawn() -> AsyncIterator[Callable[..., object]]:
    started: list[ConsumerProcess] = []

    async def start(name: str, bootstrap: str, group: str, *extra: str) -> ConsumerProcess:
        proc = await ConsumerProcess.start(name, bootstrap, group, TOPIC, *extra)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        await proc.stop()


def _holds(n: int) -> Callable[[list[dict[str, object]]], bool]:
    def check(events: list[dict[str, object]]) -> bool:
        held: set[tuple[object, ...]] = set()
        for e in events:
            parts = {tuple(x) for x in e.get("partitions", [])}  # type: ignore[union-attr]
            if e["event"] == "assigned":
                held |= parts
            elif e["event"] in ("revoked", "lost"):
                held -= parts
        return len(held) == n
    return check


async def _produce_each(conn, start: int, count: int) -> set[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """``count`` records on every partition; returns their (partition, offset)."""
    out = set()
    for p in range(PARTITIONS):
        resp = await produce(conn, TOPIC, p, [f"{p}-{start + i}".encode() for i in range(count)])
        base = resp.responses[0].partition_responses[0].base_offset
        out |= {(p, base + i) for i in range(count)}
    return out


async def test_sigkilled_consumer_is_replaced_after_the_grace_not_the_session(
        start_broker, connect, spawn) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(connection_loss_grace_ms=300,
                                group_initial_rebalance_delay_ms=0)
    conn = await connect(target=broker)
    await create_topic(conn, TOPIC, PARTITIONS)
    bootstrap = f"127.0.0.1:{broker.port}"
    session = ["--session-timeout-ms", "120000", "--heartbeat-interval-ms", "1000"]
    a = await spawn("a", bootstrap, "g-kill", *session)
    await a.wait_for(_holds(PARTITIONS))
    b = await spawn("b", bootstrap, "g-kill", *session)
    await b.wait_for(_holds(PARTITIONS // 2))
    await a.wait_for(_holds(PARTITIONS // 2))
    first = await _produce_each(conn, 0, 5)
    await a.wait_for(lambda _: {x for x in first if (TOPIC, x[0]) in a.owned()}
                     <= a.consumed())
    a.signal(signal.SIGKILL)
    # with a 120 s session, only the connection-loss grace can hand A's partitions over
    await b.wait_for(_holds(PARTITIONS), timeout=30)
    second = await _produce_each(conn, 5, 5)
    await b.wait_for(lambda _: second <= b.consumed(), timeout=30)
    assert first <= a.consumed() | b.consumed()


async def test_frozen_consumer_loses_partitions_then_learns_it_was_fenced(
        start_broker, connect, spawn) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(group_initial_rebalance_delay_ms=0)
    conn = await connect(target=broker)
    await create_topic(conn, TOPIC, PARTITIONS)
    bootstrap = f"127.0.0.1:{broker.port}"
    timing = ["--session-timeout-ms", "1500", "--heartbeat-interval-ms", "200"]
    a = await spawn("a", bootstrap, "g-freeze", *timing)
    await a.wait_for(_holds(PARTITIONS))
    b = await spawn("b", bootstrap, "g-freeze", *timing)
    await b.wait_for(_holds(PARTITIONS // 2))
    await a.wait_for(_holds(PARTITIONS // 2))
    held_before = a.owned()
    a.signal(signal.SIGSTOP)  # connections stay open, heartbeats stop
    await b.wait_for(_holds(PARTITIONS), timeout=30)
    produced = await _produce_each(conn, 0, 10)
    await b.wait_for(lambda _: produced <= b.consumed(), timeout=30)
    a.signal(signal.SIGCONT)
    # A finds out it was removed: lost (not revoked), then it rejoins and gets a share back
    await a.wait_for(lambda evs: any(e["event"] == "lost" for e in evs), timeout=30)
    await a.wait_for(lambda evs: evs[-1]["event"] == "assigned" and _holds(PARTITIONS // 2)(evs),
                     timeout=30)
    lost = next(e for e in a.events if e["event"] == "lost")
    assert {(t, p) for t, p in lost["partitions"]} == held_before  # type: ignore[union-attr]
    assert produced <= a.consumed() | b.consumed()
