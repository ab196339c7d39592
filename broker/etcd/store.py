"""What the cluster shells need of etcd, as one interface: the real client and the
in-memory twin both provide it, so the controller and shells are tested without etcd."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from groupwire.broker.cluster.txn import KeyValue, Txn, TxnResult, WatchEvent


class EtcdError(Exception):
    """etcd refused a request; ``code`` is the gRPC status code it gave (0 if none)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailableError(EtcdError):
    """No endpoint answered, or a write's outcome is unknown (the connection broke after
    it was sent): the caller re-reads rather than assume either way."""


class WatchCompactedError(EtcdError):
    """The watch's start revision is older than etcd keeps: re-read with ``get_prefix``
    and watch again from the revision after it."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"watch start revision compacted (oldest kept: {compact_revision})")
        self.compact_revision = compact_revision


class MetadataStore(Protocol):
    async def get(self, key: str) -> KeyValue | None: ...

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """The keys under ``prefix`` and the revision they were read at: watch from the
        revision after it to miss nothing."""
        ...

    async def txn(self, txn: Txn) -> TxnResult: ...

    async def grant_lease(self, ttl_s: int) -> int: ...

    async def keep_alive(self, lease: int) -> int:
        """Refresh ``lease``; the TTL it now has, 0 if it is gone (its keys too)."""
        ...

    async def revoke(self, lease: int) -> None:
        """Drop ``lease`` and its keys now; a lease already gone is not an error."""
        ...

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        """Changes under ``prefix`` from ``start_revision`` (0: from now), in revision
        order, in batches; raises WatchCompactedError if that revision is gone."""
        ...

    async def close(self) -> None: ...


def prefix_end(prefix: str) -> bytes:
    """etcd's range end for a prefix: the prefix with its last byte incremented."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return bytes(raw)
        raw.pop()
    return b"\0"  # every key
