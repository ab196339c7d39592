"""Heartbeat (reference §6) with the poll-interval check (docs/protocol.md §7.1) and the long
poll (§7.3).

The hot path is :func:`renew`: a heartbeat that is answered NONE at once and changes
nothing but the member's liveness (the common case, thousands a second) is settled with a
few lookups and no outputs at all; anything else takes :func:`handle_heartbeat`."""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.engine import Engine, heartbeat_response
from groupwire.broker.coordinator.history import POLL_INTERVAL_EXPIRED, Cause
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.parking import HEARTBEAT, Address
from groupwire.broker.coordinator.state import (
    COMPLETING_REBALANCE,
    DEAD,
    PREPARING_REBALANCE,
    STABLE,
)
from groupwire.broker.coordinator.timers import hbwait_key
from groupwire.protocol.codec import HeartbeatFields
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import HeartbeatRequest, HeartbeatResponse

NONE: Final = ErrorCode.NONE
POLL_EXPIRED_RESPONSE: Final = HeartbeatResponse(
    error_code=ErrorCode.UNKNOWN_MEMBER_ID, error_message="poll interval expired")


def handle_heartbeat(engine: Engine, ctx: RequestContext, req: HeartbeatRequest,
                     now_ms: int) -> None:
    out = engine.out
    group = engine.groups.get(req.group_id) if req.group_id else None
    if group is None:
        code = ErrorCode.UNKNOWN_MEMBER_ID if req.group_id else ErrorCode.INVALID_GROUP_ID
        out.reply(ctx.conn_id, ctx.correlation_id, heartbeat_response(code))
        return
    if group.state is DEAD:
        out.reply(ctx.conn_id, ctx.correlation_id,
                  heartbeat_response(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        return
    code = group.validate_member(req.member_id, req.group_instance_id)
    if code is not NONE:
        out.reply(ctx.conn_id, ctx.correlation_id, heartbeat_response(code))
        return
    member = group.members[req.member_id]
    if not member.has_conn(ctx.conn_id):
        engine.attach(ctx.conn_id, group.group_id, member)
    # the member's previous long poll ends now
    engine.answer_heartbeat(group.group_id, member.member_id, NONE)
    poll_age = req.poll_age_ms
    member.poll_age_ms = poll_age if poll_age >= 0 else None
    if poll_age >= 0 and poll_age > member.rebalance_timeout_ms:
        # the application stopped polling: out, static or not, as session expiry would
        detail = f"poll age {poll_age} ms > max poll interval {member.rebalance_timeout_ms} ms"
        engine.emit_member("poll_interval_expired", group, member, now_ms,
                           POLL_INTERVAL_EXPIRED, detail)
        engine.remove_and_update(group, member, now_ms,
                                 Cause(POLL_INTERVAL_EXPIRED, detail, member.member_id))
        out.reply(ctx.conn_id, ctx.correlation_id, POLL_EXPIRED_RESPONSE)
        return
    if req.generation_id != group.generation_id:
        out.reply(ctx.conn_id, ctx.correlation_id,
                  heartbeat_response(ErrorCode.ILLEGAL_GENERATION))
        return
    # (an Empty group has no members, so validation already answered UNKNOWN_MEMBER_ID)
    engine.arm_session(member, member.session_timeout_ms, now_ms)
    member.last_heartbeat_ms = now_ms
    if group.state is PREPARING_REBALANCE:
        out.reply(ctx.conn_id, ctx.correlation_id,
                  heartbeat_response(ErrorCode.REBALANCE_IN_PROGRESS))
        return
    # CompletingRebalance or Stable: NONE, possibly held as a long poll
    hold = min(req.wait_ms, member.session_timeout_ms // 2)
    if hold <= 0:
        out.reply(ctx.conn_id, ctx.correlation_id, heartbeat_response(NONE))
        return
    key = hbwait_key(ctx.conn_id, ctx.correlation_id)
    engine.parking.park(HEARTBEAT, group.group_id, member.member_id,
                        Address(ctx.conn_id, ctx.correlation_id, key))
    out.set_timer(key, now_ms + hold)


def renew(engine: Engine, conn_id: int, hb: HeartbeatFields, now_ms: int) -> bool:
    """Settle a heartbeat whose answer is NONE, now, with no outputs; False: not that case.

    Exactly what :func:`handle_heartbeat` would do for it (attach, poll age, liveness),
    minus building a reply: valid member and generation, group Stable or
    CompletingRebalance, poll age within bounds, no long poll to hold or end, and a
    session timer already armed no later than the new deadline. When False is returned
    nothing has changed, and the caller runs :func:`handle_heartbeat`.
    """
    _, group_id, generation_id, member_id, instance_id, poll_age, wait_ms = hb
    group = engine.groups.get(group_id)
    if group is None or not group_id:
        return False
    state = group.state
    if state is not STABLE and state is not COMPLETING_REBALANCE:
        return False
    member = group.members.get(member_id)
    if member is None or generation_id != group.generation_id:
        return False
    if instance_id is not None and group.static_members.get(instance_id) != member_id:
        return False
    if poll_age >= 0 and poll_age > member.rebalance_timeout_ms:
        return False
    timeout = member.session_timeout_ms
    if wait_ms > 0 and timeout // 2 > 0:
        return False  # a long poll to hold
    armed = member.session_deadline
    deadline = now_ms + timeout
    if armed is None or deadline < armed:
        return False  # needs a timer op
    if engine.parking.is_parked(HEARTBEAT, group_id, member_id):
        return False  # its previous long poll must be answered
    if conn_id != member.last_conn:
        engine.attach(conn_id, group_id, member)
    member.poll_age_ms = poll_age if poll_age >= 0 else None
    member.expires_ms = deadline
    member.last_heartbeat_ms = now_ms
    return True
