"""The leader's side of replication: each led partition's :class:`LeaderReplicaState`,
fed by followers' fetches and the leader's appends; the high watermark it computes set
on the log; ISR changes written to etcd; acks=all produces answered once the high
watermark passes them (docs/design/cluster.md, "Replication")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import PartitionState, encode_partition, partition_key
from groupwire.broker.cluster.replica import LeaderReplicaState
from groupwire.broker.cluster.txn import Compare, Put, Txn
from groupwire.broker.etcd.store import EtcdError, MetadataStore
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.broker.supervisor import Service, Supervisor
from groupwire.protocol.errors import ErrorCode

log = get_logger("groupwire.cluster")


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(eq=False, slots=True)
class _Waiter:
    end_offset: int
    future: asyncio.Future[ErrorCode]


class LeaderStates:
    def __init__(self, node_id: int, store: TopicStore, etcd: MetadataStore, cluster: str,
                 image: Callable[[], ClusterImage], *, replica_lag_time_max_ms: int,
                 min_insync_replicas: int,
                 on_high_watermark: Callable[[TopicPartition], None],
                 clock: Callable[[], int] = monotonic_ms,
                 trusted: Callable[[], bool] = lambda: True,
                 supervisor: Supervisor | None = None) -> None:
        """``on_high_watermark``: the partition's high watermark moved (parked consumer
        fetches look again); ``trusted``: whether this broker may act as a leader now
        (not fenced: its lease is kept and its image is current). While it may not, no
        high watermark moves and no acks=all produce is answered NONE: the ISR they
        would rest on may already be another leader's."""
        self.node_id = node_id
        self.store = store
        self.etcd = etcd
        self.cluster = cluster
        self._image = image
        self.lag_ms = replica_lag_time_max_ms
        self.min_insync = min_insync_replicas
        self._on_hw = on_high_watermark
        self._clock = clock
        self._trusted = trusted
        self.states: dict[TopicPartition, LeaderReplicaState] = {}
        self._waiters: dict[TopicPartition, list[_Waiter]] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._shrinker: Service | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0
        """ISR changes this broker wrote as a leader (metrics)."""
        self.listeners: list[Callable[[], None]] = []
        """Called when a high watermark moves (tests wait on them)."""

    def start(self) -> None:
        self._shrinker = self._supervisor.spawn(f"isr-shrink-{self.node_id}",
                                                self._shrink_loop, kind="isr-shrink")

    async def close(self) -> None:
        if self._shrinker is not None:
            await self._shrinker.stop()
        tasks = list(self._writes)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for tp in list(self.states):
            self.stop(tp)

    # --- roles --------------------------------------------------------------------------

    def lead(self, tp: TopicPartition, replicas: tuple[int, ...], state: PartitionState,
             ) -> None:
        """This broker took ``tp`` on in ``state.leader_epoch``: followers' positions
        start unknown, their clocks now (Kafka's ``makeLeader``)."""
        plog = self.store.log(*tp)
        leo = plog.log_end_offset
        self.stop(tp)
        self.states[tp] = LeaderReplicaState(
            leader=self.node_id, replicas=replicas,
            isr=(set(state.isr) & set(replicas)) | {self.node_id},
            leader_epoch=state.leader_epoch, log_end_offset=leo,
            high_watermark=min(plog.high_watermark, leo),
            replica_lag_time_max_ms=self.lag_ms, now_ms=self._clock(),
            partition_epoch=state.partition_epoch)
        self.appended(tp)

    def stop(self, tp: TopicPartition) -> None:
        """No longer the leader: acks=all produces still waiting are answered
        NOT_LEADER_OR_FOLLOWER (the records may still survive, or not)."""
        self.states.pop(tp, None)
        for waiter in self._waiters.pop(tp, []):
            if not waiter.future.done():
                waiter.future.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def image_changed(self, image: ClusterImage) -> None:
        """The ISR the watch brings (ours committed, or the controller dropping a dead
        follower) becomes the state's committed ISR."""
        for tp, rs in self.states.items():
            state = image.partitions.get(tp)
            if state is None or state.leader_epoch != rs.leader_epoch:
                continue
            if state.partition_epoch > rs.partition_epoch and self.node_id in state.isr:
                rs.isr_committed(set(state.isr), state.partition_epoch)
                self._hw_check(tp)

    # --- fetches and appends ------------------------------------------------------------

    def follower_fetched(self, tp: TopicPartition, node: int, fetch_offset: int) -> None:
        rs = self.states.get(tp)
        if rs is None or node not in rs.replicas or node == self.node_id:
            return
        plog = self.store.log(*tp)
        rs.leader_appended(plog.log_end_offset)
        rs.follower_fetched(node, fetch_offset, plog.log_end_offset, self._clock())
        self._hw_check(tp)
        # Only live brokers may join (Kafka's KIP-841): a dead follower's last fetch
        # may still reach the high watermark.
        live = self._image().brokers
        expand = frozenset(n for n in rs.isr_to_expand() if n in live)
        if expand:
            self._write_isr(tp, rs, rs.isr | expand)

    def appended(self, tp: TopicPartition) -> None:
        rs = self.states.get(tp)
        if rs is None:
            return
        rs.leader_appended(self.store.log(*tp).log_end_offset)
        self._hw_check(tp)

    def _hw_check(self, tp: TopicPartition) -> None:
        if not self._trusted():
            return  # checked again on the next fetch, append or ISR change
        rs = self.states[tp]
        plog = self.store.log(*tp)
        if rs.high_watermark > plog.high_watermark:
            plog.set_high_watermark(rs.high_watermark)
            self._on_hw(tp)
            for listener in list(self.listeners):
                listener()
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        left = []
        for waiter in waiters:
            verdict = rs.can_ack(waiter.end_offset, self.min_insync)
            if waiter.future.done():
                continue
            if verdict is False:
                left.append(waiter)
            elif verdict is True:
                waiter.future.set_result(ErrorCode.NONE)
            else:
                waiter.future.set_result(ErrorCode[verdict])
        self._waiters[tp] = left

    # --- acks=all -----------------------------------------------------------------------

    async def acked(self, tp: TopicPartition, end_offset: int, timeout_ms: int) -> ErrorCode:
        """Wait until the high watermark passes ``end_offset`` (the offset after the
        batch): NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, or
        REQUEST_TIMED_OUT after ``timeout_ms``."""
        rs = self.states.get(tp)
        if rs is None or not self._trusted():
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        verdict = rs.can_ack(end_offset, self.min_insync)
        if verdict is True:
            return ErrorCode.NONE
        if verdict is not False:
            return ErrorCode[verdict]
        waiter = _Waiter(end_offset, asyncio.get_running_loop().create_future())
        self._waiters.setdefault(tp, []).append(waiter)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await waiter.future
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    # --- ISR changes --------------------------------------------------------------------

    async def _shrink_loop(self) -> None:
        interval = max(self.lag_ms / 2000, 0.01)
        while True:
            await asyncio.sleep(interval)
            self.shrink_now()

    def shrink_now(self) -> None:
        now = self._clock()
        for tp, rs in list(self.states.items()):
            out = rs.isr_to_shrink(now)
            if out:
                log.info("isr_shrinking", topic=tp[0], partition=tp[1],
                         lagging=sorted(out), lag_ms=self.lag_ms)
                self._write_isr(tp, rs, rs.isr - out)

    def _write_isr(self, tp: TopicPartition, rs: LeaderReplicaState,
                   new_isr: frozenset[int]) -> None:
        image = self._image()
        state = image.partitions.get(tp)
        if state is None or state.leader_epoch != rs.leader_epoch \
                or state.leader != self.node_id:
            return
        rs.propose_isr(new_isr)
        isr = tuple(sorted(new_isr))
        # Members kept keep their recorded storage ids; one joining records its own.
        new = PartitionState(self.node_id, rs.leader_epoch, isr, state.partition_epoch + 1,
                             state.storage_for(isr, image.brokers))
        key = partition_key(self.cluster, *tp)
        txn = Txn((Compare(key, "mod", "==", image.partition_revisions.get(tp, 0)),),
                  (Put(key, encode_partition(new)),))
        task = asyncio.create_task(self._commit_isr(tp, rs, new, txn))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _commit_isr(self, tp: TopicPartition, rs: LeaderReplicaState,
                          new: PartitionState, txn: Txn) -> None:
        try:
            ok = (await self.etcd.txn(txn)).succeeded
        except EtcdError as exc:
            log.warning("isr_write_failed", topic=tp[0], partition=tp[1], error=str(exc))
            ok = False
        if self.states.get(tp) is not rs:
            return
        if not ok:
            rs.isr_change_failed()
            return
        grew = len(new.isr) > len(rs.isr)
        if grew:
            self.isr_expands += 1
        else:
            self.isr_shrinks += 1
        rs.isr_committed(set(new.isr), new.partition_epoch)
        log.info("isr_expanded" if grew else "isr_shrunk", topic=tp[0], partition=tp[1],
                 isr=list(new.isr), partition_epoch=new.partition_epoch)
        self._hw_check(tp)

    def under_replicated(self) -> int:
        """Led partitions whose ISR is smaller than their replica set."""
        return sum(1 for rs in self.states.values() if len(rs.isr) < len(rs.replicas))
