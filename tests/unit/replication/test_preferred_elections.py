"""What a preferred election answers for a partition, read from the controller's image:
the cases a live cluster cannot hold still long enough to test (a live preferred
replica out of the ISR, a partition with no state yet)."""

from __future__ import annotations

from groupwire.broker.cluster.keys import PartitionState, TopicAssignment, encode_topic, topic_key
from groupwire.broker.clustering.controller_runtime import preferred_election_outcome
from groupwire.protocol.errors import ErrorCode
from tests.unit.cluster.fake_etcd import CLUSTER, FakeEtcd, add_broker, add_topic, kill_broker


def test_each_answer_from_the_image() -> None:
    etcd = FakeEtcd()
    for n in (1, 2, 3):
        add_broker(etcd, n)
    add_topic(etcd, "t", [(1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2)], [
        PartitionState(1, 0, (1, 2, 3), 0),   # led by its preferred replica
        PartitionState(3, 1, (3, 1), 1),      # preferred 2 live but out of the ISR
        PartitionState(1, 1, (1, 3, 2), 1),   # preferred 3 live and in the ISR
        PartitionState(3, 1, (3, 1, 2), 1),   # preferred 1 will be dead
    ])
    kill_broker(etcd, 1)
    # A topic whose assignment is written but whose states are not yet.
    etcd.put(topic_key(CLUSTER, "new"),
             encode_topic(TopicAssignment("new", "id-new", False, ((2, 3),))))
    image = etcd.image()
    outcome = {tp: preferred_election_outcome(image, tp) for tp in [
        ("t", 0), ("t", 1), ("t", 2), ("t", 3), ("t", 4), ("t", -1), ("u", 0), ("new", 0)]}
    assert outcome == {
        ("t", 0): ErrorCode.ELECTION_NOT_NEEDED,  # even with its leader dead: decide's job
        ("t", 1): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 2): None,                           # a write is needed
        ("t", 3): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 4): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("u", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("new", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    }
