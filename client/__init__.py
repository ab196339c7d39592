"""groupwire client SDK: an async Consumer, Producer and Admin speaking the broker protocol.

Familiar to aiokafka users; better at rebalances (docs/design/extensions.md). Applications
import these names from ``groupwire`` itself.
"""

from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.errors import (
    AuthenticationFailedError,
    BackgroundTaskError,
    BrokerResponseError,
    ClientClosedError,
    ClusterAuthorizationFailedError,
    CommitFailedError,
    DuplicateResourceError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupwireError,
    IllegalSaslStateError,
    IllegalStateError,
    ListenerError,
    RebalanceInProgressError,
    ResourceNotFoundError,
    SecurityDisabledError,
    TlsHandshakeError,
    TopicAuthorizationFailedError,
    UnacceptableCredentialError,
    UnknownMemberIdError,
    UnsupportedSaslMechanismError,
    error_for,
)
from groupwire.client.listener import RebalanceListener
from groupwire.client.producer import Producer
from groupwire.client.security import SecurityConfig, create_ssl_context
from groupwire.client.types import OffsetAndMetadata, Record, RecordMetadata, TopicPartition

__all__ = [
    "Admin",
    "AuthenticationFailedError",
    "BackgroundTaskError",
    "BrokerResponseError",
    "ClientClosedError",
    "ClusterAuthorizationFailedError",
    "CommitFailedError",
    "Consumer",
    "DuplicateResourceError",
    "FencedInstanceIdError",
    "GroupAuthorizationFailedError",
    "GroupwireError",
    "IllegalSaslStateError",
    "IllegalStateError",
    "ListenerError",
    "OffsetAndMetadata",
    "Producer",
    "RebalanceInProgressError",
    "RebalanceListener",
    "Record",
    "RecordMetadata",
    "ResourceNotFoundError",
    "SecurityConfig",
    "SecurityDisabledError",
    "TlsHandshakeError",
    "TopicAuthorizationFailedError",
    "TopicPartition",
    "UnacceptableCredentialError",
    "UnknownMemberIdError",
    "UnsupportedSaslMechanismError",
    "create_ssl_context",
    "error_for",
]
