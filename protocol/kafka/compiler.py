"""Writes one decoder and one encoder per (message, version) as plain Python, then ``exec``s it.

Interpreting :mod:`~groupwire.protocol.kafka.schema` per message would ask, for every
field of every element, "is it in this version? nullable? compact?". The answers never
change for a version, so they are asked once, here, and the code written holds only what
that version does: consecutive fixed-size fields read with one ``struct`` call, arrays
of structs as inline loops, no per-field function calls (see ``protocol/codegen.py`` for
the same idea on the msgpack side).

Decoders ``(buf, pos) -> (body, pos)`` read from ``buf`` (``bytes``, or a ``memoryview``
in *view* mode, which a large frame arrives as) and are strict: every length is checked
against what remains before it is used, an array's count before anything is allocated
for it (each element takes at least one byte), strings must be UTF-8. A malformed input
raises :class:`Malformed`, or ``struct.error`` / ``IndexError`` where a fixed-size read
runs past the end; the codec turns them all into its one error type.

Decoded bodies hold every field the served versions know: a field the version does not
carry, or a tagged field that was not sent, holds its default. ``records`` are
``memoryview`` slices of the input (no copy), ``bytes`` are ``bytes``, ``uuid`` 16
``bytes``.

Encoders ``(body, out)`` append ``bytes``-like chunks to the list ``out``. A key missing
from the body takes the field's default; a field the version does not carry is ignored;
a tagged field is sent when present and different from its default. A value that cannot
be written raises :class:`Unencodable` naming the field.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from groupwire.protocol.kafka.spec import Field, Message

__all__ = ["Decoder", "Encoder", "Malformed", "Unencodable", "decoder", "encoder",
           "read_uvarint", "skip_tagged", "uvarint_bytes"]

Decoder = Callable[[Any, int], tuple[dict[str, Any], int]]
"""``(buf, pos) -> (body, pos after it)``."""
Encoder = Callable[[Mapping[str, Any], list[Any]], None]
"""``(body, out)``: appends the body's bytes to ``out``."""


class Malformed(Exception):
    """The input breaks the wire format (internal: the codec wraps it)."""


class Unencodable(Exception):
    """A value the encoder was given cannot be written (internal: the codec wraps it)."""

    def __init__(self, path: str, reason: object) -> None:
        super().__init__(f"{path}: {reason}")


# --- helpers the generated code calls -----------------------------------------------------


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's lengths and counts are int32)."""
    b = buf[pos]
    value = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 28:
            raise Malformed(f"varint at byte {pos} is longer than 5 bytes")
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        shift += 7
    return value, pos + 1


_VARINT1 = tuple(bytes((i,)) for i in range(128))


def uvarint_bytes(n: int) -> bytes:
    if n < 0 or n > 0xFFFFFFFF:
        raise ValueError(f"{n} does not fit an unsigned varint")
    if n < 128:
        return _VARINT1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def skip_tagged(buf: Any, pos: int, end: int) -> int:
    """Past a tagged-fields section none of whose tags are wanted."""
    count, pos = read_uvarint(buf, pos)
    if count * 2 > end - pos:
        raise Malformed(f"{count} tagged fields in {end - pos} bytes")
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise Malformed("a tagged field runs past the end")
    return pos


def _as_bytes(x: Any, path: str) -> bytes | memoryview:
    if isinstance(x, bytes):
        return x
    if isinstance(x, bytearray | memoryview):
        view = memoryview(x)
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    raise Unencodable(path, f"expected bytes, got {type(x).__name__}")


def _as_uuid(x: Any, path: str) -> bytes:
    if isinstance(x, uuid.UUID):
        return x.bytes
    if isinstance(x, bytes | bytearray | memoryview) and len(x) == 16:
        return bytes(x)
    raise Unencodable(path, "expected 16 bytes or a uuid.UUID")


def _as_list(x: Any, path: str) -> Sequence[Any]:
    if isinstance(x, list | tuple):
        return x
    if isinstance(x, str | bytes | bytearray | memoryview | Mapping) or not hasattr(
            x, "__iter__"):
        raise Unencodable(path, f"expected a list, got {type(x).__name__}")
    return list(x)


def _not_a_mapping(x: Any, path: str) -> Mapping[str, Any]:
    if isinstance(x, Mapping):
        return x
    raise Unencodable(path, f"expected a mapping, got {type(x).__name__}")


_MISSING = object()
_MISSING_STRUCT = object()
"""An encoder's default for a struct field: a struct of its fields' defaults."""

_FIXED: Mapping[str, tuple[str, int]] = {
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4),
    "int64": ("q", 8), "uint16": ("H", 2), "float64": ("d", 8), "uuid": ("16s", 16),
}
"""struct format and size of the fixed-size types."""

_TABLE = 65
"""Arrays of fixed-size items shorter than this use a precompiled format."""

_BASE_NS: dict[str, Any] = {
    "Malformed": Malformed, "Unencodable": Unencodable, "uvarint": read_uvarint,
    "skip_tagged": skip_tagged, "varint": uvarint_bytes, "V1": _VARINT1,
    "unpack_from": struct.unpack_from, "pack": struct.pack, "as_bytes": _as_bytes,
    "as_uuid": _as_uuid, "as_list": _as_list, "as_map": _not_a_mapping,
    "MISSING": _MISSING, "EMPTY": {}, "memoryview": memoryview,
}


def _min_size(f: Field, version: int, flexible: bool) -> int:
    """The fewest bytes one value of ``f`` (one element, for an array) takes."""
    if f.type in _FIXED:
        return _FIXED[f.type][1]
    if f.type == "struct":
        fields = [g for g in f.fields if g.present(version) and not g.is_tagged(version)]
        inner = sum(_wire_min(g, version, flexible) for g in fields) + (1 if flexible else 0)
        return max(1, inner)
    if flexible:
        return 1
    return 2 if f.type == "string" else 4


def _wire_min(f: Field, version: int, flexible: bool) -> int:
    if f.array:
        return 1 if flexible else 4
    if f.type == "struct" and f.is_nullable(version):
        return 1
    return _min_size(f, version, flexible)


# --- the writer ---------------------------------------------------------------------------


class _Source:
    """Lines of one function being written, and the globals they use."""

    def __init__(self, version: int, flexible: bool, ns: dict[str, Any]) -> None:
        self.version = version
        self.flexible = flexible
        self.ns = ns
        self.lines: list[str] = []
        self._count = 0

    def var(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def const(self, prefix: str, value: Any) -> str:
        name = self.var(prefix.upper())
        self.ns[name] = value
        return name

    def unpacker(self, fmt: str) -> str:
        name = "U_" + fmt.replace("?", "Z")
        if name not in self.ns:
            self.ns[name] = struct.Struct(">" + fmt).unpack_from
        return name

    def packer(self, fmt: str) -> str:
        name = "P_" + fmt.replace("?", "Z")
        if name not in self.ns:
            self.ns[name] = struct.Struct(">" + fmt).pack
        return name

    def table(self, prefix: str, fmt: str, make: Callable[[int], Any]) -> str:
        """A list of ``make(k)`` for k < ``_TABLE``: compiled formats for short arrays."""
        name = f"{prefix}_" + fmt.replace("?", "Z")
        if name not in self.ns:
            self.ns[name] = [make(k) for k in range(_TABLE)]
        return name

    def regular(self, fields: Sequence[Field]) -> list[Field]:
        return [f for f in fields if f.present(self.version) and not f.is_tagged(self.version)]

    def tagged(self, fields: Sequence[Field]) -> list[Field]:
        tagged = [f for f in fields if f.present(self.version) and f.is_tagged(self.version)]
        if tagged and not self.flexible:
            raise ValueError(f"tagged fields {[f.name for f in tagged]} in a version that "
                             "is not flexible")
        return sorted(tagged, key=lambda f: cast(int, f.tag))


def _compile(src: _Source, name: str) -> Callable[..., Any]:
    text = "\n".join(src.lines)
    exec(text, src.ns)  # source written above from our own schema table
    fn = cast(Callable[..., Any], src.ns[name])
    fn.__source__ = text  # type: ignore[attr-defined]  # for debugging
    return fn


def _packable(f: Field) -> bool:
    """A fixed-size scalar an encoder packs with its neighbours (a uuid is checked alone:
    ``struct`` would pad a short one)."""
    return f.type in _FIXED and not f.array and f.type != "uuid"


def _runs(fields: Sequence[Field]) -> list[list[Field]]:
    """Consecutive fields, grouped so that runs of packable scalars go together."""
    runs: list[list[Field]] = []
    for f in fields:
        if _packable(f) and runs and _packable(runs[-1][0]):
            runs[-1].append(f)
        else:
            runs.append([f])
    return runs


# --- decoders -----------------------------------------------------------------------------


class _DecoderWriter:
    """Writes a decoder's source: :meth:`struct` reads one struct at ``pos`` inline."""

    def __init__(self, version: int, flexible: bool, view: bool, ns: dict[str, Any]) -> None:
        self.src = _Source(version, flexible, ns)
        self.view = view
        self.records_from = "buf" if view else "mv"
        self.uses_mv = False

    def default_expr(self, f: Field) -> str:
        """An expression for ``f``'s default, fresh on every evaluation."""
        if f.array:
            return "None" if f.default is None else "[]"
        if f.type == "struct":
            if f.default is None:
                return "None"
            inner = ", ".join(f"{g.name!r}: {self.default_expr(g)}" for g in f.fields)
            return "{" + inner + "}"
        return repr(f.default)

    def struct(self, fields: Sequence[Field], d: int, path: str) -> str:
        """Reads a struct at ``pos``; returns the variable holding its dict.

        Consecutive fixed-size fields are read with one ``struct`` call, and so is the
        length or count of the variable-size field after them (not in flexible versions,
        where it is a varint)."""
        src = self.src
        values: dict[str, str] = {}
        pending: list[tuple[str, str, int]] = []  # (variable, format, size) not read yet

        def flush() -> None:
            if pending:
                names = ", ".join(v for v, _, _ in pending)
                fmt = "".join(f for _, f, _ in pending)
                src.add(d, f"{names}, = {src.unpacker(fmt)}(buf, pos)")
                src.add(d, f"pos += {sum(size for _, _, size in pending)}")
                pending.clear()

        for f in src.regular(fields):
            where = f"{path}.{f.name}"
            if f.type in _FIXED and not f.array:
                values[f.name] = var = src.var("v")
                pending.append((var, *_FIXED[f.type]))
                continue
            prefix = self.prefix(f)
            if prefix is None:
                flush()
                values[f.name] = self.value(f, d, where)
            else:
                length = src.var("n")
                pending.append((length, prefix, 2 if prefix == "h" else 4))
                flush()
                values[f.name] = self.value(f, d, where, length=length)
        flush()
        if src.flexible:
            self.tagged_section(src.tagged(fields), values, d, path)
        for f in fields:
            if f.name not in values:
                values[f.name] = self.default_expr(f)
        var = src.var("s")
        src.add(d, f"{var} = {{{', '.join(f'{f.name!r}: {values[f.name]}' for f in fields)}}}")
        return var

    def prefix(self, f: Field) -> str | None:
        """The struct format of ``f``'s length or count, if it is a fixed-size one."""
        if self.src.flexible:
            return None
        if f.array or f.type in ("bytes", "records"):
            return "i"
        return "h" if f.type == "string" else None

    def tagged_section(self, tagged: list[Field], values: dict[str, str], d: int,
                       path: str) -> None:
        src = self.src
        if not tagged:
            src.add(d, "if buf[pos] == 0:")
            src.add(d + 1, "pos += 1")
            src.add(d, "else:")
            src.add(d + 1, "pos = skip_tagged(buf, pos, end)")
            return
        for f in tagged:
            values[f.name] = var = src.var("t")
            src.add(d, f"{var} = {self.default_expr(f)}")
        count, tag, size, stop = src.var("nt"), src.var("tag"), src.var("ts"), src.var("te")
        self.uvarint(count, d)
        src.add(d, f"if {count} * 2 > end - pos:")
        src.add(d + 1, f"raise Malformed('{path}: %d tagged fields in %d bytes' "
                       f"% ({count}, end - pos))")
        src.add(d, f"for _ in range({count}):")
        self.uvarint(tag, d + 1)
        self.uvarint(size, d + 1)
        src.add(d + 1, f"{stop} = pos + {size}")
        src.add(d + 1, f"if {stop} > end:")
        src.add(d + 2, f"raise Malformed('{path}: tagged field %d runs past the end' % {tag})")
        for i, f in enumerate(tagged):
            src.add(d + 1, f"{'if' if i == 0 else 'elif'} {tag} == {f.tag}:")
            value = self.value(f, d + 2, f"{path}.{f.name}")
            src.add(d + 2, f"{values[f.name]} = {value}")
            src.add(d + 2, f"if pos != {stop}:")
            src.add(d + 3, f"raise Malformed('{path}.{f.name}: tagged field of %d bytes "
                           f"read as %d' % ({size}, pos - {stop} + {size}))")
        src.add(d + 1, f"pos = {stop}")

    def uvarint(self, var: str, d: int) -> None:
        src = self.src
        src.add(d, f"{var} = buf[pos]")
        src.add(d, f"if {var} < 128:")
        src.add(d + 1, "pos += 1")
        src.add(d, "else:")
        src.add(d + 1, f"{var}, pos = uvarint(buf, pos)")

    def length(self, var: str, d: int, width: str) -> None:
        """A length or count into ``var``: -1 for null, possibly other negatives (bad)."""
        src = self.src
        if src.flexible:
            self.uvarint(var, d)
            src.add(d, f"{var} -= 1")
        else:
            src.add(d, f"{var}, = {src.unpacker(width)}(buf, pos)")
            src.add(d, f"pos += {2 if width == 'h' else 4}")

    def null_or_negative(self, f: Field, n: str, out: str, d: int, path: str,
                         what: str) -> None:
        """The branch for a negative length: null if allowed, else malformed."""
        src = self.src
        src.add(d, f"if {n} < 0:")
        if not f.is_nullable(src.version):
            src.add(d + 1, f"raise Malformed('{path}: {what} %d (not nullable)' % {n})")
            return
        if not src.flexible:
            src.add(d + 1, f"if {n} != -1:")
            src.add(d + 2, f"raise Malformed('{path}: {what} %d' % {n})")
        src.add(d + 1, f"{out} = None")

    def value(self, f: Field, d: int, path: str, *, length: str | None = None) -> str:
        """Reads one value of ``f`` (an array, if it is one); returns its variable.
        ``length``: the variable its length or count was read into already."""
        if f.array:
            return self.array(f, d, path, length)
        return self.single(f, d, path, nullable_struct=f.is_nullable(self.src.version),
                           length=length)

    def single(self, f: Field, d: int, path: str, *, nullable_struct: bool,
               length: str | None = None) -> str:
        src = self.src
        kind = f.type
        out = src.var("x")
        if kind in _FIXED:
            fmt, size = _FIXED[kind]
            src.add(d, f"{out}, = {src.unpacker(fmt)}(buf, pos)")
            src.add(d, f"pos += {size}")
            return out
        if kind == "struct":
            if nullable_struct:  # Kafka marks a nullable struct with a byte: -1 null, 1 set
                src.add(d, f"if {src.unpacker('b')}(buf, pos)[0] < 0:")
                src.add(d + 1, "pos += 1")
                src.add(d + 1, f"{out} = None")
                src.add(d, "else:")
                src.add(d + 1, "pos += 1")
                inner = self.struct(f.fields, d + 1, path)
                src.add(d + 1, f"{out} = {inner}")
                return out
            return self.struct(f.fields, d, path)
        stop = src.var("e")
        if length is None:
            n = src.var("n")
            self.length(n, d, "h" if kind == "string" else "i")
        else:
            n = length
        self.null_or_negative(f, n, out, d, path, "length")
        src.add(d, "else:")
        src.add(d + 1, f"{stop} = pos + {n}")
        src.add(d + 1, f"if {stop} > end:")
        src.add(d + 2, f"raise Malformed('{path}: length %d, %d bytes left' % ({n}, end - pos))")
        if kind == "string" and src.flexible:  # Kafka's limit, for compact strings too
            src.add(d + 1, f"if {n} > 32767:")
            src.add(d + 2, f"raise Malformed('{path}: string of %d bytes' % {n})")
        if kind == "string":
            expr = f"str(buf[pos:{stop}], 'utf-8')" if self.view else f"buf[pos:{stop}].decode()"
        elif kind == "bytes":
            expr = f"bytes(buf[pos:{stop}])" if self.view else f"buf[pos:{stop}]"
        elif kind == "records":
            self.uses_mv = self.uses_mv or not self.view
            expr = f"{self.records_from}[pos:{stop}]"
        else:
            raise ValueError(f"{path}: unknown type {kind!r}")
        src.add(d + 1, f"{out} = {expr}")
        src.add(d + 1, f"pos = {stop}")
        return out

    def array(self, f: Field, d: int, path: str, length: str | None = None) -> str:
        src = self.src
        out = src.var("a")
        if length is None:
            n = src.var("n")
            self.length(n, d, "i")
        else:
            n = length
        self.null_or_negative(f, n, out, d, path, "count")
        src.add(d, "else:")
        least = _min_size(f, src.version, src.flexible)
        over = f"{n} > end - pos" if least == 1 else f"{n} * {least} > end - pos"
        src.add(d + 1, f"if {over}:")
        src.add(d + 2, f"raise Malformed('{path}: %d items in %d bytes' % ({n}, end - pos))")
        if f.type in _FIXED:
            fmt, size = _FIXED[f.type]
            table = src.table("UA", fmt, lambda k: struct.Struct(">" + fmt * k).unpack_from)
            src.add(d + 1, f"{out} = [*{table}[{n}](buf, pos)] if {n} < {_TABLE} "
                           f"else [*unpack_from('>' + {fmt!r} * {n}, buf, pos)]")
            src.add(d + 1, f"pos += {n} * {size}")
            return out
        append = src.var("ap")
        src.add(d + 1, f"{out} = []")
        src.add(d + 1, f"{append} = {out}.append")
        src.add(d + 1, f"for _ in range({n}):")
        item = self.single(f, d + 2, f"{path}[]", nullable_struct=False)
        src.add(d + 2, f"{append}({item})")
        return out


def decoder(message: Message, version: int, *, view: bool = False) -> Decoder:
    """The decoder of ``message`` at ``version``; ``view`` for input given as a memoryview."""
    _check_version(message, version)
    ns = dict(_BASE_NS)
    w = _DecoderWriter(version, message.is_flexible(version), view, ns)
    body = w.struct(message.fields, 1, message.name)
    head = ["def decode(buf, pos):", "    end = len(buf)"]
    if w.uses_mv:
        head.append("    mv = memoryview(buf)")
    w.src.lines[:0] = head
    w.src.add(1, f"return {body}, pos")
    return cast(Decoder, _compile(w.src, "decode"))


# --- encoders -----------------------------------------------------------------------------


class _EncoderWriter:
    """Writes an encoder's source: :meth:`struct` writes one mapping inline."""

    def __init__(self, version: int, flexible: bool, ns: dict[str, Any]) -> None:
        self.src = _Source(version, flexible, ns)

    def default_value(self, f: Field) -> Any:
        """What a missing key stands for (read-only: shared by every call)."""
        if f.array:
            return None if f.default is None else ()
        if f.type == "struct":
            return None if f.default is None else _MISSING_STRUCT
        return f.default

    def default_expr(self, f: Field) -> str:
        value = self.default_value(f)
        if value is None or value == () or isinstance(value, bool | int | float | str):
            return repr(value)
        if value is _MISSING_STRUCT:
            return "EMPTY"
        return self.src.const("d", value)

    def struct(self, fields: Sequence[Field], obj: str, ap: str, d: int, path: str) -> None:
        """Writes the mapping in variable ``obj``."""
        src = self.src
        get = src.var("g")
        src.add(d, f"{get} = {obj}.get")
        for run in _runs(src.regular(fields)):
            first = run[0]
            if _packable(first):
                fmt = "".join(_FIXED[f.type][0] for f in run)
                args = ", ".join(f"{get}({f.name!r}, {self.default_expr(f)})" for f in run)
                names = ", ".join(f"{path}.{f.name}" for f in run)
                src.add(d, "try:")
                src.add(d + 1, f"{ap}({src.packer(fmt)}({args}))")
                src.add(d, "except Exception as exc:")
                src.add(d + 1, f"raise Unencodable({names!r}, exc) from None")
            else:
                x = src.var("x")
                src.add(d, f"{x} = {get}({first.name!r}, {self.default_expr(first)})")
                self.value(first, x, ap, d, f"{path}.{first.name}")
        if src.flexible:
            self.tagged_section(src.tagged(fields), get, ap, d, path)

    def tagged_section(self, tagged: list[Field], get: str, ap: str, d: int,
                       path: str) -> None:
        src = self.src
        if not tagged:
            src.add(d, f"{ap}(b'\\x00')")
            return
        chunks = src.var("tg")
        src.add(d, f"{chunks} = []")
        for f in tagged:
            fn, default = _tagged_encoder(f, src.version, f"{path}.{f.name}")
            fn_name, default_name = src.const("tf", fn), src.const("td", default)
            head = uvarint_bytes(cast(int, f.tag))
            x, sub = src.var("x"), src.var("sub")
            src.add(d, f"{x} = {get}({f.name!r}, MISSING)")
            skip = f"{x} is not MISSING"
            if not f.is_nullable(src.version):
                skip += f" and {x} is not None"
            src.add(d, f"if {skip}:")
            src.add(d + 1, f"{sub} = []")
            src.add(d + 1, f"{fn_name}({x}, {sub}.append)")
            src.add(d + 1, f"{sub} = b''.join({sub})")
            src.add(d + 1, f"if {sub} != {default_name}:")
            src.add(d + 2, f"{chunks}.append({head!r} + varint(len({sub})) + {sub})")
        src.add(d, f"{ap}(varint(len({chunks})))")
        src.add(d, f"{ap}(b''.join({chunks}))")

    def length(self, n: str, ap: str, d: int, width: str) -> None:
        src = self.src
        if src.flexible:
            src.add(d, f"{n} += 1")
            src.add(d, f"{ap}(V1[{n}] if {n} < 128 else varint({n}))")
        else:
            src.add(d, f"{ap}({src.packer(width)}({n}))")

    def null(self, f: Field, x: str, ap: str, d: int, path: str, width: str) -> None:
        """The branch for a None value: the null marker if allowed, else refused."""
        src = self.src
        src.add(d, f"if {x} is None:")
        if not f.is_nullable(src.version):
            src.add(d + 1, f"raise Unencodable({path!r}, 'null in version {src.version}')")
        elif src.flexible:
            src.add(d + 1, f"{ap}(b'\\x00')")
        else:
            marker = b"\xff" * (2 if width == "h" else 4)
            src.add(d + 1, f"{ap}({marker!r})")

    def value(self, f: Field, x: str, ap: str, d: int, path: str) -> None:
        if f.array:
            self.array(f, x, ap, d, path)
        else:
            self.single(f, x, ap, d, path, nullable=f.is_nullable(self.src.version))

    def single(self, f: Field, x: str, ap: str, d: int, path: str, *, nullable: bool) -> None:
        src = self.src
        kind = f.type
        if kind == "uuid":
            src.add(d, f"{ap}({x} if type({x}) is bytes and len({x}) == 16 "
                       f"else as_uuid({x}, {path!r}))")
            return
        if kind in _FIXED:
            fmt = _FIXED[kind][0]
            src.add(d, "try:")
            src.add(d + 1, f"{ap}({src.packer(fmt)}({x}))")
            src.add(d, "except Exception as exc:")
            src.add(d + 1, f"raise Unencodable({path!r}, exc) from None")
            return
        if kind == "struct":
            if nullable:
                src.add(d, f"if {x} is None:")
                src.add(d + 1, f"{ap}(b'\\xff')")
                src.add(d, "else:")
                src.add(d + 1, f"{ap}(b'\\x01')")
                d += 1
            src.add(d, f"if type({x}) is not dict:")
            src.add(d + 1, f"{x} = as_map({x}, {path!r})")
            self.struct(f.fields, x, ap, d, path)
            return
        width = "h" if kind == "string" else "i"
        self.null(f, x, ap, d, path, width)
        src.add(d, "else:")
        n = src.var("n")
        if kind == "string":
            src.add(d + 1, "try:")
            src.add(d + 2, f"{x} = {x}.encode()")
            src.add(d + 1, "except Exception:")
            src.add(d + 2, f"raise Unencodable({path!r}, "
                           f"'expected str, got %s' % type({x}).__name__) from None")
            src.add(d + 1, f"{n} = len({x})")
            src.add(d + 1, f"if {n} > 32767:")  # Kafka's limit, for compact strings too
            src.add(d + 2, f"raise Unencodable({path!r}, '%d bytes: over 32767' % {n})")
        else:
            src.add(d + 1, f"if type({x}) is not bytes:")
            src.add(d + 2, f"{x} = as_bytes({x}, {path!r})")
            src.add(d + 1, f"{n} = len({x})")
        self.length(n, ap, d + 1, width)
        src.add(d + 1, f"{ap}({x})")

    def array(self, f: Field, x: str, ap: str, d: int, path: str) -> None:
        src = self.src
        self.null(f, x, ap, d, path, "i")
        src.add(d, "else:")
        src.add(d + 1, f"if type({x}) is not list:")
        src.add(d + 2, f"{x} = as_list({x}, {path!r})")
        n = src.var("n")
        src.add(d + 1, f"{n} = len({x})")
        if f.type in _FIXED and f.type != "uuid":
            fmt = _FIXED[f.type][0]
            src.add(d + 1, "try:")
            if src.flexible:  # a varint count, then the items
                self.length(n, ap, d + 2, "i")
                table = src.table("PA", fmt, lambda k: struct.Struct(">" + fmt * k).pack)
                src.add(d + 2, f"{ap}({table}[{n} - 1](*{x}) if {n} <= {_TABLE} "
                               f"else pack('>' + {fmt!r} * ({n} - 1), *{x}))")
            else:  # count and items in one go
                table = src.table("PC", fmt, lambda k: struct.Struct(">i" + fmt * k).pack)
                src.add(d + 2, f"{ap}({table}[{n}]({n}, *{x}) if {n} < {_TABLE} "
                               f"else pack('>i' + {fmt!r} * {n}, {n}, *{x}))")
            src.add(d + 1, "except Exception as exc:")
            src.add(d + 2, f"raise Unencodable({path!r}, exc) from None")
            return
        self.length(n, ap, d + 1, "i")
        item = src.var("e")
        src.add(d + 1, f"for {item} in {x}:")
        self.single(f, item, ap, d + 2, f"{path}[]", nullable=False)



def _tagged_encoder(f: Field, version: int, path: str) -> tuple[Callable[..., None], bytes | None]:
    """A function writing one tagged field's value, and what its default writes (None when
    the default cannot be written: then any value is sent)."""
    ns = dict(_BASE_NS)
    w = _EncoderWriter(version, True, ns)
    w.src.add(0, "def put(x, ap):")
    w.value(f, "x", "ap", 1, path)
    fn = _compile(w.src, "put")
    default = w.default_value(f)
    if default is _MISSING_STRUCT:
        default = {}
    out: list[Any] = []
    try:
        fn(default, out.append)
    except Unencodable:
        return fn, None
    return fn, b"".join(out)


def encoder(message: Message, version: int) -> Encoder:
    """The encoder of ``message`` at ``version``."""
    _check_version(message, version)
    ns = dict(_BASE_NS)
    w = _EncoderWriter(version, message.is_flexible(version), ns)
    w.src.add(0, "def encode(b, out):")
    w.src.add(1, "ap = out.append")
    w.src.add(1, "if type(b) is not dict:")
    w.src.add(2, f"b = as_map(b, {message.name!r})")
    w.struct(message.fields, "b", "ap", 1, message.name)
    return cast(Encoder, _compile(w.src, "encode"))


def _check_version(message: Message, version: int) -> None:
    lo, hi = message.versions
    if not lo <= version <= hi:
        raise ValueError(f"{message.name} v{version} is not served ({lo}-{hi})")
