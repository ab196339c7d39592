"""The report job's options: its flags (shared with ``groupwire report``), ``--since``
parsing and :class:`ReportOptions`.

Needs no pyspark, so the command line can check its input before any Spark starts.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass
from pathlib import Path


class ReportError(Exception):
    """A failure to report as one line (bad option, broker unreachable, no Spark)."""


@dataclass(frozen=True, slots=True)
class ReportOptions:
    bootstrap: str
    out: Path
    group: str | None = None
    since_ms: int | None = None
    master: str | None = None


def parse_since(text: str) -> int:
    """``--since``: epoch milliseconds, or an ISO-8601 time (UTC unless it says otherwise)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReportError(f"--since: expected epoch ms or an ISO-8601 time, got {text!r}"
                          ) from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m groupwire.pipeline.report",
        description="Build the rebalance report (Parquet tables and report.html) from "
                    "__group_events.")
    add_arguments(p, default_master=None)
    return p


def add_arguments(p: argparse.ArgumentParser, default_master: str | None) -> None:
    """The job's flags, shared with ``groupwire report``."""
    p.add_argument("--bootstrap", default="127.0.0.1:9092",
                   help="broker HOST:PORT (default 127.0.0.1:9092)")
    p.add_argument("--out", type=Path, required=True,
                   help="directory for the Parquet tables and report.html")
    p.add_argument("--group", default=None, help="only this group (default: every group)")
    p.add_argument("--since", default=None,
                   help="only events from this time on: epoch ms or ISO-8601 (UTC default)")
    p.add_argument("--master", default=default_master,
                   help="Spark master (default: "
                        + (default_master or "spark-submit's, else local[*]") + ")")


def options_from(args: argparse.Namespace) -> ReportOptions:
    since = parse_since(args.since) if args.since is not None else None
    return ReportOptions(bootstrap=args.bootstrap, out=args.out, group=args.group,
                         since_ms=since, master=args.master)
