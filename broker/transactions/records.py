"""The ``__transaction_state`` records: one per transactional id, the last one wins.

A record's key names the transactional id, so the log can be compacted by key; a ``None``
value is a tombstone (the id expired). Values carry a version (``"v"``) so a later
groupwire can add fields and still read these; a version newer than this code knows is
refused rather than misread. The shell stores them and hands them back, in log order,
to ``TransactionCoordinator.load_partition``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgpack

from groupwire.broker.transactions.state import BY_NAME, TxnState

_TXN: Final = "txn"
_VERSION: Final = 0

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_START: Final = -1
"""``start_ms`` when no transaction is open (Kafka's ``txnStartTimestamp`` of -1)."""

Partition = tuple[str, int]
"""A data partition, ``(topic, partition)``."""


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What the coordinator knows of one transactional id (Kafka's ``TransactionMetadata``
    less its transient parts). In memory the times are on the coordinator's monotonic
    clock; in a :class:`TxnRecord` they are wall-clock milliseconds."""

    producer_id: int
    last_producer_id: int
    """The producer id before the last InitProducerId (itself unless the id was
    replaced, when epochs ran out): a retry of that call may still name it (KIP-360)."""
    producer_epoch: int
    last_producer_epoch: int
    """The epoch before the last InitProducerId that was asked by the producer itself
    (KIP-360), so its retry is answered without another bump; -1 when a new producer
    or a fence took over."""
    timeout_ms: int
    state: TxnState
    partitions: frozenset[Partition]
    start_ms: int
    """When the open transaction began (its first AddPartitions), else ``NO_START``."""
    update_ms: int
    """The last change: an idle id expires ``transactional_id_expiration_ms`` after it."""

    def shifted(self, delta_ms: int) -> TxnMetadata:
        """The same with its times moved by ``delta_ms`` (``NO_START`` stays)."""
        if delta_ms == 0:
            return self
        start = self.start_ms if self.start_ms == NO_START else self.start_ms + delta_ms
        return TxnMetadata(self.producer_id, self.last_producer_id, self.producer_epoch,
                           self.last_producer_epoch, self.timeout_ms, self.state,
                           self.partitions, start, self.update_ms + delta_ms)


def _pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """``metadata`` is None for a tombstone."""

    transactional_id: str
    metadata: TxnMetadata | None

    def to_kv(self) -> tuple[bytes, bytes | None]:
        key = _pack([_TXN, self.transactional_id])
        m = self.metadata
        if m is None:
            return key, None
        return key, _pack({
            "v": _VERSION,
            "producer_id": m.producer_id,
            "last_producer_id": m.last_producer_id,
            "producer_epoch": m.producer_epoch,
            "last_producer_epoch": m.last_producer_epoch,
            "timeout_ms": m.timeout_ms,
            "state": m.state.value,
            "partitions": [[topic, p] for topic, p in sorted(m.partitions)],
            "start_ms": m.start_ms,
            "update_ms": m.update_ms,
        })


def record_from_kv(key: bytes, value: bytes | None) -> TxnRecord:
    """Decode what :meth:`TxnRecord.to_kv` produced; anything else raises ``ValueError``."""
    try:
        return _decode(key, value)
    except ValueError:
        raise
    except Exception as exc:  # KeyError, TypeError, msgpack's own errors
        raise ValueError(f"unreadable transaction record: {type(exc).__name__}: {exc}") from None


def _decode(key: bytes, value: bytes | None) -> TxnRecord:
    k = _unpack(key)
    if not (isinstance(k, list) and len(k) == 2 and k[0] == _TXN):
        raise ValueError(f"unknown transaction record key {k!r}")
    transactional_id = _str(k[1])
    if value is None:
        return TxnRecord(transactional_id, None)
    v = _unpack(value)
    if not isinstance(v, dict):
        raise ValueError("transaction record value is not a map")
    version = _int(v["v"])
    if not 0 <= version <= _VERSION:
        raise ValueError(f"transaction record version {version} is newer than this code reads")
    state = BY_NAME.get(_str(v["state"]))
    if state is None:
        raise ValueError(f"unknown transaction state {v['state']!r}")
    partitions = v["partitions"]
    if not isinstance(partitions, list):
        raise ValueError("transaction record partitions is not an array")
    parts = []
    for item in partitions:
        if not (isinstance(item, list) and len(item) == 2):
            raise ValueError(f"transaction record partition {item!r} is not [topic, partition]")
        parts.append((_str(item[0]), _int(item[1])))
    return TxnRecord(transactional_id, TxnMetadata(
        producer_id=_int(v["producer_id"]),
        last_producer_id=_int(v["last_producer_id"]),
        producer_epoch=_int(v["producer_epoch"]),
        last_producer_epoch=_int(v["last_producer_epoch"]),
        timeout_ms=_int(v["timeout_ms"]),
        state=state,
        partitions=frozenset(parts),
        start_ms=_int(v["start_ms"]),
        update_ms=_int(v["update_ms"]),
    ))


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)


def _str(v: Any) -> str:
    if type(v) is not str:
        raise ValueError(f"expected str, got {type(v).__name__}")
    return v


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ValueError(f"expected int, got {type(v).__name__}")
    return v
