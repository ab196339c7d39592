"""Which groups this coordinator serves, in cluster mode: those of the ``__consumer_offsets``
partitions this broker leads and has loaded. The shell says so with two predicates; the
core refuses the others itself, as Kafka's ``validateGroupStatus`` does, so it is safe
even if the shell forgot to check."""

from __future__ import annotations

from collections.abc import Callable

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    Request,
    Response,
    response_type_for,
)

Refusal = Callable[[str], ErrorCode | None]
"""group id -> why it is not served here (None: it is)."""


def refusal(hosts: Callable[[str], bool] | None,
            loading: Callable[[str], bool] | None) -> Refusal | None:
    """The check the core runs; None when both predicates are absent (single-broker mode:
    nothing is checked, so that path stays as it was). A group whose partition is loading
    is COORDINATOR_LOAD_IN_PROGRESS (the client retries here); one not hosted and not
    loading is NOT_COORDINATOR (the client looks for its coordinator again)."""
    if hosts is None and loading is None:
        return None

    def refuse(group_id: str) -> ErrorCode | None:
        if loading is not None and loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if hosts is not None and not hosts(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None
    return refuse


def message(group_id: str, code: ErrorCode) -> str:
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return f"group {group_id!r} is being loaded on this coordinator; retry"
    return f"this broker is not the coordinator of group {group_id!r}"


def refused_response(request: Request, group_id: str, code: ErrorCode) -> Response:
    """A single-group request refused as a whole, with the top-level error the shell's
    own NOT_COORDINATOR check gives (a JoinGroup keeps the member id it was sent)."""
    text = message(group_id, code)
    if isinstance(request, JoinGroupRequest):
        return JoinGroupResponse(error_code=code, error_message=text,
                                 member_id=request.member_id)
    return response_type_for(request)(error_code=code, error_message=text)
