"""The controller's decisions, level-triggered: given the image, what must be written so
the metadata agrees with who is alive (docs/design/cluster.md, "The controller").

Each decision is a guarded txn: the controller key's create_revision must still be the
controller's epoch (a deposed controller writes nothing) and each partition key's
mod_revision the one the image read (a leader's ISR change in between wins, and the
decision is taken again from the newer image). Deciding twice from one image gives the
same txns; deciding after they are applied gives none."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import (
    NO_LEADER,
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


def _elect(state: PartitionState, replicas: Sequence[int], live: set[int]
           ) -> PartitionState | None:
    """The state the partition should have, or None if it already does."""
    live_isr = tuple(r for r in state.isr if r in live)
    if state.leader not in live:
        candidates = [r for r in replicas if r in live and r in state.isr]
        if candidates:
            return PartitionState(leader=candidates[0], leader_epoch=state.leader_epoch + 1,
                                  isr=live_isr, partition_epoch=state.partition_epoch + 1)
        if state.leader == NO_LEADER:
            return None
        # No live ISR replica: no leader, and the ISR kept so its last member leads
        # again when it returns (never an unclean election). The epoch still moves so
        # the old leader's epoch is over.
        return PartitionState(leader=NO_LEADER, leader_epoch=state.leader_epoch + 1,
                              isr=state.isr, partition_epoch=state.partition_epoch + 1)
    if live_isr != state.isr and live_isr:
        return PartitionState(leader=state.leader, leader_epoch=state.leader_epoch,
                              isr=live_isr, partition_epoch=state.partition_epoch + 1)
    return None


def _initial(replicas: Sequence[int], live: set[int]) -> PartitionState:
    """A partition whose topic is assigned but whose state was never written (the
    controller that created the topic died between its txns)."""
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        return PartitionState(NO_LEADER, 0, tuple(replicas), 0)
    return PartitionState(alive[0], 0, alive, 0)


def _batched(image: ClusterImage, controller_epoch: int,
             writes: Iterable[tuple[TopicPartition, PartitionState]]) -> list[Txn]:
    guard = Compare(controller_key(image.cluster), "create", "==", controller_epoch)
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
            txns.append(Txn((guard, *compares), tuple(puts)))
            compares, puts = [], []
    if puts:
        txns.append(Txn((guard, *compares), tuple(puts)))
    return txns


def _assigned(image: ClusterImage) -> Iterable[tuple[TopicPartition, tuple[int, ...]]]:
    for name in sorted(image.topics):
        for p, replicas in enumerate(image.topics[name].replicas):
            yield (name, p), replicas


def decide(image: ClusterImage, controller_epoch: int) -> list[Txn]:
    """Elections and ISR clean-up after brokers died or returned, in topic-partition
    order, as few txns as etcd's op limit allows. A partition state without a topic
    assignment is left alone (its topic is being deleted)."""
    live = set(image.brokers)
    writes: list[tuple[TopicPartition, PartitionState]] = []
    for tp, replicas in _assigned(image):
        state = image.partitions.get(tp)
        new = _initial(replicas, live) if state is None else _elect(state, replicas, live)
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
        if (state.leader != preferred and preferred in image.brokers
                and preferred in state.isr):
            writes.append((tp, PartitionState(preferred, state.leader_epoch + 1, state.isr,
                                              state.partition_epoch + 1)))
    return _batched(image, controller_epoch, writes)


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
               PartitionState(leader=r[0], leader_epoch=0, isr=r, partition_epoch=0))
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
               PartitionState(leader=r[0], leader_epoch=0, isr=r, partition_epoch=0))
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
                      replication_factor: int, start: int, topic_id: str) -> Txn:
    """A topic auto-created by any broker (Metadata's auto-creation): only its
    assignment, put if absent. The controller's :func:`decide` then writes the
    partition states from it, as for a creation whose controller died half-way.

    Raises InvalidReplicationFactor when the live brokers are too few."""
    replicas = assign_replicas(list(image.brokers.values()), partitions,
                               replication_factor, start)
    tkey = topic_key(image.cluster, name)
    return Txn((Compare(tkey, "create", "==", 0),),
               (Put(tkey, encode_topic(TopicAssignment(name, topic_id, False, replicas))),))
