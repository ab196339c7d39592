"""A bare group member speaking the wire protocol directly, for broker tests.

Not the SDK: every step is explicit so tests can stop between them, send stale
generations, or go silent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.consumer import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
    TopicProduceData,
)


@dataclass
class RawMember:
    conn: Connection
    group_id: str
    topics: list[str]
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 10_000
    protocol: str = "range"
    member_id: str = ""
    generation_id: int = -1
    leader: str = ""
    join: JoinGroupResponse | None = None
    assignment: list[tuple[str, list[int]]] = field(default_factory=list)

    def _join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=self.group_id, member_id=self.member_id,
            group_instance_id=self.instance_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(
                name=self.protocol,
                metadata=encode_subscription(Subscription(topics=list(self.topics))))],
        )

    async def join_once(self) -> JoinGroupResponse:
        resp = await self.conn.send(self._join_request(), response_type=JoinGroupResponse)
        if resp.error_code in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
            self.member_id = resp.member_id
        if resp.error_code == ErrorCode.NONE:
            self.generation_id = resp.generation_id
            self.leader = resp.leader
            self.join = resp
        return resp

    async def join_group(self) -> JoinGroupResponse:
        """Join, following MEMBER_ID_REQUIRED once, as KIP-394 asks."""
        resp = await self.join_once()
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            resp = await self.join_once()
        return resp

    @property
    def is_leader(self) -> bool:
        return self.member_id == self.leader

    async def sync(self, assignments: dict[str, list[tuple[str, list[int]]]] | None = None,
                   ) -> SyncGroupResponse:
        entries = [
            SyncGroupRequestAssignment(
                member_id=m, assignment=encode_assignment(Assignment(assigned_partitions=a)))
            for m, a in (assignments or {}).items()
        ]
        resp = await self.conn.send(SyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.instance_id, protocol_type="consumer",
            protocol_name=self.protocol, assignments=entries,
        ), response_type=SyncGroupResponse)
        if resp.error_code == ErrorCode.NONE:
            self.assignment = (decode_assignment(resp.assignment).assigned_partitions
                               if resp.assignment else [])
        return resp

    async def heartbeat(self, wait_ms: int = 0, poll_age_ms: int = -1) -> HeartbeatResponse:
        return await self.conn.send(HeartbeatRequest(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.instance_id, wait_ms=wait_ms, poll_age_ms=poll_age_ms,
        ), response_type=HeartbeatResponse)

    async def leave(self) -> LeaveGroupResponse:
        return await self.conn.send(LeaveGroupRequest(
            group_id=self.group_id,
            members=[MemberIdentity(member_id=self.member_id,
                                    group_instance_id=self.instance_id)],
        ), response_type=LeaveGroupResponse)

    async def commit(self, offsets: dict[tuple[str, int], int], generation_id: int | None = None,
                     ) -> OffsetCommitResponse:
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, p), off in offsets.items():
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequestPartition(partition_index=p, committed_offset=off))
        return await self.conn.send(OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=self.generation_id if generation_id is None else generation_id,
            member_id=self.member_id, group_instance_id=self.instance_id,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()],
        ), response_type=OffsetCommitResponse)


def round_robin(members: list[str], topic: str, partitions: int,
                ) -> dict[str, list[tuple[str, list[int]]]]:
    """A tiny leader-side assignor for tests."""
    ordered = sorted(members)
    out: dict[str, list[int]] = {m: [] for m in ordered}
    for p in range(partitions):
        out[ordered[p % len(ordered)]].append(p)
    return {m: ([(topic, ps)] if ps else []) for m, ps in out.items()}


async def create_topic(conn: Connection, name: str, partitions: int) -> None:
    resp = await conn.send(CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions)]))
    assert resp.topics[0].error_code == ErrorCode.NONE, resp


async def produce(conn: Connection, topic: str, partition: int, values: list[bytes],
                  timestamp_ms: int = 1_700_000_000_000) -> ProduceResponse:
    batch = encode_batch([BatchRecord(value=v, key=None, timestamp_ms=timestamp_ms + i)
                          for i, v in enumerate(values)])
    return await conn.send(ProduceRequest(topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)])]),
        response_type=ProduceResponse)


async def form_group(members: list[RawMember], topic: str, partitions: int) -> None:
    """Bring ``members`` into one Stable generation, one at a time and event-driven.

    The first member forms the group alone; each next member's join parks, the members
    already in learn of the rebalance through a long-polled heartbeat and re-join, and the
    leader hands out a round-robin assignment. No step depends on timing.
    """
    inside: list[RawMember] = []
    for newcomer in members:
        joining = asyncio.ensure_future(newcomer.join_group())
        for m in inside:
            while (hb := await m.heartbeat(wait_ms=2000)).error_code == ErrorCode.NONE:
                pass
            assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS, hb
        inside.append(newcomer)
        joins = await asyncio.gather(*(m.join_group() for m in inside[:-1]), joining)
        assert all(j.error_code == ErrorCode.NONE for j in joins), joins
        assert len({m.generation_id for m in inside}) == 1
        leader = next(m for m in inside if m.is_leader)
        assert leader.join is not None
        plan = round_robin([x.member_id for x in leader.join.members], topic, partitions)
        syncs = await asyncio.gather(*(m.sync(plan if m is leader else None) for m in inside))
        assert all(s.error_code == ErrorCode.NONE for s in syncs), syncs
