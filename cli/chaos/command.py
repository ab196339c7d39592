"""``groupwire chaos``: the subcommand's flags, turned into a :class:`ChaosOptions` run."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from groupwire.cli.arguments import (
    add_security_flags,
    bootstrap_list,
    non_negative_int,
    positive_int,
    security_from_properties,
    security_properties,
)
from groupwire.cli.chaos.options import (
    EXTERNAL_SESSION_TIMEOUT_MS,
    OWN_BROKER_SESSION_TIMEOUT_MS,
    ChaosFatal,
    ChaosOptions,
)
from groupwire.cli.errors import EXIT_FAILURE, CliError
from groupwire.cli.output import console as output_console
from groupwire.cli.output import emit_json
from groupwire.cli.running import Stop, run_sdk


def register(subparsers: Any) -> None:
    """Add ``chaos`` to the ``groupwire`` subparsers."""
    d = ChaosOptions()
    p = subparsers.add_parser(
        "chaos", help="kill, freeze and restart consumers (and the broker, or a cluster's "
        "brokers and etcd); "
        "check that nothing is lost",
        description="Run a producer, consumer processes in one group and a fault schedule "
        "drawn from --seed; print a verdict, exit 1 on a violation.")
    p.add_argument("--bootstrap", default=None, type=bootstrap_list,
                   help="an existing broker HOST:PORT (default: start one on temporary storage)")
    p.add_argument("--consumers", type=positive_int, default=d.consumers,
                   help=f"consumer processes (default {d.consumers})")
    p.add_argument("--faults", type=non_negative_int, default=d.faults,
                   help=f"consumer faults: kill, freeze, restart, add, remove (default {d.faults})")
    p.add_argument("--records", type=positive_int, default=d.records,
                   help=f"records to produce (default {d.records})")
    p.add_argument("--rate", type=positive_int, default=d.rate,
                   help=f"records per second (default {d.rate})")
    p.add_argument("--partitions", type=positive_int, default=d.partitions,
                   help=f"partitions (default {d.partitions})")
    p.add_argument("--broker-faults", type=non_negative_int, default=d.broker_faults,
                   help=f"SIGKILL and restart the run's own broker this often "
                   f"(default {d.broker_faults})")
    p.add_argument("--cluster", type=_cluster_size, default=0, metavar="N",
                   help="run against a cluster of N >= 3 brokers and its own etcd (etcd on "
                   "the PATH); --broker-faults then kills, freezes and restarts brokers by "
                   "role and restarts etcd (default: one broker, no etcd)")
    p.add_argument("--seed", type=int, default=d.seed,
                   help=f"fault schedule seed (default {d.seed})")
    p.add_argument("--session-timeout-ms", type=positive_int, default=None,
                   help=f"consumers' session timeout (default {OWN_BROKER_SESSION_TIMEOUT_MS} "
                   f"with the run's own broker, {EXTERNAL_SESSION_TIMEOUT_MS} with --bootstrap: "
                   f"the lowest a broker with default settings accepts)")
    p.add_argument("--topic", default=None,
                   help="topic to use (default: a new one per run, chaos-SEED-TIME-PID)")
    p.add_argument("--group", default=None,
                   help="consumer group to use (default: a new one per run, "
                   "chaos-group-SEED-TIME-PID)")
    p.add_argument("--json", action="store_true",
                   help="print the verdict as one JSON object on stdout (progress goes to "
                   "stderr)")
    p.add_argument("--report", type=Path, default=None,
                   help="keep journals, broker log and verdict.json in this directory")
    p.add_argument("--rebalance-report", action="store_true",
                   help="with --report: also write the Spark rebalance report of the run to "
                   "DIR/rebalance-report (needs the spark extra and Java)")
    add_security_flags(p)  # for --bootstrap's broker; the consumers get them too
    p.set_defaults(func=_cmd_chaos)


def options_from(args: argparse.Namespace) -> ChaosOptions:
    """The run's options; combinations that cannot work are CliErrors."""
    opts = ChaosOptions(
        bootstrap=args.bootstrap, consumers=args.consumers, faults=args.faults,
        records=args.records, broker_faults=args.broker_faults, seed=args.seed,
        session_timeout_ms=args.session_timeout_ms, partitions=args.partitions,
        rate=args.rate, report=args.report, rebalance_report=args.rebalance_report,
        topic=args.topic, group=args.group, cluster=args.cluster)
    if opts.rebalance_report and opts.report is None:
        raise CliError("--rebalance-report: needs --report DIR to write it into")
    if opts.report is not None and opts.report.is_dir() and any(opts.report.iterdir()):
        # the verdict reads every journal in the directory: an earlier run's would count
        raise CliError(f"--report {opts.report}: not empty (an earlier run's journals would "
                       f"be read as this run's); choose a new directory or remove it")
    if opts.bootstrap is not None and opts.broker_faults:
        raise CliError("--broker-faults: only with the run's own broker (no --bootstrap)")
    if opts.cluster and opts.bootstrap is not None:
        raise CliError("--cluster: starts its own brokers; not with --bootstrap")
    if opts.cluster and opts.rebalance_report:
        raise CliError("--rebalance-report: not with --cluster (the run stops its brokers "
                       "to read their logs)")
    props = security_properties(args)
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT" and opts.bootstrap is None:
        raise CliError(f"security protocol {protocol}: the run's own broker"
                       f"{' and cluster' if opts.cluster else ''} listen in plaintext; pass "
                       f"--bootstrap with a secured broker's listener")
    opts.client_properties = props
    opts.security = security_from_properties(props)
    return opts


def _cluster_size(text: str) -> int:
    n = positive_int(text)
    if n < 3:
        raise argparse.ArgumentTypeError("a cluster needs 3 brokers or more (replication "
                                         "factor 3)")
    return n


def _cmd_chaos(args: argparse.Namespace) -> int:
    # the run and the broker's logging only when one runs: not for --help or a usage error
    from groupwire.broker.logs import configure_logging
    from groupwire.cli.chaos.runner import run_chaos

    opts = options_from(args)
    configure_logging("console", "error")
    # with --json, stdout carries the verdict only: progress and the table go to stderr
    console = output_console(stderr=args.json)
    result: dict[str, object] = {}

    async def main(stop: Stop) -> int:
        verdict = await run_chaos(opts, console, on_verdict=result.update)
        return EXIT_FAILURE if verdict.violations else 0

    try:
        # Ctrl-C and SIGTERM cancel the run, which tears every process of it down
        code = run_sdk(main)
    except ChaosFatal as exc:
        raise CliError(str(exc)) from None
    if code > 128:
        print(f"groupwire chaos: stopped by {signal.Signals(code - 128).name}; every "
              "process of the run ended", file=sys.stderr)
        return code
    if args.json:
        emit_json(result)
    return code
