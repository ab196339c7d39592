"""DescribeGroups, ListGroups (docs/design/kafka.md §11) and DeleteGroups (§10.4)."""

from __future__ import annotations

from groupwire.broker.coordinator import hosting
from groupwire.broker.coordinator.engine import Engine
from groupwire.broker.coordinator.events import DELETE_GROUPS
from groupwire.broker.coordinator.group import Group
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.broker.coordinator.paced import STEP_WORK, sorted_steps
from groupwire.broker.coordinator.state import BY_NAME_LOWER, DEAD
from groupwire.broker.coordinator.transitions import Refuse
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from groupwire.protocol.steps import Steps, run_steps


def handle_describe(engine: Engine, ctx: RequestContext, req: DescribeGroupsRequest) -> None:
    engine.out.reply(ctx.conn_id, ctx.correlation_id, run_steps(describe_steps(engine, req)))


def describe_steps(engine: Engine, req: DescribeGroupsRequest,
                   ) -> Steps[DescribeGroupsResponse]:
    """DescribeGroups as steps: each group is described whole, as it is when reached."""
    groups: list[DescribedGroup] = []
    known = engine.groups
    refusal = engine.refusal
    work = 0
    for gid in req.groups:
        refused = refusal(gid) if refusal is not None else None
        if refused is not None:
            # Kafka answers per group: the others may be coordinated here
            groups.append(DescribedGroup(error_code=refused, group_id=gid,
                                         error_message=hosting.message(gid, refused)))
            work += 1
            continue
        group = known.get(gid)
        groups.append(describe_group(group, gid, engine.wall_offset_ms))
        work += 1 if group is None else 1 + len(group.members)
        if work >= STEP_WORK:
            work = 0
            yield
    return DescribeGroupsResponse(groups=groups)


def describe_group(group: Group | None, group_id: str,
                   wall_offset_ms: int = 0) -> DescribedGroup:
    """The group as DescribeGroups shows it: its times (monotonic, kept for durations)
    moved onto the wall clock by ``wall_offset_ms`` (``Engine.wall_offset_ms``)."""
    if group is None:
        return DescribedGroup(group_id=group_id, group_state=DEAD.value)
    stable = group.row.describe_groups.shows_protocol
    members = [
        DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id,
            client_id=m.client_id, client_host=m.client_host,
            # metadata only in Stable; the assignment in every state (Kafka)
            member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
            member_assignment=m.assignment,
            last_heartbeat_ms=(None if m.last_heartbeat_ms is None
                               else m.last_heartbeat_ms + wall_offset_ms),
            poll_age_ms=m.poll_age_ms)
        for m in group.members.values()
    ]
    return DescribedGroup(
        group_id=group.group_id, group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        generation_id=group.generation_id, leader_id=group.leader_id, members=members,
        rebalances=group.history.to_messages())


def handle_list(engine: Engine, ctx: RequestContext, req: ListGroupsRequest) -> None:
    engine.out.reply(ctx.conn_id, ctx.correlation_id, run_steps(list_steps(engine, req)))


def list_steps(engine: Engine, req: ListGroupsRequest) -> Steps[ListGroupsResponse]:
    """ListGroups as steps, by group id. A group deleted before it is reached is not
    listed; one created after the request arrived is not either."""
    wanted = {BY_NAME_LOWER.get(name.lower()) for name in req.states_filter}
    every = not req.states_filter
    groups = engine.groups
    refusal = engine.refusal
    ids = yield from sorted_steps(list(groups))
    listed: list[ListedGroup] = []
    work = 0
    for gid in ids:
        work += 1
        if work >= STEP_WORK:
            work = 0
            yield
        g = groups.get(gid)
        if g is not None and (every or g.state in wanted) and (
                refusal is None or refusal(gid) is None):
            listed.append(ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                                      group_state=g.state.value))
    return ListGroupsResponse(groups=listed)


def handle_delete(engine: Engine, ctx: RequestContext, req: DeleteGroupsRequest,
                  now_ms: int) -> None:
    results: list[DeletableGroupResult] = []
    refusal = engine.refusal
    for group_id in req.groups_names:
        refused = refusal(group_id) if refusal is not None else None
        group = engine.groups.get(group_id) if refused is None else None
        cell = group.row.delete_groups if group is not None else None
        message: str | None = None
        if refused is not None:
            code = refused
            message = hosting.message(group_id, refused)
        elif group is None:
            code = ErrorCode.GROUP_ID_NOT_FOUND
            message = f"group {group_id!r} does not exist"
        elif isinstance(cell, Refuse):
            code = cell.code
            message = (f"group {group_id!r} is {group.state.value} with "
                       f"{len(group.members)} member(s): only an Empty group can be deleted "
                       "(stop its consumers first)")
        else:
            engine.delete_group(group, now_ms, DELETE_GROUPS)
            code = ErrorCode.NONE
        results.append(DeletableGroupResult(group_id=group_id, error_code=code,
                                            error_message=message))
    engine.out.reply(ctx.conn_id, ctx.correlation_id, DeleteGroupsResponse(results=results))
