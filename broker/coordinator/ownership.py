"""Member ownership (docs/protocol.md §7.5): a member id, and a static member's instance id,
belong to the principal whose JoinGroup created the member.

A member created by an unauthenticated connection (``User:ANONYMOUS``) is *unowned*, as is
one restored from a record written before ownership existed: anyone who can connect
unauthenticated could claim that name anyway, and old data dirs keep working. Unowned
members may be used by any principal; owned ones only by their principal and super users.
"""

from __future__ import annotations

import sys
from typing import Final

from groupwire.broker.coordinator.member import Member
from groupwire.broker.coordinator.outputs import RequestContext
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.security import ANONYMOUS

UNOWNED: Final = ""
NOT_YOURS: Final = ErrorCode.GROUP_AUTHORIZATION_FAILED


def owner_for(ctx: RequestContext) -> str:
    """Whom a member created by this request belongs to."""
    principal = ctx.principal
    return UNOWNED if principal == ANONYMOUS else sys.intern(principal)


def may_use(member: Member, principal: str, superuser: bool) -> bool:
    owner = member.principal
    return not owner or owner == principal or superuser


def may_act(member: Member, ctx: RequestContext) -> bool:
    """Whether the request may act as (or on) ``member``."""
    return may_use(member, ctx.principal, ctx.superuser)


def member_message(member_id: str) -> str:
    """The refusal's message; it never names the owner."""
    return f"member {member_id} belongs to another principal"


def instance_message(instance_id: str) -> str:
    return f"group instance id {instance_id} belongs to another principal"
