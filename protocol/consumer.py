"""The ``"consumer"`` protocol's subscription and assignment bins (docs/protocol.md §6).

Clients encode these; the coordinator keeps them opaque except that, in ``"consumer"``
groups, it decodes subscriptions (subscribed topics) and leaders' assignments (ownership
fencing). Decoding is therefore strict about types, so a bin either yields well-typed
values or raises :class:`ConsumerProtocolError` (the member is then treated as opaque),
and it is lenient about what docs/protocol.md §2 allows: unknown keys are ignored, absent or
nil optional keys take their default.

An *empty* assignment bin (a member the leader left out) owns nothing; it is not a msgpack
value, so :func:`decode_assignment` raises on it: callers test ``if not data`` first.
"""

from __future__ import annotations

from typing import Any, Final, NoReturn

import msgpack

from groupwire.protocol.consumer_data import Assignment, ConsumerProtocolError, Subscription
from groupwire.protocol.errors import LocalProtocolError
from groupwire.protocol.kafka.consumer_protocol import (
    decode_kafka_assignment,
    decode_kafka_subscription,
    is_kafka_consumer_bytes,
)
from groupwire.protocol.limits import SCAN_ABOVE_BYTES, LimitError, check_value

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

CONSUMER_PROTOCOL_TYPE: Final = "consumer"

_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1


# --- encoding ---------------------------------------------------------------------------


def encode_subscription(s: Subscription) -> bytes:
    """Encode all five keys in §6's order (the §10 example is 69 bytes)."""
    try:
        _topics(s.topics, "topics")
        _topic_partitions(s.owned_partitions, "owned_partitions")
        _int32(s.generation_id, "generation_id")
        _opt_bin(s.user_data, "user_data")
        _opt_str(s.rack_id, "rack_id")
    except ConsumerProtocolError as exc:
        raise _local("subscription", exc) from None
    return _pack(
        {
            "topics": s.topics,
            "owned_partitions": [[t, p] for t, p in s.owned_partitions],
            "generation_id": s.generation_id,
            "user_data": s.user_data,
            "rack_id": s.rack_id,
        }
    )


def encode_assignment(a: Assignment) -> bytes:
    """Encode both keys in §6's order (the §10 example is 45 bytes)."""
    try:
        _topic_partitions(a.assigned_partitions, "assigned_partitions")
        _opt_bin(a.user_data, "user_data")
    except ConsumerProtocolError as exc:
        raise _local("assignment", exc) from None
    return _pack(
        {
            "assigned_partitions": [[t, p] for t, p in a.assigned_partitions],
            "user_data": a.user_data,
        }
    )


def _pack(obj: dict[str, Any]) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _local(what: str, exc: ConsumerProtocolError) -> LocalProtocolError:
    """We refuse to build a bin our own decoder would reject: a local bug, not the peer's."""
    return LocalProtocolError(f"cannot encode {what}: {exc}")


# --- decoding ---------------------------------------------------------------------------


def decode_subscription(data: bytes) -> Subscription:
    """Decode a subscription bin, or the bytes a Kafka client sent in their place (told
    apart by :func:`is_kafka_consumer_bytes`); raises :class:`ConsumerProtocolError` if
    malformed."""
    if is_kafka_consumer_bytes(data):
        return decode_kafka_subscription(data)
    m = _unpack_map(data, "subscription")
    topics = _topics(_required(m, "topics"), "topics")
    owned = m.get("owned_partitions")
    generation = m.get("generation_id")
    return Subscription(
        topics=topics,
        owned_partitions=[] if owned is None else _topic_partitions(owned, "owned_partitions"),
        generation_id=-1 if generation is None else _int32(generation, "generation_id"),
        user_data=_opt_bin(m.get("user_data"), "user_data"),
        rack_id=_opt_str(m.get("rack_id"), "rack_id"),
    )


def decode_assignment(data: bytes) -> Assignment:
    """Decode an assignment bin, or a Kafka client's assignment bytes; raises
    :class:`ConsumerProtocolError` if malformed."""
    if is_kafka_consumer_bytes(data):
        return decode_kafka_assignment(data)
    m = _unpack_map(data, "assignment")
    return Assignment(
        assigned_partitions=_topic_partitions(
            _required(m, "assigned_partitions"), "assigned_partitions"
        ),
        user_data=_opt_bin(m.get("user_data"), "user_data"),
    )


def _ext_hook(code: int, data: bytes) -> NoReturn:
    raise ConsumerProtocolError(f"ext type {code} not allowed")


def _unpack_map(data: bytes, what: str) -> dict[str, Any]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConsumerProtocolError(f"{what}: expected bin, got {type(data).__name__}")
    if len(data) > SCAN_ABOVE_BYTES:  # bounded before built, as requests are (limits)
        try:
            check_value(bytes(data), 0)
        except LimitError as exc:
            raise ConsumerProtocolError(f"{what}: {exc}") from None
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, ext_hook=_ext_hook)
    except ConsumerProtocolError as exc:
        raise ConsumerProtocolError(f"{what}: {exc}") from None
    except (ValueError, TypeError) as exc:  # msgpack's errors subclass ValueError
        raise ConsumerProtocolError(f"{what}: not one msgpack value ({exc})") from None
    if not isinstance(obj, dict):
        raise ConsumerProtocolError(f"{what}: expected map, got {_kind(obj)}")
    for key in obj:
        if type(key) is not str:
            raise ConsumerProtocolError(f"{what}: map keys must be str")
    return obj


def _required(m: dict[str, Any], key: str) -> Any:
    value = m.get(key)
    if value is None:
        raise ConsumerProtocolError(f"{key}: required")
    return value


def _topics(value: Any, path: str) -> list[str]:
    if type(value) is not list:
        raise ConsumerProtocolError(f"{path}: expected array, got {_kind(value)}")
    for i, topic in enumerate(value):
        if type(topic) is not str:
            raise ConsumerProtocolError(f"{path}[{i}]: expected str, got {_kind(topic)}")
    return value


def _topic_partitions(value: Any, path: str) -> list[tuple[str, list[int]]]:
    if type(value) is not list:
        raise ConsumerProtocolError(f"{path}: expected array, got {_kind(value)}")
    out: list[tuple[str, list[int]]] = []
    for i, entry in enumerate(value):
        if type(entry) not in (list, tuple) or len(entry) != 2:
            raise ConsumerProtocolError(f"{path}[{i}]: expected [topic, [int]]")
        topic, partitions = entry
        if type(topic) is not str:
            raise ConsumerProtocolError(f"{path}[{i}][0]: expected str, got {_kind(topic)}")
        if type(partitions) is not list:
            raise ConsumerProtocolError(f"{path}[{i}][1]: expected array, got {_kind(partitions)}")
        for j, p in enumerate(partitions):
            _int32(p, f"{path}[{i}][1][{j}]")
        out.append((topic, partitions))
    return out


def _int32(value: Any, path: str) -> int:
    if type(value) is not int:
        raise ConsumerProtocolError(f"{path}: expected int, got {_kind(value)}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ConsumerProtocolError(f"{path}: out of range for int")
    return value


def _opt_bin(value: Any, path: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    raise ConsumerProtocolError(f"{path}: expected bin or nil, got {_kind(value)}")


def _opt_str(value: Any, path: str) -> str | None:
    if value is None or type(value) is str:
        return value
    raise ConsumerProtocolError(f"{path}: expected str or nil, got {_kind(value)}")


def _kind(value: Any) -> str:
    """msgpack's name for a decoded value's type, for error messages."""
    if value is None:
        return "nil"
    return _KINDS.get(type(value), type(value).__name__)


_KINDS: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bin",
    list: "array",
    tuple: "array",
    dict: "map",
}
