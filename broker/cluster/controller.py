"""The controller's decisions, level-triggered: given the image, what must be written so
the metadata agrees with who is alive (docs/design/cluster.md, "The controller").

Each decision is a guarded txn: the controller key's create_revision must still be the
controller's epoch (a deposed controller writes nothing) and each partition key's
mod_revision the one the image read (a leader's ISR change in between wins, and the
decision is taken again from the newer image). Deciding twice from one image gives the
same txns; deciding after they are applied gives none."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import (
    NO_LEADER,
    BrokerInfo,
    PartitionState,
    TopicAssignment,
    controller_key,
    encode_partition,
    encode_topic,
    partition_key,
    partitions_prefix,
    topic_key,
)
from groupwire.broker.cluster.placement import assign_replicas
from groupwire.broker.cluster.txn import MAX_TXN_OPS, Compare, Delete, Put, Txn

PARTITIONS_PER_TXN = MAX_TXN_OPS - 1
"""One compare per partition plus the controller's own must fit etcd's limit."""


def _eligible(state: PartitionState, node: int, brokers: Mapping[int, BrokerInfo]) -> bool:
    """``node`` may lead from its ISR entry: it is live, with the log the entry recorded
    (KIP-858: a replica whose storage id changed lost that log)."""
    return node in brokers and not state.lost_storage(node, brokers)


def _with_isr(state: PartitionState, leader: int, leader_epoch: int, isr: tuple[int, ...],
              brokers: Mapping[int, BrokerInfo]) -> PartitionState:
    return PartitionState(leader, leader_epoch, isr, state.partition_epoch + 1,
                          state.storage_for(isr, brokers))


def _elect(state: PartitionState, replicas: Sequence[int], brokers: Mapping[int, BrokerInfo]
           ) -> PartitionState | None:
    """The state the partition should have, or None if it already does."""
    # Members that keep their entry: live, and with the log the entry recorded. One
    # that came back with another storage id leaves (it catches up as a follower and
    # the leader adds it back under its new id).
    kept = tuple(r for r in state.isr if _eligible(state, r, brokers))
    if not _eligible(state, state.leader, brokers):
        candidates = [r for r in replicas if r in state.isr and _eligible(state, r, brokers)]
        if candidates:
            return _with_isr(state, candidates[0], state.leader_epoch + 1, kept, brokers)
        if state.leader == NO_LEADER:
            return None
        # No eligible ISR replica: no leader, and the ISR kept whole (storage ids
        # included) so a member with its log leads again when it returns (never an
        # unclean election by itself). The epoch still moves so the old leader's
        # epoch is over.
        return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr,
                              state.partition_epoch + 1, state.isr_storage)
    if kept != state.isr and kept:
        return _with_isr(state, state.leader, state.leader_epoch, kept, brokers)
    # Entries from before storage identities learn their live member's id, so the
    # next wipe of that member is caught.
    learned = PartitionState(state.leader, state.leader_epoch, state.isr,
                             state.partition_epoch + 1,
                             state.storage_for(state.isr, brokers))
    return learned if learned.isr_storage != state.isr_storage else None


def _registered(isr: tuple[int, ...], brokers: Mapping[int, BrokerInfo]
                ) -> tuple[str | None, ...]:
    """The storage ids a new ISR of live brokers records: theirs now."""
    return tuple(None if brokers.get(n) is None else brokers[n].storage_id for n in isr)


def _initial(replicas: Sequence[int], brokers: Mapping[int, BrokerInfo]) -> PartitionState:
    """A partition whose topic is assigned but whose state was never written (the
    controller that created the topic died between its txns)."""
    alive = tuple(r for r in replicas if r in brokers)
    if not alive:
        return PartitionState(NO_LEADER, 0, tuple(replicas), 0)
    return PartitionState(alive[0], 0, alive, 0, _registered(alive, brokers))


OfflineReason = Literal["no_live_isr", "isr_storage_lost"]
"""Why a partition has no leader: no ISR member is live, or the live ones came back
without the log their ISR entry recorded (a new storage id)."""


@dataclass(frozen=True, slots=True)
class Offline:
    reason: OfflineReason
    lost_storage: tuple[int, ...]
    """ISR members live under another storage id than recorded."""
    dead: tuple[int, ...]
    """ISR members not live."""


def offline_partitions(image: ClusterImage) -> dict[TopicPartition, Offline]:
    """Every assigned partition without a leader, and why (logs and metrics)."""
    found: dict[TopicPartition, Offline] = {}
    for tp, _replicas in _assigned(image):
        state = image.partitions.get(tp)
        if state is None or state.leader != NO_LEADER:
            continue
        lost = tuple(r for r in state.isr if state.lost_storage(r, image.brokers))
        dead = tuple(r for r in state.isr if r not in image.brokers)
        found[tp] = Offline("isr_storage_lost" if lost else "no_live_isr", lost, dead)
    return found


def clean_candidate(image: ClusterImage, tp: TopicPartition) -> int | None:
    """The replica :func:`decide` elects for ``tp`` if its leader is gone: the first in
    assignment order that is live, in the ISR and has the log the ISR recorded."""
    topic, p = tp
    state = image.partitions.get(tp)
    assignment = image.topics.get(topic)
    if state is None or assignment is None or p >= len(assignment.replicas):
        return None
    return next((r for r in assignment.replicas[p]
                 if r in state.isr and _eligible(state, r, image.brokers)), None)


def unclean_candidate(image: ClusterImage, tp: TopicPartition) -> int | None:
    """Whom an unclean election (an operator's explicit choice of data loss) makes
    ``tp``'s leader: the first live replica in assignment order, one known to have
    lost its log (a new storage id) only if no other is live, since any other holds
    some of the data."""
    topic, p = tp
    state = image.partitions.get(tp)
    assignment = image.topics.get(topic)
    if state is None or assignment is None or p >= len(assignment.replicas):
        return None
    live = [r for r in assignment.replicas[p] if r in image.brokers]
    whole = [r for r in live if not state.lost_storage(r, image.brokers)]
    chosen = whole or live
    return chosen[0] if chosen else None


def needs_unclean_election(image: ClusterImage, tp: TopicPartition) -> bool:
    """``tp`` has no eligible leader now and :func:`decide` cannot elect one."""
    state = image.partitions.get(tp)
    if state is None:
        return False
    if _eligible(state, state.leader, image.brokers):
        return False
    return clean_candidate(image, tp) is None


def unclean_leader_txns(image: ClusterImage, controller_epoch: int,
                        only: Collection[TopicPartition] | None = None) -> list[Txn]:
    """``groupwire cluster elect-leaders --unclean``: each partition without an
    eligible leader gets :func:`unclean_candidate` as its leader, the ISR of it alone
    (leader epoch + 1). Records it lacks are lost: the operator chose so."""
    writes: list[tuple[TopicPartition, PartitionState]] = []
    for tp, _replicas in _assigned(image):
        if only is not None and tp not in only:
            continue
        if not needs_unclean_election(image, tp):
            continue
        chosen = unclean_candidate(image, tp)
        state = image.partitions.get(tp)
        if chosen is None or state is None:
            continue
        writes.append((tp, PartitionState(chosen, state.leader_epoch + 1, (chosen,),
                                          state.partition_epoch + 1,
                                          _registered((chosen,), image.brokers))))
    return _batched(image, controller_epoch, writes)


def _batched(image: ClusterImage, controller_epoch: int | None,
             writes: Iterable[tuple[TopicPartition, PartitionState]]) -> list[Txn]:
    """Guarded by each partition key's mod revision as read, and by the controller's
    epoch unless ``controller_epoch`` is None (a replica's own writes)."""
    guard = (() if controller_epoch is None else
             (Compare(controller_key(image.cluster), "create", "==", controller_epoch),))
    txns: list[Txn] = []
    compares: list[Compare] = []
    puts: list[Put] = []
    for (topic, p), state in writes:
        key = partition_key(image.cluster, topic, p)
        # A missing key reads 0: a partition never written must still be missing.
        compares.append(Compare(key, "mod", "==",
                                image.partition_revisions.get((topic, p), 0)))
        puts.append(Put(key, encode_partition(state)))
        if len(puts) == PARTITIONS_PER_TXN:
            txns.append(Txn((*guard, *compares), tuple(puts)))
            compares, puts = [], []
    if puts:
        txns.append(Txn((*guard, *compares), tuple(puts)))
    return txns


def _assigned(image: ClusterImage) -> Iterable[tuple[TopicPartition, tuple[int, ...]]]:
    for name in sorted(image.topics):
        for p, replicas in enumerate(image.topics[name].replicas):
            yield (name, p), replicas


def decide(image: ClusterImage, controller_epoch: int) -> list[Txn]:
    """Elections and ISR clean-up after brokers died or returned, in topic-partition
    order, as few txns as etcd's op limit allows. A partition state without a topic
    assignment is left alone (its topic is being deleted)."""
    writes: list[tuple[TopicPartition, PartitionState]] = []
    for tp, replicas in _assigned(image):
        state = image.partitions.get(tp)
        new = (_initial(replicas, image.brokers) if state is None
               else _elect(state, replicas, image.brokers))
        if new is not None:
            writes.append((tp, new))
    return _batched(image, controller_epoch, writes)


def preferred_leader_txns(image: ClusterImage, controller_epoch: int,
                          only: Collection[TopicPartition] | None = None) -> list[Txn]:
    """Leadership back to each partition's first replica where it is live and in the
    ISR (``groupwire cluster elect-leaders``); ``only``: those partitions (ElectLeaders
    names them), None: all."""
    writes: list[tuple[TopicPartition, PartitionState]] = []
    for tp, replicas in _assigned(image):
        if only is not None and tp not in only:
            continue
        state = image.partitions.get(tp)
        if state is None or not replicas:
            continue
        preferred = replicas[0]
        if (state.leader != preferred and preferred in state.isr
                and _eligible(state, preferred, image.brokers)):
            writes.append((tp, PartitionState(preferred, state.leader_epoch + 1, state.isr,
                                              state.partition_epoch + 1, state.isr_storage)))
    return _batched(image, controller_epoch, writes)


def imbalanced_partitions(image: ClusterImage, max_imbalance: float
                          ) -> set[TopicPartition]:
    """Kafka's automatic leader rebalance (``auto.leader.rebalance.enable``): for each
    broker that does not lead more than ``max_imbalance`` of the partitions it is the
    preferred replica of, those it could take back now (live, in the ISR, with its
    log). After brokers came back (an etcd outage that fenced them all, a restart) the
    survivors lead everything; this returns leadership to where placement spread it."""
    preferred_of: dict[int, list[TopicPartition]] = {}
    for tp, replicas in _assigned(image):
        if replicas:
            preferred_of.setdefault(replicas[0], []).append(tp)
    out: set[TopicPartition] = set()
    for node, tps in preferred_of.items():
        states = [(tp, image.partitions.get(tp)) for tp in tps]
        elsewhere = [tp for tp, state in states if state is None or state.leader != node]
        if len(elsewhere) <= max_imbalance * len(tps):
            continue
        for tp in elsewhere:
            state = image.partitions.get(tp)
            if state is not None and node in state.isr and _eligible(state, node,
                                                                      image.brokers):
                out.add(tp)
    return out


@dataclass(frozen=True, slots=True)
class OfflineReplicaPlan:
    """What a broker whose logs went offline writes about them (:func:`offline_replicas`)."""

    txns: list[Txn]
    handed_over: dict[TopicPartition, int]
    """Led here: the replica that leads next."""
    left_isr: tuple[TopicPartition, ...]
    """Followed here: this broker leaves the ISR."""
    kept: tuple[TopicPartition, ...]
    """Led here, and no other live ISR member with its log: the leadership stays here
    (writes are refused until the log comes back) rather than the partition go
    offline or elect outside the ISR."""


def offline_replicas(image: ClusterImage, node_id: int,
                     offline: Collection[TopicPartition]) -> OfflineReplicaPlan:
    """A replica whose local log went offline (a failed write or fsync: a full or
    failing disk) must neither lead nor count as in sync. For each partition in
    ``offline`` this broker (``node_id``) leads: leadership to the first replica in
    assignment order that is live, in the ISR and has the log it recorded (as
    :func:`decide` elects), this broker out of the ISR, leader epoch + 1. For each it
    follows in the ISR of a live leader: out of the ISR (partition epoch + 1).
    Leaderless partitions are left as they are (their ISR is kept whole for the
    controller). The broker writes these itself, each guarded by the partition key's
    mod revision as read: a newer state (an election, an ISR change) wins and the
    decision is taken again from it."""
    writes: list[tuple[TopicPartition, PartitionState]] = []
    handed: dict[TopicPartition, int] = {}
    left: list[TopicPartition] = []
    kept: list[TopicPartition] = []
    for tp, replicas in _assigned(image):
        state = image.partitions.get(tp)
        if tp not in offline or state is None or node_id not in state.isr:
            continue
        isr = tuple(r for r in state.isr if r != node_id)
        if state.leader == node_id:
            nxt = next((r for r in replicas if r != node_id and r in state.isr
                        and _eligible(state, r, image.brokers)), None)
            if nxt is None:
                kept.append(tp)
                continue
            handed[tp] = nxt
            writes.append((tp, PartitionState(nxt, state.leader_epoch + 1, isr,
                                              state.partition_epoch + 1,
                                              state.storage_for(isr, image.brokers))))
        elif state.leader != NO_LEADER and _eligible(state, state.leader, image.brokers):
            left.append(tp)
            writes.append((tp, PartitionState(state.leader, state.leader_epoch, isr,
                                              state.partition_epoch + 1,
                                              state.storage_for(isr, image.brokers))))
    return OfflineReplicaPlan(_batched(image, None, writes), handed, tuple(left),
                              tuple(kept))


def create_topic_txns(image: ClusterImage, name: str, partitions: int,
                      replication_factor: int, start: int, topic_id: str,
                      controller_epoch: int, internal: bool = False) -> list[Txn]:
    """A new topic over the live brokers: its assignment and as many partition states
    as fit in the first txn (guarded by the topic key not existing), the rest in
    further txns (guarded by their keys not existing). If the controller dies between
    them, the next one's ``decide`` writes the missing states.

    Raises InvalidReplicationFactor when the live brokers are too few."""
    replicas = assign_replicas(list(image.brokers.values()), partitions,
                               replication_factor, start)
    topic = TopicAssignment(name, topic_id, internal, replicas)
    guard = Compare(controller_key(image.cluster), "create", "==", controller_epoch)
    tkey = topic_key(image.cluster, name)
    states = [(partition_key(image.cluster, name, p),
               PartitionState(leader=r[0], leader_epoch=0, isr=r, partition_epoch=0,
                              isr_storage=_registered(r, image.brokers)))
              for p, r in enumerate(replicas)]
    # First txn: 2 compares (controller, topic) and 1 + k puts.
    first = states[:MAX_TXN_OPS - 1]
    txns = [Txn((guard, Compare(tkey, "create", "==", 0)),
                (Put(tkey, encode_topic(topic)),
                 *(Put(k, encode_partition(s)) for k, s in first)))]
    rest = states[len(first):]
    for i in range(0, len(rest), PARTITIONS_PER_TXN):
        chunk = rest[i:i + PARTITIONS_PER_TXN]
        txns.append(Txn((guard, *(Compare(k, "create", "==", 0) for k, _ in chunk)),
                        tuple(Put(k, encode_partition(s)) for k, s in chunk)))
    return txns


def delete_topic_txn(image: ClusterImage, name: str, controller_epoch: int) -> Txn:
    """The topic's assignment and every partition state, in one txn: every broker's
    watch sees the topic go at once and deletes its replicas."""
    guard = Compare(controller_key(image.cluster), "create", "==", controller_epoch)
    tkey = topic_key(image.cluster, name)
    return Txn((guard, Compare(tkey, "create", ">", 0)),
               (Delete(tkey), Delete(partitions_prefix(image.cluster, name), prefix=True)))


def create_partitions_txns(image: ClusterImage, name: str, new_total: int, start: int,
                           controller_epoch: int) -> list[Txn]:
    """A topic grown to ``new_total`` partitions: the new ones placed over the live
    brokers with the topic's replication factor, the assignment rewritten with them.
    The first txn is guarded by the new partitions' keys not existing yet, so two
    growths of one topic cannot both win; states that do not fit it follow as in
    :func:`create_topic_txns`.

    Raises InvalidReplicationFactor when the live brokers are too few."""
    topic = image.topics[name]
    old = len(topic.replicas)
    rf = len(topic.replicas[0]) if topic.replicas else 1
    placed = assign_replicas(list(image.brokers.values()), new_total, rf, start)[old:]
    grown = TopicAssignment(name, topic.topic_id, topic.internal, topic.replicas + placed)
    guard = Compare(controller_key(image.cluster), "create", "==", controller_epoch)
    states = [(partition_key(image.cluster, name, old + i),
               PartitionState(leader=r[0], leader_epoch=0, isr=r, partition_epoch=0,
                              isr_storage=_registered(r, image.brokers)))
              for i, r in enumerate(placed)]
    # Compares: the controller and each new key; puts: the topic and those keys.
    first, rest = states[:PARTITIONS_PER_TXN], states[PARTITIONS_PER_TXN:]
    txns = [Txn((guard, *(Compare(k, "create", "==", 0) for k, _ in first)),
                (Put(topic_key(image.cluster, name), encode_topic(grown)),
                 *(Put(k, encode_partition(s)) for k, s in first)))]
    for i in range(0, len(rest), PARTITIONS_PER_TXN):
        chunk = rest[i:i + PARTITIONS_PER_TXN]
        txns.append(Txn((guard, *(Compare(k, "create", "==", 0) for k, _ in chunk)),
                        tuple(Put(k, encode_partition(s)) for k, s in chunk)))
    return txns


def propose_topic_txn(image: ClusterImage, name: str, partitions: int,
                      replication_factor: int, start: int, topic_id: str, *,
                      internal: bool = False) -> Txn:
    """A topic auto-created by any broker (Metadata's auto-creation, and
    ``__transaction_state``, ``internal``, on first need): only its assignment, put if
    absent. The controller's :func:`decide` then writes the partition states from it,
    as for a creation whose controller died half-way.

    Raises InvalidReplicationFactor when the live brokers are too few."""
    replicas = assign_replicas(list(image.brokers.values()), partitions,
                               replication_factor, start)
    tkey = topic_key(image.cluster, name)
    return Txn((Compare(tkey, "create", "==", 0),),
               (Put(tkey, encode_topic(TopicAssignment(name, topic_id, internal, replicas))),))
