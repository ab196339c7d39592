"""The simulated shell: one clock, the coordinator's TimerQueue, connections, replies.

Time only moves when the schedule says so; every timer fires at its own deadline
(``step_through``) or, for a clock jump, all at the jumped-to instant (``jump``).
Writes are stored at once, or, with ``hold_writes``, wait in ``pending`` until the
schedule settles them (``settle``): stored or failed, in any order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from groupwire.broker.coordinator import (
    Coordinator,
    CoordinatorConfig,
    OffsetDeleteRecord,
    RequestContext,
    Result,
    TimerQueue,
)
from groupwire.broker.coordinator.state import GroupState
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    Response,
)

DESCRIBE_CONN = 0
Transition = tuple[GroupState, GroupState]


class World:
    """Feeds requests, closed connections and due timers to the coordinator."""

    def __init__(self, config: CoordinatorConfig, topics: dict[str, int]) -> None:
        self.now = 0
        self.topics = topics
        ids = itertools.count(1)
        self.coord = Coordinator(config, topics.get, new_uuid=lambda: f"u{next(ids)}")
        self.timers = TimerQueue()
        self.replies: dict[tuple[int, int], Response] = {}
        self.closed: set[int] = set()
        self.transitions: list[Transition] = []
        self.requests: dict[tuple[int, int], Request] = {}
        # hooks the checker installs: every reply as it is produced, every group deletion
        self.on_reply: Callable[[tuple[int, int], Request, Response], None] = (
            lambda key, req, resp: None)
        self.on_deleted: Callable[[str], None] = lambda group_id: None
        self.on_offset_deleted: Callable[[str, tuple[str, int]], None] = lambda g, tp: None
        self.hold_writes = False
        self.pending: list[int] = []
        """Tokens of the writes held, oldest first."""
        self.write_of: dict[tuple[int, int], int] = {}
        """(conn, cid) -> the token of the write its request made."""
        self._cids = itertools.count(1)
        self.last_cid = 0
        self._conns = itertools.count(1)
        self.apply(self.coord.start(self.now))

    def apply(self, result: Result, *, settled: bool = False) -> None:
        """``settled``: the result of a write's outcome, whose replies may be for
        connections closed meanwhile (the shell drops those)."""
        # every state move, as the result reports it (the legality is judged by the
        # simulator's own table, not the coordinator's)
        self.transitions.extend((source, target) for _, source, target in result.transitions)
        self.timers.apply(result.timers)
        for event in result.events:
            if event.type == "group_deleted":
                self.on_deleted(event.group_id)
        for record in result.records:
            if isinstance(record, OffsetDeleteRecord):
                self.on_offset_deleted(record.group_id, (record.topic, record.partition))
        for reply in result.replies:
            key = (reply.conn_id, reply.correlation_id)
            if key in self.replies:
                raise AssertionError(f"request {key} answered twice")
            if reply.conn_id in self.closed:
                if settled:  # dropped by the shell; a commit's answer still tells
                    request = self.requests.pop(key, None)  # what it stored
                    if isinstance(reply.response, OffsetCommitResponse) and request:
                        self.on_reply(key, request, reply.response)
                    continue
                raise AssertionError(f"reply on closed connection {key}")
            self.replies[key] = reply.response
            request = self.requests.pop(key, None)
            if request is not None:
                self.on_reply(key, request, reply.response)
        if result.write is not None:
            if self.hold_writes:
                self.pending.append(result.write)
            else:
                self.apply(self.coord.stored(result.write, self.now), settled=True)

    def settle(self, token: int, code: ErrorCode | None) -> None:
        """The held write ``token`` is stored (``code`` None) or failed with ``code``."""
        self.pending.remove(token)
        self.apply(self.coord.stored(token, self.now) if code is None
                   else self.coord.failed(token, code, self.now), settled=True)
        self.fire_due()

    def new_conn(self) -> int:
        return next(self._conns)

    def send(self, request: Request, conn: int, client_id: str) -> int:
        cid = self.last_cid = next(self._cids)
        self.requests[(conn, cid)] = request
        result = self.coord.handle(RequestContext(conn, cid, client_id, "/sim"), request,
                                   self.now)
        if result.write is not None:
            self.write_of[(conn, cid)] = result.write
        self.apply(result)
        self.fire_due()
        return cid

    def reply(self, conn: int, cid: int | None) -> Response | None:
        return None if cid is None else self.replies.get((conn, cid))

    def close(self, conn: int) -> None:
        self.closed.add(conn)
        self.apply(self.coord.connection_closed(conn, self.now))
        self.fire_due()

    def fire_due(self) -> None:
        while due := self.timers.pop_due(self.now):
            for key in due:
                self.apply(self.coord.expire(key, self.now))

    def step_through(self, ms: int) -> None:
        """Advance ``ms``, each timer firing at its own deadline."""
        end = self.now + ms
        while (deadline := self.timers.next_deadline()) is not None and deadline <= end:
            self.now = max(self.now, deadline)
            self.fire_due()
        self.now = end
        self.fire_due()

    def jump(self, ms: int) -> None:
        """A clock jump: everything due in between fires late, at the new time."""
        self.now += ms
        self.fire_due()

    def describe(self, group_id: str) -> DescribedGroup:
        cid = self.last_cid = next(self._cids)
        result = self.coord.handle(RequestContext(DESCRIBE_CONN, cid, "sim", "/sim"),
                                   DescribeGroupsRequest(groups=[group_id]), self.now)
        self.apply(result)
        resp = self.replies.pop((DESCRIBE_CONN, cid))
        assert isinstance(resp, DescribeGroupsResponse)
        return resp.groups[0]

    def offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """What OffsetFetch shows for the group now."""
        cid = self.last_cid = next(self._cids)
        self.apply(self.coord.handle(RequestContext(DESCRIBE_CONN, cid, "sim", "/sim"),
                                     OffsetFetchRequest(group_id=group_id), self.now))
        resp = self.replies.pop((DESCRIBE_CONN, cid))
        assert isinstance(resp, OffsetFetchResponse)
        return {(t.name, p.partition_index): p.committed_offset
                for t in resp.topics for p in t.partitions}
