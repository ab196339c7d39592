"""The envelopes around every body (docs/protocol.md §2), and responses framed in one step.

A request payload is ``[api_key, api_version, correlation_id, client_id, body]``, a
response payload ``[correlation_id, body]``; bodies go through
:data:`~groupwire.protocol.bodies.BODY_CODECS`, each codec written when first used.

Notes: msgpack decodes its timestamp extension (type -1) without calling ``ext_hook``;
such a value is refused wherever a field is read and, like any value under an unknown
key, ignored elsewhere. Map keys must be str or bin on the wire (msgpack's
``strict_map_key``, which guards against hash flooding); other keys make the frame
undecodable (EnvelopeError).

Requests are decoded within :mod:`groupwire.protocol.limits`: a body over a limit is
answered INVALID_REQUEST naming where, on its correlation id, before it is decoded.

The answer the broker writes most is a NONE Heartbeat: :func:`pack_body` packs such a
body once and :func:`frame_response_packed` wraps it around each correlation id.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

import msgpack

from groupwire.protocol.bodies import BODY_CODECS
from groupwire.protocol.codegen import FieldError, Fn, builder
from groupwire.protocol.errors import (
    BodyError,
    EnvelopeError,
    LocalProtocolError,
    MalformedRequestError,
    UnsupportedRequestError,
)
from groupwire.protocol.framing import Payload
from groupwire.protocol.limits import (
    MAX_STRING_BYTES,
    SCAN_ABOVE_BYTES,
    LimitError,
    check_value,
    read_envelope_head,
)
from groupwire.protocol.messages import (
    REQUEST_TYPES,
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    Request,
    Response,
)
from groupwire.protocol.types import INT32_RANGE

__all__ = [
    "RequestFrame",
    "decode_request",
    "decode_response",
    "decode_response_body",
    "decode_response_envelope",
    "encode_request",
    "encode_response",
    "encode_response_packed",
    "frame_response_packed",
    "pack_body",
    "peek_response_correlation_id",
]

R = TypeVar("R", bound=Response)


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A decoded request envelope and its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request: Request


def _unpack(payload: Payload) -> Any:
    """Exactly one msgpack value, or EnvelopeError (bad bytes, bad UTF-8, trailing bytes).

    Non-str map keys and ext values are let through: docs/protocol.md §2 closes a connection
    only when the frame is not one value or the envelope is broken. In a body they are a
    mistyped field (INVALID_REQUEST naming its path) or, under an unknown key, ignored.
    """
    try:
        return msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=False)
    except (ValueError, TypeError) as exc:  # msgpack's own errors subclass ValueError
        raise EnvelopeError(f"not one msgpack value: {exc}") from None


def _pack(obj: Any) -> bytes:
    try:
        data: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode message: {exc}") from None
    return data


def _encoder(encoders: Mapping[type, Fn], message: Any, side: str) -> Fn:
    try:
        return encoders[type(message)]
    except KeyError:
        raise LocalProtocolError(
            f"{type(message).__name__} is not a {side} of protocol.messages"
        ) from None


# --- requests -----------------------------------------------------------------------------

_INT32_LO: Final = INT32_RANGE.lo
_INT32_HI: Final = INT32_RANGE.hi
_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_REQUEST_ENCODERS: Final = BODY_CODECS.request_encoders
_RESPONSE_ENCODERS: Final = BODY_CODECS.response_encoders

_RequestEntry = tuple[ApiKey, int, int, Fn]
_REQUEST_DECODERS: Final[dict[int, _RequestEntry]] = {}
"""api key -> (ApiKey, min version, max version, body decoder), each filled in by
:func:`_request_entry` when its api is first read (the decoder is written then)."""


def _request_entry(key: int) -> _RequestEntry | None:
    """The entry of api ``key`` (None for an api not served), kept for the next request."""
    try:
        api_key = ApiKey(key)
        cls = REQUEST_TYPES[api_key]
    except (ValueError, KeyError):
        return None
    entry = _REQUEST_DECODERS[key] = (api_key, *SUPPORTED_VERSIONS[api_key],
                                      BODY_CODECS.decoders[cls])
    return entry


def _is_int32(value: Any) -> bool:
    return type(value) is int and _INT32_LO <= value <= _INT32_HI


def encode_request(
    correlation_id: int, request: Request, client_id: str | None = None, api_version: int = 0
) -> bytes:
    """The unframed payload ``[api_key, api_version, correlation_id, client_id, body]``."""
    body = _encoder(_REQUEST_ENCODERS, request, "request")(request)
    return _pack([int(request.API_KEY), api_version, correlation_id, client_id, body])


def decode_request(payload: Payload) -> RequestFrame:
    """Decode one request payload (docs/protocol.md §2).

    EnvelopeError: close the connection. UnsupportedRequestError / MalformedRequestError:
    answer with their ``code`` on their ``correlation_id``.
    """
    # Walked first when large: msgpack would build whatever it holds (protocol.limits).
    # A smaller payload cannot pass a limit: no str over MAX_STRING_BYTES fits in it.
    if len(payload) > SCAN_ABOVE_BYTES:
        refused = _over_limits(payload)
        if refused is not None:
            return refused
    try:  # _unpack inlined: this runs for every request
        obj = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=False)
    except (ValueError, TypeError) as exc:
        raise EnvelopeError(f"not one msgpack value: {exc}") from None
    if type(obj) is not list or len(obj) != 5:
        raise EnvelopeError("request envelope is not an array of 5")
    key, version, cid, client_id, body = obj
    # _is_int32 inlined: this runs for every request
    if not (type(key) is int and type(version) is int and type(cid) is int
            and _INT32_LO <= key <= _INT32_HI and _INT32_LO <= version <= _INT32_HI
            and _INT32_LO <= cid <= _INT32_HI):
        names = ("api_key", "api_version", "correlation_id")
        bad = next(n for n, v in zip(names, obj, strict=False) if not _is_int32(v))
        raise EnvelopeError(f"request envelope: {bad} is not an int")
    if client_id is not None and type(client_id) is not str:
        raise EnvelopeError("request envelope: client_id is not str or nil")
    entry = _REQUEST_DECODERS.get(key) or _request_entry(key)
    if entry is None:
        raise UnsupportedRequestError(f"unknown api_key {key}", correlation_id=cid, api_key=key)
    api_key, lo, hi, dec = entry
    supported = lo <= version <= hi
    if not supported and key != _API_VERSIONS:
        raise UnsupportedRequestError(
            f"{api_key.name} version {version} not supported ({lo}..{hi})",
            correlation_id=cid,
            api_key=key,
        )
    try:
        request = dec(body)
    except FieldError as err:
        if supported:
            raise MalformedRequestError(err.message(), correlation_id=cid, api_key=key) from None
        request = ApiVersionsRequest()  # an unknown version is answered in v0 (§3)
    frame: RequestFrame = _build_request_frame(api_key, version, cid, client_id, request)
    return frame


_build_request_frame: Final = builder(RequestFrame)


def _over_limits(payload: Payload) -> RequestFrame | None:
    """Check a request's client id and body against protocol.limits without decoding it.

    None when within them, or when the envelope is not readable (the caller's msgpack
    decode then refuses the frame as before). Otherwise raises as ``decode_request``
    would, in its order: UnsupportedRequestError for an api or version not served, else
    MalformedRequestError naming the path; an ApiVersions of an unknown version is still
    answered in v0 (§3), so it comes back as a frame.
    """
    head = read_envelope_head(payload)
    if head is None or not (_is_int32(head.api_key) and _is_int32(head.api_version)
                            and _is_int32(head.correlation_id)):
        return None
    key, version, cid = head.api_key, head.api_version, head.correlation_id
    if head.client_id_bytes > MAX_STRING_BYTES:
        problem = (f"client_id: string of {head.client_id_bytes} bytes over the limit of "
                   f"{MAX_STRING_BYTES}")
    else:
        try:
            check_value(payload, head.body_pos)
        except LimitError as exc:
            problem = str(exc)
        else:
            return None
    entry = _REQUEST_DECODERS.get(key) or _request_entry(key)
    if entry is None:
        raise UnsupportedRequestError(f"unknown api_key {key}", correlation_id=cid, api_key=key)
    api_key, lo, hi = entry[:3]
    if lo <= version <= hi:
        raise MalformedRequestError(problem, correlation_id=cid, api_key=key)
    if key != _API_VERSIONS:
        raise UnsupportedRequestError(
            f"{api_key.name} version {version} not supported ({lo}..{hi})",
            correlation_id=cid,
            api_key=key,
        )
    frame: RequestFrame = _build_request_frame(api_key, version, cid, None, ApiVersionsRequest())
    return frame


# --- responses ----------------------------------------------------------------------------


def encode_response(correlation_id: int, response: Response) -> bytes:
    """The unframed payload ``[correlation_id, body]``."""
    body = _encoder(_RESPONSE_ENCODERS, response, "response")(response)
    return _pack([correlation_id, body])


def pack_body(response: Response) -> bytes:
    """A response body packed once, for an answer that never changes (a NONE Heartbeat);
    :func:`encode_response_packed` wraps it per request."""
    return _pack(_encoder(_RESPONSE_ENCODERS, response, "response")(response))


# [length prefix (docs/protocol.md §1)], array(2) marker, the id in msgpack's smallest form
_FIXINT: Final = struct.Struct(">BB")
_UINT8: Final = struct.Struct(">BBB")
_UINT16: Final = struct.Struct(">BBH")
_UINT32: Final = struct.Struct(">BBI")
_FRAMED_LENGTH: Final = struct.Struct(">I")
_FRAMED_FIXINT: Final = struct.Struct(">IBB")
_FRAMED_UINT8: Final = struct.Struct(">IBBB")
_FRAMED_UINT16: Final = struct.Struct(">IBBH")
_FRAMED_UINT32: Final = struct.Struct(">IBBI")


def encode_response_packed(correlation_id: int, body: bytes) -> bytes:
    """``encode_response(correlation_id, r)`` for ``body = pack_body(r)``, byte for byte,
    without packing anything: msgpack's smallest int form, as ``packb`` writes it."""
    cid = correlation_id
    if 0 <= cid < 0x80:
        return _FIXINT.pack(0x92, cid) + body
    if 0 < cid <= 0xFF:
        return _UINT8.pack(0x92, 0xCC, cid) + body
    if 0 < cid <= 0xFFFF:
        return _UINT16.pack(0x92, 0xCD, cid) + body
    if 0 < cid <= 0xFFFFFFFF:
        return _UINT32.pack(0x92, 0xCE, cid) + body
    return b"\x92" + _pack(cid) + body  # negative ids: rare, msgpack's own encoding


def frame_response_packed(correlation_id: int, body: bytes) -> bytes:
    """``frame(encode_response_packed(correlation_id, body))`` in one step: the answer
    the broker writes most (a NONE Heartbeat), length prefix included."""
    cid = correlation_id
    n = len(body)
    if 0 <= cid < 0x80:
        return _FRAMED_FIXINT.pack(n + 2, 0x92, cid) + body
    if 0 < cid <= 0xFF:
        return _FRAMED_UINT8.pack(n + 3, 0x92, 0xCC, cid) + body
    if 0 < cid <= 0xFFFF:
        return _FRAMED_UINT16.pack(n + 4, 0x92, 0xCD, cid) + body
    if 0 < cid <= 0xFFFFFFFF:
        return _FRAMED_UINT32.pack(n + 6, 0x92, 0xCE, cid) + body
    payload = encode_response_packed(cid, body)
    return _FRAMED_LENGTH.pack(len(payload)) + payload


def decode_response_envelope(payload: Payload) -> tuple[int, Any]:
    """``(correlation_id, raw body)``: decode the body once its type is known."""
    obj = _unpack(payload)
    if type(obj) is not list or len(obj) != 2:
        raise EnvelopeError("response envelope is not an array of 2")
    cid = obj[0]
    if not _is_int32(cid):
        raise EnvelopeError("response envelope: correlation_id is not an int")
    return cid, obj[1]


def decode_response_body(body: Any, response_type: type[R], correlation_id: int = -1) -> R:
    """Decode a raw body; raises BodyError naming the bad path."""
    decode = BODY_CODECS.decoders.get(response_type)
    if decode is None:
        raise TypeError(f"{response_type.__name__} is not a response of protocol.messages")
    try:
        return cast(R, decode(body))
    except FieldError as err:
        raise BodyError(
            err.message(), correlation_id=correlation_id, api_key=int(response_type.API_KEY)
        ) from None


def decode_response(payload: Payload, response_type: type[R]) -> tuple[int, R]:
    """``(correlation_id, response)``; EnvelopeError or BodyError when malformed."""
    cid, body = decode_response_envelope(payload)
    return cid, decode_response_body(body, response_type, cid)


def peek_response_correlation_id(payload: Payload) -> int:
    """Only the correlation id of a response payload (EnvelopeError when malformed)."""
    return decode_response_envelope(payload)[0]
