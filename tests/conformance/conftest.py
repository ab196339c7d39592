"""A real broker on an ephemeral loopback port, reached only through raw sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.server import Broker

from .wire import WireConn

FAST: dict[str, Any] = dict(
    host="127.0.0.1",
    port=0,
    metrics_port=-1,
    fsync="never",
    group_initial_rebalance_delay_ms=0,
    group_min_session_timeout_ms=10,
    connection_loss_grace_ms=200,
    log_level="warning",
    log_format="json",
)

StartBroker = Callable[..., Awaitable[Broker]]
Connect = Callable[..., Awaitable[WireConn]]


@pytest.fixture
async def start_broker(tmp_path: Path) -> AsyncIterator[StartBroker]:
    """Factory: ``await start_broker(**settings)``; every broker is closed at teardown."""
    started: list[Broker] = []

    async def start(**overrides: Any) -> Broker:
        data_dir = overrides.pop("data_dir", tmp_path / f"data{len(started)}")
        broker = Broker(BrokerSettings(data_dir=data_dir, **{**FAST, **overrides}))
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        await broker.close()


@pytest.fixture
async def broker(start_broker: StartBroker) -> Broker:
    return await start_broker()


@pytest.fixture
async def connect(broker: Broker) -> AsyncIterator[Connect]:
    """Factory for raw connections (to ``broker`` unless ``target`` is given)."""
    opened: list[WireConn] = []

    async def open_one(client_id: str = "conformance", target: Broker | None = None
                       ) -> WireConn:
        conn = await WireConn.open((target or broker).port, client_id)
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        await conn.close()
        assert not conn.problems, conn.problems


@pytest.fixture
async def conn(connect: Connect) -> WireConn:
    return await connect()
