"""Writes each message's body decoder and encoder from its dataclass's type hints.

The dataclasses in :mod:`groupwire.protocol.messages` are the schema. For a class the
generator reads ``typing.get_type_hints(cls, include_extras=True)`` once and writes plain
Python for it, so decoding a Heartbeat costs a few inline type checks and one constructor
call: no introspection per message.

Decoding (requests and responses alike):

- Maps must have str keys; unknown keys are ignored at every level.
- A field absent or nil takes its dataclass default; with no default it is ``required``.
- Types are strict: ``bool`` is not an int and an int is not a bool, ints must fit their
  ``IntRange``, bytes are msgpack bin, floats and ext types are refused.
- Errors name the path: ``topics[0].partitions[2].fetch_offset: expected long``.
- A decoder written with ``max_items`` (requests: ``protocol.limits.MAX_ARRAY_ITEMS``)
  refuses a longer array field before reading its elements.

Encoding (fields in dataclass order), chosen so that docs/protocol.md §10 is reproduced
byte for byte:

- Requests: every field, except an optional field whose default is None while its value
  is None, which is omitted (the §10 JoinGroup body has 7 keys: no group_instance_id).
- Responses: every field, nil included, except ``error_message`` wherever it is None (top
  level and entries). A top-level response with ``error_code != 0`` also omits every
  field equal to its default: ``{"error_code": 79, "member_id": "billing-1-0b6e2c1d"}``.

A :class:`Generator` is one build: it remembers what it wrote so that a class nested in
many messages is written once, and is dropped with its result. Nothing here keeps state
between builds; :mod:`groupwire.protocol.bodies` runs the build for every message at
import, :mod:`groupwire.protocol.fastpath` asks it for a specialised Heartbeat reader.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from groupwire.protocol.fields import scalar_kind as _scalar
from groupwire.protocol.fields import split_optional as _split_optional
from groupwire.protocol.messages import Response, check_when_built
from groupwire.protocol.types import IntRange

__all__ = ["FieldError", "Fn", "Generator", "Rules", "builder"]

Fn = Callable[[Any], Any]
"""A generated decoder or encoder: one value in, one value out."""


class FieldError(Exception):
    """A bad field on its way up through generated code; each level adds its path
    segment (innermost first). Never leaves the protocol package: the callers of a
    decoder turn it into a :class:`~groupwire.protocol.errors.BodyError`."""

    __slots__ = ("reason", "segments")

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def at(self, segment: str) -> FieldError:
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


class Rules(enum.Enum):
    """Which of docs/protocol.md §10's encoding rules an encoder follows."""

    REQUEST = "request"
    RESPONSE = "response"
    RESPONSE_ERROR = "response_error"  # a top-level response whose error_code is not 0


# --- type analysis ------------------------------------------------------------------------


def _is_dataclass(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


# --- writing source -----------------------------------------------------------------------

_Fail = Callable[[str], str]
"""Given a reason, the statement a generated check runs when a value is bad."""


def _scalar_check_lines(kind: str, rng: IntRange | None, var: str, fail: _Fail) -> list[str]:
    """``elif`` branches that fail when ``var`` is not a valid ``kind``."""
    if rng is not None:
        return [
            f"elif type({var}) is not int:",
            f"    {fail(f'expected {kind}')}",
            f"elif not {rng.lo} <= {var} <= {rng.hi}:",
            f"    {fail(f'out of range for {kind}')}",
        ]
    test = {
        "str": "type({v}) is not str",
        "bin": "type({v}) is not bytes",
        "bool": "{v} is not True and {v} is not False",
    }[kind]
    return [f"elif {test.format(v=var)}:", f"    {fail(f'expected {kind}')}"]


def _raising(field: str | None = None) -> _Fail:
    at = "" if field is None else f".at({field!r})"
    return lambda reason: f"raise FieldError({reason!r}){at}"


def _declining(reason: str) -> str:
    return "return None"


def _compile(lines: list[str], name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    source = "\n".join(lines)
    namespace = {"FieldError": FieldError, **namespace}
    exec(source, namespace)  # source written from our own type hints
    fn = cast(Callable[..., Any], namespace[name])
    fn.__source__ = source  # type: ignore[attr-defined]  # for debugging
    return fn


def _slot_setters(cls: type) -> list[Any] | None:
    """Each field's slot descriptor ``__set__``, or None if ``__init__`` must run. A
    message's own build check (``check_when_built``) is skipped: decoded values are
    checked already."""
    post_init = getattr(cls, "__post_init__", None)
    if post_init is not None and post_init is not check_when_built:
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
    slotted class without ``__post_init__`` the code fills the slots directly, which is
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


def builder(cls: type) -> Callable[..., Any]:
    """A function building ``cls`` from its field values, positionally, unchecked."""
    args = [f"a{i}" for i in range(len(dataclasses.fields(cls)))]
    ns: dict[str, Any] = {}
    lines = [f"def build({', '.join(args)}):", *_construct_lines(cls, args, ns)]
    return _compile(lines, "build", ns)


# --- containers (closures over the generated element functions) ---------------------------


def _nullable(fn: Fn) -> Fn:
    def nullable(x: Any) -> Any:
        return None if x is None else fn(x)

    return nullable


def _list_decoder(elem: Fn, max_items: int | None) -> Fn:
    limit = -1 if max_items is None else max_items

    def dec(v: Any) -> Any:
        if type(v) is not list:
            raise FieldError("expected array")
        if limit >= 0 and len(v) > limit:
            raise FieldError(f"{len(v)} items over the limit of {limit}")
        try:
            return [elem(e) for e in v]
        except FieldError as err:
            for i, e in enumerate(v):  # slow path: find which element failed
                try:
                    elem(e)
                except FieldError:
                    err.at(f"[{i}]")
                    break
            raise

    return dec


def _tuple_decoder(elems: list[Fn]) -> Fn:
    n = len(elems)
    reason = f"expected array of {n}"

    def dec(v: Any) -> Any:
        if type(v) is not list or len(v) != n:
            raise FieldError(reason)
        out = []
        for i, (elem, e) in enumerate(zip(elems, v, strict=True)):
            try:
                out.append(elem(e))
            except FieldError as err:
                err.at(f"[{i}]")
                raise
        return tuple(out)

    return dec


def _list_encoder(elem: Fn) -> Fn:
    def enc(x: Any) -> Any:
        return [elem(e) for e in x]

    return enc


def _tuple_encoder(elems: list[Fn]) -> Fn:
    def enc(x: Any) -> Any:
        return [fn(e) for fn, e in zip(elems, x, strict=True)]

    return enc


def _identity(x: Any) -> Any:
    return x


# --- the generator ------------------------------------------------------------------------


class Generator:
    """One build of generated codecs; asks for the same class twice, gets one function."""

    def __init__(self) -> None:
        self._hints: dict[type, dict[str, Any]] = {}
        self._decoders: dict[tuple[type, int | None], Fn] = {}
        self._encoders: dict[tuple[type, Rules], Fn] = {}
        self._scalars: dict[tuple[str, IntRange | None], Fn] = {}

    def decoders(self) -> dict[type, Fn]:
        """Every class decoder written so far (TypeError if a class was written under two
        array limits: then one table could not say which a caller gets)."""
        out: dict[type, Fn] = {}
        for (cls, _), dec in self._decoders.items():
            if cls in out:
                raise TypeError(f"{cls.__name__} decoded under two array limits")
            out[cls] = dec
        return out

    def encoders(self, rules: Rules) -> dict[type, Fn]:
        """Every class encoder following ``rules`` written so far."""
        return {cls: fn for (cls, r), fn in self._encoders.items() if r is rules}

    # --- decoders ---

    def decoder(self, cls: type, *, max_items: int | None = None) -> Fn:
        """Plain msgpack data -> ``cls``, or :class:`FieldError` naming the bad path;
        with ``max_items``, no array field (at any depth) may be longer."""
        dec = self._decoders.get((cls, max_items))
        if dec is None:
            ns: dict[str, Any] = {}
            lines = ["def dec(v):",
                     *self._check_lines(cls, declines=False, ns=ns, max_items=max_items)]
            lines += _construct_lines(cls, [f"f{i}" for i in range(self._arity(cls))], ns)
            dec = self._decoders[cls, max_items] = _compile(lines, "dec", ns)
        return dec

    def reader(
        self,
        cls: type,
        *,
        name: str,
        params: str,
        prelude: Sequence[str],
        leading: Sequence[str],
        namespace: Mapping[str, Any],
        max_items: int | None = None,
    ) -> Callable[..., Any]:
        """A decoder of ``cls`` specialised for a hot path, as one function.

        ``def name(params):`` first runs ``prelude`` (source lines, with ``namespace`` as
        globals), which returns or binds the body to ``v``; then ``v`` is checked exactly
        as :meth:`decoder` checks it, except that where the decoder raises the reader
        returns None; and instead of building ``cls`` it returns ``(*leading, *fields)``,
        one flat tuple. Generated locals are ``v``, ``get`` and ``f<i>``; generated
        globals ``FieldError``, ``D<i>``, ``F<i>`` and ``d<i>``.
        """
        ns = dict(namespace)
        lines = [f"def {name}({params}):", *("    " + line for line in prelude)]
        lines += self._check_lines(cls, declines=True, ns=ns, max_items=max_items)
        values = [*leading, *(f"f{i}" for i in range(self._arity(cls)))]
        lines.append(f"    return ({', '.join(values)},)")
        return _compile(lines, name, ns)

    def _check_lines(
        self, cls: type, *, declines: bool, ns: dict[str, Any], max_items: int | None
    ) -> list[str]:
        """Lines checking the map ``v`` and reading field ``i`` of ``cls`` into ``f<i>``."""
        hints = self._hints_of(cls)
        fail = _declining if declines else _raising()
        lines = [
            "    if type(v) is not dict:",
            f"        {fail('expected map')}",
            "    for k in v:",
            "        if type(k) is not str:",
            f"            {fail('expected map with str keys')}",
            "    get = v.get",
        ]
        for i, f in enumerate(dataclasses.fields(cls)):
            var = f"f{i}"
            fail = _declining if declines else _raising(f.name)
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
                lines.append(f"        {fail('required')}")
            scalar = _scalar(inner)
            if scalar is not None:
                lines += ["    " + line for line in _scalar_check_lines(*scalar, var, fail)]
                continue
            ns[f"d{i}"] = self._plain_decoder(inner, max_items)
            lines += ["    else:", "        try:", f"            {var} = d{i}({var})"]
            if declines:
                lines += ["        except FieldError:", "            return None"]
            else:
                lines += [
                    "        except FieldError as e:",
                    f"            e.at({f.name!r})",
                    "            raise",
                ]
        return lines

    def _value_decoder(self, tp: Any, max_items: int | None) -> Fn:
        nullable, inner = _split_optional(tp)
        dec = self._plain_decoder(inner, max_items)
        return _nullable(dec) if nullable else dec

    def _plain_decoder(self, tp: Any, max_items: int | None) -> Fn:
        scalar = _scalar(tp)
        if scalar is not None:
            return self._scalar_decoder(scalar)
        if _is_dataclass(tp):
            return self.decoder(tp, max_items=max_items)
        origin = typing.get_origin(tp)
        if origin is list:
            (elem_tp,) = typing.get_args(tp)
            return _list_decoder(self._value_decoder(elem_tp, max_items), max_items)
        if origin is tuple:
            return _tuple_decoder(
                [self._value_decoder(a, max_items) for a in typing.get_args(tp)])
        raise TypeError(f"unsupported field type {tp!r}")

    def _scalar_decoder(self, scalar: tuple[str, IntRange | None]) -> Fn:
        dec = self._scalars.get(scalar)
        if dec is None:
            kind, rng = scalar
            fail = _raising()
            lines = ["def dec(x):", "    if x is None:", f"        {fail(f'expected {kind}')}"]
            lines += ["    " + line for line in _scalar_check_lines(kind, rng, "x", fail)]
            lines += ["    return x"]
            dec = self._scalars[scalar] = _compile(lines, "dec", {})
        return dec

    # --- encoders ---

    def encoder(self, cls: type, rules: Rules) -> Fn:
        """``cls`` -> msgpack-able data (a dict), following ``rules``."""
        enc = self._encoders.get((cls, rules))
        if enc is None:
            enc = self._encoders[cls, rules] = self._write_encoder(cls, rules)
        return enc

    def _write_encoder(self, cls: type, rules: Rules) -> Fn:
        hints = self._hints_of(cls)
        ns: dict[str, Any] = {}
        lines = ["def enc(o):"]
        if rules is Rules.RESPONSE and issubclass(cls, Response):
            ns["enc_error"] = self.encoder(cls, Rules.RESPONSE_ERROR)
            lines += ["    if o.error_code:", "        return enc_error(o)"]
        lines.append("    d = {}")
        for i, f in enumerate(dataclasses.fields(cls)):
            enc = self._value_encoder(hints[f.name], rules)
            if enc is not None:
                ns[f"e{i}"] = enc
            # The condition under which the field is left out, if it may be.
            if rules is Rules.RESPONSE_ERROR and f.name != "error_code":
                if f.default_factory is not dataclasses.MISSING:
                    ns[f"D{i}"] = f.default_factory()
                else:
                    ns[f"D{i}"] = f.default  # every response field has a default
                omit = f"x == D{i}"
            elif (rules is Rules.REQUEST and f.default is None) or (
                rules is not Rules.REQUEST and f.name == "error_message"
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

    def _value_encoder(self, tp: Any, rules: Rules) -> Fn | None:
        """A function turning a value into msgpack-able data, or None if it already is."""
        nullable, inner = _split_optional(tp)
        enc = self._plain_encoder(inner, rules)
        return _nullable(enc) if enc is not None and nullable else enc

    def _plain_encoder(self, tp: Any, rules: Rules) -> Fn | None:
        if _scalar(tp) is not None:
            return None
        if _is_dataclass(tp):  # entries follow the response rules, error or not
            return self.encoder(tp, Rules.RESPONSE if rules is Rules.RESPONSE_ERROR else rules)
        origin = typing.get_origin(tp)
        if origin is list:
            (elem_tp,) = typing.get_args(tp)
            elem = self._value_encoder(elem_tp, rules)
            return None if elem is None else _list_encoder(elem)
        if origin is tuple:
            elems = [self._value_encoder(a, rules) for a in typing.get_args(tp)]
            if all(e is None for e in elems):
                return None  # msgpack packs tuples as arrays
            return _tuple_encoder([e or _identity for e in elems])
        raise TypeError(f"unsupported field type {tp!r}")

    # --- shared ---

    def _hints_of(self, cls: type) -> dict[str, Any]:
        hints = self._hints.get(cls)
        if hints is None:
            hints = self._hints[cls] = typing.get_type_hints(cls, include_extras=True)
        return hints

    @staticmethod
    def _arity(cls: type) -> int:
        return len(dataclasses.fields(cls))
