"""The classic consumer protocol's bytes as Kafka's clients write them inside JoinGroup's
member metadata and SyncGroup's assignments (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3), decoded into and encoded from the same
:class:`~groupwire.protocol.consumer_data.Subscription` and
:class:`~groupwire.protocol.consumer_data.Assignment` the msgpack bins give.

Both start with an int16 version. A later version only appends fields (Kafka's rule), so
one this module does not know is read as the latest it does, and bytes after the known
fields are ignored, as Kafka's own clients do. Fields a version lacks take their
defaults when decoded and are left out when encoded (all are "ignorable" in Kafka's
schema). Anything else wrong raises :class:`ConsumerProtocolError`.

A msgpack bin starts with a map marker (``0x80``-``0x8f``, ``0xde``, ``0xdf``), Kafka's
bytes with a non-negative int16 (first byte below ``0x80``):
:func:`is_kafka_consumer_bytes` tells them apart, and ``protocol.consumer`` decodes
either.
"""

from __future__ import annotations

import struct
from typing import Final

from groupwire.protocol.consumer_data import Assignment, ConsumerProtocolError, Subscription
from groupwire.protocol.errors import LocalProtocolError

__all__ = [
    "ASSIGNMENT_VERSION",
    "SUBSCRIPTION_VERSION",
    "decode_kafka_assignment",
    "decode_kafka_subscription",
    "encode_kafka_assignment",
    "encode_kafka_subscription",
    "is_kafka_consumer_bytes",
]

SUBSCRIPTION_VERSION: Final = 3
"""The latest ConsumerProtocolSubscription version known: v1 added owned partitions, v2
the generation id, v3 the rack id."""
ASSIGNMENT_VERSION: Final = 3
"""The latest ConsumerProtocolAssignment version known (v1-v3 are v0's layout)."""

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_MAX_STRING: Final = 0x7FFF
_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1


def is_kafka_consumer_bytes(data: object) -> bool:
    """Whether ``data`` holds Kafka's encoding (a non-negative int16 version first),
    not a msgpack bin (a map marker first)."""
    return (isinstance(data, bytes | bytearray | memoryview) and len(data) >= 2
            and data[0] < 0x80)


# --- decoding ---------------------------------------------------------------------------


class _Reader:
    """A cursor over the bytes; every read checks that they are there."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    def fail(self, message: str) -> ConsumerProtocolError:
        return ConsumerProtocolError(f"{self._what}: {message} (byte {self._pos})")

    def _take(self, n: int, field: str) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise self.fail(f"truncated in {field}")
        chunk = self._data[self._pos:end]
        self._pos = end
        return chunk

    def int16(self, field: str) -> int:
        value: int = _I16.unpack(self._take(2, field))[0]
        return value

    def int32(self, field: str) -> int:
        value: int = _I32.unpack(self._take(4, field))[0]
        return value

    def count(self, field: str, item_bytes: int) -> int:
        """An array's length: never null, never more items than the bytes left hold."""
        n = self.int32(field)
        if n < 0:
            raise self.fail(f"{field} is null")
        if n * item_bytes > len(self._data) - self._pos:
            raise self.fail(f"{field} claims {n} items, more than the bytes left")
        return n

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise self.fail(f"{field} is null")
        return value

    def nullable_string(self, field: str) -> str | None:
        n = self.int16(field)
        if n == -1:
            return None
        if n < 0:
            raise self.fail(f"{field} has length {n}")
        try:
            return self._take(n, field).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{field} is not UTF-8") from None

    def nullable_bytes(self, field: str) -> bytes | None:
        n = self.int32(field)
        if n == -1:
            return None
        if n < 0:
            raise self.fail(f"{field} has length {n}")
        return self._take(n, field)

    def topic_partitions(self, field: str) -> list[tuple[str, list[int]]]:
        out: list[tuple[str, list[int]]] = []
        for _ in range(self.count(field, 6)):
            topic = self.string(f"{field} topic")
            partitions = [self.int32(f"{field} partition")
                          for _ in range(self.count(f"{field} partitions", 4))]
            out.append((topic, partitions))
        return out

    def version(self) -> int:
        version = self.int16("version")
        if version < 0:
            raise self.fail(f"version {version}")
        return version


def decode_kafka_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A ConsumerProtocolSubscription (any version; later ones read as v3)."""
    r = _Reader(data, "subscription")
    version = r.version()
    topics = [r.string("topics") for _ in range(r.count("topics", 2))]
    user_data = r.nullable_bytes("user_data")
    owned = r.topic_partitions("owned_partitions") if version >= 1 else []
    generation = r.int32("generation_id") if version >= 2 else -1
    rack = r.nullable_string("rack_id") if version >= 3 else None
    return Subscription(topics=topics, owned_partitions=owned, generation_id=generation,
                        user_data=user_data, rack_id=rack)


def decode_kafka_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """A ConsumerProtocolAssignment (any version: all known ones share v0's layout)."""
    r = _Reader(data, "assignment")
    r.version()
    partitions = r.topic_partitions("assigned_partitions")
    return Assignment(assigned_partitions=partitions,
                      user_data=r.nullable_bytes("user_data"))


# --- encoding ---------------------------------------------------------------------------


def encode_kafka_subscription(s: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """``s`` as ConsumerProtocolSubscription ``version`` (0-3); fields that version
    lacks are left out."""
    _check_version(version, SUBSCRIPTION_VERSION)
    try:
        out = [_I16.pack(version), _I32.pack(len(s.topics))]
        out += [_string(t, "topics") for t in s.topics]
        out.append(_bytes(s.user_data))
        if version >= 1:
            out.append(_topic_partitions(s.owned_partitions, "owned_partitions"))
        if version >= 2:
            out.append(_int32(s.generation_id, "generation_id"))
        if version >= 3:
            out.append(_I16.pack(-1) if s.rack_id is None else _string(s.rack_id, "rack_id"))
    except (TypeError, AttributeError, struct.error) as exc:
        raise LocalProtocolError(f"cannot encode subscription: {exc}") from exc
    return b"".join(out)


def encode_kafka_assignment(a: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """``a`` as ConsumerProtocolAssignment ``version`` (0-3)."""
    _check_version(version, ASSIGNMENT_VERSION)
    try:
        return b"".join((_I16.pack(version),
                         _topic_partitions(a.assigned_partitions, "assigned_partitions"),
                         _bytes(a.user_data)))
    except (TypeError, AttributeError, struct.error) as exc:
        raise LocalProtocolError(f"cannot encode assignment: {exc}") from exc


def _check_version(version: int, latest: int) -> None:
    if type(version) is not int or not 0 <= version <= latest:
        raise LocalProtocolError(f"version {version} is not one of 0-{latest}")


def _string(value: str, field: str) -> bytes:
    if type(value) is not str:
        raise LocalProtocolError(f"{field}: expected str, got {type(value).__name__}")
    raw = value.encode("utf-8")
    if len(raw) > _MAX_STRING:
        raise LocalProtocolError(f"{field}: {len(raw)} bytes, over Kafka's {_MAX_STRING}")
    return _I16.pack(len(raw)) + raw


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I32.pack(-1)
    if not isinstance(value, bytes | bytearray | memoryview):
        raise LocalProtocolError(f"user_data: expected bytes, got {type(value).__name__}")
    return _I32.pack(len(value)) + bytes(value)


def _int32(value: int, field: str) -> bytes:
    if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
        raise LocalProtocolError(f"{field}: {value!r} is not an int32")
    return _I32.pack(value)


def _topic_partitions(entries: list[tuple[str, list[int]]], field: str) -> bytes:
    out = [_I32.pack(len(entries))]
    for topic, partitions in entries:
        out.append(_string(topic, f"{field} topic"))
        out.append(_I32.pack(len(partitions)))
        out += [_int32(p, f"{field} partition") for p in partitions]
    return b"".join(out)
