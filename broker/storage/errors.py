"""Storage errors, each carrying the wire ``code`` the broker answers with.

::

    StorageError                      a log could not be written or synced (KAFKA_STORAGE_ERROR)
    ├── CorruptLogError               a stored batch fails its CRC (CORRUPT_MESSAGE)
    ├── OffsetNotInLogError           fetch offset outside [log start, high watermark]
    ├── NoSuchPartitionError          no such topic or partition (also a KeyError)
    ├── TopicRefusedError             bad topic name, or an internal topic refused
    ├── TopicExistsError              CreateTopics for a name already taken
    ├── PartitionCountError           a partition count that is < 1 or does not grow
    └── PartitionLimitError           more partitions than the broker hosts (max_partitions)

Named for what went wrong in the log; the SDK's classes for the same wire codes
(``OffsetOutOfRangeError``, ``UnknownTopicOrPartitionError`` ...) keep Kafka's names.
"""

from __future__ import annotations

from groupwire.protocol.errors import ErrorCode


class StorageError(Exception):
    """Root of every storage exception; ``code`` is the error to answer the client with."""

    code: ErrorCode = ErrorCode.KAFKA_STORAGE_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class CorruptLogError(StorageError):
    code = ErrorCode.CORRUPT_MESSAGE


class OffsetNotInLogError(StorageError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class NoSuchPartitionError(StorageError, KeyError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class TopicRefusedError(StorageError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicExistsError(StorageError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class PartitionCountError(StorageError):
    code = ErrorCode.INVALID_PARTITIONS


class PartitionLimitError(StorageError):
    """Kafka's answer when a request would pass a limit the operator set (its controller
    refuses too many partitions per request the same way): valid, but not here."""

    code = ErrorCode.POLICY_VIOLATION
