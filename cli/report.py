"""``groupwire report``: the rebalance report (a local Spark job) from the command line.

The job runs as ``python -m groupwire.pipeline.report`` in a child process: the JVM and its log
noise stay out of this one (Spark's log goes to ``DIR/spark.log``), and the child's
``report: <step>`` lines become the progress shown here. ``register(subparsers)`` adds
the subcommand to the ``groupwire`` parser.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from groupwire.cli.arguments import (
    add_security_flags,
    parse_address,
    security_from_properties,
    security_properties,
)
from groupwire.cli.child_security import child_env
from groupwire.cli.errors import CliError
from groupwire.cli.health import check_health
from groupwire.cli.output import console as output_console
from groupwire.cli.output import emit_json
from groupwire.cli.running import run_loop
from groupwire.pipeline.report.options import ReportError, add_arguments, parse_since

SPARK_LOG = "spark.log"
CHILD_EXIT_S = 10.0
"""How long a stopped job gets to exit after SIGTERM before it is killed."""
SUMMARY_PREFIX = "report-summary: "
STEP_PREFIX = "report: "


def spark_missing() -> str | None:
    """Why the Spark job cannot run on this machine, or None when it can."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return (f"{module} is not installed: the report needs the spark extra "
                    "(pip install 'groupwire[spark]') and Java 17")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        return "Spark needs Java 17: no java on PATH and JAVA_HOME is not set"
    return None


def job_command(bootstrap: str, out: Path, *, group: str | None = None,
                since_ms: int | None = None, master: str | None = "local[*]") -> list[str]:
    """The child process that runs the job (the same module spark-submit runs)."""
    cmd = [sys.executable, "-m", "groupwire.pipeline.report", "--bootstrap", bootstrap,
           "--out", str(out)]
    if group is not None:
        cmd += ["--group", group]
    if since_ms is not None:
        cmd += ["--since", str(since_ms)]
    if master is not None:
        cmd += ["--master", master]
    return cmd


def job_env(security: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job's environment; ``security`` (Kafka client properties) goes in as
    :func:`~groupwire.cli.child_security.child_env` puts it, not on its command line."""
    # the job's Spark workers must run this interpreter, where groupwire is installed
    return {"PYSPARK_PYTHON": sys.executable, **os.environ, **child_env(security or {}),
            "PYTHONUNBUFFERED": "1"}


def last_error(log: Path) -> str:
    """The most telling line of a failed job's log (its last exception line)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "see the Spark log"
    for line in reversed(lines):
        text = line.strip()
        if text.startswith(("report: error:", "pyspark.errors", "RuntimeError", "OSError",
                            "ConnectionError", "ValueError")) or "Exception:" in text:
            return text[:500]
    return next((ln.strip()[:500] for ln in reversed(lines) if ln.strip()), "no output")


def run_job(cmd: list[str], out: Path, on_step: Callable[[str], None],
            security: Mapping[str, str] | None = None,
            ) -> tuple[int, dict[str, Any] | None]:
    """Run the job, calling ``on_step`` per progress line; its exit code and summary.

    SIGTERM ends this process as Ctrl-C does (:class:`Interrupted`, a KeyboardInterrupt),
    and either way the job is stopped before this returns: it never outlives the command.
    """
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] | None = None
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        with (out / SPARK_LOG).open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                    env=job_env(security))
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    if line.startswith(SUMMARY_PREFIX):
                        summary = json.loads(line[len(SUMMARY_PREFIX):])
                    elif line.startswith(STEP_PREFIX):
                        on_step(line[len(STEP_PREFIX):])
                code = proc.wait()
            finally:
                _stop(proc)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return code, summary


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt."""

    signum = signal.SIGTERM


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(CHILD_EXIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _cmd_report(args: argparse.Namespace) -> int:
    host, port = parse_address(args.bootstrap)
    try:
        since_ms = parse_since(args.since) if args.since is not None else None
    except ReportError as exc:
        raise CliError(str(exc)) from exc
    reason = spark_missing()
    if reason is not None:
        raise CliError(reason)
    props = security_properties(args)
    security = security_from_properties(props)
    health = run_loop(lambda: check_health(host, port, 5.0, security=security))
    if not health["ok"]:
        raise CliError(f"broker {host}:{port} does not answer: {health['error']}")
    out: Path = args.out
    console = output_console(stderr=True)
    cmd = job_command(args.bootstrap, out, group=args.group, since_ms=since_ms,
                      master=args.master)
    with console.status("report: starting Spark", spinner="dots") as status:
        def step(text: str) -> None:
            console.print(f"  [dim]{text}[/]")
            status.update(f"report: {text}")

        try:
            code, summary = run_job(cmd, out, step, props)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            status.stop()
            print(f"groupwire report: stopped by {signal.Signals(signum).name}; the Spark "
                  f"job was stopped (its log: {out / SPARK_LOG})", file=sys.stderr)
            return 128 + signum
    if code != 0 or summary is None:
        raise CliError(f"the Spark job failed (exit {code}): {last_error(out / SPARK_LOG)}; "
                       f"full log in {out / SPARK_LOG}")
    if args.json:
        emit_json({**summary, "out": str(out)})
        return 0
    print(f"{summary['rebalances']} rebalances ({summary['rebalances_running']} still "
          f"running), {summary['member_ids']} member ids, {summary['partitions']} partitions "
          f"({summary['unowned_ms']} ms without owner in all)")
    print(f"report: {summary['html']}")
    print(f"tables: {out}/{{events,rebalances,member_sessions,partition_ownership}} (Parquet)")
    return 0


def register(subparsers: Any) -> None:
    """Add ``report`` (the job's own flags, with a local master) to the subparsers."""
    p = subparsers.add_parser(
        "report", help="rebalance report: Parquet tables and an HTML page (runs Spark)",
        description="Read __group_events through the groupwire Spark data source and write "
                    "rebalances, member sessions and partition ownership as Parquet, plus "
                    "report.html with charts, under --out. Needs the spark extra and Java 17. "
                    "On a cluster, spark-submit the module groupwire.pipeline.report "
                    "instead.")
    add_arguments(p, default_master="local[*]")
    add_security_flags(p)
    p.add_argument("--json", action="store_true",
                   help="print the summary as one JSON document (progress stays on stderr)")
    p.set_defaults(func=_cmd_report)
