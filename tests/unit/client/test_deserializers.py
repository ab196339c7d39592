"""The consumer's key_deserializer / value_deserializer (aiokafka's names), in the fetcher:
applied to each record's key and value (a None kept None), and one that raises stops
its partition at that record with an error naming topic, partition and offset, after
the records before it, until a seek moves on. Without a broker."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from groupwire.client.errors import RecordDeserializationError
from groupwire.client.fetcher import Fetcher
from groupwire.client.subscription import SubscriptionState
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.messages import (
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)

TP = TopicPartition("t", 0)
VALUES: list[bytes | None] = [b'{"n": 0}', None, b"not json", b'{"n": 3}']
KEYS: list[bytes | None] = [b"k0", None, b"k2", b"k3"]


class Broker:
    """One partition holding VALUES (keyed by KEYS) at offsets 0..3."""

    def __init__(self) -> None:
        self.fetched_at: list[int] = []

    async def send(self, request: Any) -> Any:
        assert isinstance(request, FetchRequest)
        offset = request.topics[0].partitions[0].fetch_offset
        self.fetched_at.append(offset)
        batch = encode_batch([BatchRecord(v, k, timestamp_ms=7)
                              for k, v in zip(KEYS[offset:], VALUES[offset:], strict=True)],
                             base_offset=offset)
        return FetchResponse(responses=[FetchTopicResponse(topic="t", partitions=[
            FetchPartitionData(partition_index=0, high_watermark=len(VALUES),
                               records=batch)])])


async def fetch_once(fetcher: Fetcher) -> None:
    done = asyncio.Event()
    fetcher.on_done = done.set
    fetcher.maybe_fetch(None)
    await done.wait()


def _fetcher(broker: Broker, subs: SubscriptionState, **deserializers: Any) -> Fetcher:
    subs.set_assignment([TP])
    subs.partitions[TP].seek(0)
    return Fetcher(subs, broker.send, auto_offset_reset="earliest", fetch_max_wait_ms=10,
                   **deserializers)


async def test_deserializers_apply_to_keys_and_values_and_keep_none() -> None:
    subs = SubscriptionState()
    fetcher = _fetcher(Broker(), subs, key_deserializer=bytes.decode,
                       value_deserializer=lambda b: b.upper())
    await fetch_once(fetcher)
    got = fetcher.drain(10)[TP]
    assert [(r.key, r.value) for r in got] == [
        ("k0", b'{"N": 0}'), (None, None), ("k2", b"NOT JSON"), ("k3", b'{"N": 3}')]


async def test_a_raising_deserializer_stops_its_partition_at_that_record() -> None:
    subs = SubscriptionState()
    broker = Broker()
    fetcher = _fetcher(broker, subs, value_deserializer=json.loads)
    await fetch_once(fetcher)
    assert fetcher.record_error(set()) is None   # not instead of the records before it
    assert [r.value for r in fetcher.drain(10)[TP]] == [{"n": 0}, None]

    for _ in range(2):   # every poll, until a seek
        err = fetcher.record_error(set())
        assert isinstance(err, RecordDeserializationError)
        assert (err.topic_partition, err.offset, err.part) == (TP, 2, "value")
        assert isinstance(err.__cause__, json.JSONDecodeError)
        assert "t[0] offset 2" in str(err) and "value_deserializer" in str(err)
        fetcher.maybe_fetch(None)   # a stopped partition is not fetched again
        assert not fetcher.in_flight

    assert isinstance(err, RecordDeserializationError)
    subs.partitions[TP].seek(err.offset + 1)
    assert fetcher.record_error(set()) is None
    await fetch_once(fetcher)
    assert [r.value for r in fetcher.drain(10)[TP]] == [{"n": 3}]
    assert broker.fetched_at == [0, 3]


async def test_a_key_deserializer_error_says_key() -> None:
    subs = SubscriptionState()

    def strict(b: bytes) -> str:
        if b == b"k2":
            raise ValueError("no k2 here")
        return b.decode()

    fetcher = _fetcher(Broker(), subs, key_deserializer=strict)
    await fetch_once(fetcher)
    assert [r.key for r in fetcher.drain(10)[TP]] == ["k0", None]
    err = fetcher.record_error(set())
    assert isinstance(err, RecordDeserializationError) and err.part == "key"
    assert "key_deserializer raised ValueError: no k2 here" in str(err)
