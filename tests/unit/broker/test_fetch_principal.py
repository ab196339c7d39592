"""A fenced Fetch names a member: FetchManager passes the connection's principal (and
whether it is a super user) to the coordinator, which refuses another principal's member
with a top-level GROUP_AUTHORIZATION_FAILED (docs/protocol.md §7.5)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest

from groupwire.broker.fetch import FetchManager
from groupwire.broker.storage import TopicStore
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchGroup,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from tests.unit.coordinator.test_member_principal import ADMIN, ALICE, MALLORY, alices_group


class _Store:
    """Enough of a TopicStore: partitions exist, their logs do not (nothing is read)."""

    def partition_count(self, topic: str) -> int | None:
        return 6

    def log(self, topic: str, partition: int) -> Any:
        raise KeyError(topic)


def _manager(superuser: Callable[[str], bool] | bool = False) -> tuple[FetchManager, str,
                                                                        int]:
    sim, alice = alices_group()
    manager = FetchManager(cast(TopicStore, _Store()), sim.coord, max_response_bytes=1 << 20,
                           ownership_fencing=True, slice_s=1.0, superuser=superuser)
    return manager, alice.member_id, alice.generation_id


async def _fetch(manager: FetchManager, member_id: str, generation: int,
                 principal: str | None) -> FetchResponse:
    answers: list[FetchResponse] = []

    def reply(response: FetchResponse, *, long: bool = False) -> None:
        answers.append(response)

    def defer(work: Coroutine[Any, Any, None]) -> None:
        raise AssertionError("one partition fits a slice")

    request = FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0)])],
        group=FetchGroup(group_id="g", member_id=member_id, generation_id=generation))
    if principal is None:
        manager.handle(1, request, reply, defer)
    else:
        manager.handle(1, request, reply, defer, principal=principal)
    [answer] = answers
    return answer


@pytest.mark.parametrize("principal", [MALLORY, None])
async def test_a_fetch_naming_another_principals_member_is_refused(
        principal: str | None) -> None:
    manager, member_id, generation = _manager()
    resp = await _fetch(manager, member_id, generation, principal)
    assert resp.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert resp.error_message is not None and "another principal" in resp.error_message
    assert resp.responses == []


async def test_the_owner_fetches() -> None:
    manager, member_id, generation = _manager()
    resp = await _fetch(manager, member_id, generation, ALICE)
    assert resp.error_code == ErrorCode.NONE
    assert [p.partition_index for p in resp.responses[0].partitions] == [0]


@pytest.mark.parametrize("superuser", [True, lambda principal: principal == ADMIN])
async def test_a_super_user_fetches(superuser: Callable[[str], bool] | bool) -> None:
    manager, member_id, generation = _manager(superuser)
    resp = await _fetch(manager, member_id, generation, ADMIN)
    assert resp.error_code == ErrorCode.NONE
