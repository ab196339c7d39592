"""Bare group members in bulk, speaking the wire protocol over a few shared connections.

Benchmarks need thousands of members without thousands of SDK consumers (each with its
own connections and heartbeat task), so members here are just ids multiplexed over a
handful of connections: every step is one request, sent for all members at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from groupwire.client.connection import Connection, ConnectionClosedError
from groupwire.protocol.consumer import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
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
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

PROTOCOL_NAME = "range"
BENCH_TOPIC = "bench"


class GroupSetupError(RuntimeError):
    """The broker refused a step that a benchmark relies on."""


@dataclass
class Member:
    group_id: str
    conn: Connection
    member_id: str = ""
    generation_id: int = -1
    leader: str = ""
    peers: list[str] = field(default_factory=list)
    session_timeout_ms: int = 60_000
    rebalance_timeout_ms: int = 60_000

    @property
    def is_leader(self) -> bool:
        return self.member_id == self.leader


_SUBSCRIPTION = encode_subscription(Subscription(topics=[BENCH_TOPIC]))


async def open_connections(port: int, count: int, client_id: str = "bench",
                           ) -> list[Connection]:
    return list(await asyncio.gather(*(
        Connection.open("127.0.0.1", port, client_id=client_id) for _ in range(count))))


async def close_connections(conns: Sequence[Connection]) -> None:
    await asyncio.gather(*(c.close() for c in conns))


async def create_topic(conn: Connection, partitions: int, name: str = BENCH_TOPIC) -> None:
    resp = await conn.send(CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions)]),
        response_type=CreateTopicsResponse)
    code = resp.topics[0].error_code
    if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        raise GroupSetupError(f"CreateTopics {name}: {ErrorCode.name_of(code)}")


def new_members(group_id: str, count: int, conns: Sequence[Connection], first: int = 0,
                session_timeout_ms: int = 60_000) -> list[Member]:
    """``count`` members of ``group_id`` spread over ``conns`` round robin."""
    return [Member(group_id, conns[(first + i) % len(conns)],
                   session_timeout_ms=session_timeout_ms,
                   rebalance_timeout_ms=session_timeout_ms) for i in range(count)]


def join_request(m: Member) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=m.group_id, member_id=m.member_id, session_timeout_ms=m.session_timeout_ms,
        rebalance_timeout_ms=m.rebalance_timeout_ms, protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name=PROTOCOL_NAME, metadata=_SUBSCRIPTION)])


async def get_member_ids(members: Sequence[Member]) -> None:
    """KIP-394's first round trip: the broker hands out ids (pending until they re-join)."""
    resps = await asyncio.gather(*(
        m.conn.send(join_request(m), response_type=JoinGroupResponse) for m in members))
    for m, r in zip(members, resps, strict=True):
        if r.error_code != ErrorCode.MEMBER_ID_REQUIRED:
            raise GroupSetupError(f"first JoinGroup: {ErrorCode.name_of(r.error_code)}")
        m.member_id = r.member_id


async def join(m: Member) -> JoinGroupResponse:
    r = await m.conn.send(join_request(m), response_type=JoinGroupResponse)
    if r.error_code == ErrorCode.NONE:
        m.generation_id = r.generation_id
        m.leader = r.leader
        m.peers = [x.member_id for x in r.members]
    return r


def round_robin_plan(member_ids: Sequence[str], partitions: int,
                     ) -> list[SyncGroupRequestAssignment]:
    ordered = sorted(member_ids)
    owned: dict[str, list[int]] = {mid: [] for mid in ordered}
    for p in range(partitions):
        owned[ordered[p % len(ordered)]].append(p)
    return [SyncGroupRequestAssignment(
        member_id=mid, assignment=encode_assignment(Assignment(
            assigned_partitions=[(BENCH_TOPIC, ps)] if ps else [])))
        for mid, ps in owned.items()]


async def sync(m: Member, partitions: int) -> SyncGroupResponse:
    plan = round_robin_plan(m.peers, partitions) if m.is_leader else []
    return await m.conn.send(SyncGroupRequest(
        group_id=m.group_id, generation_id=m.generation_id, member_id=m.member_id,
        protocol_type="consumer", protocol_name=PROTOCOL_NAME, assignments=plan),
        response_type=SyncGroupResponse)


async def heartbeat(m: Member, wait_ms: int) -> HeartbeatResponse:
    return await m.conn.send(HeartbeatRequest(
        group_id=m.group_id, generation_id=m.generation_id, member_id=m.member_id,
        wait_ms=wait_ms), response_type=HeartbeatResponse)


_REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION})


class Tracker:
    """Who holds a SyncGroup answer for which generation, and when the last one arrived.

    A group is settled when all its ``expected`` members hold an answer for the same
    generation: with an initial rebalance delay of 0 the first generation may hold only
    the members whose joins arrived first, and the rest force another round, as they
    would with real consumers.
    """

    def __init__(self, expected: dict[str, int]) -> None:
        self.expected = dict(expected)
        self._synced: dict[tuple[str, int], int] = {}
        self._settled: set[str] = set()
        self.last_synced_at = 0.0
        self.all_settled = asyncio.Event()
        if not self.expected:
            self.all_settled.set()

    def synced(self, m: Member) -> None:
        key = (m.group_id, m.generation_id)
        count = self._synced.get(key, 0) + 1
        self._synced[key] = count
        if count == self.expected.get(m.group_id, -1):
            self.last_synced_at = time.perf_counter()
            self._settled.add(m.group_id)
            if len(self._settled) == len(self.expected):
                self.all_settled.set()

    @property
    def settled_count(self) -> int:
        return len(self._settled)

    def expect(self, expected: dict[str, int]) -> None:
        """Wait for a new settlement (after a leave) with these group sizes."""
        self.expected = dict(expected)
        self._synced.clear()
        self._settled.clear()
        self.all_settled.clear()


async def consume_membership(m: Member, partitions: int, tracker: Tracker,
                             hb_wait_ms: int, stop: asyncio.Event) -> None:
    """What a consumer does about its membership: join, sync, long-poll heartbeats, and
    join again whenever the broker says a rebalance started. Ends when the member left,
    its connection closed, or (after the current heartbeat) ``stop`` is set.

    Never cancelled: a cancelled ``Connection.send`` leaves its correlation id unknown to
    the connection, and the late answer closes it.
    """
    try:
        while not stop.is_set():
            j = await join(m)
            if j.error_code in _REJOIN:
                continue
            if j.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                return  # left: nothing more to do
            if j.error_code != ErrorCode.NONE:
                raise GroupSetupError(f"JoinGroup {m.group_id}: "
                                      f"{ErrorCode.name_of(j.error_code)}")
            s = await sync(m, partitions)
            if s.error_code in _REJOIN:
                continue
            if s.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                return
            if s.error_code != ErrorCode.NONE:
                raise GroupSetupError(f"SyncGroup {m.group_id}: "
                                      f"{ErrorCode.name_of(s.error_code)}")
            tracker.synced(m)
            while (hb := await heartbeat(m, hb_wait_ms)).error_code == ErrorCode.NONE:
                if stop.is_set():
                    return
            if hb.error_code not in _REJOIN:
                return
    except ConnectionClosedError:
        return


async def form_groups(members: Sequence[Member], partitions: int, hb_wait_ms: int = 200,
                      ) -> None:
    """Bring every member's group to Stable and leave it idle (no heartbeats parked)."""
    sizes: dict[str, int] = {}
    for m in members:
        sizes[m.group_id] = sizes.get(m.group_id, 0) + 1
    await get_member_ids(members)
    tracker = Tracker(sizes)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(consume_membership(m, partitions, tracker, hb_wait_ms, stop))
             for m in members]
    try:
        await settled(tracker, tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    stop.set()
    await asyncio.gather(*tasks)


SETTLE_TIMEOUT_S = 300.0
"""The longest the benchmarks wait for groups to form: ten thousand members settle in well
under a minute here, so reaching it means the broker is refusing or stuck."""


async def settled(tracker: Tracker, tasks: Sequence[asyncio.Task[None]],
                  timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Wait for ``tracker`` to settle; raise at once when a member's task fails (a join
    the broker refused), and :class:`GroupSetupError` when ``timeout_s`` runs out."""
    waiter = asyncio.ensure_future(tracker.all_settled.wait())
    pending: set[asyncio.Future[None]] = {waiter, *tasks}
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        while not waiter.done():
            remaining = deadline - asyncio.get_running_loop().time()
            done, pending = await asyncio.wait(pending, timeout=max(remaining, 0),
                                               return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise GroupSetupError(
                    f"groups not formed within {timeout_s:.0f} s: "
                    f"{len(tracker.expected) - tracker.settled_count} of "
                    f"{len(tracker.expected)} still rebalancing")
            for t in done:
                if t is not waiter and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
    finally:
        waiter.cancel()


async def leave(m: Member) -> LeaveGroupResponse:
    r = await m.conn.send(LeaveGroupRequest(
        group_id=m.group_id, members=[MemberIdentity(member_id=m.member_id)]),
        response_type=LeaveGroupResponse)
    if r.error_code != ErrorCode.NONE:
        raise GroupSetupError(f"LeaveGroup {m.group_id}: {ErrorCode.name_of(r.error_code)}")
    return r


async def group_state(conn: Connection, group_id: str) -> str:
    r = await conn.send(DescribeGroupsRequest(groups=[group_id]),
                        response_type=DescribeGroupsResponse)
    return r.groups[0].group_state


SETUP_CONNECTIONS = 4
PARKED_PER_CONNECTION = 100  # the broker parks at most 128 requests per connection


async def populate(port: int, members: int, group_size: int, session_timeout_ms: int,
                   prefix: str = "g") -> tuple[list[Connection], list[Member]]:
    """``members`` idle members in groups of ``group_size``, all Stable.

    The connections are returned open and must stay so: a dynamic member whose
    connections all closed is removed after the broker's connection-loss grace.
    """
    conns = await open_connections(port, SETUP_CONNECTIONS)
    await create_topic(conns[0], partitions=group_size)
    everyone: list[Member] = []
    for g in range(max(1, members // group_size)):
        everyone += new_members(f"{prefix}-{g}", min(group_size, members), conns, first=g,
                                session_timeout_ms=session_timeout_ms)
    # a connection holds only so many parked joins: form the groups a batch at a time
    batch = max(1, SETUP_CONNECTIONS * PARKED_PER_CONNECTION // group_size) * group_size
    try:
        for i in range(0, len(everyone), batch):
            await form_groups(everyone[i:i + batch], partitions=group_size)
    except BaseException:
        await close_connections(conns)
        raise
    return conns, everyone
