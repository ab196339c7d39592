"""The ``groupwire`` command: the parser, one subcommand per job, and the dispatch.

Each subcommand lives in its own module, which adds itself to the parser with
``register(subparsers)`` and sets ``func``. Errors are one line on stderr and a non-zero
exit, never a traceback.

Only the module of the command being run is imported (:data:`COMMANDS` lists the others
by name and one-line help, as ``groupwire --help`` shows them): importing every one
imported the broker and the whole SDK, 1.4 s before ``groupwire --version`` could print.
:func:`build_parser` without arguments still builds every command's parser in full.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Sequence
from typing import Any, Final, NoReturn

from groupwire.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CliError

COMMANDS: Final[tuple[tuple[str, dict[str, str]], ...]] = (
    # (module, {command: the help `groupwire --help` lists}), in that listing's order;
    # tests/unit/cli/test_startup.py checks each help against the module's own
    ("groupwire.cli.broker", {"broker": "run the broker (storage in --data-dir)"}),
    ("groupwire.cli.demo", {"demo": "a broker, a producer and three consumers; one is killed"}),
    ("groupwire.cli.topics", {"topics": "create, list, describe and delete topics"}),
    ("groupwire.cli.groups", {"groups": "inspect, reset and delete consumer groups"}),
    ("groupwire.cli.transactions",
     {"transactions": "list and describe transactional producers' transactions"}),
    ("groupwire.cli.cluster",
     {"cluster": "brokers, partition replicas and preferred-leader elections"}),
    ("groupwire.cli.acls",
     {"acls": "list, add and remove ACL bindings (brokers run with --authorizer acl)"}),
    ("groupwire.cli.users", {"users": "add, list and remove SCRAM users"}),
    ("groupwire.cli.records", {
        "produce": "send records: --value, or one per stdin line",
        "consume": "print records of a topic (in a group with --group)"}),
    ("groupwire.cli.chaos.command", {
        "chaos": "kill, freeze and restart consumers (and the broker, or a cluster's brokers "
                 "and etcd); check that nothing is lost"}),
    ("groupwire.cli.report",
     {"report": "rebalance report: Parquet tables and an HTML page (runs Spark)"}),
    ("groupwire.cli.health", {"health": "check that a broker answers (exit 0 if healthy)"}),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported in one line (the usage is one ``--help`` away);
    subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: the installed version, read from the package metadata only when
    asked for (that read imports more than the rest of the parser)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import groupwire

        print(f"groupwire {groupwire.__version__}")  # on stdout, as argparse's own does
        parser.exit()


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``groupwire`` parser. ``load``: the commands whose modules are imported and
    whose parsers are built (default: every one); the others are only listed."""
    parser = _Parser(
        prog="groupwire",
        description="A consumer-group broker with Kafka's group semantics, in Python.")
    parser.add_argument("--version", action=_Version,
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module, commands in COMMANDS:
        if load is None or any(name in load for name in commands):
            importlib.import_module(module).register(sub)
        else:
            for name, text in commands.items():
                sub.add_parser(name, help=text)  # listed; never parsed into
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, found as argparse will find it: the first word that is
    not an option (``groupwire`` itself takes no option with a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _is_settings_error(exc: Exception) -> bool:
    """A broker setting was wrong (a usage error). Its class is looked up only if the
    broker's settings were imported: else none of them was read."""
    config = sys.modules.get("groupwire.broker.config")
    return config is not None and isinstance(exc, config.SettingsError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``groupwire ARGV``; the exit code (argparse exits 2 itself on a bad flag)."""
    words = sys.argv[1:] if argv is None else list(argv)
    command = command_of(words)
    args = build_parser(load=() if command is None else (command,)).parse_args(words)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"groupwire {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `groupwire consume ... | head`: the reader is gone, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:
        if not _is_settings_error(exc):
            raise
        print(f"groupwire {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
