"""A byte rotted in the middle of a log after a clean shutdown: the broker trusts its
index and does not rescan, so the batch must be caught when read — refused with
CORRUPT_MESSAGE and logged, never handed out — while the batches around it still serve."""

from __future__ import annotations

from pathlib import Path

from groupwire.client.connection import Connection
from groupwire.protocol.batches import decode_records, iter_batch_spans
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from tests.integration.rawgroup import create_topic, produce

from .conftest import StartBroker

TOPIC = "rot"


async def _fetch(conn: Connection, offset: int) -> tuple[int, list[int], str | None]:
    resp = await conn.send(FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic=TOPIC, partitions=[FetchPartition(partition=0, fetch_offset=offset)])]),
        response_type=FetchResponse)
    part = resp.responses[0].partitions[0]
    return part.error_code, [r.offset for r in decode_records(part.records)], part.error_message


def _flip_byte_in_batch(log_file: Path, batch: int) -> None:
    data = bytearray(log_file.read_bytes())
    ends = [end for _, _, end in iter_batch_spans(bytes(data))]
    end = ends[batch]
    data[end - 2] ^= 0xFF  # inside the records, covered by the CRC
    log_file.write_bytes(bytes(data))


async def test_a_corrupt_batch_in_the_middle_is_refused_not_served(
        start_broker: StartBroker, tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "rot"
    broker = await start_broker(data_dir=data_dir, log_level="info")
    conn = await Connection.open("127.0.0.1", broker.port)
    await create_topic(conn, TOPIC, 1)
    for b in range(3):  # three batches of two records: offsets 0-1, 2-3, 4-5
        await produce(conn, TOPIC, 0, [b"b%d-0" % b, b"b%d-1" % b])
    await conn.close()
    await broker.close()  # clean: the next start trusts the index and does not rescan

    (log_file,) = data_dir.rglob(f"{TOPIC}-0/*.log")
    _flip_byte_in_batch(log_file, 1)

    broker = await start_broker(data_dir=data_dir, log_level="info")
    conn = await Connection.open("127.0.0.1", broker.port)
    try:
        # from the start: the good first batch only, the bad one is held back
        assert await _fetch(conn, 0) == (ErrorCode.NONE, [0, 1], None)
        # at the bad batch: an error naming where, no records
        code, offsets, message = await _fetch(conn, 2)
        assert (code, offsets) == (ErrorCode.CORRUPT_MESSAGE, [])
        assert message is not None and f"{TOPIC}-0" in message and "offset 2" in message
        assert (await _fetch(conn, 3))[:2] == (ErrorCode.CORRUPT_MESSAGE, [])
        # past it, the log serves again
        assert await _fetch(conn, 4) == (ErrorCode.NONE, [4, 5], None)
    finally:
        await conn.close()
    out, err = capfd.readouterr()
    assert "corrupt_batch" in out + err
