"""Request counts and latencies as Prometheus sees them, including the fast path's runs."""

from __future__ import annotations

import pytest

from groupwire.broker.metrics import LATENCY_BUCKETS, BrokerMetrics

HEARTBEAT = 12


def _histogram(metrics: BrokerMetrics) -> dict[str, float]:
    """``le`` -> cumulative count of the heartbeat latency histogram, and its sum."""
    registry = metrics.registry
    out = {}
    for le in (*(str(b) for b in LATENCY_BUCKETS), "+Inf"):
        value = registry.get_sample_value("groupwire_request_latency_seconds_bucket",
                                          {"api": "Heartbeat", "le": le})
        assert value is not None, le
        out[le] = value
    total = registry.get_sample_value("groupwire_request_latency_seconds_sum",
                                      {"api": "Heartbeat"})
    assert total is not None
    out["sum"] = total
    return out


def test_a_run_within_the_first_bucket_is_counted_there_exactly() -> None:
    metrics = BrokerMetrics()
    metrics.answered_run(HEARTBEAT, 0, 16, LATENCY_BUCKETS[0] / 2)
    hist = _histogram(metrics)
    assert hist[str(LATENCY_BUCKETS[0])] == 16 and hist["+Inf"] == 16
    assert hist["sum"] == pytest.approx(LATENCY_BUCKETS[0] / 2)
    assert metrics.registry.get_sample_value(
        "groupwire_requests_total", {"api": "Heartbeat", "error": "NONE"}) == 16


def test_a_run_past_the_first_bucket_is_counted_at_its_mean() -> None:
    metrics = BrokerMetrics()
    metrics.answered_run(HEARTBEAT, 0, 4, 0.004)  # a preempted run: 1 ms each on average
    metrics.answered(HEARTBEAT, 0, 0.00001)  # and one request timed on its own
    hist = _histogram(metrics)
    assert hist["0.0001"] == 1  # only the one timed alone
    assert hist["0.0005"] == 1 and hist["0.001"] == 5  # the run's four at their mean, 1 ms
    assert hist["+Inf"] == 5
    assert hist["sum"] == pytest.approx(0.00401)
