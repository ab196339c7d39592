"""Bounds on the work one request can cause before it is validated (docs/protocol.md §2).

A 16 MiB frame can hold 16 million empty arrays: decoded, that is a gigabyte and seconds
of one event loop. Three layers keep a request's decode cost proportional to what real
clients send:

- every ``str`` anywhere in a request (client id, fields, unknown keys, map keys) is at
  most :data:`MAX_STRING_BYTES` of UTF-8, Kafka's own bound (an int16 length);
- a request body holds at most :data:`MAX_BODY_ITEMS` array elements plus map entries,
  counted over every level (known fields or not);
- every array *field* of a request is at most :data:`MAX_ARRAY_ITEMS` long, checked by the
  generated decoders (``protocol.codegen``), which name the field's path.

msgpack's C unpacker checks string and container lengths but not totals, cannot say
where a limit was passed, and builds whatever it reads: 16 million empty arrays, or a
10 MB chain of nested arrays of nils (its hooks only see finished containers). So
payloads above :data:`SCAN_ABOVE_BYTES` are first walked by :func:`check_value`, which
reads only headers, allocates nothing per value, skips runs of one-byte values in one
step and stops at the first excess, naming its path. Smaller payloads are unpacked
directly: they cannot hold a str or an item count over the limits, and msgpack builds
at most one object per byte of them (~3 ms). The walk costs ~0.2 µs a value, so it stays
off the common path: requests that large are rare and bulky (Produce's bins cost it
nothing).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "MAX_ARRAY_ITEMS",
    "MAX_BODY_ITEMS",
    "MAX_STRING_BYTES",
    "SCAN_ABOVE_BYTES",
    "EnvelopeHead",
    "LimitError",
    "check_value",
    "read_envelope_head",
]

MAX_STRING_BYTES: Final = 32_767
"""Longest ``str`` in a request, in UTF-8 bytes: Kafka's protocol strings have an int16
length, so no Kafka client sends a longer one."""

MAX_ARRAY_ITEMS: Final = 10_000
"""Longest array field of a request. Partitions per topic are capped at 10 000
(CreateTopics, CreatePartitions), so every per-partition list fits; 10 000 topics, groups,
members or protocols in one request is beyond any client we know of."""

MAX_BODY_ITEMS: Final = 50_000
"""Most array elements plus map entries in one request body, all levels counted. An
OffsetCommit, Fetch or ListOffsets partition costs 3-4 (its slot and its fields), so one
request still covers every partition of a 10 000-partition topic; 50 000 empty arrays
(the costliest items to build) decode in ~4 ms."""

SCAN_ABOVE_BYTES: Final = 32 * 1024
"""Payloads longer than this are walked by :func:`check_value` before msgpack decodes
them (the heartbeat fast path leaves them to ``decode_request``). Up to it, the worst
msgpack can be made to build unchecked (32 768 empty arrays) costs ~3 ms."""


class LimitError(Exception):
    """A request value over a limit: ``path`` (``topics[3].name``) and ``reason``."""

    __slots__ = ("path", "reason")

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# --- msgpack headers ----------------------------------------------------------------------
# Per first byte: (kind, header bytes, size): for _FIXED the whole value's size; for the
# others the number of big-endian length bytes after the marker (0: length in the marker).

_FIXED, _STR, _RAW, _ARRAY, _MAP, _BAD = range(6)


def _marker_table() -> tuple[tuple[int, int, int], ...]:
    table: list[tuple[int, int, int]] = []
    for b in range(256):
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3, 0x80, 0x90, 0xA0):
            entry = (_FIXED, 1, 1)  # one-byte values, empty map, array and str included
        elif 0x80 <= b <= 0x8F:
            entry = (_MAP, 1, 0)
        elif 0x90 <= b <= 0x9F:
            entry = (_ARRAY, 1, 0)
        elif 0xA0 <= b <= 0xBF:
            entry = (_STR, 1, 0)
        elif b in (0xC4, 0xC5, 0xC6):  # bin 8/16/32
            n = 1 << (b - 0xC4)
            entry = (_RAW, 1 + n, n)
        elif b in (0xC7, 0xC8, 0xC9):  # ext 8/16/32: length, then a type byte
            n = 1 << (b - 0xC7)
            entry = (_RAW, 2 + n, n)
        elif b in (0xCA, 0xCB):  # float 32/64
            entry = (_FIXED, 1, 5 if b == 0xCA else 9)
        elif 0xCC <= b <= 0xD3:  # uint/int 8..64
            entry = (_FIXED, 1, 1 + (1 << ((b - 0xCC) % 4)))
        elif 0xD4 <= b <= 0xD8:  # fixext 1..16: type byte and data
            entry = (_FIXED, 1, 2 + (1 << (b - 0xD4)))
        elif b in (0xD9, 0xDA, 0xDB):  # str 8/16/32
            n = 1 << (b - 0xD9)
            entry = (_STR, 1 + n, n)
        elif b in (0xDC, 0xDD):
            n = 2 if b == 0xDC else 4
            entry = (_ARRAY, 1 + n, n)
        elif b in (0xDE, 0xDF):
            n = 2 if b == 0xDE else 4
            entry = (_MAP, 1 + n, n)
        else:  # 0xC1: never used
            entry = (_BAD, 1, 0)
        table.append(entry)
    return tuple(table)


_MARKERS: Final = _marker_table()
_KIND: Final = tuple(k for k, _, _ in _MARKERS)
_HEADER: Final = tuple(h for _, h, _ in _MARKERS)
_SIZE: Final = tuple(s for _, _, s in _MARKERS)


_ONE_BYTE_RUN: Final = re.compile(rb"[\x00-\x80\x90\xa0\xc0\xc2\xc3\xe0-\xff]+")
"""A run of one-byte values (fixints, nil, booleans, empty map, array or str): skipped in
one step, so that arrays of them cost the walk nothing per item."""


def _path(data: bytes | memoryview, frames: list[tuple[int, bool, int, int, int]]) -> str:
    """The path of the value being read: ``topics[3].name``, like FieldError's."""
    path = ""
    for _left, is_map, done, key_start, key_end in frames:
        if not is_map:
            segment = f"[{done}]"
        elif done % 2 == 0:
            segment = "(map key)"
        elif key_start < 0:
            segment = "(non-str key)"
        else:
            segment = str(data[key_start:key_end], "utf-8", "replace")
            if len(segment) > 64:
                segment = segment[:64] + "..."
        if segment.startswith("[") or not path:
            path += segment
        else:
            path += "." + segment
    return path or "body"


def check_value(data: bytes | memoryview, pos: int) -> int:
    """Walk the one msgpack value at ``data[pos:]`` and return where it ends.

    Raises :class:`LimitError` at the first str over :data:`MAX_STRING_BYTES` or when the
    array elements plus map entries declared so far pass
    :data:`MAX_BODY_ITEMS`, before anything behind that header is read; so the walk
    visits at most about twice that many values. Truncated or invalid bytes are not its
    business: it stops and returns ``len(data)``, and msgpack then refuses the frame.
    """
    end = len(data)
    items = 0
    kinds, headers, sizes, run = _KIND, _HEADER, _SIZE, _ONE_BYTE_RUN.match
    # The container being read (the root is a pseudo-array of one value): values left,
    # is it a map, values done, where its last str key lies; its ancestors on ``stack``.
    left, is_map, done, key_start, key_end = 1, False, 0, -1, -1
    stack: list[tuple[int, bool, int, int, int]] = []
    while pos < end:
        b = data[pos]
        kind = kinds[b]
        if kind == _FIXED:
            size = sizes[b]
            if size == 1 and left > 1:  # maybe a run of them: skip it in one step
                m = run(data, pos, min(end, pos + left))
                assert m is not None
                k = m.end() - pos
                pos += k
                done += k - 1
                left -= k - 1
                if is_map:
                    key_start = -1
            else:
                pos += size
        elif kind == _STR:
            width = sizes[b]
            n = b & 0x1F if width == 0 else int.from_bytes(data[pos + 1:pos + 1 + width])
            if n > MAX_STRING_BYTES:
                frames = [*stack, (left, is_map, done, key_start, key_end)][1:]
                raise LimitError(_path(data, frames),
                                 f"string of {n} bytes over the limit of {MAX_STRING_BYTES}")
            pos += headers[b]
            if is_map and done % 2 == 0:  # a map key: kept for the path
                key_start, key_end = pos, pos + n
            pos += n
        elif kind == _RAW:
            width = sizes[b]
            pos += headers[b] + int.from_bytes(data[pos + 1:pos + 1 + width])
        elif kind == _BAD:
            return end
        else:
            width = sizes[b]
            n = b & 0x0F if width == 0 else int.from_bytes(data[pos + 1:pos + 1 + width])
            items += n
            if items > MAX_BODY_ITEMS:
                frames = [*stack, (left, is_map, done, key_start, key_end)][1:]
                raise LimitError(_path(data, frames),
                                 f"request body over the limit of {MAX_BODY_ITEMS} items "
                                 "(array elements and map entries)")
            pos += headers[b]
            if n:
                if is_map and done % 2 == 0:
                    key_start = -1  # a container as a map key: no name for the path
                stack.append((left, is_map, done, key_start, key_end))
                left, is_map, done, key_start, key_end = (
                    2 * n if kind == _MAP else n, kind == _MAP, 0, -1, -1)
                continue
        # one value complete: count it, and close every container it completes
        done += 1
        left -= 1
        while not left:
            if not stack:
                return pos
            left, is_map, done, key_start, key_end = stack.pop()
            done += 1
            left -= 1
    return end


# --- the envelope's head ------------------------------------------------------------------


class EnvelopeHead:
    """``[api_key, api_version, correlation_id, client_id, body]`` read up to the body."""

    __slots__ = ("api_key", "api_version", "body_pos", "client_id_bytes", "correlation_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id_bytes: int, body_pos: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id_bytes = client_id_bytes
        """Length of the client id in bytes, -1 when nil."""
        self.body_pos = body_pos


def _length(data: bytes | memoryview, pos: int, b: int) -> int:
    """The byte length in the header of the str at ``pos`` (marker ``b``)."""
    width = _SIZE[b]
    if width == 0:
        return b & 0x1F
    return int.from_bytes(data[pos + 1:pos + 1 + width])


def _read_int(data: bytes | memoryview, pos: int) -> tuple[int | None, int]:
    """An int at ``pos`` (None if the value there is not one) and where the value ends."""
    b = data[pos]
    if b <= 0x7F:
        return b, pos + 1
    if b >= 0xE0:
        return b - 0x100, pos + 1
    if 0xCC <= b <= 0xD3:
        width = 1 << ((b - 0xCC) % 4)
        return int.from_bytes(data[pos + 1:pos + 1 + width], "big", signed=b >= 0xD0), \
            pos + 1 + width
    return None, pos


def read_envelope_head(data: bytes | memoryview) -> EnvelopeHead | None:
    """The envelope's ints and where its body starts, or None when the payload does not
    begin as a request envelope (that frame is then refused whole, as before)."""
    try:
        b = data[0]
        if b == 0x95:
            pos = 1
        elif b == 0xDC and data[1:3] == b"\x00\x05":
            pos = 3
        elif b == 0xDD and data[1:5] == b"\x00\x00\x00\x05":
            pos = 5
        else:
            return None
        ints: list[int] = []
        for _ in range(3):
            value, pos = _read_int(data, pos)
            if value is None:
                return None
            ints.append(value)
        b = data[pos]
        if b == 0xC0:
            client_id_bytes = -1
        elif b == 0xA0:
            client_id_bytes = 0
        elif _KIND[b] == _STR:
            client_id_bytes = _length(data, pos, b)
        else:
            return None
        body_pos = pos + _HEADER[b] + max(client_id_bytes, 0)
        if body_pos >= len(data):
            return None
    except IndexError:
        return None
    return EnvelopeHead(ints[0], ints[1], ints[2], client_id_bytes, body_pos)
