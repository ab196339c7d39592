"""The flags that subcommands talking to a broker share, and the parsing of their values."""

from __future__ import annotations

import argparse

from groupwire.cli.errors import CliError
from groupwire.client.types import parse_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_connection_flags(p: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--timeout-ms`` and ``--json``, as every SDK subcommand takes them."""
    p.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                   help=f"broker addresses HOST:PORT[,HOST:PORT] (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=int, default=10000,
                   help="give up on the broker after this long (default 10000)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def parse_address(value: str) -> tuple[str, int]:
    """One ``HOST:PORT`` (``health`` and ``report`` talk to a single broker)."""
    try:
        addresses = parse_bootstrap(value)
    except ValueError:
        addresses = []
    if len(addresses) != 1:
        raise CliError(f"--bootstrap: expected HOST:PORT, got {value!r}")
    return addresses[0]
