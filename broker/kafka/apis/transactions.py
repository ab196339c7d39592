"""The transaction APIs through the Kafka door (KIP-98; KIP-447's fencing, KIP-664's tools).

Each Kafka request becomes the msgpack door's request of the same name (docs/protocol.md
§4, §5.6): the transaction coordinator, the group coordinator and the authorizer see one
protocol. Where the two differ:

- A client knows only the codes its version does. PRODUCER_FENCED (90, KIP-588) reaches
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn from v2 and InitProducerId from v4;
  older versions, and TxnOffsetCommit at every version, are told INVALID_PRODUCER_EPOCH
  (47), which their clients handle the same way, as Kafka's broker tells them.
  TxnOffsetCommit below v2 is told COORDINATOR_NOT_AVAILABLE for
  COORDINATOR_LOAD_IN_PROGRESS, which clients of then did not retry (Kafka's KAFKA-7296
  rule). Codes of groupwire's own become Kafka's (``kafka_code``).
- AddPartitionsToTxn, TxnOffsetCommit and DescribeTransactions have no top-level code: a
  top-level refusal of the msgpack door reaches every partition (or transactional id) the
  request named.
- AddPartitionsToTxn is served up to v3, the versions clients send (v4+ batches
  transactions for brokers verifying on a leader's behalf, KIP-890). TxnOffsetCommit
  below v3 names no member: the generation is not checked (-1, ""), as Kafka does.
- ListTransactions v1's ``duration_filter`` passes through: the coordinator's shell
  filters by its own clock (open transactions started more than that long ago).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from groupwire.broker.kafka.translate import (
    Body,
    Dispatch,
    KafkaContext,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    Response,
    TransactionState,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitTopic,
    TxnTopic,
    TxnTopicResult,
)

INIT_PRODUCER_ID: Final = 22
ADD_PARTITIONS_TO_TXN: Final = 24
ADD_OFFSETS_TO_TXN: Final = 25
END_TXN: Final = 26
TXN_OFFSET_COMMIT: Final = 28
DESCRIBE_TRANSACTIONS: Final = 65
LIST_TRANSACTIONS: Final = 66

PRODUCER_FENCED_SINCE: Final[dict[int, int]] = {
    INIT_PRODUCER_ID: 4,
    ADD_PARTITIONS_TO_TXN: 2,
    ADD_OFFSETS_TO_TXN: 2,
    END_TXN: 2,
}
"""api key -> the first version whose clients know PRODUCER_FENCED; an API not named
(TxnOffsetCommit) never learnt it."""

_NEVER: Final = 1 << 15
"""Past every version: PRODUCER_FENCED_SINCE's answer for an API not in it."""
_LOAD_IN_PROGRESS_SINCE: Final = 2
"""TxnOffsetCommit's first version told COORDINATOR_LOAD_IN_PROGRESS."""
_NO_GENERATION: Final = -1
_NO_EPOCH: Final = -1


def txn_code(ctx: KafkaContext, api_key: int, code: int) -> int:
    """``code`` as a client of ``api_key`` at ``ctx.api_version`` is told it (module
    docstring)."""
    kafka = kafka_code(code)
    if (kafka == ErrorCode.PRODUCER_FENCED
            and ctx.api_version < PRODUCER_FENCED_SINCE.get(api_key, _NEVER)):
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    if (api_key == TXN_OFFSET_COMMIT and kafka == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            and ctx.api_version < _LOAD_IN_PROGRESS_SINCE):
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return kafka


def _results(ctx: KafkaContext, api_key: int, code: int, named: Iterable[tuple[str, list[int]]],
             results: list[TxnTopicResult],
             entry: Callable[[int, int], Body]) -> list[tuple[str, list[Body]]]:
    """(topic, its partitions' entries): the broker's results, or a top-level ``code``
    on every partition the request ``named``."""
    if code:
        return [(name, [entry(index, txn_code(ctx, api_key, code)) for index in indexes])
                for name, indexes in named]
    return [(t.name, [entry(p.partition_index, txn_code(ctx, api_key, p.error_code))
                      for p in t.results]) for t in results]


# --- AddPartitionsToTxn (24) --------------------------------------------------------------


def _add_partitions_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(AddPartitionsToTxnRequest(
        transactional_id=body["v3_and_below_transactional_id"],
        producer_id=body["v3_and_below_producer_id"],
        producer_epoch=body["v3_and_below_producer_epoch"],
        topics=[TxnTopic(name=t["name"], partitions=list(t["partitions"]))
                for t in body["v3_and_below_topics"]]))


def _add_partitions_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, AddPartitionsToTxnResponse)
    named = [(t["name"], list(t["partitions"])) for t in body["v3_and_below_topics"]]
    topics = _results(ctx, ADD_PARTITIONS_TO_TXN, response.error_code, named, response.results,
                      lambda index, code: {"partition_index": index,
                                           "partition_error_code": code})
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": name, "results_by_partition": partitions} for name, partitions in topics]}


# --- AddOffsetsToTxn (25), EndTxn (26) ----------------------------------------------------


def _add_offsets_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(AddOffsetsToTxnRequest(
        transactional_id=body["transactional_id"], producer_id=body["producer_id"],
        producer_epoch=body["producer_epoch"], group_id=body["group_id"]))


def _add_offsets_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, AddOffsetsToTxnResponse)
    return {"throttle_time_ms": 0,
            "error_code": txn_code(ctx, ADD_OFFSETS_TO_TXN, response.error_code)}


def _end_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(EndTxnRequest(
        transactional_id=body["transactional_id"], producer_id=body["producer_id"],
        producer_epoch=body["producer_epoch"], committed=body["committed"]))


def _end_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, EndTxnResponse)
    return {"throttle_time_ms": 0, "error_code": txn_code(ctx, END_TXN, response.error_code)}


# --- TxnOffsetCommit (28) -----------------------------------------------------------------


def _txn_commit_request(ctx: KafkaContext, body: Body) -> Step:
    version = ctx.api_version
    member = version >= 3  # KIP-447: the consumer's generation, to fence a zombie
    return Dispatch(TxnOffsetCommitRequest(
        transactional_id=body["transactional_id"], group_id=body["group_id"],
        producer_id=body["producer_id"], producer_epoch=body["producer_epoch"],
        generation_id=body["generation_id"] if member else _NO_GENERATION,
        member_id=body["member_id"] if member else "",
        group_instance_id=body["group_instance_id"] if member else None,
        topics=[TxnOffsetCommitTopic(name=t["name"], partitions=[
            TxnOffsetCommitPartition(
                partition_index=p["partition_index"], committed_offset=p["committed_offset"],
                committed_leader_epoch=p["committed_leader_epoch"] if version >= 2 else _NO_EPOCH,
                committed_metadata=p["committed_metadata"])
            for p in t["partitions"]]) for t in body["topics"]]))


def _txn_commit_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, TxnOffsetCommitResponse)
    named = [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in body["topics"]]
    topics = _results(ctx, TXN_OFFSET_COMMIT, response.error_code, named, response.topics,
                      lambda index, code: {"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0, "topics": [
        {"name": name, "partitions": partitions} for name, partitions in topics]}


# --- DescribeTransactions (65), ListTransactions (66) -------------------------------------


def _describe_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(DescribeTransactionsRequest(transactional_ids=list(body["transactional_ids"])))


def _described(ctx: KafkaContext, state: TransactionState) -> Body:
    return {"error_code": txn_code(ctx, DESCRIBE_TRANSACTIONS, state.error_code),
            "transactional_id": state.transactional_id,
            "transaction_state": state.transaction_state,
            "transaction_timeout_ms": state.transaction_timeout_ms,
            "transaction_start_time_ms": state.transaction_start_time_ms,
            "producer_id": state.producer_id, "producer_epoch": state.producer_epoch,
            "topics": [{"topic": t.topic, "partitions": list(t.partitions)}
                       for t in state.topics]}


def _describe_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DescribeTransactionsResponse)
    if response.error_code:
        states = [TransactionState(error_code=response.error_code, transactional_id=tid)
                  for tid in body["transactional_ids"]]
    else:
        states = response.transaction_states
    return {"throttle_time_ms": 0, "transaction_states": [_described(ctx, s) for s in states]}


def _list_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(ListTransactionsRequest(
        state_filters=list(body["state_filters"]),
        producer_id_filters=list(body["producer_id_filters"]),
        duration_filter_ms=body["duration_filter"] if ctx.api_version >= 1 else -1))


def _list_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, ListTransactionsResponse)
    return {"throttle_time_ms": 0,
            "error_code": txn_code(ctx, LIST_TRANSACTIONS, response.error_code),
            "unknown_state_filters": list(response.unknown_state_filters),
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                 "transaction_state": t.transaction_state}
                for t in response.transaction_states]}


TRANSACTION_TRANSLATORS: dict[int, Translator] = {
    ADD_PARTITIONS_TO_TXN: Simple(_add_partitions_request, _add_partitions_response),
    ADD_OFFSETS_TO_TXN: Simple(_add_offsets_request, _add_offsets_response),
    END_TXN: Simple(_end_request, _end_response),
    TXN_OFFSET_COMMIT: Simple(_txn_commit_request, _txn_commit_response),
    DESCRIBE_TRANSACTIONS: Simple(_describe_request, _describe_response),
    LIST_TRANSACTIONS: Simple(_list_request, _list_response),
}
"""Kafka api key -> its translator, for the APIs above (InitProducerId, which idempotent
producers send too, is ``broker.kafka.apis.admin``'s)."""
