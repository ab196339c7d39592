"""Kafka's binary protocol, sans I/O: a request payload in, a header and a dict out; a
response dict in, a payload out. What the listener for unmodified Kafka clients speaks.

Payloads are frames without their int32 size (:func:`with_size` adds it). Bodies are
plain dicts keyed by the snake_case of Kafka's field names (``ThrottleTimeMs`` ->
``throttle_time_ms``), arrays are lists of dicts, strings ``str``, bytes ``bytes``.

Decoding (:func:`decode_request`, :func:`decode_response`) is strict and bounded: a
truncated payload, a length or count beyond what remains, a negative length where null
is not allowed, a string that is not UTF-8 (or, in a response, bytes after the body) all
raise :class:`KafkaCodecError`, and nothing else, carrying what is known of the header.
Bytes after a request's body are ignored, as Kafka's broker ignores them. A
decoded body has every field the served versions of its message know: one the version
does not carry (or a tagged field not sent) holds Kafka's default for it. ``records``
come back as ``memoryview`` slices of the payload, never copied.

Encoding (:func:`encode_response`, :func:`encode_request`) reads only the fields the
version carries; a missing key takes the schema's default (0, "", [], False, null where
the schema says null), so callers set only what matters. A value the wire cannot carry
raises :class:`KafkaEncodeError`.

Headers: requests use header v1 (api_key, api_version, correlation_id, client_id) or,
in flexible versions, v2 (v1 plus tagged fields); responses v0 (correlation_id) or v1
(plus tagged fields), except ApiVersions, whose response header is v0 at every version
so that a client can read it before it knows what the broker speaks.

The code per (API, version, direction) is written and compiled when first used
(:mod:`~groupwire.protocol.kafka.compiler`, about a millisecond each), from the table in
:mod:`~groupwire.protocol.kafka.schema`; :func:`compile_all` does all of them up front
(half a second, ~12 MB). Nothing else is kept between calls, so every function here
may be called from any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from groupwire.protocol.errors import InvalidMessageError, RemoteProtocolError
from groupwire.protocol.kafka import compiler, schema
from groupwire.protocol.kafka.compiler import Decoder, Encoder, Malformed, Unencodable
from groupwire.protocol.kafka.spec import Message

__all__ = [
    "API_NAMES", "API_VERSIONS_KEY", "SERVED", "UNSUPPORTED_VERSION", "KafkaCodecError",
    "KafkaEncodeError", "KafkaRequest", "RequestHeader", "UnsupportedKafkaVersion",
    "compile_all", "decode_request", "decode_response", "encode_api_versions_fallback",
    "encode_request", "encode_response", "is_flexible", "read_request_header",
    "request_header_version", "response_header_version", "with_size",
]

SERVED: Mapping[int, tuple[int, int]] = MappingProxyType(dict(schema.SERVED))
"""API key -> (min, max) version served, for requests and responses alike."""
API_NAMES: Mapping[int, str] = MappingProxyType(dict(schema.API_NAMES))
"""API key -> Kafka's name for it (0 -> "Produce")."""

API_VERSIONS_KEY: Final = 18
UNSUPPORTED_VERSION: Final = 35
"""Kafka's error code for an API or version the broker does not serve."""

_I = struct.Struct(">i")
_H = struct.Struct(">h")
_HHI = struct.Struct(">hhi")
_HHH = struct.Struct(">hhh")
_HHIH = struct.Struct(">hhih")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """What every request starts with (request header v1, or v2 in flexible versions)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """A decoded request: its header, and its body as a dict of snake_case fields."""

    header: RequestHeader
    body: dict[str, Any]


_new = object.__new__
_SET_KEY = RequestHeader.__dict__["api_key"].__set__  # the slots' descriptors
_SET_VERSION = RequestHeader.__dict__["api_version"].__set__
_SET_CORRELATION = RequestHeader.__dict__["correlation_id"].__set__
_SET_CLIENT = RequestHeader.__dict__["client_id"].__set__
_SET_HEADER = KafkaRequest.__dict__["header"].__set__
_SET_BODY = KafkaRequest.__dict__["body"].__set__


def _header(api_key: int, api_version: int, correlation_id: int,
            client_id: str | None) -> RequestHeader:
    """``RequestHeader(...)`` without the frozen ``__init__``, which sets each field through
    ``object.__setattr__``: this is the hot path of every request."""
    header: RequestHeader = _new(RequestHeader)
    _SET_KEY(header, api_key)
    _SET_VERSION(header, api_version)
    _SET_CORRELATION(header, correlation_id)
    _SET_CLIENT(header, client_id)
    return header


def _request(header: RequestHeader, body: dict[str, Any]) -> KafkaRequest:
    request: KafkaRequest = _new(KafkaRequest)
    _SET_HEADER(request, header)
    _SET_BODY(request, body)
    return request


class KafkaCodecError(RemoteProtocolError):
    """A payload that is not a valid Kafka message of the API and version it claims.

    ``header`` is set once the request header parsed; the other attributes hold what was
    read before the error, so a refusal can still name the correlation id."""

    def __init__(self, message: str, *, header: RequestHeader | None = None,
                 api_key: int | None = None, api_version: int | None = None,
                 correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.header = header
        self.api_key = header.api_key if header is not None else api_key
        self.api_version = header.api_version if header is not None else api_version
        self.correlation_id = header.correlation_id if header is not None else correlation_id


class UnsupportedKafkaVersion(KafkaCodecError):
    """An API key not served, or a version outside the served range (``header`` is set:
    the broker answers UNSUPPORTED_VERSION to it)."""

    header: RequestHeader

    def __init__(self, message: str, *, header: RequestHeader) -> None:
        super().__init__(message, header=header)


class KafkaEncodeError(InvalidMessageError):
    """A body given to an encoder has a value its field cannot carry (wrong type, out of
    range, null where the version forbids it); nothing was written."""


# --- the compiled codecs, per (API, version, direction) -----------------------------------

_Entry = tuple[Decoder, bool]
_DECODERS: dict[tuple[int, int, bool, bool], _Entry] = {}
_ENCODERS: dict[tuple[int, int, bool], tuple[Encoder, bool]] = {}


def _message(api_key: int, api_version: int, response: bool) -> Message | None:
    message = (schema.RESPONSES if response else schema.REQUESTS).get(api_key)
    if message is None or not message.versions[0] <= api_version <= message.versions[1]:
        return None
    return message


def _decoder(api_key: int, api_version: int, response: bool, view: bool) -> _Entry | None:
    key = (api_key, api_version, response, view)
    entry = _DECODERS.get(key)
    if entry is None:
        message = _message(api_key, api_version, response)
        if message is None:
            return None
        entry = _DECODERS[key] = (compiler.decoder(message, api_version, view=view),
                                  message.is_flexible(api_version))
    return entry


def _encoder(api_key: int, api_version: int, response: bool) -> tuple[Encoder, bool] | None:
    key = (api_key, api_version, response)
    entry = _ENCODERS.get(key)
    if entry is None:
        message = _message(api_key, api_version, response)
        if message is None:
            return None
        entry = _ENCODERS[key] = (compiler.encoder(message, api_version),
                                  message.is_flexible(api_version))
    return entry


def compile_all() -> int:
    """Write every served codec now rather than at first use; returns how many."""
    for api_key, (lo, hi) in SERVED.items():
        for version in range(lo, hi + 1):
            for response in (False, True):
                for view in (False, True):
                    _decoder(api_key, version, response, view)
                _encoder(api_key, version, response)
    return len(_DECODERS) + len(_ENCODERS)


def _what(api_key: int, api_version: int, response: bool) -> str:
    name = API_NAMES.get(api_key, f"API {api_key}")
    return f"{name} v{api_version} {'response' if response else 'request'}"


# --- versions and headers -----------------------------------------------------------------


def is_flexible(api_key: int, api_version: int, *, response: bool = False) -> bool:
    """Whether the body of this API version uses compact types and tagged fields (any
    version of a served API; ValueError for an API not served)."""
    message = (schema.RESPONSES if response else schema.REQUESTS).get(api_key)
    if message is None:
        raise ValueError(f"API key {api_key} is not served")
    return message.is_flexible(api_version)


def request_header_version(api_key: int, api_version: int) -> int:
    """1, or 2 (with tagged fields) for flexible versions."""
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0, or 1 (with tagged fields) for flexible versions except ApiVersions'."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version, response=True) else 0


def _buffer(payload: bytes | bytearray | memoryview) -> tuple[Any, bool]:
    """What the decoders read: ``bytes`` as they are, anything else as a byte view."""
    if type(payload) is bytes:
        return payload, False
    view = memoryview(payload)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view, True


def _read_header(buf: Any, view: bool) -> tuple[RequestHeader, int]:
    n = len(buf)
    if n < 10:
        api_key = _H.unpack_from(buf, 0)[0] if n >= 2 else None
        api_version = _H.unpack_from(buf, 2)[0] if n >= 4 else None
        correlation_id = _I.unpack_from(buf, 4)[0] if n >= 8 else None
        raise KafkaCodecError(f"request header truncated: {n} bytes", api_key=api_key,
                              api_version=api_version, correlation_id=correlation_id)
    api_key, api_version, correlation_id, length = _HHIH.unpack_from(buf, 0)
    if length < 0:
        if length != -1:
            raise KafkaCodecError(f"request header: client id length {length}",
                                  api_key=api_key, api_version=api_version,
                                  correlation_id=correlation_id)
        return _header(api_key, api_version, correlation_id, None), 10
    pos = 10 + length
    if pos > n:
        raise KafkaCodecError(f"request header: client id of {length} bytes, {n - 10} left",
                              api_key=api_key, api_version=api_version,
                              correlation_id=correlation_id)
    try:
        client_id = str(buf[10:pos], "utf-8") if view else buf[10:pos].decode()
    except UnicodeDecodeError:
        raise KafkaCodecError("request header: client id is not UTF-8", api_key=api_key,
                              api_version=api_version, correlation_id=correlation_id) from None
    return _header(api_key, api_version, correlation_id, client_id), pos


def read_request_header(payload: bytes | bytearray | memoryview) -> RequestHeader:
    """The header's api key, version, correlation id and client id, for any API and
    version (served or not: an unserved one is answered by them)."""
    return _read_header(*_buffer(payload))[0]


def _reason(exc: Exception) -> str:
    if isinstance(exc, Malformed):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"a string is not UTF-8 ({exc.reason} at byte {exc.start})"
    if isinstance(exc, struct.error | IndexError):
        return "truncated"
    return f"malformed ({exc})"


def _skip_header_tags(buf: Any, pos: int) -> int:
    if buf[pos] == 0:
        return pos + 1
    return compiler.skip_tagged(buf, pos, len(buf))


# --- requests -----------------------------------------------------------------------------


def decode_request(payload: bytes | bytearray | memoryview) -> KafkaRequest:
    """A request payload (no size prefix) as its header and body.

    Raises :class:`UnsupportedKafkaVersion` for an API or version not served, and
    :class:`KafkaCodecError` for anything malformed."""
    buf, view = _buffer(payload)
    header, pos = _read_header(buf, view)
    entry = _decoder(header.api_key, header.api_version, False, view)
    if entry is None:
        served = SERVED.get(header.api_key)
        raise UnsupportedKafkaVersion(
            f"{_what(header.api_key, header.api_version, False)}: not served"
            + ("" if served is None else f" (versions {served[0]}-{served[1]})"),
            header=header)
    decode, flexible = entry
    try:
        if flexible:
            pos = _skip_header_tags(buf, pos)
        body, pos = decode(buf, pos)
    except (Malformed, struct.error, IndexError, ValueError) as exc:
        raise KafkaCodecError(
            f"{_what(header.api_key, header.api_version, False)}: {_reason(exc)}",
            header=header) from None
    # Bytes after the body are ignored, as Kafka's broker ignores them (it parses the
    # body and never looks further): librdkafka 2.16 ends AlterUserScramCredentials with
    # its empty tagged fields twice.
    return _request(header, body)


def encode_request(api_key: int, api_version: int, correlation_id: int,
                   client_id: str | None, body: Mapping[str, Any]) -> bytes:
    """A request payload (no size prefix): header v1 or v2, then ``body``."""
    entry = _encoder(api_key, api_version, False)
    if entry is None:
        raise KafkaEncodeError(f"{_what(api_key, api_version, False)}: not served")
    encode, flexible = entry
    try:
        head = _HHI.pack(api_key, api_version, correlation_id)
        if client_id is None:
            client = b"\xff\xff"
        else:
            raw = client_id.encode()
            client = _H.pack(len(raw)) + raw
    except (struct.error, AttributeError, UnicodeEncodeError) as exc:
        raise KafkaEncodeError(f"request header: {exc}") from None
    out: list[Any] = [head, client, b"\x00"] if flexible else [head, client]
    return _encode(encode, body, out, _what(api_key, api_version, False))


def _encode(encode: Encoder, body: Mapping[str, Any], out: list[Any], what: str) -> bytes:
    try:
        encode(body, out)
        return b"".join(out)
    except Unencodable as exc:
        raise KafkaEncodeError(f"{what}: {exc}") from None
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise KafkaEncodeError(f"{what}: {exc}") from None


# --- responses ----------------------------------------------------------------------------


def encode_response(header: RequestHeader, body: Mapping[str, Any]) -> bytes:
    """The response payload (no size prefix) to the request with ``header``."""
    entry = _encoder(header.api_key, header.api_version, True)
    if entry is None:
        raise UnsupportedKafkaVersion(
            f"{_what(header.api_key, header.api_version, True)}: not served", header=header)
    encode, flexible = entry
    try:
        head = _I.pack(header.correlation_id)
    except struct.error as exc:
        raise KafkaEncodeError(f"response header: {exc}") from None
    tagged = flexible and header.api_key != API_VERSIONS_KEY
    out: list[Any] = [head, b"\x00"] if tagged else [head]
    return _encode(encode, body, out, _what(header.api_key, header.api_version, True))


def decode_response(api_key: int, api_version: int,
                    payload: bytes | bytearray | memoryview) -> tuple[int, dict[str, Any]]:
    """A response payload (no size prefix) as (correlation id, body); ValueError for an
    API version not served (the caller chose it)."""
    buf, view = _buffer(payload)
    entry = _decoder(api_key, api_version, True, view)
    if entry is None:
        raise ValueError(f"{_what(api_key, api_version, True)}: not served")
    decode, flexible = entry
    what = _what(api_key, api_version, True)
    if len(buf) < 4:
        raise KafkaCodecError(f"{what}: header truncated", api_key=api_key,
                              api_version=api_version)
    correlation_id = _I.unpack_from(buf, 0)[0]
    try:
        pos = 4
        if flexible and api_key != API_VERSIONS_KEY:
            pos = _skip_header_tags(buf, pos)
        body, pos = decode(buf, pos)
    except (Malformed, struct.error, IndexError, ValueError) as exc:
        raise KafkaCodecError(f"{what}: {_reason(exc)}", api_key=api_key,
                              api_version=api_version, correlation_id=correlation_id) from None
    if pos != len(buf):
        raise KafkaCodecError(f"{what}: {len(buf) - pos} bytes after the body",
                              api_key=api_key, api_version=api_version,
                              correlation_id=correlation_id)
    return correlation_id, body


def encode_api_versions_fallback(correlation_id: int,
                                 served: Mapping[int, tuple[int, int]]) -> bytes:
    """The answer to an ApiVersions request of a version not served: UNSUPPORTED_VERSION
    in a v0 body (header v0, error code, the served ranges), which every client reads
    whatever version it asked in, then retries with one listed."""
    parts = [_I.pack(correlation_id), _H.pack(UNSUPPORTED_VERSION), _I.pack(len(served))]
    parts += [_HHH.pack(key, lo, hi) for key, (lo, hi) in sorted(served.items())]
    return b"".join(parts)


def with_size(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` behind its int32 size: one Kafka frame."""
    return _I.pack(len(payload)) + payload
