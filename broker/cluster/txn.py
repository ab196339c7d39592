"""etcd's data model as plain values: key-values with their revisions, guarded
transactions, watch events. The core decides in these terms; a store (etcd itself, or
its in-memory twin in tests) carries them out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

MAX_TXN_OPS: Final = 128
"""etcd's default ``--max-txn-ops``: compares, and each branch's operations, at most."""

Target = Literal["create", "mod", "version", "lease"]
"""What a compare reads of a key: its create_revision, mod_revision, version or lease.
A key that does not exist reads 0 for all four."""
Op = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    """The revision that created it: an epoch for a key bound to a lease (the same
    holder keeps it; a new holder gets a larger one)."""
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Compare:
    """``target(key) op value``; a txn's success branch runs only if all hold."""

    key: str
    target: Target
    op: Op
    value: int

    def holds(self, kv: KeyValue | None) -> bool:
        if kv is None:
            actual = 0
        elif self.target == "create":
            actual = kv.create_revision
        elif self.target == "mod":
            actual = kv.mod_revision
        elif self.target == "version":
            actual = kv.version
        else:
            actual = kv.lease
        if self.op == "==":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        if self.op == "<":
            return actual < self.value
        return actual > self.value


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0
    """0: the key outlives its writer; else the lease it vanishes with."""


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    prefix: bool = False
    """Delete every key starting with ``key``."""


Operation = Put | Delete


@dataclass(frozen=True, slots=True)
class Txn:
    """A guarded write: if every compare holds, ``success`` is applied, else
    ``failure``, atomically, at one new revision (none if the branch is empty)."""

    compares: tuple[Compare, ...]
    success: tuple[Operation, ...]
    failure: tuple[Operation, ...] = ()

    def __post_init__(self) -> None:
        for part, items in (("compares", self.compares), ("success", self.success),
                            ("failure", self.failure)):
            if len(items) > MAX_TXN_OPS:
                raise ValueError(f"txn {part}: {len(items)} over etcd's {MAX_TXN_OPS}")


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    """The store's revision after the txn (unchanged if it wrote nothing)."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change under a watched prefix. For a delete, ``kv`` has the key, an empty value
    and the deleting revision as ``mod_revision``."""

    kind: Literal["put", "delete"]
    kv: KeyValue
