"""Reference pages that would go stale if written by hand, generated from the code.

The text sits in the pages themselves, between ``<!-- generated:NAME -->`` and
``<!-- end generated:NAME -->``, so the pages read whole on the code host, not only in
the built site:

* ``cli``: ``groupwire COMMAND --help`` for every command and action, taken from the
  parser the ``groupwire`` script runs (reference/cli.md);
* ``config``: one row per broker setting (flag, environment variable, default, help),
  from the table that also builds the flags (reference/configuration.md);
* ``sdk``: the public classes' signatures and docstrings (reference/sdk.md);
* ``kafka-apis``: the Kafka APIs and versions the Kafka door serves (reference/kafka.md);
* ``transaction-states``: the transaction coordinator's states and moves, from the table
  the coordinator checks every move against (design/transactions.md).

``python docs/hooks/generated.py`` rewrites them (``--check`` only says which are out of
date; tests/unit/docs fails on a stale page). As an MkDocs hook it regenerates the text
when the site is built, so the site is current even before a refresh.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import os
import re
import sys
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from groupwire.broker import config
from groupwire.cli.main import build_parser

HELP_COLUMNS = "100"
"""Terminal width the help is rendered for (argparse wraps to ``$COLUMNS``)."""



@contextmanager
def _columns(width: str) -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...],
          ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


def command_helps() -> list[tuple[str, str]]:
    """``(command line, help text)`` for ``groupwire`` and each of its (sub)commands."""
    with _columns(HELP_COLUMNS):
        return [(" ".join(("groupwire", *path)), parser.format_help())
                for path, parser in _walk(build_parser(), ())]


def cli_markdown() -> str:
    parts = []
    for command, text in command_helps():
        level = "#" * min(2 + command.count(" "), 4)
        parts.append(f"{level} `{command}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_markdown() -> str:
    defaults = config.BrokerSettings()
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for opt in config.OPTIONS:
        default = getattr(defaults, opt.name)
        if isinstance(default, bool):
            flag = opt.negative_flag or config.flag_of(opt.name)
            shown = "on" if default else "off"
        else:
            flag = config.flag_of(opt.name)
            shown = f"`{default}`" if str(default) else "(none)"
        meaning = opt.help + (f" ({', '.join(opt.choices)})" if opt.choices else "")
        rows.append(f"| `{flag}` | `{config.env_of(opt.name)}` | {shown} | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


# --- the SDK page ------------------------------------------------------------------------

SDK_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Consumer", ("Consumer",)),
    ("Producer", ("Producer", "BatchBuilder", "BatchRecordMetadata")),
    ("Admin", ("Admin",)),
    ("What Admin takes and returns", (
        "TopicSpec", "TopicDescription", "PartitionDescription", "ClusterDescription",
        "BrokerDescription", "GroupListing", "GroupDescription", "MemberDescription",
        "PartitionLag", "TransactionListing", "TransactionDescription")),
    ("ACLs and users", (
        "AclBinding", "AclBindingFilter", "ResourcePattern", "AccessControlEntry",
        "ScramCredentialInfo")),
    ("RebalanceListener", ("RebalanceListener",)),
    ("Security", ("SecurityConfig", "create_ssl_context")),
    ("Types", ("TopicPartition", "Record", "RecordMetadata", "OffsetAndMetadata",
               "ConsumerGroupMetadata")),
)
"""The SDK page's sections and the ``groupwire`` names each documents, in order."""

_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`~?([^`]+)`")
_FIELD = re.compile(r"^:(param|raises|returns?)\s*([^:]*):\s*(.*)$")
_SIGNATURE_WIDTH = 88


def _prose(doc: str | None, owner: str = "") -> str:
    """A docstring as markdown: Sphinx roles and ``literals`` as code, ``:param x:``
    fields as a list; none for the signature a dataclass writes for itself."""
    if not doc or (owner and doc.startswith(f"{owner}(")):
        return ""
    text = inspect.cleandoc(doc)
    text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = text.replace("``", "`")
    lines: list[str] = []
    for line in text.splitlines():
        field = _FIELD.match(line.strip())
        if field is None:
            if lines and lines[-1].startswith("- ") and line.startswith(" "):
                lines[-1] += " " + line.strip()  # a field's continuation line
            else:
                lines.append(line)
            continue
        kind, name, rest = field.groups()
        if kind == "param":
            lines.append(f"- `{name.strip()}`: {rest}")
        elif kind == "raises":
            lines.append(f"- raises `{name.strip()}`: {rest}")
        else:
            lines.append(f"- returns: {rest}")
    return "\n".join(lines).strip()


def _annotation(value: Any) -> str:
    if isinstance(value, typing.ForwardRef):  # a NamedTuple's fields, under __future__
        return value.__forward_arg__
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _default(value: Any) -> str:
    return getattr(value, "__name__", None) or repr(value) if callable(value) else repr(value)


def _parameters(sig: inspect.Signature) -> list[str]:
    """Each parameter as written in source, with ``*`` / ``/`` where the kinds change."""
    parts: list[str] = []
    star_done = False
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, star_done = f"*{p.name}", True
        elif p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
        elif p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += (" = " if p.annotation is not p.empty else "=") + _default(p.default)
        parts.append(text)
    return parts


def _signature(name: str, obj: Any) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = _parameters(sig)
    returns = ("" if sig.return_annotation is sig.empty or inspect.isclass(obj)
               else f" -> {_annotation(sig.return_annotation)}")
    one_line = f"{name}({', '.join(params)}){returns}"
    if len(one_line) <= _SIGNATURE_WIDTH:
        return one_line
    body = "".join(f"    {part},\n" for part in params)
    return f"{name}(\n{body}){returns}"


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties ``cls`` itself defines, in source order."""
    found = []
    for attr, value in vars(cls).items():
        if attr.startswith("_") and attr not in ("__aiter__",):
            continue
        if isinstance(value, property) or inspect.isfunction(value):
            found.append((attr, value))
        elif isinstance(value, (staticmethod, classmethod)):
            found.append((attr, value.__func__))
    return found


def _render(name: str, obj: Any) -> str:
    parts = [f"### `{name}`\n"]
    if inspect.isclass(obj):
        is_data = dataclasses.is_dataclass(obj)
        if issubclass(obj, enum.Enum):
            values = ", ".join(f"`{m.name}`" for m in obj)
            parts.append(f"{_prose(obj.__doc__)}\n\nValues: {values}.\n")
            return "\n".join(parts)
        parts.append(f"```python\n{_signature(name, obj)}\n```\n")
        parts.append(_prose(obj.__doc__, name) + "\n")
        if is_data:
            return "\n".join(parts)
        for attr, member in _members(obj):
            shown = attr
            if isinstance(member, property):
                parts.append(f"#### `{name}.{shown}` (property)\n")
                doc = _prose(member.__doc__)
            else:
                prefix = "async " if inspect.iscoroutinefunction(member) else ""
                parts.append(f"#### `{name}.{shown}`\n")
                parts.append(f"```python\n{prefix}def {_signature(shown, member)}\n```\n")
                doc = _prose(member.__doc__)
            if doc:
                parts.append(doc + "\n")
        return "\n".join(parts)
    parts.append(f"```python\n{_signature(name, obj)}\n```\n")
    parts.append(_prose(obj.__doc__) + "\n")
    return "\n".join(parts)


def sdk_markdown() -> str:
    """The SDK reference from the public classes' own signatures and docstrings."""
    import groupwire
    import groupwire.errors

    out: list[str] = []
    for title, names in SDK_SECTIONS:
        out.append(f"## {title}\n")
        out.extend(_render(name, getattr(groupwire, name)) for name in names)
    out.append("## Errors\n")
    out.append(_prose(groupwire.errors.__doc__) + "\n")
    for name in groupwire.errors.__all__:
        error = getattr(groupwire.errors, name)
        if not inspect.isclass(error):
            continue
        bases = ", ".join(f"`{b.__name__}`" for b in error.__bases__)
        code = error.__dict__.get("code")
        carries = f" Error code {int(code)}, `{code.name}`." if code is not None else ""
        out.append(f"### `{name}`\n\nA subclass of {bases}.{carries}\n")
        doc = _prose(error.__doc__)
        if doc and error.__doc__ != error.__bases__[0].__doc__:
            out.append(doc + "\n")
    return "\n".join(out)


def kafka_markdown() -> str:
    """The Kafka APIs and versions the Kafka door serves: what ApiVersions advertises."""
    from groupwire.broker.kafka.apis import TRANSLATORS
    from groupwire.broker.kafka.door import KafkaDoor
    from groupwire.protocol.kafka.codec import API_NAMES, is_flexible

    rows = ["| API | key | versions | flexible |", "|---|---|---|---|"]
    for key, (low, high) in KafkaDoor(TRANSLATORS).advertised.items():
        flexible = [v for v in range(low, high + 1) if is_flexible(key, v)]
        flex = "-" if not flexible else (
            f"{flexible[0]}" if len(flexible) == 1 else f"{flexible[0]}-{flexible[-1]}")
        rows.append(f"| {API_NAMES[key]} | {key} | {low}-{high} | {flex} |"
                    if low != high else f"| {API_NAMES[key]} | {key} | {low} | {flex} |")
    return "\n".join(rows) + "\n"


def transaction_states_markdown() -> str:
    """The transaction coordinator's state diagram, drawn from its one table."""
    from groupwire.broker.transactions.state import diagram

    return f"```mermaid\n{diagram()}```\n"


# --- committed pages -------------------------------------------------------------------

PAGES: dict[str, tuple[str, Callable[[], str]]] = {
    "reference/cli.md": ("cli", cli_markdown),
    "reference/configuration.md": ("config", config_markdown),
    "reference/sdk.md": ("sdk", sdk_markdown),
    "reference/kafka.md": ("kafka-apis", kafka_markdown),
    "design/transactions.md": ("transaction-states", transaction_states_markdown),
}
"""Each page with generated text, its marker name and what generates it."""


def begin_marker(name: str) -> str:
    return f"<!-- generated:{name} -->"


def end_marker(name: str) -> str:
    return f"<!-- end generated:{name} -->"


def refreshed(page: str, name: str, content: str) -> str:
    """``page`` with the text between its ``name`` markers replaced by ``content``."""
    begin, end = begin_marker(name), end_marker(name)
    if page.count(begin) != 1 or page.count(end) != 1:
        raise ValueError(f"expected one {begin} and one {end}")
    before, rest = page.split(begin)
    after = rest.split(end)[1]
    content = re.sub(r"\n{3,}", "\n\n", content.strip())
    return f"{before}{begin}\n\n{content}\n\n{end}{after}"


def refresh_all(docs_dir: Path, *, write: bool) -> list[str]:
    """The pages whose generated text is not what the code says now (rewritten when
    ``write``)."""
    stale = []
    for relative, (name, generate) in PAGES.items():
        path = docs_dir / relative
        page = path.read_text()
        current = refreshed(page, name, generate())
        if current != page:
            stale.append(relative)
            if write:
                path.write_text(current)
    return stale


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """The built site always shows the code's current text, even before a refresh."""
    entry = PAGES.get(page.file.src_uri)
    if entry is None:
        return markdown
    name, generate = entry
    return refreshed(markdown, name, generate())


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = refresh_all(Path(__file__).resolve().parents[1], write=not check)
    for relative in stale:
        print(f"docs/{relative}: {'out of date' if check else 'rewritten'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
