"""Fetch in time slices (issue 14): a many-partition read yields the loop between
partitions, and a parked fetch is re-checked only on the partitions that moved.

Every broker here runs with ``loop_slice_ms=0``: a yield after every partition read, so
each test sees the read spread over many turns of the loop, deterministically.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker import fetch as fetch_module
from groupwire.broker import pacing
from groupwire.broker.connection import ClientConnection
from groupwire.broker.server import Broker
from groupwire.broker.storage.fileops import FileOps
from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord, decode_records, encode_batch
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ProduceResponse,
)

from .conftest import fast_settings
from .rawgroup import create_topic, produce

StartBroker = Callable[..., Awaitable[Broker]]
N = 200
"""Partitions of the topic fetched: a read of all of them takes ~N turns of the loop."""
TS = 1_700_000_000_000


def _fetch(partitions: range | list[int], offset: int | dict[int, int], *,
           max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 52428800,
           topic: str = "m") -> FetchRequest:
    def at(p: int) -> int:
        return offset[p] if isinstance(offset, dict) else offset
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        topics=[FetchTopic(topic=topic, partitions=[
                            FetchPartition(partition=p, fetch_offset=at(p))
                            for p in partitions])])


def _batch_size(value: bytes) -> int:
    """Bytes ``produce(conn, t, p, [value])`` appends (fetch counts stored batch bytes)."""
    return len(encode_batch([BatchRecord(value=value, key=None, timestamp_ms=TS)]))


def _values(response: FetchResponse) -> dict[int, list[bytes | None]]:
    return {p.partition_index: [r.value for r in decode_records(p.records)]
            for t in response.responses for p in t.partitions if p.records}


class ReadSpy:
    """Counts the broker's partition reads; ``at(n)`` is an event set at the n-th."""

    def __init__(self, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        fetches = broker.started.fetches
        assert fetches is not None
        self.calls = 0
        self._events: dict[int, asyncio.Event] = {}
        read = fetches._read_partition

        def spy(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            event = self._events.get(self.calls)
            if event is not None:
                event.set()
            return read(*args, **kwargs)

        monkeypatch.setattr(fetches, "_read_partition", spy)

    def at(self, n: int) -> asyncio.Event:
        return self._events.setdefault(n, asyncio.Event())


class SentSpy:
    """Records every answer the FetchManager hands to a connection."""

    def __init__(self, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        fetches = broker.started.fetches
        assert fetches is not None
        self.sent: list[FetchResponse] = []
        handle = fetches.handle

        def spy(conn_id: int, request: FetchRequest, reply: Any,
                *rest: Any, **named: Any) -> None:
            def record(response: FetchResponse, *, long: bool = False) -> None:
                self.sent.append(response)
                reply(response, long=long)
            handle(conn_id, request, record, *rest, **named)

        monkeypatch.setattr(fetches, "handle", spy)


async def _open(broker: Broker, name: str) -> Connection:
    return await Connection.open("127.0.0.1", broker.port, client_id=name)


async def _settled(broker: Broker) -> None:
    """Wait for every task the broker and its FetchManager run for requests."""
    fetches = broker.started.fetches
    assert fetches is not None
    while pending := [t for t in (*broker.runner.deferred, *fetches._tasks) if not t.done()]:
        await asyncio.gather(*pending, return_exceptions=True)


async def _sent(request: Awaitable[Any]) -> asyncio.Future[Any]:
    """Start sending: once this returns, the request is written (its task ran up to its
    first wait), so a request sent next on the same connection comes after it."""
    sending = asyncio.ensure_future(request)
    await asyncio.sleep(0)
    return sending


async def _round_trip(conn: Connection) -> None:
    """A request on ``conn`` answered: every earlier one was taken (and answered, if it
    was answered before this), in order."""
    await conn.send(ApiVersionsRequest())


def _pausable_reads(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """While the returned event is clear, a fetch's reads that run on in tasks (a first
    read, a completion) take no further slice; all other work goes on. Makes "while the
    read is under way" a fixed point rather than a race with the loop."""
    go = asyncio.Event()
    go.set()
    finish = pacing.finish_in_slices
    codes = {getattr(getattr(fetch_module.FetchManager, name, None), "__code__", None)
             for name in ("_arrival", "_completion")} - {None}

    async def gated(steps: Any, slice_s: float) -> Any:
        if getattr(steps, "gi_code", None) not in codes:
            return await finish(steps, slice_s)
        while True:
            await go.wait()
            await asyncio.sleep(0)
            done, result = pacing.run_slice(steps, slice_s)
            if done:
                return result

    monkeypatch.setattr(pacing, "finish_in_slices", gated)
    if hasattr(fetch_module, "finish_in_slices"):
        monkeypatch.setattr(fetch_module, "finish_in_slices", gated)
    return go


async def test_a_sliced_many_partition_fetch_answers_as_one_read(
        start_broker: StartBroker) -> None:
    broker = await start_broker(loop_slice_ms=0)
    conn = await _open(broker, "c")
    try:
        await create_topic(conn, "m", N)
        for p in (0, 1, 57, N - 1):
            await produce(conn, "m", p, [f"{p}-a".encode(), f"{p}-b".encode()], TS)
            await produce(conn, "m", p, [f"{p}-c".encode()], TS)
        resp = await conn.send(_fetch(range(N), 0), response_type=FetchResponse, timeout=30)
        parts = resp.responses[0].partitions
        assert [p.partition_index for p in parts] == list(range(N))
        assert all(p.error_code == 0 for p in parts)
        assert {p.partition_index: p.high_watermark for p in parts if p.high_watermark} == {
            0: 3, 1: 3, 57: 3, N - 1: 3}
        assert _values(resp) == {p: [f"{p}-{x}".encode() for x in "abc"]
                                 for p in (0, 1, 57, N - 1)}
        # the response budget still spans the partitions: the first with data gets its
        # first batch whatever its size, the next ones only what is left
        two = _batch_size(b"0-a") + _batch_size(b"0-c") - 1
        resp = await conn.send(_fetch(range(N), 0, max_bytes=two), response_type=FetchResponse,
                               timeout=30)
        assert _values(resp) == {0: [b"0-a", b"0-b"]}
        # naming no partition, it has nothing to wait for
        resp = await conn.send(_fetch([], 0, max_wait_ms=60_000), response_type=FetchResponse,
                               timeout=30)
        assert resp.error_code == 0 and resp.responses[0].partitions == []
    finally:
        await conn.close()


async def test_other_connections_go_on_during_a_read_and_its_next_request_waits(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)
    reader, other = await _open(broker, "reader"), await _open(broker, "other")
    try:
        await create_topic(reader, "m", N)
        reads, paused = ReadSpy(broker, monkeypatch), _pausable_reads(monkeypatch)
        fetching = await _sent(reader.send(_fetch(range(N), 0),
                                           response_type=FetchResponse, timeout=30))
        # pipelined behind the fetch on the same connection: an append to its last partition
        producing = await _sent(produce(reader, "m", N - 1, [b"later"], TS))
        await reads.at(10).wait()
        paused.clear()
        assert reads.calls < N  # the read has let the loop go
        await _round_trip(other)  # another connection is answered meanwhile
        await _round_trip(other)
        assert not fetching.done() and not producing.done()
        paused.set()
        resp = await fetching
        assert not producing.done() or producing.result().responses  # answered after it
        assert _values(resp) == {}  # the append took effect after the fetch
        assert resp.responses[0].partitions[N - 1].high_watermark == 0
        produced: ProduceResponse = await producing
        assert produced.responses[0].partition_responses[0].base_offset == 0
    finally:
        await reader.close()
        await other.close()


async def test_an_append_rereads_only_its_partition_until_min_bytes_is_there(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)
    consumer, producer = await _open(broker, "c"), await _open(broker, "p")
    try:
        await create_topic(producer, "m", N)
        size = _batch_size(b"one")
        reads = ReadSpy(broker, monkeypatch)
        waiting = await _sent(consumer.send(
            _fetch(range(N), 0, max_wait_ms=60_000, min_bytes=2 * size),
            response_type=FetchResponse, timeout=60))
        await _round_trip(consumer)  # its first read is done: parked
        assert reads.calls == N and not waiting.done()

        await produce(producer, "m", 3, [b"one"], TS)  # woken once the append is durable
        assert reads.calls == N + 1  # only the moved partition was read again
        await _round_trip(consumer)
        assert not waiting.done()  # size bytes < min_bytes: still parked

        await produce(producer, "m", 150, [b"two"], TS)
        resp = await waiting
        assert _values(resp) == {3: [b"one"], 150: [b"two"]}
        assert reads.calls == N + 2 + N  # the second re-read, then the full read
        fetches = broker.started.fetches
        assert fetches is not None
        assert not fetches._waiters and not fetches._by_conn
    finally:
        await consumer.close()
        await producer.close()


async def test_an_append_during_the_first_read_is_not_missed(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)
    consumer, producer = await _open(broker, "c"), await _open(broker, "p")
    try:
        await create_topic(producer, "m", N)
        reads = ReadSpy(broker, monkeypatch)
        paused = _pausable_reads(monkeypatch)
        waiting = await _sent(consumer.send(
            _fetch(range(N), 0, max_wait_ms=60_000), response_type=FetchResponse, timeout=60))
        await reads.at(10).wait()
        paused.clear()  # the read stops after a slice, with partition 0 read already
        await produce(producer, "m", 0, [b"early"], TS)
        assert reads.calls < N
        paused.set()
        async with asyncio.timeout(5):  # not at max_wait, a minute away
            resp = await waiting
        assert _values(resp) == {0: [b"early"]}
    finally:
        await consumer.close()
        await producer.close()


async def test_a_parked_fetch_completes_at_max_wait_with_what_is_there(
        start_broker: StartBroker) -> None:
    broker = await start_broker(loop_slice_ms=0)
    consumer, producer = await _open(broker, "c"), await _open(broker, "p")
    try:
        await create_topic(producer, "m", N)
        waiting = await _sent(consumer.send(
            _fetch(range(N), 0, max_wait_ms=300, min_bytes=1_000_000),
            response_type=FetchResponse, timeout=30))
        await _round_trip(consumer)
        await produce(producer, "m", 42, [b"some"], TS)
        resp = await waiting
        assert _values(resp) == {42: [b"some"]}
        await _settled(broker)
        fetches = broker.started.fetches
        assert fetches is not None
        assert not fetches._waiters and not fetches._by_conn and not fetches._tasks
    finally:
        await consumer.close()
        await producer.close()


async def test_a_completion_spanning_slices_has_its_answer_encoded_off_the_loop(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch whose first read fit one slice parks; its completion then runs over
    several slices, and its answer, as large, is encoded on a worker thread like other
    long answers."""
    broker = await start_broker(loop_slice_ms=1000)  # the first read: one slice
    consumer, producer = await _open(broker, "c"), await _open(broker, "p")
    marked: list[int] = []
    original = ClientConnection.answer_is_long

    def spy(self: ClientConnection, correlation_id: int) -> None:
        marked.append(correlation_id)
        original(self, correlation_id)

    monkeypatch.setattr(ClientConnection, "answer_is_long", spy)
    try:
        await create_topic(producer, "m", N)
        waiting = await _sent(consumer.send(
            _fetch(range(N), 0, max_wait_ms=30_000, min_bytes=1),
            response_type=FetchResponse, timeout=30))
        await _round_trip(consumer)
        assert marked == []  # parked after a one-slice read
        fetches = broker.started.fetches
        assert fetches is not None
        monkeypatch.setattr(fetches, "_slice_s", 0.0)  # the completion: a step a slice
        await produce(producer, "m", 7, [b"wake"], TS)
        resp = await waiting
        assert _values(resp) == {7: [b"wake"]}
        assert len(marked) == 1
    finally:
        await consumer.close()
        await producer.close()


async def test_a_connection_closed_mid_read_gets_nothing_and_leaves_no_task(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)
    conn = await _open(broker, "c")
    await create_topic(conn, "m", N)
    reads, sent = ReadSpy(broker, monkeypatch), SentSpy(broker, monkeypatch)
    paused = _pausable_reads(monkeypatch)
    fetching = await _sent(conn.send(_fetch(range(N), 0, max_wait_ms=60_000),
                                     response_type=FetchResponse))
    await reads.at(10).wait()
    paused.clear()
    await conn.close()
    await broker.wait_connections(0)
    paused.set()
    await _settled(broker)
    assert reads.calls < N  # the read stopped where it was
    assert sent.sent == []
    fetches = broker.started.fetches
    assert fetches is not None
    assert not fetches._waiters and not fetches._by_conn and not fetches._tasks
    assert fetching.done()
    fetching.exception()


async def test_a_connection_closed_mid_completion_gets_nothing_and_leaves_no_task(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)
    conn = await _open(broker, "c")
    await create_topic(conn, "m", N)
    reads, sent = ReadSpy(broker, monkeypatch), SentSpy(broker, monkeypatch)
    paused = _pausable_reads(monkeypatch)
    fetching = await _sent(conn.send(
        _fetch(range(N), 0, max_wait_ms=100, min_bytes=1_000_000),
        response_type=FetchResponse))
    await reads.at(N + 10).wait()  # max_wait passed: the full read is under way
    paused.clear()
    await conn.close()
    await broker.wait_connections(0)
    paused.set()
    await _settled(broker)
    assert reads.calls < 2 * N
    assert sent.sent == []
    fetches = broker.started.fetches
    assert fetches is not None
    assert not fetches._waiters and not fetches._by_conn and not fetches._tasks
    assert fetching.done()
    fetching.exception()


async def test_close_answers_parked_and_completing_fetches_and_leaves_no_task(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)
    a, b = await _open(broker, "a"), await _open(broker, "b")
    try:
        await create_topic(a, "m", N)
        await produce(a, "m", 5, [b"five"], TS)
        reads, paused = ReadSpy(broker, monkeypatch), _pausable_reads(monkeypatch)
        parked = await _sent(b.send(
            _fetch(range(N), 0, max_wait_ms=60_000, min_bytes=1_000_000),
            response_type=FetchResponse))
        await _round_trip(b)
        completing = await _sent(a.send(
            _fetch(range(N), 0, max_wait_ms=50, min_bytes=1_000_000),
            response_type=FetchResponse))
        await reads.at(2 * N + 10).wait()  # a's full read (after its own first) under way
        paused.clear()  # broker.close() finishes it
        fetches = broker.started.fetches
        assert fetches is not None
        tasks = set(fetches._tasks)
        assert tasks
        await broker.close()
        assert all(t.done() for t in tasks) and not fetches._tasks
        for waiting in (parked, completing):
            async with asyncio.timeout(5):
                assert _values(await waiting) == {5: [b"five"]}
    finally:
        await a.close()
        await b.close()


class GatedFsync(FileOps):
    """fsync blocks, once ``armed``, until ``release`` is set; ``entered`` is set (on the
    loop) when a blocked fsync has begun."""

    def __init__(self) -> None:
        self.armed = False
        self.release = threading.Event()
        self.entered = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def fsync(self, fd: int) -> None:
        if self.armed:
            self._loop.call_soon_threadsafe(self.entered.set)
            self.release.wait(10)
        super().fsync(fd)


async def test_an_append_made_during_an_fsync_wakes_the_fetch_once_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync ``always``: the high watermark moves once the fsync is done. An append made
    while an earlier fsync runs is seen, not yet visible, by the wake after that fsync;
    the wake after its own fsync must still look at it again."""
    disk = GatedFsync()
    broker = Broker(fast_settings(tmp_path / "data", fsync="always", loop_slice_ms=0),
                    file_ops=disk)
    await broker.start()
    consumer, producer = await _open(broker, "c"), await _open(broker, "p")
    other = await _open(broker, "p2")  # a connection answers its produce once durable
    try:
        await create_topic(producer, "m", 2)
        waiting = await _sent(consumer.send(_fetch([1], 0, max_wait_ms=60_000),
                                            response_type=FetchResponse))
        await _round_trip(consumer)  # parked on m-1
        topics = broker.started.topics
        assert topics is not None
        appended_to_1 = asyncio.Event()
        appended = topics._on_append

        def spy(topic: str, partition: int) -> None:
            appended(topic, partition)
            if (topic, partition) == ("m", 1):
                appended_to_1.set()

        monkeypatch.setattr(topics, "_on_append", spy)
        disk.armed = True
        first = await _sent(produce(producer, "m", 0, [b"one"], TS))
        await disk.entered.wait()  # the fsync of m-0 is under way
        second = await _sent(produce(other, "m", 1, [b"two"], TS))
        await appended_to_1.wait()  # m-1 written, to be synced by the next round
        disk.armed = False
        disk.release.set()
        await first
        await second
        async with asyncio.timeout(5):  # not at max_wait, a minute away
            resp = await waiting
        assert _values(resp) == {1: [b"two"]}
    finally:
        disk.release.set()
        for conn in (consumer, producer, other):
            await conn.close()
        await broker.close()
