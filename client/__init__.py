"""groupwire client SDK: an async Consumer, Producer and Admin speaking the broker protocol.

Familiar to aiokafka users; better at rebalances (docs/design/extensions.md). Applications
import these names from ``groupwire`` itself.

The names are resolved on first use, as ``groupwire``'s are: importing one module of the
SDK (``groupwire.client.types``, as the ``groupwire`` command's parser does) does not
import the Consumer, the Producer and the Admin with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from groupwire.client.admin import Admin
    from groupwire.client.batch import BatchBuilder, BatchRecordMetadata
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
        ProducerFencedError,
        RebalanceInProgressError,
        ResourceNotFoundError,
        SecurityDisabledError,
        TlsHandshakeError,
        TopicAuthorizationFailedError,
        TransactionAbortableError,
        TransactionAbortedError,
        TransactionalError,
        UnacceptableCredentialError,
        UnknownMemberIdError,
        UnsupportedSaslMechanismError,
        error_for,
    )
    from groupwire.client.listener import RebalanceListener
    from groupwire.client.producer import Producer
    from groupwire.client.security import SecurityConfig, create_ssl_context
    from groupwire.client.transactions import ConsumerGroupMetadata
    from groupwire.client.types import OffsetAndMetadata, Record, RecordMetadata, TopicPartition

_EXPORTS = {
    "Admin": "groupwire.client.admin",
    "Consumer": "groupwire.client.consumer",
    **dict.fromkeys([
        "AuthenticationFailedError", "BackgroundTaskError", "BrokerResponseError",
        "ClientClosedError", "ClusterAuthorizationFailedError", "CommitFailedError",
        "DuplicateResourceError", "FencedInstanceIdError", "GroupAuthorizationFailedError",
        "GroupwireError", "IllegalSaslStateError", "IllegalStateError", "ListenerError",
        "ProducerFencedError", "RebalanceInProgressError", "ResourceNotFoundError",
        "SecurityDisabledError", "TlsHandshakeError", "TopicAuthorizationFailedError",
        "TransactionAbortableError", "TransactionAbortedError", "TransactionalError",
        "UnacceptableCredentialError", "UnknownMemberIdError", "UnsupportedSaslMechanismError",
        "error_for",
    ], "groupwire.client.errors"),
    "ConsumerGroupMetadata": "groupwire.client.transactions",
    "RebalanceListener": "groupwire.client.listener",
    "Producer": "groupwire.client.producer",
    "BatchBuilder": "groupwire.client.batch",
    "BatchRecordMetadata": "groupwire.client.batch",
    "SecurityConfig": "groupwire.client.security",
    "create_ssl_context": "groupwire.client.security",
    **dict.fromkeys(["OffsetAndMetadata", "Record", "RecordMetadata", "TopicPartition"],
                    "groupwire.client.types"),
}
"""Each name and the module it comes from, imported when the name is first used."""

__all__ = [
    "Admin",
    "AuthenticationFailedError",
    "BackgroundTaskError",
    "BatchBuilder",
    "BatchRecordMetadata",
    "BrokerResponseError",
    "ClientClosedError",
    "ClusterAuthorizationFailedError",
    "CommitFailedError",
    "Consumer",
    "ConsumerGroupMetadata",
    "DuplicateResourceError",
    "FencedInstanceIdError",
    "GroupAuthorizationFailedError",
    "GroupwireError",
    "IllegalSaslStateError",
    "IllegalStateError",
    "ListenerError",
    "OffsetAndMetadata",
    "Producer",
    "ProducerFencedError",
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
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionalError",
    "UnacceptableCredentialError",
    "UnknownMemberIdError",
    "UnsupportedSaslMechanismError",
    "create_ssl_context",
    "error_for",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'groupwire.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
