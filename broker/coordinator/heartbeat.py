"""Heartbeat (reference §6) with the poll-interval check (PROTOCOL.md §7.1) and the long
poll (§7.3). The hot path: a few dict lookups, one timer op, one shared response."""

from __future__ import annotations

from typing import Final

from broker.coordinator.engine import Engine, heartbeat_response
from broker.coordinator.history import POLL_INTERVAL_EXPIRED, Cause
from broker.coordinator.outputs import RequestContext
from broker.coordinator.parking import HEARTBEAT, Address
from broker.coordinator.state import DEAD, PREPARING_REBALANCE
from broker.coordinator.timers import hbwait_key
from protocol.errors import ErrorCode
from protocol.messages import HeartbeatRequest, HeartbeatResponse

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
    if ctx.conn_id not in member.conns:
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
