"""How long topic creation holds the broker's event loop (issue 14).

Creates 1 topic x 10 000 partitions, then 100 topics x 100 partitions, on an in-process
broker under ``--fsync always``, and prints the event loop's longest stall
(:class:`~broker.loop_monitor.LoopMonitor`) and the wall time of each, as JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from groupwire.broker.config import BrokerSettings
from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.messages import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse


async def _case(name: str, topics: list[CreatableTopic], data_dir: Path) -> dict[str, object]:
    broker = Broker(BrokerSettings(data_dir=data_dir, host="127.0.0.1", port=0,
                                   metrics_port=-1, fsync="always"))
    await broker.start()
    try:
        conn = await Connection.open("127.0.0.1", broker.port, client_id="create-stall")
        try:
            await asyncio.sleep(0.1)  # let the monitor settle
            broker.loop_monitor.max_stall_s = 0.0
            t0 = time.perf_counter()
            resp = await conn.send(CreateTopicsRequest(topics=topics),
                                   response_type=CreateTopicsResponse)
            wall = time.perf_counter() - t0
            await asyncio.sleep(0.05)
            errors = [t.error_code for t in resp.topics if t.error_code]
        finally:
            await conn.close()
        return {"case": name, "errors": len(errors), "wall_s": round(wall, 3),
                "max_loop_stall_ms": round(broker.loop_monitor.max_stall_s * 1000, 1)}
    finally:
        await broker.close()


async def main() -> None:
    with tempfile.TemporaryDirectory(dir=sys.argv[1] if len(sys.argv) > 1 else None) as d:
        cases = [
            ("1x10000", [CreatableTopic(name="big", num_partitions=10_000)]),
            ("100x100", [CreatableTopic(name=f"t{i}", num_partitions=100)
                         for i in range(100)]),
        ]
        for i, (name, topics) in enumerate(cases):
            print(json.dumps(await _case(name, topics, Path(d) / f"data{i}")), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
