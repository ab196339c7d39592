"""groupwire: a consumer-group broker with Kafka's group semantics, and its async SDK.

The SDK's front door: ``from groupwire import Consumer, Producer, Admin``. The layers
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
    from groupwire.client.admin import Admin
    from groupwire.client.consumer import Consumer
    from groupwire.client.listener import RebalanceListener
    from groupwire.client.producer import Producer
    from groupwire.client.types import OffsetAndMetadata, Record, RecordMetadata, TopicPartition

_EXPORTS = {
    "Admin": "groupwire.client.admin",
    "Consumer": "groupwire.client.consumer",
    "Producer": "groupwire.client.producer",
    "RebalanceListener": "groupwire.client.listener",
    "OffsetAndMetadata": "groupwire.client.types",
    "Record": "groupwire.client.types",
    "RecordMetadata": "groupwire.client.types",
    "TopicPartition": "groupwire.client.types",
}

__all__ = [
    "Admin",
    "Consumer",
    "OffsetAndMetadata",
    "Producer",
    "RebalanceListener",
    "Record",
    "RecordMetadata",
    "TopicPartition",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # the package metadata's (one source: pyproject.toml); read on first use, as
        # importlib.metadata pulls in sockets and threads the cores must not load
        value = importlib.import_module("groupwire.client.cluster").SOFTWARE_VERSION
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
