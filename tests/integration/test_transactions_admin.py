"""What operators see of transactions: Admin's list and describe (the CLI's
``groupwire transactions``), the open-longer-than filter Kafka's tools use to find hanging
transactions, and the metrics of a coordinator that committed, aborted and fenced."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from groupwire import Admin, Producer, TopicPartition
from groupwire.broker.server import Broker
from groupwire.errors import ProducerFencedError

BOUND_S = 10.0


def _producer(bootstrap: str, tid: str) -> Producer:
    return Producer(bootstrap, transactional_id=tid, linger_ms=1, request_timeout_ms=5000,
                    retry_backoff_ms=20)


def _cli(bootstrap: str, *args: str) -> object:
    done = subprocess.run([sys.executable, "-m", "groupwire", "transactions", *args,
                           "--bootstrap", bootstrap, "--json"],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


async def test_an_open_transaction_is_listed_described_and_found_hanging(
        broker: Broker, bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["t"], num_partitions=2)
    async with _producer(bootstrap, "tx-open") as open_one, \
            _producer(bootstrap, "tx-done") as done_one:
        async with done_one.transaction():
            await done_one.send("t", b"x", partition=0)
        await open_one.begin_transaction()
        await (await open_one.send("t", b"y", partition=1))
        listed = {t.transactional_id: t.state for t in await admin.list_transactions()}
        assert listed == {"tx-open": "Ongoing", "tx-done": "CompleteCommit"}
        hanging = await admin.list_transactions(open_longer_than_ms=0)
        assert [t.transactional_id for t in hanging] == ["tx-open"]
        assert await admin.list_transactions(open_longer_than_ms=3_600_000) == []
        (described,) = await admin.describe_transactions("tx-open")
        assert described.state == "Ongoing"
        assert described.partitions == [TopicPartition("t", 1)]
        assert described.producer_id == (await admin.list_transactions(
            producer_ids=[described.producer_id]))[0].producer_id
        cli = await asyncio.to_thread(_cli, bootstrap, "list", "--open-longer-than-ms", "0")
        assert cli == [{"transactional_id": "tx-open", "producer_id": described.producer_id,
                        "state": "Ongoing"}]
        await open_one.abort_transaction()


async def test_the_coordinators_counters_follow_commits_aborts_and_fencing(
        broker: Broker, bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["m"], num_partitions=1)
    txns = broker.transactions
    assert txns is not None
    before = txns.transaction_counters()
    async with _producer(bootstrap, "tx-m") as zombie:
        async with zombie.transaction():
            await zombie.send("m", b"1", partition=0)
        await zombie.begin_transaction()
        await (await zombie.send("m", b"2", partition=0))
        async with _producer(bootstrap, "tx-m"):  # fences the zombie, aborts its txn
            pass
        with pytest.raises(ProducerFencedError):
            await zombie.commit_transaction()
    after = txns.transaction_counters()
    assert after["commits"] - before["commits"] == 1
    assert after["aborts_fenced"] - before["aborts_fenced"] == 1
    assert after["producers_fenced"] - before["producers_fenced"] >= 1
    assert after["open"] == 0
    assert txns.unstable_records() == {"m": 0}


async def test_marker_work_that_crashes_is_tried_again(broker: Broker, bootstrap: str,
                                                       admin: Admin, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A bug in writing a transaction's markers must not leave it prepared for good: the
    coordinator is told they failed and sends them again."""
    await admin.create_topics(["crash"], num_partitions=1)
    txns = broker.transactions
    assert txns is not None
    real = txns._write_marker_work
    crashes: list[int] = []

    async def crash_once(work, **kwargs):  # type: ignore[no-untyped-def]
        if not crashes:
            crashes.append(work.producer_id)
            raise RuntimeError("a bug")
        return await real(work, **kwargs)

    monkeypatch.setattr(txns, "_write_marker_work", crash_once)
    async with asyncio.timeout(BOUND_S), _producer(bootstrap, "tx-crash") as producer:
        async with producer.transaction():
            await producer.send("crash", b"1", partition=0)
        async with producer.transaction():  # waits out the retried markers
            await producer.send("crash", b"2", partition=0)
    assert crashes
    (described,) = await admin.describe_transactions("tx-crash")
    assert described.state == "CompleteCommit"
    assert txns.unstable_records() == {"crash": 0}
