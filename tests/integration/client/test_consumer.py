"""The Consumer against a real in-process broker, with short timeouts as settings.

No sleeps decide outcomes: tests wait on listener events and on consumer state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.client.clock import monotonic_ms
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.errors import CommitFailedError, ListenerError
from groupwire.client.listener import RebalanceListener
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode
from tests.integration.brokerproc import BrokerProcess
from tests.integration.rawgroup import RawMember, create_topic, produce

pytestmark = pytest.mark.asyncio

TOPIC = "events"
FAST: dict[str, Any] = dict(
    session_timeout_ms=1500, heartbeat_interval_ms=100, request_timeout_ms=5000,
    retry_backoff_ms=20, fetch_max_wait_ms=100, auto_offset_reset="earliest",
    close_timeout_ms=3000,
)


class Recorder(RebalanceListener):
    """Remembers every callback in order; ``changed`` fires on each."""

    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.changed = asyncio.Event()
        self.on_revoke: Callable[[set[TopicPartition]], Awaitable[None]] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if self.on_revoke is not None:
            await self.on_revoke(revoked)
        self._add("revoked", revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._add("assigned", assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._add("lost", lost)

    def _add(self, kind: str, tps: set[TopicPartition]) -> None:
        self.events.append((kind, frozenset(tps)))
        self.changed.set()

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


@pytest.fixture
async def admin(broker: Broker) -> AsyncIterator[Connection]:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="test-admin")
    yield conn
    await conn.close()


def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


async def poll_until(consumer: Consumer, done: Callable[[], bool], *,
                     sink: list[Any] | None = None, limit: float = 10.0) -> None:
    """Poll (as an application does) until ``done()``; fail after ``limit`` seconds."""
    async def loop() -> None:
        while not done():
            got = await consumer.getmany(timeout_ms=50)
            if sink is not None:
                for records in got.values():
                    sink.extend(records)
    await asyncio.wait_for(loop(), limit)


async def test_subscribe_consume_commit(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 2)
    await produce(admin, TOPIC, 0, [b"a0", b"a1", b"a2"])
    await produce(admin, TOPIC, 1, [b"b0", b"b1"])
    rec = Recorder()
    got: list[Any] = []
    async with Consumer(bootstrap(broker), group_id="g1", **FAST) as c:
        c.subscribe([TOPIC], listener=rec)
        await poll_until(c, lambda: len(got) >= 5, sink=got)
        assert sorted(r.value for r in got) == [b"a0", b"a1", b"a2", b"b0", b"b1"]
        assert c.assignment() == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}
        assert rec.events == [("assigned", frozenset(c.assignment()))]
        assert c.generation_id >= 1 and c.member_id
        await c.commit()
        assert await c.committed(TopicPartition(TOPIC, 0)) is not None
        committed = await c.committed(TopicPartition(TOPIC, 0))
        assert committed is not None and committed.offset == 3
        assert c.highwater(TopicPartition(TOPIC, 1)) == 2
        assert c.metrics()["lag"][TopicPartition(TOPIC, 1)] == 0
        assert c.health()["state"] == "stable"
    assert c.health()["state"] == "closed"
    # a new consumer of the group starts from the committed offsets
    await produce(admin, TOPIC, 0, [b"a3"])
    async with Consumer(bootstrap(broker), group_id="g1", **FAST) as c2:
        c2.subscribe([TOPIC])
        rest: list[Any] = []
        await poll_until(c2, lambda: len(rest) >= 1, sink=rest)
        assert [r.value for r in rest] == [b"a3"]


async def test_second_consumer_splits_and_revoked_commits_are_kept(
        broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 4)
    for p in range(4):
        await produce(admin, TOPIC, p, [b"x%d" % p])
    rec1, rec2 = Recorder(), Recorder()
    c1 = Consumer(bootstrap(broker), group_id="g2", enable_auto_commit=False, **FAST)
    c2 = Consumer(bootstrap(broker), group_id="g2", enable_auto_commit=False, **FAST)
    async with c1, c2:
        c1.subscribe([TOPIC], listener=rec1)
        got: list[Any] = []
        await poll_until(c1, lambda: len(got) >= 4, sink=got)

        async def commit_in_revoke(revoked: set[TopicPartition]) -> None:
            await c1.commit()
        rec1.on_revoke = commit_in_revoke
        c2.subscribe([TOPIC], listener=rec2)
        joining = asyncio.ensure_future(poll_until(c2, lambda: bool(c2.assignment())))
        await poll_until(c1, lambda: rec1.kinds()[-1:] == ["assigned"] and len(rec1.events) >= 3)
        await joining
        assert rec1.kinds() == ["assigned", "revoked", "assigned"]
        assert len(c1.assignment()) == 2 and len(c2.assignment()) == 2
        assert not c1.assignment() & c2.assignment()
        # c2 resumes from what c1 committed inside on_partitions_revoked: nothing re-read
        for tp in c2.assignment():
            committed = await c2.committed(tp)
            assert committed is not None and committed.offset == 1
            assert await c2.position(tp) == 1


async def test_poll_interval_expiry_loses_partitions(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 2)
    rec = Recorder()
    c = Consumer(bootstrap(broker), group_id="g3", enable_auto_commit=False,
                 max_poll_interval_ms=300, **FAST)
    async with c:
        c.subscribe([TOPIC], listener=rec)
        await poll_until(c, lambda: bool(c.assignment()))
        first_member = c.member_id
        # the app stops polling: the heartbeat thread leaves the group on its own
        async def wait_lost() -> None:
            while c.health()["state"] != "lost":
                with contextlib.suppress(TimeoutError):  # re-check: a notice may race
                    await asyncio.wait_for(c.wait_for_change(), 0.5)
        await asyncio.wait_for(wait_lost(), 10)
        with pytest.raises(CommitFailedError):
            await c.commit()
        rec.changed.clear()
        await poll_until(c, lambda: "assigned" in rec.kinds()[1:])
        assert rec.kinds() == ["assigned", "lost", "assigned"]
        assert c.member_id and c.member_id != first_member
        assert c.metrics()["poll_expired_count"] == 1


async def test_blocked_app_loop_keeps_membership(tmp_path: Path) -> None:
    """The heartbeat thread keeps the member alive while a CPU-bound handler blocks the
    app's loop; the broker is a process of its own here, as in production (one in this
    loop would be blocked too and could not answer)."""
    proc = BrokerProcess(tmp_path / "data", "--fsync", "never",
                         "--group-initial-rebalance-delay-ms", "0",
                         "--group-min-session-timeout-ms", "10").start()
    try:
        admin = await Connection.open("127.0.0.1", proc.port, client_id="test-admin")
        await create_topic(admin, TOPIC, 1)
        await produce(admin, TOPIC, 0, [b"slow"])
        await admin.close()
        c = Consumer(f"127.0.0.1:{proc.port}", group_id="g4",
                     **{**FAST, "session_timeout_ms": 300})
        async with c:
            c.subscribe([TOPIC])
            got: list[Any] = []
            await poll_until(c, lambda: len(got) >= 1, sink=got)
            generation, member = c.generation_id, c.member_id
            time.sleep(1.0)  # a CPU-bound handler: the loop is blocked > 3 session timeouts
            await c.getmany(timeout_ms=0)
            assert (c.generation_id, c.member_id) == (generation, member)
            assert c.health()["state"] == "stable"
            await c.commit()
    finally:
        proc.kill()


async def test_listener_error_surfaces_on_next_poll(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)

    class Boom(RebalanceListener):
        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            raise RuntimeError("boom")

    async with Consumer(bootstrap(broker), group_id="g5", **FAST) as c:
        c.subscribe([TOPIC], listener=Boom())
        with pytest.raises(ListenerError) as info:
            await poll_until(c, lambda: False)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert c.assignment() == {TopicPartition(TOPIC, 0)}
        await c.getmany(timeout_ms=0)  # the consumer still works


async def test_manual_assign_and_seek(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    await produce(admin, TOPIC, 0, [b"m0", b"m1", b"m2"])
    tp = TopicPartition(TOPIC, 0)
    async with Consumer(bootstrap(broker), **FAST) as c:
        c.assign([tp])
        got: list[Any] = []
        await poll_until(c, lambda: len(got) >= 3, sink=got)
        assert [r.offset for r in got] == [0, 1, 2]
        c.seek(tp, 1)
        again: list[Any] = []
        await poll_until(c, lambda: len(again) >= 2, sink=again)
        assert [r.value for r in again] == [b"m1", b"m2"]
        await c.seek_to_end(tp)
        assert await c.position(tp) == 3
        await c.seek_to_beginning(tp)
        assert await c.position(tp) == 0


async def test_cooperative_sticky_keeps_consuming_partitions_that_stay(
        broker: Broker, admin: Connection) -> None:
    """A second (raw, wire-level) member joins; the consumer revokes only what moves and
    keeps consuming the rest while the group waits for the second round."""
    await create_topic(admin, TOPIC, 4)
    rec = Recorder()
    coop = {**FAST, "partition_assignment_strategy": ("cooperative-sticky",)}
    raw_conn = await Connection.open("127.0.0.1", broker.port, client_id="raw")
    raw = RawMember(raw_conn, "g6", [TOPIC], protocol="cooperative-sticky")
    try:
        async with Consumer(bootstrap(broker), group_id="g6", enable_auto_commit=False,
                            **coop) as c:
            c.subscribe([TOPIC], listener=rec)
            await poll_until(c, lambda: len(c.assignment()) == 4)
            everything = frozenset(c.assignment())
            joining = asyncio.ensure_future(raw.join_group())
            await poll_until(c, joining.done)
            assert joining.result().error_code == ErrorCode.NONE
            assert not raw.is_leader
            # the leader (c) withholds moving partitions in round 1; raw's SyncGroup gets
            # nothing, or REBALANCE_IN_PROGRESS if c already asked for round 2
            first = await raw.sync()
            assert first.error_code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
            assert raw.assignment == []
            await poll_until(c, lambda: "revoked" in rec.kinds())
            kept = frozenset(c.assignment())
            moved = everything - kept
            assert len(kept) == 2 and rec.events[1] == ("revoked", moved)
            # round 2 waits for raw to rejoin: meanwhile c keeps consuming what it kept
            for tp in kept:
                await produce(admin, TOPIC, tp.partition, [b"during-%d" % tp.partition])
            got: list[Any] = []
            await poll_until(c, lambda: len(got) >= 2, sink=got)
            assert {r.tp for r in got} == kept
            assert c.health()["state"] == "rebalancing"
            rejoin = asyncio.ensure_future(raw.join_group())
            await poll_until(c, rejoin.done)
            assert rejoin.result().error_code == ErrorCode.NONE
            assert (await raw.sync()).error_code == ErrorCode.NONE
            await poll_until(c, lambda: c.health()["state"] == "stable")
            assert {TopicPartition(t, p) for t, ps in raw.assignment for p in ps} == moved
            assert c.assignment() == kept
            assert rec.kinds().count("revoked") == 1 and "lost" not in rec.kinds()
            assert all(tps <= everything - moved or kind != "revoked" or tps == moved
                       for kind, tps in rec.events)
    finally:
        await raw_conn.close()


async def test_static_member_restart_gets_same_assignment_without_rebalance(
        broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 4)
    rec_b = Recorder()
    a = Consumer(bootstrap(broker), group_id="g7", group_instance_id="s-a", **FAST)
    b = Consumer(bootstrap(broker), group_id="g7", group_instance_id="s-b", **FAST)
    await a.start()
    async with b:
        a.subscribe([TOPIC])
        await poll_until(a, lambda: len(a.assignment()) == 4)
        b.subscribe([TOPIC], listener=rec_b)

        def formed() -> bool:
            return (len(a.assignment()) == 2 and len(b.assignment()) == 2
                    and a.health()["state"] == b.health()["state"] == "stable")
        await asyncio.gather(poll_until(a, formed), poll_until(b, formed))
        generation, a_parts = b.generation_id, a.assignment()
        events_before = list(rec_b.events)
        await a.close()  # static: no LeaveGroup, the group keeps s-a's slot
        async with Consumer(bootstrap(broker), group_id="g7", group_instance_id="s-a",
                            **FAST) as a2:
            a2.subscribe([TOPIC])
            await poll_until(a2, lambda: bool(a2.assignment()))
            assert a2.assignment() == a_parts
            assert a2.generation_id == generation
            await poll_until(b, lambda: True)
            assert b.generation_id == generation and rec_b.events == events_before
            assert b.health()["state"] == "stable"


class JumpingClock:
    """The process's monotonic clock plus an offset a test moves, as a SIGSTOP would."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def jump(self, ms: int) -> None:
        self.offset_ms += ms

    def __call__(self) -> int:
        return monotonic_ms() + self.offset_ms


async def test_a_frozen_consumer_does_not_hand_out_records_buffered_before_the_freeze(
        broker: Broker, admin: Connection) -> None:
    """A SIGSTOPped consumer, once resumed, sees a whole session timeout without a
    heartbeat answer: by then its partitions belong to someone else, so what it fetched
    before the freeze is dropped and the partitions are reported lost, not handed out."""
    await create_topic(admin, TOPIC, 1)
    await produce(admin, TOPIC, 0, [b"r%d" % i for i in range(5)])
    rec = Recorder()
    clock = JumpingClock()
    c = Consumer(bootstrap(broker), group_id="frozen", enable_auto_commit=False,
                 max_poll_records=1, clock=clock, **{**FAST, "heartbeat_interval_ms": 1000})
    async with c:
        c.subscribe([TOPIC], listener=rec)
        got: list[Any] = []
        await poll_until(c, lambda: len(got) >= 1, sink=got)
        assert [r.offset for r in got] == [0]  # the other four wait in the fetch buffer
        first_member = c.member_id

        # the freeze: the consumer's one clock (its heartbeat thread's too) jumps past the
        # session timeout at once
        clock.jump(FAST["session_timeout_ms"] + 1)

        rec.events.clear()
        after: list[Any] = []
        await poll_until(c, lambda: len(after) >= 1, sink=after)
        assert rec.kinds()[:2] == ["lost", "assigned"]
        # nothing committed, so the new member starts over at the committed position (none:
        # earliest) — records came only through the new assignment, not the old buffer
        assert after[0].offset == 0
        assert c.member_id and c.member_id != first_member
