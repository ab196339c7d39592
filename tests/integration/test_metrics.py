"""The Prometheus endpoint shows what the broker is doing."""

from __future__ import annotations

import asyncio
import urllib.request

from .rawgroup import RawMember, create_topic, form_group, produce


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def test_metrics_report_groups_lag_and_requests(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(metrics_port=0, metrics_partition_series=True)
    conn = await connect(target=broker)
    await create_topic(conn, "m", 1)
    await produce(conn, "m", 0, [b"a", b"b", b"c", b"d", b"e"])
    member = RawMember(conn, "g-metrics", ["m"])
    await form_group([member], "m", 1)
    await member.commit({("m", 0): 2})
    assert broker.metrics_port is not None
    m = await asyncio.to_thread(_scrape, broker.metrics_port)
    assert m['groupwire_groups{state="Stable"}'] == 1
    assert m["groupwire_members"] == 1
    assert m['groupwire_log_end_offset{partition="0",topic="m"}'] == 5
    assert m['groupwire_committed_offset{group="g-metrics",partition="0",topic="m"}'] == 2
    assert m['groupwire_consumer_lag{group="g-metrics",partition="0",topic="m"}'] == 3
    assert m['groupwire_topic_log_end_offset{topic="m"}'] == 5
    assert m['groupwire_group_committed_offset{group="g-metrics",topic="m"}'] == 2
    assert m['groupwire_group_lag{group="g-metrics",topic="m"}'] == 3
    assert m['groupwire_requests_total{api="JoinGroup",error="MEMBER_ID_REQUIRED"}'] == 1
    assert m['groupwire_rebalances_total{reason="member-joined"}'] == 1
    assert m["groupwire_connections"] == 1
    assert m["groupwire_bytes_in_total"] > 0 and m["groupwire_bytes_out_total"] > 0
