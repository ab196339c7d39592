"""Heartbeat (docs/design/kafka.md §6) with the poll-interval check (docs/protocol.md §7.1) and
the long poll (§7.3).

What a heartbeat means is decided by one pure function, :func:`classify`, which both
paths use: :func:`handle_heartbeat` (the full path, any outcome, outputs in a Result) and
:func:`renew` (the fast path: only a plain renewal whose answer is NONE and which needs no
timer operation, reported as a :class:`Renewal`; anything else is left to the full path,
with nothing changed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from groupwire.broker.coordinator.engine import Engine, heartbeat_response
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import POLL_INTERVAL_EXPIRED, Cause
from groupwire.broker.coordinator.member import Member
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.ownership import NOT_YOURS, may_act, member_message
from groupwire.broker.coordinator.parking import HEARTBEAT, Address
from groupwire.broker.coordinator.timers import hbwait_key
from groupwire.broker.coordinator.transitions import Refuse
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import HeartbeatRequest, HeartbeatResponse

NONE: Final = ErrorCode.NONE
_NO_WAITERS: Final[frozenset[str]] = frozenset()
POLL_EXPIRED_RESPONSE: Final = HeartbeatResponse(
    error_code=ErrorCode.UNKNOWN_MEMBER_ID, error_message="poll interval expired")


@dataclass(frozen=True, slots=True)
class HeartbeatMeaning:
    """What a heartbeat means. ``member``: it came from a valid member, which is attached
    to the connection, has its previous long poll ended and its poll age recorded.
    ``renews``: the member's session is renewed. ``code``: the answer."""

    name: str
    code: ErrorCode
    member: bool = False
    renews: bool = False


INVALID_GROUP: Final = HeartbeatMeaning("invalid-group", ErrorCode.INVALID_GROUP_ID)
NO_GROUP: Final = HeartbeatMeaning("no-group", ErrorCode.UNKNOWN_MEMBER_ID)
POLL_EXPIRED: Final = HeartbeatMeaning("poll-expired", ErrorCode.UNKNOWN_MEMBER_ID, member=True)
ILLEGAL_GENERATION: Final = HeartbeatMeaning("illegal-generation", ErrorCode.ILLEGAL_GENERATION,
                                    member=True)
RENEWED: Final = HeartbeatMeaning("renewed", NONE, member=True, renews=True)
HOLD: Final = HeartbeatMeaning("hold", NONE, member=True, renews=True)
"""Renewed, and the answer is held as a long poll."""
_REFUSED: Final[Mapping[ErrorCode, HeartbeatMeaning]] = MappingProxyType({
    code: HeartbeatMeaning("refused", code) for code in ErrorCode})
_RENEWED_WITH: Final[Mapping[ErrorCode, HeartbeatMeaning]] = MappingProxyType({
    code: HeartbeatMeaning("renewed", code, member=True, renews=True) for code in ErrorCode
    if code is not NONE})


_UNKNOWN_MEMBER: Final = _REFUSED[ErrorCode.UNKNOWN_MEMBER_ID]


def classify(group: Group | None, member: Member | None, group_id: str, generation_id: int,
             member_id: str, instance_id: str | None, poll_age_ms: int,
             wait_ms: int) -> HeartbeatMeaning:
    """The one decision, in Kafka's order: group, its state's cell in the transition
    table, member, poll interval, generation, then what the state answers a member.

    ``member`` is the one ``member_id`` names in ``group`` (None: none), looked up by the
    caller, which needs it too: this runs once per heartbeat."""
    if group is None:
        return NO_GROUP if group_id else INVALID_GROUP
    cell = group.row.heartbeat
    if type(cell) is Refuse:  # not isinstance: this runs once per heartbeat
        return _REFUSED[cell.code]
    if instance_id is not None:
        mapped = group.static_members.get(instance_id)
        if mapped != member_id:
            return _REFUSED[ErrorCode.UNKNOWN_MEMBER_ID if mapped is None
                            else ErrorCode.FENCED_INSTANCE_ID]
    if member is None:
        return _UNKNOWN_MEMBER
    if poll_age_ms >= 0 and poll_age_ms > member.rebalance_timeout_ms:
        return POLL_EXPIRED
    if generation_id != group.generation_id:
        return ILLEGAL_GENERATION
    code = cell.answer
    if code is not NONE:
        return _RENEWED_WITH[code]
    return HOLD if wait_ms > 0 and member.session_timeout_ms // 2 > 0 else RENEWED


def handle_heartbeat(engine: Engine, ctx: RequestContext, req: HeartbeatRequest,
                     now_ms: int) -> None:
    out = engine.out
    group = engine.groups.get(req.group_id) if req.group_id else None
    member = group.members.get(req.member_id) if group is not None else None
    verdict = classify(group, member, req.group_id, req.generation_id, req.member_id,
                       req.group_instance_id, req.poll_age_ms, req.wait_ms)
    if not verdict.member:
        out.reply(ctx.conn_id, ctx.correlation_id, heartbeat_response(verdict.code))
        return
    assert group is not None and member is not None
    if not may_act(member, ctx):
        # before anything the heartbeat would do to the member: a poll age past its
        # interval would remove it (§7.5)
        out.reply(ctx.conn_id, ctx.correlation_id, HeartbeatResponse(
            error_code=NOT_YOURS, error_message=member_message(member.member_id)))
        return
    if not member.has_conn(ctx.conn_id):
        engine.attach(ctx.conn_id, group.group_id, member)
    # the member's previous long poll ends now
    engine.answer_heartbeat(group.group_id, member.member_id, NONE)
    poll_age = req.poll_age_ms
    member.poll_age_ms = poll_age if poll_age >= 0 else None
    if verdict is POLL_EXPIRED:
        # the application stopped polling: out, static or not, as session expiry would
        detail = f"poll age {poll_age} ms > max poll interval {member.rebalance_timeout_ms} ms"
        engine.emit_member("poll_interval_expired", group, member, now_ms,
                           POLL_INTERVAL_EXPIRED, detail)
        engine.remove_and_update(group, member, now_ms,
                                 Cause(POLL_INTERVAL_EXPIRED, detail, member.member_id))
        out.reply(ctx.conn_id, ctx.correlation_id, POLL_EXPIRED_RESPONSE)
        return
    if verdict.renews:
        engine.arm_session(member, member.session_timeout_ms, now_ms)
        member.last_heartbeat_ms = now_ms
    if verdict is not HOLD:
        out.reply(ctx.conn_id, ctx.correlation_id, heartbeat_response(verdict.code))
        return
    key = hbwait_key(ctx.conn_id, ctx.correlation_id)
    engine.parking.park(HEARTBEAT, group.group_id, member.member_id,
                        Address(ctx.conn_id, ctx.correlation_id, key))
    out.set_timer(key, now_ms + min(req.wait_ms, member.session_timeout_ms // 2))


Renewal = tuple[str, str, int, int | None, int]
"""What :func:`renew` did to the member it renewed, answered NONE:
``(group_id, member_id, session_deadline_ms, poll_age_ms, attached_conn)``. The session
now ends at ``session_deadline_ms`` (the armed timer fires no later and re-arms itself, so
no timer operation), the last heartbeat is the ``now_ms`` given, the poll age is
``poll_age_ms``, and the member was attached to ``attached_conn`` (-1: it already was).
A plain tuple: the fast path makes one per heartbeat, and a named tuple's constructor
cost as much as the rest of the renewal."""


def renew(engine: Engine, conn_id: int, hb: HeartbeatFields, now_ms: int) -> Renewal | None:
    """The fast path: :func:`classify` says RENEWED, no long poll of the member is parked,
    its armed session timer fires no later than the new deadline, and the connection is
    attached to the member or the member is unowned (docs/protocol.md §7.5). Then the changes
    :func:`handle_heartbeat` would make are made and returned; otherwise None, with
    nothing changed (the caller runs the full path)."""
    _, group_id, generation_id, member_id, instance_id, poll_age, wait_ms = hb
    group = engine.groups.get(group_id)
    if group is None:
        return None  # the full path answers it
    if engine.refusal is not None and engine.refusal(group_id) is not None:
        return None  # cluster mode, not served here: the full path refuses it
    member = group.members.get(member_id)
    if classify(group, member, group_id, generation_id, member_id, instance_id, poll_age,
                wait_ms) is not RENEWED:
        return None
    assert member is not None
    armed = member.session_deadline
    deadline = now_ms + member.session_timeout_ms
    if armed is None or deadline < armed:
        return None  # needs a timer operation
    if member_id in engine.parked_heartbeats.get(group_id, _NO_WAITERS):
        return None  # its previous long poll must be answered
    attached = -1
    if conn_id != member.last_conn and not member.has_conn(conn_id):
        if member.principal:
            # an owned member on a connection not yet attached: the full path checks who
            # it is (every attach is checked, so attached connections are its principal's)
            return None
        engine.attach(conn_id, group_id, member)
        attached = conn_id
    age = member.poll_age_ms = poll_age if poll_age >= 0 else None
    member.session_deadline = deadline
    member.last_heartbeat_ms = now_ms
    return group_id, member_id, deadline, age, attached
