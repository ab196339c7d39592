"""A simulated world for the coordinator: a clock, the timer queue, connections, members.

``Sim`` plays the asyncio shell: it feeds requests and due timers to the coordinator and
collects what comes back, checking that no request is ever answered twice. ``Member``
is a scripted client speaking the group APIs one explicit step at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from groupwire.broker.coordinator import (
    Coordinator,
    CoordinatorConfig,
    GroupEvent,
    GroupRecord,
    RequestContext,
    Result,
    TimerKey,
    TimerQueue,
)
from groupwire.protocol.consumer import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

TOPICS = {"t": 6, "u": 4, "v": 2}

TEST_CONFIG = CoordinatorConfig(
    initial_rebalance_delay_ms=100,
    min_session_timeout_ms=10,
    max_session_timeout_ms=600_000,
)


def sub(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=list(topics)))


def assignment(*tps: tuple[str, int]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in tps:
        by_topic.setdefault(topic, []).append(p)
    return encode_assignment(Assignment(assigned_partitions=list(by_topic.items())))


class Sim:
    """The shell, simulated: ``now`` only moves when a test says so."""

    def __init__(self, config: CoordinatorConfig = TEST_CONFIG, *, now: int = 0,
                 topics: dict[str, int] | None = None, start: bool = True) -> None:
        self.config = config
        self.now = now
        self.topics = dict(TOPICS if topics is None else topics)
        counter = itertools.count(1)
        self.coord = Coordinator(config, self.topics.get, new_uuid=lambda: f"u{next(counter)}")
        self.timers = TimerQueue()
        self.replies: dict[tuple[int, int], Response] = {}
        self.records: list[GroupRecord] = []
        self.events: list[GroupEvent] = []
        self.results: list[Result] = []
        self.closed: set[int] = set()
        self.hold_writes = False
        """False: every write is stored at once (as a shell whose disk never fails);
        True: writes wait in ``held`` for :meth:`stored` or :meth:`failed`."""
        self.held: list[int] = []
        self._cids = itertools.count(1)
        self._conns = itertools.count(1)
        if start:
            self.apply(self.coord.start(now))

    # --- the shell's job ------------------------------------------------------------

    def apply(self, result: Result, *, settled: bool = False) -> Result:
        """Execute ``result``; ``settled``: it carries the replies a write held (the
        shell drops those whose connection closed meanwhile)."""
        self.results.append(result)
        self.timers.apply(result.timers)
        self.events.extend(result.events)
        self.records.extend(result.records)
        for reply in result.replies:
            key = (reply.conn_id, reply.correlation_id)
            assert key not in self.replies, f"request {key} answered twice"
            if settled and reply.conn_id in self.closed:
                continue
            assert reply.conn_id not in self.closed, f"reply on closed connection {key}"
            self.replies[key] = reply.response
        if result.write is not None:
            if self.hold_writes:
                self.held.append(result.write)
            else:
                self.stored(result.write)
        return result

    def stored(self, token: int) -> Result:
        """The write ``token`` is durable."""
        if token in self.held:
            self.held.remove(token)
        return self.apply(self.coord.stored(token, self.now), settled=True)

    def failed(self, token: int, code: ErrorCode = ErrorCode.KAFKA_STORAGE_ERROR) -> Result:
        """The write ``token`` did not happen."""
        if token in self.held:
            self.held.remove(token)
        return self.apply(self.coord.failed(token, code, self.now), settled=True)

    def new_conn(self) -> int:
        return next(self._conns)

    def send(self, request: Request, conn: int = 0, client_id: str = "c",
             host: str = "/10.0.0.1") -> int:
        """Hand a request to the coordinator; returns its correlation id."""
        cid = next(self._cids)
        ctx = RequestContext(conn, cid, client_id, host)
        self.apply(self.coord.handle(ctx, request, self.now))
        self.fire_due()
        return cid

    def call(self, request: Request, conn: int = 0, client_id: str = "c") -> Response:
        """Send and expect an immediate answer."""
        cid = self.send(request, conn, client_id)
        response = self.replies.get((conn, cid))
        assert response is not None, f"{type(request).__name__} was parked"
        return response

    def reply(self, conn: int, cid: int) -> Response | None:
        return self.replies.get((conn, cid))

    def fire_due(self) -> None:
        while True:
            due = self.timers.pop_due(self.now)
            if not due:
                return
            for key in due:
                self.apply(self.coord.expire(key, self.now))

    def advance(self, ms: int) -> None:
        """Jump the clock by ``ms`` and fire what is due then (Kafka's MockTime.sleep)."""
        self.now += ms
        self.fire_due()

    def advance_to(self, t: int) -> None:
        assert t >= self.now
        self.advance(t - self.now)

    def step_through(self, ms: int) -> None:
        """Advance timer by timer, each firing at its own deadline."""
        end = self.now + ms
        while True:
            deadline = self.timers.next_deadline()
            if deadline is None or deadline > end:
                break
            self.now = max(self.now, deadline)
            self.fire_due()
        self.now = end
        self.fire_due()

    def close(self, conn: int) -> Result:
        self.closed.add(conn)
        result = self.apply(self.coord.connection_closed(conn, self.now))
        self.fire_due()
        return result

    def timer_deadline(self, key: TimerKey) -> int | None:
        return self.timers.deadline_of(key)

    # --- views ------------------------------------------------------------------------

    def describe(self, group_id: str) -> DescribedGroup:
        resp = self.call(DescribeGroupsRequest(groups=[group_id]), conn=999)
        assert isinstance(resp, DescribeGroupsResponse)
        return resp.groups[0]

    def state(self, group_id: str) -> str:
        return self.describe(group_id).group_state

    def events_of(self, type_: str) -> list[GroupEvent]:
        return [e for e in self.events if e.type == type_]


@dataclass
class Member:
    """A scripted group member; every call is one request."""

    sim: Sim
    group_id: str = "g"
    client_id: str = "c"
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 30_000
    protocols: list[tuple[str, bytes]] = field(default_factory=lambda: [("range", sub("t"))])
    protocol_type: str = "consumer"
    conn: int = -1
    member_id: str = ""
    generation_id: int = -1
    join_cid: int | None = None
    sync_cid: int | None = None

    def __post_init__(self) -> None:
        if self.conn < 0:
            self.conn = self.sim.new_conn()

    # --- JoinGroup ------------------------------------------------------------------

    def join_request(self, reason: str | None = None) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=self.group_id, member_id=self.member_id,
            group_instance_id=self.instance_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, protocol_type=self.protocol_type,
            protocols=[JoinGroupRequestProtocol(name=n, metadata=m) for n, m in self.protocols],
            reason=reason)

    def send_join(self, reason: str | None = None) -> JoinGroupResponse | None:
        """One JoinGroup; returns the answer if not parked."""
        self.join_cid = self.sim.send(self.join_request(reason), self.conn, self.client_id)
        return self.join_response()

    def join(self, reason: str | None = None) -> JoinGroupResponse | None:
        """JoinGroup with the KIP-394 round trip done; the second one may park."""
        resp = self.send_join(reason)
        if resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            resp = self.send_join(reason)
        return resp

    def join_response(self) -> JoinGroupResponse | None:
        assert self.join_cid is not None
        resp = self.sim.reply(self.conn, self.join_cid)
        if resp is None:
            return None
        assert isinstance(resp, JoinGroupResponse)
        if resp.error_code in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
            self.member_id = resp.member_id
        if resp.error_code == ErrorCode.NONE:
            self.generation_id = resp.generation_id
        return resp

    # --- SyncGroup ------------------------------------------------------------------

    def send_sync(self, assignments: dict[str, bytes] | None = None,
                  generation_id: int | None = None) -> SyncGroupResponse | None:
        if self.join_cid is not None:
            self.join_response()  # learn the generation if the join was answered since
        req = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation_id if generation_id is None else generation_id,
            member_id=self.member_id, group_instance_id=self.instance_id,
            assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()])
        self.sync_cid = self.sim.send(req, self.conn, self.client_id)
        return self.sync_response()

    def sync_response(self) -> SyncGroupResponse | None:
        assert self.sync_cid is not None
        resp = self.sim.reply(self.conn, self.sync_cid)
        assert resp is None or isinstance(resp, SyncGroupResponse)
        return resp

    # --- the rest ---------------------------------------------------------------------

    def heartbeat(self, *, wait_ms: int = 0, poll_age_ms: int = -1,
                  generation_id: int | None = None, conn: int | None = None) -> int:
        req = HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.generation_id if generation_id is None else generation_id,
            member_id=self.member_id, group_instance_id=self.instance_id,
            poll_age_ms=poll_age_ms, wait_ms=wait_ms)
        return self.sim.send(req, self.conn if conn is None else conn, self.client_id)

    def hb(self, **kwargs: int) -> ErrorCode:
        """A heartbeat answered at once; returns its error code."""
        conn = kwargs.get("conn", self.conn)
        cid = self.heartbeat(**kwargs)
        resp = self.sim.reply(conn, cid)
        assert isinstance(resp, HeartbeatResponse), "heartbeat was parked"
        return ErrorCode(resp.error_code)

    def leave(self, reason: str | None = None) -> LeaveGroupResponse:
        resp = self.sim.call(LeaveGroupRequest(group_id=self.group_id, members=[
            MemberIdentity(member_id=self.member_id, group_instance_id=self.instance_id,
                           reason=reason)]), self.conn)
        assert isinstance(resp, LeaveGroupResponse)
        return resp

    def commit(self, offsets: dict[tuple[str, int], int], *,
               generation_id: int | None = None, member_id: str | None = None,
               metadata: str | None = None) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, p), offset in offsets.items():
            by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_metadata=metadata))
        resp = self.sim.call(OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=self.generation_id if generation_id is None else generation_id,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()]), self.conn)
        assert isinstance(resp, OffsetCommitResponse)
        return {(t.name, p.partition_index): ErrorCode(p.error_code)
                for t in resp.topics for p in t.partitions}


def join_all(sim: Sim, members: Iterable[Member]) -> list[JoinGroupResponse]:
    """Every member sends JoinGroup; the clock moves until all are answered."""
    members = list(members)
    for m in members:
        if m.join_cid is None or m.join_response() is not None:
            m.join()
    for _ in range(1000):
        if all(m.join_response() is not None for m in members):
            break
        sim.step_through(sim.config.initial_rebalance_delay_ms or 1)
    responses = [m.join_response() for m in members]
    assert all(r is not None for r in responses)
    return [r for r in responses if r is not None]


def form_group(sim: Sim, members: Iterable[Member],
               plan: dict[str, bytes] | None = None) -> Member:
    """Join everyone into one generation, let the leader assign ``plan`` (default: topic
    ``t`` round robin), sync all. Returns the leader."""
    members = list(members)
    for m in members:
        m.join()
    responses = join_all(sim, members)
    assert all(r.error_code == ErrorCode.NONE for r in responses), responses
    assert len({m.generation_id for m in members}) == 1
    leader = next(m for m in members if m.member_id == responses[0].leader)
    if plan is None:
        ids = sorted(m.member_id for m in members)
        parts: dict[str, list[tuple[str, int]]] = {i: [] for i in ids}
        for p in range(sim.topics["t"]):
            parts[ids[p % len(ids)]].append(("t", p))
        plan = {i: assignment(*tps) for i, tps in parts.items()}
    for m in members:
        if m is not leader:
            m.send_sync()
    leader.send_sync(plan)
    for m in members:
        resp = m.sync_response()
        assert resp is not None and resp.error_code == ErrorCode.NONE, resp
    return leader
