"""Produce as steps (``TopicApis.produce_steps``): a big batch's check spans steps, other
requests run in between, and the batch is appended whole in the last one, only if its
topic and partition still exist then. A big batch is also written a piece a step
(``PartitionLog.append_steps``): a topic deleted meanwhile is answered
UNKNOWN_TOPIC_OR_PARTITION too, and nothing of the batch stays."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from groupwire.broker.config import BrokerSettings
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.broker.storage import partition_log as partition_log_module
from groupwire.broker.topic_apis import TopicApis
from groupwire.protocol.batches import RECORD_CHUNK, BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from groupwire.protocol.steps import run_steps

ROWS = 3 * RECORD_CHUNK
"""Enough tiny records for the check to take several steps."""
PIECE = 256
"""Bytes a step while a batch is written, so a 1 KB batch takes several."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TopicStore]:
    s = TopicStore(tmp_path / "data", StorageConfig(offsets_partitions=1))
    s.create_topic("t", 2)
    yield s
    s.close(sync=False)


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_log_module, "WRITE_PIECE", PIECE)


@pytest.fixture
def appended() -> list[tuple[str, int]]:
    return []


@pytest.fixture
def apis(store: TopicStore, tmp_path: Path, appended: list[tuple[str, int]]) -> TopicApis:
    return TopicApis(BrokerSettings(data_dir=tmp_path / "data"), store, port=lambda: 0,
                     on_append=lambda topic, partition: appended.append((topic, partition)))


def big_batch() -> bytes:
    return encode_batch([BatchRecord(value=b"v" * 8, timestamp_ms=1)] * ROWS)


def produce(*parts: tuple[int, bytes]) -> ProduceRequest:
    return ProduceRequest(topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=p, records=r) for p, r in parts])])


def test_a_big_batch_is_checked_over_several_steps_then_appended_whole(
        apis: TopicApis, store: TopicStore, appended: list[tuple[str, int]]) -> None:
    steps = apis.produce_steps(produce((0, big_batch())))
    next(steps)   # one step in: the check has begun, nothing is stored yet
    assert store.log("t", 0).high_watermark == 0 and appended == []
    next(steps)   # more than one step inside the one partition's check
    assert store.log("t", 0).high_watermark == 0
    response, wrote = run_steps(steps)
    answer = response.responses[0].partition_responses[0]
    assert (answer.error_code, answer.base_offset, wrote) == (ErrorCode.NONE, 0, True)
    assert store.log("t", 0).high_watermark == ROWS and appended == [("t", 0)]


def test_a_topic_deleted_during_the_check_is_not_appended_to(
        apis: TopicApis, store: TopicStore, appended: list[tuple[str, int]]) -> None:
    steps = apis.produce_steps(produce((0, big_batch()), (1, big_batch())))
    next(steps)
    store.delete_topic("t")   # a DeleteTopics from another connection, between slices
    response, wrote = run_steps(steps)
    answers = response.responses[0].partition_responses
    assert [(a.index, a.error_code, a.error_message) for a in answers] == [
        (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic or partition t-{p}")
        for p in (0, 1)]
    assert not wrote and appended == []
    assert store.partition_count("t") is None
    store.create_topic("t", 2)   # the name again: a new, empty topic
    assert [store.log("t", p).high_watermark for p in (0, 1)] == [0, 0]


def test_a_bad_big_batch_is_refused_and_nothing_stored(
        apis: TopicApis, store: TopicStore, appended: list[tuple[str, int]]) -> None:
    batch = bytearray(big_batch())
    batch[-1] ^= 0xFF
    response, wrote = apis.produce(produce((0, bytes(batch)), (1, big_batch())))
    bad, good = response.responses[0].partition_responses
    assert (bad.error_code, bad.error_message) == (ErrorCode.CORRUPT_MESSAGE, "CRC mismatch")
    assert good.error_code == ErrorCode.NONE and wrote
    assert [store.log("t", p).high_watermark for p in (0, 1)] == [0, ROWS]
    assert appended == [("t", 1)]


@pytest.mark.parametrize("created_again", [False, True])
def test_a_topic_deleted_while_its_batch_is_written_answers_unknown(
        apis: TopicApis, store: TopicStore, appended: list[tuple[str, int]],
        small_pieces: None, created_again: bool) -> None:
    batch = encode_batch([BatchRecord(value=b"v" * 100, timestamp_ms=1)] * 10)
    assert len(batch) > 3 * PIECE
    segment = store.log("t", 0).directory / f"{0:020d}.log"
    steps = apis.produce_steps(produce((0, batch)))
    while segment.stat().st_size == 0:  # through the check, into the write
        next(steps)
    assert segment.stat().st_size < len(batch)  # a piece of it, not yet all
    store.delete_topic("t")  # a DeleteTopics from another connection, between slices
    if created_again:
        store.create_topic("t", 1)
    response, wrote = run_steps(steps)
    answer = response.responses[0].partition_responses[0]
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition t-0")
    assert not wrote and appended == []
    if created_again:
        assert store.log("t", 0).log_end_offset == 0


def test_a_big_batch_is_written_over_several_steps(
        apis: TopicApis, store: TopicStore, appended: list[tuple[str, int]],
        small_pieces: None) -> None:
    batch = encode_batch([BatchRecord(value=b"v" * 100, timestamp_ms=1)] * 10)
    log = store.log("t", 0)
    segment = log.directory / f"{0:020d}.log"
    steps = apis.produce_steps(produce((0, batch)))
    sizes = []
    while True:
        try:
            next(steps)
        except StopIteration as done:
            response, wrote = done.value
            break
        sizes.append(segment.stat().st_size)
        if sizes[-1] < len(batch):
            assert log.log_end_offset == 0 and appended == []
    assert len({s for s in sizes if 0 < s < len(batch)}) >= 3
    answer = response.responses[0].partition_responses[0]
    assert (answer.error_code, answer.base_offset, wrote) == (ErrorCode.NONE, 0, True)
    assert log.high_watermark == 10 and appended == [("t", 0)]
