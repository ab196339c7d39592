"""groupwire: a consumer-group broker with Kafka's group semantics, and its async SDK.

The SDK's front door: ``from groupwire import Consumer, Producer, Admin`` (and
``create_ssl_context`` / ``SecurityConfig`` for a secured broker). The layers
live in subpackages — ``groupwire.protocol`` (sans-I/O wire format), ``groupwire.broker``
(the server), ``groupwire.client`` (the SDK), ``groupwire.pipeline`` (Spark) and
``groupwire.cli`` (the ``groupwire`` command) — and error classes in ``groupwire.errors``.

The SDK names are resolved on first use, so ``import groupwire.protocol`` (or the
coordinator core) stays free of asyncio and sockets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from groupwire.client.acls import (
        AccessControlEntry,
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermission,
        PatternType,
        ResourcePattern,
        ResourceType,
        ScramMechanism,
    )
    from groupwire.client.admin import (
        Admin,
        BrokerDescription,
        ClusterDescription,
        GroupDescription,
        GroupListing,
        MemberDescription,
        PartitionDescription,
        PartitionLag,
        ScramCredentialInfo,
        TopicDescription,
        TopicSpec,
        TransactionDescription,
        TransactionListing,
    )
    from groupwire.client.batch import BatchBuilder, BatchRecordMetadata
    from groupwire.client.consumer import Consumer
    from groupwire.client.listener import RebalanceListener
    from groupwire.client.producer import Producer
    from groupwire.client.security import SecurityConfig, create_ssl_context
    from groupwire.client.transactions import ConsumerGroupMetadata
    from groupwire.client.types import OffsetAndMetadata, Record, RecordMetadata, TopicPartition

_EXPORTS = {
    "Admin": "groupwire.client.admin",
    "ScramCredentialInfo": "groupwire.client.admin",
    # what Admin takes and returns
    **dict.fromkeys(["BrokerDescription", "ClusterDescription", "GroupDescription",
                     "GroupListing", "MemberDescription", "PartitionDescription",
                     "PartitionLag", "TopicDescription", "TopicSpec",
                     "TransactionDescription", "TransactionListing"],
                    "groupwire.client.admin"),
    **dict.fromkeys(["AccessControlEntry", "AclBinding", "AclBindingFilter", "AclOperation",
                     "AclPermission", "PatternType", "ResourcePattern", "ResourceType",
                     "ScramMechanism"], "groupwire.client.acls"),
    "Consumer": "groupwire.client.consumer",
    "ConsumerGroupMetadata": "groupwire.client.transactions",
    "Producer": "groupwire.client.producer",
    "BatchBuilder": "groupwire.client.batch",
    "BatchRecordMetadata": "groupwire.client.batch",
    "SecurityConfig": "groupwire.client.security",
    "create_ssl_context": "groupwire.client.security",
    "RebalanceListener": "groupwire.client.listener",
    "OffsetAndMetadata": "groupwire.client.types",
    "Record": "groupwire.client.types",
    "RecordMetadata": "groupwire.client.types",
    "TopicPartition": "groupwire.client.types",
}

__all__ = [
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "Admin",
    "BatchBuilder",
    "BatchRecordMetadata",
    "BrokerDescription",
    "ClusterDescription",
    "Consumer",
    "ConsumerGroupMetadata",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "OffsetAndMetadata",
    "PartitionDescription",
    "PartitionLag",
    "PatternType",
    "Producer",
    "RebalanceListener",
    "Record",
    "RecordMetadata",
    "ResourcePattern",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "SecurityConfig",
    "TopicDescription",
    "TopicPartition",
    "TopicSpec",
    "TransactionDescription",
    "TransactionListing",
    "__version__",
    "create_ssl_context",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # the package metadata's (one source: pyproject.toml), as the SDK sends it
        # (client.cluster.SOFTWARE_VERSION); read on first use, as importlib.metadata
        # pulls in sockets and threads the cores must not load, and read here rather than
        # through the SDK, which `groupwire --version` would otherwise import whole
        from importlib import metadata

        try:
            value = metadata.version("groupwire")
        except metadata.PackageNotFoundError:  # a checkout that was never installed
            value = "0+unknown"
        globals()[name] = value
        return value
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'groupwire' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
