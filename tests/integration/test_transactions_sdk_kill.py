"""groupwire's SDK in a consume-transform-produce worker SIGKILLed in the middle of a
transaction (its output stored, its offsets sent) and started again with the same
transactional id: the new worker's start aborts what the dead one left open, and the
output read_committed holds every input exactly once, the group's offsets at the end."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from groupwire import Admin, Consumer, Producer, TopicPartition
from groupwire.broker.server import Broker

BOUND_S = 60
TOTAL = 300

WORKER = """
import asyncio, os, signal, sys
from groupwire import Consumer, Producer

bootstrap, source, sink, group, tid, stop_after = sys.argv[1:7]
stop_after = int(stop_after)

async def main():
    async with Consumer(bootstrap, group_id=group, isolation_level="read_committed",
                        enable_auto_commit=False, auto_offset_reset="earliest",
                        session_timeout_ms=3000, heartbeat_interval_ms=200) as consumer, \\
            Producer(bootstrap, transactional_id=tid, linger_ms=1) as producer:
        consumer.subscribe([source])
        commits = 0
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=25)
            if not batches:
                print("idle", flush=True)
                continue
            await producer.begin_transaction()
            for tp, records in batches.items():
                for r in records:
                    await producer.send(sink, b"out-" + r.value, partition=tp.partition)
            positions = {tp: await consumer.position(tp) for tp in batches}
            await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            if commits == stop_after:
                await producer.flush()
                print("mid-transaction", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # as a crash: nothing cleaned up
            await producer.commit_transaction()
            commits += 1
            print("committed", commits, flush=True)

asyncio.run(main())
"""


def _worker(bootstrap: str, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WORKER, bootstrap, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


async def _lines_until(proc: subprocess.Popen[str], wanted: str) -> None:
    assert proc.stdout is not None
    stdout = proc.stdout

    def read() -> None:
        for line in stdout:
            if line.startswith(wanted):
                return
        raise AssertionError(f"the worker ended before {wanted!r}")

    await asyncio.wait_for(asyncio.to_thread(read), BOUND_S)


async def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    """Everything a read_committed consumer reads of ``topic`` up to its stable end."""
    async with Consumer(bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        seen: list[bytes] = []
        while True:
            got = await consumer.getmany(timeout_ms=300)
            for records in got.values():
                seen.extend(r.value for r in records)
            if got:
                continue
            positions = [await consumer.position(tp) for tp in tps]
            ends = [consumer.last_stable_offset(tp) for tp in tps]  # None: not fetched yet
            if all(end is not None and at >= end
                   for at, end in zip(positions, ends, strict=True)):
                return seen


async def test_a_worker_killed_mid_transaction_and_restarted_writes_each_input_once(
        broker: Broker, bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["in", "out"], num_partitions=2)
    async with Producer(bootstrap) as plain:
        for i in range(TOTAL):
            await plain.send("in", b"r%03d" % i, partition=i % 2)
        await plain.flush()
    args = ["in", "out", "workers", "tx-worker"]
    first = _worker(bootstrap, [*args, "3"])
    try:
        await _lines_until(first, "mid-transaction")
        first.wait(10)
    finally:
        first.kill()
    assert first.returncode == -9
    second = _worker(bootstrap, [*args, "-1"])
    try:
        async with asyncio.timeout(BOUND_S):
            while len(await _read_committed(bootstrap, "out")) < TOTAL:
                await asyncio.sleep(0.2)
    finally:
        second.kill()
        second.wait(10)
    output = await _read_committed(bootstrap, "out")
    assert sorted(output) == sorted(b"out-r%03d" % i for i in range(TOTAL))
    async with Consumer(bootstrap, auto_offset_reset="earliest") as raw:
        raw.assign([TopicPartition("out", p) for p in range(2)])
        stored = 0
        for tp in raw.assignment():
            await raw.seek_to_end(tp)
            stored += await raw.position(tp)
    assert stored > TOTAL, "the killed transaction's output was never stored"
    offsets = await admin.list_consumer_group_offsets("workers")
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: TOTAL // 2,
                                                                    1: TOTAL // 2}
