"""``groupwire produce|consume|groups lag`` with no silent successes (issue 25): a consume
that waits out a group's initial rebalance delay, or never gets partitions, says so; lag
of a group without commits is not "0"; produce reads stdin with backpressure, bounded,
and a first Ctrl-C flushes while a second aborts; a ``--bootstrap`` that is an HTTP port
fails in one line."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.server
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupwire.cli import records
from groupwire.cli.main import main
from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.producer import Producer
from groupwire.client.types import RecordMetadata, TopicPartition

from .brokerproc import BrokerProcess

EXIT_BOUND_S = 60  # a bound for a hang, not a timing claim
BROKER_LOG = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # rich folds cells in narrow captures


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and the command's own stderr lines (``main`` in a thread: it runs
    its own event loop while the in-process broker serves on the test's)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    # the in-process broker logs to the same captured stdout: its lines are left out
    out = "".join(line + "\n" for line in out.splitlines()
                  if not BROKER_LOG.match(line) and '"event"' not in line)
    own = [line for line in err.splitlines()
           if line.startswith(("groupwire ", "consumed ", "produced ", "flushing "))]
    return code, out, "\n".join(own)


async def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with Producer(bootstrap) as p:
        for v in values:
            await p.send(topic, v)


# --- consume in a group -------------------------------------------------------------------


async def test_the_idle_clock_starts_at_the_first_assignment(
        capsys: pytest.CaptureFixture[str], start_broker: Any) -> None:
    """The group's initial rebalance delay (1.5 s) is longer than the idle timeout
    (0.5 s): the records are still read, since idling counts from the assignment."""
    broker = await start_broker(group_initial_rebalance_delay_ms=1500)
    b = f"127.0.0.1:{broker.port}"
    async with Admin(b) as admin:
        await admin.create_topics("orders", 2)
    await produce_values(b, "orders", [f"r{i}".encode() for i in range(6)])
    code, out, err = await run(capsys, "consume", "--topic", "orders", "--group",
                               "cli-readers", "--from-beginning", "--idle-timeout-ms", "500",
                               "--json", "--bootstrap", b)
    assert code == 0, err
    values = sorted(json.loads(line)["value"] for line in out.splitlines()
                    if line.startswith("{"))
    assert values == [f"r{i}" for i in range(6)]
    assert "consumed 6 record(s) from orders" in err
    code, out, err = await run(capsys, "groups", "lag", "cli-readers", "--bootstrap", b)
    assert code == 0 and "group cli-readers: total lag 0" in out, out  # committed: all read


async def test_a_consume_that_never_gets_partitions_fails_saying_why(
        capsys: pytest.CaptureFixture[str], bootstrap: str, admin: Admin) -> None:
    """Another member (static, so the range assignor puts it first) holds the topic's
    only partition: the command ends non-zero and says why, rather than "consumed 0"."""
    await admin.create_topics("single", 1)
    holder = Consumer(bootstrap, group_id="holders", group_instance_id="a-holder",
                      session_timeout_ms=6000, heartbeat_interval_ms=500)
    async with holder:
        holder.subscribe(["single"])
        while not holder.assignment():
            await holder.getmany(timeout_ms=100)
        keep_polling = asyncio.ensure_future(_poll_forever(holder))
        try:
            code, _, err = await run(capsys, "consume", "--topic", "single", "--group",
                                     "holders", "--idle-timeout-ms", "300", "--timeout-ms",
                                     "1500", "--bootstrap", bootstrap)
        finally:
            keep_polling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keep_polling
    assert code == 1, err
    assert ("groupwire consume: error: no partitions were assigned within 1500 ms "
            "(group 'holders':") in err
    assert "Stable with 2 member(s)" in err and "went to 1 other member(s)" in err


async def _poll_forever(consumer: Consumer) -> None:
    while True:
        await consumer.getmany(timeout_ms=100)


# --- groups lag ----------------------------------------------------------------------------


async def test_lag_of_a_group_without_commits_is_not_zero(
        capsys: pytest.CaptureFixture[str], bootstrap: str, admin: Admin) -> None:
    await admin.create_topics("uncommitted", 2)
    await produce_values(bootstrap, "uncommitted", [b"a", b"b", b"c"])
    lag = ("groups", "lag", "no-commits", "--bootstrap", bootstrap)
    reader = Consumer(bootstrap, group_id="no-commits", enable_auto_commit=False,
                      session_timeout_ms=6000, heartbeat_interval_ms=500)
    async with reader:
        reader.subscribe(["uncommitted"])
        while not reader.assignment():
            await reader.getmany(timeout_ms=100)
        code, out, _ = await run(capsys, *lag)
        # a member holds both partitions but committed nothing: lag unknown, not 0
        assert code == 0 and "total lag" not in out, out
        assert out.splitlines()[0] == (
            "group no-commits: no committed offsets (lag unknown for 2 partition(s))")
        p0 = TopicPartition("uncommitted", 0)
        await reader.commit({p0: 0})
        end = (await admin.list_offsets({p0: -1}))[p0]
        code, out, _ = await run(capsys, *lag)
        assert code == 0 and out.splitlines()[0] == (
            f"group no-commits: total lag {end} (unknown for 1 partition(s) without a "
            "commit)"), out
    await admin.delete_groups(["no-commits"])
    async with Consumer(bootstrap, group_id="no-commits", enable_auto_commit=False,
                        session_timeout_ms=6000, heartbeat_interval_ms=500) as again:
        again.subscribe(["uncommitted"])
        while not again.assignment():
            await again.getmany(timeout_ms=100)
    (desc,) = await admin.describe_groups("no-commits")
    if desc.state == "Dead":
        pytest.skip("the broker forgets an Empty group without commits")
    code, out, _ = await run(capsys, *lag)
    assert code == 0 and out.splitlines() == [
        "group no-commits has no committed offsets and no assigned partitions: its lag is "
        "unknown"], out
    assert await run_json(capsys, *lag) == []


async def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = await run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


# --- produce: bounded reading ---------------------------------------------------------------


async def test_produce_reads_stdin_only_as_fast_as_records_are_acknowledged(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        bootstrap: str, admin: Admin) -> None:
    """Small bounds: at every send, the lines read from stdin but not yet sent, and the
    records sent but not yet acknowledged, stay within them (the memory bound), however
    many lines the pipe carries."""
    await admin.create_topics("stream", 2)
    monkeypatch.setattr(records, "READ_BYTES", 1024, raising=False)
    monkeypatch.setattr(records, "READ_AHEAD_CHUNKS", 2, raising=False)
    monkeypatch.setattr(records, "MAX_UNACKED", 300, raising=False)
    lines, per_write = 40000, 100
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: the pipe itself holds 4 KiB, not 64
    written = [0]
    sent = [0]
    unacked = [0]
    worst = {"ahead": 0, "unacked": 0}

    def write() -> None:
        with os.fdopen(w, "wb", buffering=0) as out:
            for start in range(0, lines, per_write):
                out.write(b"".join(b"line-%06d\n" % i
                                   for i in range(start, start + per_write)))
                written[0] += per_write

    class Probe(Producer):
        async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[RecordMetadata]:
            worst["ahead"] = max(worst["ahead"], written[0] - sent[0])
            worst["unacked"] = max(worst["unacked"], unacked[0])
            future = await super().send(*args, **kwargs)
            sent[0] += 1
            unacked[0] += 1
            future.add_done_callback(lambda _f: unacked.__setitem__(0, unacked[0] - 1))
            return future

    monkeypatch.setattr(records, "Producer", Probe)
    monkeypatch.setattr(sys, "stdin", os.fdopen(r, "rb"))
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, out, err = await run(capsys, "produce", "--topic", "stream", "--bootstrap",
                               bootstrap)
    writer.join(EXIT_BOUND_S)
    assert code == 0, err
    assert f"produced {lines} record(s) to stream" in out
    ends = await admin.list_offsets({TopicPartition("stream", p): -1 for p in range(2)})
    assert sum(ends.values()) == lines
    # read ahead: the pipe (4 KiB), two queued chunks, the chunk the reader holds and the
    # one being sent (1 KiB each), one write of the test's: ~1,000 lines of 12 bytes
    assert worst["ahead"] <= 1500, worst
    assert worst["unacked"] <= 300, worst


async def test_produce_json_lists_every_record_as_before(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        bootstrap: str, admin: Admin) -> None:
    await admin.create_topics("listed", 1)
    r, w = os.pipe()
    os.write(w, b"a\r\nb\n\nc")  # CRLF, an empty line, no newline at the end
    os.close(w)
    monkeypatch.setattr(sys, "stdin", os.fdopen(r, "rb"))
    assert await run_json(capsys, "produce", "--topic", "listed", "--bootstrap",
                          bootstrap) == [{"topic": "listed", "partition": 0, "offset": i}
                                         for i in range(4)]
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert await run_json(capsys, "produce", "--topic", "listed", "--bootstrap",
                          bootstrap) == []
    async with Consumer(bootstrap) as c:
        c.assign([TopicPartition("listed", 0)])
        await c.seek_to_beginning()
        got: list[bytes | None] = []
        for _ in range(100):
            got += [r.value for rs in (await c.getmany(timeout_ms=200)).values() for r in rs]
            if len(got) >= 4:
                break
    assert got == [b"a", b"b", b"", b"c"]


# --- produce: Ctrl-C --------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "groupwire", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _stderr_lines(proc: subprocess.Popen[bytes]) -> Iterator[str]:
    assert proc.stderr is not None
    for raw in proc.stderr:
        yield raw.decode(errors="replace").rstrip("\n")


async def test_first_ctrl_c_flushes_and_says_so_second_aborts(
        tmp_path: Path, procs: list[BrokerProcess]) -> None:
    """The broker is paused (SIGSTOP) with records on their way: the first SIGINT says
    how many are being flushed, the second ends the command at once (exit 130)."""
    bp = BrokerProcess(tmp_path / "data", "--fsync", "never").start()
    procs.append(bp)
    b = f"127.0.0.1:{bp.port}"
    async with Admin(b, request_timeout_ms=5000) as admin:
        await admin.create_topics("paused", 1)
        proc = _spawn("produce", "--topic", "paused", "--bootstrap", b,
                      "--timeout-ms", "60000")
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"first\n")
            proc.stdin.flush()
            for _ in range(600):  # the producer is connected and has the topic's leader
                ends = await admin.list_offsets({TopicPartition("paused", 0): -1})
                if ends[TopicPartition("paused", 0)] == 1:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the first line never landed")
            assert bp.proc is not None
            bp.proc.send_signal(signal.SIGSTOP)
            # 2 MB more than stdin's pipe and the read-ahead hold: once written, most of
            # it has been handed to the producer, and stays unacknowledged
            block = b"".join(b"%099d\n" % i for i in range(20000))
            await asyncio.to_thread(proc.stdin.write, block)
            await asyncio.to_thread(proc.stdin.flush)
            proc.send_signal(signal.SIGINT)
            lines = _stderr_lines(proc)
            flushing = await asyncio.wait_for(asyncio.to_thread(
                lambda: next(x for x in lines if x.startswith("flushing"))), EXIT_BOUND_S)
            count = int(flushing.split()[1])
            assert flushing == f"flushing {count} records; Ctrl-C again to abort"
            assert 0 < count <= 20001
            proc.send_signal(signal.SIGINT)
            code = await asyncio.wait_for(asyncio.to_thread(proc.wait), EXIT_BOUND_S)
            rest = await asyncio.to_thread(lambda: list(lines))
        finally:
            proc.kill()
            proc.wait()
            if bp.proc is not None:
                bp.proc.send_signal(signal.SIGCONT)
    assert code == 130, rest
    assert any(x.startswith("groupwire produce: aborted:") for x in rest), rest
    assert not any("Traceback" in x or "never retrieved" in x for x in rest), rest


# --- a --bootstrap that is no broker -------------------------------------------------------


@pytest.fixture
def http_port() -> Iterator[int]:
    """A tiny HTTP server (as a broker's metrics port is): it accepts and waits for a
    request line that a groupwire client never sends."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("argv", [["topics", "list"], ["produce", "--topic", "t", "--value",
                                                       "v"]])
def test_a_bootstrap_at_an_http_port_fails_in_one_line(http_port: int,
                                                      argv: list[str]) -> None:
    """The ApiVersions probe's bound (2 s by default) ends it, whatever --timeout-ms says;
    the subprocess timeout only catches a hang."""
    result = subprocess.run([sys.executable, "-m", "groupwire", *argv, "--bootstrap",
                             f"127.0.0.1:{http_port}", "--timeout-ms", "600000"],
                            capture_output=True, text=True, timeout=EXIT_BOUND_S)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"groupwire {argv[0]}: error: no broker reachable at "
                                    f"127.0.0.1:{http_port}")
    assert "no answer to ApiVersions" in result.stderr
