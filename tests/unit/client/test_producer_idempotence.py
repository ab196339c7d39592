"""The Producer's idempotence against a fake broker whose answers each test scripts: the
producer id is asked first (retried while the broker is loading, dropped with a warning by
a broker without InitProducerId), batches carry it with per-partition sequences, and a
batch refused as out of order or fenced fails alone, the producer going on under a new
producer id from sequence 0."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from groupwire import Producer
from groupwire.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from groupwire.protocol.batches import BatchHeader, decode_records, read_header
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiKey,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceResponse,
)
from tests.unit.client import sasl_fake
from tests.unit.client.sasl_fake import SaslFake

BOUND_S = 10
FIRST_ID = 100


class Broker:
    """One node leading both partitions of topic "t". InitProducerId hands out 100, 101,
    ... unless ``init_errors`` holds codes to answer first; Produce stores every batch
    (``stored``) and answers its offsets, unless ``produce_errors[partition]`` holds codes
    to answer first."""

    def __init__(self) -> None:
        self.fake = SaslFake({}, sasl=False, handler=self.answer)
        self.init_errors: list[int] = []
        self.produce_errors: dict[int, list[int]] = {}
        self.ids_given = 0
        self.sent: list[tuple[int, BatchHeader, list[bytes | None]]] = []
        """Every batch produced: (partition, header, values), refused ones included."""
        self.stored: dict[int, list[bytes | None]] = {0: [], 1: []}

    def count(self, kind: type[Request]) -> int:
        return sum(isinstance(r, kind) for _, r in self.fake.requests)

    def answer(self, request: Request) -> Response:
        if isinstance(request, MetadataRequest):
            return MetadataResponse(
                brokers=[MetadataBroker(node_id=1, host=self.fake.host, port=self.fake.port)],
                cluster_id="fake", controller_id=1,
                topics=[MetadataTopic(name="t", partitions=[
                    MetadataPartition(partition_index=p, leader_id=1, leader_epoch=0,
                                      replica_nodes=[1], isr_nodes=[1]) for p in (0, 1)])])
        if isinstance(request, InitProducerIdRequest):
            if self.init_errors:
                return InitProducerIdResponse(error_code=self.init_errors.pop(0))
            self.ids_given += 1
            return InitProducerIdResponse(producer_id=FIRST_ID + self.ids_given - 1,
                                          producer_epoch=0)
        assert isinstance(request, ProduceRequest), request
        out = []
        for part in request.topic_data[0].partition_data:
            values = [r.value for r in decode_records(part.records)]
            self.sent.append((part.index, read_header(part.records), values))
            errors = self.produce_errors.get(part.index)
            if errors:
                out.append(PartitionProduceResponse(index=part.index,
                                                    error_code=errors.pop(0)))
                continue
            out.append(PartitionProduceResponse(index=part.index,
                                                base_offset=len(self.stored[part.index])))
            self.stored[part.index].extend(values)
        return ProduceResponse(responses=[TopicProduceResponse(name="t",
                                                               partition_responses=out)])

    def numbering(self, partition: int) -> list[tuple[int, int, int, int]]:
        """(producer id, epoch, base sequence, record count) of each batch sent there."""
        return [(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
                for p, h, _ in self.sent if p == partition]


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    b = Broker()
    async with b.fake:
        yield b


def producer(broker: Broker, **options: object) -> Producer:
    options = {"linger_ms": 0, "request_timeout_ms": 5000, "retry_backoff_ms": 10, **options}
    return Producer(broker.fake.address, **options)  # type: ignore[arg-type]


async def test_batches_carry_the_producer_id_and_each_partitions_own_sequence(
        broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        assert p.enable_idempotence and p.idempotent
        await p.send_and_wait("t", b"a0", partition=0)
        batch = p.create_batch()
        for v in (b"b0", b"b1", b"b2"):
            batch.append(value=v)
        await (await p.send_batch(batch, "t", partition=1))
        await asyncio.gather(*[await p.send("t", v, partition=0) for v in (b"a1", b"a2")])
        await p.send_and_wait("t", b"b3", partition=1)
    assert broker.count(InitProducerIdRequest) == 1
    numbered = broker.numbering(0)
    assert numbered[0] == (FIRST_ID, 0, 0, 1)
    assert [seq for _, _, seq, _ in numbered] == [0, *[
        sum(n for *_, n in numbered[:i]) for i in range(1, len(numbered))]]
    assert broker.numbering(1) == [(FIRST_ID, 0, 0, 3), (FIRST_ID, 0, 3, 1)]
    assert broker.stored == {0: [b"a0", b"a1", b"a2"], 1: [b"b0", b"b1", b"b2", b"b3"]}


@pytest.mark.parametrize(("code", "error"), [
    (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, OutOfOrderSequenceNumberError),
    (ErrorCode.INVALID_PRODUCER_EPOCH, InvalidProducerEpochError),
])
async def test_a_batch_refused_out_of_order_or_fenced_fails_and_the_producer_starts_over(
        broker: Broker, code: ErrorCode, error: type[Exception],
        caplog: pytest.LogCaptureFixture) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.send_and_wait("t", b"before", partition=0)
        await p.send_and_wait("t", b"other", partition=1)
        broker.produce_errors[0] = [code]
        with caplog.at_level(logging.WARNING, logger="groupwire.producer"), \
                pytest.raises(error):
            await p.send_and_wait("t", b"refused", partition=0)
        assert broker.count(ProduceRequest) == 3  # not retried
        await p.send_and_wait("t", b"after", partition=0)
        await p.send_and_wait("t", b"other-after", partition=1)
    assert broker.count(InitProducerIdRequest) == 2
    assert broker.numbering(0) == [(FIRST_ID, 0, 0, 1), (FIRST_ID, 0, 1, 1),
                                   (FIRST_ID + 1, 0, 0, 1)]
    assert broker.numbering(1) == [(FIRST_ID, 0, 0, 1), (FIRST_ID + 1, 0, 0, 1)]
    assert broker.stored == {0: [b"before", b"after"], 1: [b"other", b"other-after"]}
    (warning,) = [r for r in caplog.records if r.name == "groupwire.producer"]
    assert "new producer id" in warning.getMessage()
    assert code.name in warning.getMessage()


async def test_a_batch_refused_outright_gives_its_sequence_back(broker: Broker) -> None:
    """Nothing of it was stored: the next batch takes its numbers, under the same id."""
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.send_and_wait("t", b"a", partition=0)
        broker.produce_errors[0] = [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        with pytest.raises(TopicAuthorizationFailedError):
            await p.send_and_wait("t", b"denied", partition=0)
        await p.send_and_wait("t", b"b", partition=0)
    assert broker.count(InitProducerIdRequest) == 1
    assert broker.numbering(0) == [(FIRST_ID, 0, 0, 1), (FIRST_ID, 0, 1, 1),
                                   (FIRST_ID, 0, 1, 1)]


async def test_a_batch_that_may_have_been_stored_leaves_a_new_producer_id_behind(
        broker: Broker) -> None:
    """Retried until its delivery timeout: the broker may hold it or not, so numbering on
    could leave a gap, or repeat it; the next batch goes under a new producer id."""
    async with asyncio.timeout(BOUND_S), producer(
            broker, request_timeout_ms=200, delivery_timeout_ms=300) as p:
        await p.send_and_wait("t", b"a", partition=0)
        broker.produce_errors[0] = [ErrorCode.REQUEST_TIMED_OUT] * 1000
        with pytest.raises(RequestTimedOutError):
            await p.send_and_wait("t", b"lost", partition=0)
        broker.produce_errors[0] = []
        await p.send_and_wait("t", b"b", partition=0)
    assert broker.count(InitProducerIdRequest) == 2
    numbered = broker.numbering(0)
    assert len(numbered) > 3  # "lost" was retried
    assert set(numbered[1:-1]) == {(FIRST_ID, 0, 1, 1)}  # every retry the same numbers
    assert numbered[-1] == (FIRST_ID + 1, 0, 0, 1)
    assert broker.stored[0] == [b"a", b"b"]


async def test_the_producer_id_is_asked_again_while_the_broker_is_loading(
        broker: Broker) -> None:
    broker.init_errors = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 2
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        meta = await p.send_and_wait("t", b"v", partition=0)
    assert meta.offset == 0
    assert broker.count(InitProducerIdRequest) == 3
    assert broker.numbering(0) == [(FIRST_ID, 0, 0, 1)]


async def test_a_producer_id_refused_for_good_fails_the_records(broker: Broker) -> None:
    broker.init_errors = [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED"):
            await p.send_and_wait("t", b"v", partition=0)
        assert broker.count(ProduceRequest) == 0
        await p.send_and_wait("t", b"w", partition=0)  # asked again for the next batch
    assert broker.numbering(0) == [(FIRST_ID, 0, 0, 1)]


async def test_a_broker_answering_unsupported_version_means_sending_without_idempotence(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    broker.init_errors = [ErrorCode.UNSUPPORTED_VERSION]
    with caplog.at_level(logging.WARNING, logger="groupwire.producer"):
        async with asyncio.timeout(BOUND_S), producer(broker) as p:
            await p.send_and_wait("t", b"a", partition=0)
            await p.send_and_wait("t", b"b", partition=1)
            assert p.enable_idempotence and not p.idempotent
    assert broker.count(InitProducerIdRequest) == 1
    assert broker.numbering(0) == [(-1, -1, -1, 1)] and broker.numbering(1) == [(-1, -1, -1, 1)]
    assert [h.version for _, h, _ in broker.sent] == [1, 1]
    (warning,) = [r for r in caplog.records if r.name == "groupwire.producer"]
    assert "InitProducerId" in warning.getMessage()


async def test_a_broker_without_init_producer_id_is_not_asked(
        broker: Broker, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """An older broker's ApiVersions lists no API 22: nothing to ask, one warning."""
    older: Callable[[], dict[ApiKey, tuple[int, int]]] = lambda: {  # noqa: E731
        k: v for k, v in SUPPORTED_VERSIONS.items() if k != ApiKey.INIT_PRODUCER_ID}
    monkeypatch.setattr(sasl_fake, "SUPPORTED_VERSIONS", older())
    with caplog.at_level(logging.WARNING, logger="groupwire.producer"):
        async with asyncio.timeout(BOUND_S), producer(broker) as p:
            await p.send_and_wait("t", b"a", partition=0)
            assert not p.idempotent
    assert broker.count(InitProducerIdRequest) == 0
    assert [h.version for _, h, _ in broker.sent] == [1]
    assert len([r for r in caplog.records if r.name == "groupwire.producer"]) == 1


async def test_without_idempotence_no_producer_id_is_asked(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker, enable_idempotence=False) as p:
        await p.send_and_wait("t", b"a", partition=0)
    assert broker.count(InitProducerIdRequest) == 0
    assert broker.numbering(0) == [(-1, -1, -1, 1)]
