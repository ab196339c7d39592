"""OffsetDelete (Kafka's KIP-496): which offsets a group may lose, and how they go."""

from __future__ import annotations

from dataclasses import replace

from groupwire.broker.coordinator import OffsetCommitRecord, OffsetDeleteRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)

from .coord_sim import TEST_CONFIG, Member, Sim, form_group, join_all, sub

E = ErrorCode


def _request(group_id: str, partitions: list[tuple[str, int]]) -> OffsetDeleteRequest:
    by_topic: dict[str, list[OffsetDeleteRequestPartition]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(OffsetDeleteRequestPartition(partition_index=p))
    return OffsetDeleteRequest(group_id=group_id, topics=[
        OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])


def _delete(sim: Sim, group_id: str, *partitions: tuple[str, int]) -> OffsetDeleteResponse:
    resp = sim.call(_request(group_id, list(partitions)))
    assert isinstance(resp, OffsetDeleteResponse)
    return resp


def _codes(resp: OffsetDeleteResponse) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): E(p.error_code)
            for t in resp.topics for p in t.partitions}


def _fetched(sim: Sim, group_id: str, topic: str, *partitions: int) -> list[int]:
    resp = sim.call(OffsetFetchRequest(group_id=group_id, topics=[
        OffsetFetchRequestTopic(name=topic, partition_indexes=list(partitions))]))
    assert isinstance(resp, OffsetFetchResponse)
    return [p.committed_offset for p in resp.topics[0].partitions]


def _seed(sim: Sim, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit as an admin tool would, before the group's members come (no fencing)."""
    codes = Member(sim, group_id=group_id).commit(offsets, generation_id=-1)
    assert set(codes.values()) == {E.NONE}


def test_an_unknown_group_is_refused_as_a_whole() -> None:
    sim = Sim()
    resp = _delete(sim, "nope", ("t", 0))
    assert (resp.error_code, resp.topics) == (E.GROUP_ID_NOT_FOUND, [])
    assert "'nope'" in (resp.error_message or "")
    assert sim.records == []


def test_an_empty_group_loses_the_named_offsets_and_keeps_the_rest() -> None:
    sim = Sim()
    tool = Member(sim, group_id="s")
    tool.commit({("t", 0): 5, ("t", 1): 6, ("u", 0): 7, ("v", 1): 8}, generation_id=-1)
    before = len(sim.records)
    resp = _delete(sim, "s", ("t", 0), ("t", 1), ("t", 3), ("t", 99), ("nope", 0), ("u", 0))
    assert resp.error_code == E.NONE
    assert _codes(resp) == {
        ("t", 0): E.NONE, ("t", 1): E.NONE, ("t", 3): E.NONE,
        ("t", 99): E.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("u", 0): E.NONE}
    assert [t.name for t in resp.topics] == ["t", "nope", "u"]  # request order
    # every partition answered NONE is tombstoned (t-3 had no offset: see the module)
    assert sim.records[before:] == [
        OffsetDeleteRecord("s", "t", 0), OffsetDeleteRecord("s", "t", 1),
        OffsetDeleteRecord("s", "t", 3), OffsetDeleteRecord("s", "u", 0)]
    assert sim.coord.committed("s") == {("v", 1): 8}
    assert _fetched(sim, "s", "t", 0, 1) == [-1, -1]
    assert sim.state("s") == "Empty"  # the group stays until retention finds it bare


def test_a_partition_named_twice_is_tombstoned_once() -> None:
    sim = Sim()
    _seed(sim, "s", {("t", 2): 1})
    before = len(sim.records)
    resp = _delete(sim, "s", ("t", 2), ("t", 2))
    assert [p.error_code for t in resp.topics for p in t.partitions] == [0, 0]
    assert sim.records[before:] == [OffsetDeleteRecord("s", "t", 2)]


def test_an_empty_consumer_group_may_lose_the_topics_it_consumed() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    assert a.commit({("t", 0): 3}) == {("t", 0): E.NONE}
    a.leave()
    assert sim.state("g") == "Empty"
    assert _codes(_delete(sim, "g", ("t", 0))) == {("t", 0): E.NONE}
    assert sim.coord.committed("g") == {}


def test_a_stable_consumer_group_keeps_its_subscribed_topics() -> None:
    sim = Sim()
    _seed(sim, "g", {("t", 0): 3, ("u", 1): 4, ("v", 0): 5})
    a = Member(sim, protocols=[("range", sub("t", "v"))])
    form_group(sim, [a])
    before = len(sim.records)
    resp = _delete(sim, "g", ("t", 0), ("t", 1), ("u", 1), ("v", 0))
    assert resp.error_code == E.NONE
    assert _codes(resp) == {
        ("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("t", 1): E.GROUP_SUBSCRIBED_TO_TOPIC,
        ("u", 1): E.NONE, ("v", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}
    refused = resp.topics[0].partitions[0]
    assert "subscribed to topic 't'" in (refused.error_message or "")
    assert sim.records[before:] == [OffsetDeleteRecord("g", "u", 1)]
    assert sim.coord.committed("g") == {("t", 0): 3, ("v", 0): 5}
    assert sim.state("g") == "Stable"  # nothing else moved
    assert a.hb() == E.NONE


def test_a_rebalancing_consumer_group_judges_by_its_last_subscriptions() -> None:
    sim = Sim()
    _seed(sim, "g", {("u", 0): 4})
    a = Member(sim)
    form_group(sim, [a])
    a.send_join()
    join_all(sim, [a])
    assert sim.state("g") == "CompletingRebalance"
    assert _codes(_delete(sim, "g", ("t", 0), ("u", 0))) == {
        ("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE}
    Member(sim, member_id="").join()  # a second member: the group prepares a rebalance
    assert sim.state("g") == "PreparingRebalance"
    assert _codes(_delete(sim, "g", ("t", 1), ("v", 0))) == {
        ("t", 1): E.GROUP_SUBSCRIBED_TO_TOPIC, ("v", 0): E.NONE}


def test_unreadable_subscriptions_count_as_subscribed_to_everything() -> None:
    """A Kafka client's own subscription bytes, say: Kafka keeps every offset to be safe."""
    sim = Sim()
    _seed(sim, "g", {("u", 0): 4})
    a = Member(sim, protocols=[("range", b"\x00\x01not msgpack")])
    form_group(sim, [a], plan={})
    resp = _delete(sim, "g", ("u", 0))
    assert _codes(resp) == {("u", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}
    assert "cannot be read" in (resp.topics[0].partitions[0].error_message or "")
    assert sim.coord.committed("g") == {("u", 0): 4}


def test_a_group_of_another_protocol_type_with_members_is_refused_as_a_whole() -> None:
    sim = Sim()
    worker = Member(sim, protocol_type="connect", protocols=[("v1", b"opaque")])
    form_group(sim, [worker], plan={})
    assert worker.commit({("u", 0): 1}) == {("u", 0): E.NONE}
    resp = _delete(sim, "g", ("u", 0))
    assert (resp.error_code, resp.topics) == (E.NON_EMPTY_GROUP, [])
    assert "'connect'" in (resp.error_message or "")
    assert sim.coord.committed("g") == {("u", 0): 1}
    worker.leave()
    assert _codes(_delete(sim, "g", ("u", 0))) == {("u", 0): E.NONE}  # Empty now


def test_a_commit_still_being_written_is_deleted_with_the_rest() -> None:
    sim = Sim()
    sim.hold_writes = True
    cid = sim.send(OffsetCommitRequest(group_id="s", topics=[OffsetCommitRequestTopic(
        name="t", partitions=[OffsetCommitRequestPartition(partition_index=0,
                                                           committed_offset=9)])]))
    [commit_write] = sim.held
    delete_cid = sim.send(_request("s", [("t", 0)]))
    [_, delete_write] = sim.held
    assert sim.reply(0, cid) is None and sim.reply(0, delete_cid) is None  # held
    sim.stored(commit_write)
    assert sim.coord.committed("s") == {}  # the commit's record precedes the tombstone
    sim.stored(delete_write)
    resp = sim.reply(0, delete_cid)
    assert isinstance(resp, OffsetDeleteResponse)
    assert _codes(resp) == {("t", 0): E.NONE}
    assert [type(r) for r in sim.records[-2:]] == [OffsetCommitRecord, OffsetDeleteRecord]
    assert sim.coord.committed("s") == {}


def test_a_deletion_whose_write_failed_says_so_per_partition() -> None:
    sim = Sim()
    _seed(sim, "g", {("t", 0): 1, ("u", 0): 2})
    form_group(sim, [Member(sim)])
    sim.hold_writes = True
    cid = sim.send(_request("g", [("t", 0), ("u", 0), ("u", 50)]))
    [token] = sim.held
    sim.failed(token, E.KAFKA_STORAGE_ERROR)
    resp = sim.reply(0, cid)
    assert isinstance(resp, OffsetDeleteResponse)
    assert _codes(resp) == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
                            ("u", 0): E.KAFKA_STORAGE_ERROR,
                            ("u", 50): E.UNKNOWN_TOPIC_OR_PARTITION}
    # memory forgot at once; a retry writes the tombstone again
    sim.hold_writes = False
    assert _codes(_delete(sim, "g", ("u", 0))) == {("u", 0): E.NONE}
    assert sim.records[-1] == OffsetDeleteRecord("g", "u", 0)


def test_a_group_not_served_here_is_refused_as_a_whole() -> None:
    sim = Sim()
    _seed(sim, "s", {("t", 0): 1})
    sim.coord.set_hosting(hosts=lambda gid: False)
    resp = _delete(sim, "s", ("t", 0))
    assert (resp.error_code, resp.topics) == (E.NOT_COORDINATOR, [])
    sim.coord.set_hosting(hosts=lambda gid: True, loading=lambda gid: True)
    assert _delete(sim, "s", ("t", 0)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert sim.coord.committed("s") == {("t", 0): 1}


def test_an_empty_group_left_bare_goes_at_the_next_retention_check() -> None:
    sim = Sim(replace(TEST_CONFIG, offsets_retention_check_interval_ms=1000))
    _seed(sim, "s", {("t", 0): 1})
    _delete(sim, "s", ("t", 0))
    assert sim.state("s") == "Empty"
    sim.advance(1000)
    assert sim.state("s") == "Dead"

