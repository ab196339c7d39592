"""What every benchmark shares: figures, the command line, a broker process, /proc sampling.

Figures are taken over several measured rounds after a warm-up, and printed as one JSON
line each, so the runner (bench/run.py) and the smoke test read them the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BROKER_STARTUP_TIMEOUT_S = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- figures ----------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured quantity: a value per measured round, and how it was measured."""

    name: str
    unit: str
    values: list[float]
    settings: dict[str, Any]
    goal: str | None = None
    met: bool | None = None
    note: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def min(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def max(self) -> float:
        return max(self.values) if self.values else float("nan")

    @property
    def rounds(self) -> int:
        return len(self.values)

    def to_json(self, bench: str) -> dict[str, Any]:
        return {
            "bench": bench, "name": self.name, "unit": self.unit,
            "median": _rounded(self.median), "min": _rounded(self.min),
            "max": _rounded(self.max), "rounds": self.rounds, "settings": self.settings,
            "goal": self.goal, "met": self.met, "note": self.note,
        }


def _rounded(x: float) -> float | None:
    """Four significant digits (more is noise on a shared 2-core machine); None for a
    figure with no rounds, since NaN is not JSON."""
    if x != x:
        return None
    if x == 0:
        return 0.0
    return float(f"{x:.4g}")


def check_goal(value: float, goal: str) -> bool:
    """Whether ``value`` meets a goal written as ``">= 0.5"``, ``"< 1000"`` and so on."""
    op, _, bound = goal.strip().partition(" ")
    limit = float(bound)
    checks: dict[str, Callable[[float, float], bool]] = {
        ">=": lambda a, b: a >= b, ">": lambda a, b: a > b,
        "<=": lambda a, b: a <= b, "<": lambda a, b: a < b,
    }
    if op not in checks:
        raise ValueError(f"goal {goal!r}: expected '<op> <number>' with op in {sorted(checks)}")
    return checks[op](value, limit)


def with_goal(figure: Figure, goal: str) -> Figure:
    """Set ``goal`` and judge ``met`` on the median."""
    figure.goal = goal
    figure.met = check_goal(figure.median, goal) if figure.values else None
    return figure


# --- command line -----------------------------------------------------------------------


def bench_main(
    name: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], list[Figure]],
    *,
    default_rounds: int = 5,
    default_warmup: int = 1,
    description: str | None = None,
) -> Callable[[list[str] | None], int]:
    """Build a benchmark's entry point: common flags, JSON lines on stdout, a table."""

    def main(argv: list[str] | None) -> int:
        parser = argparse.ArgumentParser(prog=f"python -m bench.{name}",
                                         description=description)
        parser.add_argument("--rounds", type=int,
                            help=f"measured rounds (default {default_rounds}; 1 with --smoke)")
        parser.add_argument("--warmup", type=int,
                            help=f"unmeasured warm-up rounds (default {default_warmup}; "
                                 f"0 with --smoke)")
        parser.add_argument("--smoke", action="store_true",
                            help="a seconds-long run with tiny sizes (the test suite's)")
        parser.add_argument("--json", action="store_true",
                            help="JSON lines only on stdout; the table goes to stderr")
        add_arguments(parser)
        args = parser.parse_args(argv)
        if args.rounds is None:
            args.rounds = 1 if args.smoke else default_rounds
        if args.warmup is None:
            args.warmup = 0 if args.smoke else default_warmup
        # SIGTERM unwinds like Ctrl-C, so the brokers and servers we started are stopped
        signal.signal(signal.SIGTERM, _raise_interrupt)
        if args.rounds < 1 or args.warmup < 0:
            parser.error("--rounds must be >= 1 and --warmup >= 0")
        try:
            figures = run(args)
        except KeyboardInterrupt:
            return 130
        except BenchError as exc:
            print(f"bench {name}: {exc}", file=sys.stderr)
            return 1
        for fig in figures:
            print(json.dumps(fig.to_json(name), sort_keys=False), flush=True)
        print_table(name, figures, sys.stderr if args.json else sys.stdout)
        return 0

    return main


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def die_with_parent() -> None:
    """``preexec_fn`` for children: SIGKILL them if the benchmark dies without cleaning up
    (Linux only; elsewhere a no-op)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class BenchError(Exception):
    """A benchmark could not run (reported as one line, exit 1)."""


def print_table(bench: str, figures: list[Figure], stream: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bench {bench}")
    for col in ("figure", "unit", "median", "min", "max", "rounds", "goal", "met"):
        table.add_column(col, justify="left" if col in ("figure", "unit", "goal") else "right")
    for f in figures:
        table.add_row(f.name, f.unit, fmt(f.median), fmt(f.min), fmt(f.max), str(f.rounds),
                      f.goal or "", "" if f.met is None else ("yes" if f.met else "NO"))
    Console(file=stream, width=120).print(table)


def fmt(x: float) -> str:
    if x != x:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


# --- the machine ------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures were measured on: they mean little without it."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        import uvloop  # noqa: F401

        uvloop_on = True
    except ImportError:
        uvloop_on = False
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "uvloop": uvloop_on,
        "os": f"{platform.system()} {platform.release()}",
        "loadavg_1m": round(load[0], 2),
    }


# --- processes --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (from /proc/PID/stat)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    # fields[0] is state (field 3); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (from /proc/PID/statm)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KIB


def syscalls(pid: int) -> tuple[int, int]:
    """(read, write) system calls of ``pid`` so far (/proc/PID/io; (0, 0) if unreadable)."""
    try:
        fields = dict(line.split(": ") for line in
                      Path(f"/proc/{pid}/io").read_text().splitlines())
        return int(fields["syscr"]), int(fields["syscw"])
    except (OSError, KeyError, ValueError):
        return 0, 0


@dataclass
class Usage:
    """CPU % (100 = one core busy), RSS and system calls over one sampled interval."""

    cpu_percent: float
    rss_kib_mean: float
    rss_kib_max: int
    seconds: float
    read_calls: int = 0
    write_calls: int = 0


class ProcSampler:
    """Sample a process's CPU and RSS from /proc between ``start`` and ``stop``.

    A thread reads RSS every ``interval_s``; CPU is the difference of the counters, so
    it needs no sampling at all.
    """

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self._rss: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._cpu0 = 0.0
        self._io0 = (0, 0)

    def start(self) -> ProcSampler:
        self._rss.clear()
        self._stop.clear()
        self._t0 = time.monotonic()
        self._cpu0 = cpu_seconds(self.pid)
        self._io0 = syscalls(self.pid)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self._rss.append(rss_kib(self.pid))
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> Usage:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        seconds = time.monotonic() - self._t0
        cpu = cpu_seconds(self.pid) - self._cpu0
        rss = self._rss or [rss_kib(self.pid)]
        reads, writes = syscalls(self.pid)
        return Usage(cpu_percent=100.0 * cpu / seconds if seconds > 0 else 0.0,
                     rss_kib_mean=statistics.fmean(rss), rss_kib_max=max(rss), seconds=seconds,
                     read_calls=reads - self._io0[0], write_calls=writes - self._io0[1])


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited 10 s later."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@dataclass
class BrokerProc:
    """The real broker as a separate process on a free port, as users run it.

    Logs go to a file in the data directory (a pipe that nobody reads would block it);
    the port comes from the ``broker_started`` log line.
    """

    extra: tuple[str, ...] = ()
    data_dir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    port: int = -1
    metrics_port: int | None = None
    """The broker's /metrics port, when ``extra`` turns it on (``--metrics-port 0``)."""
    _tmp: str | None = None
    _log: Path | None = None
    _log_from: int = 0
    env: dict[str, str] = field(default_factory=dict)
    preexec: Callable[[], None] = die_with_parent
    """Run in the child before the broker starts (e.g. a lower descriptor limit); it should
    call :func:`die_with_parent` too."""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProc:
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="gw-bench-")
            self.data_dir = Path(self._tmp)
        self._log = self.data_dir / "broker.log"
        # a restart (same data dir) appends: the earlier lives' lines stay for timelines
        self._log_from = self._log.stat().st_size if self._log.exists() else 0
        cmd = [sys.executable, "-m", "groupwire", "broker", "--host", "127.0.0.1",
               "--port", "0", "--data-dir", str(self.data_dir / "data"), "--metrics-port", "-1",
               "--log-format", "json", *self.extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        with self._log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log,
                                         env=env, cwd=REPO_ROOT, preexec_fn=self.preexec)
        deadline = time.monotonic() + BROKER_STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            port = self._port_from_log()
            if port is not None:
                self.port = port
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        tail = self.log_tail()
        self.stop()
        raise BenchError(f"broker did not start: {tail}")

    def _port_from_log(self) -> int | None:
        assert self._log is not None
        with contextlib.suppress(OSError), self._log.open("rb") as f:
            f.seek(self._log_from)
            for line in f.read().decode(errors="replace").splitlines():
                if '"broker_started"' in line:
                    with contextlib.suppress(ValueError, KeyError):
                        started = json.loads(line)
                        if started.get("metrics_port") is not None:
                            self.metrics_port = int(started["metrics_port"])
                        return int(started["port"])
        return None

    def log_tail(self, lines: int = 20) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean shutdown, nothing flushed, the lease left to
        expire. The data directory stays, for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def log_path(self) -> Path | None:
        return self._log

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers; remove a data directory we created."""
        if self.proc is not None:
            terminate(self.proc)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> BrokerProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def broker(*extra: str) -> Iterator[BrokerProc]:
    """A broker for the length of a ``with`` block."""
    proc = BrokerProc(extra=tuple(extra))
    with proc:
        yield proc


def python_module_cmd(module: str, *args: str) -> list[str]:
    """The command that runs ``module`` with this interpreter from the repository root."""
    return [sys.executable, "-m", module, *args]


def repo_env() -> dict[str, str]:
    """Environment for a child process that imports the source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# --- etcd and clusters ------------------------------------------------------------------

ETCD_ENV = "GROUPWIRE_BENCH_ETCD"
"""Path of the etcd binary, when it is not ``etcd`` on the PATH."""
ETCD_STARTUP_TIMEOUT_S = 30.0
CLUSTER_SETTLE_TIMEOUT_S = 120.0


def etcd_binary() -> str | None:
    found = os.environ.get(ETCD_ENV) or shutil.which("etcd")
    if found is None and Path("/usr/bin/etcd").exists():
        found = "/usr/bin/etcd"
    return found


def etcd_missing() -> str | None:
    """Why cluster benchmarks cannot run here (None: they can)."""
    if etcd_binary() is None:
        return (f"no etcd binary (install etcd 3.4+, e.g. Debian's etcd-server, or set "
                f"{ETCD_ENV})")
    return None


@dataclass
class EtcdProc:
    """One etcd member on free ports with a temporary data directory, killed with us.

    Elections every 500 ms (heartbeat 100 ms) so that a 1 s lease TTL is allowed
    (etcd wants the TTL at least 1.5 times the election timeout).
    """

    proc: subprocess.Popen[bytes] | None = None
    client_port: int = -1
    peer_port: int = -1
    _tmp: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> EtcdProc:
        binary = etcd_binary()
        if binary is None:
            raise BenchError(etcd_missing() or "no etcd")
        self._tmp = tempfile.mkdtemp(prefix="gw-bench-etcd-")
        self.client_port, self.peer_port = free_port(), free_port()
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [binary, "--name", "bench", "--data-dir", str(Path(self._tmp) / "data"),
               "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"bench={peer}",
               "--election-timeout", "500", "--heartbeat-interval", "100"]
        with (Path(self._tmp) / "etcd.log").open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log,
                                         preexec_fn=die_with_parent)
        deadline = time.monotonic() + ETCD_STARTUP_TIMEOUT_S
        import urllib.request

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(OSError, ValueError), \
                    urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                if json.loads(r.read()).get("health") == "true":
                    return self
            time.sleep(0.05)
        tail = (Path(self._tmp) / "etcd.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise BenchError(f"etcd did not start: {tail}")

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> EtcdProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ClusterProcs:
    """Brokers with node ids 1..n on one etcd, each on a fixed port with its own data
    directory, so a killed one restarts as the same broker (same id, data, address).

    ``etcd``: share a running one (clusters then differ by name); None starts our own.
    """

    brokers: int = 3
    extra: tuple[str, ...] = ()
    lease_ttl_ms: int = 1000
    etcd: EtcdProc | None = None
    name: str = field(default_factory=lambda: f"bench-{os.getpid()}-{time.time_ns()}")
    nodes: dict[int, BrokerProc] = field(default_factory=dict)
    _own_etcd: bool = False
    _tmp: str | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.nodes.values())

    def start(self) -> ClusterProcs:
        try:
            if self.etcd is None:
                self.etcd = EtcdProc().start()
                self._own_etcd = True
            self._tmp = tempfile.mkdtemp(prefix="gw-bench-cluster-")
            for node in range(1, self.brokers + 1):
                self.nodes[node] = BrokerProc(data_dir=Path(self._tmp) / f"b{node}")
                self.nodes[node].data_dir.mkdir()  # type: ignore[union-attr]
                self.nodes[node].port = free_port()
                self.start_node(node)
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, node: int) -> None:
        """(Re)start broker ``node`` on its port and data directory."""
        b = self.nodes[node]
        assert self.etcd is not None
        b.extra = ("--node-id", str(node), "--etcd-endpoints", self.etcd.url,
                   "--cluster-name", self.name, "--etcd-lease-ttl-ms", str(self.lease_ttl_ms),
                   "--port", str(b.port), "--group-initial-rebalance-delay-ms", "0",
                   *self.extra)
        b.start()

    def kill(self, node: int) -> tuple[float, float]:
        """SIGKILL broker ``node``; (monotonic, wall-clock) time just before the signal."""
        t = time.monotonic(), time.time()
        self.nodes[node].kill()
        return t

    def restart(self, node: int) -> None:
        self.start_node(node)

    async def wait_settled(self, timeout_s: float = CLUSTER_SETTLE_TIMEOUT_S,
                           topics: list[str] | None = None) -> None:
        """Until every broker is live and every partition (of ``topics``, or all,
        internal ones included) has a leader and its whole ISR."""
        from groupwire.client import Admin

        deadline = time.monotonic() + timeout_s
        last = "no answer"
        async with Admin(self.bootstrap, request_timeout_ms=5000) as admin:
            while time.monotonic() < deadline:
                try:
                    cluster = await admin.describe_cluster()
                    parts = await admin.describe_partitions(topics)
                except Exception as exc:  # brokers coming and going: ask again
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    live = {b.node_id for b in cluster.brokers}
                    lagging = [f"{p.topic}[{p.partition}]" for p in parts
                               if p.leader < 0 or p.under_replicated]
                    if live == set(self.nodes) and not lagging:
                        return
                    last = f"live {sorted(live)}, {len(lagging)} partitions lagging " \
                           f"({', '.join(lagging[:3])})"
                await asyncio.sleep(0.1)
        raise BenchError(f"cluster {self.name} did not settle in {timeout_s:.0f} s: {last}")

    def logs(self) -> dict[int, list[dict[str, Any]]]:
        """Every broker's JSON log lines so far, all its lives."""
        out: dict[int, list[dict[str, Any]]] = {}
        for node, b in self.nodes.items():
            lines: list[dict[str, Any]] = []
            if b.log_path is not None and b.log_path.exists():
                for raw in b.log_path.read_text(errors="replace").splitlines():
                    with contextlib.suppress(ValueError):
                        lines.append(json.loads(raw))
            out[node] = lines
        return out

    def stop(self) -> None:
        for b in self.nodes.values():
            b.stop()
        if self._own_etcd and self.etcd is not None:
            self.etcd.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> ClusterProcs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
