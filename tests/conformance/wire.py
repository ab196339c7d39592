"""The outside checker's own wire kit, written from docs/protocol.md with msgpack and struct only.

Frames (§1), envelopes (§2), record batches (§5.1), consumer bins (§6), a response shape
checker for §4 and a bare group member. Deliberately independent of ``protocol/`` and
``client/`` so that a shared misreading of the spec cannot hide on both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

TIMEOUT = 5.0  # seconds any single answer may take; every wait is bounded by it
FRAME_HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME_BYTES = 16_777_216
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

OFFSETS_TOPIC = "__consumer_offsets"
EVENTS_TOPIC = "__group_events"


class Api:
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


ALL_API_KEYS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25,
                26, 27, 28, 29, 30, 31, 36, 37, 42, 43, 47, 50, 51, 65, 66)


class Err:
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    OPERATION_NOT_ATTEMPTED = 55
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    TRANSACTIONAL_ID_NOT_FOUND = 105
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELECTION_NOT_NEEDED = 84
    PARTITION_NOT_OWNED = 1001


# --------------------------------------------------------------------------- §1, §2


def pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def frame(payload: bytes) -> bytes:
    """§1: u32 big-endian length, then the payload."""
    return FRAME_HEADER.pack(len(payload)) + payload


def request_bytes(api_key: Any, body: Any, *, cid: Any, version: Any = 0,
                  client_id: Any = "conformance") -> bytes:
    """§2: the 5-array envelope, framed."""
    return frame(pack([api_key, version, cid, client_id, body]))


class ConnectionClosed(Exception):
    """The broker closed the connection while an answer was awaited."""


def envelope_problems(decoded: Any) -> list[str]:
    """§2: a response is ``[cid int, body map]`` with str keys, no floats or exts."""
    if not isinstance(decoded, list) or len(decoded) != 2:
        return [f"response is not a 2-array: {decoded!r:.200}"]
    cid, body = decoded
    problems = []
    if type(cid) is not int:
        problems.append(f"correlation id is not an int: {cid!r}")
    if not isinstance(body, dict):
        return [*problems, f"body is not a map: {body!r:.200}"]
    if type(body.get("error_code")) is not int:
        problems.append(f"body.error_code missing or not an int: {body.get('error_code')!r}")
    if "error_message" in body and not isinstance(body["error_message"], str | None):
        problems.append(f"body.error_message is not str|nil: {body['error_message']!r}")
    problems.extend(_walk(body, "body"))
    return problems


def _walk(value: Any, path: str) -> list[str]:
    if isinstance(value, float):
        return [f"{path}: float {value!r} (no floats on the wire)"]
    if isinstance(value, msgpack.ExtType):
        return [f"{path}: ext type (no exts on the wire)"]
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            if not isinstance(k, str):
                out.append(f"{path}: map key {k!r} is not a str")
            out.extend(_walk(v, f"{path}.{k}"))
        return out
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _walk(v, f"{path}[{i}]")]
    return []


class WireConn:
    """One raw TCP connection: requests out, answers matched by correlation id.

    A background reader validates every response envelope and records the order in
    which correlation ids arrive, so tests can see responses overtake each other.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self.arrivals: list[int] = []
        self.frames_received = 0
        self.problems: list[str] = []
        self.closed = asyncio.Event()
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_cid = 1
        self.last_cid = 0
        self.transform: Callable[[Any], Any] | None = None  # applied to every request body
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, port: int, client_id: str = "conformance",
                   host: str = "127.0.0.1") -> WireConn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self.reader.readexactly(4)
                (n,) = FRAME_HEADER.unpack(head)
                payload = await self.reader.readexactly(n)
                self.frames_received += 1
                try:
                    decoded = msgpack.unpackb(payload, raw=False, strict_map_key=False)
                except Exception as exc:  # broker sent something that is not one value
                    self._fail(f"undecodable response frame: {exc!r}")
                    return
                problems = envelope_problems(decoded)
                if problems:
                    self._fail("; ".join(problems))
                    return
                cid, body = decoded
                fut = self._pending.pop(cid, None)
                if fut is None:
                    self._fail(f"response with unknown correlation id {cid}")
                    return
                self.arrivals.append(cid)
                if not fut.done():
                    fut.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("broker closed the connection"))
                    fut.exception()  # an abandoned parked request is not worth a warning
            self._pending.clear()

    def _fail(self, problem: str) -> None:
        self.problems.append(problem)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(AssertionError(problem))
        self._pending.clear()

    def new_cid(self) -> int:
        cid = self._next_cid
        self._next_cid += 1
        return cid

    def send(self, api_key: int, body: Any, *, version: Any = 0, cid: int | None = None,
             client_id: Any = ...) -> asyncio.Future[dict[str, Any]]:
        """Write one request; the future resolves to its response body."""
        cid = self.new_cid() if cid is None else cid
        self.last_cid = cid
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        cl = self.client_id if client_id is ... else client_id
        if self.transform is not None:
            body = self.transform(body)
        self.writer.write(request_bytes(api_key, body, cid=cid, version=version, client_id=cl))
        return fut

    async def call(self, api_key: int, body: Any, **kwargs: Any) -> dict[str, Any]:
        return await answer(self.send(api_key, body, **kwargs))

    def write_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def closed_by_broker(self, timeout: float = TIMEOUT) -> bool:
        """True if the broker closes this connection within ``timeout``."""
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


async def answer(fut: asyncio.Future[dict[str, Any]],
                 timeout: float = TIMEOUT) -> dict[str, Any]:
    return await asyncio.wait_for(fut, timeout)


def sprinkle(value: Any) -> Any:
    """Add unknown keys to every map, at every level (§2.1 says they are ignored)."""
    if isinstance(value, dict):
        out = {k: sprinkle(v) for k, v in value.items()}
        out["zz_future_field"] = {"nested": [1, "two", b"three", None, {"deep": True}]}
        return out
    if isinstance(value, list):
        return [sprinkle(v) for v in value]
    return value


# --------------------------------------------------------------------------- §4 shapes

# Schema language: "int" (int32), "long" (int64), "str", "bin", "bool"; a trailing "?"
# allows nil; [s] is an array of s; a tuple is a fixed-length array; a dict is a map
# whose listed keys must all be present (others are allowed: decoders ignore them).

TOPIC_PARTS = [("str", ["int"])]

RESPONSE_SCHEMAS: dict[int, dict[str, Any]] = {
    Api.API_VERSIONS: {
        "api_keys": [{"api_key": "int", "min_version": "int", "max_version": "int"}],
        "max_frame_bytes": "int",
    },
    Api.METADATA: {
        "brokers": [{"node_id": "int", "host": "str", "port": "int", "rack": "str?"}],
        "cluster_id": "str",
        "controller_id": "int",
        "topics": [{"error_code": "int", "name": "str", "is_internal": "bool",
                    "partitions": [{"error_code": "int", "partition_index": "int",
                                    "leader_id": "int", "leader_epoch": "int",
                                    "replica_nodes": ["int"], "isr_nodes": ["int"],
                                    "offline_replicas": ["int"]}]}],
    },
    Api.CREATE_TOPICS: {
        "topics": [{"name": "str", "error_code": "int", "num_partitions": "int",
                    "replication_factor": "int"}],
    },
    Api.DELETE_TOPICS: {"responses": [{"name": "str", "error_code": "int"}]},
    Api.CREATE_PARTITIONS: {"results": [{"name": "str", "error_code": "int"}]},
    Api.PRODUCE: {
        "responses": [{"name": "str", "partition_responses": [
            {"index": "int", "error_code": "int", "base_offset": "long"}]}],
    },
    Api.FETCH: {
        "responses": [{"topic": "str", "partitions": [
            {"partition_index": "int", "error_code": "int", "high_watermark": "long",
             "log_start_offset": "long", "records": "bin"}]}],
    },
    Api.LIST_OFFSETS: {
        "topics": [{"name": "str", "partitions": [
            {"partition_index": "int", "error_code": "int", "timestamp": "long",
             "offset": "long"}]}],
    },
    Api.OFFSET_FOR_LEADER_EPOCH: {
        "topics": [{"topic": "str", "partitions": [
            {"error_code": "int", "partition": "int", "leader_epoch": "int",
             "end_offset": "long"}]}],
    },
    Api.FIND_COORDINATOR: {"node_id": "int", "host": "str", "port": "int"},
    Api.JOIN_GROUP: {
        "generation_id": "int", "protocol_type": "str?", "protocol_name": "str?",
        "leader": "str", "skip_assignment": "bool", "member_id": "str",
        "members": [{"member_id": "str", "group_instance_id": "str?", "metadata": "bin"}],
    },
    Api.SYNC_GROUP: {"protocol_type": "str?", "protocol_name": "str?", "assignment": "bin"},
    Api.HEARTBEAT: {},
    Api.LEAVE_GROUP: {
        "members": [{"member_id": "str", "group_instance_id": "str?", "error_code": "int"}],
    },
    Api.OFFSET_COMMIT: {
        "topics": [{"name": "str", "partitions": [
            {"partition_index": "int", "error_code": "int"}]}],
    },
    Api.OFFSET_FETCH: {
        "topics": [{"name": "str", "partitions": [
            {"partition_index": "int", "committed_offset": "long", "metadata": "str",
             "error_code": "int"}]}],
    },
    Api.DESCRIBE_GROUPS: {
        "groups": [{
            "error_code": "int", "group_id": "str", "group_state": "str",
            "protocol_type": "str", "protocol_data": "str", "generation_id": "int",
            "leader_id": "str?",
            "members": [{
                "member_id": "str", "group_instance_id": "str?", "client_id": "str",
                "client_host": "str", "member_metadata": "bin", "member_assignment": "bin",
                "last_heartbeat_ms": "long?", "poll_age_ms": "int?",
            }],
            "rebalances": [{
                "generation_id": "int?", "reason": "str", "detail": "str?",
                "started_ms": "long", "completed_ms": "long?", "duration_ms": "int?",
                "moved_partitions": TOPIC_PARTS, "trigger_member_id": "str?",
            }],
        }],
    },
    Api.LIST_GROUPS: {
        "groups": [{"group_id": "str", "protocol_type": "str", "group_state": "str"}],
    },
    Api.DELETE_GROUPS: {"results": [{"group_id": "str", "error_code": "int"}]},
    Api.ELECT_LEADERS: {
        "replica_election_results": [{"topic": "str", "partition_result": [
            {"partition_id": "int", "error_code": "int"}]}],
    },
    Api.OFFSET_DELETE: {
        "topics": [{"name": "str", "partitions": [
            {"partition_index": "int", "error_code": "int"}]}],
    },
    Api.INIT_PRODUCER_ID: {"producer_id": "long", "producer_epoch": "int"},
}

EVENT_SCHEMA: dict[str, Any] = {
    "type": "str", "group_id": "str", "generation_id": "int", "member_id": "str?",
    "group_instance_id": "str?", "reason": "str?", "detail": "str?", "ts_ms": "long",
    "duration_ms": "int?", "partitions": TOPIC_PARTS, "replaced_member_id": "str?",
}


def shape_problems(value: Any, schema: Any, path: str = "body") -> list[str]:
    """Where ``value`` departs from ``schema``; [] when it conforms."""
    if isinstance(schema, str):
        nullable = schema.endswith("?")
        kind = schema.rstrip("?")
        if value is None:
            return [] if nullable else [f"{path}: nil, expected {kind}"]
        if kind in ("int", "long"):
            lo, hi = INT32 if kind == "int" else INT64
            if type(value) is not int:
                return [f"{path}: {type(value).__name__}, expected {kind}"]
            return [] if lo <= value <= hi else [f"{path}: {value} out of {kind} range"]
        expected = {"str": str, "bin": bytes, "bool": bool}[kind]
        if type(value) is not expected:
            return [f"{path}: {type(value).__name__}, expected {kind}"]
        return []
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, expected array"]
        return [p for i, v in enumerate(value) for p in shape_problems(v, schema[0],
                                                                         f"{path}[{i}]")]
    if isinstance(schema, tuple):
        if not isinstance(value, list) or len(value) != len(schema):
            return [f"{path}: {value!r:.80}, expected {len(schema)}-array"]
        return [p for i, (v, s) in enumerate(zip(value, schema, strict=True))
                for p in shape_problems(v, s, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return [f"{path}: {type(value).__name__}, expected map"]
    out: list[str] = []
    for key, sub in schema.items():
        if key not in value:
            out.append(f"{path}.{key}: missing")
        else:
            out.extend(shape_problems(value[key], sub, f"{path}.{key}"))
    return out


def assert_shape(api_key: int, body: dict[str, Any]) -> None:
    """A successful response carries every §4 field with its msgpack type."""
    problems = shape_problems(body, {"error_code": "int", **RESPONSE_SCHEMAS[api_key]})
    if "error_message" in body:
        problems += shape_problems(body["error_message"], "str?", "body.error_message")
    assert not problems, problems


def assert_present_fields_typed(api_key: int, body: dict[str, Any]) -> None:
    """An error response may omit fields (§2.3), but those present keep their types."""
    schema = RESPONSE_SCHEMAS[api_key]
    present = {k: v for k, v in schema.items() if k in body}
    problems = shape_problems(body, {"error_code": "int", **present})
    assert not problems, problems


# --------------------------------------------------------------------------- §5.1 batches

MARKER_ARRAY2 = 0x92
MARKER_HEADER5 = 0x95
MARKER_HEADER6 = 0x96
HEADER_LEN = 31
V1_HEADER_LEN = 36


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    ts_delta: int = 0
    headers: tuple[tuple[str, bytes | None], ...] = ()


def records_region(records: Iterable[Rec]) -> bytes:
    """Bytes 31-: the records array, canonically packed."""
    return pack([[i, r.ts_delta, r.key, r.value, [list(h) for h in r.headers]]
                 for i, r in enumerate(records)])


def crc_of(batch: bytes | bytearray) -> int:
    """§5.1: zlib CRC-32 over bytes 11-24, then 30-end (v1: 16-29, then 35-end)."""
    if batch[1] == MARKER_HEADER6:
        return zlib.crc32(bytes(batch[35:]), zlib.crc32(bytes(batch[16:30])))
    return zlib.crc32(bytes(batch[30:]), zlib.crc32(bytes(batch[11:25])))


def assemble(region: bytes, *, count: int, base_ts: int, base_offset: int = 0,
             attributes: int = 0, crc: int | None = None) -> bytes:
    """A batch from its parts; the CRC is computed unless one is forced."""
    head = bytearray([MARKER_ARRAY2, MARKER_HEADER5])
    head += b"\xcf" + struct.pack(">Q", base_offset)
    head += b"\xd3" + struct.pack(">q", base_ts)
    head += b"\xce" + struct.pack(">I", count)
    head += b"\xce" + b"\x00\x00\x00\x00"
    head += bytes([attributes])  # positive fixint
    out = head + region
    struct.pack_into(">I", out, 26, crc_of(out) if crc is None else crc)
    return bytes(out)


def batch(records: list[Rec], base_ts: int = 1_732_250_000_000) -> bytes:
    return assemble(records_region(records), count=len(records), base_ts=base_ts)


def assemble_v1(region: bytes, *, count: int, base_ts: int, base_offset: int = 0,
                leader_epoch: int = -1, attributes: int = 0) -> bytes:
    """A layout v1 batch from its parts (§5.1): the epoch after the base offset, the CRC
    over bytes 16-29 and 35-end."""
    head = bytearray([MARKER_ARRAY2, MARKER_HEADER6])
    head += b"\xcf" + struct.pack(">Q", base_offset)
    head += b"\xd2" + struct.pack(">i", leader_epoch)
    head += b"\xd3" + struct.pack(">q", base_ts)
    head += b"\xce" + struct.pack(">I", count)
    head += b"\xce" + b"\x00\x00\x00\x00"
    head += bytes([attributes])
    out = head + region
    struct.pack_into(">I", out, 31, zlib.crc32(bytes(out[35:]), zlib.crc32(bytes(out[16:30]))))
    return bytes(out)


def batch_v1(records: list[Rec], base_ts: int = 1_732_250_000_000) -> bytes:
    return assemble_v1(records_region(records), count=len(records), base_ts=base_ts)


def batch_v2(records: list[Rec], *, producer_id: int, producer_epoch: int,
             base_sequence: int, base_ts: int = 1_732_250_000_000,
             attributes: int = 0) -> bytes:
    """A layout v2 batch (§5.1): v1's header with producer id, epoch and base sequence
    after the epoch, all three under the CRC (bytes 16-46, then 52-end); ``attributes``
    0x10 transactional, 0x20 control."""
    head = bytearray([MARKER_ARRAY2, 0x99])
    head += b"\xcf" + struct.pack(">Q", 0)
    head += b"\xd2" + struct.pack(">i", -1)
    head += b"\xd3" + struct.pack(">q", producer_id)
    head += b"\xd1" + struct.pack(">h", producer_epoch)
    head += b"\xd2" + struct.pack(">i", base_sequence)
    head += b"\xd3" + struct.pack(">q", base_ts)
    head += b"\xce" + struct.pack(">I", len(records))
    head += b"\xce" + b"\x00\x00\x00\x00"
    head += bytes([attributes])
    out = head + records_region(records)
    struct.pack_into(">I", out, 48, zlib.crc32(bytes(out[52:]), zlib.crc32(bytes(out[16:47]))))
    return bytes(out)


def control_batch_v2(*, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A transaction marker (§5.1, §5.5): layout v2, attributes 0x30, base sequence -1,
    one record whose key is Kafka's control-record key (int16 0, int16 type: 1 commit)
    and whose value is Kafka's marker value (int16 0, int32 coordinator epoch)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return batch_v2([Rec(key, value)], producer_id=producer_id,
                    producer_epoch=producer_epoch, base_sequence=-1, base_ts=timestamp_ms,
                    attributes=0x30)


def with_offset_and_epoch(b: bytes, offset: int, epoch: int) -> bytes:
    """What the broker must store of a v1 batch: bytes 3-10 and 12-15 replaced."""
    return b[:3] + struct.pack(">Q", offset) + b"\xd2" + struct.pack(">i", epoch) + b[16:]


def values_batch(*values: bytes, base_ts: int = 1_732_250_000_000) -> bytes:
    return batch([Rec(None, v, ts_delta=i) for i, v in enumerate(values)], base_ts)


def fix_crc(b: bytes | bytearray) -> bytes:
    out = bytearray(b)
    struct.pack_into(">I", out, 26, crc_of(out))
    return bytes(out)


def with_offset(b: bytes, offset: int) -> bytes:
    """What the broker must store: bytes 3-10 replaced by the assigned offset."""
    return b[:3] + struct.pack(">Q", offset) + b[11:]


def base_offset_of(b: bytes) -> int:
    return int(struct.unpack_from(">Q", b, 3)[0])


def split_batches(data: bytes) -> list[bytes]:
    """Cut a Fetch ``records`` bin into its batches with a streaming unpacker (§5.3)."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    out: list[bytes] = []
    start = 0
    while start < len(data):
        unpacker.unpack()
        end = unpacker.tell()
        out.append(data[start:end])
        start = end
    return out


@dataclass(frozen=True)
class FetchedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Any]


def decode_batch(b: bytes) -> list[FetchedRecord]:
    """Any layout: v0's header is ``[base_offset, base_ts, ...]``, v1's
    ``[base_offset, leader_epoch, base_ts, ...]``, v2's ``[base_offset, leader_epoch,
    producer_id, producer_epoch, base_sequence, base_ts, ...]``."""
    header, records = msgpack.unpackb(b, raw=False)
    base_offset, base_ts = header[0], header[{5: 1, 6: 2, 9: 5}[len(header)]]
    return [FetchedRecord(base_offset + r[0], base_ts + r[1], r[2], r[3], r[4])
            for r in records]


# --------------------------------------------------------------------------- §6 bins


def subscription(topics: list[str], **extra: Any) -> bytes:
    return pack({"topics": topics, "owned_partitions": [], "generation_id": -1,
                 "user_data": None, "rack_id": None, **extra})


def assignment(parts: list[tuple[str, list[int]]]) -> bytes:
    return pack({"assigned_partitions": [[t, ps] for t, ps in parts], "user_data": None})


# --------------------------------------------------------------------------- helpers


async def create_topic(conn: WireConn, name: str, partitions: int = 1) -> None:
    body = await conn.call(Api.CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1}]})
    assert body["topics"][0]["error_code"] == Err.NONE, body


async def produce(conn: WireConn, topic: str, partition: int, records: bytes, *,
                  transactional_id: str | None = None) -> dict[str, Any]:
    """One batch to one partition (§4 Produce; ``transactional_id``, which a
    transactional batch needs, §5.5); returns that partition's response entry."""
    request: dict[str, Any] = {"topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
    if transactional_id is not None:
        request["transactional_id"] = transactional_id
    body = await conn.call(Api.PRODUCE, request)
    assert body["error_code"] == Err.NONE, body
    return body["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def fetch_body(topic: str, partition: int, offset: int, **top: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"partition": partition, "fetch_offset": offset}
    if "partition_max_bytes" in top:
        part["partition_max_bytes"] = top.pop("partition_max_bytes")
    return {"max_wait_ms": 0, **top,
            "topics": [{"topic": topic, "partitions": [part]}]}


async def fetch_one(conn: WireConn, topic: str, partition: int, offset: int,
                    **top: Any) -> dict[str, Any]:
    """Fetch one partition without waiting; returns its partition entry."""
    body = await conn.call(Api.FETCH, fetch_body(topic, partition, offset, **top))
    assert body["error_code"] == Err.NONE, body
    return body["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


async def read_events(conn: WireConn, until: Callable[[list[dict[str, Any]]], bool],
                      timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """Read ``__group_events`` from the start until ``until(events)`` holds.

    Waits with long-poll Fetches (woken by appends), never with sleeps. Each returned
    event also carries ``_key`` and ``_timestamp`` from its record.
    """
    events: list[dict[str, Any]] = []
    offset = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not until(events):
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"events never satisfied the condition: {events}")
        part = await fetch_one(conn, EVENTS_TOPIC, 0, offset, min_bytes=1,
                               max_wait_ms=max(1, min(500, int(left * 1000))))
        assert part["error_code"] == Err.NONE, part
        for b in split_batches(part["records"]):
            for rec in decode_batch(b):
                if rec.offset < offset:
                    continue
                assert isinstance(rec.value, bytes), rec
                event = msgpack.unpackb(rec.value, raw=False)
                event["_key"] = rec.key
                event["_timestamp"] = rec.timestamp
                events.append(event)
                offset = rec.offset + 1
    return events


@dataclass
class Member:
    """A bare group member: every step explicit so tests can stop between them."""

    conn: WireConn
    group_id: str
    topics: list[str]
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 10_000
    protocol_type: str = "consumer"
    protocol: str = "range"
    metadata: bytes | None = None
    member_id: str = ""
    generation_id: int = -1
    leader: str = ""
    joined: dict[str, Any] = field(default_factory=dict)

    def join_body(self, reason: str | None = None) -> dict[str, Any]:
        meta = self.metadata if self.metadata is not None else subscription(self.topics)
        return {
            "group_id": self.group_id, "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocol_type": self.protocol_type,
            "protocols": [{"name": self.protocol, "metadata": meta}],
            "reason": reason,
        }

    def send_join(self, reason: str | None = None) -> asyncio.Future[dict[str, Any]]:
        return self.conn.send(Api.JOIN_GROUP, self.join_body(reason))

    def take_join(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["error_code"] in (Err.NONE, Err.MEMBER_ID_REQUIRED):
            self.member_id = body["member_id"]
        if body["error_code"] == Err.NONE:
            self.generation_id = body["generation_id"]
            self.leader = body["leader"]
            self.joined = body
        return body

    async def join_once(self, reason: str | None = None) -> dict[str, Any]:
        return self.take_join(await answer(self.send_join(reason)))

    async def first_join(self, reason: str | None = None) -> None:
        """Dynamic: the MEMBER_ID_REQUIRED round trip; the re-join is left to the caller."""
        body = await self.join_once(reason)
        assert body["error_code"] == Err.MEMBER_ID_REQUIRED, body

    async def join(self, reason: str | None = None) -> dict[str, Any]:
        body = await self.join_once(reason)
        if body["error_code"] == Err.MEMBER_ID_REQUIRED:
            body = await self.join_once(reason)
        assert body["error_code"] == Err.NONE, body
        return body

    def sync_body(self, assignments: dict[str, bytes] | None = None) -> dict[str, Any]:
        return {
            "group_id": self.group_id, "generation_id": self.generation_id,
            "member_id": self.member_id, "group_instance_id": self.instance_id,
            "assignments": [{"member_id": m, "assignment": a}
                            for m, a in (assignments or {}).items()],
        }

    def send_sync(self, assignments: dict[str, bytes] | None = None
                  ) -> asyncio.Future[dict[str, Any]]:
        return self.conn.send(Api.SYNC_GROUP, self.sync_body(assignments))

    async def sync(self, assignments: dict[str, bytes] | None = None) -> dict[str, Any]:
        return await answer(self.send_sync(assignments))

    def send_heartbeat(self, **extra: Any) -> asyncio.Future[dict[str, Any]]:
        body = {"group_id": self.group_id, "generation_id": self.generation_id,
                "member_id": self.member_id, "group_instance_id": self.instance_id, **extra}
        return self.conn.send(Api.HEARTBEAT, body)

    async def heartbeat(self, **extra: Any) -> dict[str, Any]:
        return await answer(self.send_heartbeat(**extra))

    async def leave(self, reason: str | None = None) -> dict[str, Any]:
        return await self.conn.call(Api.LEAVE_GROUP, {"group_id": self.group_id, "members": [
            {"member_id": self.member_id, "group_instance_id": self.instance_id,
             "reason": reason}]})

    async def commit(self, topic: str, offsets: dict[int, int],
                     **extra: Any) -> dict[str, Any]:
        body = {"group_id": self.group_id, "generation_id": self.generation_id,
                "member_id": self.member_id, "group_instance_id": self.instance_id,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": o} for p, o in offsets.items()
                ]}], **extra}
        return await self.conn.call(Api.OFFSET_COMMIT, body)

    def group_context(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "member_id": self.member_id,
                "generation_id": self.generation_id, "group_instance_id": self.instance_id}

    async def fetch(self, topic: str, partitions: list[int], **top: Any) -> dict[str, Any]:
        body = {"max_wait_ms": 0, "group": self.group_context(), **top,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": p, "fetch_offset": 0} for p in partitions]}]}
        return await self.conn.call(Api.FETCH, body)


async def stable_single(conn: WireConn, group: str, topic: str, partitions: list[int],
                        **member: Any) -> Member:
    """One member joined and synced, owning ``topic``/``partitions``."""
    m = Member(conn, group, [topic], **member)
    await m.join()
    body = await m.sync({m.member_id: assignment([(topic, partitions)])})
    assert body["error_code"] == Err.NONE, body
    return m


async def describe(conn: WireConn, group: str) -> dict[str, Any]:
    body = await conn.call(Api.DESCRIBE_GROUPS, {"groups": [group]})
    assert body["error_code"] == Err.NONE, body
    return body["groups"][0]  # type: ignore[no-any-return]


async def until_group(conn: WireConn, group: str,
                      ready: Callable[[dict[str, Any]], bool],
                      timeout: float = TIMEOUT) -> dict[str, Any]:
    """DescribeGroups round trips until ``ready(group)``: waits on answers, not on sleeps."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        described = await describe(conn, group)
        if ready(described):
            return described
        if loop.time() > deadline:
            raise AssertionError(f"group never became ready: {described}")
