"""The cluster image: built from a range read, kept by watch events."""

from __future__ import annotations

from groupwire.broker.cluster.image import ClusterImage, ImageChange
from groupwire.broker.cluster.keys import (
    ControllerInfo,
    PartitionState,
    broker_key,
    encode_broker,
    partition_key,
    topic_key,
)
from groupwire.broker.cluster.txn import KeyValue, WatchEvent
from tests.unit.cluster.fake_etcd import (
    CLUSTER,
    FakeEtcd,
    add_broker,
    add_topic,
    broker,
    elect_controller,
    kill_broker,
)


def _cluster() -> tuple[FakeEtcd, int]:
    etcd = FakeEtcd()
    for n in (1, 2, 3):
        add_broker(etcd, n)
    epoch = elect_controller(etcd, 2)
    add_topic(etcd, "t", [(1, 2, 3), (2, 3, 1)])
    return etcd, epoch


def test_an_image_from_a_range_read_holds_brokers_controller_topics_and_revisions() -> None:
    etcd, epoch = _cluster()
    image = etcd.image()
    assert image.revision == etcd.revision
    assert sorted(image.brokers) == [1, 2, 3]
    assert image.controller == ControllerInfo(2, "a")
    assert image.controller_id == 2
    assert image.controller_epoch == epoch
    assert image.topics["t"].replicas == ((1, 2, 3), (2, 3, 1))
    assert image.partitions[("t", 1)] == PartitionState(2, 0, (2, 3, 1), 0)
    assert image.partition_revisions[("t", 1)] == \
        etcd.kvs[partition_key(CLUSTER, "t", 1)].mod_revision


def test_watch_events_update_it_and_say_what_changed() -> None:
    etcd, _ = _cluster()
    image = etcd.image()
    change = image.apply(kill_broker(etcd, 3))
    assert change == ImageChange(brokers_removed=frozenset({3}))
    assert image.revision == etcd.revision and not image.is_live(3)
    change = image.apply(add_broker(etcd, 4))
    assert change.brokers_added == {4} and not change.brokers_removed
    events = etcd.put(partition_key(CLUSTER, "t", 0),
                      b'{"leader":2,"leader_epoch":1,"isr":[2],"partition_epoch":1}')
    change = image.apply(events)
    assert change == ImageChange(partitions_changed=frozenset({("t", 0)}))
    assert image.partition_revisions[("t", 0)] == etcd.revision
    change = image.apply(etcd.delete(topic_key(CLUSTER, "t")))
    assert change == ImageChange(topics_removed=frozenset({"t"}))
    change = image.apply(etcd.delete(partition_key(CLUSTER, "t", 0)))
    assert change.partitions_removed == {("t", 0)} and ("t", 0) not in image.partition_revisions


def test_a_new_incarnation_is_an_update_and_the_controller_change_is_reported() -> None:
    etcd, epoch = _cluster()
    image = etcd.image()
    events = etcd.put(broker_key(CLUSTER, 1), encode_broker(broker(1, incarnation="b")))
    assert image.apply(events) == ImageChange(brokers_updated=frozenset({1}))
    change = image.apply(etcd.delete("/groupwire/test/controller"))
    assert change.controller_changed and image.controller is None
    assert image.controller_epoch == 0
    new_epoch = elect_controller(etcd, 3)
    change = image.apply([WatchEvent("put", etcd.kvs["/groupwire/test/controller"])])
    assert change.controller_changed and image.controller_epoch == new_epoch > epoch


def test_replayed_events_change_nothing() -> None:
    etcd, _ = _cluster()
    image = etcd.image()
    events = kill_broker(etcd, 3) + add_broker(etcd, 5)
    first = image.apply(events)
    assert first.brokers_removed == {3} and first.brokers_added == {5}
    before = (dict(image.brokers), image.revision)
    assert image.apply(events).empty
    assert (dict(image.brokers), image.revision) == before
    # An older event replayed after a newer one does not undo it.
    assert image.apply(add_broker(etcd, 3)).brokers_added == {3}
    assert image.apply(events).empty and image.is_live(3)


def test_events_of_one_txn_share_a_revision_and_all_apply() -> None:
    image = ClusterImage(CLUSTER, revision=4)
    kvs = [KeyValue(broker_key(CLUSTER, n), encode_broker(broker(n)), 5, 5, 1) for n in (1, 2)]
    change = image.apply([WatchEvent("put", kv) for kv in kvs])
    assert change.brokers_added == {1, 2} and image.revision == 5


def test_a_put_then_delete_in_one_batch_reports_nothing() -> None:
    etcd, _ = _cluster()
    image = etcd.image()
    assert image.apply(add_broker(etcd, 9) + kill_broker(etcd, 9)).empty
    assert image.apply([], revision=etcd.revision + 3).empty
    assert image.revision == etcd.revision + 3


def test_unknown_keys_are_ignored() -> None:
    etcd, _ = _cluster()
    image = etcd.image()
    events = (etcd.put("/groupwire/test/future/x", b"\x00 not json")
              + etcd.put("/groupwire/other/brokers/1", b"junk")
              + etcd.put("/groupwire/test/brokers/abc", b"junk"))
    assert image.apply(events).empty
    assert image.revision == etcd.revision


def test_a_bad_value_is_skipped_naming_the_key_and_the_rest_of_the_batch_applies() -> None:
    """One malformed value used to raise out of the watch and stop every broker's image
    (issue 24): now that key keeps what it had and the shell logs why."""
    etcd, _ = _cluster()
    image = etcd.image()
    before = image.partitions[("t", 0)]
    events = kill_broker(etcd, 1) + etcd.put(partition_key(CLUSTER, "t", 0), b"{oops")
    change = image.apply(events)
    assert not image.is_live(1) and change.brokers_removed == {1}
    assert image.partitions[("t", 0)] == before
    assert len(image.malformed) == 1 and "/groupwire/test/partitions/t/0" in image.malformed[0]
    assert image.revision == etcd.revision
    image.apply(etcd.put(partition_key(CLUSTER, "t", 1), b"[]"))
    assert image.malformed and "partitions/t/1" in image.malformed[0]


def test_a_read_skips_a_bad_value_too() -> None:
    etcd, _ = _cluster()
    etcd.put(partition_key(CLUSTER, "t", 0), b"not json")
    image = etcd.image()
    assert ("t", 0) not in image.partitions and image.is_live(1)
    assert "partitions/t/0" in image.malformed[0]
