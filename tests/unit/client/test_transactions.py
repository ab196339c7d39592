"""Transactions in the SDK without a broker: the transaction manager's state machine (legal
and illegal calls, abortable versus fatal errors), and the Producer's transactional calls
against a fake broker whose answers each test scripts (the coordinator found by
transactional id, partitions added before their first batch, EndTxn after the records,
offsets through both coordinators, retries, fencing, aborts, the epoch bump)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from groupwire import OffsetAndMetadata, Producer, TopicPartition
from groupwire.client.transactions import (
    ConsumerGroupMetadata,
    Outcome,
    TransactionManager,
    TxnState,
    coordinator_error,
    outcome_of,
    severity,
)
from groupwire.errors import (
    CommitFailedError,
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidTxnStateError,
    MessageTooLargeError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalError,
    TransactionalIdAuthorizationFailedError,
    error_for,
)
from groupwire.protocol.batches import TRANSACTIONAL, BatchHeader, decode_records, read_header
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
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
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
    TxnTopicResult,
)
from tests.unit.client.sasl_fake import SaslFake

BOUND_S = 10
PID = 100
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


# --- the state machine --------------------------------------------------------------------


def _ready() -> TransactionManager:
    txn = TransactionManager("tx", 60000)
    txn.initialized()
    return txn


def test_a_transaction_goes_ready_in_committing_ready_and_ready_in_aborting_ready() -> None:
    txn = TransactionManager("tx", 60000)
    assert txn.state is TxnState.UNINITIALIZED
    txn.initialized()
    txn.begin()
    assert txn.in_transaction and txn.sending
    txn.check_send()
    assert txn.partitions_to_add([TP1, TP0, TP1]) == [TP0, TP1]
    txn.partitions_added([TP0])
    assert txn.partitions_to_add([TP0, TP1]) == [TP1] and txn.started
    txn.begin_commit()
    assert txn.state is TxnState.COMMITTING and txn.sending
    txn.begin_commit()  # called again after its exchange timed out
    txn.completed()
    assert txn.state is TxnState.READY and not txn.started and not txn.partitions
    txn.begin()
    txn.group_added("g")
    assert txn.started
    txn.begin_abort()
    txn.begin_abort()
    assert txn.state is TxnState.ABORTING and not txn.sending
    txn.completed()
    assert txn.state is TxnState.READY and not txn.groups


@pytest.mark.parametrize(("setup", "call", "says"), [
    ([], "begin", "start()"),
    ([], "check_send", "start()"),
    (["initialized"], "check_send", "begin_transaction() first"),
    (["initialized"], "begin_commit", "no transaction"),
    (["initialized"], "begin_abort", "no transaction"),
    (["initialized"], "check_offsets", "begin_transaction() first"),
    (["initialized", "begin"], "begin", "already in progress"),
    (["initialized", "begin", "begin_commit"], "check_send", "committing"),
    (["initialized", "begin", "begin_commit"], "begin_abort", "being committed"),
    (["initialized", "begin", "begin_commit"], "begin", "still committing"),
    (["initialized", "begin", "begin_abort"], "begin_commit", "being aborted"),
    (["initialized", "begin", "begin_abort"], "check_send", "aborting"),
])
def test_calls_out_of_turn_are_illegal_and_change_nothing(setup: list[str], call: str,
                                                          says: str) -> None:
    txn = TransactionManager("tx", 60000)
    for step in setup:
        getattr(txn, step)()
    before = txn.state
    with pytest.raises(IllegalStateError, match=re.escape(says)):
        getattr(txn, call)()
    assert txn.state is before


def test_an_abortable_error_refuses_commit_and_sends_until_the_abort_clears_it() -> None:
    txn = _ready()
    txn.begin()
    cause = MessageTooLargeError("t[0]")
    txn.abortable_error(cause)
    txn.abortable_error(RequestTimedOutError("later"))  # the first cause stays
    assert txn.state is TxnState.ABORTABLE_ERROR and txn.error is cause and not txn.sending
    for call in (txn.begin_commit, txn.check_send, txn.check_offsets, txn.begin):
        with pytest.raises(TransactionAbortableError) as info:
            call()
        assert info.value.__cause__ is cause and "abort_transaction()" in str(info.value)
        assert isinstance(info.value, TransactionalError)
    txn.begin_abort()
    txn.completed()
    assert txn.state is TxnState.READY and txn.error is None
    txn.begin()  # a new transaction, as if nothing happened


def test_an_abortable_error_while_committing_fails_the_commit_and_while_aborting_is_moot(
        ) -> None:
    txn = _ready()
    txn.begin()
    txn.begin_commit()
    txn.abortable_error(MessageTooLargeError("t[0]"))
    assert txn.state is TxnState.ABORTABLE_ERROR
    txn.begin_abort()
    txn.abortable_error(MessageTooLargeError("t[1]"))
    assert txn.state is TxnState.ABORTING and txn.error is not None
    for state_before in ("ready", "uninitialized"):
        other = _ready() if state_before == "ready" else TransactionManager("tx", 1)
        other.abortable_error(MessageTooLargeError("x"))  # no transaction to spoil
        assert other.state.value == state_before


@pytest.mark.parametrize("steps", [[], ["begin"], ["begin", "begin_commit"],
                                   ["begin", "begin_abort"]])
def test_a_fatal_error_is_raised_by_every_later_call(steps: list[str]) -> None:
    txn = _ready()
    for step in steps:
        getattr(txn, step)()
    fenced = ProducerFencedError("another producer")
    txn.fatal_error(fenced)
    txn.fatal_error(InvalidTxnStateError("later"))  # the first fatal error stays
    txn.abortable_error(MessageTooLargeError("x"))  # changes nothing now
    assert txn.fatal and txn.error is fenced
    for call in (txn.begin, txn.begin_commit, txn.begin_abort, txn.check_send,
                 txn.check_offsets):
        with pytest.raises(ProducerFencedError) as info:
            call()
        assert info.value is fenced
    with pytest.raises(IllegalStateError):
        txn.completed()


def test_a_send_that_waited_is_checked_against_the_transaction_it_began_in() -> None:
    txn = _ready()
    txn.begin()
    begun = txn.begun
    txn.check_send(begun=begun)
    txn.begin_commit()
    txn.completed()
    txn.begin()
    with pytest.raises(IllegalStateError, match="ended while it waited"):
        txn.check_send(begun=begun)
    txn.check_send(begun=txn.begun)


def test_a_manager_needs_an_id_and_a_positive_timeout() -> None:
    with pytest.raises(ValueError):
        TransactionManager("", 60000)
    with pytest.raises(ValueError):
        TransactionManager("tx", 0)


@pytest.mark.parametrize(("code", "outcome"), [
    (ErrorCode.NONE, Outcome.DONE),
    (ErrorCode.NOT_COORDINATOR, Outcome.FIND_COORDINATOR),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, Outcome.FIND_COORDINATOR),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Outcome.RETRY),
    (ErrorCode.CONCURRENT_TRANSACTIONS, Outcome.RETRY),
    (ErrorCode.OPERATION_NOT_ATTEMPTED, Outcome.RETRY),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, Outcome.RETRY),
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, Outcome.ABORTABLE),
    (ErrorCode.GROUP_AUTHORIZATION_FAILED, Outcome.ABORTABLE),
    (ErrorCode.ILLEGAL_GENERATION, Outcome.ABORTABLE),
    (ErrorCode.UNKNOWN_MEMBER_ID, Outcome.ABORTABLE),
    (ErrorCode.FENCED_INSTANCE_ID, Outcome.ABORTABLE),
    (ErrorCode.PRODUCER_FENCED, Outcome.FATAL),
    (ErrorCode.INVALID_PRODUCER_EPOCH, Outcome.FATAL),
    (ErrorCode.INVALID_TXN_STATE, Outcome.FATAL),
    (ErrorCode.INVALID_PRODUCER_ID_MAPPING, Outcome.FATAL),
    (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Outcome.FATAL),
    (ErrorCode.INVALID_TRANSACTION_TIMEOUT, Outcome.FATAL),
    (ErrorCode.UNKNOWN_SERVER_ERROR, Outcome.FATAL),  # unexpected: fatal, as in Kafka
])
def test_coordinator_answers_are_sorted_as_kafkas_producer_sorts_them(
        code: ErrorCode, outcome: Outcome) -> None:
    assert outcome_of(code) is outcome


def test_the_heaviest_code_of_an_answer_is_acted_on() -> None:
    codes = [ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.NOT_COORDINATOR,
             ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.PRODUCER_FENCED]
    assert [severity(c) for c in codes] == sorted(severity(c) for c in codes)
    assert max(codes, key=severity) == ErrorCode.PRODUCER_FENCED


def test_an_old_epoch_is_fenced_and_a_stale_member_s_offsets_a_failed_commit() -> None:
    for code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        err = coordinator_error(code, "EndTxn", transactional_id="tx")
        assert isinstance(err, ProducerFencedError) and "'tx'" in str(err)
    stale = coordinator_error(ErrorCode.ILLEGAL_GENERATION, "x", transactional_id="tx",
                              group_id="g")
    assert isinstance(stale, CommitFailedError) and "'g'" in str(stale)
    assert isinstance(coordinator_error(ErrorCode.INVALID_TXN_STATE, "x",
                                        transactional_id="tx"), InvalidTxnStateError)
    assert isinstance(error_for(ErrorCode.CONCURRENT_TRANSACTIONS),
                      ConcurrentTransactionsError)
    assert error_for(ErrorCode.CONCURRENT_TRANSACTIONS).retriable


# --- the producer against a fake broker ---------------------------------------------------


class Broker:
    """One node leading both partitions of topic "t" and coordinating everything.
    ``errors[request type]`` holds codes to answer requests of that type with first;
    InitProducerId hands out producer id 100 at epoch 0, and bumps the epoch when asked
    with the id and epoch held (KIP-360)."""

    def __init__(self) -> None:
        self.fake = SaslFake({}, sasl=False, handler=self.answer)
        self.errors: dict[type[Request], list[int]] = {}
        self.produce_errors: dict[int, list[int]] = {}
        self.epoch = 0
        self.sent: list[tuple[int, BatchHeader, list[bytes | None]]] = []
        self.stored: dict[int, list[bytes | None]] = {0: [], 1: []}

    @property
    def requests(self) -> list[Request]:
        return [r for _, r in self.fake.requests]

    def of(self, kind: type[Request]) -> list[Request]:
        return [r for r in self.requests if isinstance(r, kind)]

    def kinds(self) -> list[str]:
        """The transactional requests and Produces, in order."""
        return [type(r).__name__.removesuffix("Request") for r in self.requests
                if not isinstance(r, MetadataRequest)]

    def _code(self, request: Request) -> int:
        queued = self.errors.get(type(request))
        return queued.pop(0) if queued else ErrorCode.NONE

    def answer(self, request: Request) -> Response:
        code = self._code(request)
        if isinstance(request, MetadataRequest):
            return MetadataResponse(
                brokers=[MetadataBroker(node_id=1, host=self.fake.host, port=self.fake.port)],
                cluster_id="fake", controller_id=1,
                topics=[MetadataTopic(name="t", partitions=[
                    MetadataPartition(partition_index=p, leader_id=1, leader_epoch=0,
                                      replica_nodes=[1], isr_nodes=[1]) for p in (0, 1)])])
        if isinstance(request, FindCoordinatorRequest):
            if code:
                return FindCoordinatorResponse(error_code=code)
            return FindCoordinatorResponse(node_id=1, host=self.fake.host, port=self.fake.port)
        if isinstance(request, InitProducerIdRequest):
            if code:
                return InitProducerIdResponse(error_code=code)
            if request.producer_id >= 0:
                self.epoch += 1
            return InitProducerIdResponse(producer_id=PID, producer_epoch=self.epoch)
        if isinstance(request, AddPartitionsToTxnRequest):
            return AddPartitionsToTxnResponse(results=[TxnTopicResult(name=t.name, results=[
                TxnPartitionResult(partition_index=p, error_code=code)
                for p in t.partitions]) for t in request.topics])
        if isinstance(request, AddOffsetsToTxnRequest):
            return AddOffsetsToTxnResponse(error_code=code)
        if isinstance(request, TxnOffsetCommitRequest):
            return TxnOffsetCommitResponse(topics=[TxnTopicResult(name=t.name, results=[
                TxnPartitionResult(partition_index=p.partition_index, error_code=code)
                for p in t.partitions]) for t in request.topics])
        if isinstance(request, EndTxnRequest):
            return EndTxnResponse(error_code=code)
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


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    b = Broker()
    async with b.fake:
        yield b


def producer(broker: Broker, **options: object) -> Producer:
    options = {"linger_ms": 0, "request_timeout_ms": 5000, "retry_backoff_ms": 10,
               "transactional_id": "tx-1", **options}
    return Producer(broker.fake.address, **options)  # type: ignore[arg-type]


def test_a_transactional_id_implies_idempotence_and_refuses_settings_against_it() -> None:
    p = Producer(transactional_id="tx")
    assert p.enable_idempotence and p.transactional_id == "tx"
    assert Producer().transactional_id is None
    with pytest.raises(ValueError, match="idempotence"):
        Producer(transactional_id="tx", enable_idempotence=False)
    with pytest.raises(ValueError, match="acks"):
        Producer(transactional_id="tx", acks=1)
    with pytest.raises(ValueError):
        Producer(transactional_id="")
    with pytest.raises(ValueError):
        Producer(transactional_id="tx", transaction_timeout_ms=0)


async def test_start_finds_the_transaction_coordinator_and_inits_the_producer_id(
        broker: Broker) -> None:
    broker.errors[InitProducerIdRequest] = [ErrorCode.CONCURRENT_TRANSACTIONS,
                                            ErrorCode.NOT_COORDINATOR]
    broker.errors[FindCoordinatorRequest] = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    async with asyncio.timeout(BOUND_S), producer(broker, transaction_timeout_ms=9000):
        pass
    finds = broker.of(FindCoordinatorRequest)
    # found (after one refusal), then again after NOT_COORDINATOR
    assert [(f.key, f.key_type) for f in finds] == [("tx-1", 1)] * 3
    inits = broker.of(InitProducerIdRequest)
    assert len(inits) == 3
    assert all(isinstance(r, InitProducerIdRequest) and r.transactional_id == "tx-1"
               and r.transaction_timeout_ms == 9000 and r.producer_id == -1 for r in inits)
    assert broker.kinds()[-1] != "EndTxn"  # no transaction was open at close


async def test_start_raises_a_fatal_refusal(broker: Broker) -> None:
    broker.errors[InitProducerIdRequest] = [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    p = producer(broker)
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            await p.start()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            await p.start()  # fatal: raised again, not asked again
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            await p.begin_transaction()
        await p.close()
    assert len(broker.of(InitProducerIdRequest)) == 1


async def test_sending_needs_a_transaction(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await p.send("t", b"v", partition=0)
        batch = p.create_batch()
        batch.append(value=b"v")
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await p.send_batch(batch, "t", partition=0)
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await p.send_offsets_to_transaction({TP0: 1}, "g")
        with pytest.raises(IllegalStateError):
            await p.commit_transaction()
    assert broker.of(ProduceRequest) == []
    with pytest.raises(IllegalStateError, match="transactional_id"):
        await Producer().begin_transaction()


async def test_a_send_waiting_while_its_transaction_ends_is_refused(broker: Broker) -> None:
    """A send that waits (for metadata here) while the application commits and begins
    the next transaction would put its record in the next one: refused instead."""
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        waiting, release = asyncio.Event(), asyncio.Event()
        real = p._partition_count

        async def slow(topic: str, *, refresh: bool = False) -> int:
            waiting.set()
            await release.wait()
            return await real(topic, refresh=refresh)

        p._partition_count = slow  # type: ignore[method-assign]
        await p.begin_transaction()
        late = asyncio.ensure_future(p.send("t", b"late", partition=0))
        await waiting.wait()
        await p.commit_transaction()
        await p.begin_transaction()
        release.set()
        with pytest.raises(IllegalStateError, match="ended while it waited"):
            await late
        await p.abort_transaction()
    assert broker.of(ProduceRequest) == []


async def test_partitions_are_added_before_their_first_batch_and_the_commit_comes_last(
        broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker, linger_ms=50) as p:
        await p.begin_transaction()
        futures = [await p.send("t", b"a", partition=0), await p.send("t", b"b", partition=1)]
        await p.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futures)
        await p.begin_transaction()
        await p.send_and_wait("t", b"c", partition=0)
        await p.send_and_wait("t", b"d", partition=0)
        await p.commit_transaction()
    assert broker.kinds() == ["FindCoordinator", "InitProducerId",
                              "AddPartitionsToTxn", "Produce", "EndTxn",
                              "AddPartitionsToTxn", "Produce", "Produce", "EndTxn"]
    first, second = broker.of(AddPartitionsToTxnRequest)
    assert isinstance(first, AddPartitionsToTxnRequest)
    # both partitions in one request (the batches lingered together)
    assert [(t.name, sorted(t.partitions)) for t in first.topics] == [("t", [0, 1])]
    assert (first.transactional_id, first.producer_id, first.producer_epoch) == ("tx-1", PID, 0)
    assert isinstance(second, AddPartitionsToTxnRequest)
    assert [(t.name, t.partitions) for t in second.topics] == [("t", [0])]
    ends = broker.of(EndTxnRequest)
    assert all(isinstance(e, EndTxnRequest) and e.committed for e in ends)
    assert all(h.attributes & TRANSACTIONAL and h.producer_id == PID for _, h, _ in broker.sent)
    # sequences go on across transactions under one epoch
    assert [h.base_sequence for part, h, _ in broker.sent if part == 0] == [0, 1, 2]


async def test_an_empty_transaction_ends_without_the_coordinator(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        await p.commit_transaction()
        await p.begin_transaction()
        await p.abort_transaction()
        async with p.transaction():
            pass
    assert broker.of(EndTxnRequest) == [] and broker.of(AddPartitionsToTxnRequest) == []


async def test_retriable_coordinator_answers_are_retried(broker: Broker) -> None:
    broker.errors[AddPartitionsToTxnRequest] = [ErrorCode.CONCURRENT_TRANSACTIONS,
                                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    broker.errors[EndTxnRequest] = [ErrorCode.NOT_COORDINATOR,
                                    ErrorCode.CONCURRENT_TRANSACTIONS]
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        meta = await p.send_and_wait("t", b"a", partition=0)
        await p.commit_transaction()
    assert meta.offset == 0
    assert len(broker.of(AddPartitionsToTxnRequest)) == 3
    assert len(broker.of(EndTxnRequest)) == 3
    assert len(broker.of(FindCoordinatorRequest)) == 2  # again after NOT_COORDINATOR


async def test_a_commit_that_times_out_may_be_called_again(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker, request_timeout_ms=200) as p:
        await p.begin_transaction()
        await p.send_and_wait("t", b"a", partition=0)
        broker.errors[EndTxnRequest] = [ErrorCode.CONCURRENT_TRANSACTIONS] * 1000
        with pytest.raises(ConcurrentTransactionsError):
            await p.commit_transaction()
        with pytest.raises(IllegalStateError, match="committing"):
            await p.begin_transaction()
        broker.errors[EndTxnRequest] = []
        await p.commit_transaction()
        await p.begin_transaction()
    assert isinstance(ends := broker.of(EndTxnRequest)[-1], EndTxnRequest) and ends.committed


async def test_abort_fails_the_records_not_sent_and_ends_the_transaction(
        broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker, linger_ms=60000) as p:
        await p.begin_transaction()
        await p.send("t", b"sent", partition=0)
        await p.flush()
        unsent = [await p.send("t", b"x", partition=1), await p.send("t", b"y", partition=0)]
        await p.abort_transaction()
        for future in unsent:
            with pytest.raises(TransactionAbortedError):
                await future
        await p.begin_transaction()  # a new one may begin
    assert broker.stored == {0: [b"sent"], 1: []}
    (end,) = broker.of(EndTxnRequest)
    assert isinstance(end, EndTxnRequest) and not end.committed
    assert broker.epoch == 0  # nothing sent was lost: no epoch bump


async def test_a_failed_record_makes_the_commit_raise_and_the_abort_clear_it(
        broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        await p.send_and_wait("t", b"ok", partition=1)
        broker.produce_errors[0] = [ErrorCode.MESSAGE_TOO_LARGE]
        with pytest.raises(MessageTooLargeError):
            await p.send_and_wait("t", b"big", partition=0)
        with pytest.raises(TransactionAbortableError) as info:
            await p.send("t", b"more", partition=1)
        assert isinstance(info.value.__cause__, MessageTooLargeError)
        with pytest.raises(TransactionAbortableError):
            await p.commit_transaction()
        await p.abort_transaction()
        async with p.transaction():
            await p.send_and_wait("t", b"next", partition=1)
    assert [(type(r).__name__, getattr(r, "committed", None)) for r in broker.requests
            if isinstance(r, EndTxnRequest)] == [("EndTxnRequest", False),
                                                 ("EndTxnRequest", True)]


async def test_a_record_refused_while_committing_fails_the_commit(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker, linger_ms=60000) as p:
        await p.begin_transaction()
        future = await p.send("t", b"big", partition=0)
        broker.produce_errors[0] = [ErrorCode.MESSAGE_TOO_LARGE]
        with pytest.raises(TransactionAbortableError):
            await p.commit_transaction()  # flushed: the record failed, nothing committed
        assert isinstance(future.exception(), MessageTooLargeError)
        await p.abort_transaction()
    (end,) = broker.of(EndTxnRequest)
    assert isinstance(end, EndTxnRequest) and not end.committed


@pytest.mark.parametrize("code", [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED])
async def test_a_batch_refused_for_an_old_epoch_fences_the_producer_for_good(
        broker: Broker, code: ErrorCode) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        broker.produce_errors[0] = [code]
        with pytest.raises(ProducerFencedError):
            await p.send_and_wait("t", b"zombie", partition=0)
        calls = [p.commit_transaction(), p.abort_transaction(), p.begin_transaction(),
                 p.send("t", b"again", partition=1),
                 p.send_offsets_to_transaction({TP0: 1}, "g")]
        for call in calls:
            with pytest.raises(ProducerFencedError):
                await call
    assert broker.of(EndTxnRequest) == []  # nothing aborted at close: nothing can be
    assert len(broker.of(ProduceRequest)) == 1


async def test_end_txn_answered_fenced_is_fatal(broker: Broker) -> None:
    broker.errors[EndTxnRequest] = [ErrorCode.PRODUCER_FENCED]
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        await p.send_and_wait("t", b"a", partition=0)
        with pytest.raises(ProducerFencedError):
            await p.commit_transaction()
        with pytest.raises(ProducerFencedError):
            await p.abort_transaction()
    assert len(broker.of(EndTxnRequest)) == 1


async def test_offsets_go_to_the_transaction_then_to_the_group_coordinator(
        broker: Broker) -> None:
    meta = ConsumerGroupMetadata("g", generation_id=5, member_id="m-1",
                                 group_instance_id="i-1")
    async with asyncio.timeout(BOUND_S), producer(broker) as p, p.transaction():
        await p.send_and_wait("t", b"out", partition=0)
        await p.send_offsets_to_transaction(
            {TopicPartition("in", 1): OffsetAndMetadata(3, "m"),
             TopicPartition("in", 0): 7}, meta)
        await p.send_offsets_to_transaction({TopicPartition("in", 0): 8}, "g")
    assert broker.kinds()[2:] == ["AddPartitionsToTxn", "Produce", "AddOffsetsToTxn",
                                  "FindCoordinator", "TxnOffsetCommit", "TxnOffsetCommit",
                                  "EndTxn"]
    (add,) = broker.of(AddOffsetsToTxnRequest)
    assert isinstance(add, AddOffsetsToTxnRequest) and add.group_id == "g"
    assert (add.producer_id, add.producer_epoch) == (PID, 0)
    find = broker.of(FindCoordinatorRequest)[-1]
    assert isinstance(find, FindCoordinatorRequest) and (find.key, find.key_type) == ("g", 0)
    first, plain = broker.of(TxnOffsetCommitRequest)
    assert isinstance(first, TxnOffsetCommitRequest)
    assert (first.group_id, first.generation_id, first.member_id,
            first.group_instance_id) == ("g", 5, "m-1", "i-1")
    assert [(t.name, [(q.partition_index, q.committed_offset, q.committed_metadata)
                      for q in t.partitions]) for t in first.topics] == [
        ("in", [(0, 7, None), (1, 3, "m")])]
    assert isinstance(plain, TxnOffsetCommitRequest)
    assert (plain.generation_id, plain.member_id) == (-1, "")  # a bare group id: unchecked


async def test_offsets_of_a_consumer_no_longer_in_the_generation_make_it_abortable(
        broker: Broker) -> None:
    broker.errors[TxnOffsetCommitRequest] = [ErrorCode.ILLEGAL_GENERATION]
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        with pytest.raises(CommitFailedError):
            await p.send_offsets_to_transaction({TP0: 1}, ConsumerGroupMetadata("g", 3, "m"))
        with pytest.raises(TransactionAbortableError):
            await p.commit_transaction()
        await p.abort_transaction()
    (end,) = broker.of(EndTxnRequest)  # the group was added: the coordinator must abort
    assert isinstance(end, EndTxnRequest) and not end.committed


async def test_bad_offsets_are_refused_before_anything_is_sent(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        with pytest.raises(ValueError):
            await p.send_offsets_to_transaction({TP0: -1}, "g")
        with pytest.raises(ValueError):
            await p.send_offsets_to_transaction({TP0: 1}, "")
        await p.send_offsets_to_transaction({}, "g")  # nothing to add
        await p.commit_transaction()
    assert broker.of(AddOffsetsToTxnRequest) == [] and broker.of(EndTxnRequest) == []


async def test_the_context_manager_commits_or_aborts(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        async with p.transaction():
            await p.send_and_wait("t", b"kept", partition=0)
        with pytest.raises(KeyError):
            async with p.transaction():
                await p.send_and_wait("t", b"dropped", partition=0)
                raise KeyError("the application failed")
        broker.produce_errors[1] = [ErrorCode.MESSAGE_TOO_LARGE]
        with pytest.raises(TransactionAbortableError):
            async with p.transaction():
                await p.send("t", b"fails", partition=1)
        async with p.transaction():  # the failed commit was aborted: usable again
            await p.send_and_wait("t", b"again", partition=0)
    assert [e.committed for e in broker.of(EndTxnRequest)  # type: ignore[attr-defined]
            ] == [True, False, False, True]


async def test_close_aborts_a_transaction_left_open(broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(broker) as p:
        await p.begin_transaction()
        await p.send_and_wait("t", b"a", partition=0)
    (end,) = broker.of(EndTxnRequest)
    assert isinstance(end, EndTxnRequest) and not end.committed


async def test_a_batch_whose_fate_is_unknown_bumps_the_epoch_after_the_abort(
        broker: Broker) -> None:
    """Retried until its delivery timeout, it may or may not be stored: the abort is
    followed by InitProducerId with the id and epoch held (KIP-360), and the next
    transaction numbers from 0 under the new epoch."""
    async with asyncio.timeout(BOUND_S), producer(
            broker, request_timeout_ms=200, delivery_timeout_ms=300) as p:
        await p.begin_transaction()
        await p.send_and_wait("t", b"a", partition=0)
        broker.produce_errors[0] = [ErrorCode.REQUEST_TIMED_OUT] * 1000
        with pytest.raises(RequestTimedOutError):
            await p.send_and_wait("t", b"lost", partition=0)
        broker.produce_errors[0] = []
        with pytest.raises(TransactionAbortableError):
            await p.commit_transaction()
        await p.abort_transaction()
        async with p.transaction():
            await p.send_and_wait("t", b"b", partition=0)
    bump = broker.of(InitProducerIdRequest)[-1]
    assert isinstance(bump, InitProducerIdRequest)
    assert (bump.transactional_id, bump.producer_id, bump.producer_epoch) == ("tx-1", PID, 0)
    numbered = [(h.producer_epoch, h.base_sequence) for part, h, _ in broker.sent
                if part == 0]
    assert numbered[0] == (0, 0) and set(numbered[1:-1]) == {(0, 1)}
    assert numbered[-1] == (1, 0)
    kinds = broker.kinds()
    assert kinds.index("EndTxn") < len(kinds) - 1 - kinds[::-1].index("InitProducerId")


async def test_an_abort_whose_epoch_bump_timed_out_is_called_again_without_endtxn(
        broker: Broker) -> None:
    async with asyncio.timeout(BOUND_S), producer(
            broker, request_timeout_ms=200, delivery_timeout_ms=300) as p:
        await p.begin_transaction()
        broker.produce_errors[0] = [ErrorCode.REQUEST_TIMED_OUT] * 1000
        with pytest.raises(RequestTimedOutError):
            await p.send_and_wait("t", b"lost", partition=0)
        broker.errors[InitProducerIdRequest] = [ErrorCode.CONCURRENT_TRANSACTIONS] * 1000
        with pytest.raises(ConcurrentTransactionsError):
            await p.abort_transaction()
        broker.errors[InitProducerIdRequest] = []
        await p.abort_transaction()
        await p.begin_transaction()
    assert len(broker.of(EndTxnRequest)) == 1
    assert broker.epoch == 1
