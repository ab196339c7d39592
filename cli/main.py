"""The ``groupwire`` command: the parser, one subcommand per job, and the dispatch.

Each subcommand lives in its own module, which adds itself to the parser with
``register(subparsers)`` and sets ``func``. Errors are one line on stderr and a non-zero
exit, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from groupwire.broker.config import SettingsError
from groupwire.cli import (
    acls,
    broker,
    cluster,
    demo,
    groups,
    health,
    records,
    report,
    topics,
    users,
)
from groupwire.cli.chaos import command as chaos
from groupwire.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CliError
from groupwire.client.cluster import SOFTWARE_VERSION


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported in one line (the usage is one ``--help`` away);
    subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="groupwire",
        description="A consumer-group broker with Kafka's group semantics, in Python.")
    parser.add_argument("--version", action="version",
                        version=f"groupwire {SOFTWARE_VERSION}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # in the order `groupwire --help` lists them
    broker.register(sub)
    demo.register(sub)
    topics.register(sub)
    groups.register(sub)
    cluster.register(sub)
    acls.register(sub)
    users.register(sub)
    records.register(sub)  # produce, consume
    chaos.register(sub)
    report.register(sub)
    health.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``groupwire ARGV``; the exit code (argparse exits 2 itself on a bad flag)."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except SettingsError as exc:
        print(f"groupwire {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CliError as exc:
        print(f"groupwire {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `groupwire consume ... | head`: the reader is gone, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    return code


if __name__ == "__main__":
    sys.exit(main())
