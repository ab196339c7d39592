"""The flags that subcommands talking to a broker share, and the parsing of their values.

Numbers are checked where argparse parses them (:func:`positive_int`,
:func:`non_negative_int`), so a bad one is a usage error (exit 2) before anything runs.
"""

from __future__ import annotations

import argparse

from groupwire.cli.errors import CliError
from groupwire.client.types import parse_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer of at least 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer of at least 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def bootstrap_list(text: str) -> str:
    """An argparse ``type``: ``HOST:PORT[,HOST:PORT...]``, checked where it is parsed (a
    usage error, exit 2) and kept as given for the SDK."""
    try:
        parse_bootstrap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT], got {text!r}"
                                         ) from exc
    return text


def add_connection_flags(p: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--timeout-ms`` and ``--json``, as every SDK subcommand takes them."""
    p.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, type=bootstrap_list,
                   help=f"broker addresses HOST:PORT[,HOST:PORT] (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=positive_int, default=10000,
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
