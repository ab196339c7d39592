"""A well-behaved consumer process following the Java client's rules (KIP-394 join,
leader assigns round robin over the subscriptions, sync, heartbeat at an interval, rejoin
on REBALANCE_IN_PROGRESS and friends), with switches the fault injector flips."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupwire.protocol.consumer import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    Request,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from tests.sim.invariants import Checker
from tests.sim.world import World

GROUP = "g"
_RESET_ID = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID})

def round_robin(members: list[tuple[str, list[str]]],
                topics: dict[str, int]) -> dict[str, bytes]:
    """The leader's plan: each topic's partitions dealt in turn to its subscribers."""
    ids = sorted(m for m, _ in members)
    subs = dict(members)
    plan: dict[str, dict[str, list[int]]] = {m: {} for m in ids}
    turn = 0
    for topic in sorted({t for _, ts in members for t in ts}):
        takers = [m for m in ids if topic in subs[m]]
        for p in range(topics.get(topic) or 0):
            owner = takers[turn % len(takers)]
            turn += 1
            plan[owner].setdefault(topic, []).append(p)
    return {m: encode_assignment(Assignment(assigned_partitions=sorted(tps.items())))
            for m, tps in plan.items()}


@dataclass
class Client:
    """One member process; ``progress`` does what a real client would do now."""

    world: World
    name: str
    instance_id: str | None
    topics: list[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    checker: Checker
    conn: int = -1
    member_id: str = ""
    generation_id: int = -1
    join_cid: int | None = None
    sync_cid: int | None = None
    stable: bool = False
    owned: list[tuple[str, int]] = field(default_factory=list)
    next_heartbeat: int = 0
    last_poll: int = 0
    down: bool = False          # crashed, left or fenced: silent until restarted
    paused_until: int = 0       # a GC pause / frozen process: silent
    slow_until: int = 0         # the application does not poll: poll age grows
    generations_seen: list[int] = field(default_factory=list)
    hb_cid: int | None = None   # a heartbeat whose answer waits (for a write's outcome)
    hb_sent: int = 0

    def __post_init__(self) -> None:
        if self.conn < 0:
            self.conn = self.world.new_conn()

    @property
    def parked(self) -> bool:
        """A Join or Sync the coordinator holds: Kafka keeps such a member alive."""
        cid = self.join_cid if self.join_cid is not None else self.sync_cid
        return (cid is not None and bool(self.member_id)
                and self.world.reply(self.conn, cid) is None)

    @property
    def interval_ms(self) -> int:
        return max(1, self.session_timeout_ms // 3)

    def _send(self, request: Request) -> int:
        self.checker.saw_request(getattr(request, "member_id", ""))
        return self.world.send(request, self.conn, self.name)

    # --- the client's loop --------------------------------------------------------------

    def progress(self) -> None:
        now = self.world.now
        if self.down or now < self.paused_until:
            return
        if now >= self.slow_until:
            self.last_poll = now
        if self.join_cid is not None:
            self._on_join()
        elif self.sync_cid is not None:
            self._on_sync()
        elif self.stable:
            if self.hb_cid is not None:
                self._on_heartbeat()
            elif now >= self.next_heartbeat:
                self.heartbeat()
        else:
            self.join()

    def join(self) -> None:
        self.stable, self.sync_cid = False, None
        proto = encode_subscription(Subscription(topics=list(self.topics)))
        self.join_cid = self._send(JoinGroupRequest(
            group_id=GROUP, member_id=self.member_id, group_instance_id=self.instance_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="roundrobin", metadata=proto)]))
        self._on_join()

    def _on_join(self) -> None:
        resp = self.world.reply(self.conn, self.join_cid)
        if resp is None:
            return
        assert isinstance(resp, JoinGroupResponse)
        self.join_cid = None
        if resp.member_id:
            self.checker.session_of[resp.member_id] = self.session_timeout_ms
        code = ErrorCode(resp.error_code)
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            self.join()
        elif code is ErrorCode.NONE:
            self.member_id, self.generation_id = resp.member_id, resp.generation_id
            self.generations_seen.append(resp.generation_id)
            plan: dict[str, bytes] = {}
            if resp.leader == resp.member_id and not resp.skip_assignment:
                members = [(m.member_id, decode_subscription(m.metadata).topics)
                           for m in resp.members]
                plan = round_robin(members, self.world.topics)
            self.sync_cid = self._send(SyncGroupRequest(
                group_id=GROUP, generation_id=self.generation_id, member_id=self.member_id,
                group_instance_id=self.instance_id, protocol_type="consumer",
                protocol_name="roundrobin",
                assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a)
                             for m, a in plan.items()]))
            self._on_sync()
        elif code is ErrorCode.FENCED_INSTANCE_ID:
            self.crash_state()  # fatal for a Java consumer
        else:
            if code in _RESET_ID:
                self.member_id = ""
            if code is ErrorCode.GROUP_MAX_SIZE_REACHED:
                self.crash_state()  # fatal too
                return
            self.join_cid = None  # rejoin at the next progress

    def _on_sync(self) -> None:
        resp = self.world.reply(self.conn, self.sync_cid)
        if resp is None:
            return
        assert isinstance(resp, SyncGroupResponse)
        self.sync_cid = None
        code = ErrorCode(resp.error_code)
        if code is ErrorCode.NONE:
            self.stable = True
            tps = decode_assignment(resp.assignment).assigned_partitions
            self.owned = [(t, p) for t, ps in tps for p in ps]
            self.next_heartbeat = self.world.now + self.interval_ms
        else:
            self._rejoin(code)

    def heartbeat(self) -> None:
        now = self.world.now
        self.hb_cid = self._send(HeartbeatRequest(
            group_id=GROUP, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.instance_id, poll_age_ms=now - self.last_poll, wait_ms=0))
        self.hb_sent = now
        self._on_heartbeat()

    def _on_heartbeat(self) -> None:
        """A wait_ms=0 heartbeat is answered at once unless its input wrote records (its
        answer then waits for the write's outcome)."""
        resp = self.world.reply(self.conn, self.hb_cid)
        if resp is None:
            assert self.world.hold_writes, "a wait_ms=0 heartbeat was parked"
            return
        assert isinstance(resp, HeartbeatResponse)
        self.hb_cid = None
        code = ErrorCode(resp.error_code)
        if code is ErrorCode.NONE:
            self.next_heartbeat = self.hb_sent + self.interval_ms
        else:
            self._rejoin(code)

    def _rejoin(self, code: ErrorCode) -> None:
        self.stable, self.owned, self.hb_cid = False, [], None
        if code is ErrorCode.FENCED_INSTANCE_ID:
            self.crash_state()
            return
        if code in _RESET_ID:
            self.member_id = ""
        if code is ErrorCode.ILLEGAL_GENERATION:
            self.generation_id = -1
        self.join()

    # --- what the fault injector and the schedule do ------------------------------------

    def crash_state(self) -> None:
        self.down, self.stable, self.owned = True, False, []
        self.join_cid = self.sync_cid = self.hb_cid = None

    def crash(self) -> None:
        """The process dies: its connection closes, then silence."""
        self.crash_state()
        self.world.close(self.conn)
        self.conn = self.world.new_conn()

    def blip(self) -> None:
        """The connection drops; the client reconnects and redoes a lost Join/Sync."""
        self.world.close(self.conn)
        self.conn = self.world.new_conn()
        if self.join_cid is not None or self.sync_cid is not None:
            self.join_cid = self.sync_cid = None
            self.stable = False
        self.hb_cid = None

    def restart(self) -> None:
        """A new process: a dynamic member gets a new id, a static one replaces its old
        self under the same instance id (static restart)."""
        if not self.down:
            self.world.close(self.conn)
            self.conn = self.world.new_conn()
        self.down, self.member_id, self.generation_id = False, "", -1
        self.crash_state()
        self.down = False
        self.join()

    def leave(self) -> None:
        self._send(LeaveGroupRequest(group_id=GROUP, members=[
            MemberIdentity(member_id=self.member_id, group_instance_id=self.instance_id,
                           reason="sim leave")]))
        self.crash_state()
        self.member_id, self.generation_id = "", -1

    def commit(self, offsets: dict[tuple[str, int], int], generation_id: int,
               member_id: str) -> int:
        """Send an OffsetCommit; returns its correlation id (the answer may wait for
        its write's outcome: the checker sees it when it comes)."""
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, p), offset in offsets.items():
            by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset))
        return self._send(OffsetCommitRequest(
            group_id=GROUP, generation_id=generation_id, member_id=member_id,
            group_instance_id=self.instance_id,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()]))
