"""Durable segmented logs for topic partitions and the internal topics.

Plain synchronous file I/O, called from the broker's event loop; only
:meth:`FlushTicket.sync` is meant to run on another thread.
"""

from groupwire.broker.storage.config import FsyncPolicy, StorageConfig
from groupwire.broker.storage.errors import (
    NoSuchPartitionError,
    OffsetNotInLogError,
    PartitionCountError,
    PartitionLimitError,
    StorageError,
    TopicExistsError,
    TopicRefusedError,
)
from groupwire.broker.storage.fileops import FileOps
from groupwire.broker.storage.flush import FlushTicket
from groupwire.broker.storage.metadata import (
    EVENTS_TOPIC,
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TRANSACTIONS_TOPIC,
)
from groupwire.broker.storage.partition_log import PartitionLog
from groupwire.broker.storage.recovery import RecoveryReport
from groupwire.broker.storage.topic_store import TopicStore

__all__ = [
    "EVENTS_TOPIC",
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "TRANSACTIONS_TOPIC",
    "FileOps",
    "FlushTicket",
    "FsyncPolicy",
    "NoSuchPartitionError",
    "OffsetNotInLogError",
    "PartitionCountError",
    "PartitionLimitError",
    "PartitionLog",
    "RecoveryReport",
    "StorageConfig",
    "StorageError",
    "TopicExistsError",
    "TopicRefusedError",
    "TopicStore",
]
