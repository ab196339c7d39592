"""The rebalance-report Spark job: ``python -m groupwire.pipeline.report --bootstrap H:P``.

Reads ``__group_events`` through the ``groupwire`` data source, writes the Parquet tables
(``events``, ``rebalances``, ``member_sessions``, ``partition_ownership``) and
``report.html`` under ``--out``. With ``--master`` it makes its own session; without, it
takes the one spark-submit configured. On a cluster (groupwire installed with the spark
extra on the driver and every executor, since the data source runs there):

    spark-submit --master spark://host:7077 \
        "$(python -c 'import groupwire.pipeline.report.__main__ as m; print(m.__file__)')" \
        --bootstrap broker:9092 --out /shared/report

Progress goes to stdout as ``report: <step>`` lines, which ``groupwire report`` shows.
This module needs pyspark (the spark extra); the flags it takes are in
:mod:`groupwire.pipeline.report.options`, which does not.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from groupwire.pipeline.report import page, tables
from groupwire.pipeline.report.events import UNDECODABLE
from groupwire.pipeline.report.options import (
    ReportError,
    ReportOptions,
    build_parser,
    options_from,
)
from groupwire.pipeline.source import register

EVENTS_TOPIC = "__group_events"
TABLES = ("events", "rebalances", "member_sessions", "partition_ownership")

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What the job wrote; also saved as ``summary.json`` beside the tables."""

    out: str
    html: str
    events: int
    undecodable: int
    rebalances: int
    rebalances_running: int
    member_ids: int
    partitions: int
    unowned_ms: int
    first_ms: int | None
    last_ms: int | None


def spark_session(master: str | None) -> SparkSession:
    """The job's session: spark-submit's when ``master`` is None, else a new one.

    A local master binds the driver to loopback and makes the Python workers run this
    interpreter (where the package is installed), as Spark's Python data source needs.
    """
    builder = SparkSession.builder.appName("groupwire-report").config(
        "spark.sql.session.timeZone", "UTC")
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = (builder.config("spark.driver.host", "127.0.0.1")
                       .config("spark.driver.bindAddress", "127.0.0.1")
                       .config("spark.ui.showConsoleProgress", "false")
                       .config("spark.sql.shuffle.partitions", "4"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def read_events(spark: SparkSession, bootstrap: str,
                security: Mapping[str, str] | None = None) -> DataFrame:
    """All of ``__group_events`` (one partition, §9) through the ``groupwire`` source;
    ``security``: its security options (Kafka client properties)."""
    register(spark)
    return (spark.read.format("groupwire").option("bootstrap", bootstrap)
            .options(**dict(security or {}))
            .option("subscribe", EVENTS_TOPIC).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").load())


def build_report(spark: SparkSession, records: DataFrame, opts: ReportOptions,
                 progress: Progress = lambda _: None) -> ReportSummary:
    """Decode, tabulate and write everything under ``opts.out`` from Kafka-schema records."""
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    progress(f"decoding {EVENTS_TOPIC}")
    decoded = tables.decode_events(records).cache()
    counts = {r["type"]: int(r["count"]) for r in decoded.groupBy("type").count().collect()}
    undecodable = counts.pop(UNDECODABLE, 0)
    events = tables.select_events(decoded, opts.group, opts.since_ms).cache()
    window = events.agg(F.min("ts_ms").alias("lo"), F.max("ts_ms").alias("hi")).first()
    first_ms = window["lo"] if window is not None else None
    last_ms = window["hi"] if window is not None else None
    shown = {r["type"]: int(r["count"]) for r in events.groupBy("type").count().collect()}
    as_of = last_ms if last_ms is not None else 0

    progress("rebalances")
    rebalances = tables.rebalances(events)
    progress("member sessions")
    sessions = tables.member_sessions(events)
    progress("partition ownership")
    intervals = tables.ownership(events, as_of).cache()
    downtime = tables.partition_downtime(intervals)

    frames: dict[str, DataFrame] = {"events": events, "rebalances": rebalances,
                                    "member_sessions": sessions,
                                    "partition_ownership": intervals}
    for name in TABLES:
        progress(f"writing {name}")
        frames[name].write.mode("overwrite").parquet(str(out / name))

    progress("rendering report.html")
    rb_rows = _rows(rebalances)
    session_rows = _rows(sessions)
    downtime_rows = _rows(downtime)
    html = page.render(page.ReportData(
        source=opts.bootstrap, generated_ms=int(time.time() * 1000), rebalances=rb_rows,
        sessions=session_rows, downtime=downtime_rows, event_counts=shown,
        group=opts.group, since_ms=opts.since_ms, first_ms=first_ms, last_ms=last_ms))
    page_path = out / "report.html"
    page_path.write_text(html, encoding="utf-8")
    decoded.unpersist()
    events.unpersist()
    intervals.unpersist()
    summary = ReportSummary(
        out=str(out), html=str(page_path), events=sum(shown.values()), undecodable=undecodable,
        rebalances=sum(1 for r in rb_rows if r["completed"]),
        rebalances_running=sum(1 for r in rb_rows if not r["completed"]),
        member_ids=len(session_rows), partitions=len(downtime_rows),
        unowned_ms=sum(int(r["unowned_ms"]) for r in downtime_rows),
        first_ms=first_ms, last_ms=last_ms)
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in frame.collect()]


def run_report(opts: ReportOptions, progress: Progress = lambda _: None) -> ReportSummary:
    """The whole job: session, read, tables, page. Stops the session only if it made it."""
    progress("starting Spark")
    spark = spark_session(opts.master)
    try:
        progress(f"reading {EVENTS_TOPIC} from {opts.bootstrap}")
        records = read_events(spark, opts.bootstrap, opts.security)
        return build_report(spark, records, opts, progress)
    finally:
        if opts.master is not None:
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def say(step: str) -> None:
        print(f"report: {step}", flush=True)

    try:
        summary = run_report(options_from(args), say)
    except ReportError as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 1
    say(f"done: {summary.rebalances} rebalances, {summary.member_ids} member ids, "
        f"{summary.partitions} partitions; {summary.html}")
    print("report-summary: " + json.dumps(asdict(summary)), flush=True)
    return 0
