"""Security: heartbeats/s over TLS vs plaintext, connect + authenticate rate, a reconnect storm.

One broker process, started from the command line with four listeners (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL; trustme certificates; a SCRAM user written offline into its
data dir before it starts), so every TLS and SASL cost is the real server's.

1. Heartbeats/s: the same members (N groups of ``--group-size``) joined through each of
   PLAINTEXT, SSL and SASL_SSL, driven in turn by bench/loadgen.py (the heartbeat
   benchmark's load generator: ``--connections`` connections, ``--depth`` in flight,
   each connection authenticated first on SASL_SSL). Ratios are taken per round.
2. Connect + authenticate rate: ``--connect-clients`` clients, ``--concurrency`` at a
   time, each doing TCP (+TLS) connect, ApiVersions, SaslHandshake and SaslAuthenticate
   with the SDK's code, in a worker process; broker CPU per client from /proc.
3. A reconnect storm: ``--storm-clients`` SCRAM-SHA-256 clients over SASL_SSL all at
   once, while an authenticated group of ``--probe-members`` keeps heartbeating (its
   latency before and during the storm).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
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
from bench.loadgen import SASL_PASSWORD_ENV
from bench.members import (
    PARKED_PER_CONNECTION,
    Member,
    close_connections,
    create_topic,
    form_groups,
    heartbeat,
    new_members,
)
from groupwire.client.connection import Connection
from groupwire.client.sasl import authenticate
from groupwire.client.security import SecurityConfig, create_ssl_context
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

GOAL_RATIO = ">= 0.5"
USER = "bench"
PASSWORD = "bench-password"
SESSION_TIMEOUT_MS = 300_000  # loadgen members idle while the other windows run
PROBE_SESSION_TIMEOUT_MS = 10_000
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
HB_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
CONNECT_CASES: tuple[tuple[str, str | None], ...] = (
    ("PLAINTEXT", None), ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"))
SETUP_CONNECTIONS = 4
WORKER_FLAG = "--worker"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, default=1000,
                   help="heartbeating members per listener")
    p.add_argument("--group-size", type=int, default=10, help="members per group")
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--depth", type=int, default=16, help="requests in flight per connection")
    p.add_argument("--seconds", type=float, default=3.0, help="measured heartbeat window")
    p.add_argument("--connect-clients", type=int, default=200,
                   help="clients per connect + authenticate round")
    p.add_argument("--concurrency", type=int, default=4, help="concurrent connectors")
    p.add_argument("--storm-clients", type=int, default=1000)
    p.add_argument("--probe-members", type=int, default=10,
                   help="members heartbeating through the storm")
    p.add_argument("--probe-interval-ms", type=int, default=50,
                   help="each probe member heartbeats this often")
    p.add_argument("--client-timeout-s", type=float, default=120.0,
                   help="a client gives up connecting + authenticating after this")
    p.add_argument("--key-type", choices=("rsa", "ecdsa"), default="rsa",
                   help="the broker certificate's key (trustme: RSA 2048 or ECDSA P-256)")
    p.add_argument("--broker-arg", action="append", default=[], metavar="ARG",
                   help="extra broker flag (repeat), e.g. --broker-arg=--max-connections=500")


# --- the broker, its certificates and its user ------------------------------------------


@dataclass
class Secured:
    broker: BrokerProc
    cafile: Path
    ports: dict[str, int]
    tls: str = "?"
    """What the TLS listeners negotiate with this client: version, cipher, key type."""

    def config(self, protocol: str, mechanism: str | None) -> SecurityConfig:
        ctx = create_ssl_context(cafile=self.cafile) if protocol.endswith("SSL") else None
        return SecurityConfig(security_protocol=protocol, ssl_context=ctx,
                              sasl_mechanism=mechanism or "SCRAM-SHA-256",
                              sasl_plain_username=USER, sasl_plain_password=PASSWORD)


def start_broker(tmp: Path, extra: list[str], key_type: str) -> Secured:
    """Certificates for 127.0.0.1, the user written offline, the broker started."""
    import trustme

    from groupwire.broker.security import credential_from_password, offline_upsert
    from groupwire.protocol.acls import ScramMechanism

    key = trustme.KeyType.RSA if key_type == "rsa" else trustme.KeyType.ECDSA
    ca = trustme.CA(key_type=key)
    cert = ca.issue_cert("127.0.0.1", "localhost", key_type=key)
    cafile, certfile, keyfile = tmp / "ca.pem", tmp / "broker.pem", tmp / "broker.key"
    ca.cert_pem.write_to_path(str(cafile))
    certfile.write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(keyfile))
    offline_upsert(tmp / "data", USER, [
        credential_from_password(m, PASSWORD)
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)])
    listeners = ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS)
    broker = BrokerProc(data_dir=tmp, extra=(
        "--listeners", listeners, "--ssl-certfile", str(certfile), "--ssl-keyfile",
        str(keyfile), "--sasl-enabled-mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "--group-initial-rebalance-delay-ms", "0", *extra)).start()
    ports = listener_ports(broker)
    missing = [n for n in LISTENERS if n not in ports]
    if missing:
        broker.stop()
        raise BenchError(f"broker_started names no port for {', '.join(missing)}")
    return Secured(broker, cafile, ports, tls=key_type.upper())


async def tls_session(s: Secured) -> str:
    """``TLSv1.3 TLS_AES_256_GCM_SHA384 RSA``: what the SSL listener negotiates."""
    _, writer = await asyncio.open_connection(
        "127.0.0.1", s.ports["SSL"], ssl=create_ssl_context(cafile=s.cafile))
    try:
        obj = writer.get_extra_info("ssl_object")
        return f"{obj.version()} {obj.cipher()[0]} {s.tls}"
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def listener_ports(broker: BrokerProc) -> dict[str, int]:
    """``{listener name: port}`` from the broker's ``broker_started`` log line."""
    assert broker.log_path is not None
    for line in broker.log_path.read_text(errors="replace").splitlines():
        if '"broker_started"' in line:
            with contextlib.suppress(ValueError):
                return {str(k): int(v) for k, v in json.loads(line)["listeners"].items()}
    return {}


async def open_client(s: Secured, protocol: str, mechanism: str | None,
                      timeout: float = 30.0) -> Connection:
    """What a client does: connect (+TLS), ApiVersions, then SASL when the listener uses it."""
    config = s.config(protocol, mechanism)
    conn = await Connection.open("127.0.0.1", s.ports[protocol], client_id="bench",
                                 connect_timeout=timeout, ssl_context=config.tls_context())
    try:
        resp = await conn.send(ApiVersionsRequest(client_software_name="bench"),
                               timeout=timeout, response_type=ApiVersionsResponse)
        if resp.error_code != ErrorCode.NONE:
            raise BenchError(f"ApiVersions: {ErrorCode.name_of(resp.error_code)}")
        await authenticate(conn, config, timeout)
    except BaseException:
        await conn.close()
        raise
    return conn


async def join_members(conns: list[Connection], members: int, group_size: int, prefix: str,
                       session_timeout_ms: int) -> list[Member]:
    """bench.members.populate on connections already opened (and authenticated)."""
    await create_topic(conns[0], partitions=group_size)
    everyone: list[Member] = []
    for g in range(max(1, members // group_size)):
        everyone += new_members(f"{prefix}-{g}", min(group_size, members), conns, first=g,
                                session_timeout_ms=session_timeout_ms)
    batch = max(1, len(conns) * PARKED_PER_CONNECTION // group_size) * group_size
    for i in range(0, len(everyone), batch):
        await form_groups(everyone[i:i + batch], partitions=group_size)
    return everyone


# --- 1. heartbeats/s per listener -------------------------------------------------------


@dataclass
class Side:
    protocol: str
    port: int
    members_file: Path
    results: list[dict[str, Any]] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)


async def drive(s: Secured, side: Side, args: argparse.Namespace, warmup_s: float,
                seconds: float) -> tuple[dict[str, Any], Usage]:
    """One load generator run through ``side``'s listener; broker CPU over the window."""
    cmd = python_module_cmd(
        "bench.loadgen", "--port", str(side.port), "--members", str(side.members_file),
        "--connections", str(args.connections), "--depth", str(args.depth),
        "--warmup-s", str(warmup_s), "--seconds", str(seconds),
        "--security-protocol", side.protocol, "--ssl-cafile", str(s.cafile),
        "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", USER)
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO_ROOT, env={**repo_env(), SASL_PASSWORD_ENV: PASSWORD},
        stdout=asyncio.subprocess.PIPE, preexec_fn=die_with_parent)
    assert proc.stdout is not None
    sampler = ProcSampler(s.broker.pid)
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
        raise BenchError(f"load generator failed against {side.protocol}: "
                         f"{s.broker.log_tail(5)}")
    if result["bad"] > 0.01 * max(1, result["good"]):
        raise BenchError(f"{side.protocol}: {result['bad']} error answers of "
                         f"{result['good'] + result['bad']}, first: {result['first_bad']}")
    return result, usage


async def heartbeats(s: Secured, args: argparse.Namespace, tmp: Path,
                     setup: list[Connection]) -> list[Side]:
    seconds, warmup_s = (0.3, 0.1) if args.smoke else (args.seconds, 0.5)
    sides = []
    for protocol in HB_PROTOCOLS:
        conns = list(await asyncio.gather(*(
            open_client(s, protocol, "SCRAM-SHA-256") for _ in range(SETUP_CONNECTIONS))))
        setup += conns
        members = await join_members(conns, args.members, args.group_size,
                                     protocol.lower(), SESSION_TIMEOUT_MS)
        path = tmp / f"members-{protocol}.json"
        path.write_text(json.dumps([[m.group_id, m.member_id, m.generation_id]
                                    for m in members]))
        sides.append(Side(protocol, s.ports[protocol], path))
        print(f"joined {len(members)} members through {protocol}", file=sys.stderr)
    for r in range(args.warmup + args.rounds):
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:
            res, use = await drive(s, side, args, warmup_s, seconds)
            if r >= args.warmup:
                side.results.append(res)
                side.usage.append(use)
    return sides


def heartbeat_figures(s: Secured, sides: list[Side], args: argparse.Namespace
                      ) -> list[Figure]:
    st = {"members": args.members, "group_size": args.group_size,
          "connections": args.connections, "depth": args.depth,
          "seconds": 0.3 if args.smoke else args.seconds, "sasl": "SCRAM-SHA-256",
          "tls": s.tls}
    out: list[Figure] = []
    rates: dict[str, list[float]] = {}
    per_cpu: dict[str, list[float]] = {}
    for side in sides:
        rates[side.protocol] = [x["per_second"] for x in side.results]
        per_cpu[side.protocol] = [x["per_second"] / max(u.cpu_percent / 100, 1e-3)
                                  for x, u in zip(side.results, side.usage, strict=True)]
        out += [
            Figure(f"heartbeats/s {side.protocol}", "hb/s", rates[side.protocol], st),
            Figure(f"heartbeats per broker CPU-second {side.protocol}", "hb/cpu-s",
                   per_cpu[side.protocol], st),
            Figure(f"broker CPU {side.protocol}", "%",
                   [u.cpu_percent for u in side.usage], st),
            Figure(f"load generator CPU {side.protocol}", "%",
                   [x["loadgen_cpu_percent"] for x in side.results], st,
                   note="near 100 means the load generator (its own TLS included), not "
                        "the broker, set the pace"),
        ]
    base, base_cpu = rates["PLAINTEXT"], per_cpu["PLAINTEXT"]
    for protocol in HB_PROTOCOLS[1:]:
        out.append(with_goal(Figure(
            f"ratio {protocol}/PLAINTEXT heartbeats/s", "ratio",
            [a / b for a, b in zip(rates[protocol], base, strict=True)], st), GOAL_RATIO))
        out.append(Figure(
            f"ratio {protocol}/PLAINTEXT per broker CPU-second", "ratio",
            [a / b for a, b in zip(per_cpu[protocol], base_cpu, strict=True)], st,
            note="the broker's cost per heartbeat, plaintext ÷ this listener"))
    return out


# --- 2. and 3.: clients connecting and authenticating (a worker process) ----------------


async def connect_worker(args: argparse.Namespace) -> dict[str, Any]:
    """``--clients`` clients, ``--concurrency`` at a time, each connecting and
    authenticating; all are held open until the last is done (then closed unmeasured)."""
    ctx = create_ssl_context(cafile=args.cafile) if args.protocol.endswith("SSL") else None
    config = SecurityConfig(security_protocol=args.protocol, ssl_context=ctx,
                            sasl_mechanism=args.mechanism or "SCRAM-SHA-256",
                            sasl_plain_username=USER,
                            sasl_plain_password=os.environ.get(SASL_PASSWORD_ENV, ""))
    durations: list[float] = []
    failures: Counter[str] = Counter()
    held: list[Connection] = []
    todo = iter(range(args.clients))

    async def one() -> None:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(args.timeout):
                conn = await Connection.open("127.0.0.1", args.port, client_id="bench",
                                             connect_timeout=args.timeout, ssl_context=ctx)
                held.append(conn)
                resp = await conn.send(ApiVersionsRequest(client_software_name="bench"),
                                       response_type=ApiVersionsResponse)
                if resp.error_code != ErrorCode.NONE:
                    raise RuntimeError(f"ApiVersions {ErrorCode.name_of(resp.error_code)}")
                await authenticate(conn, config, args.timeout)
        except Exception as exc:
            failures[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1
            return
        durations.append(time.perf_counter() - start)

    async def connector() -> None:
        for _ in todo:
            await one()

    print("measure-start", flush=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(connector() for _ in range(args.concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print("measure-end", flush=True)
    await asyncio.gather(*(c.close() for c in held), return_exceptions=True)
    return {"clients": args.clients, "ok": len(durations), "wall_s": wall,
            "client_cpu_s": cpu, "durations_s": durations,
            "failures": dict(failures.most_common(5)),
            "failed": sum(failures.values())}


def worker_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"python -m bench.security {WORKER_FLAG}")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--protocol", required=True, choices=LISTENERS)
    p.add_argument("--mechanism", default=None)
    p.add_argument("--cafile", required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:  # a storm holds a socket per client
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    from bench.echo import run_loop

    result: dict[str, Any] = {}

    async def go() -> None:
        result.update(await connect_worker(args))

    run_loop(go())
    print(json.dumps(result), flush=True)
    return 0


@dataclass
class ConnectRun:
    result: dict[str, Any]
    usage: Usage
    start: float
    """perf_counter in this process when the worker said measure-start"""
    end: float


async def run_worker(s: Secured, protocol: str, mechanism: str | None, clients: int,
                     concurrency: int, timeout: float) -> ConnectRun:
    cmd = python_module_cmd(
        "bench.security", WORKER_FLAG, "--port", str(s.ports[protocol]), "--protocol",
        protocol, "--cafile", str(s.cafile), "--clients", str(clients), "--concurrency",
        str(concurrency), "--timeout", str(timeout),
        *(["--mechanism", mechanism] if mechanism else []))
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO_ROOT, env={**repo_env(), SASL_PASSWORD_ENV: PASSWORD},
        stdout=asyncio.subprocess.PIPE, preexec_fn=die_with_parent)
    assert proc.stdout is not None
    sampler = ProcSampler(s.broker.pid)
    usage: Usage | None = None
    result: dict[str, Any] | None = None
    start = end = 0.0
    async for raw in proc.stdout:
        line = raw.decode().strip()
        if line == "measure-start":
            start = time.perf_counter()
            sampler.start()
        elif line == "measure-end":
            usage = sampler.stop()
            end = time.perf_counter()
        elif line.startswith("{"):
            result = json.loads(line)
    if await proc.wait() != 0 or result is None or usage is None:
        raise BenchError(f"connect worker failed ({protocol} {mechanism})")
    return ConnectRun(result, usage, start, end)


def label_of(protocol: str, mechanism: str | None) -> str:
    return f"{protocol} {mechanism}" if mechanism else f"{protocol} (no SASL)"


async def connect_rates(s: Secured, args: argparse.Namespace) -> list[Figure]:
    clients = 10 if args.smoke else args.connect_clients
    runs: dict[str, list[ConnectRun]] = {label_of(p, m): [] for p, m in CONNECT_CASES}
    for r in range(args.warmup + args.rounds):
        for protocol, mechanism in CONNECT_CASES:
            run = await run_worker(s, protocol, mechanism, clients, args.concurrency,
                                   args.client_timeout_s)
            if run.result["failed"]:
                raise BenchError(f"{label_of(protocol, mechanism)}: {run.result['failed']} "
                                 f"clients failed: {run.result['failures']}")
            if r >= args.warmup:
                runs[label_of(protocol, mechanism)].append(run)
            await asyncio.sleep(0.2)  # the closed connections' teardown, off the window
    st = {"clients": clients, "concurrency": args.concurrency,
          "steps": "connect(+TLS), ApiVersions, SaslHandshake, SaslAuthenticate",
          "scram_iterations": 4096, "tls": s.tls}
    out: list[Figure] = []
    for label, rs in runs.items():
        out += [
            Figure(f"connect+auth rate {label}", "clients/s",
                   [x.result["ok"] / x.result["wall_s"] for x in rs], st),
            Figure(f"connect+auth p50 {label}", "ms",
                   [1000 * statistics.median(x.result["durations_s"]) for x in rs], st),
            Figure(f"broker CPU per client {label}", "ms",
                   [1000 * x.usage.cpu_percent / 100 * x.usage.seconds / x.result["ok"]
                    for x in rs], st),
            Figure(f"client CPU per client {label}", "ms",
                   [1000 * x.result["client_cpu_s"] / x.result["ok"] for x in rs], st),
        ]
    return out


# --- 3. the storm, with a group heartbeating through it ---------------------------------


@dataclass
class Probe:
    samples: list[tuple[float, float, int]] = field(default_factory=list)
    """(sent at, latency s, error code) per heartbeat; -1: connection lost"""
    lateness: list[tuple[float, float, int]] = field(default_factory=list)
    """(woke at, s later than asked, 0): the probe process's own scheduling delay"""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def probe_loop(members: list[Member], interval_s: float, probe: Probe) -> None:
    async def beat(m: Member) -> None:
        sent = time.perf_counter()
        try:
            r = await heartbeat(m, 0)
            code = r.error_code
        except Exception:
            code = -1
        probe.samples.append((sent, time.perf_counter() - sent, code))

    while not probe.stop.is_set():
        tick = time.perf_counter()
        await asyncio.gather(*(beat(m) for m in members))
        wake = tick + interval_s
        await asyncio.sleep(max(0.0, wake - time.perf_counter()))
        woke = time.perf_counter()
        probe.lateness.append((woke, max(0.0, woke - wake), 0))


def window(samples: list[tuple[float, float, int]], start: float, end: float
           ) -> list[tuple[float, float, int]]:
    return [x for x in samples if start <= x[0] <= end]


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[98]


async def storms(s: Secured, args: argparse.Namespace, setup: list[Connection]
                 ) -> list[Figure]:
    clients = 30 if args.smoke else args.storm_clients
    conn = await open_client(s, "SASL_SSL", "SCRAM-SHA-256")
    setup.append(conn)
    members = await join_members([conn], args.probe_members, args.probe_members, "probe",
                                 PROBE_SESSION_TIMEOUT_MS)
    probe = Probe()
    prober = asyncio.create_task(probe_loop(members, args.probe_interval_ms / 1000, probe))
    baseline_s = 0.5 if args.smoke else 2.0
    runs: list[tuple[ConnectRun, list[tuple[float, float, int]],
                     list[tuple[float, float, int]]]] = []
    late: list[float] = []
    try:
        for r in range(args.warmup + args.rounds):
            before_start = time.perf_counter()
            await asyncio.sleep(baseline_s)
            before = window(probe.samples, before_start, time.perf_counter())
            run = await run_worker(s, "SASL_SSL", "SCRAM-SHA-256", clients, clients,
                                   args.client_timeout_s)
            during = window(probe.samples, run.start, run.end)
            lags = window(probe.lateness, run.start, run.end)
            print(f"storm {r + 1}: {run.result['ok']}/{clients} in "
                  f"{run.result['wall_s']:.2f} s, failures {run.result['failures']}",
                  file=sys.stderr)
            if r >= args.warmup:
                runs.append((run, before, during))
                late.append(1000 * max((x[1] for x in lags), default=0.0))
            await asyncio.sleep(1.0)  # the broker drops the storm's connections
    finally:
        probe.stop.set()
        await prober
    st = {"clients": clients, "protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-256",
          "probe_members": args.probe_members, "probe_interval_ms": args.probe_interval_ms,
          "client_timeout_s": args.client_timeout_s, "tls": s.tls,
          "broker_args": " ".join(args.broker_arg) or "defaults"}
    failures = [x.result["failures"] for x, _, _ in runs if x.result["failed"]]
    durations = [[1000 * d for d in x.result["durations_s"]] or [float("nan")]
                 for x, _, _ in runs]
    # A storm shorter than one probe interval (a --smoke one can be) has no heartbeat
    # sent within it: such a round has no latency to report, rather than a made-up one.
    sampled = [d for _, _, d in runs if d]
    unsampled = None if sampled else (
        "no probe heartbeat was sent while the storm ran (it lasted under one "
        f"{args.probe_interval_ms} ms probe interval)")
    return [
        Figure("storm: time until all authenticated", "s",
               [x.result["wall_s"] for x, _, _ in runs], st,
               note=None if not failures else f"not all did: {failures[0]}"),
        Figure("storm: per-client p50", "ms", [statistics.median(d) for d in durations], st),
        Figure("storm: per-client p99", "ms", [p99(d) for d in durations], st),
        with_goal(Figure("storm: failed clients", "clients",
                         [float(x.result["failed"]) for x, _, _ in runs], st), "<= 0"),
        Figure("storm: broker CPU per authentication", "ms",
               [1000 * x.usage.cpu_percent / 100 * x.usage.seconds / max(1, x.result["ok"])
                for x, _, _ in runs], st,
               note="TLS handshake + SCRAM server side + ApiVersions, per client"),
        Figure("storm: broker CPU", "%", [x.usage.cpu_percent for x, _, _ in runs], st),
        Figure("storm: client CPU per authentication", "ms",
               [1000 * x.result["client_cpu_s"] / max(1, x.result["ok"])
                for x, _, _ in runs], st,
               note="all clients share one process: its TLS and PBKDF2 work is serial"),
        Figure("probe heartbeat max latency before storm", "ms",
               [1000 * max((x[1] for x in b), default=float("nan")) for _, b, _ in runs], st),
        Figure("probe heartbeat max latency during storm", "ms",
               [1000 * max(x[1] for x in d) for d in sampled], st, note=unsampled),
        Figure("probe process wake-up lateness max during storm", "ms", late, st,
               note="how late the probe's own timer fired: the share of the latency "
                    "that is the probing process waiting for a core, not the broker"),
        Figure("probe heartbeat p99 during storm", "ms",
               [1000 * p99([x[1] for x in d]) for d in sampled], st, note=unsampled),
        Figure("probe heartbeats answered during storm", "hb",
               [float(sum(1 for x in d if x[2] == 0)) for _, _, d in runs], st),
        with_goal(Figure("probe heartbeat errors during storm", "hb",
                         [float(sum(1 for x in d if x[2] != 0)) for _, _, d in runs], st),
                  "<= 0"),
    ]


# --- the run ----------------------------------------------------------------------------


async def measure(args: argparse.Namespace) -> list[Figure]:
    if args.smoke:
        args.members, args.connections = 30, 4
    setup: list[Connection] = []
    with tempfile.TemporaryDirectory(prefix="gw-bench-sec-") as tmp_name:
        tmp = Path(tmp_name)
        s = start_broker(tmp, args.broker_arg, args.key_type)
        try:
            s.tls = await tls_session(s)
            sides = await heartbeats(s, args, tmp, setup)
            out = heartbeat_figures(s, sides, args)
            out += await connect_rates(s, args)
            out += await storms(s, args, setup)
        finally:
            with contextlib.suppress(Exception):
                await close_connections(setup)
            s.broker.stop()
    return out


def run(args: argparse.Namespace) -> list[Figure]:
    return asyncio.run(measure(args))


main = bench_main("security", add_arguments, run, default_rounds=5, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER_FLAG]:
        sys.exit(worker_main(sys.argv[2:]))
    sys.exit(main(None))
