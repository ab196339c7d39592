"""Every message's body codecs, generated once at import into a read-only table.

Requests get a decoder (the broker reads them; array fields at most
:data:`~groupwire.protocol.limits.MAX_ARRAY_ITEMS` long) and an encoder under the request rules
(the SDK writes them); responses a decoder and an encoder under the response rules; every
class nested in them gets the same. Generating all of them costs a few milliseconds at
import and keeps use free of side effects: nothing is filled in later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast

from groupwire.protocol.codegen import FieldError, Fn, Generator, Rules
from groupwire.protocol.errors import BodyError, MalformedRequestError
from groupwire.protocol.limits import MAX_ARRAY_ITEMS
from groupwire.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES, Request, Response

__all__ = ["BODY_CODECS", "BodyCodecs", "decode_message", "encode_message"]

M = TypeVar("M")


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
        generator = Generator()
        for request in requests:  # what a broker reads is bounded (protocol.limits)
            generator.decoder(request, max_items=MAX_ARRAY_ITEMS)
            generator.encoder(request, Rules.REQUEST)
        for response in responses:
            generator.decoder(response)
            generator.encoder(response, Rules.RESPONSE)
        return cls(
            decoders=MappingProxyType(generator.decoders()),
            request_encoders=MappingProxyType(generator.encoders(Rules.REQUEST)),
            response_encoders=MappingProxyType(generator.encoders(Rules.RESPONSE)),
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
