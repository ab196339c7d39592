"""`groupwire produce` from a pipe against the SDK producer, both measured in the same run.

Issue 25: `seq 1 100000000 | groupwire produce` grew ~13 MiB/s and ran at ~15k
records/s. Here N lines of 100 bytes (99 characters and a newline, the size
bench/throughput.py's producer sends) go through `groupwire produce` in a subprocess fed
by a pipe, timed from the process's start to its exit (start-up included); the SDK
producer (bench/throughput.py's ``gw_produce``, in this process) sends N such records to
the same broker in the same round. Peak RSS is the command's own (its VmHWM), at N and
at 4N lines: flat when reading has backpressure. Ctrl-C: with the broker paused
(SIGSTOP) and records on their way, the time from the first SIGINT to the "flushing"
line, and from the second SIGINT to the exit.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from bench.common import REPO_ROOT, BenchError, BrokerProc, Figure, bench_main, with_goal
from bench.throughput import gw_produce

LINE = b"%099d\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=1_000_000, help="lines per CLI run")


def _command(address: str, topic: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "groupwire", "produce", "--topic", topic, "--bootstrap",
            address, *extra]


def _feed(pipe: object, lines: int) -> None:
    """Write ``lines`` numbered 100-byte lines, then close (a thread: the pipe blocks)."""
    assert hasattr(pipe, "write") and hasattr(pipe, "close")
    step = 10000
    try:
        for start in range(0, lines, step):
            pipe.write(b"".join(LINE % i for i in range(start, min(start + step, lines))))
    finally:
        pipe.close()


def cli_produce(address: str, topic: str, lines: int) -> tuple[float, float]:
    """(records/s from start to exit, peak RSS MiB) of one `groupwire produce` run."""
    t0 = time.monotonic()
    proc = subprocess.Popen(_command(address, topic), stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=REPO_ROOT)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, lines), daemon=True)
    feeder.start()
    peak = [0]
    done = threading.Event()
    threading.Thread(target=_watch_hwm, args=(proc.pid, peak, done), daemon=True).start()
    proc.wait()
    seconds = time.monotonic() - t0
    done.set()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise BenchError(f"groupwire produce exited {proc.returncode}: {err.strip()}")
    return lines / seconds, peak[0] / 1024


def _watch_hwm(pid: int, peak: list[int], done: threading.Event) -> None:
    """The process's VmHWM (its own peak RSS, KiB), read until it exits. Not ``wait4``'s
    ru_maxrss: Linux carries that over fork and exec from this (large) process."""
    path = Path(f"/proc/{pid}/status")
    while not done.is_set():
        try:
            for line in path.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]))
        except (OSError, ValueError):
            return
        done.wait(0.02)


def ctrl_c(broker: BrokerProc, topic: str) -> tuple[float, float]:
    """(ms from the first SIGINT to the "flushing" line, ms from the second to the exit),
    the broker paused with about 20,000 records unacknowledged."""
    proc = subprocess.Popen(_command(broker.address, topic, "--timeout-ms", "60000"),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=REPO_ROOT)
    assert proc.stdin is not None and proc.stderr is not None
    assert broker.proc is not None
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        asyncio.run(_wait_for_end_offset(broker.address, topic, 1))
        broker.proc.send_signal(signal.SIGSTOP)
        proc.stdin.write(b"".join(LINE % i for i in range(20000)))
        proc.stdin.flush()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        line = proc.stderr.readline().decode(errors="replace")
        first = time.monotonic() - t0
        if not line.startswith("flushing"):
            raise BenchError(f"expected the flushing line, got {line!r}")
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
        second = time.monotonic() - t1
        if code != 130:
            raise BenchError(f"the second SIGINT: exit {code}, not 130")
        return first * 1000, second * 1000
    finally:
        proc.kill()
        proc.wait()
        broker.proc.send_signal(signal.SIGCONT)


async def _wait_for_end_offset(address: str, topic: str, end: int) -> None:
    from groupwire.client import Admin, TopicPartition

    async with Admin(address) as admin:
        for _ in range(1200):
            tp = TopicPartition(topic, 0)
            if (await admin.list_offsets({tp: -1}))[tp] >= end:
                return
            await asyncio.sleep(0.05)
    raise BenchError("the first line never landed")


async def _create(address: str, topic: str, partitions: int) -> None:
    from groupwire.client import Admin

    async with Admin(address) as admin:
        await admin.create_topics(topic, num_partitions=partitions)


def run(args: argparse.Namespace) -> list[Figure]:
    lines = 20000 if args.smoke else args.records
    settings = {"lines": lines, "line_bytes": 100, "partitions": 4}
    cli_rate, sdk_rate, ratio, rss, rss4 = [], [], [], [], []
    first_ms, second_ms = [], []
    broker = BrokerProc(("--fsync", "never")).start()
    try:
        for i in range(args.warmup + args.rounds):
            tag = uuid.uuid4().hex[:8]
            asyncio.run(_create(broker.address, f"cli-{tag}", 4))
            c_rate, c_rss = cli_produce(broker.address, f"cli-{tag}", lines)
            s = asyncio.run(gw_produce(broker.address, f"sdk-{tag}", lines, 600.0))
            asyncio.run(_create(broker.address, f"cli4-{tag}", 4))
            _, c_rss4 = cli_produce(broker.address, f"cli4-{tag}", 4 * lines)
            asyncio.run(_create(broker.address, f"int-{tag}", 1))
            f_ms, s_ms = ctrl_c(broker, f"int-{tag}")
            print(f"round {i}: cli {c_rate:,.0f}/s sdk {s.rate:,.0f}/s rss {c_rss:.1f} / "
                  f"{c_rss4:.1f} MiB ctrl-c {f_ms:.0f} / {s_ms:.0f} ms", file=sys.stderr)
            if i < args.warmup:
                continue
            cli_rate.append(c_rate)
            sdk_rate.append(s.rate)
            ratio.append(c_rate / s.rate)
            rss.append(c_rss)
            rss4.append(c_rss4)
            first_ms.append(f_ms)
            second_ms.append(s_ms)
    finally:
        broker.stop()
    return [
        Figure("groupwire produce (CLI, pipe)", "records/s", cli_rate, settings),
        Figure("SDK producer (bench.throughput)", "records/s", sdk_rate, settings),
        with_goal(Figure("ratio CLI / SDK", "ratio", ratio, settings), ">= 1"),
        Figure(f"CLI peak RSS, {lines:,} lines", "MiB", rss, settings),
        Figure(f"CLI peak RSS, {4 * lines:,} lines", "MiB", rss4, settings),
        Figure("first Ctrl-C to the flushing line", "ms", first_ms, settings),
        Figure("second Ctrl-C to the exit", "ms", second_ms, settings),
    ]


main = bench_main("cli_produce", add_arguments, run, default_rounds=3, default_warmup=0,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
