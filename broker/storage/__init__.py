"""Durable segmented logs for topic partitions and the internal topics.

Plain synchronous file I/O, called from the broker's event loop; only
:meth:`FlushTicket.sync` is meant to run on another thread.
"""

from broker.storage.config import FsyncPolicy, StorageConfig
from broker.storage.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from broker.storage.fileops import FileOps
from broker.storage.flush import FlushTicket
from broker.storage.metadata import EVENTS_TOPIC, INTERNAL_TOPICS, OFFSETS_TOPIC
from broker.storage.partition_log import PartitionLog
from broker.storage.recovery import RecoveryReport
from broker.storage.topic_store import TopicStore

__all__ = [
    "EVENTS_TOPIC",
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "FileOps",
    "FlushTicket",
    "FsyncPolicy",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecoveryReport",
    "StorageConfig",
    "StorageError",
    "TopicExistsError",
    "TopicStore",
    "UnknownTopicOrPartitionError",
]
