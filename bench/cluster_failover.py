"""Cluster failover: SIGKILL of a group's coordinator, and of a partition leader.

Three brokers on one etcd (lease TTL 1 s), a topic with replication factor 3, a producer
in this process sending one record to every partition every few milliseconds with
acks=all, and a group of consumers in separate processes committing after every poll.

1. The broker coordinating the group is SIGKILLed. A member is consuming again once a
   commit it started after the kill has succeeded (the coordinator answers again: commits
   block the member's loop meanwhile) and it has then polled records. The figure is the
   slowest member; beside it, rebalances seen after the kill (members' revoke/assign/lost
   reports and the brokers' ``rebalance_started`` events for the group), which should be 0.
2. A broker leading partitions of the topic, never the group's coordinator, is SIGKILLed
   (preferred leaders are elected first, so it leads some). The figure is the time until
   every partition it led has acknowledged a record sent after the kill.

After each kill the broker is restarted with the same node id, port and data directory,
and the cluster settles (every broker live, every ISR full) before the next kill. The
brokers' log timestamps split each failover into the lease expiring (the new leader's
``became_leader``), the group load (``groups_loaded``) and the clients finding it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import functools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    BenchError,
    ClusterProcs,
    Figure,
    bench_main,
    etcd_missing,
    with_goal,
)
from bench.consumer_proc import Group

LEASE_TTL_MS = 1000
GOAL_P99 = f"<= {LEASE_TTL_MS / 1000 + 1:g}"
PARTITIONS = 6
CONSUMERS = 3
PRODUCE_EVERY_S = 0.02     # one record per partition this often
RESUME_TIMEOUT_S = 60.0
OFFSETS_TOPIC = "__consumer_offsets"
KAFKA_NOTE = ("Kafka, for comparison (its documented defaults, not measured here): a "
              "KRaft broker is declared dead after broker.session.timeout.ms = 9 s, then "
              "clients rediscover the new leader or coordinator (metadata refresh, "
              "retry.backoff.ms 100 ms)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--partitions", type=int, default=PARTITIONS)
    p.add_argument("--consumers", type=int, default=CONSUMERS)


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[98]


# --- the producer -------------------------------------------------------------------------


@dataclass
class Acks:
    """Per partition: (send time, ack time) of every acknowledged record."""

    by_partition: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    failed: int = 0
    notify: asyncio.Event = field(default_factory=asyncio.Event)

    def first_after(self, partition: int, t: float) -> float | None:
        """When the first record sent after ``t`` to ``partition`` was acknowledged."""
        done = [ack for sent, ack in self.by_partition.get(partition, []) if sent > t]
        return min(done) if done else None


async def producing(bootstrap: str, topic: str, partitions: int, acks: Acks,
                    stop: asyncio.Event) -> None:
    from groupwire.client import Producer

    def on_done(p: int, sent: float, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            acks.failed += 1
        else:
            acks.by_partition.setdefault(p, []).append((sent, time.monotonic()))
        acks.notify.set()

    async with Producer(bootstrap, linger_ms=0, acks="all") as producer:
        n = 0
        while not stop.is_set():
            for p in range(partitions):
                sent = time.monotonic()
                fut = await producer.send(topic, b"%d" % n, partition=p)
                fut.add_done_callback(functools.partial(on_done, p, sent))
            n += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PRODUCE_EVERY_S):
                    await stop.wait()


# --- questions to the cluster ---------------------------------------------------------------


async def coordinator_of(bootstrap: str, group: str) -> int:
    from groupwire.client.connection import Connection
    from groupwire.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

    for address in bootstrap.split(","):
        host, port = address.rsplit(":", 1)
        with contextlib.suppress(OSError, Exception):
            conn = await Connection.open(host, int(port), client_id="bench")
            try:
                r = await conn.send(FindCoordinatorRequest(key=group),
                                    response_type=FindCoordinatorResponse)
            finally:
                await conn.close()
            if r.error_code == 0:
                return int(r.node_id)
    raise BenchError(f"no coordinator found for {group}")


async def leaders_of(bootstrap: str, topic: str) -> dict[int, int]:
    from groupwire.client import Admin

    async with Admin(bootstrap) as admin:
        return {p.partition: p.leader for p in await admin.describe_partitions([topic])}


async def offsets_partition_of(bootstrap: str, group: str, coordinator: int) -> int | None:
    """The __consumer_offsets partition holding ``group`` (None if ``coordinator`` does not
    lead it: then the log steps of the breakdown are left out)."""
    from groupwire.client import Admin
    from groupwire.protocol.hashing import coordinator_partition

    async with Admin(bootstrap) as admin:
        parts = await admin.describe_partitions([OFFSETS_TOPIC])
    p = coordinator_partition(group, len(parts))
    return p if parts[p].leader == coordinator else None


# --- log timestamps -------------------------------------------------------------------------


def log_time(line: dict[str, Any]) -> float | None:
    ts = line.get("timestamp")
    if not isinstance(ts, str):
        return None
    with contextlib.suppress(ValueError):
        return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    return None


def first_log(cluster: ClusterProcs, after_wall: float,
              match: Callable[[dict[str, Any]], bool]) -> float | None:
    """Wall time of the first log line of any broker after ``after_wall`` that matches."""
    found = [t for lines in cluster.logs().values() for line in lines
             if (t := log_time(line)) is not None and t >= after_wall and match(line)]
    return min(found) if found else None


# --- 1: the coordinator ---------------------------------------------------------------------


def rebalances_after(group: Group, t: float) -> list[str]:
    """Members' revoke/assign/lost reports after ``t``: each is a rebalance they saw."""
    return [f"{proc.name} {e['e']} {e['p']} at +{float(e['t']) - t:.3f} s"
            for proc in group.procs for e in proc.events
            if e["e"] in ("assigned", "revoked", "lost") and float(e["t"]) > t]


def member_resumed(events: list[dict[str, Any]], mark: int, t_kill: float) -> float | None:
    """When a member polled records after a commit it began after the kill succeeded."""
    committed: float | None = None
    for e in events[mark:]:
        if committed is None:
            if e["e"] == "commit" and float(e["t0"]) > t_kill:
                committed = float(e["t"])
        elif e["e"] == "batch" and float(e["t"]) >= committed:
            return float(e["t"])
    return None


@dataclass
class Kill:
    """One kill: seconds from the SIGKILL to each step."""

    victim: int
    resumed: float
    steps: dict[str, float | None]
    t_kill: float = 0.0
    wall_kill: float = 0.0
    rebalances: int = 0


async def kill_coordinator(cluster: ClusterProcs, group: Group, group_id: str,
                           topic: str) -> Kill:
    coord = await coordinator_of(cluster.bootstrap, group_id)
    offsets_p = await offsets_partition_of(cluster.bootstrap, group_id, coord)
    led = [p for p, leader in (await leaders_of(cluster.bootstrap, topic)).items()
           if leader == coord]
    marks = [len(p.events) for p in group.procs]
    t_kill, wall_kill = cluster.kill(coord)
    resumed: dict[str, float] = {}
    part_first: dict[int, float] = {}

    def done() -> bool:
        for proc, mark in zip(group.procs, marks, strict=True):
            if proc.name not in resumed:
                t = member_resumed(proc.events, mark, t_kill)
                if t is not None:
                    resumed[proc.name] = t
            for e in proc.events[mark:]:
                if e["e"] == "batch" and float(e["t"]) > t_kill:
                    for p in e["p"]:
                        part_first.setdefault(int(p), float(e["t"]))
        return len(resumed) == len(group.procs)

    try:
        await group.until(done, RESUME_TIMEOUT_S, f"members after killing coordinator {coord}")
    except TimeoutError as exc:
        raise BenchError(f"{exc}: resumed {sorted(resumed)}") from exc
    t_done = max(resumed.values())
    # the partitions the coordinator led stall too, until their new leaders: wait for them
    # as well before the restart, so the next kill starts from a cluster that flows
    with contextlib.suppress(TimeoutError):
        await group.until(lambda: (done(), set(led) <= set(part_first))[1], RESUME_TIMEOUT_S,
                          "partitions after the kill")
    steps: dict[str, float | None] = {}
    if offsets_p is not None:
        elected = first_log(cluster, wall_kill, lambda x: x.get("event") == "became_leader"
                            and x.get("topic") == OFFSETS_TOPIC
                            and x.get("partition") == offsets_p)
        loaded = first_log(cluster, wall_kill, lambda x: x.get("event") == "groups_loaded"
                           and x.get("partition") == offsets_p)
        steps["new coordinator elected (became_leader)"] = (
            None if elected is None else elected - wall_kill)
        steps["groups loaded (groups_loaded)"] = None if loaded is None else loaded - wall_kill
    steps["every partition consumed again"] = (
        max(part_first.values()) - t_kill if set(part_first) >= set(range(group.partitions))
        else None)
    return Kill(coord, t_done - t_kill, steps, t_kill, wall_kill)


def group_rebalances_logged(cluster: ClusterProcs, group_id: str, after_wall: float) -> int:
    return sum(1 for lines in cluster.logs().values() for x in lines
               if x.get("event") == "group_event" and x.get("type") == "rebalance_started"
               and x.get("group_id") == group_id and (log_time(x) or 0) >= after_wall)


# --- 2: a partition leader ------------------------------------------------------------------


async def kill_leader(cluster: ClusterProcs, acks: Acks, topic: str, group_id: str,
                      turn: int) -> Kill:
    from groupwire.client import Admin, TopicPartition

    async with Admin(cluster.bootstrap) as admin:  # spread leaders again
        with contextlib.suppress(Exception):
            await admin.elect_leaders([TopicPartition(topic, p) for p in range(len(
                await leaders_of(cluster.bootstrap, topic)))])
    await cluster.wait_settled()
    coord = await coordinator_of(cluster.bootstrap, group_id)
    leaders = await leaders_of(cluster.bootstrap, topic)
    candidates = sorted({n for n in leaders.values() if n != coord and n > 0})
    if not candidates:
        raise BenchError(f"every partition of {topic} is led by the coordinator {coord}")
    victim = candidates[turn % len(candidates)]
    lost = [p for p, n in leaders.items() if n == victim]
    t_kill, wall_kill = cluster.kill(victim)
    deadline = time.monotonic() + RESUME_TIMEOUT_S
    while True:
        acks.notify.clear()
        firsts = {p: acks.first_after(p, t_kill) for p in lost}
        if all(v is not None for v in firsts.values()):
            break
        if time.monotonic() > deadline:
            raise BenchError(f"partitions {lost} took no acks=all write after the kill")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                await acks.notify.wait()
    resumed = max(v for v in firsts.values() if v is not None) - t_kill
    def elected(p: int) -> Callable[[dict[str, Any]], bool]:
        return lambda x: (x.get("event") == "became_leader" and x.get("topic") == topic
                          and x.get("partition") == p)

    elections = [first_log(cluster, wall_kill, elected(p)) for p in lost]
    known = [e - wall_kill for e in elections if e is not None]
    return Kill(victim, resumed, {"new leader elected (became_leader)":
                                  max(known) if len(known) == len(lost) else None},
                t_kill, wall_kill)


# --- the run --------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, kills: int, warmup: int,
                  ) -> tuple[list[Kill], list[Kill], int]:
    topic, group_id = "cluster-failover", "cluster-failover-group"
    cluster = ClusterProcs(brokers=3, lease_ttl_ms=LEASE_TTL_MS)
    with cluster:
        await cluster.wait_settled()
        from groupwire.client import Admin

        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics(topic, num_partitions=args.partitions,
                                      replication_factor=3)
        await cluster.wait_settled()
        acks = Acks()
        stop = asyncio.Event()
        producer = asyncio.ensure_future(
            producing(cluster.bootstrap, topic, args.partitions, acks, stop))
        group = Group(cluster.bootstrap, topic, group_id, args.partitions, "--report-commits")
        coord_kills: list[Kill] = []
        leader_kills: list[Kill] = []
        logged_rebalances = 0
        try:
            for _ in range(args.consumers):
                await group.add()
            def steady() -> bool:  # every member holds partitions and consumes them
                return group.settled() and all(p.owned() for p in group.procs)

            for turn in range(warmup + kills):
                await group.until(steady, RESUME_TIMEOUT_S, "the group to settle")
                await cluster.wait_settled()
                await group.until(steady, RESUME_TIMEOUT_S, "the group to settle")
                k = await kill_coordinator(cluster, group, group_id, topic)
                cluster.restart(k.victim)
                await cluster.wait_settled()
                await group.until(steady, RESUME_TIMEOUT_S, "the group to settle")
                seen = rebalances_after(group, k.t_kill)
                before_wall = k.wall_kill
                k.rebalances = len(seen)
                n_logged = group_rebalances_logged(cluster, group_id, before_wall)
                print(f"coordinator kill {turn}: node {k.victim}, resumed "
                      f"{k.resumed:.3f} s, steps {k.steps}, rebalances {k.rebalances} "
                      f"(logged {n_logged}) {seen}", file=sys.stderr, flush=True)
                if turn >= warmup:
                    coord_kills.append(k)
                    logged_rebalances += n_logged
            for turn in range(warmup + kills):
                k = await kill_leader(cluster, acks, topic, group_id, turn)
                cluster.restart(k.victim)
                await cluster.wait_settled()
                print(f"leader kill {turn}: node {k.victim}, acks=all again after "
                      f"{k.resumed:.3f} s, steps {k.steps}", file=sys.stderr, flush=True)
                if turn >= warmup:
                    leader_kills.append(k)
        except TimeoutError as exc:
            raise BenchError(str(exc)) from exc
        finally:
            stop.set()
            await group.stop()
            with contextlib.suppress(Exception):
                await producer
    return coord_kills, leader_kills, logged_rebalances


def step_figures(prefix: str, kills: list[Kill], settings: dict[str, Any]) -> list[Figure]:
    names = list(dict.fromkeys(n for k in kills for n in k.steps))
    out = []
    for n in names:
        values = [v for k in kills if (v := k.steps.get(n)) is not None]
        note = ("seconds from the SIGKILL, from the brokers' log timestamps" if "(" in n
                else None)
        if not values:  # e.g. a partition whose records did not come back within the wait
            note = f"not seen in any of the {len(kills)} kills within the wait"
        out.append(Figure(f"{prefix}: {n}", "s", values, settings, note=note))
    return out


def run(args: argparse.Namespace) -> list[Figure]:
    if (why := etcd_missing()) is not None:
        raise BenchError(f"skipped: {why}")
    kills, warmup = (1, 0) if args.smoke else (args.rounds, args.warmup)
    if args.smoke:
        args.partitions, args.consumers = 3, 2
    coord, leader, logged = asyncio.run(measure(args, kills, warmup))
    settings = {"brokers": 3, "replication_factor": 3, "min_insync_replicas": 2,
                "lease_ttl_ms": LEASE_TTL_MS, "partitions": args.partitions,
                "consumers": args.consumers, "kills": kills,
                "produce_every_ms": PRODUCE_EVERY_S * 1000, "acks": "all",
                "etcd": "--election-timeout 500 --heartbeat-interval 100"}
    resumed = [k.resumed for k in coord]
    figs = [
        Figure("coordinator kill: every member consuming again", "s", resumed, settings),
        with_goal(Figure("coordinator kill: every member consuming again p99", "s",
                         [p99(resumed)], settings, note=KAFKA_NOTE), GOAL_P99),
        with_goal(Figure("coordinator kill: rebalances seen by members", "rebalances",
                         [float(sum(k.rebalances for k in coord))], settings,
                         note="revoke/assign/lost reports after the kills, all kills "
                              "together"), "<= 0"),
        with_goal(Figure("coordinator kill: rebalance_started events logged", "rebalances",
                         [float(logged)], settings,
                         note="the group's rebalance_started events in every broker's log "
                              "after the kills, all kills together"), "<= 0"),
        *step_figures("coordinator kill", coord, settings),
    ]
    leader_resumed = [k.resumed for k in leader]
    figs += [
        Figure("leader kill: acks=all produce succeeding again", "s", leader_resumed,
               settings),
        with_goal(Figure("leader kill: acks=all produce succeeding again p99", "s",
                         [p99(leader_resumed)], settings, note=KAFKA_NOTE), GOAL_P99),
        *step_figures("leader kill", leader, settings),
    ]
    return figs


main = bench_main("cluster_failover", add_arguments, run, default_rounds=10, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
