"""``groupwire broker``: run the broker until SIGTERM or SIGINT, then stop it gracefully;
SIGHUP re-reads the TLS certificate files."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from groupwire.broker import config
from groupwire.cli.errors import CliError
from groupwire.cli.running import run_loop

_SERVER_NAMES = ("Broker", "StartupError")
"""Names of ``groupwire.broker.server`` this module uses, imported when a broker runs:
``groupwire broker --help`` needs only the settings table (``groupwire.broker.config``)."""


def __getattr__(name: str) -> Any:
    """``Broker`` and ``StartupError`` as attributes of this module, imported on first use
    (a test may replace ``Broker`` here before :func:`run_broker` runs)."""
    if name not in _SERVER_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from groupwire.broker import server

    value = globals()[name] = getattr(server, name)
    return value


def _server(name: str) -> Any:
    """This module's ``name`` (one of :data:`_SERVER_NAMES`), as a replaced one stands."""
    return globals().get(name) or __getattr__(name)


def register(subparsers: Any) -> None:
    """Add ``broker`` (every flag of :mod:`groupwire.broker.config`) to the subparsers."""
    p = subparsers.add_parser(
        "broker", help="run the broker (storage in --data-dir)",
        description="Run the broker. Every flag also reads GROUPWIRE_<NAME>.")
    config.add_arguments(p)
    p.set_defaults(func=_cmd_broker)


def _cmd_broker(args: argparse.Namespace) -> int:
    from groupwire.broker.logs import configure_logging

    settings = config.resolve(args)
    configure_logging(settings.log_format, settings.log_level)
    run_loop(lambda: run_broker(settings))
    return 0


async def run_broker(settings: config.BrokerSettings) -> None:
    """Serve until SIGTERM or SIGINT; a data dir or port that cannot be used is a CliError."""
    broker = _server("Broker")(settings, settle_heap=True)  # this process is the broker's own
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    # certificates renewed on disk are taken by new connections, open ones kept
    loop.add_signal_handler(signal.SIGHUP, broker.reload_tls)
    try:
        await broker.start()
    except _server("StartupError") as exc:
        raise CliError(str(exc)) from exc
    try:
        await broker.serve_until_stopped()
    finally:
        await broker.close()
    if broker.fatal_error is not None:  # non-zero: the orchestrator starts a clean one
        raise CliError(f"stopped: {broker.fatal_error}")
