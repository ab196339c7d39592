"""One codec for every message: envelopes (docs/protocol.md §2) and bodies driven by type hints.

The dataclasses in :mod:`protocol.messages` are the schema. For each class the codec
reads ``typing.get_type_hints(cls, include_extras=True)`` once, at first use, and
generates a plain Python decoder and encoder for it, so decoding a Heartbeat costs one
``msgpack.unpackb``, a few inline type checks and one constructor call: no introspection
per message.

Decoding (requests and responses alike):

- Maps must have str keys; unknown keys are ignored at every level.
- A field absent or nil takes its dataclass default; with no default it is ``required``.
- Types are strict: ``bool`` is not an int and an int is not a bool, ints must fit their
  ``IntRange``, bytes are msgpack bin, floats and ext types are refused.
- Errors name the path: ``topics[0].partitions[2].fetch_offset: expected long``.

Encoding (fields in dataclass order, then one ``msgpack.packb``), chosen so that
docs/protocol.md §10 is reproduced byte for byte:

- Requests: every field, except an optional field whose default is None while its value
  is None, which is omitted (the §10 JoinGroup body has 7 keys: no group_instance_id).
- Responses: every field, nil included, except ``error_message`` wherever it is None (top
  level and entries). A top-level response with ``error_code != 0`` also omits every
  field equal to its default: ``{"error_code": 79, "member_id": "billing-1-0b6e2c1d"}``.

Notes: msgpack decodes its timestamp extension (type -1) without calling ``ext_hook``;
such a value is refused wherever a field is read and, like any value under an unknown
key, ignored elsewhere. Map keys must be str or bin on the wire (msgpack's
``strict_map_key``, which guards against hash flooding); other keys make the frame
undecodable (EnvelopeError).

The Heartbeat is the request the broker answers most: :func:`decode_heartbeat` reads a
well-formed one without building objects (anything else is left to
:func:`decode_request`), and :func:`frame_response_packed` wraps a body packed once
(:func:`pack_body`) around each correlation id.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

import msgpack

from groupwire.protocol.errors import (
    BodyError,
    EnvelopeError,
    InvalidRequestError,
    LocalProtocolError,
    UnsupportedVersionError,
)
from groupwire.protocol.messages import (
    REQUEST_TYPES,
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    HeartbeatRequest,
    Request,
    Response,
)
from groupwire.protocol.types import INT32_RANGE, IntRange

__all__ = [
    "HeartbeatFields",
    "RequestFrame",
    "decode_heartbeat",
    "decode_message",
    "decode_request",
    "decode_response",
    "decode_response_body",
    "decode_response_envelope",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_response_packed",
    "frame_response_packed",
    "pack_body",
    "peek_response_correlation_id",
]

R = TypeVar("R", bound=Response)
M = TypeVar("M")

_Fn = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A decoded request envelope and its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request: Request


# --- errors raised inside generated code --------------------------------------------------


class _FieldError(Exception):
    """A body error on its way up; each level adds its path segment (innermost first)."""

    __slots__ = ("reason", "segments")

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def at(self, segment: str) -> _FieldError:
        self.segments.append(segment)
        return self

    def message(self) -> str:
        path = ""
        for segment in reversed(self.segments):
            if segment.startswith("[") or not path:
                path += segment
            else:
                path += "." + segment
        return f"{path or 'body'}: {self.reason}"


def _unpack(payload: bytes) -> Any:
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


# --- type analysis ------------------------------------------------------------------------


def _split_optional(tp: Any) -> tuple[bool, Any]:
    """``X | None`` -> (True, X); anything else -> (False, tp)."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp!r}")
        return True, args[0]
    return False, tp


def _scalar(tp: Any) -> tuple[str, IntRange | None] | None:
    """(wire name, int range) for a scalar type, None for containers and dataclasses."""
    if tp is str:
        return "str", None
    if tp is bytes:
        return "bin", None
    if tp is bool:
        return "bool", None
    if typing.get_origin(tp) is typing.Annotated:
        base, *meta = typing.get_args(tp)
        ranges = [m for m in meta if isinstance(m, IntRange)]
        if base is int and ranges:
            return ranges[0].name, ranges[0]
    if tp is int:
        raise TypeError("bare int field: annotate it Int32 or Int64")
    return None


def _scalar_fail_lines(kind: str, rng: IntRange | None, var: str, at: str) -> list[str]:
    """``elif`` branches that raise when ``var`` is not a valid ``kind``."""
    if rng is not None:
        return [
            f"elif type({var}) is not int:",
            f"    raise _FieldError('expected {kind}'){at}",
            f"elif not {rng.lo} <= {var} <= {rng.hi}:",
            f"    raise _FieldError('out of range for {kind}'){at}",
        ]
    test = {
        "str": "type({v}) is not str",
        "bin": "type({v}) is not bytes",
        "bool": "{v} is not True and {v} is not False",
    }[kind]
    return [f"elif {test.format(v=var)}:", f"    raise _FieldError('expected {kind}'){at}"]


def _scalar_decoder(kind: str, rng: IntRange | None) -> _Fn:
    lines = ["def dec(x):", "    if x is None:", f"        raise _FieldError('expected {kind}')"]
    lines += ["    " + line for line in _scalar_fail_lines(kind, rng, "x", "")]
    lines += ["    return x"]
    return _compile(lines, "dec", {})


def _compile(lines: list[str], name: str, namespace: dict[str, Any]) -> _Fn:
    namespace = {"_FieldError": _FieldError, **namespace}
    exec("\n".join(lines), namespace)  # source generated from our own type hints
    fn = cast(_Fn, namespace[name])
    fn.__source__ = "\n".join(lines)  # type: ignore[attr-defined]  # for debugging
    return fn


# --- decoders -----------------------------------------------------------------------------

_CLASS_DECODERS: dict[type, _Fn] = {}


def _decoder_of(tp: Any) -> _Fn:
    nullable, inner = _split_optional(tp)
    dec = _plain_decoder_of(inner)
    if not nullable:
        return dec

    def nullable_dec(x: Any) -> Any:
        return None if x is None else dec(x)

    return nullable_dec


def _plain_decoder_of(tp: Any) -> _Fn:
    scalar = _scalar(tp)
    if scalar is not None:
        return _scalar_decoder(*scalar)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _class_decoder(tp)
    origin = typing.get_origin(tp)
    if origin is list:
        (elem_tp,) = typing.get_args(tp)
        return _list_decoder(_decoder_of(elem_tp))
    if origin is tuple:
        return _tuple_decoder([_decoder_of(a) for a in typing.get_args(tp)])
    raise TypeError(f"unsupported field type {tp!r}")


def _list_decoder(elem: _Fn) -> _Fn:
    def dec(v: Any) -> Any:
        if type(v) is not list:
            raise _FieldError("expected array")
        try:
            return [elem(e) for e in v]
        except _FieldError as err:
            for i, e in enumerate(v):  # slow path: find which element failed
                try:
                    elem(e)
                except _FieldError:
                    err.at(f"[{i}]")
                    break
            raise

    return dec


def _tuple_decoder(elems: list[_Fn]) -> _Fn:
    n = len(elems)
    reason = f"expected array of {n}"

    def dec(v: Any) -> Any:
        if type(v) is not list or len(v) != n:
            raise _FieldError(reason)
        out = []
        for i, (elem, e) in enumerate(zip(elems, v, strict=True)):
            try:
                out.append(elem(e))
            except _FieldError as err:
                err.at(f"[{i}]")
                raise
        return tuple(out)

    return dec


def _class_decoder(cls: type) -> _Fn:
    dec = _CLASS_DECODERS.get(cls)
    if dec is None:
        dec = _CLASS_DECODERS[cls] = _build_class_decoder(cls)
    return dec


def _build_class_decoder(cls: type) -> _Fn:
    hints = typing.get_type_hints(cls, include_extras=True)
    ns: dict[str, Any] = {}
    lines = [
        "def dec(v):",
        "    if type(v) is not dict:",
        "        raise _FieldError('expected map')",
        "    for k in v:",
        "        if type(k) is not str:",
        "            raise _FieldError('expected map with str keys')",
        "    get = v.get",
    ]
    args = []
    for i, f in enumerate(dataclasses.fields(cls)):
        var, at = f"f{i}", f".at({f.name!r})"
        _, inner = _split_optional(hints[f.name])
        lines.append(f"    {var} = get({f.name!r})")
        lines.append(f"    if {var} is None:")
        if f.default is not dataclasses.MISSING:
            ns[f"D{i}"] = f.default
            lines.append(f"        {var} = D{i}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"F{i}"] = f.default_factory
            lines.append(f"        {var} = F{i}()")
        else:
            lines.append(f"        raise _FieldError('required'){at}")
        scalar = _scalar(inner)
        if scalar is not None:
            lines += ["    " + line for line in _scalar_fail_lines(*scalar, var, at)]
        else:
            ns[f"d{i}"] = _plain_decoder_of(inner)
            lines += [
                "    else:",
                "        try:",
                f"            {var} = d{i}({var})",
                "        except _FieldError as e:",
                f"            e{at}",
                "            raise",
            ]
        args.append(var)
    lines += _construct_lines(cls, args, ns)
    return _compile(lines, "dec", ns)


def _slot_setters(cls: type) -> list[Any] | None:
    """Each field's slot descriptor ``__set__``, or None if ``__init__`` must run."""
    if hasattr(cls, "__post_init__"):
        return None
    setters = []
    for f in dataclasses.fields(cls):
        slot = next((k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__), None)
        if not isinstance(slot, types.MemberDescriptorType):
            return None
        setters.append(slot.__set__)
    return setters


def _construct_lines(cls: type, args: list[str], ns: dict[str, Any]) -> list[str]:
    """Code building ``cls`` from ``args`` (one per field, in order).

    A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per field; for a
    slotted class without ``__post_init__`` the codec fills the slots directly, which is
    three times faster and matters on the Heartbeat path. The values are already checked.
    """
    setters = _slot_setters(cls)
    ns["cls"] = cls
    if setters is None:
        fields = dataclasses.fields(cls)
        kwargs = ", ".join(f"{f.name}={a}" for f, a in zip(fields, args, strict=True))
        return [f"    return cls({kwargs})"]
    ns["new"] = object.__new__
    lines = ["    o = new(cls)"]
    for i, (setter, arg) in enumerate(zip(setters, args, strict=True)):
        ns[f"s{i}"] = setter
        lines.append(f"    s{i}(o, {arg})")
    return [*lines, "    return o"]


def _builder(cls: type) -> Callable[..., Any]:
    """A function building ``cls`` from its field values, positionally."""
    args = [f"a{i}" for i in range(len(dataclasses.fields(cls)))]
    ns: dict[str, Any] = {}
    lines = [f"def build({', '.join(args)}):", *_construct_lines(cls, args, ns)]
    return _compile(lines, "build", ns)


# --- encoders -----------------------------------------------------------------------------

_REQUEST, _RESPONSE, _RESPONSE_ERROR = "request", "response", "response_error"
_CLASS_ENCODERS: dict[tuple[type, str], _Fn] = {}


def _encoder_of(tp: Any, mode: str) -> _Fn | None:
    """A function turning a value into msgpack-able data, or None if it already is one."""
    nullable, inner = _split_optional(tp)
    enc = _plain_encoder_of(inner, mode)
    if enc is None or not nullable:
        return enc
    plain = enc

    def nullable_enc(x: Any) -> Any:
        return None if x is None else plain(x)

    return nullable_enc


def _plain_encoder_of(tp: Any, mode: str) -> _Fn | None:
    if _scalar(tp) is not None:
        return None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _class_encoder(tp, _RESPONSE if mode == _RESPONSE_ERROR else mode)
    origin = typing.get_origin(tp)
    if origin is list:
        (elem_tp,) = typing.get_args(tp)
        elem = _encoder_of(elem_tp, mode)
        if elem is None:
            return None
        enc_elem = elem

        def list_enc(x: Any) -> Any:
            return [enc_elem(e) for e in x]

        return list_enc
    if origin is tuple:
        elems = [_encoder_of(a, mode) for a in typing.get_args(tp)]
        if all(e is None for e in elems):
            return None  # msgpack packs tuples as arrays
        fns = [e or _identity for e in elems]

        def tuple_enc(x: Any) -> Any:
            return [fn(e) for fn, e in zip(fns, x, strict=True)]

        return tuple_enc
    raise TypeError(f"unsupported field type {tp!r}")


def _identity(x: Any) -> Any:
    return x


def _class_encoder(cls: type, mode: str) -> _Fn:
    enc = _CLASS_ENCODERS.get((cls, mode))
    if enc is None:
        enc = _CLASS_ENCODERS[cls, mode] = _build_class_encoder(cls, mode)
    return enc


def _build_class_encoder(cls: type, mode: str) -> _Fn:
    hints = typing.get_type_hints(cls, include_extras=True)
    ns: dict[str, Any] = {}
    lines = ["def enc(o):"]
    if mode == _RESPONSE and issubclass(cls, Response):
        ns["enc_error"] = _class_encoder(cls, _RESPONSE_ERROR)
        lines += ["    if o.error_code:", "        return enc_error(o)"]
    lines.append("    d = {}")
    for i, f in enumerate(dataclasses.fields(cls)):
        enc = _encoder_of(hints[f.name], mode)
        if enc is not None:
            ns[f"e{i}"] = enc
        # The condition under which the field is left out, if it may be.
        if mode == _RESPONSE_ERROR and f.name != "error_code":
            if f.default_factory is not dataclasses.MISSING:
                ns[f"D{i}"] = f.default_factory()
            else:
                ns[f"D{i}"] = f.default  # every response field has a default
            omit = f"x == D{i}"
        elif (mode == _REQUEST and f.default is None) or (
            mode != _REQUEST and f.name == "error_message"
        ):
            omit = "x is None"
        else:
            value = f"o.{f.name}" if enc is None else f"e{i}(o.{f.name})"
            lines.append(f"    d[{f.name!r}] = {value}")
            continue
        lines += [
            f"    x = o.{f.name}",
            f"    if not ({omit}):",
            f"        d[{f.name!r}] = {'x' if enc is None else f'e{i}(x)'}",
        ]
    lines.append("    return d")
    return _compile(lines, "enc", ns)


# --- generic helpers ----------------------------------------------------------------------


def encode_message(message: Any, *, request: bool | None = None) -> dict[str, Any]:
    """A dataclass message as msgpack-able data (request rules for Request instances)."""
    if request is None:
        request = isinstance(message, Request)
    result: dict[str, Any] = _class_encoder(type(message), _REQUEST if request else _RESPONSE)(
        message
    )
    return result


def decode_message(cls: type[M], obj: Any) -> M:
    """Build ``cls`` from plain msgpack data; raises a BodyError naming the bad path."""
    try:
        return cast(M, _class_decoder(cls)(obj))
    except _FieldError as err:
        error = InvalidRequestError if issubclass(cls, Request) else BodyError
        raise error(err.message()) from None


# --- requests -----------------------------------------------------------------------------

_INT32_LO: Final = INT32_RANGE.lo
_INT32_HI: Final = INT32_RANGE.hi
_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)

# api key -> (ApiKey, min version, max version, body decoder), filled at first use
_REQUEST_DECODERS: dict[int, tuple[ApiKey, int, int, _Fn]] = {}


def _request_decoder(key: int) -> tuple[ApiKey, int, int, _Fn] | None:
    entry = _REQUEST_DECODERS.get(key)
    if entry is None:
        cls = REQUEST_TYPES.get(key)  # type: ignore[call-overload]
        if cls is None:
            return None
        api_key = cls.API_KEY
        lo, hi = SUPPORTED_VERSIONS[api_key]
        entry = _REQUEST_DECODERS[key] = (api_key, lo, hi, _class_decoder(cls))
    return entry


def _is_int32(value: Any) -> bool:
    return type(value) is int and _INT32_LO <= value <= _INT32_HI


def encode_request(
    correlation_id: int, request: Request, client_id: str | None = None, api_version: int = 0
) -> bytes:
    """The unframed payload ``[api_key, api_version, correlation_id, client_id, body]``."""
    body = _class_encoder(type(request), _REQUEST)(request)
    return _pack([int(request.API_KEY), api_version, correlation_id, client_id, body])


def decode_request(payload: bytes) -> RequestFrame:
    """Decode one request payload (docs/protocol.md §2).

    EnvelopeError: close the connection. UnsupportedVersionError / InvalidRequestError:
    answer with their ``code`` on their ``correlation_id``.
    """
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
    entry = _REQUEST_DECODERS.get(key) or _request_decoder(key)
    if entry is None:
        raise UnsupportedVersionError(f"unknown api_key {key}", correlation_id=cid, api_key=key)
    api_key, lo, hi, dec = entry
    supported = lo <= version <= hi
    if not supported and key != _API_VERSIONS:
        raise UnsupportedVersionError(
            f"{api_key.name} version {version} not supported ({lo}..{hi})",
            correlation_id=cid,
            api_key=key,
        )
    try:
        request = dec(body)
    except _FieldError as err:
        if supported:
            raise InvalidRequestError(err.message(), correlation_id=cid, api_key=key) from None
        request = ApiVersionsRequest()  # an unknown version is answered in v0 (§3)
    frame: RequestFrame = _build_request_frame(api_key, version, cid, client_id, request)
    return frame


_build_request_frame: Final = _builder(RequestFrame)


# --- the Heartbeat hot path ---------------------------------------------------------------

HeartbeatFields = tuple[int, str, int, str, str | None, int, int]
"""``(correlation_id, group_id, generation_id, member_id, group_instance_id, poll_age_ms,
wait_ms)`` of a v0 Heartbeat request, defaults filled in."""

_HEARTBEAT_V0: Final = bytes((0x95, ApiKey.HEARTBEAT, 0))  # array(5), api key 12, version 0
_HB_DEFAULTS: Final = HeartbeatRequest(group_id="", generation_id=0, member_id="")
_HB_POLL_AGE: Final = _HB_DEFAULTS.poll_age_ms
_HB_WAIT: Final = _HB_DEFAULTS.wait_ms
if _HB_DEFAULTS.group_instance_id is not None or [
        f.name for f in dataclasses.fields(HeartbeatRequest)] != [
        "group_id", "generation_id", "member_id", "group_instance_id", "poll_age_ms",
        "wait_ms"]:  # pragma: no cover - decode_heartbeat must follow the message
    raise TypeError("HeartbeatRequest changed: update decode_heartbeat")


def decode_heartbeat(payload: bytes) -> HeartbeatFields | None:
    """The fields of a well-formed v0 Heartbeat, checked exactly as :func:`decode_request`
    checks them, without building its objects; ``None`` for anything else, which
    :func:`decode_request` then decodes (and names what is wrong with).

    The broker answers thousands of heartbeats a second; the rest is the generic path.
    """
    if not payload.startswith(_HEARTBEAT_V0):
        return None
    try:
        obj = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=False)
    except (ValueError, TypeError):
        return None
    if type(obj) is not list or len(obj) != 5:
        return None
    cid, client_id, body = obj[2], obj[3], obj[4]
    if (type(cid) is not int or not _INT32_LO <= cid <= _INT32_HI
            or (client_id is not None and type(client_id) is not str)
            or type(body) is not dict):
        return None
    for k in body:
        if type(k) is not str:
            return None
    get = body.get
    group_id = get("group_id")
    generation_id = get("generation_id")
    member_id = get("member_id")
    instance_id = get("group_instance_id")
    poll_age = get("poll_age_ms")
    wait_ms = get("wait_ms")
    if (type(group_id) is not str or type(member_id) is not str
            or type(generation_id) is not int or not _INT32_LO <= generation_id <= _INT32_HI
            or (instance_id is not None and type(instance_id) is not str)):
        return None
    if poll_age is None:
        poll_age = _HB_POLL_AGE
    elif type(poll_age) is not int or not _INT32_LO <= poll_age <= _INT32_HI:
        return None
    if wait_ms is None:
        wait_ms = _HB_WAIT
    elif type(wait_ms) is not int or not _INT32_LO <= wait_ms <= _INT32_HI:
        return None
    return cid, group_id, generation_id, member_id, instance_id, poll_age, wait_ms


# --- responses ----------------------------------------------------------------------------


def encode_response(correlation_id: int, response: Response) -> bytes:
    """The unframed payload ``[correlation_id, body]``."""
    body = _class_encoder(type(response), _RESPONSE)(response)
    return _pack([correlation_id, body])


def pack_body(response: Response) -> bytes:
    """A response body packed once, for an answer that never changes (a NONE Heartbeat);
    :func:`encode_response_packed` wraps it per request."""
    return _pack(_class_encoder(type(response), _RESPONSE)(response))


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


def decode_response_envelope(payload: bytes) -> tuple[int, Any]:
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
    try:
        return cast(R, _class_decoder(response_type)(body))
    except _FieldError as err:
        raise BodyError(
            err.message(), correlation_id=correlation_id, api_key=int(response_type.API_KEY)
        ) from None


def decode_response(payload: bytes, response_type: type[R]) -> tuple[int, R]:
    """``(correlation_id, response)``; EnvelopeError or BodyError when malformed."""
    cid, body = decode_response_envelope(payload)
    return cid, decode_response_body(body, response_type, cid)


def peek_response_correlation_id(payload: bytes) -> int:
    """Only the correlation id of a response payload (EnvelopeError when malformed)."""
    return decode_response_envelope(payload)[0]
