"""The benchmarks' group forming ends when the broker refuses: a refusal is raised, never
waited on (a benchmark once waited 13 minutes for a group the broker would not admit)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from bench.members import GroupSetupError, populate
from groupwire.broker.server import Broker


async def test_a_refused_join_stops_group_forming(
        start_broker: Callable[..., Awaitable[Broker]]) -> None:
    broker = await start_broker(group_max_size=2)
    with pytest.raises(GroupSetupError, match="GROUP_MAX_SIZE_REACHED"):
        await asyncio.wait_for(populate(broker.port, 3, 3, session_timeout_ms=10_000), 10)
