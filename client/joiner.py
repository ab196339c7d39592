"""JoinGroup and SyncGroup for the consumer, and the leader's assignment (docs/design/kafka.md
§15.3).

Network only: it drives the shared :class:`~client.membership.Membership` through one
rebalance and returns the partitions assigned; the consumer applies them (listeners,
positions) inside the application's next poll.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from groupwire.client.assignors import PartitionAssignor, RebalanceProtocol, user_data_for
from groupwire.client.assignors import Subscription as AssignorSubscription
from groupwire.client.clock import Clock
from groupwire.client.link import CoordinatorLink, backoff_ms
from groupwire.client.membership import Action, Membership
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import TopicPartition
from groupwire.protocol.consumer import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

__all__ = ["Joiner", "group_partitions"]

log = logging.getLogger("groupwire.consumer")


class Joiner:
    def __init__(self, *, link: CoordinatorLink, membership: Membership, lock: threading.Lock,
                 subs: SubscriptionState, group_id: str, group_instance_id: str | None,
                 assignors: Sequence[PartitionAssignor], protocol: RebalanceProtocol,
                 session_timeout_ms: int, rebalance_timeout_ms: int, request_timeout_ms: int,
                 retry_backoff_ms: int, wake_heartbeat: Callable[[], None],
                 is_closed: Callable[[], bool], clock: Clock) -> None:
        self._link = link
        self._m = membership
        self._lock = lock
        self._subs = subs
        self._group_id = group_id
        self._instance_id = group_instance_id
        self._assignors = list(assignors)
        self._protocol = protocol
        self._session_ms = session_timeout_ms
        self._rebalance_ms = rebalance_timeout_ms
        self._request_timeout = request_timeout_ms / 1000
        self._backoff_ms = retry_backoff_ms
        self._wake_heartbeat = wake_heartbeat
        self._is_closed = is_closed
        self._clock = clock
        self.joined_topics: frozenset[str] = frozenset()
        self.assigned_counts: dict[str, int] | None = None   # the leader's view when assigning
        self.last_assignment: list[TopicPartition] = []

    def current_topics(self) -> frozenset[str]:
        """The topics this member consumes: a pattern's as matched at the last join."""
        return self.joined_topics if self._subs.pattern is not None else self._subs.topics

    async def join_and_sync(self) -> list[TopicPartition] | None:
        """JoinGroup then SyncGroup until Stable; network only, no listener calls here."""
        attempt = 0
        while not self._is_closed():
            try:
                topics = await self._resolve_topics()
                self.joined_topics = topics
                with self._lock:
                    self._m.join_sent(self._clock())
                    member_id = self._m.member_id
                    generation = self._m.generation_id
                join = await self._link.send(JoinGroupRequest(
                    group_id=self._group_id, member_id=member_id,
                    group_instance_id=self._instance_id,
                    session_timeout_ms=self._session_ms, rebalance_timeout_ms=self._rebalance_ms,
                    protocol_type="consumer",
                    protocols=self._join_protocols(topics, generation),
                    reason=None), timeout=self._rebalance_ms / 1000 + self._request_timeout,
                    retry=False, response_type=JoinGroupResponse)
                with self._lock:
                    action = self._m.on_join_response(
                        join.error_code, member_id=join.member_id,
                        generation_id=join.generation_id, protocol_name=join.protocol_name,
                        leader=join.leader, now_ms=self._clock())
                    leader = self._m.is_leader()
                if action == Action.OK:
                    self._wake_heartbeat()
                    assignments: list[SyncGroupRequestAssignment] = []
                    if leader and not join.skip_assignment:
                        assignments = await self._assign(join)
                    sync = await self._link.send(SyncGroupRequest(
                        group_id=self._group_id, generation_id=join.generation_id,
                        member_id=join.member_id, group_instance_id=self._instance_id,
                        protocol_type="consumer", protocol_name=join.protocol_name,
                        assignments=assignments),
                        timeout=self._rebalance_ms / 1000 + self._request_timeout,
                        retry=False, response_type=SyncGroupResponse)
                    with self._lock:
                        action = self._m.on_sync_response(sync.error_code, self._clock())
                    if action == Action.OK:
                        if not sync.assignment:
                            return []
                        got = decode_assignment(sync.assignment).assigned_partitions
                        return [TopicPartition(t, p) for t, ps in got for p in ps]
                if action == Action.FATAL:
                    return None
                if action == Action.REJOIN:
                    attempt = 0
                    continue
                if action == Action.FIND_COORDINATOR:
                    await self._link.drop()
            except (ConnectionError, OSError, TimeoutError) as exc:
                log.info("join/sync failed: %s", exc)
                with self._lock:
                    self._m.connection_failed()
                await self._link.drop()
            attempt += 1
            await asyncio.sleep(backoff_ms(attempt, self._backoff_ms) / 1000)
        return None

    def _join_protocols(self, topics: frozenset[str], generation: int,
                        ) -> list[JoinGroupRequestProtocol]:
        owned = sorted(self._subs.assigned()) if self._protocol == "cooperative" else []
        out = []
        for assignor in self._assignors:
            prior = owned or self.last_assignment
            sub = Subscription(
                topics=sorted(topics), owned_partitions=group_partitions(owned),
                generation_id=generation if owned else -1,
                user_data=user_data_for(assignor, prior, generation))
            out.append(JoinGroupRequestProtocol(name=assignor.name,
                                                metadata=encode_subscription(sub)))
        return out

    async def _assign(self, join: JoinGroupResponse) -> list[SyncGroupRequestAssignment]:
        assignor = next((a for a in self._assignors if a.name == join.protocol_name),
                        self._assignors[0])
        subs: dict[str, AssignorSubscription] = {}
        wanted: set[str] = set()
        for m in join.members:
            try:
                s = decode_subscription(m.metadata)
            except Exception:  # an undecodable member gets nothing
                s = Subscription(topics=[])
            wanted.update(s.topics)
            subs[m.member_id] = AssignorSubscription(
                topics=tuple(s.topics),
                owned_partitions=[TopicPartition(t, p) for t, ps in s.owned_partitions
                                  for p in ps],
                generation=s.generation_id, user_data=s.user_data,
                group_instance_id=m.group_instance_id)
        counts = await self.partition_counts(sorted(wanted))
        self.assigned_counts = counts
        plan = assignor.assign(counts, subs)
        return [SyncGroupRequestAssignment(
            member_id=member, assignment=encode_assignment(Assignment(
                assigned_partitions=group_partitions(sorted(plan.get(member, []))))))
            for member in subs]

    async def partition_counts(self, topics: list[str] | None) -> dict[str, int]:
        meta = await self._link.send(MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False), response_type=MetadataResponse)
        return {t.name: len(t.partitions) for t in meta.topics
                if t.error_code == ErrorCode.NONE and not t.is_internal}

    async def _resolve_topics(self) -> frozenset[str]:
        if self._subs.pattern is None:
            return self._subs.topics
        return self._subs.match(await self.partition_counts(None))


def group_partitions(tps: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """``[(topic, [partition, ...]), ...]``, sorted, as the consumer protocol carries them."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]
