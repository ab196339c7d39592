"""Errors the consumer's background work meets reach the application, as aiokafka's do:
a fetch failure no retry mends is raised from the next poll (not retried forever at
debug), and a failed auto-commit on close is logged at warning (a bug raised)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.client.consumer import Consumer
from groupwire.client.errors import CommitFailedError
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import BodyError
from groupwire.protocol.messages import FetchRequest
from tests.integration.client.test_consumer import FAST, bootstrap
from tests.integration.rawgroup import create_topic, produce

TOPIC = "errs"
TP = TopicPartition(TOPIC, 0)


async def _topic_with_records(broker: Broker) -> None:
    conn = await Connection.open("127.0.0.1", broker.port, client_id="test-admin")
    try:
        await create_topic(conn, TOPIC, 1)
        await produce(conn, TOPIC, 0, [b"a", b"b"])
    finally:
        await conn.close()


async def test_a_fetch_answer_that_cannot_be_decoded_is_raised_from_the_poll(
        broker: Broker) -> None:
    await _topic_with_records(broker)
    async with Consumer(bootstrap(broker), **FAST) as c:
        c.assign([TP])
        c.seek(TP, 0)
        cluster = c._link.cluster
        real = cluster.send_to
        broken = BodyError("FetchResponse: bad body")

        async def send_to(node: int, request: Any, **kw: Any) -> Any:
            if isinstance(request, FetchRequest):
                raise broken
            return await real(node, request, **kw)

        cluster.send_to = send_to  # type: ignore[method-assign]
        with pytest.raises(BodyError) as info:
            await asyncio.wait_for(c.getmany(timeout_ms=5000), 10)
        assert info.value is broken
        cluster.send_to = real  # type: ignore[method-assign]
        got: list[bytes] = []
        while len(got) < 2:  # the consumer goes on once the cause is gone
            for records in (await asyncio.wait_for(c.getmany(timeout_ms=5000), 10)).values():
                got += [r.value for r in records if r.value is not None]
        assert got == [b"a", b"b"]


async def test_a_failed_auto_commit_on_close_is_logged_at_warning(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    await _topic_with_records(broker)
    c = Consumer(bootstrap(broker), group_id="close-commit", **FAST)
    await c.start()
    c.assign([TP])
    c.seek(TP, 1)

    async def refuse(*_a: Any, **_kw: Any) -> None:
        raise CommitFailedError("the group moved on")

    c._commits.commit = refuse  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, "groupwire.consumer"):
        await asyncio.wait_for(c.close(), 10)
    assert any(r.levelno == logging.WARNING and "auto-commit on close failed" in
               r.getMessage() and "the group moved on" in r.getMessage()
               for r in caplog.records)


async def test_an_unexpected_error_in_the_last_auto_commit_is_raised_by_close(
        broker: Broker) -> None:
    await _topic_with_records(broker)
    c = Consumer(bootstrap(broker), group_id="close-bug", **FAST)
    await c.start()
    c.assign([TP])
    c.seek(TP, 1)

    async def bug(*_a: Any, **_kw: Any) -> None:
        raise KeyError("a bug")

    c._commits.commit = bug  # type: ignore[method-assign]
    with pytest.raises(KeyError):
        await asyncio.wait_for(c.close(), 10)
    with pytest.raises(Exception, match="closed"):  # closed all the same
        await c.getmany()
