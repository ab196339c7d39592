"""The SDK's exceptions, rooted at :class:`GroupwireError`.

::

    GroupwireError
    ├── BrokerResponseError          the broker answered with an error code (``code``)
    │   └── one subclass per ErrorCode (``UnknownMemberIdError``,
    │       ``RebalanceInProgressError`` ...); ``error_for(code)`` picks it
    ├── CommitFailedError            the commit cannot succeed: membership or generation lost
    ├── IllegalStateError            the API was used in a way its state does not allow
    ├── TransactionalError           a transactional producer's transaction went wrong
    │   ├── TransactionAbortableError    it cannot commit: abort it, then go on
    │   ├── TransactionAbortedError      a record's transaction was aborted before it went
    │   └── ProducerFencedError,         fatal: another producer took the transactional id
    │       InvalidTxnStateError, ...    (BrokerResponseErrors too, one per code)
    ├── ListenerError                a rebalance-listener callback raised (``__cause__``)
    ├── BackgroundTaskError          a background task crashed (``__cause__``)
    ├── ClientClosedError            the client was closed
    ├── IncompatibleBrokerError      the broker speaks no version of an API the client needs
    └── BrokerNotAvailableError      no broker reachable in time (also a
        │                            ``ConnectionError``); ``BrokerNotAvailableResponseError``,
        │                            code 8, is both it and a BrokerResponseError
        └── TlsHandshakeError        the TLS handshake failed (certificate not trusted,
                                     a peer that does not speak TLS)

Security refusals are BrokerResponseErrors, never retried: ``AuthenticationFailedError``
(SASL_AUTHENTICATION_FAILED, raised when the client starts), and
``TopicAuthorizationFailedError`` / ``GroupAuthorizationFailedError`` (``.topic`` /
``.group_id`` name the resource) / ``ClusterAuthorizationFailedError``.

A transactional producer's errors are :class:`TransactionalError`s. Abortable ones leave
the transaction to be aborted (:class:`TransactionAbortableError`, whose ``__cause__`` is
what failed); fatal ones (:class:`ProducerFencedError`,
:class:`TransactionalIdAuthorizationFailedError`, :class:`InvalidTxnStateError`,
:class:`InvalidProducerIdMappingError`) are raised again by every later transactional
call: close the producer.

    ConnectionError
    └── ConnectionClosedError        a connection closed before its answer came; the
                                     outcome is unknown (not a GroupwireError, so
                                     ``except ConnectionError`` catches every lost link)

The wire's own errors are the protocol layer's and are re-exported here, as the SDK lets
them through: ``ProtocolError`` ← ``RemoteProtocolError`` (the broker broke the contract,
e.g. an undecodable answer) ← ``CorruptBatchError`` (fetched bytes that are no batch) ←
``CorruptRecordError`` (also a ``GroupwireError``: the consumer read every record before
``offset`` of ``topic_partition`` and cannot read the one there; seek past it).
"""

from __future__ import annotations

from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import CorruptBatchError
from groupwire.protocol.errors import ErrorCode, ProtocolError, RemoteProtocolError

__all__ = [
    "AuthenticationFailedError",
    "BackgroundTaskError",
    "BrokerNotAvailableError",
    "BrokerNotAvailableResponseError",
    "BrokerResponseError",
    "ClientClosedError",
    "ClusterAuthorizationFailedError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "ConnectionClosedError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptBatchError",
    "CorruptMessageError",
    "CorruptRecordError",
    "DuplicateResourceError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupwireError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "IllegalStateError",
    "IncompatibleBrokerError",
    "InconsistentGroupProtocolError",
    "InvalidCommitOffsetSizeError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "ListenerError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PartitionNotOwnedError",
    "PolicyViolationError",
    "ProducerFencedError",
    "ProtocolError",
    "RebalanceInProgressError",
    "RecordDeserializationError",
    "RemoteProtocolError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SecurityDisabledError",
    "TlsHandshakeError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionCoordinatorFencedError",
    "TransactionalError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownTopicOrPartitionError",
    "UnstableOffsetCommitError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "error_for",
]


class GroupwireError(Exception):
    """Root of every exception the SDK raises."""


class BrokerResponseError(GroupwireError):
    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", *, code: int | None = None) -> None:
        if code is not None:
            try:
                self.code = ErrorCode(code)
            except ValueError:
                self.code = ErrorCode.UNKNOWN_SERVER_ERROR
        self.raw_code = int(code) if code is not None else int(self.code)
        text = f"{ErrorCode.name_of(self.raw_code)}"
        super().__init__(f"{text}: {message}" if message else text)

    @property
    def retriable(self) -> bool:
        return self.code.retriable


class CommitFailedError(GroupwireError):
    """The group moved on (rebalanced, member removed or fenced): this commit cannot land."""


class IllegalStateError(GroupwireError):
    pass


class ListenerError(GroupwireError):
    """A rebalance-listener callback raised; the original exception is ``__cause__``."""


class ClientClosedError(GroupwireError):
    pass


class BackgroundTaskError(GroupwireError):
    """A client's background task crashed (a bug); the original exception is ``__cause__``.

    Raised from the next call that polls the client, instead of the crash going unseen.
    """


class BrokerNotAvailableError(GroupwireError, ConnectionError):
    """No broker of the bootstrap list could be reached (and checked) in time."""


class TlsHandshakeError(BrokerNotAvailableError):
    """The TLS handshake with a broker failed: its certificate is not trusted by the
    client's ``ssl_context``, the broker refused the client's certificate, or the peer
    does not speak TLS. Retrying the same address will not mend it."""


class IncompatibleBrokerError(GroupwireError):
    """The peer is no groupwire broker, or shares no version with this client of an API
    it needs; waiting will not mend either."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message
        """The cause without the address, for a caller that names the address itself."""


class ConnectionClosedError(ConnectionError):
    """The connection closed (or failed) before the response arrived."""


class CorruptRecordError(CorruptBatchError, GroupwireError):
    """A fetched record (or batch) at ``offset`` of ``topic_partition`` cannot be read.

    Kafka's consumer raises CorruptRecordException for this. Every record before it has
    been returned by earlier polls; polls raise this until the application moves on with
    ``seek(err.topic_partition, err.offset + 1)``, which skips this one record (a batch
    that is bad as a whole fails again at each of its offsets).
    """

    def __init__(self, topic_partition: TopicPartition, offset: int, message: str) -> None:
        super().__init__(f"{topic_partition} offset {offset}: {message}", offset=offset)
        self.message = message   # the cause alone; str() also says where
        self.topic_partition = topic_partition


class RecordDeserializationError(GroupwireError):
    """The consumer's ``key_deserializer`` or ``value_deserializer`` raised for the record
    at ``offset`` of ``topic_partition`` (Kafka's RecordDeserializationException); the
    deserializer's exception is ``__cause__``, ``part`` says which one (``"key"`` or
    ``"value"``).

    Handled as a :class:`CorruptRecordError` is (the bytes are fine, the application's
    reading of them is not, hence a class of its own): the records before it were
    returned, and polls raise this until ``seek(err.topic_partition, err.offset + 1)``
    skips the record, or ``seek(err.topic_partition, err.offset)`` reads it again.
    """

    def __init__(self, topic_partition: TopicPartition, offset: int, part: str,
                 cause: BaseException) -> None:
        self.message = f"the {part}_deserializer raised {type(cause).__name__}: {cause}"
        super().__init__(f"{topic_partition} offset {offset}: {self.message}")
        self.topic_partition = topic_partition
        self.offset = offset
        self.part = part
        self.__cause__ = cause


class TransactionalError(GroupwireError):
    """Root of a transactional producer's errors (those with a code are also
    BrokerResponseErrors)."""


class TransactionAbortableError(TransactionalError):
    """The transaction cannot commit: a record of it failed, or the broker refused one of
    its steps in a way that leaves the producer usable (the error is ``__cause__``).
    ``abort_transaction()`` is allowed, and then a new transaction; every other
    transactional call, and ``send``, raises this until then."""


class TransactionAbortedError(TransactionalError):
    """The record's transaction was aborted before the record was sent: it was never
    written (Kafka's TransactionAbortedException)."""


# One class per code, so applications can catch exactly what they handle.


class UnknownServerError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(BrokerResponseError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(BrokerResponseError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(BrokerResponseError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(BrokerResponseError):
    """The broker does not lead the partition (any more): metadata is refreshed and the
    request routed to the new leader."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(BrokerResponseError):
    code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableResponseError(BrokerResponseError, BrokerNotAvailableError):
    """A broker answered that a broker it needs is not available (code 8); not
    retriable, as in Kafka, but an ``except BrokerNotAvailableError`` catches it too."""

    code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(BrokerResponseError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE


class MessageTooLargeError(BrokerResponseError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetMetadataTooLargeError(BrokerResponseError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class CoordinatorLoadInProgressError(BrokerResponseError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(BrokerResponseError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(BrokerResponseError):
    code = ErrorCode.NOT_COORDINATOR


class InvalidTopicError(BrokerResponseError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class NotEnoughReplicasError(BrokerResponseError):
    """acks=all: fewer in-sync replicas than the broker's minimum; nothing was appended."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    """acks=all: appended, but the ISR shrank below the minimum before it was replicated."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidRequiredAcksError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(BrokerResponseError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(BrokerResponseError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(BrokerResponseError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(BrokerResponseError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(BrokerResponseError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(BrokerResponseError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class TopicAuthorizationFailedError(BrokerResponseError):
    """The broker's ACLs do not allow this principal the operation on ``topic``."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def __init__(self, message: str = "", *, code: int | None = None,
                 topic: str | None = None) -> None:
        self.topic = topic
        if topic is not None and "authorized" not in message:  # the broker's says which
            what = f"not authorized to access topic {topic!r}"  # operation: kept as it is
            message = what if not message or repr(topic) in message else f"{what} ({message})"
        super().__init__(message, code=code)


class GroupAuthorizationFailedError(BrokerResponseError):
    """The broker's ACLs do not allow this principal the operation on group ``group_id``
    (or the member id named belongs to another principal)."""

    code = ErrorCode.GROUP_AUTHORIZATION_FAILED

    def __init__(self, message: str = "", *, code: int | None = None,
                 group_id: str | None = None) -> None:
        self.group_id = group_id
        if group_id is not None and "authorized" not in message:
            what = f"not authorized to access group {group_id!r}"
            message = (what if not message or repr(group_id) in message
                       else f"{what} ({message})")
        super().__init__(message, code=code)


class ClusterAuthorizationFailedError(BrokerResponseError):
    """The operation needs a permission on the cluster this principal lacks."""

    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class UnsupportedSaslMechanismError(BrokerResponseError):
    """The broker does not enable the client's ``sasl_mechanism``; the message lists the
    ones it does."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(BrokerResponseError):
    """A SASL request out of turn, e.g. SASL on a listener that does not use it."""

    code = ErrorCode.ILLEGAL_SASL_STATE


class SecurityDisabledError(BrokerResponseError):
    """An ACL API on a broker whose authorizer is off (``--authorizer acl`` turns it on)."""

    code = ErrorCode.SECURITY_DISABLED


class AuthenticationFailedError(BrokerResponseError):
    """The broker refused this client's credentials (or the client refused the broker's
    proof, for SCRAM). Raised when the client starts, never retried: waiting does not
    change a password. The message names the user and mechanism, never the password."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class ResourceNotFoundError(BrokerResponseError):
    code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(BrokerResponseError):
    code = ErrorCode.DUPLICATE_RESOURCE


class UnacceptableCredentialError(BrokerResponseError):
    """A SCRAM credential the broker will not store (e.g. too few iterations)."""

    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class UnsupportedVersionError(BrokerResponseError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(BrokerResponseError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(BrokerResponseError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerResponseError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class NotControllerError(BrokerResponseError):
    """A topic API reached a broker that is not the controller: retried at the controller
    named by fresh metadata."""

    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUEST


class OutOfOrderSequenceNumberError(BrokerResponseError):
    """An idempotent producer's batch did not follow the last one the partition stored
    from it (docs/protocol.md §5.4): the batch fails, and the producer goes on with a new
    producer id."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerResponseError):
    """An idempotent producer's batch carried an older epoch than the partition has seen
    from its producer id: the batch fails, and the producer goes on with a new producer
    id."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class PolicyViolationError(BrokerResponseError):
    """A valid request beyond a limit the broker's operator set (e.g. --max-partitions)."""

    code = ErrorCode.POLICY_VIOLATION


class KafkaStorageError(BrokerResponseError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class NonEmptyGroupError(BrokerResponseError):
    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(BrokerResponseError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class FencedLeaderEpochError(BrokerResponseError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class MemberIdRequiredError(BrokerResponseError):
    code = ErrorCode.MEMBER_ID_REQUIRED


class GroupMaxSizeReachedError(BrokerResponseError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(BrokerResponseError):
    code = ErrorCode.FENCED_INSTANCE_ID


class InvalidRecordError(BrokerResponseError):
    """Produce refused a batch holding rows that are not records; the message names them."""

    code = ErrorCode.INVALID_RECORD


class UnstableOffsetCommitError(BrokerResponseError):
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT


class PartitionNotOwnedError(BrokerResponseError):
    code = ErrorCode.PARTITION_NOT_OWNED


class InvalidTxnStateError(BrokerResponseError, TransactionalError):
    """The transaction coordinator refused a step the transaction's state does not allow
    (fatal to the producer, as in Kafka)."""

    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(BrokerResponseError, TransactionalError):
    """The transactional id is not mapped to this producer id (fatal)."""

    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(BrokerResponseError, TransactionalError):
    """``transaction_timeout_ms`` is above the broker's maximum (raised by ``start``)."""

    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(BrokerResponseError, TransactionalError):
    """The coordinator is still completing this transactional id's previous transaction:
    retried (retriable)."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(BrokerResponseError, TransactionalError):
    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationFailedError(BrokerResponseError, TransactionalError):
    """The broker's ACLs do not let this principal use the transactional id (fatal)."""

    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class OperationNotAttemptedError(BrokerResponseError):
    """Not tried, because another part of the same request failed."""

    code = ErrorCode.OPERATION_NOT_ATTEMPTED


class UnknownProducerIdError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class ProducerFencedError(BrokerResponseError, TransactionalError):
    """Another producer started with the same transactional id (a newer epoch): this one
    is a zombie. Fatal: every later transactional call and ``send`` raises it; close the
    producer. A transactional producer's batch refused for an old epoch
    (INVALID_PRODUCER_EPOCH) raises this too."""

    code = ErrorCode.PRODUCER_FENCED


class TransactionalIdNotFoundError(BrokerResponseError, TransactionalError):
    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


_BY_CODE: dict[ErrorCode, type[BrokerResponseError]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: UnknownServerError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.CORRUPT_MESSAGE: CorruptMessageError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    ErrorCode.LEADER_NOT_AVAILABLE: LeaderNotAvailableError,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderOrFollowerError,
    ErrorCode.REQUEST_TIMED_OUT: RequestTimedOutError,
    ErrorCode.BROKER_NOT_AVAILABLE: BrokerNotAvailableResponseError,
    ErrorCode.REPLICA_NOT_AVAILABLE: ReplicaNotAvailableError,
    ErrorCode.MESSAGE_TOO_LARGE: MessageTooLargeError,
    ErrorCode.OFFSET_METADATA_TOO_LARGE: OffsetMetadataTooLargeError,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: CoordinatorLoadInProgressError,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: CoordinatorNotAvailableError,
    ErrorCode.NOT_COORDINATOR: NotCoordinatorError,
    ErrorCode.INVALID_TOPIC_EXCEPTION: InvalidTopicError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: NotEnoughReplicasAfterAppendError,
    ErrorCode.INVALID_REQUIRED_ACKS: InvalidRequiredAcksError,
    ErrorCode.ILLEGAL_GENERATION: IllegalGenerationError,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: InconsistentGroupProtocolError,
    ErrorCode.INVALID_GROUP_ID: InvalidGroupIdError,
    ErrorCode.UNKNOWN_MEMBER_ID: UnknownMemberIdError,
    ErrorCode.INVALID_SESSION_TIMEOUT: InvalidSessionTimeoutError,
    ErrorCode.REBALANCE_IN_PROGRESS: RebalanceInProgressError,
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: InvalidCommitOffsetSizeError,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: TopicAuthorizationFailedError,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: GroupAuthorizationFailedError,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: ClusterAuthorizationFailedError,
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: UnsupportedSaslMechanismError,
    ErrorCode.ILLEGAL_SASL_STATE: IllegalSaslStateError,
    ErrorCode.SECURITY_DISABLED: SecurityDisabledError,
    ErrorCode.SASL_AUTHENTICATION_FAILED: AuthenticationFailedError,
    ErrorCode.RESOURCE_NOT_FOUND: ResourceNotFoundError,
    ErrorCode.DUPLICATE_RESOURCE: DuplicateResourceError,
    ErrorCode.UNACCEPTABLE_CREDENTIAL: UnacceptableCredentialError,
    ErrorCode.UNSUPPORTED_VERSION: UnsupportedVersionError,
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicAlreadyExistsError,
    ErrorCode.INVALID_PARTITIONS: InvalidPartitionsError,
    ErrorCode.INVALID_REPLICATION_FACTOR: InvalidReplicationFactorError,
    ErrorCode.NOT_CONTROLLER: NotControllerError,
    ErrorCode.INVALID_REQUEST: InvalidRequestError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceNumberError,
    ErrorCode.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    ErrorCode.POLICY_VIOLATION: PolicyViolationError,
    ErrorCode.KAFKA_STORAGE_ERROR: KafkaStorageError,
    ErrorCode.NON_EMPTY_GROUP: NonEmptyGroupError,
    ErrorCode.GROUP_ID_NOT_FOUND: GroupIdNotFoundError,
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
    ErrorCode.MEMBER_ID_REQUIRED: MemberIdRequiredError,
    ErrorCode.GROUP_MAX_SIZE_REACHED: GroupMaxSizeReachedError,
    ErrorCode.FENCED_INSTANCE_ID: FencedInstanceIdError,
    ErrorCode.INVALID_RECORD: InvalidRecordError,
    ErrorCode.UNSTABLE_OFFSET_COMMIT: UnstableOffsetCommitError,
    ErrorCode.PARTITION_NOT_OWNED: PartitionNotOwnedError,
    ErrorCode.INVALID_TXN_STATE: InvalidTxnStateError,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: InvalidProducerIdMappingError,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: InvalidTransactionTimeoutError,
    ErrorCode.CONCURRENT_TRANSACTIONS: ConcurrentTransactionsError,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: TransactionCoordinatorFencedError,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TransactionalIdAuthorizationFailedError,
    ErrorCode.OPERATION_NOT_ATTEMPTED: OperationNotAttemptedError,
    ErrorCode.UNKNOWN_PRODUCER_ID: UnknownProducerIdError,
    ErrorCode.PRODUCER_FENCED: ProducerFencedError,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: TransactionalIdNotFoundError,
}


def error_for(code: int, message: str = "", *, topic: str | None = None,
              group_id: str | None = None) -> BrokerResponseError:
    """The exception for a broker error code (a generic one for codes we do not know);
    ``topic`` / ``group_id`` name the resource of an authorization failure."""
    try:
        cls = _BY_CODE.get(ErrorCode(code), BrokerResponseError)
    except ValueError:
        cls = BrokerResponseError
    if cls is TopicAuthorizationFailedError:
        return TopicAuthorizationFailedError(message, code=code, topic=topic)
    if cls is GroupAuthorizationFailedError:
        return GroupAuthorizationFailedError(message, code=code, group_id=group_id)
    return cls(message, code=code)
