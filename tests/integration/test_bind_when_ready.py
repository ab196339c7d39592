"""The broker accepts no connection before it can answer (issue 24, item 8): its ports
are bound early (a cluster registers them) but refuse connections until start is done,
so ``groupwire health`` passing means the broker is ready."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.cli.health import check_health
from tests.integration.conftest import fast_settings

LISTENERS = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"


async def test_a_port_refuses_connections_until_the_broker_is_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The start is held after the first listener is bound: the second one waits here.
    loop = asyncio.get_running_loop()
    create_server = loop.create_server
    second_listener, go_on = asyncio.Event(), asyncio.Event()
    created = 0

    async def held_create_server(*args: Any, **kwargs: Any) -> asyncio.Server:
        nonlocal created
        created += 1
        if created == 2:
            second_listener.set()
            await go_on.wait()
        return await create_server(*args, **kwargs)
    monkeypatch.setattr(loop, "create_server", held_create_server)

    broker = Broker(fast_settings(tmp_path / "data", listeners=LISTENERS))
    starting = asyncio.ensure_future(broker.start())
    try:
        await asyncio.wait_for(second_listener.wait(), 10)
        port = broker.listener_ports["PLAINTEXT"]
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        assert not (await check_health("127.0.0.1", port, 2))["ok"]

        go_on.set()
        await asyncio.wait_for(starting, 10)
        health = await check_health("127.0.0.1", port, 2)
        assert health["ok"], health
    finally:
        go_on.set()
        await asyncio.gather(starting, return_exceptions=True)
        await broker.close()
