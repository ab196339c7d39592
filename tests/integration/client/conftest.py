"""Fixtures for SDK tests over a real in-process broker (``broker`` comes from the parent)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from groupwire.client.admin import Admin


@pytest.fixture
def create_topic(admin: Admin) -> Callable[..., Awaitable[str]]:
    """``await create_topic("name", partitions)`` -> the name."""

    async def create(name: str, partitions: int = 1) -> str:
        await admin.create_topics([name], num_partitions=partitions)
        return name

    return create
