"""More Consumer behaviour over a real in-process broker: iteration, auto-commit before
revocation, offset reset, metadata-driven rejoins, fencing, and a bounded close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.errors import FencedInstanceIdError
from groupwire.client.listener import RebalanceListener
from groupwire.client.types import TopicPartition
from groupwire.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    DescribeGroupsRequest,
)
from tests.integration.client.test_consumer import FAST, Recorder, bootstrap, poll_until
from tests.integration.rawgroup import create_topic, produce

pytestmark = pytest.mark.asyncio
TOPIC = "events"


@pytest.fixture
async def admin(broker: Broker) -> AsyncIterator[Connection]:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="test-admin")
    yield conn
    await conn.close()


async def test_async_iteration_and_getone(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    await produce(admin, TOPIC, 0, [b"r0", b"r1", b"r2"])
    async with Consumer(bootstrap(broker), group_id="it", **FAST) as c:
        c.subscribe([TOPIC])
        first = await asyncio.wait_for(c.getone(), 10)
        seen = [first.value]
        async def rest() -> None:
            async for record in c:
                seen.append(record.value)
                if len(seen) == 3:
                    break
        await asyncio.wait_for(rest(), 10)
        assert seen == [b"r0", b"r1", b"r2"]
        assert await c.position(TopicPartition(TOPIC, 0)) == 3


async def test_eager_auto_commit_before_revocation(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 2)
    await produce(admin, TOPIC, 0, [b"a", b"b"])
    await produce(admin, TOPIC, 1, [b"c"])
    rec = Recorder()
    settings = {**FAST, "auto_commit_interval_ms": 3_600_000}  # only the revoke commits
    c1 = Consumer(bootstrap(broker), group_id="ac", **settings)
    c2 = Consumer(bootstrap(broker), group_id="ac", **settings)
    async with c1, c2:
        c1.subscribe([TOPIC], listener=rec)
        got: list[Any] = []
        await poll_until(c1, lambda: len(got) >= 3, sink=got)
        c2.subscribe([TOPIC])
        await asyncio.gather(
            poll_until(c1, lambda: rec.kinds() == ["assigned", "revoked", "assigned"]),
            poll_until(c2, lambda: bool(c2.assignment())))
        for tp, end in ((TopicPartition(TOPIC, 0), 2), (TopicPartition(TOPIC, 1), 1)):
            committed = await c1.committed(tp)
            assert committed is not None and committed.offset == end
        for tp in c2.assignment():
            assert await c2.position(tp) == (2 if tp.partition == 0 else 1)


async def test_out_of_range_position_resets(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    await produce(admin, TOPIC, 0, [b"z0", b"z1"])
    tp = TopicPartition(TOPIC, 0)
    async with Consumer(bootstrap(broker), **FAST) as c:  # auto_offset_reset=earliest
        c.assign([tp])
        c.seek(tp, 50)
        got: list[Any] = []
        await poll_until(c, lambda: len(got) >= 2, sink=got)
        assert [r.offset for r in got] == [0, 1]


async def test_pattern_subscription_picks_up_new_topics(broker: Broker,
                                                        admin: Connection) -> None:
    await create_topic(admin, "logs-a", 1)
    rec = Recorder()
    async with Consumer(bootstrap(broker), group_id="pat", metadata_max_age_ms=50,
                        **FAST) as c:
        c.subscribe(pattern=r"logs-.*", listener=rec)
        await poll_until(c, lambda: bool(c.assignment()))
        assert c.assignment() == {TopicPartition("logs-a", 0)}
        await create_topic(admin, "logs-b", 2)
        await create_topic(admin, "other", 1)
        await poll_until(c, lambda: len(c.assignment()) == 3)
        assert {tp.topic for tp in c.assignment()} == {"logs-a", "logs-b"}


async def test_leader_rejoins_when_partitions_grow(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    async with Consumer(bootstrap(broker), group_id="grow", metadata_max_age_ms=50,
                        **FAST) as c:
        c.subscribe([TOPIC])
        await poll_until(c, lambda: bool(c.assignment()))
        generation = c.generation_id
        resp: Any = await admin.send(CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=TOPIC, count=3)]))
        assert resp.error_code == 0
        await poll_until(c, lambda: len(c.assignment()) == 3)
        assert c.generation_id > generation
        assert c.metrics()["rebalance_count"] == 2


async def test_same_instance_id_fences_the_older_consumer(broker: Broker,
                                                          admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    old = Consumer(bootstrap(broker), group_id="fence", group_instance_id="i-1", **FAST)
    new = Consumer(bootstrap(broker), group_id="fence", group_instance_id="i-1", **FAST)
    async with old, new:
        old.subscribe([TOPIC])
        await poll_until(old, lambda: bool(old.assignment()))
        new.subscribe([TOPIC])
        await poll_until(new, lambda: bool(new.assignment()))
        with pytest.raises(FencedInstanceIdError):
            await poll_until(old, lambda: False)


async def test_close_is_bounded_when_the_broker_is_gone(start_broker: Any) -> None:
    broker = await start_broker()
    conn = await Connection.open("127.0.0.1", broker.port)
    await create_topic(conn, TOPIC, 1)
    await conn.close()
    c = Consumer(bootstrap(broker), group_id="gone",
                 **{**FAST, "close_timeout_ms": 1000, "request_timeout_ms": 1000})
    await c.start()
    c.subscribe([TOPIC])
    await poll_until(c, lambda: bool(c.assignment()))
    await broker.close()
    await asyncio.wait_for(c.close(), 10)  # close_timeout bounds it well below this
    assert c.health()["state"] == "closed"


async def test_auto_commit_during_polls(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    await produce(admin, TOPIC, 0, [b"p0", b"p1"])
    tp = TopicPartition(TOPIC, 0)
    async with Consumer(bootstrap(broker), group_id="auto", auto_commit_interval_ms=0,
                        **FAST) as c:
        c.subscribe([TOPIC])
        got: list[Any] = []
        await poll_until(c, lambda: len(got) >= 2, sink=got)
        before = await c.committed(tp)
        assert before is None or before.offset < 2  # commits happen in polls, not behind
        await c.getmany(timeout_ms=0)  # the next poll auto-commits what was returned
        committed = await c.committed(tp)
        assert committed is not None and committed.offset == 2


async def test_manual_assignment_commits_without_generation(broker: Broker,
                                                            admin: Connection) -> None:
    await create_topic(admin, TOPIC, 2)
    await produce(admin, TOPIC, 1, [b"q0", b"q1", b"q2"])
    tp = TopicPartition(TOPIC, 1)
    async with Consumer(bootstrap(broker), group_id="manual", enable_auto_commit=False,
                        **FAST) as c:
        c.assign([tp])
        got: list[Any] = []
        await poll_until(c, lambda: len(got) >= 3, sink=got)
        await c.commit({tp: 2})
        assert c.generation_id == -1 and c.member_id == ""
    async with Consumer(bootstrap(broker), group_id="manual", **FAST) as c2:
        c2.assign([tp])
        assert await c2.position(tp) == 2


async def _describe(admin: Connection, group: str) -> Any:
    resp: Any = await admin.send(DescribeGroupsRequest(groups=[group]))
    return resp.groups[0]


async def test_close_leaves_for_dynamic_but_not_static_members(broker: Broker,
                                                               admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    for group, instance in (("dyn", None), ("sta", "s-1")):
        c = Consumer(bootstrap(broker), group_id=group, group_instance_id=instance, **FAST)
        async with c:
            c.subscribe([TOPIC])
            await poll_until(c, lambda c=c: bool(c.assignment()))  # type: ignore[misc]
            described = await _describe(admin, group)
            assert described.group_state == "Stable" and len(described.members) == 1
            assert described.members[0].poll_age_ms is not None
        described = await _describe(admin, group)
        if instance is None:
            assert described.group_state == "Empty" and described.members == []
        else:  # a static member keeps its slot until its session expires
            assert described.group_state == "Stable"
            assert [m.group_instance_id for m in described.members] == [instance]


async def test_wait_for_leave_is_bounded_by_a_stuck_revoke_callback(
        broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 1)
    release = asyncio.Event()

    class Stuck(RebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            await release.wait()

    async with Consumer(bootstrap(broker), group_id="stuck",
                        **{**FAST, "close_timeout_ms": 200}) as c:
        c.subscribe([TOPIC], listener=Stuck())
        await poll_until(c, lambda: bool(c.assignment()))
        c.unsubscribe()
        assert await asyncio.wait_for(c.wait_for_leave(timeout_ms=50), 5) is False
        assert await asyncio.wait_for(c.wait_for_leave(), 5) is False  # the close timeout
        release.set()
        assert await asyncio.wait_for(c.wait_for_leave(), 5) is True


async def test_unsubscribe_revokes_and_leaves(broker: Broker, admin: Connection) -> None:
    await create_topic(admin, TOPIC, 2)
    rec = Recorder()
    async with Consumer(bootstrap(broker), group_id="unsub", **FAST) as c:
        c.subscribe([TOPIC], listener=rec)
        await poll_until(c, lambda: len(c.assignment()) == 2)
        owned = frozenset(c.assignment())
        c.unsubscribe()
        assert c.assignment() == set() and c.member_id == ""
        assert await asyncio.wait_for(c.wait_for_leave(), 10)  # revoked, then LeaveGroup
        assert rec.events[-1] == ("revoked", owned)
        assert (await _describe(admin, "unsub")).group_state == "Empty"
        c.subscribe([TOPIC], listener=rec)  # and it can come back as a new member
        await poll_until(c, lambda: len(c.assignment()) == 2)
        assert rec.events[-1] == ("assigned", owned)
