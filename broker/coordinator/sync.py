"""SyncGroup (docs/design/kafka.md §5): followers wait, the leader's assignment is applied to
all."""

from __future__ import annotations

from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.fencing import install_ownership
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.ownership import NOT_YOURS, may_act, member_message
from groupwire.broker.coordinator.parking import SYNC, Address
from groupwire.broker.coordinator.state import STABLE
from groupwire.broker.coordinator.transitions import Refuse, Sync, SyncReply
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import SyncGroupRequest, SyncGroupResponse


def handle_sync(engine: Engine, ctx: RequestContext, req: SyncGroupRequest, now_ms: int) -> None:
    out = engine.out
    code = _validate(engine, ctx, req)
    if code is not ErrorCode.NONE:
        message = member_message(req.member_id) if code is NOT_YOURS else None
        out.reply(ctx.conn_id, ctx.correlation_id,
                  SyncGroupResponse(error_code=code, error_message=message))
        return
    group = engine.groups[req.group_id]
    member = group.members[req.member_id]
    cell = group.row.sync_group
    assert isinstance(cell, Sync)  # _validate answered a Refuse
    reply = cell.reply
    if reply is SyncReply.AWAIT_LEADER:
        engine.parking.park(SYNC, group.group_id, member.member_id,
                            Address(ctx.conn_id, ctx.correlation_id))
        _remove_pending_sync(engine, group, member.member_id)
        if member.member_id == group.leader_id:
            _apply_leader_assignment(engine, group, req, now_ms)
    elif reply is SyncReply.ASSIGNMENT:
        _remove_pending_sync(engine, group, member.member_id)
        out.reply(ctx.conn_id, ctx.correlation_id, SyncGroupResponse(
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            assignment=member.assignment))
    else:  # the state's answer (PreparingRebalance: re-join first)
        out.reply(ctx.conn_id, ctx.correlation_id, SyncGroupResponse(error_code=cell.answer))


def _validate(engine: Engine, ctx: RequestContext, req: SyncGroupRequest) -> ErrorCode:
    if not req.group_id:
        return ErrorCode.INVALID_GROUP_ID
    group = engine.groups.get(req.group_id)
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    cell = group.row.sync_group
    if isinstance(cell, Refuse):
        return cell.code
    code = group.validate_member(req.member_id, req.group_instance_id)
    if code is not ErrorCode.NONE:
        return code
    member = group.members[req.member_id]
    if not may_act(member, ctx):
        return NOT_YOURS  # before it is attached, or a leader's assignment applied (§7.5)
    engine.attach(ctx.conn_id, group.group_id, member)
    if req.generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
            req.protocol_name, group.protocol_name):
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    return ErrorCode.NONE


def _inconsistent(requested: str | None, current: str | None) -> bool:
    """Only fields the client gave are checked (Kafka's ``isProtocolInconsistent``)."""
    return requested is not None and current is not None and requested != current


def _remove_pending_sync(engine: Engine, group: Group, member_id: str) -> None:
    group.pending_sync.discard(member_id)
    if not group.pending_sync:
        engine.cancel_sync_timer(group)


def _apply_leader_assignment(engine: Engine, group: Group, req: SyncGroupRequest,
                             now_ms: int) -> None:
    """Members the leader left out get an empty assignment; unknown ids are ignored."""
    assignments = {a.member_id: a.assignment for a in req.assignments}
    for member in group.members.values():
        member.assignment = engine.shared.assignment(assignments.get(member.member_id, b""))[0]
    install_ownership(group, engine.shared)
    engine.propagate_assignment(group, ErrorCode.NONE, now_ms)
    engine.transition(group, STABLE, now_ms)
    engine.persist(group)
