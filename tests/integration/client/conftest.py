"""Fixtures for SDK tests over a real in-process broker (``broker`` comes from the parent)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from groupwire.broker.server import Broker
from groupwire.client.admin import Admin


@pytest.fixture
def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


@pytest.fixture
async def admin(bootstrap: str) -> AsyncIterator[Admin]:
    async with Admin(bootstrap, request_timeout_ms=5000) as a:
        yield a


@pytest.fixture
def create_topic(admin: Admin) -> Callable[..., Awaitable[str]]:
    """``await create_topic("name", partitions)`` -> the name."""

    async def create(name: str, partitions: int = 1) -> str:
        await admin.create_topics([name], num_partitions=partitions)
        return name

    return create
