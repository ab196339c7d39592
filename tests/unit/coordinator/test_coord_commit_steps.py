"""A large OffsetCommit as steps (issue 14): validated on arrival, built in steps that
change nothing, applied in one piece; what it answers, records and changes is what
``handle`` (the plain handler) does, and a group that changed meanwhile falls back to it.

Each comparison runs the same script in two simulated worlds: one hands the commit to
``handle``, the other to ``offset_commit_steps`` and ``apply_commit``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from groupwire.broker.coordinator import (
    GroupRecord,
    OffsetCommitRecord,
    RequestContext,
    Result,
    record_from_kv,
)
from groupwire.broker.coordinator.offsets_api import (
    LONG_COMMIT,
    AppliedCommit,
    PreparedCommit,
    commit_size,
)
from groupwire.broker.coordinator.records import OffsetRecordEncoder
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from groupwire.protocol.steps import run_steps
from tests.steps import steps_taken

from .coord_sim import Member, Sim, assignment, form_group
from .test_coord_paced import GOLDEN

BIG = 3000
_cids = itertools.count(50_000)


def _world() -> tuple[Sim, Member, Member]:
    """A consumer group ``g`` (a owns big 0-1999 and t 0, b the rest), a simple group."""
    sim = Sim(topics={"t": 6, "u": 4, "big": BIG})
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b], plan={
        "a-u1": assignment(("t", 0), *(("big", p) for p in range(2000))),
        "b-u2": assignment(("t", 1), *(("big", p) for p in range(2000, BIG)))})
    assert (a.member_id, b.member_id) == ("a-u1", "b-u2")
    Member(sim, group_id="simple").commit({("u", 0): 1, ("big", 5): 2}, generation_id=-1)
    return sim, a, b


def _request(member: Member | None, group_id: str,
             offsets: dict[tuple[str, int], tuple[int, str | None]],
             generation_id: int | None = None) -> OffsetCommitRequest:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, p), (offset, metadata) in offsets.items():
        by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
            partition_index=p, committed_offset=offset, committed_metadata=metadata))
    generation = -1 if member is None else member.generation_id
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id=generation if generation_id is None else generation_id,
        member_id="" if member is None else member.member_id,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])


def _ctx() -> RequestContext:
    return RequestContext(7, next(_cids), "c", "/10.0.0.7")


def _answer(sim: Sim, ctx: RequestContext) -> OffsetCommitResponse:
    """The answer the request got (once its write was stored, if it wrote)."""
    response = sim.reply(ctx.conn_id, ctx.correlation_id)
    assert isinstance(response, OffsetCommitResponse)
    return response


def _big(offset: int, *, extra: bool = True) -> dict[tuple[str, int], tuple[int, str | None]]:
    """Every big partition; with ``extra``, errors of every kind too."""
    offsets: dict[tuple[str, int], tuple[int, str | None]] = {
        ("big", p): (offset + p, "m" if p % 7 else None) for p in range(BIG)}
    if extra:
        offsets.update({("t", 0): (offset, None), ("t", 1): (offset, None),
                        ("nope", 0): (1, None), ("t", 99): (1, None),
                        ("t", 2): (1, "x" * 5000), ("big", 3): (offset, "\u00e9" * 1500)})
    return offsets


def _stepped(sim: Sim, ctx: RequestContext, req: OffsetCommitRequest,
             meanwhile: Callable[[], None] | None = None,
             ) -> tuple[int, Result, AppliedCommit | None, PreparedCommit | None]:
    """Run the steps (``meanwhile`` after the first), apply, hand the result to ``sim``."""
    steps = sim.coord.offset_commit_steps(ctx, req, sim.now)
    yields = 0
    if meanwhile is not None:
        try:
            next(steps)
        except StopIteration as done:
            raise AssertionError("no steps to run anything between") from done
        yields = 1
        meanwhile()
    more, built = steps_taken(steps)
    yields += more
    if isinstance(built, Result):
        sim.apply(built)
        return yields, built, None, None
    applied = sim.coord.apply_commit(built)
    sim.apply(applied.result)
    return yields, applied.result, applied, built


def _written(result: Result, applied: AppliedCommit | None,
             prepared: PreparedCommit | None) -> list[GroupRecord]:
    if applied is not None and applied.as_prepared:
        assert prepared is not None and result.records == ()
        return [record_from_kv(k, v) for k, v in prepared.records]
    return list(result.records)


World = tuple[Sim, Member, Member]


def _same_as_handle(script: Callable[[World], OffsetCommitRequest]) -> int:
    """Both worlds run ``script``; its commit goes to ``handle`` in one, to the steps in
    the other: everything must come out the same. Returns how many times they yielded."""
    old, new = _world(), _world()
    req = script(old)
    assert script(new) == req
    ctx = _ctx()
    expected = old[0].apply(old[0].coord.handle(ctx, req, old[0].now))
    yields, result, applied, prepared = _stepped(new[0], ctx, req)
    assert _answer(new[0], ctx) == _answer(old[0], ctx)
    assert (result.write is None) == (expected.write is None)
    assert (result.timers, result.events, result.transitions) == (
        expected.timers, expected.events, expected.transitions)
    assert _written(result, applied, prepared) == list(expected.records)
    for group in ("g", "simple", "fresh"):
        assert new[0].coord.committed(group) == old[0].coord.committed(group)
    assert new[0].timers.next_deadline() == old[0].timers.next_deadline()
    return yields


# --- what it answers, writes and changes --------------------------------------------


def test_a_members_large_commit_is_answered_and_applied_as_handle_does() -> None:
    def script(world: World) -> OffsetCommitRequest:
        return _request(world[1], "g", _big(10))

    req = script(_world())
    assert commit_size(req) > LONG_COMMIT
    assert _same_as_handle(script) >= BIG // LONG_COMMIT  # several steps


def test_commits_without_a_member_and_refusals_as_a_whole_match_handle() -> None:
    assert _same_as_handle(lambda w: _request(None, "simple", _big(3))) > 1
    assert _same_as_handle(lambda w: _request(None, "fresh", _big(4))) > 1  # created
    # refused on arrival, before any step: answered at once
    assert _same_as_handle(lambda w: _request(w[1], "g", _big(5), generation_id=0)) == 0
    assert _same_as_handle(lambda w: _request(
        Member(w[0], member_id="ghost", generation_id=1), "g", _big(5))) == 0
    assert _same_as_handle(lambda w: _request(w[1], "missing", _big(5))) == 0
    assert _same_as_handle(lambda w: _request(None, "g", _big(5))) == 0  # no member


def test_a_commit_while_preparing_a_rebalance_renews_the_session_as_handle_does() -> None:
    def script(world: World) -> OffsetCommitRequest:
        sim, a, _b = world
        Member(sim, client_id="c").join()  # a newcomer: PreparingRebalance
        sim.advance(1000)
        assert sim.state("g") == "PreparingRebalance"
        return _request(a, "g", _big(1))

    _same_as_handle(script)


def test_small_commits_through_the_steps_match_handle_too() -> None:
    assert _same_as_handle(lambda w: _request(
        w[1], "g", {("t", 0): (1, None), ("t", 1): (2, None)})) == 0


# --- nothing changes before the apply -------------------------------------------------


def test_nothing_changes_until_the_apply_and_other_inputs_run_between_steps() -> None:
    sim, a, b = _world()
    before = sim.coord.committed("g")
    steps = sim.coord.offset_commit_steps(_ctx(), _request(a, "g", _big(10, extra=False)),
                                          sim.now)
    next(steps)
    sim.advance(10)
    assert a.hb() == b.hb() == ErrorCode.NONE  # other inputs between steps
    for _ in range(3):
        next(steps)
    assert sim.coord.committed("g") == before
    built = run_steps(steps)
    assert isinstance(built, PreparedCommit)
    assert sim.coord.committed("g") == before
    ctx = built.ctx
    applied = sim.coord.apply_commit(built)
    assert applied.result.replies == () and applied.result.write is not None  # held
    assert sim.coord.committed("g") == before  # staged, not stored
    sim.apply(applied.result)  # stored at once
    assert sim.coord.committed("g") == {("big", p): 10 + p for p in range(2000)}
    assert _answer(sim, ctx) == built.response
    # the arrival step's session timer comes with the apply, earlier than the deadline
    # the heartbeat set since: it fires early and is armed again, nothing more
    sim.advance(9_995)
    assert a.hb() == ErrorCode.NONE


def test_a_commit_applied_later_wins_over_one_applied_between_its_steps() -> None:
    sim, a, _b = _world()
    first = sim.coord.offset_commit_steps(_ctx(), _request(a, "g", _big(100, extra=False)),
                                          sim.now)
    next(first)
    # a small commit, and a large one built and applied whole, on the same partitions
    assert a.commit({("big", 0): 1, ("big", 1): 1}) == {("big", 0): ErrorCode.NONE,
                                                        ("big", 1): ErrorCode.NONE}
    _stepped(sim, _ctx(), _request(a, "g", _big(200, extra=False)))
    assert sim.coord.committed("g")[("big", 5)] == 205
    built = run_steps(first)
    assert isinstance(built, PreparedCommit)
    applied = sim.coord.apply_commit(built)
    assert applied.as_prepared
    sim.apply(applied.result)
    assert sim.coord.committed("g") == {("big", p): 100 + p for p in range(2000)}


def test_a_rebalance_between_steps_falls_back_to_the_plain_handler() -> None:
    def rebalance(sim: Sim, a: Member, b: Member) -> None:
        a.join()
        b.join()
        sim.advance(100)
        a.send_sync({"a-u1": assignment(("t", 0)), "b-u2": assignment(("t", 1))})
        b.send_sync()

    old_sim, old_a, old_b = _world()
    new_sim, new_a, new_b = _world()
    req = _request(new_a, "g", _big(10))
    ctx = _ctx()
    rebalance(old_sim, old_a, old_b)
    old_sim.apply(old_sim.coord.handle(ctx, req, old_sim.now))
    assert {p.error_code for t in _answer(old_sim, ctx).topics
            for p in t.partitions} == {ErrorCode.ILLEGAL_GENERATION}

    _, result, applied, _ = _stepped(new_sim, ctx, req,
                                     meanwhile=lambda: rebalance(new_sim, new_a, new_b))
    assert applied is not None and not applied.as_prepared
    assert _answer(new_sim, ctx) == _answer(old_sim, ctx)
    assert result.records == () and result.write is None
    assert new_sim.coord.committed("g") == old_sim.coord.committed("g")


def test_a_topic_deleted_between_steps_is_not_committed() -> None:
    sim, a, _b = _world()
    req = _request(a, "g", _big(10, extra=False))

    def delete_big() -> None:
        del sim.topics["big"]
        sim.apply(sim.coord.delete_topic_offsets(["big"]))

    _, result, applied, _ = _stepped(sim, _ctx(), req, meanwhile=delete_big)
    assert applied is not None and not applied.as_prepared
    response = result.replies[0].response
    assert isinstance(response, OffsetCommitResponse)
    assert {p.error_code for t in response.topics for p in t.partitions} == {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert sim.coord.committed("g") == {}


# --- a commit whose write failed ----------------------------------------------------


def test_a_failed_large_commit_leaves_the_stored_offsets_and_spares_later_commits() -> None:
    sim, a, _b = _world()
    sim.apply(sim.coord.handle(_ctx(), _request(a, "g", {("big", 0): (1, None),
                                                         ("big", 1): (1, None)}), sim.now))
    before = sim.coord.committed("g")
    ctx = _ctx()
    sim.hold_writes = True
    _, result, applied, _ = _stepped(sim, ctx, _request(a, "g", _big(10)))
    sim.hold_writes = False
    assert applied is not None and applied.as_prepared and sim.held == [result.write]
    assert sim.reply(ctx.conn_id, ctx.correlation_id) is None  # held
    assert a.commit({("big", 7): 99}) == {("big", 7): ErrorCode.NONE}  # committed over
    assert sim.coord.committed("g") == {**before, ("big", 7): 99}  # nothing pending shows
    assert result.write is not None
    sim.failed(result.write)
    assert sim.coord.committed("g") == {**before, ("big", 7): 99}
    codes = {(t.name, p.partition_index): p.error_code for t in _answer(sim, ctx).topics
             for p in t.partitions}
    assert codes[("big", 0)] == codes[("t", 0)] == ErrorCode.KAFKA_STORAGE_ERROR
    assert codes[("nope", 0)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # refusals stay
    assert codes[("t", 1)] == ErrorCode.PARTITION_NOT_OWNED


def test_a_failed_fallback_commit_leaves_the_stored_offsets() -> None:
    sim, _a, _b = _world()

    def delete_and_recreate() -> None:  # another Group object: the apply falls back
        sim.call(DeleteGroupsRequest(groups_names=["simple"]))
        sim.call(_request(None, "simple", {("u", 1): (5, None), ("big", 9): (5, None)}))
        sim.hold_writes = True

    _, result, applied, _ = _stepped(sim, _ctx(), _request(None, "simple", _big(3)),
                                     meanwhile=delete_and_recreate)
    sim.hold_writes = False
    assert applied is not None and not applied.as_prepared
    assert result.write is not None and result.records
    assert sim.coord.committed("simple") == {("u", 1): 5, ("big", 9): 5}
    sim.failed(result.write, ErrorCode.NOT_COORDINATOR)
    assert sim.coord.committed("simple") == {("u", 1): 5, ("big", 9): 5}


def test_steps_of_a_commit_twice_the_size_take_about_twice_as_many() -> None:
    sim, a, _b = _world()
    small = steps_taken(sim.coord.offset_commit_steps(
        _ctx(), _request(a, "g", {("big", p): (1, None) for p in range(1000)}), sim.now))[0]
    large = steps_taken(sim.coord.offset_commit_steps(
        _ctx(), _request(a, "g", {("big", p): (1, None) for p in range(2000)}), sim.now))[0]
    assert 2 * small <= large + 1


# --- the records' bytes -----------------------------------------------------------------


def test_the_encoder_makes_the_golden_bytes() -> None:
    kv = OffsetRecordEncoder().kv
    for record, key, value in GOLDEN:
        if isinstance(record, OffsetCommitRecord):
            assert kv(record.group_id, record.topic, record.partition, record.offset,
                      record.metadata, record.commit_ms) == (key, value)


_small = st.sampled_from(["", "g", "t", "\u00e9" * 40])
_ints = st.integers(-(2**63), 2**64 - 1)


@given(st.lists(st.builds(OffsetCommitRecord, _small | st.text(max_size=12),
                          _small | st.text(max_size=12), _ints, _ints,
                          _small | st.text(max_size=300), st.sampled_from([0, 2**40]) | _ints),
                max_size=30))
def test_the_encoder_makes_to_kvs_bytes(records: list[OffsetCommitRecord]) -> None:
    kv = OffsetRecordEncoder().kv  # one encoder for all: its shared parts are reused
    assert [kv(r.group_id, r.topic, r.partition, r.offset, r.metadata, r.commit_ms)
            for r in records] == [r.to_kv() for r in records]
