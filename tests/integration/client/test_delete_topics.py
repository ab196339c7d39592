"""Deleting topics through the SDK (``Admin.delete_topics``) and the command line
(``groupwire topics delete``), and what consumers of a deleted topic see."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from groupwire.broker.server import Broker
from groupwire.cli.main import main
from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.errors import (
    InvalidRequestError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)
from groupwire.client.producer import Producer
from groupwire.client.types import OffsetAndMetadata, TopicPartition

from .test_consumer import FAST, poll_until


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # rich folds cells in narrow captures


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout, and the command's own stderr lines (not the broker's logs)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    own = "".join(line + "\n" for line in err.splitlines() if line.startswith("groupwire "))
    return code, out, own


async def test_admin_delete_topics_reports_per_topic(admin: Admin, bootstrap: str) -> None:
    await admin.create_topics(["a", "b"], num_partitions=2)
    async with Producer(bootstrap) as p:
        await p.send("a", b"v", partition=1)
    await admin.reset_group_offsets("g", to="latest", topics=["a", "b"])
    results = await admin.delete_topics(["a", "nope", "__consumer_offsets"], timeout_ms=5000)
    assert list(results) == ["a", "nope", "__consumer_offsets"]
    assert results["a"] is None
    assert isinstance(results["nope"], UnknownTopicOrPartitionError)
    assert str(results["nope"]) == "UNKNOWN_TOPIC_OR_PARTITION: unknown topic 'nope'"
    assert isinstance(results["__consumer_offsets"], InvalidTopicError)
    assert "internal" in str(results["__consumer_offsets"])
    assert await admin.list_topics() == {"b": 2}
    assert await admin.list_consumer_group_offsets("g") == {
        TopicPartition("b", 0): OffsetAndMetadata(0, ""),
        TopicPartition("b", 1): OffsetAndMetadata(0, "")}
    twice = await admin.delete_topics(["b", "b"])
    assert isinstance(twice["b"], InvalidRequestError)
    assert await admin.delete_topics("b") == {"b": None}
    assert await admin.list_topics() == {}
    assert await admin.list_consumer_group_offsets("g") == {}
    await admin.create_topics("a", 1)  # the name is free again, the topic new
    assert await admin.list_offsets({TopicPartition("a", 0): -1}) == {
        TopicPartition("a", 0): 0}


async def test_cli_topics_delete(capsys: pytest.CaptureFixture[str], bootstrap: str,
                                 admin: Admin) -> None:
    b = ("--bootstrap", bootstrap)
    await admin.create_topics(["orders", "audit", "spare"], num_partitions=1)
    code, out, err = await run(capsys, "topics", "delete", "orders", *b)
    assert (code, err) == (0, "") and "orders" in out and "deleted" in out
    code, out, err = await run(capsys, "topics", "delete", "orders", *b)
    assert code == 1 and err == (
        "groupwire topics delete: error: UNKNOWN_TOPIC_OR_PARTITION: unknown topic 'orders'\n")
    code, out, err = await run(capsys, "topics", "delete", "orders", "audit", "--if-exists",
                               *b)
    assert (code, err) == (0, "") and "does not exist" in out and "deleted" in out
    code, out, err = await run(capsys, "topics", "delete", "__group_events", *b)
    assert code == 1 and err.count("\n") == 1 and "INVALID_TOPIC_EXCEPTION" in err
    assert "__group_events is internal" in err
    code, out, err = await run(capsys, "topics", "delete", "spare", "ghost",
                               "__consumer_offsets", "--if-exists", "--json", *b)
    assert code == 1 and err == ""
    assert json.loads(out.strip().splitlines()[-1]) == {
        "deleted": ["spare"], "missing": ["ghost"], "errors": {
            "__consumer_offsets": "INVALID_TOPIC_EXCEPTION: __consumer_offsets is internal: "
                                  "the broker's own topic, it cannot be deleted"}}
    assert await admin.list_topics() == {}
    code, out, _ = await run(capsys, "topics", "delete", "x", "--if-exists", "--json", *b)
    assert code == 0 and json.loads(out.strip().splitlines()[-1]) == {
        "deleted": [], "missing": ["x"], "errors": {}}


async def _consume_until(c: Consumer, done: Any) -> None:
    await poll_until(c, done, limit=20.0)


async def test_a_consumer_sees_its_topic_disappear_and_come_back(broker: Broker,
                                                                 bootstrap: str,
                                                                 admin: Admin) -> None:
    await admin.create_topics(["stay", "go"], num_partitions=2)
    async with Consumer(bootstrap, group_id="watchers", metadata_max_age_ms=50,
                        **FAST) as c:
        c.subscribe(["stay", "go"])
        await _consume_until(c, lambda: len(c.assignment()) == 4)
        generation = c.generation_id
        assert await admin.delete_topics("go") == {"go": None}
        await _consume_until(c, lambda: {tp.topic for tp in c.assignment()} == {"stay"})
        assert c.generation_id > generation
        await admin.create_topics("go", 1)
        await _consume_until(c, lambda: len(c.assignment()) == 3)
        assert c.health()["state"] != "closed"


async def test_a_pattern_consumer_drops_a_deleted_topic(broker: Broker, bootstrap: str,
                                                        admin: Admin) -> None:
    await admin.create_topics(["logs-a", "logs-b"], num_partitions=1)
    async with Consumer(bootstrap, group_id="pattern-watch", metadata_max_age_ms=50,
                        **FAST) as c:
        c.subscribe(pattern=r"logs-.*")
        await _consume_until(c, lambda: len(c.assignment()) == 2)
        await admin.delete_topics(["logs-b"])
        await _consume_until(c, lambda: c.assignment() == {TopicPartition("logs-a", 0)})
