"""What the SDK subcommands print: a rich table for people, one JSON line for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table


def emit_json(data: object) -> None:
    print(json.dumps(data, indent=None, sort_keys=False))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``rows`` under ``title``; ``None`` cells show as ``-``."""
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    Console(soft_wrap=False).print(t)
