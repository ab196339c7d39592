"""The SDK's transactions against a real broker (docs/protocol.md §5.5, §5.6): a committed
transaction's records are seen by read_committed consumers once it commits, an aborted
one's never (read_uncommitted sees both, markers neither); a second producer with the
same transactional id fences the first; a consume-transform-produce loop whose offsets
the group gets only when its transaction commits; and offsets sent with a member id the
group does not know refused (KIP-447).

Waits are bounded polls for what the broker does after EndTxn is answered (its markers
are written then), never sleeps deciding an outcome; "not visible while open" is checked
over a few polls of the consumer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from groupwire import (
    Consumer,
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    Producer,
    Record,
    TopicPartition,
)
from groupwire.client.admin import Admin
from groupwire.errors import CommitFailedError, ProducerFencedError, TransactionAbortableError

BOUND_S = 30
FAST: dict[str, Any] = dict(
    session_timeout_ms=3000, heartbeat_interval_ms=200, request_timeout_ms=5000,
    retry_backoff_ms=20, fetch_max_wait_ms=100, auto_offset_reset="earliest",
    close_timeout_ms=3000,
)


def _producer(bootstrap: str, transactional_id: str | None = None) -> Producer:
    return Producer(bootstrap, linger_ms=1, request_timeout_ms=5000, retry_backoff_ms=20,
                    transactional_id=transactional_id)


async def _read(bootstrap: str, tp: TopicPartition, level: str, *,
                until: int | None = None, limit: float = 10.0) -> tuple[list[Record], int]:
    """Every record of ``tp`` a fresh ``level`` consumer is handed, and its position, once
    the position reaches ``until`` (default: the end it can read to, checked stable over
    one more poll)."""
    async with Consumer(bootstrap, isolation_level=level, **FAST) as c:
        c.assign([tp])
        got: list[Record] = []

        async def loop() -> int:
            while True:
                batch = await c.getmany(timeout_ms=100)
                got.extend(batch.get(tp, []))
                position = await c.position(tp)
                end = c.last_stable_offset(tp) if level == "read_committed" else \
                    c.highwater(tp)
                target = until if until is not None else end
                if target is not None and position >= target and not batch:
                    return position

        position = await asyncio.wait_for(loop(), limit)
    return got, position


async def _committed(consumer: Consumer, tp: TopicPartition,
                     limit: float = 10.0) -> OffsetAndMetadata:
    """The group's committed offset of ``tp`` once it has one: the coordinator writes its
    markers, which commit the pending offsets, after it answers EndTxn."""
    async def poll() -> OffsetAndMetadata:
        while (got := await consumer.committed(tp)) is None:
            await asyncio.sleep(0.02)
        return got

    return await asyncio.wait_for(poll(), limit)


async def _none_visible(bootstrap: str, tp: TopicPartition, polls: int = 5) -> None:
    async with Consumer(bootstrap, isolation_level="read_committed", **FAST) as c:
        c.assign([tp])
        for _ in range(polls):
            assert await c.getmany(timeout_ms=100) == {}
        assert await c.position(tp) == 0


async def test_a_committed_transaction_is_seen_by_read_committed_once_it_commits(
        bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["txn-commit"], num_partitions=1)
    tp = TopicPartition("txn-commit", 0)
    async with asyncio.timeout(BOUND_S), _producer(bootstrap, "tx-commit") as p:
        await p.begin_transaction()
        for v in (b"a", b"b", b"c"):
            await p.send_and_wait("txn-commit", v, partition=0)
        await _none_visible(bootstrap, tp)
        dirty, _ = await _read(bootstrap, tp, "read_uncommitted", until=3)
        assert [r.value for r in dirty] == [b"a", b"b", b"c"]
        await p.commit_transaction()
    seen, position = await _read(bootstrap, tp, "read_committed", until=4)
    assert [(r.offset, r.value) for r in seen] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert position == 4  # past the commit marker, which is never handed out


async def test_an_aborted_transaction_is_seen_by_read_uncommitted_only(
        bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["txn-abort"], num_partitions=1)
    tp = TopicPartition("txn-abort", 0)
    async with asyncio.timeout(BOUND_S), _producer(bootstrap, "tx-abort") as p:
        await p.begin_transaction()
        await p.send_and_wait("txn-abort", b"dropped-1", partition=0)
        await p.send_and_wait("txn-abort", b"dropped-2", partition=0)
        await p.abort_transaction()
        async with p.transaction():
            await p.send_and_wait("txn-abort", b"kept", partition=0)
    # dropped-1, dropped-2, abort marker, kept, commit marker
    committed, position = await _read(bootstrap, tp, "read_committed", until=5)
    assert [r.value for r in committed] == [b"kept"] and position == 5
    everything, position = await _read(bootstrap, tp, "read_uncommitted", until=5)
    assert [(r.offset, r.value) for r in everything] == [
        (0, b"dropped-1"), (1, b"dropped-2"), (3, b"kept")]
    assert position == 5


async def test_a_second_producer_with_the_same_id_fences_the_first(
        bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["txn-fence"], num_partitions=1)
    tp = TopicPartition("txn-fence", 0)
    async with asyncio.timeout(BOUND_S):
        first = _producer(bootstrap, "tx-shared")
        second = _producer(bootstrap, "tx-shared")
        try:
            await first.start()
            await first.begin_transaction()
            await first.send_and_wait("txn-fence", b"zombie", partition=0)
            await second.start()   # bumps the epoch: the first's transaction is aborted
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            for call in (first.begin_transaction(), first.abort_transaction(),
                         first.send("txn-fence", b"more", partition=0)):
                with pytest.raises(ProducerFencedError):
                    await call
            async with second.transaction():
                await second.send_and_wait("txn-fence", b"live", partition=0)
        finally:
            await first.close()
            await second.close()
    seen, _ = await _read(bootstrap, tp, "read_committed")
    assert [r.value for r in seen] == [b"live"]


async def test_consume_transform_produce_commits_offsets_with_the_output(
        bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["ctp-in", "ctp-out"], num_partitions=1)
    tp_in, tp_out = TopicPartition("ctp-in", 0), TopicPartition("ctp-out", 0)
    async with _producer(bootstrap) as plain:
        for i in range(10):
            await plain.send_and_wait("ctp-in", b"%d" % i, partition=0)
    async with asyncio.timeout(BOUND_S), \
            Consumer(bootstrap, group_id="ctp", enable_auto_commit=False,
                     isolation_level="read_committed", **FAST) as consumer, \
            _producer(bootstrap, "tx-ctp") as producer:
        consumer.subscribe(["ctp-in"])
        inputs: list[Record] = []
        while len(inputs) < 10:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                inputs.extend(records)
        assert [r.value for r in inputs] == [b"%d" % i for i in range(10)]

        await producer.begin_transaction()
        for r in inputs:
            assert r.value is not None
            await producer.send("ctp-out", r.value * 2, partition=0)
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 1 and metadata.member_id
        await producer.send_offsets_to_transaction(
            {tp_in: OffsetAndMetadata(inputs[-1].offset + 1)}, metadata)
        await producer.flush()
        assert await consumer.committed(tp_in) is None   # not before the commit
        await _none_visible(bootstrap, tp_out)
        await producer.commit_transaction()
        assert (await _committed(consumer, tp_in)).offset == 10
    out, _ = await _read(bootstrap, tp_out, "read_committed", until=11)
    assert [r.value for r in out] == [b"%d" % i * 2 for i in range(10)]


async def test_offsets_from_a_consumer_not_in_the_generation_are_refused(
        bootstrap: str, admin: Admin) -> None:
    """KIP-447: the group coordinator checks the consumer's member id and generation that
    go with the offsets; a zombie's make the transaction abortable, nothing committed."""
    await admin.create_topics(["zombie-in"], num_partitions=1)
    tp = TopicPartition("zombie-in", 0)
    async with _producer(bootstrap) as plain:
        await plain.send_and_wait("zombie-in", b"x", partition=0)
    async with asyncio.timeout(BOUND_S), \
            Consumer(bootstrap, group_id="zombies", enable_auto_commit=False,
                     **FAST) as consumer, \
            _producer(bootstrap, "tx-zombie") as producer:
        consumer.subscribe(["zombie-in"])
        while not await consumer.getmany(timeout_ms=100):
            pass
        live = consumer.group_metadata()
        stale = ConsumerGroupMetadata(live.group_id, live.generation_id, "not-a-member")
        await producer.begin_transaction()
        with pytest.raises(CommitFailedError):
            await producer.send_offsets_to_transaction({tp: 1}, stale)
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert await consumer.committed(tp) is None
        async with producer.transaction():
            await producer.send_offsets_to_transaction({tp: 1}, consumer.group_metadata())
        assert (await _committed(consumer, tp)).offset == 1
