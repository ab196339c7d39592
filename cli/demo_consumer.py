"""One consumer process of ``groupwire demo``: consume, report, commit, until SIGTERM.

Each batch is reported on stdout as ``{"name", "records": [[partition, offset], ...]}``
before it is committed, so a consumer killed between the two shows up as a duplicate,
never as a loss.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

from groupwire.client.consumer import Consumer
from groupwire.client.errors import CommitFailedError, RebalanceInProgressError


async def consume(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    consumer = Consumer(
        args.bootstrap, group_id=args.group, client_id=args.name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 10))
    async with consumer:
        consumer.subscribe([args.topic])
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            records = [[r.partition, r.offset] for rs in batches.values() for r in rs]
            if not records:
                continue
            sys.stdout.write(json.dumps({"name": args.name, "records": records}) + "\n")
            sys.stdout.flush()
            # if the partitions moved on, their next owner re-reads from the last commit
            with contextlib.suppress(CommitFailedError, RebalanceInProgressError):
                await consumer.commit()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m groupwire.cli.demo_consumer")
    parser.add_argument("--bootstrap", required=True, help="broker HOST:PORT")
    parser.add_argument("--group", required=True, help="consumer group")
    parser.add_argument("--topic", required=True, help="topic to consume")
    parser.add_argument("--name", default="demo-consumer", help="client id")
    parser.add_argument("--session-timeout-ms", type=int, default=10000,
                        help="session timeout (default 10000)")
    asyncio.run(consume(parser.parse_args()))


if __name__ == "__main__":
    main()
