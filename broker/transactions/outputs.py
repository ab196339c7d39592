"""What the transaction coordinator returns: replies, record writes and marker work, all
plain data, plus the answers of its admin reads and its counters.

The shell executes a :class:`Result` as it comes: store each :class:`Write`'s record in
its ``__transaction_state`` partition and report the outcome (``stored`` /
``write_failed``), send each :class:`Reply`, and carry out each :class:`MarkerWork`
(write the control records, then ``markers_written`` / ``markers_failed``). A reply that
depends on a write is not in the Result that made the write: it comes in the Result of
``stored`` (or of ``write_failed``, carrying the failure), so what a client is told always
matches what was stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from groupwire.broker.transactions.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Partition,
    TxnRecord,
)
from groupwire.broker.transactions.state import TxnState
from groupwire.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the request the shell called with ``token``. ``producer_id`` and
    ``producer_epoch`` are set on InitProducerId's and EndTxn's NONE answers, else -1."""

    token: int
    code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class Write:
    """Store ``record`` (``record.to_kv()``) in ``__transaction_state`` partition
    ``partition``, then tell the coordinator ``stored(token)`` or ``write_failed(token)``."""

    token: int
    partition: int
    record: TxnRecord


@dataclass(frozen=True, slots=True)
class MarkerWork:
    """Write a COMMIT (``commit``) or ABORT control record for ``producer_id`` /
    ``producer_epoch`` into each data partition in ``partitions`` (Kafka's
    WriteTxnMarkers), stamped with ``coordinator_epoch`` so a partition can refuse
    markers from a coordinator that has since been replaced. Then tell the coordinator
    ``markers_written(token)``, or ``markers_failed(token, retry)`` with the partitions to
    try again (any other counts as done: a partition that refuses the marker as fenced
    or stale needs none from this coordinator)."""

    token: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[Partition, ...]


Transition = tuple[str, TxnState, TxnState]
"""``(transactional_id, from, to)``: a move that took effect (its record was stored)."""


@dataclass(frozen=True, slots=True)
class Result:
    """Everything one input produced. ``transitions`` needs no action: it is there so a
    result tells every state change (for logs, and for tests that check the table)."""

    replies: tuple[Reply, ...] = ()
    writes: tuple[Write, ...] = ()
    markers: tuple[MarkerWork, ...] = ()
    transitions: tuple[Transition, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.replies or self.writes or self.markers or self.transitions)


EMPTY_RESULT: Final = Result()


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """One transactional id as DescribeTransactions answers it. When ``error_code`` is
    not NONE (NOT_COORDINATOR, TRANSACTIONAL_ID_NOT_FOUND, INVALID_REQUEST) only the id
    is meaningful. ``start_ms`` is wall-clock, -1 when no transaction is open."""

    transactional_id: str
    error_code: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: tuple[Partition, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnListing:
    """ListTransactions' answer over the hosted partitions, sorted by transactional id.
    ``unknown_state_filters``: the filters that name no state (Kafka reports them and
    matches the others)."""

    transactions: tuple[ListedTransaction, ...]
    unknown_state_filters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnCounters:
    """Totals since this coordinator was made, for the shell to export as metrics. Each
    counts records stored (decisions made), not requests received."""

    commits: int = 0
    """PrepareCommit stored: an EndTxn(commit) accepted."""
    aborts_client: int = 0
    """PrepareAbort stored for an EndTxn(abort)."""
    aborts_timeout: int = 0
    """PrepareAbort stored for a transaction past its timeout (its producer fenced)."""
    aborts_fenced: int = 0
    """PrepareAbort stored because InitProducerId from a new producer fenced the open
    transaction of the old one."""
    producers_fenced: int = 0
    """Requests answered PRODUCER_FENCED."""
    ids_expired: int = 0
    """Tombstones stored for transactional ids idle past their expiration."""


WRITE_ERRORS: Final = MappingProxyType({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
})
"""Kafka's translation of a failed ``__transaction_state`` append into what the waiting
client is told (``TransactionStateManager.appendTransactionToLog``)."""


def write_error_code(append_error: ErrorCode) -> ErrorCode:
    """The code to pass ``write_failed`` for a log append that failed with ``append_error``."""
    return WRITE_ERRORS.get(append_error, append_error)
