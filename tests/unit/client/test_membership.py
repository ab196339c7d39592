"""The pure membership state machine under a fake clock (docs/design/kafka.md §15)."""

from __future__ import annotations

import pytest

from groupwire.client.membership import Action, CommitCheck, Membership, MemberState
from groupwire.protocol.errors import ErrorCode

E = ErrorCode


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def joined(clock: Clock, *, instance: str | None = None, max_poll: int = 1000,
           generation: int = 1, member: str = "m-1", leader: str = "m-1") -> Membership:
    m = Membership(group_instance_id=instance, max_poll_interval_ms=max_poll, now_ms=clock.now)
    assert m.needs_join()
    m.join_sent(clock.now)
    assert m.state == MemberState.JOINING and m.heartbeat_target() is None
    assert m.on_join_response(E.NONE, member_id=member, generation_id=generation,
                              protocol_name="range", leader=leader,
                              now_ms=clock.now) == Action.OK
    assert m.heartbeat_target() is not None  # SYNCING: heartbeats start
    assert m.on_sync_response(E.NONE, clock.advance(5)) == Action.OK
    return m


def test_join_sync_reaches_stable_and_counts_the_rebalance() -> None:
    clock = Clock()
    m = joined(clock)
    assert m.state == MemberState.STABLE and not m.needs_join()
    assert m.is_leader()
    assert m.rebalance_count == 1 and m.last_rebalance_duration_ms == 5
    target = m.heartbeat_target()
    assert target is not None and (target.generation_id, target.member_id) == (1, "m-1")
    assert m.commit_check() == CommitCheck.OK


def test_member_id_required_keeps_the_id_and_rejoins_at_once() -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=1000, now_ms=0)
    m.join_sent(0)
    action = m.on_join_response(E.MEMBER_ID_REQUIRED, member_id="given", generation_id=-1,
                                protocol_name=None, leader="", now_ms=0)
    assert action == Action.REJOIN
    assert m.member_id == "given" and m.needs_join() and not m.lost_pending


@pytest.mark.parametrize(("code", "keeps_id"), [
    (E.UNKNOWN_MEMBER_ID, False), (E.ILLEGAL_GENERATION, True)])
def test_heartbeat_fencing_resets_generation_and_marks_lost(code: ErrorCode,
                                                           keeps_id: bool) -> None:
    clock = Clock()
    m = joined(clock)
    sent = m.generation
    assert m.on_heartbeat_response(code, sent, clock.advance(10)) == Action.REJOIN
    assert m.generation_id == -1 and m.state == MemberState.UNJOINED
    assert (m.member_id == "m-1") is keeps_id
    assert m.commit_check() == CommitCheck.FAILED
    assert m.take_lost() and not m.take_lost()
    assert m.needs_join()


def test_stale_heartbeat_answer_is_ignored() -> None:
    clock = Clock()
    m = joined(clock, generation=1)
    old = m.generation
    m.request_rejoin()
    m.join_sent(clock.now)
    m.on_join_response(E.NONE, member_id="m-1", generation_id=2, protocol_name="range",
                       leader="m-1", now_ms=clock.now)
    m.on_sync_response(E.NONE, clock.now)
    assert m.on_heartbeat_response(E.ILLEGAL_GENERATION, old, clock.now) == Action.IGNORE
    assert m.generation_id == 2 and m.state == MemberState.STABLE


def test_rebalance_in_progress_heartbeat_keeps_session_and_requests_rejoin() -> None:
    clock = Clock()
    m = joined(clock)
    assert m.on_heartbeat_response(E.REBALANCE_IN_PROGRESS, m.generation,
                                   clock.advance(7)) == Action.REJOIN
    assert m.last_heartbeat_answer_ms == clock.now
    assert m.needs_join() and m.state == MemberState.STABLE
    # commits are still allowed with the current generation until the rejoin is sent
    assert m.commit_check() == CommitCheck.OK
    m.join_sent(clock.now)
    assert m.commit_check() == CommitCheck.REBALANCING
    assert not m.take_lost()


def test_fenced_instance_is_fatal() -> None:
    clock = Clock()
    m = joined(clock, instance="i-1")
    assert m.on_heartbeat_response(E.FENCED_INSTANCE_ID, m.generation,
                                   clock.now) == Action.FATAL
    assert m.state == MemberState.FATAL and m.fatal_code == E.FENCED_INSTANCE_ID
    assert not m.needs_join() and m.take_lost()


@pytest.mark.parametrize("code", [E.INCONSISTENT_GROUP_PROTOCOL, E.GROUP_MAX_SIZE_REACHED,
                                  E.FENCED_INSTANCE_ID, E.INVALID_SESSION_TIMEOUT])
def test_fatal_join_errors(code: ErrorCode) -> None:
    m = Membership(group_instance_id="i", max_poll_interval_ms=1000, now_ms=0)
    m.join_sent(0)
    assert m.on_join_response(code, member_id="", generation_id=-1, protocol_name=None,
                              leader="", now_ms=0) == Action.FATAL
    assert m.state == MemberState.FATAL


def test_join_retry_and_coordinator_errors() -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=1000, now_ms=0)
    m.join_sent(0)
    assert m.on_join_response(E.REBALANCE_IN_PROGRESS, member_id="", generation_id=-1,
                              protocol_name=None, leader="", now_ms=0) == Action.RETRY
    assert m.needs_join()
    m.join_sent(0)
    assert m.on_join_response(E.COORDINATOR_NOT_AVAILABLE, member_id="", generation_id=-1,
                              protocol_name=None, leader="", now_ms=0
                              ) == Action.FIND_COORDINATOR


def test_sync_rebalance_in_progress_keeps_generation() -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=1000, now_ms=0)
    m.join_sent(0)
    m.on_join_response(E.NONE, member_id="a", generation_id=3, protocol_name="range",
                       leader="b", now_ms=0)
    assert not m.is_leader()
    assert m.on_sync_response(E.REBALANCE_IN_PROGRESS, 0) == Action.REJOIN
    assert m.generation_id == 3 and m.member_id == "a" and m.needs_join()
    assert not m.take_lost()


def test_poll_age_and_expiry_for_dynamic_member_sends_leave() -> None:
    clock = Clock()
    m = joined(clock, max_poll=1000)
    m.poll_started(clock.now)
    assert m.poll_age_ms(clock.advance(5000)) == 0  # inside poll: age 0
    assert not m.poll_expired(clock.now)
    m.poll_ended(clock.now)
    assert m.poll_age_ms(clock.advance(400)) == 400
    assert not m.poll_expired(clock.advance(600))   # exactly the interval: not yet
    assert m.poll_expired(clock.advance(1))
    leave = m.expire_poll(clock.now)
    assert leave is not None and leave.member_id == "m-1"
    assert m.member_id == "" and m.generation_id == -1 and m.take_lost()
    assert m.commit_check() == CommitCheck.FAILED
    assert m.needs_join() and m.poll_expired_count == 1
    assert not m.poll_expired(clock.advance(10_000))  # no member: nothing to expire


def test_poll_expiry_for_static_member_sends_nothing() -> None:
    clock = Clock()
    m = joined(clock, instance="static-1", max_poll=100)
    assert m.poll_expired(clock.advance(101))
    assert m.expire_poll(clock.now) is None
    assert m.member_id == "" and m.take_lost()


def test_commit_errors() -> None:
    clock = Clock()
    m = joined(clock)
    sent = m.generation
    assert m.on_commit_error(E.REBALANCE_IN_PROGRESS, sent, clock.now) == Action.REJOIN
    assert m.needs_join() and m.generation_id == 1
    assert m.on_commit_error(E.ILLEGAL_GENERATION, sent, clock.now) == Action.REJOIN
    assert m.generation_id == -1 and m.member_id == "m-1" and m.take_lost()


def test_connection_failure_mid_join_rejoins() -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=1000, now_ms=0)
    m.join_sent(0)
    assert not m.needs_join()
    m.connection_failed()
    assert m.needs_join() and m.state == MemberState.UNJOINED


def test_membership_core_imports_no_io() -> None:
    import ast
    import pathlib

    import groupwire.client.membership as mod
    tree = ast.parse(pathlib.Path(mod.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom)}
    assert not names & {"asyncio", "socket", "time", "threading"}


def test_heartbeat_answer_racing_our_own_join_is_ignored() -> None:
    """A heartbeat sent before our JoinGroup can come back ILLEGAL_GENERATION once the
    broker moved on; the JoinGroup in flight carries the new generation, so no reset."""
    clock = Clock()
    m = joined(clock)
    sent = m.generation
    m.request_rejoin()
    m.join_sent(clock.now)
    assert m.on_heartbeat_response(E.ILLEGAL_GENERATION, sent, clock.now) == Action.IGNORE
    assert not m.take_lost() and m.state == MemberState.JOINING
    m.on_join_response(E.NONE, member_id="m-1", generation_id=2, protocol_name="range",
                       leader="m-1", now_ms=clock.now)
    assert m.on_sync_response(E.NONE, clock.now) == Action.OK
    assert not m.needs_join()


def test_leave_after_unsubscribe_is_not_a_loss() -> None:
    clock = Clock()
    m = joined(clock)
    leave = m.leave()
    assert leave is not None and leave.member_id == "m-1"
    assert m.member_id == "" and m.generation_id == -1 and not m.take_lost()
    assert m.state == MemberState.UNJOINED and m.heartbeat_target() is None
    static = joined(clock, instance="s")
    assert static.leave() is None  # static members never send LeaveGroup


def test_no_heartbeat_answer_for_a_session_timeout_presumes_the_partitions_lost() -> None:
    clock = Clock()
    m = joined(clock, max_poll=10**9)
    assert m.check_session(clock.advance(100), 100) is False  # exactly the timeout: kept
    assert m.on_heartbeat_response(E.NONE, m.generation, clock.now) == Action.OK
    assert m.check_session(clock.advance(100), 100) is False  # the answer renewed it
    assert m.state == MemberState.STABLE
    # frozen: the next look at the clock is past the session timeout since the last answer
    assert m.check_session(clock.advance(101), 100) is True
    assert m.take_lost() is True
    assert m.state == MemberState.UNJOINED and m.needs_join()
    assert (m.member_id, m.generation_id) == ("", -1)  # joins afresh: the old id is gone
    assert m.commit_check() == CommitCheck.FAILED
    assert m.check_session(clock.advance(10_000), 100) is False  # once, and only when Stable
