"""How a message field's type maps to the wire, and the check a message runs when built.

Both the codec generator (``protocol.codegen``) and the messages themselves
(``protocol.messages``) read field types this way; this module imports neither, so the
messages can check themselves without an import cycle.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, cast

from groupwire.protocol.errors import InvalidMessageError
from groupwire.protocol.types import IntRange

__all__ = ["build_checker", "scalar_kind", "split_optional"]


def split_optional(tp: Any) -> tuple[bool, Any]:
    """``X | None`` -> (True, X); anything else -> (False, tp)."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp!r}")
        return True, args[0]
    return False, tp


def scalar_kind(tp: Any) -> tuple[str, IntRange | None] | None:
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


_BUILT_TESTS: dict[str, str] = {
    # as the encoder takes them: IntEnum codes are ints, any bytes-like is bin
    "str": "type({v}) is not str",
    "bin": "not isinstance({v}, (bytes, bytearray, memoryview))",
    "bool": "{v} is not True and {v} is not False",
}


def _built_scalar_lines(kind: str, rng: IntRange | None, var: str, where: str,
                        indent: str) -> list[str]:
    if rng is not None:
        return [f"{indent}if not isinstance({var}, int) or {var} is True or {var} is False:",
                f"{indent}    bad({where!r}, {kind!r}, {var})",
                f"{indent}elif not {rng.lo} <= {var} <= {rng.hi}:",
                f"{indent}    bad({where!r}, {kind!r}, {var})"]
    return [f"{indent}if {_BUILT_TESTS[kind].format(v=var)}:",
            f"{indent}    bad({where!r}, {kind!r}, {var})"]


def _bad(where: str, kind: str, value: Any) -> None:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    out_of_range = isinstance(value, int) and not isinstance(value, bool) \
        and kind in ("int", "long")
    raise InvalidMessageError(f"{where}: {shown} is not a valid {kind}"
                     + (" (out of range)" if out_of_range else ""))


def build_checker(cls: type) -> Callable[[Any], None]:
    """A check of ``cls``'s fields as the wire types them: scalars (int ranges included)
    and the scalar elements of lists; nested messages check themselves when built."""
    hints = typing.get_type_hints(cls, include_extras=True)
    lines = ["def check(o):"]
    for f in dataclasses.fields(cls):
        where = f"{cls.__name__}.{f.name}"
        nullable, inner = split_optional(hints[f.name])
        lines.append(f"    x = o.{f.name}")
        body: list[str] = []
        scalar = scalar_kind(inner)
        if scalar is not None:
            body = _built_scalar_lines(*scalar, "x", where, "    ")
        elif typing.get_origin(inner) is list:
            (elem,) = typing.get_args(inner)
            elem_nullable, elem_inner = split_optional(elem)
            elem_scalar = scalar_kind(elem_inner)
            body = ["    if not isinstance(x, (list, tuple)):",
                    f"        bad({where!r}, 'array', x)"]
            if elem_scalar is not None:
                body += ["    for e in x:"]
                if elem_nullable:
                    body += ["        if e is None:", "            continue"]
                body += _built_scalar_lines(*elem_scalar, "e", f"{where}[]", "        ")
        if not body:
            continue  # a nested message or a tuple: checked where it is built
        if nullable:
            lines.append("    if x is not None:")
            body = ["    " + line for line in body]
        lines += body
    lines.append("    return None")
    namespace: dict[str, Any] = {"bad": _bad}
    exec("\n".join(lines), namespace)  # source written from our own type hints
    return cast(Callable[[Any], None], namespace["check"])
