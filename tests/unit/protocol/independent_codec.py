"""A second, deliberately naive codec written only from docs/protocol.md (§2, §4, §10).

It shares no code with ``protocol.codec`` or ``protocol.messages``: schemas are
transcribed by hand from the API listing in docs/protocol.md §4, messages are plain dicts,
and values are checked by a small recursive interpreter. If both codecs agree on bytes
and values, a misreading of the contract would have to be made twice, independently.

Schema notation: a type is ``"str" | "int" | "long" | "bin" | "bool"``, ``Opt(t)``
(``t|nil``), ``Arr(t)``, ``TopicPartitions`` or a ``Struct``; a field is
``(name, type)`` (required) or ``(name, type, default)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

REQUIRED = object()


@dataclass(frozen=True)
class Opt:
    of: Any


@dataclass(frozen=True)
class Arr:
    of: Any


@dataclass(frozen=True)
class Struct:
    fields: tuple[tuple[str, Any, Any], ...]


def struct(*fields: tuple[Any, ...]) -> Struct:
    return Struct(tuple((f[0], f[1], f[2] if len(f) == 3 else REQUIRED) for f in fields))


TOPIC_PARTITIONS = "topic_partitions"  # [[topic, [int]]]

# --- §4, transcribed ----------------------------------------------------------------------
# Response fields carry the defaults §2 rule 3 prescribes by type: [] / -1 / "" / b"" /
# false / nil when nullable. Every response starts with the error pair.


def response(*fields: tuple[Any, ...]) -> Struct:
    return struct(("error_code", "int", 0), ("error_message", Opt("str"), None), *fields)


def error_entry(*fields: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:
    return (("error_code", "int", 0), ("error_message", Opt("str"), None), *fields)


REQUESTS: dict[int, Struct] = {
    18: struct(("client_software_name", "str", ""), ("client_software_version", "str", "")),
    11: struct(
        ("group_id", "str"),
        ("member_id", "str"),
        ("group_instance_id", Opt("str"), None),
        ("session_timeout_ms", "int"),
        ("rebalance_timeout_ms", "int"),
        ("protocol_type", "str"),
        ("protocols", Arr(struct(("name", "str"), ("metadata", "bin")))),
        ("reason", Opt("str"), None),
    ),
    14: struct(
        ("group_id", "str"),
        ("generation_id", "int"),
        ("member_id", "str"),
        ("group_instance_id", Opt("str"), None),
        ("protocol_type", Opt("str"), None),
        ("protocol_name", Opt("str"), None),
        ("assignments", Arr(struct(("member_id", "str"), ("assignment", "bin"))), []),
    ),
    12: struct(
        ("group_id", "str"),
        ("generation_id", "int"),
        ("member_id", "str"),
        ("group_instance_id", Opt("str"), None),
        ("poll_age_ms", "int", -1),
        ("wait_ms", "int", 0),
    ),
    1: struct(
        ("replica_id", "int", -1),
        ("replica_epoch", Opt("long"), None),
        ("max_wait_ms", "int", 500),
        ("min_bytes", "int", 1),
        ("max_bytes", "int", 52428800),
        ("isolation_level", "int", 0),
        (
            "topics",
            Arr(
                struct(
                    ("topic", "str"),
                    (
                        "partitions",
                        Arr(
                            struct(
                                ("partition", "int"),
                                ("current_leader_epoch", "int", -1),
                                ("fetch_offset", "long"),
                                ("partition_max_bytes", "int", 1048576),
                            )
                        ),
                    ),
                )
            ),
        ),
        (
            "group",
            Opt(
                struct(
                    ("group_id", "str"),
                    ("member_id", "str"),
                    ("generation_id", "int"),
                    ("group_instance_id", Opt("str"), None),
                )
            ),
            None,
        ),
    ),
    8: struct(
        ("group_id", "str"),
        ("generation_id", "int", -1),
        ("member_id", "str", ""),
        ("group_instance_id", Opt("str"), None),
        (
            "topics",
            Arr(
                struct(
                    ("name", "str"),
                    (
                        "partitions",
                        Arr(
                            struct(
                                ("partition_index", "int"),
                                ("committed_offset", "long"),
                                ("committed_metadata", Opt("str"), None),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    0: struct(
        ("acks", "int", -1),
        ("timeout_ms", "int", 30000),
        (
            "topic_data",
            Arr(
                struct(
                    ("name", "str"),
                    ("partition_data", Arr(struct(("index", "int"), ("records", "bin")))),
                )
            ),
        ),
        ("internal", "bool", False),
        ("transactional_id", Opt("str"), None),
    ),
    3: struct(
        ("topics", Opt(Arr(struct(("name", "str")))), None),
        ("allow_auto_topic_creation", "bool", True),
    ),
    23: struct(
        ("replica_id", "int", -1),
        (
            "topics",
            Arr(
                struct(
                    ("topic", "str"),
                    (
                        "partitions",
                        Arr(
                            struct(
                                ("partition", "int"),
                                ("current_leader_epoch", "int", -1),
                                ("leader_epoch", "int"),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    43: struct(
        ("election_type", "int", 0),
        ("topic_partitions", Opt(Arr(struct(("topic", "str"), ("partitions", Arr("int"))))),
         None),
        ("timeout_ms", "int", 60000),
    ),
}

RESPONSES: dict[int, Struct] = {
    3: response(
        (
            "brokers",
            Arr(
                struct(
                    ("node_id", "int", -1),
                    ("host", "str", ""),
                    ("port", "int", -1),
                    ("rack", Opt("str"), None),
                )
            ),
            [],
        ),
        ("cluster_id", "str", ""),
        ("controller_id", "int", -1),
        (
            "topics",
            Arr(
                struct(
                    *error_entry(
                        ("name", "str", ""),
                        ("is_internal", "bool", False),
                        (
                            "partitions",
                            Arr(
                                struct(
                                    *error_entry(
                                        ("partition_index", "int", -1),
                                        ("leader_id", "int", -1),
                                        ("leader_epoch", "int", -1),
                                        ("replica_nodes", Arr("int"), []),
                                        ("isr_nodes", Arr("int"), []),
                                        ("offline_replicas", Arr("int"), []),
                                    )
                                )
                            ),
                            [],
                        ),
                    )
                )
            ),
            [],
        ),
    ),
    23: response(
        (
            "topics",
            Arr(
                struct(
                    ("topic", "str", ""),
                    (
                        "partitions",
                        Arr(
                            struct(
                                *error_entry(
                                    ("partition", "int", -1),
                                    ("leader_epoch", "int", -1),
                                    ("end_offset", "long", -1),
                                )
                            )
                        ),
                        [],
                    ),
                )
            ),
            [],
        ),
    ),
    18: response(
        (
            "api_keys",
            Arr(
                struct(
                    ("api_key", "int", -1), ("min_version", "int", -1), ("max_version", "int", -1)
                )
            ),
            [],
        ),
        ("max_frame_bytes", "int", -1),
    ),
    11: response(
        ("generation_id", "int", -1),
        ("protocol_type", Opt("str"), None),
        ("protocol_name", Opt("str"), None),
        ("leader", "str", ""),
        ("skip_assignment", "bool", False),
        ("member_id", "str", ""),
        (
            "members",
            Arr(
                struct(
                    ("member_id", "str", ""),
                    ("group_instance_id", Opt("str"), None),
                    ("metadata", "bin", b""),
                )
            ),
            [],
        ),
    ),
    14: response(
        ("protocol_type", Opt("str"), None),
        ("protocol_name", Opt("str"), None),
        ("assignment", "bin", b""),
    ),
    12: response(),
    1: response(
        (
            "responses",
            Arr(
                struct(
                    ("topic", "str", ""),
                    (
                        "partitions",
                        Arr(
                            struct(
                                ("partition_index", "int", -1),
                                *error_entry(
                                    ("high_watermark", "long", -1),
                                    ("last_stable_offset", "long", -1),
                                    ("log_start_offset", "long", -1),
                                    ("aborted_transactions", Opt(Arr(struct(
                                        ("producer_id", "long", -1),
                                        ("first_offset", "long", -1)))), None),
                                    ("records", "bin", b""),
                                ),
                            )
                        ),
                        [],
                    ),
                )
            ),
            [],
        ),
    ),
    8: response(
        (
            "topics",
            Arr(
                struct(
                    ("name", "str", ""),
                    (
                        "partitions",
                        Arr(struct(("partition_index", "int", -1), *error_entry())),
                        [],
                    ),
                )
            ),
            [],
        ),
    ),
    15: response(
        (
            "groups",
            Arr(
                struct(
                    *error_entry(
                        ("group_id", "str", ""),
                        ("group_state", "str", ""),
                        ("protocol_type", "str", ""),
                        ("protocol_data", "str", ""),
                        ("generation_id", "int", -1),
                        ("leader_id", Opt("str"), None),
                        (
                            "members",
                            Arr(
                                struct(
                                    ("member_id", "str", ""),
                                    ("group_instance_id", Opt("str"), None),
                                    ("client_id", "str", ""),
                                    ("client_host", "str", ""),
                                    ("member_metadata", "bin", b""),
                                    ("member_assignment", "bin", b""),
                                    ("last_heartbeat_ms", Opt("long"), None),
                                    ("poll_age_ms", Opt("int"), None),
                                )
                            ),
                            [],
                        ),
                        (
                            "rebalances",
                            Arr(
                                struct(
                                    ("generation_id", Opt("int"), None),
                                    ("reason", "str", ""),
                                    ("detail", Opt("str"), None),
                                    ("started_ms", "long", -1),
                                    ("completed_ms", Opt("long"), None),
                                    ("duration_ms", Opt("int"), None),
                                    ("moved_partitions", TOPIC_PARTITIONS, []),
                                    ("trigger_member_id", Opt("str"), None),
                                )
                            ),
                            [],
                        ),
                    )
                )
            ),
            [],
        ),
    ),
    43: response(
        (
            "replica_election_results",
            Arr(
                struct(
                    ("topic", "str", ""),
                    (
                        "partition_result",
                        Arr(
                            struct(
                                ("partition_id", "int", -1),
                                ("error_code", "int", 0),
                                ("error_message", Opt("str"), None),
                            )
                        ),
                        [],
                    ),
                )
            ),
            [],
        ),
    ),
}


class Invalid(Exception):
    pass


# --- checking values ----------------------------------------------------------------------

RANGES = {"int": 2**31, "long": 2**63}


def check(t: Any, v: Any, path: str) -> Any:
    """Return ``v`` as plain data of type ``t`` (defaults filled), or raise Invalid."""
    if isinstance(t, Opt):
        return None if v is None else check(t.of, v, path)
    if isinstance(t, str) and t in RANGES:
        if isinstance(v, bool) or not isinstance(v, int):
            raise Invalid(f"{path}: expected {t}")
        if not -RANGES[t] <= v < RANGES[t]:
            raise Invalid(f"{path}: out of range for {t}")
        return v
    simple = {"str": str, "bin": bytes, "bool": bool}
    if isinstance(t, str) and t in simple:
        if not isinstance(v, simple[t]):
            raise Invalid(f"{path}: expected {t}")
        return v
    if t == TOPIC_PARTITIONS:
        if not isinstance(v, list):
            raise Invalid(f"{path}: expected array")
        out = []
        for i, pair in enumerate(v):
            if not isinstance(pair, list) or len(pair) != 2:
                raise Invalid(f"{path}[{i}]: expected [topic, [int]]")
            out.append([check("str", pair[0], path), check(Arr("int"), pair[1], path)])
        return out
    if isinstance(t, Arr):
        if not isinstance(v, list):
            raise Invalid(f"{path}: expected array")
        return [check(t.of, item, f"{path}[{i}]") for i, item in enumerate(v)]
    if isinstance(t, Struct):
        if not isinstance(v, dict):
            raise Invalid(f"{path}: expected map")
        out_map = {}
        for name, ft, default in t.fields:
            sub = f"{path}.{name}" if path else name
            value = v.get(name)
            if value is None:
                if default is REQUIRED:
                    raise Invalid(f"{sub}: required")
                out_map[name] = list(default) if isinstance(default, list) else default
            else:
                out_map[name] = check(ft, value, sub)
        return out_map
    raise AssertionError(f"bad schema {t!r}")


# --- encoding (rules of §10) --------------------------------------------------------------


def shape_request(t: Struct, v: dict[str, Any]) -> dict[str, Any]:
    """All fields in §4 order, except nil values of fields whose default is nil."""
    out = {}
    for name, ft, default in t.fields:
        value = v.get(name, None if default is REQUIRED else default)
        if value is None and default is None:
            continue
        out[name] = shape_value(ft, value, shape_request)
    return out


def shape_entry(t: Struct, v: dict[str, Any]) -> dict[str, Any]:
    """Response entries: all fields, nil included, but no nil error_message."""
    out = {}
    for name, ft, default in t.fields:
        value = v.get(name, default)
        if name == "error_message" and value is None:
            continue
        out[name] = shape_value(ft, value, shape_entry)
    return out


def shape_value(t: Any, v: Any, shape: Any) -> Any:
    inner = t.of if isinstance(t, Opt) else t
    if v is None:
        return None
    if isinstance(inner, Struct):
        return shape(inner, v)
    if isinstance(inner, Arr) and isinstance(inner.of, Struct):
        return [shape(inner.of, item) for item in v]
    if inner == TOPIC_PARTITIONS:
        return [[topic, list(parts)] for topic, parts in v]
    return v


def encode_request(api_key: int, cid: int, client_id: str | None, body: dict[str, Any]) -> bytes:
    shaped = shape_request(REQUESTS[api_key], body)
    data: bytes = msgpack.packb([api_key, 0, cid, client_id, shaped], use_bin_type=True)
    return data


def encode_response(api_key: int, cid: int, body: dict[str, Any]) -> bytes:
    schema = RESPONSES[api_key]
    shaped = shape_entry(schema, body)
    if shaped["error_code"] != 0:
        defaults = {name: default for name, _, default in schema.fields}
        shaped = {k: v for k, v in shaped.items() if k == "error_code" or v != defaults[k]}
    data: bytes = msgpack.packb([cid, shaped], use_bin_type=True)
    return data


# --- decoding -----------------------------------------------------------------------------


def decode_request(payload: bytes) -> tuple[int, int, str | None, dict[str, Any]]:
    """``(api_key, correlation_id, client_id, body)``; body with defaults filled."""
    api_key, version, cid, client_id, body = msgpack.unpackb(payload, raw=False)
    assert version == 0
    return api_key, cid, client_id, check(REQUESTS[api_key], body, "")


def decode_response(api_key: int, payload: bytes) -> tuple[int, dict[str, Any]]:
    cid, body = msgpack.unpackb(payload, raw=False)
    return cid, check(RESPONSES[api_key], body, "")
