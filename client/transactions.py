"""A transactional producer's transaction state, as pure bookkeeping (Kafka's
TransactionManager without its I/O).

No asyncio, no clock: the producer asks :class:`TransactionManager` whether a call is
legal now, tells it what the transaction coordinator answered, and reads from it what to
send next (the partitions to add before their first batch goes). :func:`outcome_of`
sorts the coordinator's error codes into what the producer does about them.

States, as Kafka's producer has them::

    UNINITIALIZED -> READY                  start(): InitProducerId answered
    READY -> IN_TRANSACTION                 begin_transaction()
    IN_TRANSACTION -> COMMITTING -> READY   commit_transaction(), READY once EndTxn answers
    IN_TRANSACTION -> ABORTING -> READY     abort_transaction(), likewise
    ABORTABLE_ERROR -> ABORTING -> READY    abort_transaction(): the only way out
    IN_TRANSACTION, COMMITTING -> ABORTABLE_ERROR   a record or a step failed

and FATAL_ERROR from anywhere (fenced by a newer producer with the same transactional
id, refused by ACLs, a state the coordinator says is invalid): every later call raises
the error that caused it. A commit or an abort whose exchange timed out may be called
again (the state stays COMMITTING or ABORTING); an abortable error during a commit leaves
ABORTABLE_ERROR (the commit raises, an abort is allowed); one during an abort changes
nothing (the transaction is being aborted anyway).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from groupwire.client.errors import (
    CommitFailedError,
    GroupwireError,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortableError,
    error_for,
)
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode

__all__ = ["ConsumerGroupMetadata", "Outcome", "TransactionManager", "TxnState",
           "coordinator_error", "outcome_of", "severity"]


class TxnState(enum.Enum):
    """Where a transactional producer's transaction is."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's place in its group, as ``Consumer.group_metadata()`` gives it (Kafka's
    ConsumerGroupMetadata): ``Producer.send_offsets_to_transaction`` sends it with the
    offsets, so that the group coordinator refuses them once this member is no longer
    the group's in this generation (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class Outcome(enum.Enum):
    """What the producer does about a transaction coordinator's (or a group
    coordinator's, for TxnOffsetCommit) answer."""

    DONE = "done"
    RETRY = "retry"
    """Ask again after a backoff (the coordinator is busy or loading)."""
    FIND_COORDINATOR = "find_coordinator"
    """The coordinator moved or is not up: look it up again, then ask again."""
    ABORTABLE = "abortable"
    """The transaction cannot commit; the producer stays usable once it is aborted."""
    FATAL = "fatal"
    """The producer cannot go on."""


_FIND_AGAIN: Final = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_RETRY: Final = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.OPERATION_NOT_ATTEMPTED,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNSTABLE_OFFSET_COMMIT,
})
_ABORTABLE: Final = frozenset({
    ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
    # TxnOffsetCommit from a consumer no longer in the group's generation (KIP-447)
    ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.REBALANCE_IN_PROGRESS,
})
_FENCED: Final = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
_MEMBERSHIP: Final = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                ErrorCode.FENCED_INSTANCE_ID,
                                ErrorCode.REBALANCE_IN_PROGRESS})


def outcome_of(code: int) -> Outcome:
    """How Kafka's producer treats ``code`` in an answer to InitProducerId,
    AddPartitionsToTxn, AddOffsetsToTxn, EndTxn or TxnOffsetCommit: an error it does not
    expect is fatal, as in Kafka."""
    if code == ErrorCode.NONE:
        return Outcome.DONE
    if code in _FIND_AGAIN:
        return Outcome.FIND_COORDINATOR
    if code in _RETRY:
        return Outcome.RETRY
    if code in _ABORTABLE:
        return Outcome.ABORTABLE
    return Outcome.FATAL


_SEVERITY: Final = {Outcome.DONE: 0, Outcome.RETRY: 1, Outcome.FIND_COORDINATOR: 2,
                    Outcome.ABORTABLE: 3, Outcome.FATAL: 4}


def severity(code: int) -> int:
    """How much ``code`` weighs among an answer's codes (one per partition): the
    producer acts on the heaviest, a fatal one before an abortable one before a retry."""
    return _SEVERITY[outcome_of(code)]


def coordinator_error(code: int, message: str, *, transactional_id: str,
                      group_id: str | None = None, topic: str | None = None,
                      ) -> GroupwireError:
    """The exception for a coordinator's error ``code``: an old epoch is
    :class:`ProducerFencedError` (as Kafka's producer reports INVALID_PRODUCER_EPOCH from
    the coordinator), a refused member's offsets :class:`CommitFailedError`."""
    if code in _FENCED:
        return ProducerFencedError(
            f"transactional id {transactional_id!r}: another producer with this id started "
            f"since ({ErrorCode.name_of(code)}; {message})")
    if code in _MEMBERSHIP:
        return CommitFailedError(
            f"group {group_id!r} refused the transaction's offsets "
            f"({ErrorCode.name_of(code)}): the consumer is no longer the group's member in "
            f"this generation; abort the transaction")
    return error_for(code, message, topic=topic, group_id=group_id)


class TransactionManager:
    """The state of one transactional id's transactions in one producer."""

    __slots__ = ("_error", "begun", "bump_epoch", "groups", "partitions", "state",
                 "transaction_timeout_ms", "transactional_id")

    def __init__(self, transactional_id: str, transaction_timeout_ms: int) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        if transaction_timeout_ms <= 0:
            raise ValueError("transaction_timeout_ms must be > 0")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.begun = 0
        """Transactions begun so far: a call that waited can tell whether the transaction
        it started in is still the one open."""
        self.partitions: set[TopicPartition] = set()
        """Partitions the coordinator knows are in the transaction (AddPartitionsToTxn)."""
        self.groups: set[str] = set()
        """Groups whose offsets are in the transaction (AddOffsetsToTxn)."""
        self.bump_epoch = False
        """A batch failed whose records the broker may hold: once the transaction is
        aborted, the producer bumps its epoch (InitProducerId with its id and epoch,
        KIP-360), so that its sequence numbers start again at 0."""
        self._error: BaseException | None = None

    # --- what the application may do now -------------------------------------------------

    @property
    def error(self) -> BaseException | None:
        """The abortable or fatal error the transaction is in (None otherwise)."""
        return self._error

    @property
    def in_transaction(self) -> bool:
        return self.state is TxnState.IN_TRANSACTION

    @property
    def sending(self) -> bool:
        """Whether the transaction's batches may go (in it, or committing it)."""
        return self.state is TxnState.IN_TRANSACTION or self.state is TxnState.COMMITTING

    @property
    def fatal(self) -> bool:
        return self.state is TxnState.FATAL_ERROR

    @property
    def started(self) -> bool:
        """Whether the coordinator knows of the transaction (a partition or a group was
        added): otherwise it ends without EndTxn."""
        return bool(self.partitions or self.groups)

    def check_usable(self, what: str) -> None:
        """Raise the fatal or abortable error the transaction is in, if any."""
        if self.state is TxnState.FATAL_ERROR:
            assert self._error is not None
            raise self._error
        if self.state is TxnState.ABORTABLE_ERROR:
            raise self._abortable(what)

    def check_send(self, what: str = "send", begun: int | None = None) -> None:
        """Raise unless records may be added: in a transaction, and only there (with
        ``begun``: still the transaction :attr:`begun` counted then)."""
        if self.state is TxnState.IN_TRANSACTION:
            if begun is not None and begun != self.begun:
                raise IllegalStateError(
                    f"{what}: the transaction it was called in ended while it waited")
            return
        self.check_usable(what)
        if self.state is TxnState.UNINITIALIZED:
            raise IllegalStateError(f"{what}: start() the transactional producer first")
        raise IllegalStateError(
            f"{what}: a transactional producer sends only inside a transaction "
            f"(begin_transaction() first; the transaction is {self.state.value})")

    def initialized(self) -> None:
        """InitProducerId answered: transactions may begin."""
        if self.state is not TxnState.UNINITIALIZED:
            raise IllegalStateError(f"initialized in state {self.state.value}")
        self.state = TxnState.READY

    def begin(self) -> None:
        """READY -> IN_TRANSACTION."""
        if self.state is TxnState.READY:
            self.state = TxnState.IN_TRANSACTION
            self.begun += 1
            return
        self.check_usable("begin_transaction")
        if self.state is TxnState.UNINITIALIZED:
            raise IllegalStateError("begin_transaction: start() the producer first")
        if self.state is TxnState.IN_TRANSACTION:
            raise IllegalStateError("begin_transaction: a transaction is already in progress")
        raise IllegalStateError(
            f"begin_transaction: the last transaction is still {self.state.value} (its "
            f"commit or abort did not finish: call it again)")

    def begin_commit(self) -> None:
        """IN_TRANSACTION -> COMMITTING (again COMMITTING: a commit called again after
        its exchange timed out)."""
        if self.state is TxnState.IN_TRANSACTION or self.state is TxnState.COMMITTING:
            self.state = TxnState.COMMITTING
            return
        self.check_usable("commit_transaction")
        if self.state is TxnState.ABORTING:
            raise IllegalStateError("commit_transaction: the transaction is being aborted")
        raise IllegalStateError("commit_transaction: no transaction (begin_transaction() "
                                "first)")

    def begin_abort(self) -> None:
        """IN_TRANSACTION, ABORTABLE_ERROR (or ABORTING again) -> ABORTING."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                          TxnState.ABORTING):
            self.state = TxnState.ABORTING
            return
        self.check_usable("abort_transaction")
        if self.state is TxnState.COMMITTING:
            raise IllegalStateError("abort_transaction: the transaction is being committed "
                                    "(call commit_transaction() again)")
        raise IllegalStateError("abort_transaction: no transaction (begin_transaction() "
                                "first)")

    def check_offsets(self) -> None:
        """Raise unless offsets may be added (in a transaction)."""
        self.check_send("send_offsets_to_transaction")

    # --- what the coordinator said -------------------------------------------------------

    def partitions_to_add(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Of ``tps`` (partitions with batches to send), those to add to the transaction
        before their first batch goes, sorted."""
        known = self.partitions
        return sorted({tp for tp in tps if tp not in known})

    def partitions_added(self, tps: Iterable[TopicPartition]) -> None:
        self.partitions.update(tps)

    def group_added(self, group_id: str) -> None:
        self.groups.add(group_id)

    def ended(self) -> None:
        """EndTxn answered: the coordinator holds nothing more of the transaction, even
        if the abort's epoch bump after it is still to be done (and called again)."""
        self.partitions.clear()
        self.groups.clear()

    def completed(self) -> None:
        """EndTxn answered (or nothing to end): COMMITTING or ABORTING -> READY."""
        if self.state not in (TxnState.COMMITTING, TxnState.ABORTING):
            raise IllegalStateError(f"completed in state {self.state.value}")
        self.state = TxnState.READY
        self.partitions.clear()
        self.groups.clear()
        self._error = None

    def abortable_error(self, exc: BaseException) -> None:
        """The transaction cannot commit (a record failed, a step was refused)."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.state = TxnState.ABORTABLE_ERROR
            self._error = exc
        # ABORTING: aborted anyway; ABORTABLE_ERROR: the first error stays the cause;
        # FATAL_ERROR stays; READY / UNINITIALIZED hold no transaction to spoil

    def fatal_error(self, exc: BaseException) -> None:
        """The producer cannot go on; the first fatal error is the one raised."""
        if self.state is not TxnState.FATAL_ERROR:
            self.state = TxnState.FATAL_ERROR
            self._error = exc

    def _abortable(self, what: str) -> TransactionAbortableError:
        cause = self._error
        err = TransactionAbortableError(
            f"{what}: the transaction cannot commit ({cause!s} [{type(cause).__name__}]): "
            f"abort_transaction() first")
        err.__cause__ = cause
        return err
