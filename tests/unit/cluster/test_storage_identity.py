"""Storage identities in the controller's decisions (issue 24, 0b): a replica that comes
back without the log its ISR entry recorded is never elected from that entry, leaves the
ISR of a led partition, and a partition with no other eligible member stays offline
until one returns or an operator chooses an unclean election."""

from __future__ import annotations

import pytest

from groupwire.broker.cluster.controller import (
    Offline,
    create_topic_txns,
    decide,
    needs_unclean_election,
    offline_partitions,
    preferred_leader_txns,
    unclean_leader_txns,
)
from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import (
    NO_LEADER,
    BrokerInfo,
    PartitionState,
    broker_key,
    decode_broker,
    decode_partition,
    encode_broker,
    encode_partition,
    partition_key,
)
from groupwire.broker.cluster.txn import Txn
from tests.unit.cluster.fake_etcd import (
    CLUSTER,
    FakeEtcd,
    add_topic,
    elect_controller,
    kill_broker,
)

KEY = partition_key(CLUSTER, "t", 0)


def _info(node_id: int, storage: str | None) -> BrokerInfo:
    return BrokerInfo(node_id, f"host{node_id}", 9092, None, f"inc-{storage}",
                      storage_id=storage)


class Cluster:
    def __init__(self, storages: dict[int, str | None]) -> None:
        self.etcd = FakeEtcd()
        for n, storage in storages.items():
            self.etcd.put(broker_key(CLUSTER, n), encode_broker(_info(n, storage)))
        self.epoch = elect_controller(self.etcd, min(storages))
        self.image = ClusterImage(CLUSTER)

    def sync(self) -> None:
        self.image = self.etcd.image()

    def register(self, node_id: int, storage: str | None) -> None:
        self.image.apply(self.etcd.put(broker_key(CLUSTER, node_id),
                                       encode_broker(_info(node_id, storage))))

    def kill(self, node_id: int) -> None:
        self.image.apply(kill_broker(self.etcd, node_id))

    def run(self, txns: list[Txn]) -> list[bool]:
        results = []
        for txn in txns:
            result, events = self.etcd.txn(txn)
            self.image.apply(events)
            results.append(result.succeeded)
        return results

    def settle(self) -> None:
        """Decide until there is nothing left to write (level-triggered)."""
        for _ in range(5):
            txns = decide(self.image, self.epoch)
            if not txns:
                return
            assert all(self.run(txns))
        raise AssertionError("the controller never settles")

    def state(self) -> PartitionState:
        return self.image.partitions[("t", 0)]


def _cluster(state: PartitionState | None = None,
             storages: dict[int, str | None] | None = None) -> Cluster:
    c = Cluster(storages or {1: "s1", 2: "s2", 3: "s3"})
    add_topic(c.etcd, "t", [(1, 2, 3)], [state or PartitionState(1, 0, (1, 2, 3), 0,
                                                                  ("s1", "s2", "s3"))])
    c.sync()
    return c


# --- values ------------------------------------------------------------------------------

def test_storage_ids_round_trip_and_old_values_read_as_unknown() -> None:
    info = _info(4, "abc")
    assert decode_broker("k", encode_broker(info)) == info
    assert decode_broker("k", encode_broker(_info(4, None))).storage_id is None
    state = PartitionState(1, 2, (1, 3), 4, ("a", None))
    assert decode_partition("k", encode_partition(state)) == state
    old = decode_partition("k", b'{"leader":1,"leader_epoch":2,"isr":[1,3],"partition_epoch":4}')
    assert old == PartitionState(1, 2, (1, 3), 4)
    assert old.storage_of(1) is None
    # All unknown is the same state as no ids at all, so nothing is rewritten for it.
    assert PartitionState(1, 2, (1,), 4, (None,)) == PartitionState(1, 2, (1,), 4)


@pytest.mark.parametrize("value, why", [
    (b'{"leader":1,"leader_epoch":0,"isr":[1,2],"partition_epoch":0,"isr_storage":["a"]}',
     "does not match"),
    (b'{"leader":1,"leader_epoch":0,"isr":[1],"partition_epoch":0,"isr_storage":[3]}',
     "not a list of strings"),
    (b'{"leader":1,"leader_epoch":0,"isr":[1],"partition_epoch":0,"isr_storage":"a"}',
     "not a list of strings"),
])
def test_a_malformed_storage_list_names_the_key(value: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=f"{KEY}.*{why}"):
        decode_partition(KEY, value)


def test_a_new_topic_records_each_replicas_storage() -> None:
    c = Cluster({1: "s1", 2: "s2", 3: None})
    c.sync()
    assert all(c.run(create_topic_txns(c.image, "n", 1, 3, 0, "id", c.epoch)))
    state = c.image.partitions[("n", 0)]
    assert [state.storage_of(n) for n in state.isr] == [
        {1: "s1", 2: "s2", 3: None}[n] for n in state.isr]


# --- the wiped disk (issue 24, 0b) -------------------------------------------------------

def test_a_wiped_last_isr_member_is_never_elected_and_its_entry_is_kept() -> None:
    c = _cluster()
    c.kill(2)
    c.kill(3)
    c.settle()
    assert c.state() == PartitionState(1, 0, (1,), 1, ("s1",))
    c.kill(1)
    c.settle()
    assert c.state() == PartitionState(NO_LEADER, 1, (1,), 2, ("s1",))
    # Broker 1 returns on an empty data dir: a new storage id.
    c.register(1, "s1-wiped")
    assert decide(c.image, c.epoch) == []
    assert offline_partitions(c.image) == {("t", 0): Offline("isr_storage_lost", (1,), ())}
    # The others return: not in the ISR, so not elected either (no unclean election).
    c.register(2, "s2")
    c.register(3, "s3")
    assert decide(c.image, c.epoch) == []
    assert needs_unclean_election(c.image, ("t", 0))
    # The disk with the log comes back (it was a mount that failed): 1 leads again.
    c.kill(1)
    c.register(1, "s1")
    c.settle()
    assert c.state() == PartitionState(1, 2, (1,), 3, ("s1",))
    assert offline_partitions(c.image) == {}


def test_without_storage_ids_the_last_isr_member_is_trusted_as_before() -> None:
    c = _cluster(PartitionState(NO_LEADER, 1, (1,), 2), {1: None, 2: None, 3: None})
    assert offline_partitions(c.image) == {("t", 0): Offline("no_live_isr", (), ())}
    c.settle()
    assert c.state().leader == 1


def test_a_wiped_follower_leaves_the_isr_of_a_led_partition() -> None:
    c = _cluster()
    c.kill(3)
    c.register(3, "s3-new")
    txns = decide(c.image, c.epoch)
    assert len(txns) == 1
    c.run(txns)
    assert c.state() == PartitionState(1, 0, (1, 2), 1, ("s1", "s2"))
    # Once caught up, its leader adds it back under its new id.
    rejoined = c.state().storage_for((1, 2, 3), c.image.brokers)
    assert rejoined == ("s1", "s2", "s3-new")


def test_a_wiped_leader_is_replaced_by_a_member_with_its_log() -> None:
    # The controller missed the key's delete (it was down): the leader is live again,
    # under a new storage id.
    c = _cluster()
    c.kill(1)
    c.register(1, "s1-new")
    c.settle()
    assert c.state() == PartitionState(2, 1, (2, 3), 1, ("s2", "s3"))


def test_a_wiped_leader_without_another_eligible_member_steps_down() -> None:
    c = _cluster(PartitionState(1, 4, (1,), 6, ("s1",)))
    c.kill(1)
    c.register(1, "s1-new")
    c.settle()
    assert c.state() == PartitionState(NO_LEADER, 5, (1,), 7, ("s1",))


def test_entries_from_before_storage_ids_learn_their_members_ids() -> None:
    c = _cluster(PartitionState(1, 0, (1, 2, 3), 0), {1: "s1", 2: None, 3: "s3"})
    c.settle()
    assert c.state() == PartitionState(1, 0, (1, 2, 3), 1, ("s1", None, "s3"))


def test_a_wiped_preferred_replica_is_not_made_leader() -> None:
    c = _cluster(PartitionState(2, 3, (1, 2, 3), 3, ("s1", "s2", "s3")))
    c.kill(1)
    c.register(1, "s1-new")
    assert preferred_leader_txns(c.image, c.epoch) == []


# --- unclean elections -------------------------------------------------------------------

def test_an_unclean_election_prefers_a_replica_that_kept_some_log() -> None:
    c = _cluster(PartitionState(NO_LEADER, 1, (1,), 2, ("s1",)))
    c.register(1, "s1-wiped")
    assert decide(c.image, c.epoch) == []
    # Not asked for this partition: nothing.
    assert unclean_leader_txns(c.image, c.epoch, {("t", 9)}) == []
    assert c.run(unclean_leader_txns(c.image, c.epoch)) == [True]
    assert c.state() == PartitionState(2, 2, (2,), 3, ("s2",))
    assert not needs_unclean_election(c.image, ("t", 0))
    assert unclean_leader_txns(c.image, c.epoch) == []
    # Then the usual level-triggered life: nothing to undo.
    assert decide(c.image, c.epoch) == []


def test_an_unclean_election_takes_a_wiped_replica_only_when_none_other_is_live() -> None:
    c = _cluster(PartitionState(NO_LEADER, 1, (1,), 2, ("s1",)))
    c.kill(2)
    c.kill(3)
    c.register(1, "s1-wiped")
    assert c.run(unclean_leader_txns(c.image, c.epoch)) == [True]
    assert c.state() == PartitionState(1, 2, (1,), 3, ("s1-wiped",))


def test_an_unclean_election_is_not_needed_while_a_clean_one_is_possible() -> None:
    c = _cluster()
    assert unclean_leader_txns(c.image, c.epoch) == []
    c.kill(1)  # 2 is eligible: decide elects it, no data is lost
    assert not needs_unclean_election(c.image, ("t", 0))
    assert unclean_leader_txns(c.image, c.epoch) == []


def test_an_unclean_election_with_no_live_replica_writes_nothing() -> None:
    c = _cluster(PartitionState(NO_LEADER, 1, (1,), 2, ("s1",)))
    for n in (1, 2, 3):
        c.kill(n)
    assert needs_unclean_election(c.image, ("t", 0))
    assert unclean_leader_txns(c.image, c.epoch) == []


def test_an_unclean_election_from_a_stale_image_or_a_deposed_controller_fails() -> None:
    c = _cluster(PartitionState(NO_LEADER, 1, (1,), 2, ("s1",)))
    c.register(1, "s1-wiped")
    stale = c.etcd.image()
    assert needs_unclean_election(stale, ("t", 0))
    # Meanwhile broker 1's own disk came back and the controller elected it.
    c.kill(1)
    c.register(1, "s1")
    c.settle()
    assert c.run(unclean_leader_txns(stale, c.epoch)) == [False]
    assert c.state().leader == 1
    c2 = _cluster(PartitionState(NO_LEADER, 1, (1,), 2, ("s1",)))
    c2.register(1, "s1-wiped")
    assert c2.run(unclean_leader_txns(c2.image, c2.epoch + 100)) == [False]
