"""Cluster throughput: acks=all with RF 3 against RF 1, heartbeats/s of 2 brokers against 1.

1. Three brokers on one etcd, two topics with one partition per broker: one with
   replication factor 3, one with 1 (``--min-insync-replicas 1``, which an RF 1 topic
   needs to take acks=all at all; acks=all still waits for every in-sync replica). The
   same producer (this process, acks=all, 100-byte records) fills each in turn,
   alternating every round; the figure is RF 3 ÷ RF 1 per round.
2. Two clusters on one etcd, kept side by side: one broker, and two brokers (the offsets
   topic's replication factor is the broker count, so its 50 leaders, and the groups
   with them, are spread over both by the placement). The same members (groups of 10) are
   formed on each, every member on its group's coordinator, and the same load generator
   (bench/loadgen.py, as in the heartbeat benchmark: 50 connections, 16 heartbeats in
   flight each, shared over the brokers by their members) drives one cluster and then the
   other, alternating every round. The figure is heartbeats/s of two brokers ÷ one.
   A one-broker *cluster*, not single-broker mode: both sides then run the same broker
   code (etcd lease, metadata watch, coordinator per offsets partition), so the ratio is
   what a second broker adds, not what cluster mode costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    BenchError,
    ClusterProcs,
    EtcdProc,
    Figure,
    ProcSampler,
    Usage,
    bench_main,
    die_with_parent,
    etcd_missing,
    python_module_cmd,
    repo_env,
    with_goal,
)

GOAL_REPLICATION = ">= 0.5"
GOAL_SCALING = ">= 1.6"
RECORD_BYTES = 100
VALUE = bytes(range(RECORD_BYTES))
LEASE_TTL_MS = 1000
OFFSETS_TOPIC = "__consumer_offsets"
SESSION_TIMEOUT_MS = 300_000  # members idle while the other cluster is measured stay
SETTLE_TIMEOUT_S = 120.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=200_000, help="records per produce phase")
    p.add_argument("--seconds", type=float, default=20.0, help="time limit per produce phase")
    p.add_argument("--members", type=int, default=2000, help="heartbeating members")
    p.add_argument("--group-size", type=int, default=10)
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--depth", type=int, default=16)
    p.add_argument("--hb-seconds", type=float, default=3.0, help="measured heartbeat window")


# --- 1: replication factor 3 against 1 ------------------------------------------------------


async def produce_phase(producer: Any, topic: str, partitions: int, records: int,
                        limit_s: float) -> float:
    """Records/s of one phase, flushed (every record acknowledged by the ISR)."""
    t0 = time.monotonic()
    sent = 0
    futures = []
    while sent < records:
        futures.append(await producer.send(topic, VALUE, partition=sent % partitions))
        sent += 1
        if not sent % 1000 and time.monotonic() - t0 > limit_s:
            break
    await producer.flush()
    rate = sent / (time.monotonic() - t0)
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        raise BenchError(f"{topic}: {len(failed)} of {sent} records failed: {failed[0]}")
    return rate


async def replication(args: argparse.Namespace, etcd: EtcdProc, records: int, limit_s: float,
                      ) -> tuple[list[float], list[float]]:
    from groupwire.client import Admin, Producer

    partitions = 3
    rf3: list[float] = []
    rf1: list[float] = []
    # min ISR 1: an RF 1 topic refuses acks=all under Kafka's default of 2 here; acks=all
    # still waits for every in-sync replica, so RF 3 waits for all three
    with ClusterProcs(brokers=3, lease_ttl_ms=LEASE_TTL_MS, etcd=etcd,
                      extra=("--min-insync-replicas", "1"),
                      name=f"bench-rf-{time.time_ns()}") as cluster:
        await cluster.wait_settled()
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics("rf3", num_partitions=partitions, replication_factor=3)
            await admin.create_topics("rf1", num_partitions=partitions, replication_factor=1)
        await cluster.wait_settled(topics=["rf3", "rf1"])
        async with Producer(cluster.bootstrap, acks="all") as producer:
            await producer.partitions_for("rf3")
            await producer.partitions_for("rf1")
            for r in range(args.warmup + args.rounds):
                order = [("rf3", rf3), ("rf1", rf1)]
                if r % 2:
                    order.reverse()
                for topic, out in order:
                    rate = await produce_phase(producer, topic, partitions, records, limit_s)
                    print(f"round {r}: {topic} {rate:,.0f} records/s", file=sys.stderr,
                          flush=True)
                    if r >= args.warmup:
                        out.append(rate)
    return rf3, rf1


# --- 2: heartbeats/s, two brokers against one -----------------------------------------------


@dataclass
class HbCluster:
    label: str
    cluster: ClusterProcs
    members_file: Path | None = None
    groups_per_node: dict[int, int] = field(default_factory=dict)
    conns: list[Any] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    loadgen_cpu: list[float] = field(default_factory=list)


async def offsets_leaders(cluster: ClusterProcs) -> dict[int, int]:
    """Leader of each offsets partition, once the controller has created the topic."""
    from groupwire.client import Admin

    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    async with Admin(cluster.bootstrap) as admin:
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                parts = await admin.describe_partitions([OFFSETS_TOPIC])
                if parts and all(p.leader > 0 for p in parts):
                    return {p.partition: p.leader for p in parts}
            await asyncio.sleep(0.1)
    raise BenchError(f"{OFFSETS_TOPIC} of {cluster.name} never had every leader")


async def coordinators_ready(members: list[Any]) -> None:
    """Until each group's coordinator answers for it: the offsets topic's leaders are in
    the metadata a moment before they have loaded their partitions."""
    from groupwire.protocol.errors import ErrorCode
    from groupwire.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse

    firsts = {m.group_id: m for m in members}
    waiting = sorted(firsts)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while waiting:
        if time.monotonic() > deadline:
            raise BenchError(f"no coordinator answers for {len(waiting)} groups")
        answers = await asyncio.gather(*(
            firsts[g].conn.send(DescribeGroupsRequest(groups=[g]),
                                response_type=DescribeGroupsResponse) for g in waiting))
        waiting = [g for g, r in zip(waiting, answers, strict=True)
                   if r.groups[0].error_code != ErrorCode.NONE]
        if waiting:
            await asyncio.sleep(0.1)


async def form_members(hb: HbCluster, args: argparse.Namespace, tmp: Path) -> None:
    """Every group formed on its coordinator, with connections kept open (their members
    stay); the load generator's members file names each member's broker port."""
    from bench.members import (
        SETUP_CONNECTIONS,
        form_groups,
        new_members,
        open_connections,
    )
    from groupwire.client import Admin
    from groupwire.protocol.hashing import coordinator_partition

    cluster = hb.cluster
    leaders = await offsets_leaders(cluster)
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics("bench", num_partitions=args.group_size,
                                  replication_factor=1, exist_ok=True)
    await cluster.wait_settled()
    conns = {node: await open_connections(b.port, SETUP_CONNECTIONS)
             for node, b in cluster.nodes.items()}
    hb.conns = [c for cs in conns.values() for c in cs]
    everyone = []
    rows = []
    for g in range(max(1, args.members // args.group_size)):
        group_id = f"hb-{g}"
        node = leaders[coordinator_partition(group_id, len(leaders))]
        hb.groups_per_node[node] = hb.groups_per_node.get(node, 0) + 1
        ms = new_members(group_id, args.group_size, conns[node], first=g,
                         session_timeout_ms=SESSION_TIMEOUT_MS)
        everyone += ms
        rows += [(m, cluster.nodes[node].port) for m in ms]
    await coordinators_ready(everyone)
    batch = 40 * args.group_size
    for i in range(0, len(everyone), batch):
        await form_groups(everyone[i:i + batch], partitions=args.group_size)
    hb.members_file = tmp / f"members-{hb.label}.json"
    hb.members_file.write_text(json.dumps(
        [[m.group_id, m.member_id, m.generation_id, port] for m, port in rows]))


async def drive(hb: HbCluster, args: argparse.Namespace, warmup_s: float, seconds: float,
                ) -> tuple[dict[str, Any], list[Usage]]:
    """One load generator run; every broker of the cluster sampled over the window."""
    assert hb.members_file is not None
    first_port = next(iter(hb.cluster.nodes.values())).port
    cmd = python_module_cmd(
        "bench.loadgen", "--port", str(first_port), "--members", str(hb.members_file),
        "--connections", str(args.connections), "--depth", str(args.depth),
        "--warmup-s", str(warmup_s), "--seconds", str(seconds))
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO_ROOT, env=repo_env(), stdout=asyncio.subprocess.PIPE,
        preexec_fn=die_with_parent)
    assert proc.stdout is not None
    samplers = [ProcSampler(b.pid) for b in hb.cluster.nodes.values()]
    usage: list[Usage] = []
    result: dict[str, Any] | None = None
    async for raw in proc.stdout:
        line = raw.decode().strip()
        if line == "measure-start":
            for s in samplers:
                s.start()
        elif line == "measure-end":
            usage = [s.stop() for s in samplers]
        elif line.startswith("{"):
            result = json.loads(line)
    if await proc.wait() != 0 or result is None or not usage:
        raise BenchError(f"load generator failed against {hb.label}")
    if result["bad"] > 0.01 * max(1, result["good"]):
        raise BenchError(f"{hb.label}: {result['bad']} error answers of "
                         f"{result['good'] + result['bad']}, first: {result['first_bad']}")
    return result, usage


async def heartbeats(args: argparse.Namespace, etcd: EtcdProc, seconds: float,
                     warmup_s: float) -> list[HbCluster]:
    from bench.members import close_connections

    def extra(n: int) -> tuple[str, ...]:
        return ("--offsets-topic-replication-factor", str(n), "--min-insync-replicas", "1",
                "--default-replication-factor", "1")

    sides = [HbCluster("1 broker", ClusterProcs(brokers=1, lease_ttl_ms=LEASE_TTL_MS,
                                                etcd=etcd, extra=extra(1),
                                                name=f"bench-hb1-{time.time_ns()}")),
             HbCluster("2 brokers", ClusterProcs(brokers=2, lease_ttl_ms=LEASE_TTL_MS,
                                                 etcd=etcd, extra=extra(2),
                                                 name=f"bench-hb2-{time.time_ns()}"))]
    with tempfile.TemporaryDirectory(prefix="gw-bench-chb-") as tmp:
        try:
            for hb in sides:
                hb.cluster.start()
                await form_members(hb, args, Path(tmp))
                print(f"{hb.label}: groups per coordinator {hb.groups_per_node}",
                      file=sys.stderr, flush=True)
            for r in range(args.warmup + args.rounds):
                order = sides if r % 2 == 0 else sides[::-1]
                for hb in order:
                    res, usage = await drive(hb, args, warmup_s, seconds)
                    print(f"round {r}: {hb.label} {res['per_second']:,.0f} hb/s, broker CPU "
                          f"{[round(u.cpu_percent) for u in usage]} %, load generator "
                          f"{res['loadgen_cpu_percent']:.0f} %", file=sys.stderr, flush=True)
                    if r >= args.warmup:
                        hb.rates.append(res["per_second"])
                        hb.cpu.append(sum(u.cpu_percent for u in usage))
                        hb.loadgen_cpu.append(res["loadgen_cpu_percent"])
        finally:
            for hb in sides:
                with contextlib.suppress(Exception):
                    await close_connections(hb.conns)
                hb.cluster.stop()
    return sides


# --- the run --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> list[Figure]:
    if (why := etcd_missing()) is not None:
        raise BenchError(f"skipped: {why}")
    records, limit_s, seconds, warmup_s = args.records, args.seconds, args.hb_seconds, 0.5
    if args.smoke:
        records, limit_s, seconds, warmup_s = 2000, 5.0, 0.3, 0.1
        args.members, args.connections = 40, 4

    async def main() -> tuple[tuple[list[float], list[float]], list[HbCluster]]:
        with EtcdProc() as etcd:
            rep = await replication(args, etcd, records, limit_s)
            hbs = await heartbeats(args, etcd, seconds, warmup_s)
        return rep, hbs

    (rf3, rf1), (one, two) = asyncio.run(main())
    rep_settings = {"brokers": 3, "partitions": 3, "record_bytes": RECORD_BYTES,
                    "records": records, "acks": "all", "min_insync_replicas": 1,
                    "producer": "groupwire Producer, defaults (linger 5 ms, 1 MiB batches)"}
    hb_settings = {"members": args.members, "group_size": args.group_size,
                   "connections": args.connections, "depth": args.depth,
                   "seconds": seconds, "lease_ttl_ms": LEASE_TTL_MS,
                   "groups_per_broker_2": {str(k): v for k, v in
                                           sorted(two.groups_per_node.items())},
                   "baseline": "1-broker cluster (same etcd, same broker code)"}
    return [
        Figure("acks=all RF 3 records/s", "rec/s", rf3, rep_settings),
        Figure("acks=all RF 1 records/s", "rec/s", rf1, rep_settings),
        with_goal(Figure("ratio RF 3 / RF 1", "ratio",
                         [a / b for a, b in zip(rf3, rf1, strict=True)], rep_settings),
                  GOAL_REPLICATION),
        Figure("heartbeats/s 1 broker", "hb/s", one.rates, hb_settings),
        Figure("heartbeats/s 2 brokers", "hb/s", two.rates, hb_settings),
        with_goal(Figure("ratio 2 brokers / 1 broker", "ratio",
                         [b / a for a, b in zip(one.rates, two.rates, strict=True)],
                         hb_settings), GOAL_SCALING),
        Figure("heartbeats per broker CPU-second 1 broker", "hb/cpu-s",
               [r / max(c / 100, 1e-3) for r, c in zip(one.rates, one.cpu, strict=True)],
               hb_settings),
        Figure("heartbeats per broker CPU-second 2 brokers", "hb/cpu-s",
               [r / max(c / 100, 1e-3) for r, c in zip(two.rates, two.cpu, strict=True)],
               hb_settings, note="about the same as one broker's: a second broker costs "
                                 "nothing per heartbeat, so the ratio is the CPU it gets"),
        Figure("broker CPU 1 broker", "%", one.cpu, hb_settings),
        Figure("broker CPU 2 brokers (sum)", "%", two.cpu, hb_settings,
               note="200 would be both cores, with nothing left for the load generator"),
        Figure("load generator CPU 1 broker", "%", one.loadgen_cpu, hb_settings),
        Figure("load generator CPU 2 brokers", "%", two.loadgen_cpu, hb_settings),
    ]


main = bench_main("cluster_throughput", add_arguments, run, default_rounds=5,
                  default_warmup=1, description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
