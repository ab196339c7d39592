"""A broker whose local log went offline steps off it (``offline_replicas``), and the
controller's automatic leader rebalance (``imbalanced_partitions``): table tests of the
sans-I/O decisions, applied to a fake etcd and fed back to the image."""

from __future__ import annotations

import pytest

from groupwire.broker.cluster.controller import (
    decide,
    imbalanced_partitions,
    offline_replicas,
    preferred_leader_txns,
)
from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import (
    NO_LEADER,
    BrokerInfo,
    PartitionState,
    broker_key,
    controller_key,
    encode_broker,
)
from groupwire.broker.cluster.replica import UNKNOWN_OFFSET, LeaderReplicaState
from groupwire.broker.cluster.txn import Compare
from tests.unit.cluster.fake_etcd import (
    CLUSTER,
    FakeEtcd,
    add_broker,
    add_topic,
    elect_controller,
    kill_broker,
)

ME = 1
TP: TopicPartition = ("t", 0)


def _image(states: list[PartitionState], replicas: list[tuple[int, ...]] | None = None,
           live: tuple[int, ...] = (1, 2, 3)) -> tuple[FakeEtcd, ClusterImage]:
    etcd = FakeEtcd()
    for n in live:
        add_broker(etcd, n)
    add_topic(etcd, "t", replicas or [(1, 2, 3)] * len(states), states)
    return etcd, etcd.image()


def _state(leader: int, isr: tuple[int, ...], epoch: int = 3,
           storage: tuple[str | None, ...] = (), partition_epoch: int = 10,
           ) -> PartitionState:
    return PartitionState(leader, epoch, isr, partition_epoch, storage)


def _next(leader: int, isr: tuple[int, ...], epoch: int = 3) -> PartitionState:
    """Written over ``_state``: the partition epoch one up."""
    return _state(leader, isr, epoch, partition_epoch=11)


@pytest.mark.parametrize(("state", "replicas", "live", "want", "handed", "left", "kept"), [
    # led here: the first eligible ISR member in assignment order takes over, epoch + 1
    (_state(1, (1, 2, 3)), (1, 2, 3), (1, 2, 3), _next(2, (2, 3), 4), {TP: 2}, (), ()),
    (_state(1, (1, 2, 3)), (1, 3, 2), (1, 2, 3), _next(3, (2, 3), 4), {TP: 3}, (), ()),
    # a dead ISR member is passed over
    (_state(1, (1, 2, 3)), (1, 2, 3), (1, 3), _next(3, (2, 3), 4), {TP: 3}, (), ()),
    # outside the ISR: never elected (it may lack acknowledged records)
    (_state(1, (1, 3)), (1, 2, 3), (1, 2, 3), _next(3, (3,), 4), {TP: 3}, (), ()),
    # no other eligible ISR member: the leadership is kept here, nothing written
    (_state(1, (1,)), (1, 2, 3), (1, 2, 3), None, {}, (), (TP,)),
    (_state(1, (1, 2)), (1, 2, 3), (1, 3), None, {}, (), (TP,)),
    # followed here, with a live leader: out of the ISR, leader epoch kept
    (_state(2, (1, 2, 3)), (1, 2, 3), (1, 2, 3), _next(2, (2, 3)), {}, (TP,), ()),
    # already out of the ISR: nothing to do
    (_state(2, (2, 3)), (1, 2, 3), (1, 2, 3), None, {}, (), ()),
    # leaderless, or its leader dead: the controller's to decide, the ISR kept whole
    (_state(NO_LEADER, (1, 2)), (1, 2, 3), (1, 3), None, {}, (), ()),
    (_state(2, (1, 2)), (1, 2, 3), (1, 3), None, {}, (), ()),
])
def test_a_replica_steps_off_its_offline_log(
        state: PartitionState, replicas: tuple[int, ...], live: tuple[int, ...],
        want: PartitionState | None, handed: dict[TopicPartition, int],
        left: tuple[TopicPartition, ...], kept: tuple[TopicPartition, ...]) -> None:
    etcd, image = _image([state], [replicas], live)
    plan = offline_replicas(image, ME, {TP})
    assert plan.handed_over == handed
    assert plan.left_isr == left
    assert plan.kept == kept
    for txn in plan.txns:
        # the partition's revision guards it, never the controller's epoch
        assert all(c.target == "mod" for c in txn.compares)
        etcd.txn(txn)
    assert etcd.image().partitions[TP] == (state if want is None else want)
    # applied, it needs nothing more; and the controller agrees with it
    assert offline_replicas(etcd.image(), ME, {TP}).txns == []
    if want is not None and all(n in live for n in want.isr):
        epoch = elect_controller(etcd, 2)
        assert decide(etcd.image(), epoch) == []


def _register(etcd: FakeEtcd, node_id: int, storage_id: str) -> None:
    etcd.put(broker_key(CLUSTER, node_id), encode_broker(
        BrokerInfo(node_id, f"host{node_id}", 9092, None, "a", storage_id=storage_id)))


def test_a_member_that_lost_its_log_is_not_handed_the_leadership() -> None:
    """The storage-id rule (docs/design/cluster.md, "Storage identities"): 2 came back
    on a new disk, so 3 takes over."""
    etcd, _ = _image([_state(1, (1, 2, 3), storage=("s1", "s2", "s3"))])
    for n in (1, 2, 3):
        _register(etcd, n, "new" if n == 2 else f"s{n}")
    plan = offline_replicas(etcd.image(), ME, {TP})
    assert plan.handed_over == {TP: 3}
    etcd.txn(plan.txns[0])
    # the members kept keep the ids they had
    assert etcd.image().partitions[TP].isr_storage == ("s2", "s3")


def test_a_stale_image_writes_nothing() -> None:
    etcd, image = _image([_state(1, (1, 2, 3))])
    kill_broker(etcd, 3)  # the controller drops 3 meanwhile: the key moves on
    etcd.put("/groupwire/test/partitions/t/0", b'{"leader":1,"leader_epoch":3,'
             b'"isr":[1,2],"partition_epoch":11}')
    plan = offline_replicas(image, ME, {TP})
    result, _ = etcd.txn(plan.txns[0])
    assert not result.succeeded
    # decided again from the newer state
    assert offline_replicas(etcd.image(), ME, {TP}).handed_over == {TP: 2}


def test_only_partitions_named_offline_move() -> None:
    etcd, image = _image([_state(1, (1, 2, 3)), _state(1, (1, 2, 3))])
    plan = offline_replicas(image, ME, {("t", 1)})
    assert plan.handed_over == {("t", 1): 2}
    for txn in plan.txns:
        etcd.txn(txn)
    assert etcd.image().partitions[TP].leader == ME


def test_an_offline_followers_position_is_forgotten_when_it_leaves() -> None:
    """So the leader does not add it back on a fetch it made before its log failed."""
    rs = LeaderReplicaState(leader=1, replicas=(1, 2, 3), isr={1, 2, 3}, leader_epoch=1,
                            log_end_offset=5, high_watermark=0,
                            replica_lag_time_max_ms=1000, now_ms=0)
    rs.follower_fetched(2, 5, 5, 1)
    rs.follower_fetched(3, 5, 5, 1)
    assert rs.high_watermark == 5
    rs.isr_committed({1, 3}, 11)  # 2 took itself out
    assert rs.follower(2).log_end_offset == UNKNOWN_OFFSET
    rs.follower_fetched(3, 5, 5, 2)
    assert rs.isr_to_expand() == frozenset()
    rs.follower_fetched(2, 5, 5, 3)  # fetching again, caught up: it may rejoin
    assert rs.isr_to_expand() == frozenset({2})


# --- automatic leader rebalance -------------------------------------------------------

def _everything_on_one(n_partitions: int = 6) -> tuple[FakeEtcd, ClusterImage]:
    """After an etcd outage: broker 1 registered first and leads everything; 2 and 3
    came back, caught up and are in the ISR again."""
    replicas = [tuple((p + i) % 3 + 1 for i in range(3)) for p in range(n_partitions)]
    states = [_state(1, (1, 2, 3), epoch=5) for _ in replicas]
    return _image(states, replicas)


def test_leadership_goes_back_to_the_preferred_replicas() -> None:
    etcd, image = _everything_on_one()
    targets = imbalanced_partitions(image, 0.1)
    assert targets == {("t", p) for p in range(6) if p % 3 != 0}
    epoch = elect_controller(etcd, 1)
    for txn in preferred_leader_txns(etcd.image(), epoch, targets):
        assert Compare(controller_key(CLUSTER), "create", "==", epoch) in txn.compares
        assert etcd.txn(txn)[0].succeeded
    after = etcd.image()
    assert {tp: s.leader for tp, s in after.partitions.items()} == {
        ("t", p): p % 3 + 1 for p in range(6)}
    assert all(s.leader_epoch == 6 for tp, s in after.partitions.items() if tp[1] % 3)
    assert imbalanced_partitions(after, 0.1) == set()


@pytest.mark.parametrize(("isr", "live", "want"), [
    ((1, 3), (1, 2, 3), {("t", 2)}),  # 2 not caught up yet: only 3's partition moves
    ((1, 2, 3), (1, 3), {("t", 2)}),  # 2 not live
])
def test_a_preferred_replica_not_ready_keeps_waiting(
        isr: tuple[int, ...], live: tuple[int, ...], want: set[TopicPartition]) -> None:
    replicas = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    _, image = _image([_state(1, isr)] * 3, replicas, live)
    assert imbalanced_partitions(image, 0.1) == want


def test_an_imbalance_within_the_threshold_is_left_alone() -> None:
    # broker 2 is preferred for 4 partitions and leads 3 of them: 25 % off
    replicas = [(2, 1, 3)] * 4
    states = [_state(2, (1, 2, 3))] * 3 + [_state(1, (1, 2, 3))]
    _, image = _image(states, replicas)
    assert imbalanced_partitions(image, 0.25) == set()
    assert imbalanced_partitions(image, 0.2) == {("t", 3)}


def test_a_replica_that_lost_its_log_is_never_made_leader_again() -> None:
    etcd, _ = _image([_state(1, (1, 2), storage=("s1", "s2"))], [(2, 1, 3)])
    for n in (1, 2, 3):
        _register(etcd, n, "new" if n == 2 else f"s{n}")
    assert imbalanced_partitions(etcd.image(), 0.0) == set()
