"""The read-only group APIs as steps (issue 14): DescribeGroups, ListGroups and
OffsetFetch answer what ``handle`` answered before, in pieces the shell runs in time
slices; and the batch encoding of group records is ``to_kv``'s, byte for byte."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from groupwire.broker.coordinator import (
    GroupDeleteRecord,
    GroupMetadataRecord,
    GroupRecord,
    MemberRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
    RequestContext,
    encode_records,
    record_from_kv,
)
from groupwire.broker.coordinator.group_admin import describe_group
from groupwire.broker.coordinator.paced import SORT_RUN, sorted_steps
from groupwire.broker.coordinator.state import BY_NAME_LOWER
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    Request,
    Response,
)
from groupwire.protocol.steps import Steps, run_steps
from tests.steps import steps_taken

from .coord_sim import Member, Sim, assignment, form_group

# --- the encoding of records ---------------------------------------------------------


def _old_pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _old_kv(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """The encoding before issue 14, spelled out: what data dirs hold."""
    if isinstance(record, OffsetCommitRecord):
        return (_old_pack(["offset", record.group_id, record.topic, record.partition]),
                _old_pack({"v": 0, "offset": record.offset, "metadata": record.metadata,
                           "commit_ms": record.commit_ms}))
    if isinstance(record, OffsetDeleteRecord):
        return _old_pack(["offset", record.group_id, record.topic, record.partition]), None
    return record.to_kv()


GOLDEN = [
    (OffsetCommitRecord("g", "t", 0, 0, "", 0),
     b"\x94\xa6offset\xa1g\xa1t\x00",
     b"\x84\xa1v\x00\xa6offset\x00\xa8metadata\xa0\xa9commit_ms\x00"),
    (OffsetCommitRecord("grp", "topic", 300, -1, "m\u00e9", 1_795_573_208_092),
     b"\x94\xa6offset\xa3grp\xa5topic\xcd\x01\x2c",
     b"\x84\xa1v\x00\xa6offset\xff\xa8metadata\xa3m\xc3\xa9"
     b"\xa9commit_ms\xcf\x00\x00\x01\xa2\x10\x80\xd4\x1c"),
    (OffsetDeleteRecord("grp", "topic", 7), b"\x94\xa6offset\xa3grp\xa5topic\x07", None),
    (GroupDeleteRecord("grp"), b"\x92\xa5group\xa3grp", None),
]


def test_offset_records_encode_as_the_golden_bytes() -> None:
    records = [r for r, _, _ in GOLDEN]
    assert list(encode_records(records)) == [(r.group_id, k, v) for r, k, v in GOLDEN]
    assert [r.to_kv() for r in records] == [(k, v) for _, k, v in GOLDEN]
    assert [record_from_kv(k, v) for _, k, v in GOLDEN] == records


text = st.text(max_size=12)
ints = st.integers(-(2**63), 2**64 - 1)
members = st.builds(
    MemberRecord, member_id=text, group_instance_id=st.none() | text, client_id=text,
    client_host=text, session_timeout_ms=ints, rebalance_timeout_ms=ints,
    protocols=st.lists(st.tuples(text, st.binary(max_size=8)), max_size=2).map(tuple),
    assignment=st.binary(max_size=8))
small = st.sampled_from(["", "g", "h", "t", "\u00e9" * 40])  # shared parts get reused
records = st.one_of(
    st.builds(OffsetCommitRecord, small | text, small | text, ints, ints,
              small | st.text(max_size=300), st.sampled_from([0, 5, 2**40]) | ints),
    st.builds(OffsetDeleteRecord, small | text, small | text, ints),
    st.builds(GroupMetadataRecord, group_id=small | text, protocol_type=st.none() | text,
              protocol_name=st.none() | text, generation_id=ints, leader_id=st.none() | text,
              state=st.sampled_from(["Empty", "Stable"]), state_ms=ints,
              members=st.lists(members, max_size=2).map(tuple)),
    st.builds(GroupDeleteRecord, small | text),
)


@given(st.lists(records, max_size=30))
def test_a_batch_encodes_as_each_record_alone(batch: list[GroupRecord]) -> None:
    encoded = list(encode_records(batch))
    assert encoded == [(r.group_id, *_old_kv(r)) for r in batch]
    assert [record_from_kv(k, v) for _, k, v in encoded] == batch


# --- the read-only APIs as steps -----------------------------------------------------
# The handlers before issue 14, copied: the steps must answer what they answered.


def _old_describe(sim: Sim, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    groups = sim.coord._engine.groups
    return DescribeGroupsResponse(groups=[describe_group(groups.get(g), g)
                                          for g in req.groups])


def _old_list(sim: Sim, req: ListGroupsRequest) -> ListGroupsResponse:
    wanted = {BY_NAME_LOWER.get(name.lower()) for name in req.states_filter}
    return ListGroupsResponse(groups=[
        ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                    group_state=g.state.value)
        for g in sorted(sim.coord._engine.groups.values(), key=lambda g: g.group_id)
        if not req.states_filter or g.state in wanted])


def _old_fetch(sim: Sim, req: OffsetFetchRequest) -> OffsetFetchResponse:
    offsets = sim.coord._engine.offsets.of(req.group_id)
    if req.topics is None:
        by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
        for (topic, partition), c in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
                partition_index=partition, committed_offset=c.offset, metadata=c.metadata))
        return OffsetFetchResponse(topics=[OffsetFetchResponseTopic(name=t, partitions=ps)
                                           for t, ps in by_topic.items()])
    topics = []
    for t in req.topics:
        answers = []
        for p in t.partition_indexes:
            c = offsets.get((t.name, p))
            answers.append(OffsetFetchResponsePartition(partition_index=p) if c is None else
                           OffsetFetchResponsePartition(partition_index=p,
                                                        committed_offset=c.offset,
                                                        metadata=c.metadata))
        topics.append(OffsetFetchResponseTopic(name=t.name, partitions=answers))
    return OffsetFetchResponse(topics=topics)


def _steps(sim: Sim, req: Request) -> Steps[Response]:
    steps = sim.coord.answer_steps(req)
    assert steps is not None, type(req).__name__
    return steps


def _commit(sim: Sim, group: str, offsets: dict[tuple[str, int], int],
            metadata: str | None = None) -> None:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_metadata=metadata))
    sim.call(OffsetCommitRequest(group_id=group, topics=[
        OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))


def _varied() -> Sim:
    """Groups in several states, with and without members, offsets and metadata."""
    sim = Sim(topics={"t": 6, "u": 4, "v": 2, "big": 3000})
    form_group(sim, [Member(sim, client_id="a", instance_id="i1"), Member(sim)],
               plan={"i1-u1": assignment(("t", 0)), "c-u2": assignment(("t", 1))})
    Member(sim, group_id="joining").send_join()
    _commit(sim, "simple", {("u", 3): 9, ("t", 0): 4, ("u", 0): 1}, metadata="meta")
    _commit(sim, "g", {("t", 5): 50, ("v", 1): 7})
    _commit(sim, "many", {("big", p): p * 3 for p in range(2999, -1, -1)})
    for i in range(40):
        _commit(sim, f"z{i:03d}", {("t", i % 6): i})
    return sim


DESCRIBES = [[], ["nope"], ["g", "joining", "simple", "nope", "g"],
             ["many", *(f"z{i:03d}" for i in range(40)), "absent"]]
LISTS = [[], ["Stable"], ["empty", "PREPARINGREBALANCE"], ["Dead"], ["bogus"],
         ["Stable", "bogus", "Empty"]]
FETCHES: list[tuple[str, list[OffsetFetchRequestTopic] | None]] = [
    ("g", None), ("simple", None), ("nope", None), ("many", None),
    ("simple", [OffsetFetchRequestTopic(name="u", partition_indexes=[3, 2, 0, 99]),
                OffsetFetchRequestTopic(name="gone", partition_indexes=[0])]),
    ("nope", [OffsetFetchRequestTopic(name="t", partition_indexes=[0])]),
    ("many", [OffsetFetchRequestTopic(name="big", partition_indexes=list(range(3000)))]),
    ("g", []),
]


def _requests() -> list[Request]:
    return [*(DescribeGroupsRequest(groups=ids) for ids in DESCRIBES),
            *(ListGroupsRequest(states_filter=s) for s in LISTS),
            *(OffsetFetchRequest(group_id=g, topics=t) for g, t in FETCHES)]


def _old(sim: Sim, req: Request) -> Response:
    if isinstance(req, DescribeGroupsRequest):
        return _old_describe(sim, req)
    if isinstance(req, ListGroupsRequest):
        return _old_list(sim, req)
    assert isinstance(req, OffsetFetchRequest)
    return _old_fetch(sim, req)


def test_steps_answer_what_the_old_handlers_answered() -> None:
    sim = _varied()
    for req in _requests():
        assert run_steps(_steps(sim, req)) == _old(sim, req), req


def test_handle_still_answers_the_same_and_changes_nothing() -> None:
    sim = _varied()
    for n, req in enumerate(_requests()):
        result = sim.coord.handle(RequestContext(99, 10_000 + n, "c", "h"), req, sim.now)
        assert [r.response for r in result.replies] == [_old(sim, req)]
        assert (result.timers, result.records, result.events, result.transitions) == (
            (), (), (), ())


def test_other_requests_have_no_steps() -> None:
    sim = _varied()
    assert sim.coord.answer_steps(OffsetCommitRequest(group_id="g", topics=[])) is None


def test_large_requests_yield_between_pieces() -> None:
    """Each of these held the loop in one piece before (30, 10 and 10 ms at 10 000)."""
    sim = _varied()
    ids = [f"z{i % 40:03d}" for i in range(2000)]
    for req in (DescribeGroupsRequest(groups=ids),
                OffsetFetchRequest(group_id="many"),
                OffsetFetchRequest(group_id="many", topics=[OffsetFetchRequestTopic(
                    name="big", partition_indexes=list(range(3000)))])):
        yields, answer = steps_taken(_steps(sim, req))
        assert yields > 5, req
        assert answer == _old(sim, req)
    for i in range(SORT_RUN + 1000):
        _commit(sim, f"s{i:05d}", {("v", 0): i})
    yields, answer = steps_taken(_steps(sim, ListGroupsRequest()))
    assert yields > 5
    assert answer == _old(sim, ListGroupsRequest())


def test_a_group_deleted_between_steps_is_not_listed_and_others_are_current() -> None:
    sim = _varied()
    for i in range(SORT_RUN + 10):
        _commit(sim, f"s{i:05d}", {("v", 0): i})
    steps = _steps(sim, ListGroupsRequest())
    next(steps)
    sim.call(DeleteGroupsRequest(groups_names=["z039", "s00005"]))
    answer = run_steps(steps)
    assert answer == _old(sim, ListGroupsRequest())

    fetch = _steps(sim, OffsetFetchRequest(group_id="many"))
    next(fetch)
    _commit(sim, "many", {("big", 2999): -5})
    answer = run_steps(fetch)
    assert isinstance(answer, OffsetFetchResponse)
    assert answer.topics[0].partitions[-1].committed_offset == -5


@given(st.lists(st.integers(), max_size=3 * SORT_RUN + 7))
def test_sorted_steps_sorts(items: list[int]) -> None:
    assert list(run_steps(sorted_steps(list(items)))) == sorted(items)


def test_sorted_steps_yields_per_run() -> None:
    items = list(range(3 * SORT_RUN, 0, -1))
    steps = sorted_steps(items)
    n = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            assert list(done.value) == sorted(items)
            break
        n += 1
    assert n == 3
