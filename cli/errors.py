"""How the command line fails: one line on stderr and an exit code, never a traceback.

A subcommand raises :class:`CliError`; ``groupwire.cli.main`` prints it as
``groupwire COMMAND: error: MESSAGE`` and exits with :data:`EXIT_FAILURE`.
"""

from __future__ import annotations

EXIT_FAILURE = 1
"""The command ran and failed (a broker error, an unreachable broker, a lost message)."""

EXIT_USAGE = 2
"""A flag or setting was wrong (argparse uses 2 as well)."""

EXIT_INTERRUPTED = 130
"""Ctrl-C, as a shell reports a process killed by SIGINT."""


class CliError(Exception):
    """A failure to report as one line."""
