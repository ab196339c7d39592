"""Benchmark 1: broker heartbeats/s against the machine's ceiling (the echo server).

Alternated in one run, so a noisy machine moves both sides: in each round the same load
generator process (bench/loadgen.py, a separate process, 50 connections, pipelined) drives
the echo server (bench/echo.py) and brokers holding N members heartbeating, with the very
same request bytes. The figure is the ratio broker heartbeats/s ÷ echo requests/s per
round. Then, open loop, 10,000 members heartbeating every 3 s: broker CPU % and RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    BenchError,
    BrokerProc,
    Figure,
    ProcSampler,
    Usage,
    bench_main,
    die_with_parent,
    python_module_cmd,
    repo_env,
    with_goal,
)
from bench.members import close_connections, populate
from groupwire.client.connection import Connection

GOAL_RATIO = ">= 0.5"
CPU_BOUND_PERCENT = 90.0
SESSION_TIMEOUT_MS = 300_000  # members idle while other windows run must not expire


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default="1000,10000", help="member counts, comma-separated")
    p.add_argument("--group-size", type=int, default=10, help="members per group")
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--depth", type=int, default=16, help="requests in flight per connection")
    p.add_argument("--seconds", type=float, default=3.0, help="measured window")
    p.add_argument("--steady-members", type=int, default=10_000)
    p.add_argument("--steady-interval-ms", type=int, default=3000)
    p.add_argument("--steady-seconds", type=float, default=6.0)
    p.add_argument("--py-spy", type=Path, default=None, metavar="OUT",
                   help="after the measured rounds, profile the echo server and the broker "
                        "with the most members under the same load with py-spy (collapsed "
                        "stacks to OUT-echo and OUT-broker-N<members>, the hottest functions "
                        "and lines in the same names + .txt); not counted in the figures")


@dataclass
class Server:
    label: str
    pid: int
    port: int
    members_file: Path | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)


async def start_echo() -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        *python_module_cmd("bench.echo", "--port", "0"), cwd=REPO_ROOT, env=repo_env(),
        stdout=asyncio.subprocess.PIPE, preexec_fn=die_with_parent)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    if not line.startswith("listening "):
        proc.kill()
        raise BenchError(f"echo server did not start: {line!r}")
    return proc, int(line.split()[1])


async def drive(server: Server, args: argparse.Namespace, warmup_s: float, seconds: float,
                rate: float = 0.0) -> tuple[dict[str, Any], Usage]:
    """One load generator run against ``server``; its CPU is sampled over the window."""
    assert server.members_file is not None
    cmd = python_module_cmd(
        "bench.loadgen", "--port", str(server.port), "--members", str(server.members_file),
        "--connections", str(args.connections), "--depth", str(args.depth),
        "--rate", str(rate), "--warmup-s", str(warmup_s), "--seconds", str(seconds))
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO_ROOT, env=repo_env(), stdout=asyncio.subprocess.PIPE,
        preexec_fn=die_with_parent)
    assert proc.stdout is not None
    sampler = ProcSampler(server.pid)
    usage: Usage | None = None
    result: dict[str, Any] | None = None
    async for raw in proc.stdout:
        line = raw.decode().strip()
        if line == "measure-start":
            sampler.start()
        elif line == "measure-end":
            usage = sampler.stop()
        elif line.startswith("{"):
            result = json.loads(line)
    if await proc.wait() != 0 or result is None or usage is None:
        raise BenchError(f"load generator failed against {server.label}")
    if result["bad"] > 0.01 * max(1, result["good"]):
        raise BenchError(f"{server.label}: {result['bad']} error answers of "
                         f"{result['good'] + result['bad']}, first: {result['first_bad']}")
    return result, usage


async def measure(args: argparse.Namespace) -> list[Figure]:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    seconds, warmup_s, steady_s = args.seconds, 0.5, args.steady_seconds
    if args.smoke:
        sizes, seconds, warmup_s, steady_s = [30], 0.3, 0.1, 0.3
        args.connections, args.steady_members = 4, 30
    settings = {"connections": args.connections, "depth": args.depth,
                "group_size": args.group_size, "seconds": seconds,
                "request": "Heartbeat (same bytes to both servers)"}
    brokers: list[BrokerProc] = []
    setup: list[list[Connection]] = []
    echo_proc: asyncio.subprocess.Process | None = None
    with tempfile.TemporaryDirectory(prefix="gw-bench-hb-") as tmp:
        try:
            echo_proc, echo_port = await start_echo()
            echo = Server("echo", echo_proc.pid, echo_port)
            servers = [echo]
            for n in sizes:
                b = BrokerProc(extra=("--group-initial-rebalance-delay-ms", "0")).start()
                brokers.append(b)
                conns, members = await populate(b.port, n, args.group_size,
                                                session_timeout_ms=SESSION_TIMEOUT_MS)
                setup.append(conns)
                path = Path(tmp) / f"members-{b.port}.json"
                path.write_text(json.dumps(
                    [[m.group_id, m.member_id, m.generation_id] for m in members]))
                servers.append(Server(f"broker N={n}", b.pid, b.port, path))
            echo.members_file = servers[-1].members_file
            for r in range(args.warmup + args.rounds):
                order = servers[r % len(servers):] + servers[:r % len(servers)]
                for s in order:
                    res, use = await drive(s, args, warmup_s, seconds)
                    if r >= args.warmup:
                        s.results.append(res)
                        s.usage.append(use)
            steady = next((s for s, n in zip(servers[1:], sizes, strict=True)
                           if n == args.steady_members), None)
            steady_usage: list[Usage] = []
            steady_rate = 0.0
            if steady is not None:
                steady_rate = args.steady_members * 1000 / args.steady_interval_ms
                for _ in range(args.rounds):
                    res, use = await drive(steady, args, warmup_s, steady_s, rate=steady_rate)
                    steady_usage.append(use)
            if args.py_spy is not None:
                for s in (echo, servers[-1]):
                    name = "echo" if s is echo else f"broker-N{sizes[-1]}"
                    await profile_window(s, args, warmup_s, seconds,
                                         args.py_spy.with_name(f"{args.py_spy.name}-{name}"))
        finally:
            for conns in setup:
                with contextlib.suppress(Exception):
                    await close_connections(conns)
            for b in brokers:
                b.stop()
            if echo_proc is not None and echo_proc.returncode is None:
                echo_proc.terminate()
                await echo_proc.wait()
    return figures(servers, sizes, settings, steady_usage, steady_rate, steady_s, args)


async def profile_window(server: Server, args: argparse.Namespace, warmup_s: float,
                         seconds: float, out: Path) -> None:
    """One more closed-loop window, with py-spy sampling the broker (it slows it down)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        raise BenchError("--py-spy: py-spy is not installed (pip install py-spy)")
    spy = await asyncio.create_subprocess_exec(
        py_spy, "record", "--pid", str(server.pid), "--format", "raw", "--rate", "250",
        "--nonblocking", "--duration", str(max(1, round(seconds + warmup_s + 2))),
        "--output", str(out),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        preexec_fn=die_with_parent)
    await asyncio.sleep(0.5)  # py-spy attaches
    await drive(server, args, warmup_s, seconds)
    await spy.wait()
    out.with_suffix(out.suffix + ".txt").write_text(summarize_collapsed(out.read_text()))


def summarize_collapsed(raw: str, top: int = 25) -> str:
    """Self and inclusive share of samples per function and per line, from py-spy's
    collapsed stacks (``frame;frame;... count``, a frame being ``func (file:line)``)."""
    total = 0
    tables: dict[str, tuple[dict[str, int], dict[str, int]]] = {
        "function": ({}, {}), "line": ({}, {})}
    for row in raw.splitlines():
        stack, _, count_s = row.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        total += count
        lines = [f for f in stack.split(";")
                 if not f.startswith(("process ", "thread "))]
        if not lines:
            continue
        funcs = [_function_of(f) for f in lines]
        for kind, frames in (("function", funcs), ("line", lines)):
            self_n, incl_n = tables[kind]
            self_n[frames[-1]] = self_n.get(frames[-1], 0) + count
            for f in set(frames):
                incl_n[f] = incl_n.get(f, 0) + count
    if total == 0:
        return "no samples\n"
    out = [f"{total} samples (busy only: idle time in the event loop's poll is not sampled)"]
    for kind, (self_n, incl_n) in tables.items():
        for label, counts in ((f"self % by {kind}", self_n), (f"incl % by {kind}", incl_n)):
            out += ["", label]
            out += [f"{100 * n / total:6.1f}  {f}"
                    for f, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(out) + "\n"


def _function_of(frame: str) -> str:
    """``func (file.py:123)`` -> ``func (file.py)``."""
    head, sep, _ = frame.rpartition(":")
    return f"{head})" if sep and frame.endswith(")") else frame


def figures(servers: list[Server], sizes: list[int], settings: dict[str, Any],
            steady_usage: list[Usage], steady_rate: float, steady_s: float,
            args: argparse.Namespace) -> list[Figure]:
    echo = servers[0]
    echo_rates = [x["per_second"] for x in echo.results]
    echo_per_cpu = per_cpu_second(echo)
    out = [Figure("echo requests/s", "req/s", echo_rates, settings),
           Figure("echo requests per CPU-second", "req/cpu-s", echo_per_cpu, settings),
           Figure("echo server CPU", "%", [u.cpu_percent for u in echo.usage], settings),
           Figure("echo requests per write call", "req/write", per_write(echo), settings,
                  note="answers sent per write system call: how well replies are batched"),
           Figure("load generator CPU (echo)", "%",
                  [x["loadgen_cpu_percent"] for x in echo.results], settings,
                  note="near 100 would mean the load generator, not the server, is the limit")]
    for s, n in zip(servers[1:], sizes, strict=True):
        rates = [x["per_second"] for x in s.results]
        st = {**settings, "members": n}
        busy = min([u.cpu_percent for u in s.usage + echo.usage], default=0.0)
        ratio = with_goal(Figure(
            f"ratio broker/echo N={n}", "ratio",
            [b / e for b, e in zip(rates, echo_rates, strict=True)], st), GOAL_RATIO)
        if busy < CPU_BOUND_PERCENT:
            ratio.note = (f"a server was below {CPU_BOUND_PERCENT:.0f}% CPU in some window "
                          f"(min {busy:.0f}%): the machine was busy, so read the per "
                          "CPU-second ratio too")
        broker_per_cpu = per_cpu_second(s)
        out += [
            Figure(f"broker heartbeats/s N={n}", "hb/s", rates, st),
            ratio,
            Figure(f"broker heartbeats per CPU-second N={n}", "hb/cpu-s", broker_per_cpu, st),
            Figure(f"ratio per CPU-second N={n}", "ratio",
                   [b / e for b, e in zip(broker_per_cpu, echo_per_cpu, strict=True)], st,
                   note="cost per request, echo ÷ broker: what the ratio is when both "
                        "servers own a core"),
            Figure(f"broker CPU under load N={n}", "%", [u.cpu_percent for u in s.usage], st),
            Figure(f"broker heartbeats per write call N={n}", "req/write", per_write(s), st),
            Figure(f"load generator CPU N={n}", "%",
                   [x["loadgen_cpu_percent"] for x in s.results], st),
        ]
    if steady_usage:
        st = {"members": args.steady_members, "interval_ms": args.steady_interval_ms,
              "rate": round(steady_rate, 1), "seconds": steady_s,
              "connections": args.connections}
        out.append(Figure("steady broker CPU", "%",
                          [u.cpu_percent for u in steady_usage], st))
        out.append(Figure("steady broker RSS", "MiB",
                          [u.rss_kib_max / 1024 for u in steady_usage], st))
    return out


def per_write(server: Server) -> list[float]:
    return [x["per_second"] * u.seconds / max(u.write_calls, 1)
            for x, u in zip(server.results, server.usage, strict=True)]


def per_cpu_second(server: Server) -> list[float]:
    return [x["per_second"] / max(u.cpu_percent / 100, 1e-3)
            for x, u in zip(server.results, server.usage, strict=True)]


def run(args: argparse.Namespace) -> list[Figure]:
    return asyncio.run(measure(args))


main = bench_main("heartbeat", add_arguments, run, default_rounds=5, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
