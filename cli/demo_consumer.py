"""One consumer process of ``groupwire demo``: consume, report, commit, until stopped.

Each batch is reported on stdout as ``{"name", "records": [[partition, offset], ...]}``
before it is committed, so a consumer killed between the two shows up as a duplicate,
never as a loss. SIGTERM and SIGINT stop it quietly (it leaves its group); with
``--stop-on-stdin-eof`` so does the end of stdin, a pipe from the demo, which closes
however the demo ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading

from groupwire.cli.child_security import security_from_env
from groupwire.client.consumer import Consumer
from groupwire.client.errors import CommitFailedError, RebalanceInProgressError

ORPHAN_EXIT_S = 5.0
"""After stdin closes: time to leave the group before the process exits regardless."""


async def consume(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.stop_on_stdin_eof:
        def watch_stdin() -> None:
            # os.read, not sys.stdin: a buffered reader's lock held by a daemon thread
            # aborts the interpreter at exit
            with contextlib.suppress(OSError):
                while os.read(0, 4096):
                    pass
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(stop.set)
            # the demo is gone, and maybe its broker: leaving the group may never finish
            threading.Timer(ORPHAN_EXIT_S, os._exit, (1,)).start()

        threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()
    consumer = Consumer(
        args.bootstrap, group_id=args.group, client_id=args.name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 10),
        security=security_from_env())  # the demo's settings, from the environment
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
    parser.add_argument("--stop-on-stdin-eof", action="store_true",
                        help="stop when stdin closes (the demo's pipe: its end)")
    with contextlib.suppress(KeyboardInterrupt):  # a Ctrl-C before the loop's handler
        asyncio.run(consume(parser.parse_args()))


if __name__ == "__main__":
    main()
