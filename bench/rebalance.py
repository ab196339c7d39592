"""Benchmark 2: rebalance latency against group size (initial rebalance delay 0).

Members are bare protocol members multiplexed over a few connections, each behaving as a
consumer does: join, sync, long-poll heartbeat, re-join when told. Two figures per size:
from the last member's JoinGroup (the one with its id, after KIP-394's first round trip)
to every member holding its SyncGroup answer; and from one member's LeaveGroup to every
remaining member holding its answer for the next generation (the group Stable again).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time

from bench.common import BenchError, BrokerProc, Figure, bench_main, with_goal
from bench.members import (
    Member,
    Tracker,
    close_connections,
    consume_membership,
    create_topic,
    get_member_ids,
    new_members,
    open_connections,
    settled,
)
from groupwire.client.connection import ConnectionClosedError
from groupwire.protocol.messages import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity

GOAL_MS = "< 1000"
GOAL_SIZE = 1000
PARTITIONS = 64
SESSION_TIMEOUT_MS = 30_000
HB_WAIT_MS = 5_000
MEMBERS_PER_CONNECTION = 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default="10,100,1000", help="group sizes, comma-separated")
    p.add_argument("--members-per-connection", type=int, default=MEMBERS_PER_CONNECTION,
                   help="members multiplexed over one connection (the broker parks at most "
                        "--max-in-flight-requests, 128, joins per connection)")


async def one_group(port: int, group_id: str, size: int, connections: int,
                    ) -> tuple[float, float]:
    """(join to all synced, leave to all synced again), in ms, for a fresh group."""
    conns = await open_connections(port, connections)
    members = new_members(group_id, size, conns, session_timeout_ms=SESSION_TIMEOUT_MS)
    stops = {id(m): asyncio.Event() for m in members}
    tasks: list[asyncio.Task[None]] = []
    try:
        await get_member_ids(members)
        tracker = Tracker({group_id: size})
        tasks = [asyncio.create_task(consume_membership(
            m, PARTITIONS, tracker, HB_WAIT_MS, stops[id(m)])) for m in members]
        await asyncio.sleep(0)  # every member's task has now written its JoinGroup
        t0 = time.perf_counter()
        await settled(tracker, tasks)
        join_ms = (tracker.last_synced_at - t0) * 1000

        leaver = next(m for m in reversed(members) if not m.is_leader)
        tracker.expect({group_id: size - 1})
        stops[id(leaver)].set()
        t0 = time.perf_counter()
        await leaver.conn.send(LeaveGroupRequest(
            group_id=group_id, members=[MemberIdentity(member_id=leaver.member_id)]),
            response_type=LeaveGroupResponse)
        await settled(tracker, tasks)
        leave_ms = (max(tracker.last_synced_at, t0) - t0) * 1000
        return join_ms, leave_ms
    finally:
        for ev in stops.values():
            ev.set()
        await leave_all(members)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                   HB_WAIT_MS / 1000 + 2)
        await close_connections(conns)


async def leave_all(members: list[Member]) -> None:
    """One LeaveGroup for everyone left, so the next group is measured on a quiet broker."""
    if not members:
        return
    with contextlib.suppress(ConnectionClosedError):
        await members[0].conn.send(LeaveGroupRequest(
            group_id=members[0].group_id,
            members=[MemberIdentity(member_id=m.member_id) for m in members if m.member_id]),
            response_type=LeaveGroupResponse)


def connections_for(members: int, per_connection: int) -> int:
    return max(1, math.ceil(members / per_connection))


async def measure(args: argparse.Namespace) -> list[Figure]:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.smoke:
        sizes = [5, 20]
    if not sizes or min(sizes) < 2:
        raise BenchError("--sizes: every group needs at least 2 members (one of them leaves)")
    joins: dict[int, list[float]] = {n: [] for n in sizes}
    leaves: dict[int, list[float]] = {n: [] for n in sizes}
    with BrokerProc(extra=("--group-initial-rebalance-delay-ms", "0")) as broker:
        setup = await open_connections(broker.port, 1)
        await create_topic(setup[0], PARTITIONS)
        await close_connections(setup)
        for r in range(args.warmup + args.rounds):
            for n in sizes:
                j, lv = await one_group(broker.port, f"rb-{r}-{n}", n,
                                        connections_for(n, args.members_per_connection))
                if r >= args.warmup:
                    joins[n].append(j)
                    leaves[n].append(lv)
    out: list[Figure] = []
    for n in sizes:
        st = {"members": n, "connections": connections_for(n, args.members_per_connection),
              "initial_delay_ms": 0,
              "partitions": PARTITIONS}
        join = Figure(f"join to all synced N={n}", "ms", joins[n], st)
        leave = Figure(f"leave to stable N={n}", "ms", leaves[n], st)
        if n == GOAL_SIZE:
            with_goal(join, GOAL_MS)
            with_goal(leave, GOAL_MS)
        out += [join, Figure(f"join per member N={n}", "us/member",
                             [v * 1000 / n for v in joins[n]], st),
                leave, Figure(f"leave per member N={n}", "us/member",
                              [v * 1000 / n for v in leaves[n]], st)]
    return out


def run(args: argparse.Namespace) -> list[Figure]:
    return asyncio.run(measure(args))


main = bench_main("rebalance", add_arguments, run, default_rounds=5, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
