"""The report job's options: its flags (shared with ``groupwire report``), ``--since``
parsing and :class:`ReportOptions`.

Needs no pyspark, so the command line can check its input before any Spark starts. A
secured broker's settings reach the job as Kafka client properties: from
``--command-config FILE`` (spark-submit), or from :data:`CLIENT_PROPERTIES_ENV`, where
``groupwire report`` (and chaos, demo) put them so that no password is on a command line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from groupwire.client.security import read_properties
from groupwire.pipeline.options import SECURITY_OPTIONS

CLIENT_PROPERTIES_ENV: Final = "GROUPWIRE_CLIENT_PROPERTIES"
"""A JSON object of Kafka client properties a groupwire process hands the processes it
starts (chaos members, demo consumers, this job)."""


class ReportError(Exception):
    """A failure to report as one line (bad option, broker unreachable, no Spark)."""


@dataclass(frozen=True, slots=True)
class ReportOptions:
    bootstrap: str
    out: Path
    group: str | None = None
    since_ms: int | None = None
    master: str | None = None
    security: dict[str, str] = field(default_factory=dict, repr=False)
    """The data source's security options (Kafka client property names)."""


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
    p.add_argument("--command-config", metavar="FILE", default=None,
                   help="Kafka client properties for a secured broker (security.protocol, "
                        "sasl.mechanism, sasl.username/sasl.password or sasl.jaas.config, "
                        "ssl.truststore.location ...); the workers need the same TLS files "
                        f"at the same paths. Over ${CLIENT_PROPERTIES_ENV} (JSON)")
    return p


def properties_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The properties a parent process put in :data:`CLIENT_PROPERTIES_ENV`; {} if none."""
    text = (os.environ if environ is None else environ).get(CLIENT_PROPERTIES_ENV)
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"${CLIENT_PROPERTIES_ENV} is not JSON: {exc}") from None
    if not isinstance(found, dict):
        raise ReportError(f"${CLIENT_PROPERTIES_ENV} is not a JSON object")
    return {str(k): str(v) for k, v in found.items()}


def security_options(args: argparse.Namespace,
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The data source's security options: ``--command-config`` over the environment;
    other properties (a Kafka tool's file holds ``bootstrap.servers`` and more) are
    left out."""
    props = properties_from_env(environ)
    path = getattr(args, "command_config", None)
    if path:
        try:
            props.update(read_properties(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise ReportError(f"--command-config: cannot read {path}: {exc}") from None
    return {k: v for k, v in props.items() if k in SECURITY_OPTIONS}


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
                         since_ms=since, master=args.master,
                         security=security_options(args))
