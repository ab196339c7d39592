"""Error codes (Kafka's names and numbers) and the protocol's exception tree.

Exceptions::

    ProtocolError                 root of everything this package raises
    ├── LocalProtocolError        we were asked to send something the contract forbids
    └── RemoteProtocolError       the peer sent something the contract forbids
        ├── FrameError            framing broken (size 0, over the limit): close the connection
        ├── EnvelopeError         not one msgpack value / not a valid envelope: close it
        └── BodyError             envelope fine, body wrong: answer with ``code``
            ├── UnsupportedRequestError   unknown api key, or a version not served
            └── MalformedRequestError     missing, mistyped or out-of-range field (``path``)

The two request errors are this side's reading of an incoming request; the SDK's
``UnsupportedVersionError`` and ``InvalidRequestError`` (``groupwire.errors``) are the
broker's answers, and keep Kafka's names.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    TRANSACTIONAL_ID_NOT_FOUND = 105
    PARTITION_NOT_OWNED = 1001

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE

    @classmethod
    def name_of(cls, code: int) -> str:
        """Name for any code, including ones this version does not know."""
        try:
            return cls(code).name
        except ValueError:
            return f"UNKNOWN_ERROR_{code}"


_RETRIABLE = frozenset(  # as Kafka's protocol guide marks them (BROKER_NOT_AVAILABLE is not)
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)


class ProtocolError(Exception):
    """Root of every exception raised by ``protocol``."""


class LocalProtocolError(ProtocolError):
    """Our side tried to build or send something the contract forbids."""


class InvalidMessageError(LocalProtocolError, ValueError):
    """A message was built with a field its wire type cannot carry (an int out of its
    range, bytes where a str belongs): refused when built, never sent corrupt."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the contract forbids."""


class FrameError(RemoteProtocolError):
    """Framing is broken; the connection must be closed unread."""


class EnvelopeError(RemoteProtocolError):
    """A frame that is not one msgpack value holding a valid envelope; close the connection."""


class BodyError(RemoteProtocolError):
    """A valid envelope with a bad body: answered with ``code`` on ``correlation_id``."""

    code: ErrorCode = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str, *, correlation_id: int = -1, api_key: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.correlation_id = correlation_id
        self.api_key = api_key


class UnsupportedRequestError(BodyError):
    """A request for an api key this broker does not know, or a version it does not serve."""

    code = ErrorCode.UNSUPPORTED_VERSION


class MalformedRequestError(BodyError):
    """A field is missing, mistyped or out of range; the message names its path."""

    code = ErrorCode.INVALID_REQUEST
