"""JoinGroup (docs/design/kafka.md §4): admission, new members (KIP-394), existing members, static
replacement (KIP-345) and the returning static leader (KIP-814)."""

from __future__ import annotations

import sys
from typing import Final

from groupwire.broker.coordinator.engine import Engine, cut_reason, new_group_record
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.history import (
    MEMBER_JOINED,
    MEMBER_REJOINED,
    STATIC_MEMBER_REPLACED,
    Cause,
)
from groupwire.broker.coordinator.member import Member, Protocols
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.ownership import (
    NOT_YOURS,
    instance_message,
    may_act,
    member_message,
    owner_for,
)
from groupwire.broker.coordinator.parking import JOIN
from groupwire.broker.coordinator.timers import session_key
from groupwire.broker.coordinator.transitions import Admit, Join, Refuse, Rejoin, Replace
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import JoinGroupRequest, JoinGroupResponse

NONE: Final = ErrorCode.NONE


def handle_join(engine: Engine, ctx: RequestContext, req: JoinGroupRequest, now_ms: int) -> None:
    config = engine.config
    if not req.group_id:
        _fail(engine, ctx, ErrorCode.INVALID_GROUP_ID, req.member_id)
        return
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        _fail(engine, ctx, ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        return
    group = engine.groups.get(req.group_id)
    is_new_member = req.member_id == ""
    created_at: int | None = None
    if group is None:
        if not is_new_member:
            _fail(engine, ctx, ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
            return
        group = engine.create_group(req.group_id, now_ms)
        created_at = len(engine.out.records)
    cell = group.row.join_group
    if isinstance(cell, Refuse):
        # (group.max.size admits anyone here: the refusal is the answer)
        _fail(engine, ctx, cell.code, "" if is_new_member else req.member_id)
    elif (foreign := _foreign(group, ctx, req)) is not None:
        # before group.max.size, whose refusal removes the member named (§7.5)
        engine.out.reply(ctx.conn_id, ctx.correlation_id, JoinGroupResponse(
            error_code=NOT_YOURS, error_message=foreign, member_id=req.member_id))
    elif not _accept_joining_member(engine, cell, group, req.member_id):
        _remove_rejected(engine, group, req.member_id)
        _fail(engine, ctx, ErrorCode.GROUP_MAX_SIZE_REACHED, "")
    elif is_new_member:
        _join_new_member(engine, ctx, req, group, cell, now_ms)
    else:
        _join_existing_member(engine, ctx, req, group, cell, now_ms)
    if created_at is not None:
        # Kafka writes the new (empty, generation 0) group before anything else
        engine.out.records.insert(created_at, new_group_record(group, engine.wall_offset_ms))


def _fail(engine: Engine, ctx: RequestContext, code: ErrorCode, member_id: str,
          message: str | None = None) -> None:
    engine.out.reply(ctx.conn_id, ctx.correlation_id, JoinGroupResponse(
        error_code=code, member_id=member_id, error_message=message))


def _foreign(group: Group, ctx: RequestContext, req: JoinGroupRequest) -> str | None:
    """The refusal's message if the JoinGroup names another principal's member, by id or,
    joining with "", by instance id (which would replace it); None otherwise. Ids that
    name no member are left to the usual checks."""
    if req.member_id:
        member = group.members.get(req.member_id)
        if member is not None and not may_act(member, ctx):
            return member_message(req.member_id)
        return None
    instance_id = req.group_instance_id
    if instance_id is not None:
        mapped = group.static_members.get(instance_id)
        if mapped is not None and not may_act(group.members[mapped], ctx):
            return instance_message(instance_id)
    return None


def _protocols(engine: Engine, req: JoinGroupRequest) -> Protocols:
    return engine.shared.protocols(tuple((p.name, p.metadata) for p in req.protocols))


# --- group.max.size (docs/design/kafka.md §4.2) ---------------------------------------------------


def _accept_joining_member(engine: Engine, cell: Join, group: Group, member_id: str) -> bool:
    max_size = engine.config.group_max_size
    admit = cell.admit
    if admit is Admit.ANYONE:
        return True
    if admit is Admit.WHILE_FEW_REJOINED:
        # members that have not re-joined may never do so: count only those that did
        return ((member_id in group.members and engine.is_awaiting_join(group, member_id))
                or engine.parking.count(JOIN, group.group_id) < max_size)
    return member_id in group.members or len(group.members) < max_size


def _remove_rejected(engine: Engine, group: Group, member_id: str) -> None:
    """Kafka removes the rejected id (member or pending), without rebalancing (§17.9)."""
    member = group.members.get(member_id)
    if member is not None:
        engine.remove_member(group, member)
    elif member_id in group.pending_join:
        engine.out.cancel_timer(session_key(group.group_id, member_id))
        group.remove(member_id)


# --- new member (docs/design/kafka.md §4.3) -------------------------------------------------------


def _join_new_member(engine: Engine, ctx: RequestContext, req: JoinGroupRequest, group: Group,
                     cell: Join, now_ms: int) -> None:
    protocols = _protocols(engine, req)
    if not group.supports_protocols(req.protocol_type, [name for name, _ in protocols]):
        _fail(engine, ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        return
    if (conflict := group.encoding_conflict(req.protocol_type, protocols, "")) is not None:
        _fail(engine, ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "", conflict)
        return
    instance_id = req.group_instance_id
    prefix = instance_id if instance_id is not None else ctx.client_id
    new_id = f"{prefix}-{engine.new_uuid()}"
    if instance_id is not None:
        old_id = group.static_members.get(instance_id)
        if old_id is not None:
            _replace_static_member(engine, ctx, req, group, cell, old_id, new_id, protocols,
                                   now_ms)
        else:
            _add_member(engine, ctx, req, group, new_id, protocols, now_ms)
        return
    # KIP-394: hand out an id, remember it as pending, and let the client come back with it
    deadline = now_ms + req.session_timeout_ms
    group.pending_join[new_id] = deadline
    engine.out.set_timer(session_key(group.group_id, new_id), deadline)
    _fail(engine, ctx, ErrorCode.MEMBER_ID_REQUIRED, new_id)


def _add_member(engine: Engine, ctx: RequestContext, req: JoinGroupRequest, group: Group,
                member_id: str, protocols: Protocols, now_ms: int) -> None:
    member = Member(group.group_id, member_id, req.group_instance_id,
                    sys.intern(ctx.client_id), sys.intern(ctx.client_host),
                    req.session_timeout_ms, req.rebalance_timeout_ms,
                    sys.intern(req.protocol_type), protocols, principal=owner_for(ctx))
    member.is_new = True
    if group.initial_rebalance:
        group.new_member_added = True  # extends the initial rebalance delay
    group.add_member(member)
    engine.park_join(ctx.conn_id, ctx.correlation_id, group, member)
    engine.attach(ctx.conn_id, group.group_id, member)
    # New members cannot heartbeat yet: they expire only on the long new-member timeout.
    engine.arm_session(member, engine.config.new_member_join_timeout_ms, now_ms)
    reason = cut_reason(req.reason)
    engine.emit("member_joined", group, now_ms, member=member, reason=reason)
    engine.maybe_prepare_or_complete(group, now_ms, Cause(MEMBER_JOINED, reason, member_id))


# --- known member id (docs/design/kafka.md §4.4) --------------------------------------------------


def _join_existing_member(engine: Engine, ctx: RequestContext, req: JoinGroupRequest,
                          group: Group, cell: Join, now_ms: int) -> None:
    member_id = req.member_id
    protocols = _protocols(engine, req)
    if not group.supports_protocols(req.protocol_type, [name for name, _ in protocols]):
        _fail(engine, ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        return
    if (conflict := group.encoding_conflict(req.protocol_type, protocols,
                                            member_id)) is not None:
        _fail(engine, ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id, conflict)
        return
    if member_id in group.pending_join and req.group_instance_id is None:
        _add_member(engine, ctx, req, group, member_id, protocols, now_ms)
        return
    # (a pending id never belongs to a static member: with an instance id it is checked
    # like any other id and fails validation; Kafka raises an internal error instead)
    code = group.validate_member(member_id, req.group_instance_id)
    if code is not NONE:
        _fail(engine, ctx, code, member_id)
        return
    member = group.members[member_id]
    engine.attach(ctx.conn_id, group.group_id, member)
    reason = cut_reason(req.reason)
    rejoin = cell.rejoin
    if rejoin is Rejoin.UPDATE:
        _update_member(engine, ctx, req, group, member, protocols, now_ms, reason)
    elif rejoin is Rejoin.REPEAT_UNLESS_CHANGED:
        if member.matches(protocols):
            # it probably missed its JoinGroup response: repeat the current generation
            _reply_current_generation(engine, ctx, group, member_id,
                                      with_members=member_id == group.leader_id)
        else:
            _update_member(engine, ctx, req, group, member, protocols, now_ms, reason)
    elif rejoin is Rejoin.REPEAT_UNLESS_LEADER_OR_CHANGED:
        if member_id == group.leader_id or not member.matches(protocols):
            # a leader re-joining forces a rebalance (how it reacts to metadata changes)
            _update_member(engine, ctx, req, group, member, protocols, now_ms, reason)
        else:
            _reply_current_generation(engine, ctx, group, member_id, with_members=False)
    else:
        _fail(engine, ctx, ErrorCode.UNKNOWN_MEMBER_ID, member_id)


def _update_member(engine: Engine, ctx: RequestContext, req: JoinGroupRequest, group: Group,
                   member: Member, protocols: Protocols, now_ms: int,
                   reason: str | None) -> None:
    group.update_member(member, protocols, req.rebalance_timeout_ms, req.session_timeout_ms)
    engine.park_join(ctx.conn_id, ctx.correlation_id, group, member)
    engine.maybe_prepare_or_complete(group, now_ms,
                                     Cause(MEMBER_REJOINED, reason, member.member_id))


def _reply_current_generation(engine: Engine, ctx: RequestContext, group: Group,
                              member_id: str, *, with_members: bool,
                              skip_assignment: bool = False) -> None:
    engine.out.reply(ctx.conn_id, ctx.correlation_id, _generation_response(
        group, member_id, with_members=with_members, skip_assignment=skip_assignment))


def _generation_response(group: Group, member_id: str, *, with_members: bool,
                         skip_assignment: bool) -> JoinGroupResponse:
    return JoinGroupResponse(
        generation_id=group.generation_id, protocol_type=group.protocol_type,
        protocol_name=group.protocol_name, leader=group.leader_id or "",
        skip_assignment=skip_assignment, member_id=member_id,
        members=group.current_member_list() if with_members else [])


# --- static member re-joining with "" (docs/design/kafka.md §4.12) --------------------------------


def _replace_static_member(engine: Engine, ctx: RequestContext, req: JoinGroupRequest,
                           group: Group, cell: Join, old_id: str, new_id: str,
                           protocols: Protocols, now_ms: int) -> None:
    old = group.members[old_id]
    engine.fence_replaced(group, old)
    new = Member(group.group_id, new_id, old.group_instance_id, old.client_id, old.client_host,
                 old.session_timeout_ms, old.rebalance_timeout_ms, old.protocol_type,
                 old.protocols, old.assignment,
                 # the instance id stays its principal's; an unowned one becomes the caller's
                 principal=old.principal or owner_for(ctx))
    new.owned, new.releasing = old.owned, old.releasing  # ownership carries over (§7.2)
    group.replace_static(old, new)
    engine.arm_session(new, new.session_timeout_ms, now_ms)
    group.update_member(new, protocols, req.rebalance_timeout_ms, req.session_timeout_ms)
    engine.park_join(ctx.conn_id, ctx.correlation_id, group, new)
    engine.attach(ctx.conn_id, group.group_id, new)
    reason = cut_reason(req.reason)
    engine.emit("member_joined", group, now_ms, member=new, reason=reason,
                detail=f"replaces {old_id}", replaced_member_id=old_id)
    cause = Cause(STATIC_MEMBER_REPLACED, reason, new_id)
    replace = cell.replace
    if replace is Replace.KEEP_UNLESS_PROTOCOL_CHANGES:
        if group.protocol_name == group.select_protocol():
            # same protocol: no rebalance; the member keeps its assignment (KIP-345), and a
            # returning leader is told to skip computing one (KIP-814)
            engine.persist(group)
            is_leader = group.leader_id == new_id
            engine.answer_join(group, new_id, _generation_response(
                group, new_id, with_members=is_leader, skip_assignment=is_leader))
        else:
            engine.maybe_prepare_or_complete(group, now_ms, cause)
    elif replace is Replace.RESTART:
        # the leader may already have assigned to the old id: start over
        engine.prepare_rebalance(group, now_ms, cause)
    else:
        engine.maybe_complete_join_phase(group, now_ms)
