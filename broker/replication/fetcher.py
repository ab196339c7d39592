"""The follower's side of replication: one fetcher per leader broker copies every
partition this broker follows from it, after cutting each log back to where it first
differs from the leader's (OffsetsForLeaderEpoch, KIP-101 and KIP-279).

Each fetcher is a supervised service (``replica-fetcher``): a crash is logged, counted
and the fetcher started again, truncating every partition afresh. A partition whose
local log went away under it (its topic deleted here, maybe to be created again) is
dropped from this fetcher alone; the replica manager follows it again once the image
and the store agree. Every Fetch carries this broker's epoch (KIP-903): the leader
counts a fetch for the ISR only from the follower's current registration."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from groupwire.broker.cluster.epochs import divergence
from groupwire.broker.cluster.image import TopicPartition
from groupwire.broker.cluster.keys import BrokerInfo
from groupwire.broker.logs import get_logger
from groupwire.broker.replication.peer import (
    PeerAuthError,
    PeerConnection,
    PeerDialer,
    PeerError,
    PeerLink,
)
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.partition_log import PartitionLog
from groupwire.broker.supervisor import Service, Supervisor
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)

log = get_logger("groupwire.cluster")

BACKOFF_S = 0.1
"""Pause after a failed round, so a leader that is gone is not hammered."""
REFUSED_BACKOFF_S = 1.0
"""Pause after the leader refused this broker's principal (CLUSTER_AUTHORIZATION_FAILED):
an ACL has to change first, so retrying ten times a second would only fill the log."""


class _NotAuthorized(PeerError):
    """The leader's authorizer refused this broker's replica requests."""
MAX_TRUNCATION_ROUNDS = 16
"""OffsetsForLeaderEpoch round trips one partition may take (KIP-279's multi-round
case needs one per epoch the two logs disagree on)."""


@dataclass(slots=True)
class _Followed:
    leader_epoch: int
    truncated: bool = False


class ReplicaFetcher:
    def __init__(self, node_id: int, leader: BrokerInfo, store: TopicStore, *,
                 wait_max_ms: int, max_bytes: int, request_timeout_s: float,
                 on_appended: Callable[[TopicPartition], None],
                 dialer: PeerDialer | None = None,
                 broker_epoch: Callable[[], int | None] = lambda: None,
                 supervisor: Supervisor | None = None) -> None:
        """``broker_epoch``: this broker's epoch, its registration's revision (None
        while unknown), sent with every Fetch."""
        self.node_id = node_id
        self.leader = leader
        self.store = store
        self._wait_max_ms = wait_max_ms
        self._max_bytes = max_bytes
        self._timeout_s = request_timeout_s
        self._on_appended = on_appended
        self.partitions: dict[TopicPartition, _Followed] = {}
        self._link = PeerLink(f"replica-{node_id}", request_timeout_s, dialer)
        self._refusal_logged = False
        """CLUSTER_AUTHORIZATION_FAILED was logged (once, until a fetch is allowed)."""
        self._broker_epoch = broker_epoch
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._service: Service | None = None
        self._work = asyncio.Event()

    def follow(self, tp: TopicPartition, leader_epoch: int) -> None:
        """Follow ``tp`` in ``leader_epoch``: a new epoch means truncating first."""
        current = self.partitions.get(tp)
        if current is not None and current.leader_epoch == leader_epoch:
            return
        self.partitions[tp] = _Followed(leader_epoch)
        self._work.set()

    def unfollow(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    @property
    def service(self) -> Service | None:
        return self._service

    def start(self) -> None:
        self._service = self._supervisor.spawn(
            f"replica-fetcher-{self.node_id}-from-{self.leader.node_id}-"
            f"{self.leader.incarnation}", self._run, kind="replica-fetcher")

    async def close(self) -> None:
        if self._service is not None:
            await self._service.stop()
            self._service = None
        await self._link.close()

    async def _run(self) -> None:
        # A (re)start knows nothing of what the last run did half-way: every log is
        # compared with the leader's again before it is fetched into.
        for followed in self.partitions.values():
            followed.truncated = False
        await self._link.close()
        while True:
            if not self.partitions:
                self._work.clear()
                await self._work.wait()
                continue
            try:
                conn = await self._link.to(self.leader)
                await self._truncate(conn)
                await self._fetch(conn)
            except PeerAuthError:
                await asyncio.sleep(BACKOFF_S)  # the dialer logged it, once
            except _NotAuthorized as exc:
                if not self._refusal_logged:
                    self._refusal_logged = True
                    log.error("replica_fetch_not_authorized", leader=self.leader.node_id,
                              error=str(exc), hint="the inter-broker principal needs "
                              "CLUSTER_ACTION on the cluster, or to be in --super-users")
                await asyncio.sleep(REFUSED_BACKOFF_S)
            except PeerError as exc:
                log.info("replica_fetch_failed", leader=self.leader.node_id, error=str(exc))
                await asyncio.sleep(BACKOFF_S)

    def _log(self, tp: TopicPartition) -> PartitionLog | None:
        """The local log of a followed partition; None, and the partition dropped here,
        if it is gone (its topic deleted here): the other partitions go on, and the
        replica manager follows it again if the image still assigns it here."""
        try:
            return self.store.log(*tp)
        except StorageError as exc:  # NoSuchPartitionError
            if self.partitions.pop(tp, None) is not None:
                log.info("replica_fetch_partition_dropped", topic=tp[0], partition=tp[1],
                         leader=self.leader.node_id, error=str(exc))
            return None

    # --- truncation ---------------------------------------------------------------------

    async def _truncate(self, conn: PeerConnection) -> None:
        pending = {tp: f for tp, f in self.partitions.items() if not f.truncated}
        for _ in range(MAX_TRUNCATION_ROUNDS):
            if not pending:
                return
            asks: dict[str, list[OffsetForLeaderPartition]] = {}
            for (topic, p), followed in pending.items():
                found = self._log((topic, p))
                if found is None:
                    followed.truncated = True  # dropped: no longer asked about
                    continue
                latest = found.epoch_cache.latest_epoch
                if latest is None:  # an empty cache: nothing to compare, nothing to cut
                    followed.truncated = True
                    continue
                asks.setdefault(topic, []).append(OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=followed.leader_epoch,
                    leader_epoch=latest))
            pending = {tp: f for tp, f in pending.items() if not f.truncated}
            if not asks:
                return
            answer = await conn.request(
                OffsetsForLeaderEpochRequest(replica_id=self.node_id, topics=[
                    OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in asks.items()]),
                OffsetsForLeaderEpochResponse, timeout_s=self._timeout_s)
            _check_authorized(answer.error_code, answer.error_message)
            if answer.error_code != ErrorCode.NONE:
                raise PeerError(f"OffsetsForLeaderEpoch: {answer.error_message}")
            for result in answer.topics:
                for part in result.partitions:
                    tp = (result.topic, part.partition)
                    asked = pending.get(tp)
                    if asked is None or self.partitions.get(tp) is not asked:
                        continue
                    if part.error_code != ErrorCode.NONE:
                        # The leader is not there yet (or moved on): the image will say.
                        continue
                    plog = self._log(tp)
                    if plog is None:
                        del pending[tp]
                        continue
                    cut = divergence(plog.epoch_cache, plog.log_end_offset,
                                     part.leader_epoch, part.end_offset,
                                     high_watermark=plog.high_watermark)
                    if cut.offset < plog.log_end_offset:
                        log.warning("replica_truncated", topic=tp[0], partition=tp[1],
                                    leader=self.leader.node_id, from_offset=plog.log_end_offset,
                                    to_offset=cut.offset)
                        try:
                            plog.truncate_to(cut.offset)
                        except StorageError as exc:  # closed meanwhile: deleted here
                            log.info("replica_truncate_failed", topic=tp[0],
                                     partition=tp[1], error=str(exc))
                            del pending[tp]
                            continue
                    if cut.done:
                        asked.truncated = True
                        del pending[tp]
        if pending:
            raise PeerError(f"no agreement on where {len(pending)} logs diverge after "
                            f"{MAX_TRUNCATION_ROUNDS} rounds")

    # --- fetching -----------------------------------------------------------------------

    async def _fetch(self, conn: PeerConnection) -> None:
        ready = {tp: f for tp, f in self.partitions.items() if f.truncated}
        if not ready:
            await asyncio.sleep(BACKOFF_S)  # waiting for the leader to know its epoch
            return
        topics: dict[str, list[FetchPartition]] = {}
        for (topic, p), followed in list(ready.items()):
            found = self._log((topic, p))
            if found is None:
                del ready[(topic, p)]
                continue
            topics.setdefault(topic, []).append(FetchPartition(
                partition=p, current_leader_epoch=followed.leader_epoch,
                fetch_offset=found.log_end_offset, partition_max_bytes=self._max_bytes))
        if not ready:
            return
        request = FetchRequest(replica_id=self.node_id, replica_epoch=self._broker_epoch(),
                               max_wait_ms=self._wait_max_ms,
                               min_bytes=1, max_bytes=self._max_bytes * max(len(ready), 1),
                               topics=[FetchTopic(topic=t, partitions=ps)
                                       for t, ps in topics.items()])
        answer = await conn.request(request, FetchResponse,
                                    timeout_s=self._timeout_s + self._wait_max_ms / 1000)
        _check_authorized(answer.error_code, answer.error_message)
        self._refusal_logged = False
        if answer.error_code != ErrorCode.NONE:
            raise PeerError(f"Fetch: {answer.error_message}")
        backoff = False
        for fetched in answer.responses:
            for part in fetched.partitions:
                tp = (fetched.topic, part.partition_index)
                current = self.partitions.get(tp)
                if current is None or current is not ready.get(tp):
                    continue  # unfollowed, or a new epoch, meanwhile
                if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    current.truncated = False
                    continue
                if part.error_code != ErrorCode.NONE:
                    backoff = True  # the leader moved or is not ready: the image will say
                    continue
                plog = self._log(tp)
                if plog is None:
                    continue
                try:
                    if part.records:
                        plog.append_replica(bytes(part.records))
                        self._on_appended(tp)
                    plog.set_high_watermark(min(part.high_watermark, plog.log_end_offset))
                except StorageError as exc:
                    log.error("replica_append_failed", topic=tp[0], partition=tp[1],
                              error=str(exc))
                    current.truncated = False
                    backoff = True
        if backoff:
            await asyncio.sleep(BACKOFF_S)


def _check_authorized(code: int, message: str | None) -> None:
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise _NotAuthorized(message or "CLUSTER_AUTHORIZATION_FAILED")
