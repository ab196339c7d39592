"""Who leads what on this broker in a cluster: the etcd image says who should, and a
partition counts as led here only once its log has taken the epoch on
(:class:`broker.clustering.replica_manager.ReplicaManager`), and never while fenced: with
its lease lost, or its image not confirmed current within a lease TTL or not read
again since it registered anew (a zombie must not lead on what it last saw)."""

from __future__ import annotations

from collections.abc import Callable

from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import NO_LEADER, PartitionState
from groupwire.broker.partition_roles import (
    NO_LEADER_EPOCH,
    Refusal,
    epoch_refusal,
    unknown_partition,
)
from groupwire.protocol.errors import ErrorCode


def leaderless_reason(image: ClusterImage, topic: str, partition: int,
                      state: PartitionState) -> str:
    """Why a partition has no leader, for the clients refused meanwhile."""
    lost = [n for n in state.isr if state.lost_storage(n, image.brokers)]
    if lost:
        return (f"{topic}-{partition} has no leader: its in-sync replicas {lost} came back "
                f"without their logs (a new storage id); it stays offline until a replica "
                f"with the data returns, or an operator accepts data loss "
                f"(groupwire cluster elect-leaders --unclean)")
    return (f"{topic}-{partition} has no leader: none of its in-sync replicas "
            f"{list(state.isr)} is live")


class ClusterLeadership:
    def __init__(self, node_id: int, image: Callable[[], ClusterImage],
                 fenced: Callable[[], bool], *, min_insync_replicas: int = 1,
                 why_fenced: Callable[[], str | None] = lambda: None) -> None:
        """``fenced``: the broker's lease is lost or its image is not known current
        (:attr:`Registration.fenced`); ``why_fenced`` says which, for the refusal."""
        self._node_id = node_id
        self._why_fenced = why_fenced
        self._min_insync = min_insync_replicas
        self._image = image
        self._fenced = fenced
        self.led: dict[TopicPartition, int] = {}
        """Partitions whose log took leadership here, with the epoch it took."""

    @property
    def node_id(self) -> int:
        return self._node_id

    def check(self, topic: str, partition: int,
              current_leader_epoch: int = NO_LEADER_EPOCH) -> Refusal | None:
        if self._fenced():
            return Refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self._node_id} is fenced ({self._why()}) and leads "
                           f"nothing until it has caught up with etcd")
        image = self._image()
        state = image.partitions.get((topic, partition))
        if state is None:
            assignment = image.topics.get(topic)
            if assignment is not None and 0 <= partition < len(assignment.replicas):
                return Refusal(ErrorCode.LEADER_NOT_AVAILABLE,
                               f"{topic}-{partition} has no leader yet")
            return unknown_partition(topic, partition)
        if state.leader == NO_LEADER:
            return Refusal(ErrorCode.LEADER_NOT_AVAILABLE,
                           leaderless_reason(image, topic, partition, state))
        if state.leader != self._node_id:
            who = f"broker {state.leader}"
            return Refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self._node_id} does not lead {topic}-{partition}: "
                           f"{who} does, in epoch {state.leader_epoch}")
        if self.led.get((topic, partition)) != state.leader_epoch:
            return Refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self._node_id} is taking over {topic}-{partition} "
                           f"(epoch {state.leader_epoch})")
        return epoch_refusal(topic, partition, current_leader_epoch, state.leader_epoch)

    def _why(self) -> str:
        return self._why_fenced() or "its etcd lease or metadata image is not current"

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.led.get((topic, partition), NO_LEADER_EPOCH)

    def acks_all(self, topic: str, partition: int) -> Refusal | None:
        isr = self.isr(topic, partition)
        if len(isr) >= self._min_insync:
            return None
        return Refusal(ErrorCode.NOT_ENOUGH_REPLICAS,
                       f"{topic}-{partition} has {len(isr)} in-sync replicas "
                       f"({', '.join(map(str, isr))}); acks=all needs "
                       f"{self._min_insync} (--min-insync-replicas)")

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        """The committed ISR (what ``--min-insync-replicas`` is checked against)."""
        state = self._image().partitions.get((topic, partition))
        return () if state is None else state.isr
