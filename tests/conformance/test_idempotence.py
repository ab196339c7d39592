"""§5.4 idempotent producers: InitProducerId (22), layout v2 batches (§5.1) built here
byte by byte, a resend answered with its first offset and stored once, a gap and an old
epoch refused with Kafka's codes, nothing of a refused batch stored."""

from __future__ import annotations

from typing import Any

from .wire import (
    Api,
    Err,
    Rec,
    WireConn,
    assert_shape,
    batch_v2,
    create_topic,
    decode_batch,
    fetch_body,
    split_batches,
)


async def _produce(conn: WireConn, topic: str, records: bytes) -> dict[str, Any]:
    body = await conn.call(Api.PRODUCE, {"topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return body["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


async def test_init_producer_id_hands_out_new_ids_at_epoch_0(conn: WireConn) -> None:
    first = await conn.call(Api.INIT_PRODUCER_ID, {})
    second = await conn.call(Api.INIT_PRODUCER_ID, {"transaction_timeout_ms": 60000})
    for body in (first, second):
        assert_shape(Api.INIT_PRODUCER_ID, body)
        assert body["error_code"] == Err.NONE and body["producer_epoch"] == 0
    assert first["producer_id"] >= 0 and first["producer_id"] != second["producer_id"]
    refused = await conn.call(Api.INIT_PRODUCER_ID, {"transactional_id": "t"})
    assert refused["error_code"] == Err.COORDINATOR_NOT_AVAILABLE
    # rule 3: an error answer may hold only the error pair, absent ints reading as -1
    assert (refused.get("producer_id", -1), refused.get("producer_epoch", -1)) == (-1, -1)


async def test_a_resend_is_answered_with_its_first_offset_and_stored_once(
        conn: WireConn) -> None:
    await create_topic(conn, "idem-c")
    pid = (await conn.call(Api.INIT_PRODUCER_ID, {}))["producer_id"]

    def v2(seq: int, epoch: int = 0) -> bytes:
        return batch_v2([Rec(None, b"s%d" % (seq + i), ts_delta=i) for i in range(3)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    assert await _produce(conn, "idem-c", v2(0)) == {
        "index": 0, "error_code": Err.NONE, "base_offset": 0, "record_errors": []}
    assert (await _produce(conn, "idem-c", v2(3)))["base_offset"] == 3
    assert (await _produce(conn, "idem-c", v2(0)))["base_offset"] == 0  # a resend
    gap = await _produce(conn, "idem-c", v2(7))
    assert gap["error_code"] == Err.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert (await _produce(conn, "idem-c", v2(0, epoch=1)))["base_offset"] == 6  # new epoch
    old = await _produce(conn, "idem-c", v2(6, epoch=0))
    assert old["error_code"] == Err.INVALID_PRODUCER_EPOCH
    fetched = await conn.call(Api.FETCH, fetch_body("idem-c", 0, 0))
    data = fetched["responses"][0]["partitions"][0]["records"]
    values = [r.value for b in split_batches(data) for r in decode_batch(b)]
    assert values == [b"s0", b"s1", b"s2", b"s3", b"s4", b"s5", b"s0", b"s1", b"s2"]
