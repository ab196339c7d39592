"""LeaveGroup (docs/design/kafka.md §7): a batch of identities, each answered on its own; any
successful removal (pending ids included) moves the group on, as in Kafka."""

from __future__ import annotations

from groupwire.broker.coordinator.engine import Engine, cut_reason
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import MEMBER_LEFT, Cause
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.ownership import (
    NOT_YOURS,
    instance_message,
    may_act,
    member_message,
)
from groupwire.broker.coordinator.state import COMPLETING_REBALANCE, PREPARING_REBALANCE
from groupwire.broker.coordinator.timers import session_key
from groupwire.broker.coordinator.transitions import Refuse
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
)


def handle_leave(engine: Engine, ctx: RequestContext, req: LeaveGroupRequest, now_ms: int) -> None:
    out = engine.out
    if not req.group_id:
        out.reply(ctx.conn_id, ctx.correlation_id,
                  LeaveGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID))
        return
    group = engine.groups.get(req.group_id)
    if group is None:
        out.reply(ctx.conn_id, ctx.correlation_id, LeaveGroupResponse(members=[
            _answer(identity, ErrorCode.UNKNOWN_MEMBER_ID) for identity in req.members]))
        return
    cell = group.row.leave_group
    if isinstance(cell, Refuse):
        out.reply(ctx.conn_id, ctx.correlation_id, LeaveGroupResponse(error_code=cell.code))
        return
    answers: list[LeaveGroupMemberResponse] = []
    cause: Cause | None = None
    for identity in req.members:
        code, left = _leave_one(engine, ctx, group, identity, now_ms)
        answers.append(_answer(identity, code))
        if code is ErrorCode.NONE and cause is None:
            cause = Cause(MEMBER_LEFT, cut_reason(identity.reason), left)
    if cause is not None:
        # a removal starts a rebalance or may end the join phase, as the state's cell says
        if PREPARING_REBALANCE in cell.moves_to:
            engine.maybe_prepare_or_complete(group, now_ms, cause)
        elif COMPLETING_REBALANCE in cell.moves_to:
            engine.maybe_complete_join_phase(group, now_ms)
    out.reply(ctx.conn_id, ctx.correlation_id, LeaveGroupResponse(members=answers))


def _answer(identity: MemberIdentity, code: ErrorCode) -> LeaveGroupMemberResponse:
    message = None
    if code is NOT_YOURS:
        message = (member_message(identity.member_id) if identity.member_id
                   else instance_message(identity.group_instance_id or ""))
    return LeaveGroupMemberResponse(member_id=identity.member_id,
                                    group_instance_id=identity.group_instance_id,
                                    error_code=code, error_message=message)


def _leave_one(engine: Engine, ctx: RequestContext, group: Group, identity: MemberIdentity,
               now_ms: int) -> tuple[ErrorCode, str | None]:
    """Returns the outcome and the id actually removed."""
    member_id = identity.member_id
    instance_id = identity.group_instance_id
    if member_id == "":
        # administrative removal of a static member by instance id
        mapped = group.static_members.get(instance_id) if instance_id is not None else None
        if mapped is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        member_id = mapped
    elif member_id in group.pending_join:
        engine.out.cancel_timer(session_key(group.group_id, member_id))
        group.remove(member_id)
        return ErrorCode.NONE, member_id
    else:
        code = group.validate_member(member_id, instance_id)
        if code is not ErrorCode.NONE:
            return code, None
    member = group.members[member_id]
    if not may_act(member, ctx):
        return NOT_YOURS, None  # by member id or instance id alike (§7.5)
    engine.emit_member("member_left", group, member, now_ms, cut_reason(identity.reason))
    engine.remove_member(group, member)
    return ErrorCode.NONE, member_id
