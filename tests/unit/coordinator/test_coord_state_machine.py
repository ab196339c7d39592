"""Random schedules of joins, syncs, heartbeats, leaves, commits, closed connections and
clock jumps, with the coordinator's invariants checked after every step."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from groupwire.broker.coordinator.parking import JOIN, SYNC
from groupwire.broker.coordinator.sharing import decode_owned
from groupwire.broker.coordinator.state import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import JoinGroupResponse, SyncGroupResponse

from .coord_sim import TEST_CONFIG, Member, Sim, assignment, sub

CONFIG = replace(TEST_CONFIG, initial_rebalance_delay_ms=200, connection_loss_grace_ms=500,
                 new_member_join_timeout_ms=6000, offsets_retention_ms=120_000,
                 offsets_retention_check_interval_ms=60_000)
SLOTS = 6  # 0-3 dynamic, 4-5 static
PARTITIONS = 6


class GroupMachine(RuleBasedStateMachine):
    config = CONFIG

    @initialize()
    def setup(self) -> None:
        self.sim = Sim(self.config, topics={"t": PARTITIONS, "u": 2})
        self.slots = [
            Member(self.sim, client_id=f"c{i}",
                   instance_id=f"inst{i}" if i >= 4 else None,
                   session_timeout_ms=1000 + 500 * (i % 3),
                   rebalance_timeout_ms=2000 + 1000 * (i % 2))
            for i in range(SLOTS)]
        self.synced: dict[int, int] = {}  # slot -> generation it sent SyncGroup for
        self.leaders: dict[int, str] = {}  # generation -> leader, from join responses
        self.seen_results = 0
        self.last_generation = 0

    # --- rules ------------------------------------------------------------------------

    def _refresh(self) -> None:
        for m in self.slots:
            if m.join_cid is not None:
                m.join_response()

    @rule(i=st.integers(0, SLOTS - 1))
    def join(self, i: int) -> None:
        self._refresh()
        self.slots[i].send_join(reason=f"join {i}")

    @rule(i=st.integers(0, SLOTS - 1), new_conn=st.booleans())
    def restart(self, i: int, new_conn: bool) -> None:
        m = self.slots[i]
        m.member_id, m.generation_id, m.join_cid, m.sync_cid = "", -1, None, None
        if new_conn:
            m.conn = self.sim.new_conn()
        m.send_join()

    @rule(i=st.integers(0, SLOTS - 1), wide=st.booleans())
    def change_subscription(self, i: int, wide: bool) -> None:
        self.slots[i].protocols = [("range", sub("t", "u") if wide else sub("t"))]

    @rule(i=st.integers(0, SLOTS - 1))
    def sync(self, i: int) -> None:
        self._refresh()
        self._sync(i)

    def _sync(self, i: int) -> None:
        m = self.slots[i]
        self.synced[i] = m.generation_id
        resp = self.sim.reply(m.conn, m.join_cid) if m.join_cid is not None else None
        plan: dict[str, bytes] = {}
        if (isinstance(resp, JoinGroupResponse) and resp.error_code == ErrorCode.NONE
                and resp.leader == m.member_id and not resp.skip_assignment):
            ids = sorted(x.member_id for x in resp.members)
            for member_id in ids:
                plan[member_id] = assignment(*(("t", p) for p in range(PARTITIONS)
                                               if ids[p % len(ids)] == member_id))
        m.send_sync(plan)

    @rule(who=st.sets(st.integers(0, SLOTS - 1), min_size=1), rounds=st.integers(1, 40))
    def cooperate(self, who: set[int], rounds: int) -> None:
        """The chosen slots behave like real clients for a while, 100 ms per round."""
        for _ in range(rounds):
            for i in sorted(who):
                self._act(i)
            self.sim.step_through(100)

    def _act(self, i: int) -> None:
        m = self.slots[i]
        if m.join_cid is None:
            m.send_join()
            return
        joined = m.join_response()
        if joined is None:
            return  # parked
        if joined.error_code != ErrorCode.NONE:
            if joined.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                m.member_id = ""
            m.send_join()
            return
        if self.synced.get(i) != m.generation_id or m.sync_cid is None:
            self._sync(i)
            return
        synced = m.sync_response()
        if synced is None:
            return  # waiting for the leader
        if synced.error_code != ErrorCode.NONE:
            self._rejoin(m, ErrorCode(synced.error_code))
            return
        cid = m.heartbeat()
        beat = self.sim.reply(m.conn, cid)
        if beat is not None and beat.error_code != ErrorCode.NONE:
            self._rejoin(m, ErrorCode(beat.error_code))

    @staticmethod
    def _rejoin(m: Member, code: ErrorCode) -> None:
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            m.member_id = ""
        m.send_join()

    @rule(i=st.integers(0, SLOTS - 1), wait=st.sampled_from([0, 0, 400, 5000]),
          poll=st.sampled_from([-1, 0, 100, 2500, 10_000]))
    def heartbeat(self, i: int, wait: int, poll: int) -> None:
        self._refresh()
        self.slots[i].heartbeat(wait_ms=wait, poll_age_ms=poll)

    @rule(i=st.integers(0, SLOTS - 1))
    def leave(self, i: int) -> None:
        self._refresh()
        self.slots[i].leave(reason="bye")

    @rule(i=st.integers(0, SLOTS - 1), p=st.integers(0, PARTITIONS - 1))
    def commit(self, i: int, p: int) -> None:
        self._refresh()
        self.slots[i].commit({("t", p): 1})

    @rule(i=st.integers(0, SLOTS - 1))
    def close_connection(self, i: int) -> None:
        m = self.slots[i]
        self.sim.close(m.conn)
        m.conn = self.sim.new_conn()

    @rule(ms=st.sampled_from([0, 1, 50, 200, 499, 500, 1000, 2500, 6000, 70_000]))
    def jump(self, ms: int) -> None:
        self.sim.advance(ms)

    @rule(ms=st.sampled_from([100, 1000, 3000]))
    def step(self, ms: int) -> None:
        self.sim.step_through(ms)

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def replies_are_consistent(self) -> None:
        results = self.sim.results[self.seen_results:]
        self.seen_results = len(self.sim.results)
        for result in results:
            owners: dict[tuple[str, int], str] = {}
            for reply in result.replies:
                r = reply.response
                if isinstance(r, JoinGroupResponse) and r.error_code == ErrorCode.NONE:
                    # a restarted static leader keeps leading under a new id (KIP-814):
                    # leadership belongs to the instance ("<instance>-<uuid>")
                    who = r.leader.rsplit("-", 1)[0] if r.leader.startswith("inst") else r.leader
                    leader = self.leaders.setdefault(r.generation_id, who)
                    assert leader == who, f"two leaders in generation {r.generation_id}"
                if isinstance(r, SyncGroupResponse) and r.error_code == ErrorCode.NONE:
                    for tp in decode_owned(r.assignment) or ():
                        previous = owners.setdefault(tp, f"{reply.conn_id}")
                        assert previous == f"{reply.conn_id}", f"{tp} handed out twice"

    @invariant()
    def group_is_consistent(self) -> None:
        view = self.sim.coord.view
        group = view.group("g")
        if group is None:
            self.last_generation = 0  # deleted (retention sweep): may come back new
            self.leaders.clear()
            return
        now = self.sim.now
        members = group.members
        assert group.generation_id >= self.last_generation
        self.last_generation = group.generation_id
        # leadership and static mapping
        assert (group.leader_id is None) == (not members)
        assert group.leader_id is None or group.leader_id in members
        assert {inst: mid for inst, mid in group.static_members.items()} == {
            m.group_instance_id: m.member_id for m in members.values() if m.is_static}
        counts: dict[str, int] = {}
        for m in members.values():
            for name, _ in m.protocols:
                counts[name] = counts.get(name, 0) + 1
        assert counts == group.supported_protocols
        # state-specific
        if group.state is EMPTY:
            assert not members and group.protocol_name is None
        if group.state in (COMPLETING_REBALANCE, STABLE):
            assert group.protocol_name is not None and members
            assert not any(view.is_awaiting_join("g", mid) for mid in members)
        if group.state is PREPARING_REBALANCE:
            assert group.join_deadline is not None and group.join_deadline >= now
            assert self.sim.timer_deadline(group.join_key) == group.join_deadline
        if group.state is STABLE:  # everyone synced or free to: nobody waits in Sync
            assert view.parked(SYNC, "g") == []
            assert not any(m.is_new for m in members.values())
        if group.pending_sync and group.state in (COMPLETING_REBALANCE, STABLE):
            assert group.sync_deadline is not None and group.sync_deadline >= now
        # parked requests belong to members
        for kind in (JOIN, SYNC):
            assert set(view.parked(kind, "g")) <= set(members)
        # nobody outlives its deadline: each live session has its timer armed, for the
        # deadline or earlier (a timer firing early re-arms itself for the deadline)
        for m in members.values():
            if m.session_deadline is None:
                assert view.is_satisfied("g", m.member_id), f"{m} has no session timer"
            else:
                assert m.session_deadline > now or m.session_deadline == now
                armed = self.sim.timer_deadline(m.session_key)
                assert armed is not None and now <= armed <= m.session_deadline
        for pending_id, deadline in group.pending_join.items():
            assert deadline >= now
            assert self.sim.timer_deadline(("session", "g", pending_id)) == deadline
        # no timer outlives what it guards
        if group.state is not PREPARING_REBALANCE:
            assert group.join_key not in self.sim.timers
        if group.sync_deadline is None or not group.pending_sync:
            assert ("sync", "g", str(group.generation_id)) not in self.sim.timers
        armed_polls = {k for k in self.sim.timers.armed() if k[0] == "hbwait"}
        assert armed_polls == view.long_poll_timers()
        # no partition owned twice
        owned: dict[tuple[str, int], str] = {}
        for m in members.values():
            for tp in m.owned or ():
                assert tp not in owned, f"{tp} owned by {owned[tp]} and {m.member_id}"
                owned[tp] = m.member_id


class SmallGroupMachine(GroupMachine):
    """No initial delay, at most 3 members, fencing off: other paths, same invariants."""

    config = replace(CONFIG, initial_rebalance_delay_ms=0, group_max_size=3,
                     ownership_fencing=False)


_SETTINGS = settings(max_examples=50, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
GroupMachine.TestCase.settings = _SETTINGS
SmallGroupMachine.TestCase.settings = _SETTINGS
TestGroupMachine = GroupMachine.TestCase
TestSmallGroupMachine = SmallGroupMachine.TestCase
