"""/metrics during group and topic churn: every scrape answers, parses and adds up.

The broker's state is read on the event loop (``BrokerMetrics.snapshot``), never on the
HTTP thread; offsets and lag are per topic and group unless ``--metrics-partition-series``.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupwire.broker.coordinator import Coordinator
from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse

from .rawgroup import RawMember, create_topic, produce

StartBroker = Callable[..., Awaitable[Broker]]
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]

SCRAPES = 1000
STABLE = "stable"
PARTITION_FAMILIES = {"groupwire_log_end_offset", "groupwire_committed_offset",
                      "groupwire_consumer_lag"}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()  # type: ignore[no-any-return]


def _parse(text: str) -> Samples:
    """Samples by family and labels; raises on text the Prometheus parser rejects."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[key] = sample.value
    return out


def _check_consistent(m: Samples) -> None:
    """What one snapshot must satisfy: sums add up, no lag is negative, and no partition's
    committed offset plus lag passes the log end read after it."""
    lag, committed = m.get("groupwire_consumer_lag", {}), m.get("groupwire_committed_offset", {})
    ends = m.get("groupwire_log_end_offset", {})
    sums: dict[str, dict[tuple[str, ...], float]] = {"lag": {}, "committed": {}, "end": {}}
    for labels, value in lag.items():
        assert value >= 0, (labels, value)
        d = dict(labels)
        key = (d["group"], d["topic"])
        sums["lag"][key] = sums["lag"].get(key, 0) + value
        offset = committed[labels]
        end = ends[(("partition", d["partition"]), ("topic", d["topic"]))]
        assert value == 0 or offset + value <= end, (labels, offset, value, end)
    for labels, value in committed.items():
        d = dict(labels)
        key = (d["group"], d["topic"])
        sums["committed"][key] = sums["committed"].get(key, 0) + value
    for labels, value in ends.items():
        key = (dict(labels)["topic"],)
        sums["end"][key] = sums["end"].get(key, 0) + value
    for name, kind in (("groupwire_group_lag", "lag"),
                       ("groupwire_group_committed_offset", "committed")):
        got = {(dict(k)["group"], dict(k)["topic"]): v for k, v in m.get(name, {}).items()}
        assert got == sums[kind], name
    got = {(dict(k)["topic"],): v
           for k, v in m.get("groupwire_topic_log_end_offset", {}).items()}
    assert got == sums["end"]
    assert all(v >= 0 for v in m.get("groupwire_group_lag", {}).values())


async def _delete_topic(conn: Connection, name: str) -> None:
    resp = await conn.send(DeleteTopicsRequest(topic_names=[name]),
                           response_type=DeleteTopicsResponse)
    assert resp.responses[0].error_code == ErrorCode.NONE, resp


async def _churn(conn: Connection, stop: threading.Event) -> int:
    """Groups formed, committed to and left; records written; topics created and
    deleted, until ``stop``. Returns the rounds done."""
    written = [0, 0]
    rounds = 0
    while not stop.is_set():
        p = rounds % 2
        await produce(conn, STABLE, p, [b"x"] * 3)
        written[p] += 3
        member = RawMember(conn, f"churn-{rounds % 8}", [STABLE])
        joined = await member.join_group()
        assert joined.error_code == ErrorCode.NONE, joined
        assert (await member.sync({member.member_id: [(STABLE, [0, 1])]})).error_code == 0
        commit = await member.commit({(STABLE, 0): written[0] - rounds % 3,
                                      (STABLE, 1): max(0, written[1] - 1)})
        assert all(q.error_code == 0 for t in commit.topics for q in t.partitions), commit
        await create_topic(conn, f"brief-{rounds}", 3)
        if rounds:
            await _delete_topic(conn, f"brief-{rounds - 1}")
        await member.leave()
        rounds += 1
    return rounds


@pytest.mark.slow  # about 20 s: each scrape waits for a loop kept busy by the churn
async def test_a_thousand_scrapes_during_churn_all_answer_and_add_up(
        start_broker: StartBroker) -> None:
    broker = await start_broker(metrics_port=0, metrics_partition_series=True,
                                loop_slice_ms=0)  # a snapshot spans many turns of the loop
    assert broker.metrics_port is not None
    conn = await Connection.open("127.0.0.1", broker.port, client_id="churn")
    try:
        await create_topic(conn, STABLE, 2)
        stop = threading.Event()
        churn = asyncio.create_task(_churn(conn, stop))

        def scrape_all() -> list[str]:
            try:
                return [_scrape(broker.metrics_port) for _ in range(SCRAPES)]  # type: ignore[arg-type]
            finally:
                stop.set()

        texts = await asyncio.to_thread(scrape_all)
        rounds = await churn
    finally:
        await conn.close()
    assert rounds > 1  # the scrapes did overlap churn
    seen_groups = set()
    for text in texts:
        m = _parse(text)
        _check_consistent(m)
        seen_groups |= {dict(k)["group"] for k in m.get("groupwire_group_lag", {})}
    assert seen_groups


async def test_partition_series_only_with_the_flag(start_broker: StartBroker) -> None:
    for on in (False, True):
        broker = await start_broker(metrics_port=0, metrics_partition_series=on)
        conn = await Connection.open("127.0.0.1", broker.port, client_id="flag")
        try:
            await create_topic(conn, "t", 3)
            await produce(conn, "t", 1, [b"a", b"b"])
            member = RawMember(conn, "g", ["t"])
            await member.join_group()
            await member.sync({member.member_id: [("t", [0, 1, 2])]})
            await member.commit({("t", 1): 1})
        finally:
            await conn.close()
        assert broker.metrics_port is not None
        m = _parse(await asyncio.to_thread(_scrape, broker.metrics_port))
        assert m["groupwire_group_lag"] == {(("group", "g"), ("topic", "t")): 1}
        assert m["groupwire_group_committed_offset"] == {(("group", "g"), ("topic", "t")): 1}
        assert m["groupwire_topic_log_end_offset"] == {(("topic", "t"),): 2}
        shown = PARTITION_FAMILIES & m.keys()
        assert shown == (PARTITION_FAMILIES if on else set())
        if on:
            assert m["groupwire_consumer_lag"] == {
                (("group", "g"), ("partition", "1"), ("topic", "t")): 1}
            assert len(m["groupwire_log_end_offset"]) == 3


async def test_a_scrape_reads_the_state_on_the_event_loop_thread(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, prometheus-client's thread walked the groups while the loop changed them."""
    readers: set[str] = set()

    def recording(method: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: Coordinator, *args: Any) -> Any:
            readers.add(threading.current_thread().name)
            return method(self, *args)
        return read

    for name in ("group_ids", "committed", "group_counts_by_state", "member_count"):
        monkeypatch.setattr(Coordinator, name, recording(getattr(Coordinator, name)))
    broker = await start_broker(metrics_port=0)
    conn = await Connection.open("127.0.0.1", broker.port, client_id="thread")
    try:
        await create_topic(conn, "t", 1)
        member = RawMember(conn, "g", ["t"])
        await member.join_group()
        await member.sync({member.member_id: [("t", [0])]})
        await member.commit({("t", 0): 0})
    finally:
        await conn.close()
    readers.clear()
    assert broker.metrics_port is not None
    m = _parse(await asyncio.to_thread(_scrape, broker.metrics_port))
    assert m["groupwire_members"] == {(): 1}
    assert readers == {threading.current_thread().name}
