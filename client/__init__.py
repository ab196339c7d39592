"""groupwire client SDK: an async Consumer, Producer and Admin speaking the broker protocol.

Familiar to aiokafka users; better at rebalances (docs/design/extensions.md). Applications
import these names from ``groupwire`` itself.
"""

from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.errors import (
    BackgroundTaskError,
    BrokerResponseError,
    ClientClosedError,
    CommitFailedError,
    FencedInstanceIdError,
    GroupwireError,
    IllegalStateError,
    ListenerError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    error_for,
)
from groupwire.client.listener import RebalanceListener
from groupwire.client.producer import Producer
from groupwire.client.types import OffsetAndMetadata, Record, RecordMetadata, TopicPartition

__all__ = [
    "Admin",
    "BackgroundTaskError",
    "BrokerResponseError",
    "ClientClosedError",
    "CommitFailedError",
    "Consumer",
    "FencedInstanceIdError",
    "GroupwireError",
    "IllegalStateError",
    "ListenerError",
    "OffsetAndMetadata",
    "Producer",
    "RebalanceInProgressError",
    "RebalanceListener",
    "Record",
    "RecordMetadata",
    "TopicPartition",
    "UnknownMemberIdError",
    "error_for",
]
