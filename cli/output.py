"""What the SDK subcommands print: a rich table for people on a terminal, plain
tab-separated lines when piped (stable, never wrapped), one JSON document for scripts.

rich is imported when a table or console is made: a command that fails before printing
one, or prints JSON, starts without it (40 ms of every command's start-up).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def emit_json(data: object) -> None:
    print(json.dumps(data, indent=None, sort_keys=False))


def to_terminal() -> bool:
    return sys.stdout.isatty()


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], *,
          out: Console | None = None) -> None:
    """Print ``rows`` under ``title`` on ``out`` (default: stdout); ``None`` cells show
    as ``-``.

    On a terminal, a rich table; piped, the title on its own line, then the header and
    one line per row with tab-separated cells, however long.
    """
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    terminal = to_terminal() if out is None else out.is_terminal
    if not terminal:
        stream = None if out is None else out.file
        print(title, file=stream)
        print("\t".join(columns), file=stream)
        for row in cells:
            print("\t".join(row), file=stream)
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in cells:
        t.add_row(*row)
    (out or Console(soft_wrap=False)).print(t)


def console(*, stderr: bool = False) -> Console:
    """Rich output for a person; piped, lines are never wrapped mid-sentence (a reader of
    the log or a grep wants one event a line, whatever the width)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, soft_wrap=not stream.isatty())


def note(text: str) -> None:
    """A progress note for a person waiting at a terminal (stderr; nothing when piped)."""
    if sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)


def iso_ms(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC to the millisecond (None and negatives: None)."""
    if epoch_ms is None or epoch_ms < 0:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds"
                                                                  ).replace("+00:00", "Z")
