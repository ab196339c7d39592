"""Records the coordinator needs made durable, and their key/value encoding.

A record's key names what it overwrites (kind + group, + topic + partition for offsets,
+ producer id for a transaction's pending offsets), so the offsets log can be compacted by
key; a ``None`` value is a tombstone. The shell stores them in ``__consumer_offsets`` and
replays them through ``Coordinator.load`` at start.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgpack

_OFFSET: Final = "offset"
_TXN_OFFSET: Final = "txn_offset"
_GROUP: Final = "group"
_VERSION: Final = 0


def _pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_ms: int

    def to_kv(self) -> tuple[bytes, bytes | None]:
        key = _pack([_OFFSET, self.group_id, self.topic, self.partition])
        value = {"v": _VERSION, "offset": self.offset, "metadata": self.metadata,
                 "commit_ms": self.commit_ms}
        return key, _pack(value)


@dataclass(frozen=True, slots=True)
class OffsetDeleteRecord:
    group_id: str
    topic: str
    partition: int

    def to_kv(self) -> tuple[bytes, bytes | None]:
        return _pack([_OFFSET, self.group_id, self.topic, self.partition]), None


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRecord:
    """An offset a transaction commits (TxnOffsetCommit, KIP-98): pending until the
    transaction's marker, which writes its :class:`OffsetCommitRecord` (commit) and this
    key's tombstone, :class:`TxnOffsetDeleteRecord` (commit or abort). Its own key, with
    the producer id, rather than Kafka's shared offset key in a transactional batch: the
    offsets log has no transaction markers, and compaction keeps one per (group,
    partition, producer), so a pending offset is there until its tombstone whatever
    compaction kept or reordered."""

    group_id: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    offset: int
    metadata: str
    commit_ms: int

    def to_kv(self) -> tuple[bytes, bytes | None]:
        key = _pack([_TXN_OFFSET, self.group_id, self.topic, self.partition,
                     self.producer_id])
        value = {"v": _VERSION, "producer_epoch": self.producer_epoch, "offset": self.offset,
                 "metadata": self.metadata, "commit_ms": self.commit_ms}
        return key, _pack(value)


@dataclass(frozen=True, slots=True)
class TxnOffsetDeleteRecord:
    """The tombstone of a :class:`TxnOffsetCommitRecord`'s key: no longer pending (its
    transaction ended, or the offset went with its group, topic or an OffsetDelete)."""

    group_id: str
    topic: str
    partition: int
    producer_id: int

    def to_kv(self) -> tuple[bytes, bytes | None]:
        return _pack([_TXN_OFFSET, self.group_id, self.topic, self.partition,
                      self.producer_id]), None


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes
    principal: str = ""
    """Who owns the member (docs/protocol.md §7.5); "" (unowned) is written as no field,
    which is also how records from before ownership read."""

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocols": [[name, meta] for name, meta in self.protocols],
            "assignment": self.assignment,
        }
        if self.principal:
            value["principal"] = self.principal
        return value

    @classmethod
    def from_value(cls, v: dict[str, Any]) -> MemberRecord:
        return cls(
            member_id=_str(v["member_id"]),
            group_instance_id=_opt_str(v["group_instance_id"]),
            client_id=_str(v["client_id"]),
            client_host=_str(v["client_host"]),
            session_timeout_ms=_int(v["session_timeout_ms"]),
            rebalance_timeout_ms=_int(v["rebalance_timeout_ms"]),
            protocols=tuple((_str(name), _bin(meta)) for name, meta in v["protocols"]),
            assignment=_bin(v["assignment"]),
            principal=_str(v.get("principal", "")),
        )


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    group_id: str
    protocol_type: str | None
    protocol_name: str | None
    generation_id: int
    leader_id: str | None
    state: str
    state_ms: int
    members: tuple[MemberRecord, ...]

    def to_kv(self) -> tuple[bytes, bytes | None]:
        value = {
            "v": _VERSION,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "generation_id": self.generation_id,
            "leader_id": self.leader_id,
            "state": self.state,
            "state_ms": self.state_ms,
            "members": [m.to_value() for m in self.members],
        }
        return _pack([_GROUP, self.group_id]), _pack(value)


@dataclass(frozen=True, slots=True)
class GroupDeleteRecord:
    group_id: str

    def to_kv(self) -> tuple[bytes, bytes | None]:
        return _pack([_GROUP, self.group_id]), None


GroupRecord = (OffsetCommitRecord | OffsetDeleteRecord | GroupMetadataRecord | GroupDeleteRecord
               | TxnOffsetCommitRecord | TxnOffsetDeleteRecord)

# An offset record's key is the array [_OFFSET, group, topic, partition] and its value the
# map {"v", "offset", "metadata", "commit_ms"} in that order: msgpack writes an array or
# map as a header byte (fixarray 0x90 | n, fixmap 0x80 | n) followed by its items, each
# encoded as it would be alone. So the parts shared by a batch are packed once.
_KEY_HEAD: Final = b"\x94" + _pack(_OFFSET)
_VALUE_HEAD: Final = b"\x84" + _pack("v") + _pack(_VERSION) + _pack("offset")
_METADATA: Final = _pack("metadata")
_COMMIT_MS: Final = _pack("commit_ms")


class OffsetRecordEncoder:
    """``OffsetCommitRecord.to_kv``'s bytes, made cheaply for many records at once.

    One OffsetCommit of 10 000 partitions writes 10 000 records; ``to_kv`` builds a new
    Packer twice for each. Here one Packer serves them all, and a record is assembled
    from parts its neighbours share: the key up to the partition (one per group and
    topic) and the value after the offset (one per metadata and commit time).
    """

    __slots__ = ("_pack", "_key_heads", "_value_tails")

    def __init__(self) -> None:
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._key_heads: dict[tuple[str, str], bytes] = {}
        self._value_tails: dict[tuple[str, int], bytes] = {}

    def kv(self, group_id: str, topic: str, partition: int, offset: int, metadata: str,
           commit_ms: int) -> tuple[bytes, bytes]:
        pack = self._pack
        where = (group_id, topic)
        head = self._key_heads.get(where)
        if head is None:
            head = self._key_heads[where] = _KEY_HEAD + pack(group_id) + pack(topic)
        meta = (metadata, commit_ms)
        tail = self._value_tails.get(meta)
        if tail is None:
            tail = self._value_tails[meta] = (_METADATA + pack(metadata)
                                              + _COMMIT_MS + pack(commit_ms))
        return head + pack(partition), _VALUE_HEAD + pack(offset) + tail


def encode_records(records: Iterable[GroupRecord],
                   ) -> Iterator[tuple[str, bytes, bytes | None]]:
    """``(group_id, key, value)`` of each record: ``to_kv``'s bytes exactly, offset commits
    assembled as :class:`OffsetRecordEncoder` does (inlined: this serves every commit,
    and a call per record costs a small commit a third more)."""
    pack = msgpack.Packer(use_bin_type=True).pack
    key_heads: dict[tuple[str, str], bytes] = {}
    value_tails: dict[tuple[str, int], bytes] = {}
    for record in records:
        if type(record) is OffsetCommitRecord:
            group_id = record.group_id
            where = (group_id, record.topic)
            head = key_heads.get(where)
            if head is None:
                head = key_heads[where] = _KEY_HEAD + pack(group_id) + pack(record.topic)
            meta = (record.metadata, record.commit_ms)
            tail = value_tails.get(meta)
            if tail is None:
                tail = value_tails[meta] = (_METADATA + pack(record.metadata)
                                            + _COMMIT_MS + pack(record.commit_ms))
            yield (group_id, head + pack(record.partition),
                   _VALUE_HEAD + pack(record.offset) + tail)
        else:
            key, value = record.to_kv()
            yield record.group_id, key, value


def record_from_kv(key: bytes, value: bytes | None) -> GroupRecord:
    """Decode what :meth:`to_kv` produced; anything else raises ``ValueError``."""
    try:
        return _decode(key, value)
    except ValueError:
        raise
    except Exception as exc:  # KeyError, TypeError, msgpack's own errors
        raise ValueError(f"unreadable group record: {type(exc).__name__}: {exc}") from None


def _decode(key: bytes, value: bytes | None) -> GroupRecord:
    k = _unpack(key)
    if not isinstance(k, list) or not k:
        raise ValueError("group record key is not a non-empty array")
    kind = k[0]
    if kind == _OFFSET and len(k) == 4:
        group_id, topic, partition = _str(k[1]), _str(k[2]), _int(k[3])
        if value is None:
            return OffsetDeleteRecord(group_id, topic, partition)
        v = _map(_unpack(value))
        return OffsetCommitRecord(group_id, topic, partition, offset=_int(v["offset"]),
                                  metadata=_str(v["metadata"]), commit_ms=_int(v["commit_ms"]))
    if kind == _TXN_OFFSET and len(k) == 5:
        group_id, topic, partition = _str(k[1]), _str(k[2]), _int(k[3])
        producer_id = _int(k[4])
        if value is None:
            return TxnOffsetDeleteRecord(group_id, topic, partition, producer_id)
        v = _map(_unpack(value))
        return TxnOffsetCommitRecord(
            group_id, topic, partition, producer_id,
            producer_epoch=_int(v["producer_epoch"]), offset=_int(v["offset"]),
            metadata=_str(v["metadata"]), commit_ms=_int(v["commit_ms"]))
    if kind == _GROUP and len(k) == 2:
        group_id = _str(k[1])
        if value is None:
            return GroupDeleteRecord(group_id)
        v = _map(_unpack(value))
        return GroupMetadataRecord(
            group_id=group_id,
            protocol_type=_opt_str(v["protocol_type"]),
            protocol_name=_opt_str(v["protocol_name"]),
            generation_id=_int(v["generation_id"]),
            leader_id=_opt_str(v["leader_id"]),
            state=_str(v["state"]),
            state_ms=_int(v["state_ms"]),
            members=tuple(MemberRecord.from_value(_map(m)) for m in v["members"]),
        )
    raise ValueError(f"unknown group record key {k!r}")


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)


def _map(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError("group record value is not a map")
    return v


def _str(v: Any) -> str:
    if type(v) is not str:
        raise ValueError(f"expected str, got {type(v).__name__}")
    return v


def _opt_str(v: Any) -> str | None:
    return None if v is None else _str(v)


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ValueError(f"expected int, got {type(v).__name__}")
    return v


def _bin(v: Any) -> bytes:
    if type(v) is not bytes:
        raise ValueError(f"expected bin, got {type(v).__name__}")
    return v
