"""The controller's level-triggered decisions, applied to a fake etcd and fed back to
the image as a watch would."""

from __future__ import annotations

import pytest

from groupwire.broker.cluster.controller import (
    PARTITIONS_PER_TXN,
    create_partitions_txns,
    create_topic_txns,
    decide,
    delete_topic_txn,
    preferred_leader_txns,
    propose_topic_txn,
)
from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import (
    NO_LEADER,
    PartitionState,
    controller_key,
    partition_key,
    topic_key,
)
from groupwire.broker.cluster.placement import InvalidReplicationFactor
from groupwire.broker.cluster.txn import MAX_TXN_OPS, Compare, Put, Txn
from tests.unit.cluster.fake_etcd import (
    CLUSTER,
    FakeEtcd,
    add_broker,
    add_topic,
    elect_controller,
    kill_broker,
)


class Cluster:
    """A fake etcd, the controller's image of it and its epoch."""

    def __init__(self, brokers: tuple[int, ...] = (1, 2, 3)) -> None:
        self.etcd = FakeEtcd()
        for n in brokers:
            add_broker(self.etcd, n)
        self.epoch = elect_controller(self.etcd, brokers[0])
        self.image = ClusterImage(CLUSTER)

    def sync(self) -> None:
        self.image = self.etcd.image()

    def kill(self, node_id: int) -> None:
        self.image.apply(kill_broker(self.etcd, node_id))

    def revive(self, node_id: int) -> None:
        self.image.apply(add_broker(self.etcd, node_id))

    def run(self, txns: list[Txn]) -> list[bool]:
        results = []
        for txn in txns:
            result, events = self.etcd.txn(txn)
            self.image.apply(events)
            results.append(result.succeeded)
        return results

    def decide(self) -> list[Txn]:
        return decide(self.image, self.epoch)

    def state(self, topic: str = "t", p: int = 0) -> PartitionState:
        return self.image.partitions[(topic, p)]


def _cluster(replicas: list[tuple[int, ...]] | None = None,
             states: list[PartitionState] | None = None) -> Cluster:
    c = Cluster()
    add_topic(c.etcd, "t", replicas or [(1, 2, 3), (2, 3, 1), (3, 1, 2)], states)
    c.sync()
    return c


def test_a_healthy_cluster_needs_nothing() -> None:
    assert _cluster().decide() == []


def test_a_dead_leader_is_replaced_and_a_dead_follower_leaves_the_isr() -> None:
    c = _cluster()
    c.kill(2)
    txns = c.decide()
    assert len(txns) == 1 and c.run(txns) == [True]
    # Partition 0: follower 2 removed, the leader epoch unchanged.
    assert c.state(p=0) == PartitionState(1, 0, (1, 3), 1)
    # Partition 1 (led by 2): the next replica in assignment order that is in the ISR.
    assert c.state(p=1) == PartitionState(3, 1, (3, 1), 1)
    assert c.state(p=2) == PartitionState(3, 0, (3, 1), 1)
    assert c.decide() == []


def test_the_last_isr_member_dying_leaves_no_leader_and_keeps_the_isr() -> None:
    c = _cluster([(1, 2, 3)])
    c.kill(2)
    c.kill(3)
    assert c.run(c.decide()) == [True]
    assert c.state() == PartitionState(1, 0, (1,), 1)
    c.kill(1)
    assert c.run(c.decide()) == [True]
    assert c.state() == PartitionState(NO_LEADER, 1, (1,), 2)
    assert c.decide() == []
    # 2 and 3 come back, but are not in the ISR: still no leader (no unclean election).
    c.revive(2)
    c.revive(3)
    assert c.decide() == []
    # The last ISR member returns and leads again.
    c.revive(1)
    assert c.run(c.decide()) == [True]
    assert c.state() == PartitionState(1, 2, (1,), 3)
    assert c.decide() == []


def test_a_live_broker_outside_the_isr_is_never_elected() -> None:
    c = _cluster([(1, 2, 3)], [PartitionState(1, 5, (1, 3), 7)])
    c.kill(1)
    assert c.run(c.decide()) == [True]
    assert c.state() == PartitionState(3, 6, (3,), 8)


def test_the_isr_is_never_shrunk_to_empty() -> None:
    # A live leader outside its own ISR (a state no writer makes, but etcd could hold).
    c = _cluster([(1, 2, 3)], [PartitionState(1, 0, (2,), 0)])
    c.kill(2)
    assert c.decide() == []


def test_a_leaderless_partition_with_a_live_isr_member_gets_it() -> None:
    c = _cluster([(1, 2, 3)], [PartitionState(NO_LEADER, 3, (2, 3), 4)])
    assert c.run(c.decide()) == [True]
    assert c.state() == PartitionState(2, 4, (2, 3), 5)


def test_every_txn_is_guarded_by_the_controller_epoch_and_the_revisions_read() -> None:
    c = _cluster()
    c.kill(1)
    (txn,) = c.decide()
    assert txn.compares[0] == Compare(controller_key(CLUSTER), "create", "==", c.epoch)
    keys = [partition_key(CLUSTER, "t", p) for p in range(3)]
    assert list(txn.compares[1:]) == [
        Compare(k, "mod", "==", c.etcd.kvs[k].mod_revision) for k in keys]
    assert [op.key for op in txn.success] == keys


def test_a_deposed_controllers_txn_and_a_stale_read_fail_and_write_nothing() -> None:
    c = _cluster()
    c.kill(2)
    txns = c.decide()
    revision = c.etcd.revision
    assert decide(c.image, c.epoch + 1) != txns
    assert c.run(decide(c.image, c.epoch + 1)) == [False]
    # A leader changed the ISR meanwhile: the read revision no longer matches.
    c.etcd.put(partition_key(CLUSTER, "t", 0),
               b'{"leader":1,"leader_epoch":0,"isr":[1],"partition_epoch":1}')
    assert [c.etcd.txn(t)[0].succeeded for t in txns] == [False]
    assert c.etcd.revision == revision + 1


def test_decisions_are_the_same_from_the_same_image() -> None:
    c = _cluster()
    c.kill(3)
    assert c.decide() == c.decide()


def test_partitions_are_batched_to_etcds_op_limit() -> None:
    c = Cluster()
    add_topic(c.etcd, "big", [(1, 2)] * (PARTITIONS_PER_TXN + 1))
    c.sync()
    c.kill(1)
    txns = c.decide()
    assert [len(t.success) for t in txns] == [PARTITIONS_PER_TXN, 1]
    assert len(txns[0].compares) == MAX_TXN_OPS == 128
    assert all(t.compares[0].key == controller_key(CLUSTER) for t in txns)
    assert c.run(txns) == [True, True]
    assert {s.leader for s in c.image.partitions.values()} == {2}
    assert c.decide() == []


def test_exactly_one_txns_worth_fits_one_txn() -> None:
    c = Cluster()
    add_topic(c.etcd, "big", [(1, 2)] * PARTITIONS_PER_TXN)
    c.sync()
    c.kill(2)
    assert [len(t.compares) for t in c.decide()] == [128]


def test_a_topic_is_created_once_with_leaders_first_and_full_isrs() -> None:
    c = Cluster()
    c.sync()
    txns = create_topic_txns(c.image, "t", 3, 2, start=0, topic_id="id", controller_epoch=c.epoch)
    assert txns[0].compares[1] == Compare(topic_key(CLUSTER, "t"), "create", "==", 0)
    assert c.run(txns) == [True]
    assert c.image.topics["t"].replicas == ((1, 2), (2, 3), (3, 1))
    assert c.state(p=1) == PartitionState(2, 0, (2, 3), 0)
    assert c.decide() == []
    # The same topic again: the topic key exists.
    assert c.run(create_topic_txns(c.image, "t", 3, 2, 1, "id2", c.epoch)) == [False]
    with pytest.raises(InvalidReplicationFactor):
        create_topic_txns(c.image, "u", 1, 4, 0, "id", c.epoch)


def test_a_large_topic_spans_txns_and_a_lost_tail_is_written_by_decide() -> None:
    c = Cluster()
    c.sync()
    txns = create_topic_txns(c.image, "t", 300, 3, 0, "id", c.epoch)
    assert [len(t.success) for t in txns] == [128, 127, 46]
    assert all(len(t.compares) <= MAX_TXN_OPS for t in txns)
    # The controller dies after the first txn; its successor fills in the rest.
    assert c.run(txns[:1]) == [True]
    assert len(c.image.partitions) == 127
    assert c.run(c.decide()) == [True, True]
    assert len(c.image.partitions) == 300
    tail = c.image.topics["t"].replicas[299]
    assert c.state(p=299) == PartitionState(tail[0], 0, tail, 0)
    assert c.decide() == []


def test_preferred_leaders_return_when_live_and_in_the_isr() -> None:
    c = _cluster([(1, 2, 3), (2, 3, 1)],
                 [PartitionState(3, 4, (3, 1, 2), 5), PartitionState(3, 2, (3, 1), 2)])
    txns = preferred_leader_txns(c.image, c.epoch)
    assert len(txns) == 1
    assert [op.key for op in txns[0].success if isinstance(op, Put)] == [
        partition_key(CLUSTER, "t", 0)]
    assert c.run(txns) == [True]
    assert c.state(p=0) == PartitionState(1, 5, (3, 1, 2), 6)
    assert c.state(p=1) == PartitionState(3, 2, (3, 1), 2)  # 2 is not in its ISR
    assert preferred_leader_txns(c.image, c.epoch) == []


def test_a_deleted_topic_goes_with_all_its_states_and_only_its_own() -> None:
    c = Cluster()
    c.sync()
    assert c.run(create_topic_txns(c.image, "t", 3, 2, 0, "id", c.epoch)) == [True]
    assert c.run(create_topic_txns(c.image, "t2", 2, 2, 0, "id2", c.epoch)) == [True]
    assert c.run([delete_topic_txn(c.image, "t", c.epoch)]) == [True]
    assert "t" not in c.image.topics
    assert sorted(c.image.partitions) == [("t2", 0), ("t2", 1)]
    # Again, or by a deposed controller: nothing is written.
    assert c.run([delete_topic_txn(c.image, "t", c.epoch)]) == [False]
    assert c.run([delete_topic_txn(c.image, "t2", c.epoch - 1)]) == [False]
    assert "t2" in c.image.topics


def test_a_topic_grows_with_its_replication_factor_and_only_once() -> None:
    c = Cluster()
    c.sync()
    assert c.run(create_topic_txns(c.image, "t", 2, 2, 0, "id", c.epoch)) == [True]
    before = c.image.topics["t"].replicas
    grow = create_partitions_txns(c.image, "t", 5, 1, c.epoch)
    twin = create_partitions_txns(c.image, "t", 4, 2, c.epoch)  # read the same image
    assert c.run(grow) == [True]
    topic = c.image.topics["t"]
    assert topic.replicas[:2] == before and topic.topic_id == "id"
    assert len(topic.replicas) == 5 and all(len(r) == 2 for r in topic.replicas)
    assert c.state(p=4) == PartitionState(topic.replicas[4][0], 0, topic.replicas[4], 0)
    assert c.run(twin) == [False]  # partition 2 exists now
    assert len(c.image.topics["t"].replicas) == 5
    assert c.decide() == []


def test_a_large_growth_spans_txns_within_etcds_limits() -> None:
    c = Cluster()
    c.sync()
    assert c.run(create_topic_txns(c.image, "t", 1, 3, 0, "id", c.epoch)) == [True]
    txns = create_partitions_txns(c.image, "t", 301, 0, c.epoch)
    assert all(len(t.compares) <= MAX_TXN_OPS and len(t.success) <= MAX_TXN_OPS
               for t in txns)
    assert c.run(txns) == [True] * len(txns)
    assert len(c.image.partitions) == 301


def test_a_proposed_topic_gets_its_states_from_the_controller() -> None:
    c = Cluster()
    c.sync()
    assert c.run([propose_topic_txn(c.image, "auto", 2, 3, 0, "id")]) == [True]
    assert c.image.partitions == {}
    assert c.run(c.decide()) == [True]
    replicas = c.image.topics["auto"].replicas
    assert c.state("auto", 1) == PartitionState(replicas[1][0], 0, replicas[1], 0)
    # A second proposal of the name (another broker's) writes nothing.
    assert c.run([propose_topic_txn(c.image, "auto", 5, 1, 0, "id2")]) == [False]
    assert c.image.topics["auto"].topic_id == "id"


def test_preferred_leaders_of_the_named_partitions_only() -> None:
    c = _cluster([(1, 2, 3), (2, 3, 1), (3, 1, 2)],
                 [PartitionState(3, 4, (3, 1, 2), 5), PartitionState(3, 2, (3, 2, 1), 2),
                  PartitionState(1, 1, (3, 1, 2), 1)])
    assert preferred_leader_txns(c.image, c.epoch, only=set()) == []
    assert preferred_leader_txns(c.image, c.epoch, only={("t", 7), ("u", 0)}) == []
    txns = preferred_leader_txns(c.image, c.epoch, only={("t", 1), ("t", 2)})
    assert [op.key for txn in txns for op in txn.success if isinstance(op, Put)] == [
        partition_key(CLUSTER, "t", 1), partition_key(CLUSTER, "t", 2)]
    assert c.run(txns) == [True]
    assert c.state(p=0) == PartitionState(3, 4, (3, 1, 2), 5)  # not named: left alone
    assert c.state(p=1) == PartitionState(2, 3, (3, 2, 1), 3)
    assert c.state(p=2) == PartitionState(3, 2, (3, 1, 2), 2)
    assert [op.key for txn in preferred_leader_txns(c.image, c.epoch)
            for op in txn.success if isinstance(op, Put)] == [partition_key(CLUSTER, "t", 0)]
