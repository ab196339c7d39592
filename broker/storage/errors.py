"""Storage errors, each carrying the wire ``code`` the broker answers with.

::

    StorageError                      a log could not be written or synced (KAFKA_STORAGE_ERROR)
    ├── CorruptLogError               a stored batch fails its CRC (CORRUPT_MESSAGE)
    ├── OffsetOutOfRangeError         fetch offset outside [log start, high watermark]
    ├── UnknownTopicOrPartitionError  no such topic or partition (also a KeyError)
    ├── InvalidTopicError             bad topic name, or an internal topic refused
    ├── TopicExistsError              CreateTopics for a name already taken
    └── InvalidPartitionsError        a partition count that is < 1 or does not grow
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


class OffsetOutOfRangeError(StorageError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class UnknownTopicOrPartitionError(StorageError, KeyError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidTopicError(StorageError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicExistsError(StorageError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(StorageError):
    code = ErrorCode.INVALID_PARTITIONS
