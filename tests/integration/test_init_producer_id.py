"""InitProducerId through the msgpack door (docs/protocol.md §5.4): ids at epoch 0, never
the same twice, across a restart too; a transactional id is refused until transactions
are served."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from tests.integration.rawgroup import create_topic


async def _ask(broker: Broker, transactional_id: str | None = None) -> InitProducerIdResponse:
    async with await Connection.open("127.0.0.1", broker.port) as conn:
        answer = await conn.send(InitProducerIdRequest(transactional_id=transactional_id,
                                                       transaction_timeout_ms=60_000))
    assert isinstance(answer, InitProducerIdResponse)
    return answer


async def test_ids_are_new_at_epoch_0_across_a_restart(
        start_broker: Callable[..., Awaitable[Broker]], tmp_path: Path) -> None:
    broker = await start_broker(data_dir=tmp_path / "d")
    first = [await _ask(broker) for _ in range(3)]
    assert all(a.error_code == ErrorCode.NONE and a.producer_epoch == 0 for a in first)
    await broker.close()
    again = await start_broker(data_dir=tmp_path / "d")
    later = [await _ask(again) for _ in range(3)]
    ids = [a.producer_id for a in first + later]
    assert len(set(ids)) == 6 and min(ids) >= 0


async def test_a_transactional_id_is_refused_until_transactions_are_served(
        broker: Broker) -> None:
    answer = await _ask(broker, "txn-1")
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert answer.producer_id == -1 and answer.error_message


async def test_a_resent_v2_batch_is_answered_with_its_first_offset(broker: Broker) -> None:
    """Through the msgpack door: a producer id from InitProducerId, batches in layout v2
    (§5.1), a resend recognised (§5.4), a gap refused; only the first sends are stored."""
    async with await Connection.open("127.0.0.1", broker.port) as conn:
        await create_topic(conn, "idem", 1)
        granted = await conn.send(InitProducerIdRequest())
        assert isinstance(granted, InitProducerIdResponse)

        async def send(seq: int) -> tuple[int, int]:
            batch = encode_batch([BatchRecord(value=b"%d" % (seq + i), timestamp_ms=1)
                                  for i in range(2)], producer_id=granted.producer_id,
                                 producer_epoch=granted.producer_epoch, base_sequence=seq)
            answer = await conn.send(ProduceRequest(topic_data=[TopicProduceData(
                name="idem", partition_data=[PartitionProduceData(index=0, records=batch)])]),
                response_type=ProduceResponse)
            part = answer.responses[0].partition_responses[0]
            return part.error_code, part.base_offset

        assert await send(0) == (ErrorCode.NONE, 0)
        assert await send(2) == (ErrorCode.NONE, 2)
        assert await send(0) == (ErrorCode.NONE, 0)
        assert (await send(7))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        ends = await conn.send(ListOffsetsRequest(topics=[ListOffsetsTopic(
            name="idem", partitions=[ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
        assert isinstance(ends, ListOffsetsResponse)
        assert ends.topics[0].partitions[0].offset == 4
