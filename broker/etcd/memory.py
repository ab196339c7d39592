"""etcd's semantics in memory, for tests of the controller and the shells: revisions,
versions, guarded txns, leases on an injected clock, watches from a past revision and
compaction. No tasks and no wall clock, so a test decides exactly when time passes."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from groupwire.broker.cluster.txn import (
    Delete,
    KeyValue,
    Operation,
    Put,
    Txn,
    TxnResult,
    WatchEvent,
)
from groupwire.broker.etcd.store import EtcdError, WatchCompactedError

LEASE_NOT_FOUND = 5  # gRPC NOT_FOUND, as etcd answers
INVALID_ARGUMENT = 3
OUT_OF_RANGE = 11


@dataclass(slots=True)
class _Lease:
    ttl: int
    deadline: float
    keys: set[str] = field(default_factory=set)


class MemoryStore:
    """The in-memory twin of etcd (a MetadataStore).

    Time comes from ``clock`` if given, else from an internal clock moved by
    ``advance``. Leases expire when an operation (or ``advance``) sees their deadline
    passed, each expiry one revision deleting the lease's keys, as etcd revokes them.
    """

    def __init__(self, clock: Callable[[], float] | None = None, *,
                 progress_interval_s: float | None = 0.2) -> None:
        """``progress_interval_s``: an idle watch yields an empty batch this often, as
        etcd's progress notifications (and the client's check of a silent stream) do,
        so a watcher's image counts as current; None: never."""
        self._clock = clock
        self._progress_s = progress_interval_s
        self._now = 0.0
        self._revision = 1  # a fresh etcd is at 1; its first write makes 2
        self._kvs: dict[str, KeyValue] = {}
        self._leases: dict[int, _Lease] = {}
        self._next_lease = 0x1000
        self._history: list[tuple[int, list[WatchEvent]]] = []
        self._compacted = 0
        self._changed = asyncio.Event()
        self._closed = False

    # --- time ---------------------------------------------------------------

    def now(self) -> float:
        return self._clock() if self._clock is not None else self._now

    def advance(self, seconds: float) -> None:
        """Move the internal clock on and expire the leases whose TTL ran out."""
        if self._clock is not None:
            raise RuntimeError("this store reads an injected clock; move that instead")
        self._now += seconds
        self.expire_leases()

    def expire_leases(self) -> None:
        now = self.now()
        due = sorted((lease.deadline, lease_id) for lease_id, lease in self._leases.items()
                     if lease.deadline <= now)
        for _, lease_id in due:
            self._drop_lease(lease_id)

    # --- reads --------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    async def get(self, key: str) -> KeyValue | None:
        self.expire_leases()
        return self._kvs.get(key)

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        self.expire_leases()
        kvs = [kv for key, kv in sorted(self._kvs.items()) if key.startswith(prefix)]
        return kvs, self._revision

    # --- writes -------------------------------------------------------------

    async def txn(self, txn: Txn) -> TxnResult:
        self.expire_leases()
        succeeded = all(compare.holds(self._kvs.get(compare.key)) for compare in txn.compares)
        ops = txn.success if succeeded else txn.failure
        self._check(ops)
        revision = self._revision + 1
        events: list[WatchEvent] = []
        for op in ops:
            if isinstance(op, Put):
                events.append(self._put(op, revision))
            else:
                events.extend(self._delete(op, revision))
        self._commit(events)
        return TxnResult(succeeded=succeeded, revision=self._revision)

    def _check(self, ops: tuple[Operation, ...]) -> None:
        """Refuse what etcd refuses, before anything is applied (a txn is atomic)."""
        puts = [op.key for op in ops if isinstance(op, Put)]
        if len(set(puts)) != len(puts):
            raise EtcdError("etcdserver: duplicate key given in txn request", INVALID_ARGUMENT)
        for op in ops:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise EtcdError("etcdserver: requested lease not found", LEASE_NOT_FOUND)
            if isinstance(op, Delete) and any(
                    key == op.key or (op.prefix and key.startswith(op.key)) for key in puts):
                raise EtcdError("etcdserver: duplicate key given in txn request",
                                INVALID_ARGUMENT)

    def _put(self, op: Put, revision: int) -> WatchEvent:
        old = self._kvs.get(op.key)
        if old is not None and old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(op.key)
        kv = KeyValue(
            key=op.key, value=op.value,
            create_revision=old.create_revision if old else revision,
            mod_revision=revision, version=old.version + 1 if old else 1, lease=op.lease)
        self._kvs[op.key] = kv
        if op.lease:
            self._leases[op.lease].keys.add(op.key)
        return WatchEvent("put", kv)

    def _delete(self, op: Delete, revision: int) -> list[WatchEvent]:
        if op.prefix:
            keys = sorted(key for key in self._kvs if key.startswith(op.key))
        else:
            keys = [op.key] if op.key in self._kvs else []
        events = []
        for key in keys:
            old = self._kvs.pop(key)
            if old.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            events.append(WatchEvent("delete", KeyValue(key, b"", 0, revision, 0)))
        return events

    def _commit(self, events: list[WatchEvent]) -> None:
        """One revision for a write that changed something, none otherwise (as etcd)."""
        if not events:
            return
        self._revision += 1
        self._history.append((self._revision, events))
        self._changed.set()
        self._changed = asyncio.Event()

    # --- leases -------------------------------------------------------------

    async def grant_lease(self, ttl_s: int) -> int:
        if ttl_s <= 0:
            raise EtcdError("etcdserver: lease TTL must be positive", INVALID_ARGUMENT)
        self.expire_leases()
        self._next_lease += 1
        self._leases[self._next_lease] = _Lease(ttl_s, self.now() + ttl_s)
        return self._next_lease

    async def keep_alive(self, lease: int) -> int:
        self.expire_leases()
        held = self._leases.get(lease)
        if held is None:
            return 0
        held.deadline = self.now() + held.ttl
        return held.ttl

    async def revoke(self, lease: int) -> None:
        self.expire_leases()
        self._drop_lease(lease)

    def _drop_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return
        revision = self._revision + 1
        events: list[WatchEvent] = []
        for key in sorted(lease.keys):
            del self._kvs[key]
            events.append(WatchEvent("delete", KeyValue(key, b"", 0, revision, 0)))
        self._commit(events)

    # --- watches ------------------------------------------------------------

    async def compact(self, revision: int) -> None:
        """Forget the history before ``revision``; watches from before it then fail."""
        if revision > self._revision:
            raise EtcdError("mvcc: required revision is a future revision", OUT_OF_RANGE)
        if revision <= self._compacted:
            raise EtcdError("mvcc: required revision has been compacted", OUT_OF_RANGE)
        self._compacted = revision
        cut = bisect.bisect_left(self._history, revision, key=lambda item: item[0])
        del self._history[:cut]

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        self.expire_leases()
        following = start_revision if start_revision > 0 else self._revision + 1
        while True:
            changed = self._changed  # taken before reading, so no write is missed
            if following < self._compacted:
                raise WatchCompactedError(self._compacted)
            start = bisect.bisect_left(self._history, following, key=lambda item: item[0])
            for revision, events in self._history[start:]:
                following = revision + 1
                matching = [event for event in events if event.kv.key.startswith(prefix)]
                if matching:
                    yield matching
            if self._closed:
                return
            try:
                async with asyncio.timeout(self._progress_s):
                    await changed.wait()
            except TimeoutError:
                yield []  # a progress notification: everything so far was delivered

    async def close(self) -> None:
        self._closed = True
        self._changed.set()
