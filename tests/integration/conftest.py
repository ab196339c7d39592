"""A real broker on an ephemeral loopback port, with short timeouts passed as settings."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.server import Broker
from groupwire.client.admin import Admin
from groupwire.client.connection import Connection

from .brokerproc import BrokerProcess

FAST = dict(
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


def fast_settings(data_dir: Path, **overrides: Any) -> BrokerSettings:
    return BrokerSettings(data_dir=data_dir, **{**FAST, **overrides})


@pytest.fixture
async def start_broker(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Broker]]]:
    """Factory: ``await start_broker(**settings)``; every broker is closed at teardown."""
    started: list[Broker] = []

    async def start(**overrides: Any) -> Broker:
        data_dir = overrides.pop("data_dir", tmp_path / f"data{len(started)}")
        broker = Broker(fast_settings(data_dir, **overrides))
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        await broker.close()


@pytest.fixture
async def broker(start_broker: Callable[..., Awaitable[Broker]]) -> Broker:
    return await start_broker()


@pytest.fixture
def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


@pytest.fixture
async def admin(bootstrap: str) -> AsyncIterator[Admin]:
    """An SDK Admin on ``broker`` (files that talk raw requests define their own)."""
    async with Admin(bootstrap, request_timeout_ms=5000) as a:
        yield a


@pytest.fixture
async def connect(broker: Broker) -> AsyncIterator[Callable[..., Awaitable[Connection]]]:
    """Factory for client connections to ``broker``; all closed at teardown."""
    opened: list[Connection] = []

    async def open_one(client_id: str = "test", target: Broker | None = None) -> Connection:
        b = target or broker
        conn = await Connection.open("127.0.0.1", b.port, client_id=client_id)
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        await conn.close()


def replace(settings: BrokerSettings, **changes: Any) -> BrokerSettings:
    return dataclasses.replace(settings, **changes)


@pytest.fixture
def procs() -> Iterator[list[BrokerProcess]]:
    """Broker processes a test starts (append them); all killed at teardown."""
    running: list[BrokerProcess] = []
    yield running
    for p in running:
        p.kill()
