"""The transaction APIs through the Kafka door (``broker.kafka.apis.transactions``), with
InitProducerId's KIP-360 fields, Fetch's isolation level and FindCoordinator's key type 1.

Requests are written by kafka-python 3.0.12's own protocol classes (an encoder nobody
here wrote), header included, read by the door's codec and translated; answers are
translated, written by the codec and read back by kafka-python. So a field named wrongly
on either side, put in a version that lacks it, or left at its default shows as a wrong
value here, at every served version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from groupwire.broker.kafka.apis import TRANSLATORS
from groupwire.broker.kafka.apis.transactions import TRANSACTION_TRANSLATORS
from groupwire.broker.kafka.door import KafkaDoor
from groupwire.broker.kafka.translate import Body, Dispatch, KafkaContext, Step
from groupwire.protocol import messages as m
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import codec, schema
from groupwire.protocol.kafka.codec import RequestHeader
from groupwire.protocol.kafka.spec import Field

E = ErrorCode
Kafka = Any
"""A kafka-python message class (``EndTxnRequest``), subscriptable by version."""

ANSWERS: dict[Kafka, Kafka] = {
    InitProducerIdRequest: InitProducerIdResponse,
    AddPartitionsToTxnRequest: AddPartitionsToTxnResponse,
    AddOffsetsToTxnRequest: AddOffsetsToTxnResponse, EndTxnRequest: EndTxnResponse,
    TxnOffsetCommitRequest: TxnOffsetCommitResponse,
    DescribeTransactionsRequest: DescribeTransactionsResponse,
    ListTransactionsRequest: ListTransactionsResponse,
    FetchRequest: FetchResponse, ProduceRequest: ProduceResponse,
    FindCoordinatorRequest: FindCoordinatorResponse,
}


# --- the door, as a Kafka client sees it ---------------------------------------------------


def _kwargs(container: Kafka, values: Body) -> Body:
    """kafka-python's constructor arguments: nested dicts become its struct classes."""
    kwargs: Body = {}
    for name, value in values.items():
        field = container.fields[name]  # KeyError: not one of Kafka's field names
        if value is not None and field.is_struct_array():
            value = [field.data_class(**_kwargs(field.data_class, v)) for v in value]
        kwargs[name] = value
    return kwargs


def _only_fields_of_the_version(fields: tuple[Field, ...], body: Body, version: int) -> None:
    """Every key the translator wrote is a field this version carries: a misspelt name
    would otherwise be dropped silently by the encoder."""
    by_name = {f.name: f for f in fields}
    for key, value in body.items():
        assert key in by_name and by_name[key].present(version), (key, version)
        field = by_name[key]
        if field.type == "struct" and value is not None:
            for item in value if field.array else [value]:
                _only_fields_of_the_version(field.fields, item, version)


_LOOSE = frozenset({0, 1})
"""Produce and Fetch answers are written once for every version, and the codec leaves out
what a version lacks: only what the client reads back is checked for them."""


class Exchange:
    """One request of a Kafka client through the door (header and body on the wire),
    and its answers."""

    def __init__(self, cls: Kafka, version: int, fields: Body) -> None:
        message = cls[version](**_kwargs(cls, fields))
        message.with_header(correlation_id=17, client_id="kafka-python")
        decoded = codec.decode_request(message.encode(header=True))
        self.header: RequestHeader = decoded.header
        self.body = decoded.body
        self.version = version
        self.api_key = self.header.api_key
        self.answer_cls = ANSWERS[cls]
        self.ctx = KafkaContext(api_version=version, client_id="kafka-python",
                                principal="User:ANONYMOUS")
        self.translator = TRANSLATORS[self.api_key]
        assert self.header.api_version == version

    def step(self) -> Step:
        return self.translator.request(self.ctx, self.body)

    def request(self) -> m.Request:
        step = self.step()
        assert isinstance(step, Dispatch), step
        return step.request

    def answer(self, response: m.Response) -> Body:
        """The Kafka body the client reads for the broker's ``response``."""
        body = self.translator.response(self.ctx, self.body, response)
        assert isinstance(body, dict), body
        if self.api_key not in _LOOSE:
            _only_fields_of_the_version(schema.RESPONSES[self.api_key].fields, body,
                                        self.version)
        payload = codec.encode_response(self.header, body)
        read = self.answer_cls[self.version].decode(payload, header=True)
        assert read.header.correlation_id == 17
        decoded: Body = read.to_dict(json=False)
        return decoded


def _codes(body: Any) -> Iterator[int]:
    """Every error code in a Kafka body, at any depth."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key in ("error_code", "partition_error_code"):
                yield value
            else:
                yield from _codes(value)
    elif isinstance(body, list):
        for item in body:
            yield from _codes(item)


# --- sample requests, each API at every served version -------------------------------------

PID, EPOCH = 4001, 3
TOPICS = [("t", [0, 1]), ("u", [3])]
"""What the partitioned samples name: three partitions."""


def _init(v: int) -> Body:
    fields: Body = {"transactional_id": "tx-1", "transaction_timeout_ms": 60_000}
    if v >= 3:
        fields |= {"producer_id": PID, "producer_epoch": EPOCH}
    return fields


def _add_partitions(v: int) -> Body:
    return {"v3_and_below_transactional_id": "tx-1", "v3_and_below_producer_id": PID,
            "v3_and_below_producer_epoch": EPOCH,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in TOPICS]}


def _txn(**more: Any) -> Callable[[int], Body]:
    return lambda v: {"transactional_id": "tx-1", "producer_id": PID,
                      "producer_epoch": EPOCH} | more


def _txn_commit(v: int) -> Body:
    fields: Body = {"transactional_id": "tx-1", "group_id": "g", "producer_id": PID,
                    "producer_epoch": EPOCH, "topics": [{"name": t, "partitions": [
                        {"partition_index": p, "committed_offset": 100 + p,
                         "committed_metadata": None if p else "meta"}
                        | ({"committed_leader_epoch": 9} if v >= 2 else {})
                        for p in ps]} for t, ps in TOPICS]}
    if v >= 3:
        fields |= {"generation_id": 7, "member_id": "m-1", "group_instance_id": "host-1"}
    return fields


Sample = tuple[Kafka, Callable[[int], Body], Callable[[int], int]]
ONE: Callable[[int], int] = lambda v: 1  # noqa: E731
SAMPLES: dict[int, Sample] = {
    22: (InitProducerIdRequest, _init, ONE),
    24: (AddPartitionsToTxnRequest, _add_partitions, lambda v: 3),
    25: (AddOffsetsToTxnRequest, _txn(group_id="g"), ONE),
    26: (EndTxnRequest, _txn(committed=True), ONE),
    28: (TxnOffsetCommitRequest, _txn_commit, lambda v: 3),
    65: (DescribeTransactionsRequest, lambda v: {"transactional_ids": ["tx-1", "tx-2"]},
         lambda v: 2),
    66: (ListTransactionsRequest, lambda v: {"state_filters": ["Ongoing"],
                                             "producer_id_filters": [PID]}, ONE),
}
"""api key -> (kafka-python class, its fields at a version, how many error codes a
top-level refusal becomes in the Kafka answer at that version)."""


def _versions(key: int) -> range:
    low, high = schema.SERVED[key]
    return range(low, high + 1)


EVERY_VERSION = [(key, v) for key in sorted(SAMPLES) for v in _versions(key)]


def exchange(api: int, version: int, **changes: Any) -> Exchange:
    cls, fields, _ = SAMPLES[api]
    return Exchange(cls, version, fields(version) | changes)


# --- what is served ------------------------------------------------------------------------

SERVED = {22: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3), 65: (0, 0), 66: (0, 1)}

CLIENTS: dict[str, dict[int, tuple[int, int]]] = {
    # src/rdkafka_request.c and src/rdkafka_txnmgr.c (2.16): InitProducerId 3-4 when it
    # recovers a producer id (KIP-360), else 0-4; FindCoordinator 0-2
    "librdkafka": {22: (0, 4), 24: (0, 0), 25: (0, 0), 26: (0, 1), 28: (0, 3), 10: (0, 2)},
    # kafka/producer/transaction_manager.py: max_version of each handler
    "kafka-python": {22: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3)},
    # aiokafka/protocol/transaction.py: v0 only
    "aiokafka": {22: (0, 0), 24: (0, 0), 25: (0, 0), 26: (0, 0), 28: (0, 0)},
}
"""The versions each tested client may ask for, read from its sources."""


def test_the_transaction_apis_are_advertised_at_their_served_versions() -> None:
    advertised = KafkaDoor(TRANSLATORS).advertised
    assert {key: advertised[key] for key in SERVED} == SERVED
    assert set(TRANSACTION_TRANSLATORS) == set(SAMPLES) - {22}
    assert 27 not in advertised  # WriteTxnMarkers is between brokers only


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_every_version_a_client_picks_is_served(client: str) -> None:
    advertised = KafkaDoor(TRANSLATORS).advertised
    for key, (low, high) in CLIENTS[client].items():
        # a client takes the highest version both sides have: its own highest, here
        assert advertised[key][0] <= low and high <= advertised[key][1], (client, key)


# --- every API, every version --------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), EVERY_VERSION)
def test_a_top_level_refusal_reaches_every_entry_the_request_named(key: int,
                                                                   version: int) -> None:
    ex = exchange(key, version)
    refused = m.response_type_for(ex.request())(error_code=E.NOT_COORDINATOR,
                                                error_message="elsewhere")
    codes = list(_codes(ex.answer(refused)))
    assert codes == [E.NOT_COORDINATOR] * SAMPLES[key][2](version)


@pytest.mark.parametrize(("key", "version"), EVERY_VERSION)
def test_codes_of_groupwires_own_never_reach_a_kafka_client(key: int, version: int) -> None:
    ex = exchange(key, version)
    fenced = m.response_type_for(ex.request())(error_code=E.PARTITION_NOT_OWNED)
    assert set(_codes(ex.answer(fenced))) == {E.ILLEGAL_GENERATION}


FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: None}
"""Kafka's KafkaApis: the first version told PRODUCER_FENCED (None: never)."""


@pytest.mark.parametrize(("key", "version"),
                         [(k, v) for k, v in EVERY_VERSION if k in FENCED_SINCE])
def test_producer_fenced_is_told_only_to_the_versions_that_know_it(key: int,
                                                                  version: int) -> None:
    ex = exchange(key, version)
    fenced = m.response_type_for(ex.request())(error_code=E.PRODUCER_FENCED)
    since = FENCED_SINCE[key]
    expected = E.PRODUCER_FENCED if since is not None and version >= since \
        else E.INVALID_PRODUCER_EPOCH
    assert set(_codes(ex.answer(fenced))) == {expected}


# --- InitProducerId (22) -------------------------------------------------------------------


@pytest.mark.parametrize("version", _versions(22))
def test_init_producer_id_carries_the_id_and_epoch_held_from_v3(version: int) -> None:
    ex = exchange(22, version)
    held = (PID, EPOCH) if version >= 3 else (-1, -1)
    assert ex.request() == m.InitProducerIdRequest(
        transactional_id="tx-1", transaction_timeout_ms=60_000,
        producer_id=held[0], producer_epoch=held[1])
    assert ex.answer(m.InitProducerIdResponse(producer_id=PID, producer_epoch=EPOCH + 1)) == {
        "throttle_time_ms": 0, "error_code": 0, "producer_id": PID,
        "producer_epoch": EPOCH + 1}
    refused = ex.answer(m.InitProducerIdResponse(error_code=E.CONCURRENT_TRANSACTIONS,
                                                 producer_id=PID, producer_epoch=EPOCH))
    assert refused == {"throttle_time_ms": 0, "error_code": 51, "producer_id": -1,
                       "producer_epoch": -1}


def test_an_idempotent_producer_still_gets_its_id() -> None:
    ex = exchange(22, 4, transactional_id=None, producer_id=-1, producer_epoch=-1)
    assert ex.request() == m.InitProducerIdRequest(transactional_id=None,
                                                   transaction_timeout_ms=60_000)


# --- AddPartitionsToTxn (24) ---------------------------------------------------------------


@pytest.mark.parametrize("version", _versions(24))
def test_add_partitions(version: int) -> None:
    ex = exchange(24, version)
    assert ex.request() == m.AddPartitionsToTxnRequest(
        transactional_id="tx-1", producer_id=PID, producer_epoch=EPOCH,
        topics=[m.TxnTopic(name="t", partitions=[0, 1]), m.TxnTopic(name="u", partitions=[3])])
    answer = ex.answer(m.AddPartitionsToTxnResponse(results=[
        m.TxnTopicResult(name="t", results=[
            m.TxnPartitionResult(partition_index=0, error_code=0),
            m.TxnPartitionResult(partition_index=1, error_code=E.OPERATION_NOT_ATTEMPTED)]),
        m.TxnTopicResult(name="u", results=[
            m.TxnPartitionResult(partition_index=3, error_code=E.UNKNOWN_TOPIC_OR_PARTITION)])]))
    assert answer == {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": "t", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": 0},
            {"partition_index": 1, "partition_error_code": 55}]},
        {"name": "u", "results_by_partition": [
            {"partition_index": 3, "partition_error_code": 3}]}]}


def test_add_partitions_spreads_a_refusal_by_partition() -> None:
    ex = exchange(24, 3)
    answer = ex.answer(m.AddPartitionsToTxnResponse(error_code=E.CONCURRENT_TRANSACTIONS))
    assert answer["results_by_topic_v3_and_below"] == [
        {"name": "t", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": 51},
            {"partition_index": 1, "partition_error_code": 51}]},
        {"name": "u", "results_by_partition": [
            {"partition_index": 3, "partition_error_code": 51}]}]


# --- AddOffsetsToTxn (25), EndTxn (26) -----------------------------------------------------


@pytest.mark.parametrize("version", _versions(25))
def test_add_offsets(version: int) -> None:
    ex = exchange(25, version)
    assert ex.request() == m.AddOffsetsToTxnRequest(
        transactional_id="tx-1", producer_id=PID, producer_epoch=EPOCH, group_id="g")
    assert ex.answer(m.AddOffsetsToTxnResponse()) == {"throttle_time_ms": 0, "error_code": 0}
    assert ex.answer(m.AddOffsetsToTxnResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)) == {
        "throttle_time_ms": 0, "error_code": 30}


@pytest.mark.parametrize("version", _versions(26))
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn(version: int, committed: bool) -> None:
    ex = exchange(26, version, committed=committed)
    assert ex.request() == m.EndTxnRequest(
        transactional_id="tx-1", producer_id=PID, producer_epoch=EPOCH, committed=committed)
    assert ex.answer(m.EndTxnResponse()) == {"throttle_time_ms": 0, "error_code": 0}
    assert ex.answer(m.EndTxnResponse(error_code=E.INVALID_TXN_STATE)) == {
        "throttle_time_ms": 0, "error_code": 48}


# --- TxnOffsetCommit (28) ------------------------------------------------------------------


@pytest.mark.parametrize("version", _versions(28))
def test_txn_offset_commit(version: int) -> None:
    ex = exchange(28, version)
    member: Body = ({"generation_id": 7, "member_id": "m-1", "group_instance_id": "host-1"}
                    if version >= 3 else {})
    epoch = 9 if version >= 2 else -1
    assert ex.request() == m.TxnOffsetCommitRequest(
        transactional_id="tx-1", group_id="g", producer_id=PID, producer_epoch=EPOCH,
        topics=[m.TxnOffsetCommitTopic(name=t, partitions=[
            m.TxnOffsetCommitPartition(partition_index=p, committed_offset=100 + p,
                                       committed_leader_epoch=epoch,
                                       committed_metadata=None if p else "meta")
            for p in ps]) for t, ps in TOPICS], **member)
    answer = ex.answer(m.TxnOffsetCommitResponse(topics=[
        m.TxnTopicResult(name="t", results=[
            m.TxnPartitionResult(partition_index=0),
            m.TxnPartitionResult(partition_index=1, error_code=E.UNSTABLE_OFFSET_COMMIT)])]))
    assert answer == {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 88}]}]}


@pytest.mark.parametrize("version", _versions(28))
def test_txn_offset_commit_tells_old_clients_not_available_for_loading(version: int) -> None:
    ex = exchange(28, version)
    loading = ex.answer(m.TxnOffsetCommitResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS))
    expected = E.COORDINATOR_NOT_AVAILABLE if version < 2 else E.COORDINATOR_LOAD_IN_PROGRESS
    assert set(_codes(loading)) == {expected}
    # the same rule for a code the broker put on one partition
    one = ex.answer(m.TxnOffsetCommitResponse(topics=[m.TxnTopicResult(name="t", results=[
        m.TxnPartitionResult(partition_index=0, error_code=E.COORDINATOR_LOAD_IN_PROGRESS)])]))
    assert set(_codes(one)) == {expected}


def test_txn_offset_commit_below_v3_names_no_member() -> None:
    request = exchange(28, 2).request()
    assert isinstance(request, m.TxnOffsetCommitRequest)
    assert (request.generation_id, request.member_id, request.group_instance_id) == (-1, "", None)


# --- DescribeTransactions (65), ListTransactions (66) -------------------------------------


def test_describe_transactions() -> None:
    ex = exchange(65, 0)
    assert ex.request() == m.DescribeTransactionsRequest(transactional_ids=["tx-1", "tx-2"])
    answer = ex.answer(m.DescribeTransactionsResponse(transaction_states=[
        m.TransactionState(transactional_id="tx-1", transaction_state="Ongoing",
                           transaction_timeout_ms=60_000,
                           transaction_start_time_ms=1_700_000_000_000, producer_id=PID,
                           producer_epoch=EPOCH,
                           topics=[m.TransactionTopic(topic="t", partitions=[0, 1])]),
        m.TransactionState(error_code=E.TRANSACTIONAL_ID_NOT_FOUND, transactional_id="tx-2")]))
    assert answer == {"throttle_time_ms": 0, "transaction_states": [
        {"error_code": 0, "transactional_id": "tx-1", "transaction_state": "Ongoing",
         "transaction_timeout_ms": 60_000, "transaction_start_time_ms": 1_700_000_000_000,
         "producer_id": PID, "producer_epoch": EPOCH,
         "topics": [{"topic": "t", "partitions": [0, 1]}]},
        {"error_code": 105, "transactional_id": "tx-2", "transaction_state": "",
         "transaction_timeout_ms": -1, "transaction_start_time_ms": -1, "producer_id": -1,
         "producer_epoch": -1, "topics": []}]}
    refused = ex.answer(m.DescribeTransactionsResponse(error_code=E.INVALID_REQUEST))
    assert [(s["transactional_id"], s["error_code"])
            for s in refused["transaction_states"]] == [("tx-1", 42), ("tx-2", 42)]


def test_list_transactions() -> None:
    ex = exchange(66, 0)
    assert ex.request() == m.ListTransactionsRequest(state_filters=["Ongoing"],
                                                     producer_id_filters=[PID])
    assert exchange(66, 1, duration_filter=60_000).request() == m.ListTransactionsRequest(
        state_filters=["Ongoing"], producer_id_filters=[PID], duration_filter_ms=60_000)
    answer = ex.answer(m.ListTransactionsResponse(
        unknown_state_filters=["Sleeping"], transaction_states=[
            m.ListedTransaction(transactional_id="tx-1", producer_id=PID,
                                transaction_state="Ongoing")]))
    assert answer == {"throttle_time_ms": 0, "error_code": 0,
                      "unknown_state_filters": ["Sleeping"], "transaction_states": [
                          {"transactional_id": "tx-1", "producer_id": PID,
                           "transaction_state": "Ongoing"}]}


# --- Fetch (1): isolation level, last stable offset, aborted transactions -------------------


def _fetch(v: int, isolation_level: int) -> Body:
    fields: Body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1,
                    "max_bytes": 1 << 20, "isolation_level": isolation_level,
                    "topics": [{"topic": "t", "partitions": [
                        {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1 << 16}
                        | ({"log_start_offset": -1} if v >= 5 else {})
                        | ({"current_leader_epoch": -1} if v >= 9 else {})]}]}
    if v >= 7:
        fields |= {"session_id": 0, "session_epoch": -1, "forgotten_topics_data": []}
    if v >= 11:
        fields["rack_id"] = ""
    return fields


FETCH_VERSIONS = _versions(1)


def _fetched(**partition: Any) -> m.FetchResponse:
    return m.FetchResponse(responses=[m.FetchTopicResponse(topic="t", partitions=[
        m.FetchPartitionData(**({"partition_index": 0, "high_watermark": 20,
                                 "log_start_offset": 0} | partition))])])


def _partition(answer: Body) -> Body:
    partition: Body = answer["responses"][0]["partitions"][0]
    return partition


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("isolation_level", [0, 1])
def test_fetch_passes_the_isolation_level_on(version: int, isolation_level: int) -> None:
    request = Exchange(FetchRequest, version, _fetch(version, isolation_level)).request()
    assert isinstance(request, m.FetchRequest)
    assert request.isolation_level == isolation_level


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_answers_the_last_stable_offset_and_the_aborted_transactions(
        version: int) -> None:
    ex = Exchange(FetchRequest, version, _fetch(version, 1))
    committed = _partition(ex.answer(_fetched(
        last_stable_offset=12, aborted_transactions=[
            m.AbortedTransaction(producer_id=PID, first_offset=6),
            m.AbortedTransaction(producer_id=PID + 1, first_offset=9)])))
    assert (committed["high_watermark"], committed["last_stable_offset"]) == (20, 12)
    assert committed["aborted_transactions"] == [{"producer_id": PID, "first_offset": 6},
                                                 {"producer_id": PID + 1, "first_offset": 9}]
    none_aborted = _partition(ex.answer(_fetched(last_stable_offset=20,
                                                 aborted_transactions=[])))
    assert none_aborted["aborted_transactions"] == []
    uncommitted = _partition(ex.answer(_fetched(last_stable_offset=12)))
    assert uncommitted["last_stable_offset"] == 12
    assert uncommitted["aborted_transactions"] is None


@pytest.mark.parametrize("version", [4, 11])
def test_fetch_without_a_last_stable_offset_from_the_broker_takes_the_high_watermark(
        version: int) -> None:
    ex = Exchange(FetchRequest, version, _fetch(version, 0))
    assert _partition(ex.answer(_fetched()))["last_stable_offset"] == 20
    failed = _partition(ex.answer(_fetched(error_code=E.NOT_LEADER_OR_FOLLOWER,
                                           high_watermark=-1)))
    assert (failed["error_code"], failed["last_stable_offset"]) == (6, -1)


@pytest.mark.parametrize("version", [4, 11])
def test_a_refused_fetch_has_no_stable_offset_nor_aborted_list(version: int) -> None:
    ex = Exchange(FetchRequest, version, _fetch(version, 1))
    refused = _partition(ex.answer(m.FetchResponse(error_code=E.TOPIC_AUTHORIZATION_FAILED)))
    assert (refused["error_code"], refused["last_stable_offset"],
            refused["aborted_transactions"]) == (29, -1, None)


# --- Produce (0): a transactional producer's ----------------------------------------------


@pytest.mark.parametrize("version", [3, 8])
def test_a_transactional_produce_carries_its_transactional_id(version: int) -> None:
    fields: Body = {"transactional_id": "tx-1", "acks": -1, "timeout_ms": 30_000,
                    "topic_data": [{"name": "t", "partition_data": [
                        {"index": 0, "records": None}]}]}
    request = Exchange(ProduceRequest, version, fields).request()
    assert request == m.ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
        m.TopicProduceData(name="t", partition_data=[
            m.PartitionProduceData(index=0, records=b"")])], transactional_id="tx-1")


# --- FindCoordinator (10): a transaction's -------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_find_coordinator_of_a_transaction_goes_to_the_broker(version: int) -> None:
    ex = Exchange(FindCoordinatorRequest, version, {"key": "tx-1", "key_type": 1})
    assert ex.request() == m.FindCoordinatorRequest(key="tx-1", key_type=1)
    found = ex.answer(m.FindCoordinatorResponse(node_id=2, host="kafka-2", port=9093))
    assert found == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                     "node_id": 2, "host": "kafka-2", "port": 9093}
