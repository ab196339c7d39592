"""Every message's body codecs, each written on first use into a read-only table.

Requests get a decoder (the broker reads them; array fields at most
:data:`~groupwire.protocol.limits.MAX_ARRAY_ITEMS` long) and an encoder under the request rules
(the SDK writes them); responses a decoder and an encoder under the response rules; every
class nested in them gets the same. Writing all of them took 0.12 s, paid at import by
every program, the ``groupwire`` command's ``--version`` included, for the few messages
one program uses: a codec is now written when first looked up (with those of the classes
it nests), and kept. Looking up the same class twice gives the same function; what a
table holds never changes, only when it is written.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from groupwire.protocol.codegen import FieldError, Fn, Generator, Rules
from groupwire.protocol.errors import BodyError, MalformedRequestError
from groupwire.protocol.limits import MAX_ARRAY_ITEMS
from groupwire.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES, Request, Response

__all__ = ["BODY_CODECS", "BodyCodecs", "CodecTable", "decode_message", "encode_message"]

M = TypeVar("M")


class _Sides:
    """Which side each class is read and written on: True for a request or a class
    nested in one (decoded within the array limit), False for a response's. One
    Generator writes every table's codecs, so a nested class is written once."""

    def __init__(self, requests: Iterable[type], responses: Iterable[type]) -> None:
        self.generator = Generator()
        self._top: dict[type, bool] = {
            **dict.fromkeys(requests, True), **dict.fromkeys(responses, False)}
        self._all: dict[type, bool] | None = None

    def of(self, cls: type) -> bool | None:
        """The side of ``cls``, None if no message is or nests it."""
        side = self._top.get(cls)
        if side is None:
            side = self.every().get(cls)
        return side

    def every(self) -> dict[type, bool]:
        """Every class and its side, found by walking the type hints (once, when a
        table is listed or a nested class looked up before its message)."""
        if self._all is None:
            found: dict[type, bool] = {}
            for top, side in self._top.items():
                for cls in _nested(top):
                    if found.setdefault(cls, side) != side:
                        raise TypeError(f"{cls.__name__} decoded under two array limits")
            self._all = found
        return self._all


def _nested(cls: type) -> Iterator[type]:
    """``cls`` and every dataclass its fields hold, at any depth, each once."""
    seen: set[type] = set()
    stack = [cls]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        yield current
        hints = typing.get_type_hints(current, include_extras=True)
        types = [hints[f.name] for f in dataclasses.fields(current)]
        while types:
            tp = types.pop()
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                stack.append(tp)
            else:
                types.extend(typing.get_args(tp))


class CodecTable(Mapping[type, Fn]):
    """A read-only map from the classes of one side (or both) to their codecs, each
    written on its first lookup. Under the GIL two threads may both write one class's
    codec at once; both are the same code, and either is kept."""

    __slots__ = ("_fns", "_make", "_sides", "_want")

    def __init__(self, sides: _Sides, want: tuple[bool, ...],
                 make: Callable[[type, bool], Fn]) -> None:
        self._sides = sides
        self._want = want
        self._make = make
        self._fns: dict[type, Fn] = {}

    def __getitem__(self, cls: type) -> Fn:
        try:
            return self._fns[cls]
        except KeyError:
            pass
        side = self._sides.of(cls)
        if side is None or side not in self._want:
            raise KeyError(cls)
        fn = self._fns[cls] = self._make(cls, side)
        return fn

    def __contains__(self, cls: object) -> bool:
        if cls in self._fns:
            return True
        return isinstance(cls, type) and self._sides.of(cls) in self._want

    def __iter__(self) -> Iterator[type]:
        return (cls for cls, side in self._sides.every().items() if side in self._want)

    def __len__(self) -> int:
        return sum(1 for side in self._sides.every().values() if side in self._want)


@dataclass(frozen=True, slots=True)
class BodyCodecs:
    """Read-only maps from a message class (or a class nested in one) to its codecs."""

    decoders: Mapping[type, Fn]
    request_encoders: Mapping[type, Fn]
    response_encoders: Mapping[type, Fn]

    @classmethod
    def generate(
        cls, requests: Iterable[type[Request]], responses: Iterable[type[Response]]
    ) -> BodyCodecs:
        """The tables of these messages; their codecs are written as they are looked up."""
        sides = _Sides(requests, responses)
        generator = sides.generator

        def decoder(message: type, request: bool) -> Fn:
            # what a broker reads is bounded (protocol.limits)
            return generator.decoder(message, max_items=MAX_ARRAY_ITEMS if request else None)

        return cls(
            decoders=CodecTable(sides, (True, False), decoder),
            request_encoders=CodecTable(
                sides, (True,), lambda message, _: generator.encoder(message, Rules.REQUEST)),
            response_encoders=CodecTable(
                sides, (False,), lambda message, _: generator.encoder(message, Rules.RESPONSE)),
        )


BODY_CODECS: Final = BodyCodecs.generate(
    REQUEST_TYPES.values(),
    [Response, *RESPONSE_TYPES.values()],  # a bare Response answers an unknown api key
)
"""The codecs of every message of :mod:`groupwire.protocol.messages`."""


def encode_message(message: Any, *, request: bool | None = None) -> dict[str, Any]:
    """A message (or an entry of one) as msgpack-able data, under the request rules for
    Request instances unless ``request`` says otherwise."""
    if request is None:
        request = isinstance(message, Request)
    encoders = BODY_CODECS.request_encoders if request else BODY_CODECS.response_encoders
    try:
        encode = encoders[type(message)]
    except KeyError:
        side = "request" if request else "response"
        raise TypeError(f"{type(message).__name__} is not part of any {side}") from None
    result: dict[str, Any] = encode(message)
    return result


def decode_message(cls: type[M], obj: Any) -> M:
    """Build ``cls`` from plain msgpack data; raises a BodyError naming the bad path."""
    try:
        decode = BODY_CODECS.decoders[cls]
    except KeyError:
        raise TypeError(f"{cls.__name__} is not a message or part of one") from None
    try:
        return cast(M, decode(obj))
    except FieldError as err:
        error = MalformedRequestError if issubclass(cls, Request) else BodyError
        raise error(err.message()) from None
