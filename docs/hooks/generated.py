"""MkDocs hook: pages that would go stale if written by hand are filled in from the code.

A page holds a marker comment; the hook replaces it when the site is built:

* ``<!-- generated:cli -->``: ``groupwire COMMAND --help`` for every command and action,
  taken from the parser the ``groupwire`` script runs.
* ``<!-- generated:config -->``: one row per broker setting (flag, environment variable,
  default, help), from the table that also builds the flags.

The functions are plain so tests/unit/docs can compare them with the real ``--help``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from groupwire.broker import config
from groupwire.cli.main import build_parser

HELP_COLUMNS = "100"
"""Terminal width the help is rendered for (argparse wraps to ``$COLUMNS``)."""

CLI_MARKER = "<!-- generated:cli -->"
CONFIG_MARKER = "<!-- generated:config -->"


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


def on_page_markdown(markdown: str, **_: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, config_markdown())
    return markdown
