"""Writes ``schema.py`` from Kafka's JSON message schemas, for the APIs in :data:`SERVED`.

A development tool: ``python -m groupwire.protocol.kafka.schemagen [--check]``. The JSON
files are read from the installed kafka-python package (pinned in the dev extra, so two
runs anywhere give the same file) and are never copied into the repository; what is
written is our own reduced form (:mod:`groupwire.protocol.kafka.spec`), restricted to the
served versions. ``--check`` exits 1 when the committed file differs from what would be
written.

Kafka's rules as its message generator has them, applied here once:

- ``versions`` / ``nullableVersions`` / ``taggedVersions``: ``"N+"``, ``"N-M"``, ``"N"`` or
  ``"none"``; a field outside the served range is dropped, ranges are clipped to it.
- ``default``: the schema's string, read for the field's type (``"null"`` -> None, hex
  allowed for integers); absent, the type's zero ("" for strings, even nullable ones, as
  in Kafka's generator; None for records).
- ``commonStructs``: a struct type named but not spelled out is taken from them.
- Names: ``ThrottleTimeMs`` -> ``throttle_time_ms``; digits stay with the word before them
  (``V3AndBelow`` -> ``v3_and_below``), an acronym is one word (``ISRNodes`` -> ``isr_nodes``).

Kafka 4 dropped some old versions from the schemas (Produce 0-2); a served version below
a schema's ``validVersions`` is written from the fields' own version ranges, which Kafka
kept ("versions 0-2 are the same as version 3 without TransactionalId").
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwire.protocol.kafka.spec import PRIMITIVES, Default, Field, Message, Versions

KAFKA_PYTHON = "kafka-python"
KAFKA_PYTHON_VERSION = "3.0.12"
"""The pinned release whose schemas are read (pyproject's dev extra pins the same)."""

SCHEMA_PY = Path(__file__).with_name("schema.py")

SERVED: Mapping[str, Versions] = {
    "ApiVersions": (0, 4),
    "Metadata": (0, 9),
    "Produce": (0, 8),
    "Fetch": (4, 11),
    "ListOffsets": (1, 5),
    "OffsetCommit": (2, 7),
    "OffsetFetch": (1, 7),
    "FindCoordinator": (0, 2),
    "JoinGroup": (0, 5),
    "Heartbeat": (0, 3),
    "SyncGroup": (0, 3),
    "LeaveGroup": (0, 3),
    "DescribeGroups": (0, 4),
    "ListGroups": (0, 2),
    "CreateTopics": (2, 4),
    "DeleteTopics": (1, 3),
    "CreatePartitions": (0, 1),
    "DeleteGroups": (0, 1),
    "DescribeAcls": (1, 1),
    "CreateAcls": (1, 1),
    "DeleteAcls": (1, 1),
    "DescribeConfigs": (1, 3),
    "AlterConfigs": (0, 1),
    "InitProducerId": (0, 4),
    "OffsetForLeaderEpoch": (2, 3),
    "SaslHandshake": (0, 1),
    "SaslAuthenticate": (0, 1),
    "OffsetDelete": (0, 0),
    "DescribeUserScramCredentials": (0, 0),
    "AlterUserScramCredentials": (0, 0),
    "DescribeCluster": (0, 1),
    "ElectLeaders": (0, 2),
    "AddPartitionsToTxn": (0, 3),
    "AddOffsetsToTxn": (0, 3),
    "EndTxn": (0, 3),
    "TxnOffsetCommit": (0, 3),
    "DescribeTransactions": (0, 0),
    "ListTransactions": (0, 1),
}
"""The one table of what groupwire's Kafka listener serves: API -> (min, max) version,
the same for request and response. ``schema.SERVED`` is written from it."""

_ANY = 0x7FFF
"""``"N+"``'s upper end."""


class SchemaError(Exception):
    """A schema this tool cannot read as Kafka's generator would."""


# --- reading ------------------------------------------------------------------------------


def resources_dir() -> Path:
    """Where the installed kafka-python keeps the JSON schemas (not importing it)."""
    try:
        installed = importlib.metadata.version(KAFKA_PYTHON)
    except importlib.metadata.PackageNotFoundError:
        raise SchemaError(f"{KAFKA_PYTHON} is not installed (pip install "
                          f"'{KAFKA_PYTHON}=={KAFKA_PYTHON_VERSION}')") from None
    if installed != KAFKA_PYTHON_VERSION:
        raise SchemaError(f"{KAFKA_PYTHON} {installed} is installed; the schema is generated "
                          f"from {KAFKA_PYTHON_VERSION}")
    spec = importlib.util.find_spec("kafka")
    if spec is None or not spec.submodule_search_locations:
        raise SchemaError("the kafka package is not importable")
    return Path(spec.submodule_search_locations[0]) / "protocol" / "schemas" / "resources"


def strip_comments(text: str) -> str:
    """JSON without Kafka's ``//`` line comments (a ``//`` inside a string is kept)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load(path: Path) -> dict[str, Any]:
    data = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    if not isinstance(data, dict):
        raise SchemaError(f"{path.name}: not a JSON object")
    return data


# --- converting ---------------------------------------------------------------------------


def parse_versions(text: str | None) -> Versions | None:
    if text is None:
        return None
    text = text.strip()
    if text in ("", "none"):
        return None
    if text.endswith("+"):
        return int(text[:-1]), _ANY
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def clip(versions: Versions | None, served: Versions) -> Versions | None:
    if versions is None:
        return None
    lo, hi = max(versions[0], served[0]), min(versions[1], served[1])
    return (lo, hi) if lo <= hi else None


_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+[0-9]*")


def snake_case(name: str) -> str:
    """``TopicName`` -> ``topic_name``; digits stay with the word before them
    (``V3AndBelowProducerId`` -> ``v3_and_below_producer_id``), an acronym is one word
    (``ISRNodes`` -> ``isr_nodes``)."""
    words = _WORDS.findall(name)
    if "".join(words) != name:
        raise SchemaError(f"cannot split field name {name!r}")
    return "_".join(w.lower() for w in words)


def _default(raw: Any, kind: str, array: bool, name: str) -> Default:
    if isinstance(raw, bool | int):  # a few schemas write a number, not a string
        raw = json.dumps(raw)
    if raw is not None and not isinstance(raw, str):
        raise SchemaError(f"{name}: default {raw!r} is not a string")
    if raw == "null":
        return None
    if array or kind == "struct":
        if raw not in (None, ""):
            raise SchemaError(f"{name}: default {raw!r} for an array or struct")
        return ()
    if kind in ("int8", "int16", "int32", "int64", "uint16"):
        return 0 if raw in (None, "") else int(raw, 0)
    if kind == "bool":
        if raw not in (None, "", "true", "false"):
            raise SchemaError(f"{name}: bool default {raw!r}")
        return raw == "true"
    if kind == "float64":
        return 0.0 if raw in (None, "") else float(raw)
    if kind == "string":
        return raw or ""
    if kind == "uuid":
        if raw not in (None, ""):
            raise SchemaError(f"{name}: uuid default {raw!r}")
        return bytes(16)
    if kind == "bytes":
        if raw not in (None, ""):
            raise SchemaError(f"{name}: bytes default {raw!r}")
        return b""
    if kind == "records":
        return None
    raise SchemaError(f"{name}: unknown type {kind!r}")


def convert_fields(raw_fields: Sequence[Mapping[str, Any]], served: Versions,
                   common: Mapping[str, Sequence[Mapping[str, Any]]],
                   path: str) -> tuple[Field, ...]:
    out: list[Field] = []
    for raw in raw_fields:
        field = convert_field(raw, served, common, path)
        if field is not None:
            out.append(field)
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise SchemaError(f"{path}: two fields with one name in {names}")
    tags = [f.tag for f in out if f.tag is not None]
    if len(set(tags)) != len(tags):
        raise SchemaError(f"{path}: two fields with one tag in {tags}")
    return tuple(out)


def convert_field(raw: Mapping[str, Any], served: Versions,
                  common: Mapping[str, Sequence[Mapping[str, Any]]],
                  path: str) -> Field | None:
    """The field as served, or None if no served version carries it."""
    name = snake_case(raw["name"])
    where = f"{path}.{name}"
    if "flexibleVersions" in raw:
        raise SchemaError(f"{where}: a field's own flexibleVersions is only for headers")
    declared = parse_versions(raw.get("versions"))
    if declared is None:
        raise SchemaError(f"{where}: no versions")
    versions = clip(declared, served)
    if versions is None:
        return None
    type_text: str = raw["type"]
    array = type_text.startswith("[]")
    kind = type_text[2:] if array else type_text
    fields: tuple[Field, ...] = ()
    if kind not in PRIMITIVES:
        sub = raw.get("fields")
        if sub is None:
            sub = common.get(kind)
            if sub is None:
                raise SchemaError(f"{where}: struct {kind} has no fields")
        fields = convert_fields(sub, served, common, where)
        kind = "struct"
    tag = raw.get("tag")
    tagged = clip(parse_versions(raw.get("taggedVersions")), served)
    if (tag is None) != ("taggedVersions" not in raw):
        raise SchemaError(f"{where}: tag and taggedVersions go together")
    if tag is not None and not isinstance(tag, int):
        raise SchemaError(f"{where}: tag {tag!r}")
    if tagged is None:
        tag = None
    return Field(
        name=name, type=kind, versions=versions, array=array,
        nullable=clip(parse_versions(raw.get("nullableVersions")), served),
        tag=tag, tagged=tagged, default=_default(raw.get("default"), kind, array, where),
        fields=fields)


def convert_message(data: Mapping[str, Any], served: Versions) -> Message:
    name: str = data["name"]
    kind = data["type"]
    suffix = {"request": "Request", "response": "Response"}.get(kind)
    if suffix is None or not name.endswith(suffix):
        raise SchemaError(f"{name}: type {kind!r}")
    valid = parse_versions(data.get("validVersions"))
    if valid is None or served[1] > valid[1] or served[0] > served[1]:
        raise SchemaError(f"{name}: serves {served}, the schema has {valid}")
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}
    flexible = parse_versions(data.get("flexibleVersions"))
    if flexible is not None and flexible[1] != _ANY:
        raise SchemaError(f"{name}: flexibleVersions {data['flexibleVersions']!r}")
    return Message(
        api_key=int(data["apiKey"]), name=name[: -len(suffix)], response=kind == "response",
        versions=served, flexible=None if flexible is None else flexible[0],
        fields=convert_fields(data["fields"], served, common, name))


def messages(resources: Path) -> list[Message]:
    out = []
    for api, served in SERVED.items():
        for suffix in ("Request", "Response"):
            out.append(convert_message(load(resources / f"{api}{suffix}.json"), served))
    return out


# --- writing ------------------------------------------------------------------------------

HEADER = '''\
"""Kafka's message schemas for the APIs and versions groupwire serves, in our own shape
(:mod:`groupwire.protocol.kafka.spec`).

GENERATED by ``python -m groupwire.protocol.kafka.schemagen`` from the JSON schemas shipped
in {package}=={version}: do not edit. Change the served table in ``schemagen.py`` and run
it again; ``--check`` tells whether this file is current.
"""

from __future__ import annotations

from collections.abc import Mapping

from groupwire.protocol.kafka.spec import Field as F
from groupwire.protocol.kafka.spec import Message
'''


def _wrapped(indent: str, args: list[str], tail: str) -> list[str]:
    """``F(args`` + tail, on one line if it fits in 100 characters, else wrapped."""
    one = f"{indent}F({', '.join(args)}{tail}"
    if len(one) <= 100:
        return [one]
    lines, line = [f"{indent}F("], indent + "    "
    for i, arg in enumerate(args):
        piece = arg + (tail if i == len(args) - 1 else ",")
        if line.strip() and len(line) + 1 + len(piece) > 100:
            lines.append(line)
            line = indent + "    "
        line += (" " if line.strip() else "") + piece
    lines.append(line)
    return lines


def _field_source(f: Field, indent: str) -> list[str]:
    args = [repr(f.name), repr(f.type), repr(f.versions)]
    if f.array:
        args.append("array=True")
    if f.nullable is not None:
        args.append(f"nullable={f.nullable!r}")
    if f.tag is not None:
        args += [f"tag={f.tag!r}", f"tagged={f.tagged!r}"]
    if f.default is not None:
        args.append(f"default={f.default!r}")
    if not f.fields:
        return _wrapped(indent, args, "),")
    lines = _wrapped(indent, args, ", fields=(")
    for sub in f.fields:
        lines += _field_source(sub, indent + "    ")
    lines.append(f"{indent})),")
    return lines


def _message_source(m: Message) -> list[str]:
    lines = [f"    {m.api_key}: Message({m.api_key}, {m.name!r}, {m.response!r}, "
             f"{m.versions!r}, {m.flexible!r}, ("]
    for f in m.fields:
        lines += _field_source(f, "        ")
    lines.append("    )),")
    return lines


def render(msgs: Sequence[Message]) -> str:
    by_key = sorted(msgs, key=lambda m: (m.api_key, m.response))
    lines = [HEADER.format(package=KAFKA_PYTHON, version=KAFKA_PYTHON_VERSION).rstrip("\n"),
             "", "SERVED: Mapping[int, tuple[int, int]] = {"]
    lines += [f"    {m.api_key}: {m.versions!r},  # {m.name}" for m in by_key if m.response]
    lines += ["}", "", "API_NAMES: Mapping[int, str] = {"]
    lines += [f"    {m.api_key}: {m.name!r}," for m in by_key if m.response]
    lines += ["}"]
    for title, response in (("REQUESTS", False), ("RESPONSES", True)):
        lines += ["", f"{title}: Mapping[int, Message] = {{"]
        for m in by_key:
            if m.response is response:
                lines += _message_source(m)
        lines.append("}")
    text = "\n".join(lines) + "\n"
    long = [line for line in text.splitlines() if len(line) > 100]
    if long:
        raise SchemaError(f"a generated line is over 100 characters: {long[0]!r}")
    return text


def generate() -> str:
    """The text of ``schema.py`` from the installed kafka-python's schemas."""
    return render(messages(resources_dir()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m groupwire.protocol.kafka.schemagen",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if schema.py differs from what would be written")
    parser.add_argument("--output", type=Path, default=SCHEMA_PY, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        text = generate()
    except (SchemaError, OSError, KeyError, ValueError) as exc:
        print(f"schemagen: {exc}", file=sys.stderr)
        return 2
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"schemagen: {args.output} is not current; run "
                  "python -m groupwire.protocol.kafka.schemagen", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"schemagen: wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
