"""BrokerMetrics.snapshot and the /metrics endpoint: state read on the loop in slices,
per-partition series opt-in, and a scrape the loop cannot answer gets a clear 503."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Mapping

import pytest
import structlog
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from groupwire.broker.metrics import BrokerMetrics, StateViews
from groupwire.broker.metrics_endpoint import MetricsEndpoint

GROUPS = 200


def _views(offsets: dict[str, dict[tuple[str, int], int]], ends: dict[tuple[str, int], int],
           ) -> StateViews:
    topics: dict[str, int] = {}
    for topic, p in ends:
        topics[topic] = max(topics.get(topic, 0), p + 1)

    def committed(group: str) -> Mapping[tuple[str, int], int]:
        return dict(offsets.get(group, {}))

    return StateViews(groups_by_state=lambda: {"Empty": len(offsets)}, members=lambda: 0,
                      topics=lambda: dict(topics), log_end=lambda t, p: ends.get((t, p)),
                      group_ids=lambda: list(offsets), committed=committed)


def _samples(families: list[Metric]) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in families:
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


async def test_a_snapshot_of_many_groups_lets_the_loop_run_others_in_between() -> None:
    metrics = BrokerMetrics()
    metrics.watch(_views({f"g{i}": {("t", 0): 1} for i in range(GROUPS)}, {("t", 0): 5}))
    turns = 0
    done = asyncio.Event()

    async def count_turns() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    families = await metrics.snapshot(slice_s=0)  # yield after every group
    done.set()
    await counter
    assert turns >= GROUPS
    lags = _samples(families)["groupwire_group_lag"]
    assert len(lags) == GROUPS and {v for _l, v in lags} == {4}


async def test_snapshot_and_a_plain_collect_agree_and_sum_per_group_and_topic() -> None:
    metrics = BrokerMetrics()
    metrics.watch(_views({"g": {("a", 0): 3, ("a", 1): 9, ("b", 0): 0}},
                         {("a", 0): 10, ("a", 1): 8, ("b", 0): 2}))
    snap = _samples(await metrics.snapshot(slice_s=0))
    plain = _samples(list(metrics.registry.collect()))
    assert snap == plain
    assert sorted((ls["topic"], v) for ls, v in snap["groupwire_group_lag"]) == [
        ("a", 7), ("b", 2)]  # 7 + 0: a commit ahead of the log end is no lag, not -1
    assert sorted((ls["topic"], v) for ls, v in snap["groupwire_group_committed_offset"]) == [
        ("a", 12), ("b", 0)]
    assert sorted((ls["topic"], v) for ls, v in snap["groupwire_topic_log_end_offset"]) == [
        ("a", 18), ("b", 2)]


@pytest.mark.parametrize("on", [False, True])
async def test_per_partition_families_only_when_asked(on: bool) -> None:
    metrics = BrokerMetrics()
    metrics.watch(_views({"g": {("a", 0): 1}}, {("a", 0): 2}), partition_series=on)
    names = {f.name for f in await metrics.snapshot(slice_s=0.005)}
    per_partition = {"groupwire_log_end_offset", "groupwire_committed_offset",
                     "groupwire_consumer_lag"}
    assert (per_partition <= names) is on and (per_partition & names == set()) is not on


async def test_a_topic_deleted_mid_snapshot_is_left_out_not_an_error() -> None:
    ends = {("a", 0): 4, ("gone", 0): 3}
    metrics = BrokerMetrics()
    listed = {"a": 1, "gone": 1}  # read before the deletion: a snapshot spans turns
    metrics.watch(StateViews(
        groups_by_state=dict, members=int, topics=lambda: listed,
        log_end=lambda t, p: ends.get((t, p)), group_ids=lambda: ["g"],
        committed=lambda g: {("a", 0): 1, ("gone", 0): 1}), partition_series=True)
    ends.pop(("gone", 0))
    families = _samples(await metrics.snapshot(slice_s=0))
    assert [ls["topic"] for ls, _v in families["groupwire_topic_log_end_offset"]] == ["a"]
    assert [ls["topic"] for ls, _v in families["groupwire_group_lag"]] == ["a"]
    assert [ls["topic"] for ls, _v in families["groupwire_log_end_offset"]] == ["a"]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_a_scrape_the_loop_does_not_answer_in_time_gets_503_and_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def stuck() -> list[Metric]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return []

    endpoint = MetricsEndpoint(stuck, asyncio.get_running_loop(), timeout_s=0.05)
    port = endpoint.start("127.0.0.1", 0)
    try:
        status, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        await asyncio.wait_for(cancelled.wait(), 5)
    finally:
        await asyncio.to_thread(endpoint.shutdown)
    assert status == 503 and "no snapshot" in body


async def test_the_endpoint_serves_and_filters_the_loops_snapshot() -> None:
    async def snapshot() -> list[Metric]:
        return [GaugeMetricFamily("a_gauge", "A", value=1),
                GaugeMetricFamily("b_gauge", "B", value=2)]

    endpoint = MetricsEndpoint(snapshot, asyncio.get_running_loop())
    port = endpoint.start("127.0.0.1", 0)
    try:
        status, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        _s, only_b = await asyncio.to_thread(
            _get, f"http://127.0.0.1:{port}/metrics?name[]=b_gauge")
    finally:
        await asyncio.to_thread(endpoint.shutdown)
    assert status == 200
    assert {f.name for f in text_string_to_metric_families(body)} == {"a_gauge", "b_gauge"}
    assert {f.name for f in text_string_to_metric_families(only_b)} == {"b_gauge"}


def test_a_scrape_after_the_loop_closed_gets_503() -> None:
    loop = asyncio.new_event_loop()
    loop.close()

    async def snapshot() -> list[Metric]:
        return []

    endpoint = MetricsEndpoint(snapshot, loop)
    port = endpoint.start("127.0.0.1", 0)
    try:
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
    finally:
        endpoint.shutdown()
    assert (status, body) == (503, "the broker is stopping\n")


async def test_a_failing_collector_is_logged_and_answered_500() -> None:
    async def broken() -> list[Metric]:
        raise ValueError("a bug in a collector")

    endpoint = MetricsEndpoint(broken, asyncio.get_running_loop())
    port = endpoint.start("127.0.0.1", 0)
    try:
        with structlog.testing.capture_logs() as logs:
            status, _body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    finally:
        await asyncio.to_thread(endpoint.shutdown)
    assert status == 500
    assert [e["event"] for e in logs] == ["metrics_scrape_failed"]
