"""etcd for cluster mode: the MetadataStore interface, its client over etcd's JSON
gateway and its in-memory twin for tests."""

from groupwire.broker.etcd.client import EtcdClient
from groupwire.broker.etcd.memory import MemoryStore
from groupwire.broker.etcd.store import (
    EtcdError,
    EtcdUnavailableError,
    MetadataStore,
    WatchCompactedError,
)

__all__ = ["EtcdClient", "EtcdError", "EtcdUnavailableError", "MemoryStore", "MetadataStore",
           "WatchCompactedError"]
