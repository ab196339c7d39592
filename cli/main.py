"""The ``groupwire`` command: one entry point, one subcommand per job.

Errors are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from groupwire.broker import config
from groupwire.broker.config import SettingsError

EXIT_USAGE = 2
EXIT_FAILURE = 1


class CliError(Exception):
    """A failure to report as one line."""


def _run_loop(coro_factory: Callable[[], object]) -> object:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro_factory())  # type: ignore[arg-type]
    return uvloop.run(coro_factory())  # type: ignore[arg-type]


# --- groupwire broker -------------------------------------------------------------------


def _cmd_broker(args: argparse.Namespace) -> int:
    settings = config.resolve(args)
    from groupwire.broker.logs import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    _run_loop(lambda: run_broker(settings))
    return 0


async def run_broker(settings: config.BrokerSettings) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down gracefully."""
    from groupwire.broker.server import Broker

    broker = Broker(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    try:
        await broker.start()
    except OSError as exc:
        await broker.close()
        raise CliError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
                       ) from exc
    try:
        await broker.serve_until_stopped()
    finally:
        await broker.close()


# --- groupwire health -------------------------------------------------------------------


def parse_bootstrap(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CliError(f"--bootstrap: expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _cmd_health(args: argparse.Namespace) -> int:
    host, port = parse_bootstrap(args.bootstrap)
    result = _run_loop(lambda: check_health(host, port, args.timeout_ms / 1000))
    assert isinstance(result, dict)
    if args.json:
        print(json.dumps(result))
    elif result["ok"]:
        print(f"ok: {host}:{port} answers ({result['apis']} APIs, "
              f"{result['latency_ms']} ms)")
    else:
        print(f"unhealthy: {host}:{port}: {result['error']}", file=sys.stderr)
    return 0 if result["ok"] else EXIT_FAILURE


async def check_health(host: str, port: int, timeout: float) -> dict[str, object]:
    import time

    from groupwire.client.connection import Connection
    from groupwire.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

    t0 = time.perf_counter()
    try:
        conn = await Connection.open(host, port, client_id="groupwire-health",
                                     connect_timeout=timeout)
        try:
            resp = await conn.send(ApiVersionsRequest(client_software_name="groupwire-health"),
                                   timeout=timeout, response_type=ApiVersionsResponse)
        finally:
            await conn.close()
    except (OSError, TimeoutError, ConnectionError) as exc:
        return {"ok": False, "error": str(exc) or type(exc).__name__}
    latency = round((time.perf_counter() - t0) * 1000, 1)
    if resp.error_code != 0:
        return {"ok": False, "error": f"error code {resp.error_code}"}
    return {"ok": True, "apis": len(resp.api_keys), "latency_ms": latency,
            "max_frame_bytes": resp.max_frame_bytes}


# --- groupwire demo ---------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from groupwire.broker.logs import configure_logging
    from groupwire.cli import demo

    configure_logging("console", "error")
    result = _run_loop(lambda: demo.run_demo(demo.options_from(args), Console()))
    assert isinstance(result, int)
    return result


# --- groupwire chaos --------------------------------------------------------------------


def _cmd_chaos(args: argparse.Namespace) -> int:
    from rich.console import Console

    from groupwire.broker.logs import configure_logging
    from groupwire.cli.chaos.runner import ChaosOptions, run_chaos

    configure_logging("console", "error")
    opts = ChaosOptions(
        bootstrap=args.bootstrap, consumers=args.consumers, faults=args.faults,
        records=args.records, broker_faults=args.broker_faults, seed=args.seed,
        session_timeout_ms=args.session_timeout_ms, partitions=args.partitions,
        rate=args.rate, report=args.report, rebalance_report=args.rebalance_report)
    if opts.rebalance_report and opts.report is None:
        raise CliError("--rebalance-report: needs --report DIR to write it into")
    if opts.bootstrap is not None and opts.broker_faults:
        raise CliError("--broker-faults: only with the run's own broker (no --bootstrap)")
    verdict = _run_loop(lambda: run_chaos(opts, Console()))
    return 1 if verdict.violations else 0  # type: ignore[attr-defined]


# --- parser -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="groupwire",
        description="A consumer-group broker with Kafka's group semantics, in Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("broker", help="run the broker (storage in --data-dir)",
                       description="Run the broker. Every flag also reads GROUPWIRE_<NAME>.")
    config.add_arguments(p)
    p.set_defaults(func=_cmd_broker)
    p = sub.add_parser("demo", help="a broker, a producer and three consumers; one is killed",
                       description="Start a broker on embedded storage, produce to a topic "
                       "consumed by a group of consumer processes, SIGKILL one of them and "
                       "show the rebalance as it happens; exit 0 if nothing was lost.")
    from groupwire.cli import demo

    demo.add_arguments(p)
    p.set_defaults(func=_cmd_demo)
    from groupwire.cli.client_commands import register as register_client_commands

    register_client_commands(sub)
    p = sub.add_parser("chaos", help="kill, freeze and restart consumers (and the broker); "
                       "check that nothing is lost",
                       description="Run a producer, consumer processes in one group and a "
                       "fault schedule drawn from --seed; print a verdict, exit 1 on a "
                       "violation.")
    p.add_argument("--bootstrap", default=None,
                   help="an existing broker HOST:PORT (default: start one on temporary storage)")
    p.add_argument("--consumers", type=int, default=6, help="consumer processes (default 6)")
    p.add_argument("--faults", type=int, default=20,
                   help="consumer faults: kill, freeze, restart, add, remove (default 20)")
    p.add_argument("--records", type=int, default=5000, help="records to produce (default 5000)")
    p.add_argument("--rate", type=int, default=500, help="records per second (default 500)")
    p.add_argument("--partitions", type=int, default=12, help="partitions (default 12)")
    p.add_argument("--broker-faults", type=int, default=0,
                   help="SIGKILL and restart the run's own broker this often (default 0)")
    p.add_argument("--seed", type=int, default=0, help="fault schedule seed (default 0)")
    p.add_argument("--session-timeout-ms", type=int, default=3000,
                   help="consumers' session timeout (default 3000)")
    p.add_argument("--report", type=Path, default=None,
                   help="keep journals, broker log and verdict.json in this directory")
    p.add_argument("--rebalance-report", action="store_true",
                   help="with --report: also write the Spark rebalance report of the run to "
                   "DIR/rebalance-report (needs the spark extra and Java)")
    p.set_defaults(func=_cmd_chaos)
    from groupwire.cli.report import register as register_report_command

    register_report_command(sub)
    p = sub.add_parser("health", help="check that a broker answers (exit 0 if healthy)")
    p.add_argument("--bootstrap", default="127.0.0.1:9092",
                   help="broker address HOST:PORT (default 127.0.0.1:9092)")
    p.add_argument("--timeout-ms", type=int, default=5000,
                   help="give up after this long (default 5000)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_health)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (CliError, SettingsError) as exc:
        print(f"groupwire {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, SettingsError) else EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
