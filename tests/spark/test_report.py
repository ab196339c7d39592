"""The rebalance report over a real scripted run (issue 5).

Raw members (tests/integration/rawgroup.py) on the shared broker process (short timeouts
as flags: grace 200 ms, no initial delay): three join one by one, one has its connection
dropped (as a SIGKILLed consumer's would), one stalls past its poll interval, a fourth
joins with a short session and goes silent until it expires. ``groupwire report`` then
runs the job (its own Spark, in a child process), which reads ``__group_events`` through
the ``groupwire`` data source; its tables must say what the run did: the broker's own
rebalance history (DescribeGroups) for reasons, generations, starts, durations and moved
partitions, and the run's own steps for sessions and ownership. The job runs once for
all those checks and the command's own (a Spark job is most of this file's time).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import pytest

from groupwire.client.admin import Admin
from groupwire.client.connection import Connection
from groupwire.protocol.batches import decode_records
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    JoinGroupResponse,
    Rebalance,
)
from tests.integration.rawgroup import RawMember, create_topic, form_group, round_robin
from tests.spark.conftest import SparkBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 6
SHORT_SESSION_MS = 1000
EVENT_WAIT_S = 30
STOP_TIMEOUT_S = 30


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class RunFacts:
    """What the scripted run did, as the test saw it."""

    group: str
    topic: str
    members: dict[str, RawMember] = field(default_factory=dict)  # name -> member
    owned: dict[str, list[int]] = field(default_factory=dict)  # name -> partitions at exit
    closed_ms: int = 0  # when C's connection was dropped
    history: list[Rebalance] = field(default_factory=list)

    def member_id(self, name: str) -> str:
        return self.members[name].member_id


def _parts(m: RawMember) -> list[int]:
    return sorted(p for _, ps in m.assignment for p in ps)


async def _until_rebalance(m: RawMember) -> None:
    """Long-poll heartbeats until the broker says a rebalance started (no sleeps)."""
    while (hb := await m.heartbeat(wait_ms=2000)).error_code == ErrorCode.NONE:
        pass
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS, hb


async def _rejoin(members: list[RawMember], topic: str,
                  parked: tuple[RawMember, asyncio.Future[JoinGroupResponse]] | None = None,
                  ) -> None:
    """Everyone re-joins (with a newcomer whose join is parked); the leader hands out
    round-robin; everyone syncs."""
    everyone = [*members, *([parked[0]] if parked else [])]
    joins = await asyncio.gather(*(m.join_group() for m in members),
                                 *([parked[1]] if parked else []))
    assert all(j.error_code == ErrorCode.NONE for j in joins), joins
    leader = next(m for m in everyone if m.is_leader)
    assert leader.join is not None
    plan = round_robin([x.member_id for x in leader.join.members], topic, PARTITIONS)
    syncs = await asyncio.gather(*(m.sync(plan if m is leader else None) for m in everyone))
    assert all(s.error_code == ErrorCode.NONE for s in syncs), syncs


async def scripted_run(host: str, port: int, group: str, topic: str) -> RunFacts:
    facts = RunFacts(group=group, topic=topic)
    conns: list[Connection] = []

    async def member(name: str, session_timeout_ms: int = 10_000,
                     rebalance_timeout_ms: int = 10_000) -> RawMember:
        conn = await Connection.open(host, port, client_id=f"report-{name}")
        conns.append(conn)
        m = RawMember(conn, group, [topic], session_timeout_ms=session_timeout_ms,
                      rebalance_timeout_ms=rebalance_timeout_ms)
        facts.members[name] = m
        return m

    admin_conn = await Connection.open(host, port, client_id="report-admin")
    conns.append(admin_conn)
    try:
        await create_topic(admin_conn, topic, PARTITIONS)
        # a outlives the Spark job that follows, so its session is long
        a = await member("a", session_timeout_ms=300_000)
        b = await member("b")
        c = await member("c")
        await form_group([a, b, c], topic, PARTITIONS)  # generations 1, 2, 3

        # c dies: its connection drops, the broker expires it after the grace
        facts.owned["c"] = _parts(c)
        facts.closed_ms = now_ms()
        await c.conn.close()
        await asyncio.gather(_until_rebalance(a), _until_rebalance(b))
        await _rejoin([a, b], topic)  # generation 4

        # b stalls: its heartbeat reports a poll age past its poll interval
        facts.owned["b"] = _parts(b)
        hb = await b.heartbeat(poll_age_ms=b.rebalance_timeout_ms + 1)
        assert hb.error_code == ErrorCode.UNKNOWN_MEMBER_ID, hb
        await _until_rebalance(a)
        await _rejoin([a], topic)  # generation 5

        # d joins with a short session, then goes silent until it expires
        d = await member("d", session_timeout_ms=SHORT_SESSION_MS,
                         rebalance_timeout_ms=SHORT_SESSION_MS)
        joining = asyncio.ensure_future(d.join_group())
        await _until_rebalance(a)
        await _rejoin([a], topic, parked=(d, joining))  # generation 6
        facts.owned["d"] = _parts(d)
        await _until_rebalance(a)
        await _rejoin([a], topic)  # generation 7
        facts.owned["a"] = _parts(a)

        # a leaves: the group empties, so nothing happens to it while Spark reads
        leave = await a.leave()
        assert leave.error_code == ErrorCode.NONE, leave
        await wait_for_events(host, port, lambda e: (
            e["group_id"] == group and e["type"] == "group_emptied"))
        async with Admin(f"{host}:{port}") as admin:
            (desc,) = await admin.describe_groups(group)
        facts.history = list(desc.rebalances)
    finally:
        for conn in conns:
            await conn.close()
    return facts


async def wait_for_events(host: str, port: int,
                          done: Callable[[dict[str, Any]], bool]) -> None:
    """Read ``__group_events`` with long-poll fetches until an event satisfies ``done``
    (events are written after the replies they describe, never before)."""
    conn = await Connection.open(host, port, client_id="report-events")
    offset = 0
    try:
        async with asyncio.timeout(EVENT_WAIT_S):
            while True:
                resp = await conn.send(FetchRequest(max_wait_ms=1000, topics=[FetchTopic(
                    topic="__group_events", partitions=[FetchPartition(
                        partition=0, fetch_offset=offset)])]), response_type=FetchResponse)
                part = resp.responses[0].partitions[0]
                assert part.error_code == ErrorCode.NONE, part
                for rec in decode_records(part.records, min_offset=offset):
                    offset = rec.offset + 1
                    assert rec.value is not None
                    if done(msgpack.unpackb(rec.value, raw=False)):
                        return
    finally:
        await conn.close()


# --- the test ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report_run(spark: SparkSession, spark_broker: SparkBroker,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scripted run, then ``groupwire report`` over its events: the command's own
    Spark (a child process, local[2]) runs the job, once for every check of this file;
    what it printed, its summary.json and its tables (read here)."""
    from groupwire.pipeline.report.job import ReportSummary

    stamp = time.time_ns()
    group, topic = f"report-group-{stamp}", f"report-topic-{stamp}"
    facts = asyncio.run(scripted_run("127.0.0.1", spark_broker.port, group, topic))
    out = tmp_path_factory.mktemp("report") / "cli-report"
    args = _report_parser().parse_args(
        ["report", "--bootstrap", spark_broker.bootstrap, "--out", str(out),
         "--group", group, "--master", "local[2]"])
    printed, progress = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(progress):
        code = args.func(args)
    summary = ReportSummary(**json.loads((out / "summary.json").read_text()))
    tables = {name: [r.asDict(recursive=True)
                     for r in spark.read.parquet(str(out / name)).collect()]
              for name in ("events", "rebalances", "member_sessions", "partition_ownership")}
    return {"facts": facts, "code": code, "stdout": printed.getvalue(),
            "stderr": progress.getvalue(), "summary": summary, "out": out, **tables}


EXPECTED_REASONS = ["member-joined", "member-joined", "member-joined", "connection-lost",
                    "poll-interval-expired", "member-joined", "session-expired", "member-left"]


def _in_order(rebalances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rebalances, key=lambda r: (r["started_ms"], r["generation_id"] or 1 << 31))


def _flat(moved: Any) -> list[tuple[str, int]]:
    return sorted((t, p) for t, ps in moved for p in ps)


def test_rebalances_match_the_brokers_history(report_run: dict[str, Any]) -> None:
    facts: RunFacts = report_run["facts"]
    assert [r.reason for r in facts.history] == EXPECTED_REASONS
    got = _in_order(report_run["rebalances"])
    assert [r["reason"] for r in got] == EXPECTED_REASONS
    assert [r["generation_id"] for r in got[:7]] == list(range(1, 8))
    assert all(r["completed"] for r in got)
    for row, truth in zip(got, facts.history, strict=True):
        assert row["generation_id"] == truth.generation_id
        assert row["started_ms"] == truth.started_ms
        assert row["completed_ms"] == truth.completed_ms
        assert row["duration_ms"] == truth.duration_ms
        assert row["trigger_member_id"] == truth.trigger_member_id
        moved = sorted((p["topic"], p["partition"]) for p in row["moved_partitions"])
        assert moved == _flat(truth.moved_partitions)
        assert row["partitions_moved"] == len(moved)
    # the first rebalance handed every partition out; c's loss moved exactly c's
    assert got[0]["partitions_moved"] == PARTITIONS
    assert {p["partition"] for p in got[3]["moved_partitions"]} >= set(facts.owned["c"])


def test_event_counts_match_the_run(report_run: dict[str, Any]) -> None:
    counts: dict[str, int] = {}
    for e in report_run["events"]:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    assert counts == {"member_joined": 4, "rebalance_started": 8, "rebalance_completed": 8,
                      "connection_lost": 1, "member_expired": 2, "poll_interval_expired": 1,
                      "member_left": 1, "group_emptied": 1}
    summary = report_run["summary"]
    assert summary.events == 26 and summary.rebalances == 8
    assert summary.rebalances_running == 0 and summary.undecodable == 0
    written = json.loads((report_run["out"] / "summary.json").read_text())
    assert written["rebalances"] == 8 and written["member_ids"] == 4


def test_member_sessions_say_how_each_member_ended(report_run: dict[str, Any]) -> None:
    facts: RunFacts = report_run["facts"]
    by_id = {s["member_id"]: s for s in report_run["member_sessions"]}
    assert set(by_id) == {facts.member_id(n) for n in "abcd"}
    a, b, c, d = (by_id[facts.member_id(n)] for n in "abcd")
    assert a["end_type"] == "member_left"
    assert (c["end_type"], c["end_reason"]) == ("member_expired", "connection-lost")
    assert (b["end_type"], b["end_reason"]) == ("poll_interval_expired",
                                                "poll-interval-expired")
    assert (d["end_type"], d["end_reason"]) == ("member_expired", "session-expired")
    # the broker noticed c's dropped connection after the test dropped it, and expired
    # c only after the grace, which is when the connection-lost rebalance started
    lost_rb = _in_order(report_run["rebalances"])[3]
    assert facts.closed_ms <= c["connection_lost_ms"] < c["ended_ms"]
    assert c["ended_ms"] == lost_rb["started_ms"]
    # the broker's grace flag, 200 ms on the monotonic clock; the two stamps are wall
    # times, each put on through the wall offset read (in whole ms) before its input,
    # so they may differ by a millisecond from the monotonic interval
    assert c["ended_ms"] - c["connection_lost_ms"] >= 200 - 1
    for name, s in (("a", a), ("b", b), ("c", c), ("d", d)):
        assert s["partitions_at_end"] == len(facts.owned[name])
        assert s["session_ms"] == s["ended_ms"] - s["joined_ms"] > 0
    assert all(s["joined_ms"] is not None for s in by_id.values())


def test_ownership_gaps_run_from_the_loss_to_the_rebalance(report_run: dict[str, Any],
                                                          ) -> None:
    facts: RunFacts = report_run["facts"]
    rbs = _in_order(report_run["rebalances"])
    sessions = {s["member_id"]: s for s in report_run["member_sessions"]}
    lost_c = sessions[facts.member_id("c")]["connection_lost_ms"]
    gaps: dict[int, list[tuple[int, int]]] = {}
    for iv in report_run["partition_ownership"]:
        assert iv["topic"] == facts.topic
        if iv["state"] == "unowned":
            assert not iv["open"], iv  # every lost partition found a new owner
            gaps.setdefault(iv["partition"], []).append((iv["start_ms"], iv["end_ms"]))
            assert iv["duration_ms"] == iv["end_ms"] - iv["start_ms"]
    expected: dict[int, list[tuple[int, int]]] = {}
    for name, start, rb in (("c", lost_c, rbs[3]), ("b", rbs[4]["started_ms"], rbs[4]),
                            ("d", rbs[6]["started_ms"], rbs[6])):
        for p in facts.owned[name]:
            expected.setdefault(p, []).append((start, rb["completed_ms"]))
    assert {p: sorted(v) for p, v in gaps.items()} == {p: sorted(v) for p, v in
                                                       expected.items()}
    # every partition was owned from the first rebalance on, with no hole nor overlap,
    # until the group emptied (which is not time without owner: nobody was meant to read)
    by_part: dict[int, list[dict[str, Any]]] = {}
    for iv in report_run["partition_ownership"]:
        by_part.setdefault(iv["partition"], []).append(iv)
    assert set(by_part) == set(range(PARTITIONS))
    for ivs in by_part.values():
        # by start, then end: when two events share a millisecond (a rebalance completes
        # and a member is lost in the same one) the interval of length 0 comes first
        ivs.sort(key=lambda iv: (iv["start_ms"], iv["end_ms"]))
        assert ivs[0]["start_ms"] == rbs[0]["completed_ms"]
        assert ivs[-1]["state"] == "owned" and not ivs[-1]["open"]
        assert (ivs[-1]["end_ms"], ivs[-1]["end_reason"]) == (rbs[7]["started_ms"],
                                                              "member_left")
        for prev, nxt in itertools.pairwise(ivs):
            assert prev["end_ms"] == nxt["start_ms"]
    unowned_total = sum(e - s for v in expected.values() for s, e in v)
    assert report_run["summary"].unowned_ms == unowned_total


def test_html_report_is_written(report_run: dict[str, Any]) -> None:
    page = (report_run["out"] / "report.html").read_text()
    assert page.count('<svg class="chart"') == 4
    assert "connection-lost" in page and "poll-interval-expired" in page
    assert "http://" not in page and "https://" not in page  # opens offline


# --- `groupwire report` -----------------------------------------------------------------


def _report_parser() -> Any:
    """The ``report`` subcommand on its own parser (as groupwire.cli.main registers it)."""
    import argparse

    from groupwire.cli.report import register

    parser = argparse.ArgumentParser(prog="groupwire")
    register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.slow
def test_groupwire_report_runs_the_job_and_says_where_it_wrote(
        report_run: dict[str, Any]) -> None:
    """The command's own Spark (a child process, local[2]) wrote what the checks above
    read; here, what the command says of it agrees with what it wrote."""
    out: Path = report_run["out"]
    assert report_run["code"] == 0
    printed = report_run["stdout"]
    assert f"report: {out / 'report.html'}" in printed
    assert "8 rebalances (0 still running), 4 member ids, 6 partitions" in printed
    assert "writing partition_ownership" in report_run["stderr"]  # progress, step by step
    written = json.loads((out / "summary.json").read_text())
    # the numbers it printed are its summary's, and the summary counts its own tables
    assert f"({written['unowned_ms']} ms without owner in all)" in printed
    assert written["events"] == len(report_run["events"])
    for name in ("events", "rebalances", "member_sessions", "partition_ownership"):
        assert any((out / name).glob("*.parquet")), name


def test_groupwire_report_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    from groupwire.cli.errors import CliError

    parser = _report_parser()
    for argv, message in (
            (["--since", "yesterday"], "--since: expected epoch ms or an ISO-8601 time"),
            (["--bootstrap", "nowhere"], "--bootstrap: expected HOST:PORT"),
            (["--bootstrap", "127.0.0.1:1"], "broker 127.0.0.1:1 does not answer")):
        args = parser.parse_args(["report", "--out", str(tmp_path), *argv])
        with pytest.raises(CliError, match=message):
            args.func(args)


def test_since_takes_epoch_ms_or_iso_times() -> None:
    from groupwire.pipeline.report.options import parse_since

    assert parse_since("1732250000000") == 1_732_250_000_000
    assert parse_since("2024-11-22T04:33:20Z") == 1_732_250_000_000
    assert parse_since("2024-11-22T04:33:20") == 1_732_250_000_000  # UTC when unsaid
    assert parse_since("2024-11-22T05:33:20+01:00") == 1_732_250_000_000


@pytest.mark.slow
def test_chaos_hook_writes_the_report_from_a_point_in_time(
        report_run: dict[str, Any], spark_broker: SparkBroker, tmp_path: Path) -> None:
    """What ``groupwire chaos --report`` calls; ``since_ms`` cuts the window (a run's start)."""
    from rich.console import Console

    from groupwire.cli.chaos.report_hook import REPORT_DIR, write_rebalance_report

    facts: RunFacts = report_run["facts"]
    since = _in_order(report_run["rebalances"])[3]["started_ms"]  # c's expiry onwards
    console = Console(file=None, record=True, width=200)
    page = asyncio.run(write_rebalance_report(spark_broker.bootstrap, tmp_path, facts.group,
                                              console, since_ms=since))
    assert page == tmp_path / REPORT_DIR / "report.html" and page.exists()
    assert "rebalance report: writing rebalances" in console.export_text()
    summary = json.loads((tmp_path / REPORT_DIR / "summary.json").read_text())
    assert summary["first_ms"] == since
    assert summary["rebalances"] == 5  # connection-lost, poll, join, session, leave


def _session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the command and all it started, Spark's JVM too)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_report_and_its_spark_job(
        spark_broker: SparkBroker, tmp_path: Path, signum: int) -> None:
    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupwire", "report", "--bootstrap", spark_broker.bootstrap,
         "--out", str(out), "--master", "local[1]"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # Spark has started once the job reports its first step
            if "reading __group_events" in line:
                break
        else:
            pytest.fail("the job never reported a step")
        assert len(_session_members(proc.pid)) > 2  # the command, the job, Spark's JVM
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # a terminal's Ctrl-C reaches the whole group
        else:
            proc.send_signal(signum)
        assert proc.wait(STOP_TIMEOUT_S) == 128 + signum
        err = proc.stderr.read()
        assert f"stopped by {signal.Signals(signum).name}; the Spark job was stopped" in err
        assert "Traceback" not in err
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # the JVM exits once its parent is gone: polled, not timed
        assert _session_members(proc.pid) == []
    finally:
        for pid in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
