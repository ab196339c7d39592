"""Produce and Fetch through the Kafka door.

Kafka's record batches are stored as their producer sent them (``protocol.kafka.records``),
so a Kafka consumer is served the very bytes a Kafka producer wrote. Batches a msgpack
producer wrote are turned into Kafka batches on the way out (``kafka_records``): the
conversion happens only when the two doors mix, and only for those batches.

Kafka's rules where the msgpack door differs: acks=0 gets no answer at all (``Silent``);
acks other than 0, 1 and -1 are refused with INVALID_REQUIRED_ACKS per partition; errors
live per partition (a top-level refusal of the msgpack door is spread over every partition
the request named); incremental fetch sessions (KIP-227) are declined by answering
``session_id`` 0, which tells a client to send full fetches, as Kafka allows.

Transactions: a Fetch's ``isolation_level`` goes to the broker, whose last stable offset
and aborted transactions (read_committed only; null otherwise) are the answer's. A
Produce's ``transactional_id`` (v3+) is passed on: transactional batches need it, and
WRITE on it with an authorizer (docs/protocol.md §5.5).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from groupwire.broker.kafka.translate import (
    Answer,
    Body,
    Dispatch,
    KafkaContext,
    Silent,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.records import msgpack_to_kafka
from groupwire.protocol.messages import (
    AbortedTransaction,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    Response,
    TopicProduceData,
)

PRODUCE: Final = 0
FETCH: Final = 1
_ACKS: Final = frozenset({0, 1, -1})
_NO_SESSION: Final = 0


# --- Produce ----------------------------------------------------------------------------


def _produce_request(ctx: KafkaContext, body: Body) -> Step:
    acks = body["acks"]
    if acks not in _ACKS:
        return Answer(_produce_errors(body, ErrorCode.INVALID_REQUIRED_ACKS,
                                      f"acks must be 0, 1 or -1, not {acks}", ctx))
    request = ProduceRequest(
        acks=1 if acks == 0 else acks, timeout_ms=body["timeout_ms"],
        topic_data=[TopicProduceData(name=topic["name"], partition_data=[
            PartitionProduceData(index=p["index"], records=bytes(p["records"] or b""))
            for p in topic["partition_data"]]) for topic in body["topic_data"]],
        transactional_id=body["transactional_id"] if ctx.api_version >= 3 else None)
    return Silent(request) if acks == 0 else Dispatch(request)


def _produce_errors(body: Body, code: int, message: str | None, ctx: KafkaContext) -> Body:
    return {"responses": [{"name": topic["name"], "partition_responses": [
        _produce_partition(ctx, p["index"], code, message) for p in topic["partition_data"]]}
        for topic in body["topic_data"]]}


def _produce_partition(ctx: KafkaContext, index: int, code: int, message: str | None,
                       base_offset: int = -1, record_errors: Iterable[Any] = ()) -> Body:
    partition: Body = {"index": index, "error_code": kafka_code(code),
                       "base_offset": base_offset, "log_append_time_ms": -1,
                       "log_start_offset": -1}
    if ctx.api_version >= 8:
        partition["error_message"] = message
        partition["record_errors"] = [
            {"batch_index": e.batch_index,
             "batch_index_error_message": e.batch_index_error_message}
            for e in record_errors]
    return partition


def _produce_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, ProduceResponse)
    if response.error_code:
        return _produce_errors(body, response.error_code, response.error_message, ctx)
    return {"responses": [{"name": topic.name, "partition_responses": [
        _produce_partition(ctx, p.index, p.error_code, p.error_message, p.base_offset,
                           p.record_errors)
        for p in topic.partition_responses]} for topic in response.responses]}


# --- Fetch ------------------------------------------------------------------------------


def _fetch_request(ctx: KafkaContext, body: Body) -> Step:
    if ctx.api_version >= 7 and body.get("session_id", 0) != _NO_SESSION:
        # no session was ever handed out: Kafka's answer to an id it does not know
        return Answer(_fetch_top_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    topics = [FetchTopic(topic=topic["topic"], partitions=[
        FetchPartition(partition=p["partition"],
                       current_leader_epoch=p.get("current_leader_epoch", -1),
                       fetch_offset=p["fetch_offset"],
                       partition_max_bytes=p["partition_max_bytes"])
        for p in topic["partitions"]]) for topic in body["topics"]]
    return Dispatch(FetchRequest(
        max_wait_ms=max(0, body["max_wait_ms"]), min_bytes=max(0, body["min_bytes"]),
        max_bytes=body.get("max_bytes", 0x7FFFFFFF),
        isolation_level=body["isolation_level"], topics=topics))


def _fetch_top_error(code: int) -> Body:
    return {"error_code": kafka_code(code), "session_id": _NO_SESSION, "responses": []}


def _fetch_partition(index: int, code: int, high_watermark: int = -1,
                     last_stable_offset: int = -1, log_start_offset: int = -1,
                     aborted: list[AbortedTransaction] | None = None,
                     records: bytes | None = None) -> Body:
    if last_stable_offset < 0 and not code:
        # a broker that tells none keeps no open transaction: all below the HW is stable
        last_stable_offset = high_watermark
    return {"partition_index": index, "error_code": kafka_code(code),
            "high_watermark": high_watermark,
            "last_stable_offset": last_stable_offset, "log_start_offset": log_start_offset,
            "aborted_transactions": None if aborted is None else [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in aborted],
            "preferred_read_replica": -1, "records": records}


def _fetch_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, FetchResponse)
    if response.error_code:
        code = response.error_code
        return {"error_code": 0, "session_id": _NO_SESSION, "responses": [
            {"topic": topic["topic"], "partitions": [
                _fetch_partition(p["partition"], code) for p in topic["partitions"]]}
            for topic in body["topics"]]}
    return {"error_code": 0, "session_id": _NO_SESSION, "responses": [
        {"topic": topic.topic, "partitions": [
            _fetch_partition(p.partition_index, p.error_code, p.high_watermark,
                             p.last_stable_offset, p.log_start_offset,
                             p.aborted_transactions, kafka_records(p.records))
            for p in topic.partitions]}
        for topic in response.responses]}


def kafka_records(data: bytes) -> bytes:
    """The records of a Fetch answer as Kafka batches: Kafka's as stored, msgpack ones
    converted (``protocol.kafka.records.msgpack_to_kafka`` leaves Kafka's untouched)."""
    if not data:
        return data
    return msgpack_to_kafka(data)


RECORD_TRANSLATORS: dict[int, Translator] = {
    PRODUCE: Simple(_produce_request, _produce_response),
    FETCH: Simple(_fetch_request, _fetch_response),
}
