"""The heartbeat fast path (``Coordinator.renew``) and lazy session timers.

The broker offers every Heartbeat to ``renew`` before ``handle``. Whatever it settles
must look, from outside, exactly as if ``handle`` had: same answers, same events, members
expiring at the same instants. Here the simulated shells do what the broker does, and the
answers are compared with the full path's on the same scripts and schedules.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from groupwire.broker.coordinator import Renewal, RequestContext, Result
from groupwire.broker.coordinator import coordinator as coordinator_module
from groupwire.broker.coordinator.engine import Engine, heartbeat_response
from groupwire.broker.coordinator.member import Member as CoreMember
from groupwire.broker.coordinator.state import COMPLETING_REBALANCE, PREPARING_REBALANCE
from groupwire.protocol.codec import HeartbeatFields, decode_heartbeat, encode_request
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import HeartbeatRequest, Request, Response
from tests.sim import schedule
from tests.sim.world import World

from .coord_sim import Member, Sim, form_group, join_all
from .test_coord_state_machine import GroupMachine, SmallGroupMachine

NONE = heartbeat_response(ErrorCode.NONE)  # the full path's own NONE answer


# --- shells that take the fast path first, as broker/connection.py does ----------------


def wire(request: HeartbeatRequest, cid: int = 1) -> HeartbeatFields:
    """What the broker hands ``renew``: the request through the wire and its fast decoder."""
    fields = decode_heartbeat(encode_request(cid, request, "c"))
    assert fields is not None
    return fields


def _sim_send(self: Sim, request: Request, conn: int = 0, client_id: str = "c",
              host: str = "/10.0.0.1") -> int:
    cid = next(self._cids)
    if isinstance(request, HeartbeatRequest) and self.coord.renew(conn, wire(request, cid),
                                                                  self.now):
        assert (conn, cid) not in self.replies
        self.replies[conn, cid] = NONE
        self.results.append(Result())  # nothing to execute
    else:
        self.apply(self.coord.handle(RequestContext(conn, cid, client_id, host), request,
                                     self.now))
    self.fire_due()
    return cid


_plain_world_send = World.send


def _world_send(self: World, request: Request, conn: int, client_id: str) -> int:
    if isinstance(request, HeartbeatRequest):
        cid = self.last_cid + 1
        if self.coord.renew(conn, wire(request, cid), self.now):
            self.last_cid = next(self._cids)
            assert conn not in self.closed and (conn, cid) not in self.replies
            self.replies[conn, cid] = NONE
            self.on_reply((conn, cid), request, NONE)
            self.fire_due()
            return cid
    return _plain_world_send(self, request, conn, client_id)


class FastSim(Sim):
    send = _sim_send  # type: ignore[assignment]


# --- the fast path itself -------------------------------------------------------------


def _stable_pair(sim: Sim) -> tuple[Member, Member]:
    a = Member(sim, client_id="a", session_timeout_ms=10_000)
    b = Member(sim, client_id="b", session_timeout_ms=10_000)
    form_group(sim, [a, b])
    return a, b


def _hb(m: Member, **fields: int | str | None) -> HeartbeatRequest:
    base: dict[str, int | str | None] = {
        "group_id": m.group_id, "generation_id": m.generation_id, "member_id": m.member_id,
        "group_instance_id": m.instance_id, "poll_age_ms": -1, "wait_ms": 0}
    base.update(fields)
    return HeartbeatRequest(**base)  # type: ignore[arg-type]


def test_renew_settles_a_stable_members_heartbeat_with_no_outputs() -> None:
    sim = Sim()
    a, _ = _stable_pair(sim)
    armed = sim.timer_deadline(("session", "g", a.member_id))
    results = len(sim.results)
    sim.advance(3000)
    renewal = sim.coord.renew(a.conn, wire(_hb(a, poll_age_ms=120)), sim.now)
    assert len(sim.results) == results  # nothing for the shell to do
    # the renewal lists every change it made
    assert renewal is not None
    group_id, member_id, session_deadline_ms, poll_age_ms, attached_conn = renewal
    assert (group_id, member_id, session_deadline_ms, poll_age_ms, attached_conn) == (
        "g", a.member_id, sim.now + 10_000, 120, -1)
    group = sim.coord.view.group("g")
    assert group is not None
    assert group.members[a.member_id].session_deadline == sim.now + 10_000
    # the armed timer is left where it was; the member's record shows the heartbeat
    assert sim.timer_deadline(("session", "g", a.member_id)) == armed
    described = {m.member_id: m for m in sim.describe("g").members}[a.member_id]
    assert described.last_heartbeat_ms == sim.now
    assert described.poll_age_ms == 120


def test_renew_in_completing_rebalance_answers_none_like_the_full_path() -> None:
    sim = Sim()
    a, b = (Member(sim, client_id=x) for x in "ab")
    join_all(sim, [a, b])
    assert sim.state("g") == COMPLETING_REBALANCE.value
    assert sim.coord.renew(b.conn, wire(_hb(b)), sim.now)


def test_a_renewed_session_ends_at_the_last_heartbeat_plus_the_timeout() -> None:
    """The armed timer fires early, re-arms itself, and expiry comes exactly on time."""
    sim = FastSim()
    a, b = _stable_pair(sim)
    t0 = sim.now
    sim.advance(6000)
    assert a.hb() == ErrorCode.NONE and b.hb() == ErrorCode.NONE
    renewed_at = sim.now
    sim.advance_to(t0 + 10_000)  # the first armed deadline: nobody expires
    assert sim.events_of("member_expired") == []
    assert sim.timer_deadline(("session", "g", a.member_id)) == renewed_at + 10_000
    sim.advance(2000)
    assert b.hb() == ErrorCode.NONE  # b stays alive, a goes quiet
    sim.advance_to(renewed_at + 10_000 - 1)
    assert sim.events_of("member_expired") == []
    sim.advance(1)
    expired = sim.events_of("member_expired")
    assert [(e.member_id, e.reason, e.ts_ms) for e in expired] == [
        (a.member_id, "session-expired", renewed_at + 10_000)]
    assert b.hb() == ErrorCode.REBALANCE_IN_PROGRESS


def test_renew_attaches_a_new_connection() -> None:
    """A heartbeat on another connection keeps the member alive when the first closes."""
    sim = FastSim()
    a, _ = _stable_pair(sim)
    other = sim.new_conn()
    assert a.hb(conn=other) == ErrorCode.NONE
    sim.close(a.conn)
    assert sim.events_of("connection_lost") == []
    sim.close(other)
    assert [e.member_id for e in sim.events_of("connection_lost")] == [a.member_id]


Case = Callable[[Sim, Member, Member], HeartbeatRequest]


def _preparing(sim: Sim, a: Member, b: Member) -> HeartbeatRequest:
    Member(sim, client_id="c").join()  # a newcomer starts a rebalance
    assert sim.state("g") == PREPARING_REBALANCE.value
    return _hb(a)


def _parked_poll(sim: Sim, a: Member, b: Member) -> HeartbeatRequest:
    a.heartbeat(wait_ms=1000)  # held: the next heartbeat must answer it
    return _hb(a)


def _member(sim: Sim, m: Member) -> CoreMember:
    """The core's record of ``m``. The two cases below set a field directly to reach, in
    one step, a state that otherwise takes a long script."""
    group = sim.coord.view.group("g")
    assert group is not None
    return group.members[m.member_id]


def _satisfied(sim: Sim, a: Member, b: Member) -> HeartbeatRequest:
    _member(sim, a).session_deadline = None  # as for a member whose timer fired while parked
    return _hb(a)


def _shorter_session(sim: Sim, a: Member, b: Member) -> HeartbeatRequest:
    # a deadline before the armed timer: needs a timer op
    _member(sim, a).session_timeout_ms = 10
    return _hb(a)


DECLINED: dict[str, Case] = {
    "unknown group": lambda sim, a, b: _hb(a, group_id="nope"),
    "empty group id": lambda sim, a, b: _hb(a, group_id=""),
    "unknown member": lambda sim, a, b: _hb(a, member_id="stranger"),
    "old generation": lambda sim, a, b: _hb(a, generation_id=a.generation_id - 1),
    "unmapped instance": lambda sim, a, b: _hb(a, group_instance_id="i-other"),
    "poll interval passed": lambda sim, a, b: _hb(a, poll_age_ms=a.rebalance_timeout_ms + 1),
    "long poll": lambda sim, a, b: _hb(a, wait_ms=500),
    "preparing rebalance": _preparing,
    "previous long poll parked": _parked_poll,
    "no session timer": _satisfied,
    "deadline before the armed timer": _shorter_session,
}


def _member_state(sim: Sim) -> Iterator[tuple[object, ...]]:
    for group in sim.coord.view.groups():
        yield group.group_id, group.state, group.generation_id
        for m in group.members.values():
            yield (m.member_id, m.poll_age_ms, m.last_heartbeat_ms, m.session_deadline,
                   frozenset(m.conns), m.connection_lost)


@pytest.mark.parametrize("case", DECLINED)
def test_renew_declines_without_changing_anything(case: str) -> None:
    sim = Sim()
    a, b = _stable_pair(sim)
    sim.advance(1000)
    request = DECLINED[case](sim, a, b)
    before = list(_member_state(sim))
    parked = sim.coord.view.parked_total()
    assert sim.coord.renew(sim.new_conn(), wire(request), sim.now) is None
    assert list(_member_state(sim)) == before
    assert sim.coord.view.parked_total() == parked


def test_a_declined_heartbeat_gets_the_full_paths_answer() -> None:
    sim = FastSim()
    a, b = _stable_pair(sim)
    assert a.hb(generation_id=a.generation_id + 1) == ErrorCode.ILLEGAL_GENERATION
    assert a.hb(poll_age_ms=a.rebalance_timeout_ms + 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert b.hb() == ErrorCode.REBALANCE_IN_PROGRESS
    assert sim.state("g") == PREPARING_REBALANCE.value


# --- the same scripts and schedules, fast path or not ----------------------------------


def _script(sim: Sim) -> tuple[list[tuple[tuple[int, int], Response]], list[str]]:
    """Heartbeats at cadences around the session timeouts, a static member with long
    polls, a closed connection; returns every answer and every event with its time."""
    a = Member(sim, client_id="a", session_timeout_ms=3000, rebalance_timeout_ms=5000)
    b = Member(sim, client_id="b", session_timeout_ms=2000, rebalance_timeout_ms=5000)
    s = Member(sim, client_id="s", instance_id="s", session_timeout_ms=4000,
               rebalance_timeout_ms=5000)
    form_group(sim, [a, b, s])
    for step in range(120):
        sim.advance(250)
        if step % 3 == 0:
            a.heartbeat(poll_age_ms=step * 10)
        if step % 7 == 0 and step < 60:
            b.heartbeat()
        if step % 5 == 0:
            s.heartbeat(wait_ms=600 if step % 10 == 0 else 0)
        if step == 80:
            sim.close(s.conn)
            s.conn = sim.new_conn()
    events = [f"{e.ts_ms} {e.type} {e.member_id} {e.reason}" for e in sim.events]
    return sorted(sim.replies.items()), events


def test_a_scripted_run_is_the_same_with_and_without_the_fast_path() -> None:
    assert _script(FastSim()) == _script(Sim())


def _renews_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the heartbeats ``renew`` settled (a test that never took it proves nothing)."""
    counter = [0]
    inner = coordinator_module.renew

    def counting(engine: Engine, conn_id: int, heartbeat: HeartbeatFields,
                 now_ms: int) -> Renewal | None:
        settled = inner(engine, conn_id, heartbeat, now_ms)
        counter[0] += settled is not None
        return settled

    # each Coordinator binds the module's ``renew`` when it is made
    monkeypatch.setattr(coordinator_module, "renew", counting)
    return counter


def test_group_state_machine_keeps_its_invariants_on_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    renewed = _renews_counted(monkeypatch)
    monkeypatch.setattr(Sim, "send", _sim_send)
    quick = settings(max_examples=25, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
    for machine in (GroupMachine, SmallGroupMachine):
        run_state_machine_as_test(machine, settings=quick)
    assert renewed[0] > 0


SEEDS = range(400)


def test_random_schedules_keep_every_invariant_on_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    renewed = _renews_counted(monkeypatch)
    monkeypatch.setattr(World, "send", _world_send)
    stats = schedule.Stats()
    for seed in SEEDS:
        schedule.run_schedule(seed, stats=stats)
    assert stats.schedules == len(SEEDS)
    assert renewed[0] > len(SEEDS)


def _replies_of_runs(seeds: range) -> list[list[str]]:
    """Each schedule's trace plus every answer it got, in request order."""
    runs: list[list[str]] = []
    worlds: list[World] = []

    class Recording(World):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            worlds.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schedule, "World", Recording)
        # writes stored at once: which of several timers due at one jumped-to instant
        # fires first may differ between the paths, and held writes make that show
        patch.setattr(schedule, "_outcomes", lambda seed: None)
        for seed in seeds:
            trace: list[str] = []
            schedule.run_schedule(seed, trace=trace)
            world = worlds.pop()
            runs.append(trace + [f"{k} {v!r}" for k, v in sorted(world.replies.items())])
    return runs


def test_random_schedules_get_the_same_answers_with_and_without_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = range(1000, 1150)
    full = _replies_of_runs(seeds)
    monkeypatch.setattr(World, "send", _world_send)
    fast = _replies_of_runs(seeds)
    for seed, a, b in zip(seeds, full, fast, strict=True):
        assert a == b, f"seed {seed} differs at line " + str(
            next(i for i, (x, y) in enumerate(itertools.zip_longest(a, b)) if x != y))
