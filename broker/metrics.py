"""Prometheus metrics of one broker, on a registry of its own.

Counters and histograms are updated on the request path; everything that is a view of
state (groups by state, members, offsets, lag) is computed when Prometheus scrapes, so no
timer ever walks all groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.errors import ErrorCode
from protocol.messages import RESPONSE_TYPES, ApiKey

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True, slots=True)
class StateViews:
    """Callables the scrape-time collector reads; supplied by the broker."""

    groups_by_state: Callable[[], Mapping[str, int]]
    members: Callable[[], int]
    log_end_offsets: Callable[[], Iterable[tuple[str, int, int]]]
    committed_offsets: Callable[[], Iterable[tuple[str, str, int, int]]]


class _StateCollector(Collector):
    def __init__(self, views: StateViews, metrics: BrokerMetrics) -> None:
        self._views = views
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("groupwire_bytes_in", "Bytes received from clients",
                                  value=self._metrics.bytes_in)
        yield CounterMetricFamily("groupwire_bytes_out", "Bytes sent to clients",
                                  value=self._metrics.bytes_out)
        groups = GaugeMetricFamily("groupwire_groups", "Consumer groups by state",
                                   labels=["state"])
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            groups.add_metric([state], self._views.groups_by_state().get(state, 0))
        yield groups
        yield GaugeMetricFamily("groupwire_members", "Members across all groups",
                                value=self._views.members())
        leo = GaugeMetricFamily("groupwire_log_end_offset", "Next offset to be written",
                                labels=["topic", "partition"])
        ends: dict[tuple[str, int], int] = {}
        for topic, partition, end in self._views.log_end_offsets():
            ends[(topic, partition)] = end
            leo.add_metric([topic, str(partition)], end)
        yield leo
        committed = GaugeMetricFamily("groupwire_committed_offset", "Last committed offset",
                                      labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("groupwire_consumer_lag",
                                "Log end offset minus committed offset",
                                labels=["group", "topic", "partition"])
        for group, topic, partition, offset in self._views.committed_offsets():
            labels = [group, topic, str(partition)]
            committed.add_metric(labels, offset)
            end = ends.get((topic, partition))
            if end is not None:
                lag.add_metric(labels, max(0, end - offset))
        yield committed
        yield lag


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("groupwire_requests", "Requests answered, by api and error",
                                ["api", "error"], registry=r)
        self.latency = Histogram("groupwire_request_latency_seconds",
                                 "Time from a request's arrival to its answer", ["api"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.connections = Gauge("groupwire_connections", "Open client connections",
                                 registry=r)
        self.connections_accepted = Counter("groupwire_connections_accepted",
                                            "Connections accepted", registry=r)
        self.connections_closed = Counter("groupwire_connections_closed",
                                          "Connections closed, by reason", ["reason"],
                                          registry=r)
        self.rebalances = Counter("groupwire_rebalances", "Rebalances started, by reason",
                                  ["reason"], registry=r)
        self.rebalance_duration = Histogram("groupwire_rebalance_duration_seconds",
                                            "Time from a rebalance's start to Stable or Empty",
                                            buckets=REBALANCE_BUCKETS, registry=r)
        self.expirations = Counter("groupwire_member_expirations",
                                   "Members removed without leaving, by kind", ["kind"],
                                   registry=r)
        self.commits_fenced = Counter("groupwire_commits_fenced",
                                      "Commits refused by ownership fencing", registry=r)
        self.bytes_in = 0
        self.bytes_out = 0
        """Plain ints on the hot path; exported as counters when scraped."""
        self.storage_errors = Counter("groupwire_storage_errors", "Failed log writes",
                                      registry=r)

        self._per_answer: dict[tuple[int, int], tuple[Any, Any]] = {}

    def answered(self, api_key: int, error_code: int, seconds: float) -> None:
        """Count one answered request; label lookups are cached (hot path)."""
        children = self._per_answer.get((api_key, error_code))
        if children is None:
            api = _api_name(api_key)
            children = (self.requests.labels(api, ErrorCode.name_of(error_code)),
                        self.latency.labels(api))
            self._per_answer[(api_key, error_code)] = children
        children[0].inc()
        children[1].observe(seconds)

    def watch(self, views: StateViews) -> None:
        self.registry.register(_StateCollector(views, self))


def _api_name(api_key: int) -> str:
    """Kafka's API name (``JoinGroup``) for a key, ``Unknown`` for keys we do not serve."""
    try:
        return RESPONSE_TYPES[ApiKey(api_key)].__name__.removesuffix("Response")
    except (ValueError, KeyError):
        return "Unknown"
