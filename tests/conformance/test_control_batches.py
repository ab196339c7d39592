"""§5.1, §5.2, §5.5: layout v2's attributes carry Kafka's transaction bits; a control
batch (a transaction marker, built here byte by byte) is the broker's alone, refused
INVALID_RECORD from a producer; a transactional batch is stored as sent, and its
producer may not write outside its transaction until a marker ends it."""

from __future__ import annotations

from pathlib import Path

import msgpack

from .wire import (
    Api,
    Err,
    Rec,
    WireConn,
    assemble_v1,
    batch_v2,
    control_batch_v2,
    create_topic,
    decode_batch,
    fetch_one,
    produce,
    records_region,
    split_batches,
    with_offset_and_epoch,
)

TS = 1_732_250_000_000
CONTROL_VECTOR = ("9299cf0000000000000000d2ffffffffd30000000000000fa0d10003d2ffffffff"
                  "d30000019352255a80ce00000001ce7f4431143091950000c40400000001c406000000"
                  "00000090")
PROTOCOL_DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_own_control_batch_builder_matches_the_spec_vector() -> None:
    """Guards the suite itself: §5.1's control batch for producer 4000, epoch 3, a
    commit from coordinator epoch 0 at 1732250000000."""
    marker = control_batch_v2(producer_id=4000, producer_epoch=3, commit=True,
                              coordinator_epoch=0, timestamp_ms=TS)
    assert marker.hex() == CONTROL_VECTOR
    assert CONTROL_VECTOR in PROTOCOL_DOC.read_text()
    header, records = msgpack.unpackb(marker, raw=False)
    assert header == [0, -1, 4000, 3, -1, TS, 1, 0x7F443114, 0x30]
    assert records == [[0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", []]]


async def _producer_id(conn: WireConn) -> int:
    body = await conn.call(Api.INIT_PRODUCER_ID, {})
    assert body["error_code"] == Err.NONE
    return int(body["producer_id"])


async def test_a_producers_control_batch_is_invalid_record_and_stored_nowhere(
        conn: WireConn) -> None:
    await create_topic(conn, "markers-c")
    pid = await _producer_id(conn)
    for commit in (True, False):
        marker = control_batch_v2(producer_id=pid, producer_epoch=0, commit=commit,
                                  coordinator_epoch=0, timestamp_ms=TS)
        refused = await produce(conn, "markers-c", 0, marker)
        assert refused["error_code"] == Err.INVALID_RECORD, refused
    data = batch_v2([Rec(None, b"after")], producer_id=pid, producer_epoch=0,
                    base_sequence=0)
    assert (await produce(conn, "markers-c", 0, data))["base_offset"] == 0
    part = await fetch_one(conn, "markers-c", 0, 0)
    assert [r.value for b in split_batches(part["records"]) for r in decode_batch(b)] == [
        b"after"]


async def test_a_transactional_batch_is_stored_as_sent(conn: WireConn) -> None:
    """Attributes 0x10 under the CRC, kept byte for byte; until a marker ends the
    transaction its producer's non-transactional batch is INVALID_TXN_STATE."""
    await create_topic(conn, "txn-c")
    pid = await _producer_id(conn)
    txn = batch_v2([Rec(b"k", b"t0"), Rec(None, b"t1", ts_delta=1)], producer_id=pid,
                   producer_epoch=0, base_sequence=0, attributes=0x10)
    assert (await produce(conn, "txn-c", 0, txn, transactional_id="t"))["base_offset"] == 0
    outside = batch_v2([Rec(None, b"no")], producer_id=pid, producer_epoch=0,
                       base_sequence=2)
    refused = await produce(conn, "txn-c", 0, outside)
    assert refused["error_code"] == Err.INVALID_TXN_STATE, refused
    part = await fetch_one(conn, "txn-c", 0, 0)
    assert part["records"] == with_offset_and_epoch(txn, 0, 0)


async def test_transaction_bits_in_layout_v1_are_corrupt(conn: WireConn) -> None:
    await create_topic(conn, "txn-v1-c")
    v1 = assemble_v1(records_region([Rec(None, b"x")]), count=1, base_ts=TS,
                     attributes=0x10)
    assert (await produce(conn, "txn-v1-c", 0, v1))["error_code"] == Err.CORRUPT_MESSAGE


async def test_a_transactional_batch_without_a_transactional_id_is_refused(
        conn: WireConn) -> None:
    """§5.5: a transactional batch needs the Produce's ``transactional_id``, as Kafka's
    Produce does; nothing of it is stored."""
    await create_topic(conn, "txn-noid-c")
    pid = await _producer_id(conn)
    txn = batch_v2([Rec(None, b"t0")], producer_id=pid, producer_epoch=0, base_sequence=0,
                   attributes=0x10)
    refused = await produce(conn, "txn-noid-c", 0, txn)
    assert refused["error_code"] == Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, refused
    part = await fetch_one(conn, "txn-noid-c", 0, 0)
    assert part["records"] == b""
