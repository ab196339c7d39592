"""Prometheus metrics of one broker, on a registry of its own.

Counters and histograms are updated on the request path; everything that is a view of
state (groups by state, members, offsets, lag) is computed when Prometheus scrapes, so no
timer ever walks all groups.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import RESPONSE_TYPES, ApiKey

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
    storage: Callable[[], StorageHealth] | None = None


@dataclass(frozen=True, slots=True)
class StorageHealth:
    """Storage figures read at scrape time."""

    partitions_by_topic: Mapping[str, int]
    offline: Iterable[tuple[str, int]]
    """``(topic, partition)`` of every partition offline after a failed fsync."""
    open_files: int
    evictions_clean: int
    evictions_fsynced: int


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
            log_end = ends.get((topic, partition))
            if log_end is not None:
                lag.add_metric(labels, max(0, log_end - offset))
        yield committed
        yield lag
        yield from self._storage()

    def _storage(self) -> Iterator[Metric]:
        offline = GaugeMetricFamily(
            "groupwire_offline_partitions",
            "Partitions refusing writes after a failed fsync, by topic", labels=["topic"])
        files = GaugeMetricFamily("groupwire_storage_open_files",
                                  "Log files the storage holds open (--max-open-files)")
        evictions = CounterMetricFamily(
            "groupwire_storage_file_evictions",
            "Log files closed to make room for others, by whether an fsync was needed first",
            labels=["kind"])
        views = self._views.storage
        if views is not None:
            health = views()
            counts = dict.fromkeys(health.partitions_by_topic, 0)
            for topic, _partition in health.offline:
                counts[topic] = counts.get(topic, 0) + 1
            for topic, n in sorted(counts.items()):
                offline.add_metric([topic], n)
            files.add_metric([], health.open_files)
            evictions.add_metric(["clean"], health.evictions_clean)
            evictions.add_metric(["fsynced"], health.evictions_fsynced)
        yield offline
        yield files
        yield evictions


class RequestStats(Collector):
    """Requests by api and error, and latency per api, kept as plain ints.

    The request path is the broker's hottest; prometheus-client's labelled metrics take a
    lock and a label lookup per update, so the counts live here and are turned into a
    counter and a histogram only when Prometheus scrapes.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[int, int], int] = {}
        self._buckets: dict[int, list[int]] = {}
        self._sums: dict[int, float] = {}

    def answered(self, api_key: int, error_code: int, seconds: float) -> None:
        key = (api_key, error_code)
        counts = self._counts
        counts[key] = counts.get(key, 0) + 1
        buckets = self._buckets.get(api_key)
        if buckets is None:
            buckets = self._buckets[api_key] = [0] * (len(LATENCY_BUCKETS) + 1)
            self._sums[api_key] = 0.0
        buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self._sums[api_key] += seconds

    def answered_run(self, api_key: int, error_code: int, count: int,
                     seconds: float) -> None:
        """``count`` requests of one api answered with one code, back to back, in
        ``seconds`` (the heartbeat fast path). Each one's latency is the time since the
        previous one's answer, so together they take ``seconds`` and none takes longer.
        While ``seconds`` is within the first bucket every one of them is too, and this is
        exactly the histogram timing each would give, without reading the clock per
        request; past it (the process was preempted mid-run) each is counted at the
        run's mean."""
        key = (api_key, error_code)
        counts = self._counts
        counts[key] = counts.get(key, 0) + count
        buckets = self._buckets.get(api_key)
        if buckets is None:
            buckets = self._buckets[api_key] = [0] * (len(LATENCY_BUCKETS) + 1)
            self._sums[api_key] = 0.0
        if seconds <= LATENCY_BUCKETS[0]:
            buckets[0] += count
        else:
            buckets[bisect_left(LATENCY_BUCKETS, seconds / count)] += count
        self._sums[api_key] += seconds

    def count(self, api_key: int, error_code: int) -> int:
        return self._counts.get((api_key, error_code), 0)

    def observed(self, api_key: int) -> int:
        """How many latencies of the api the histogram holds."""
        return sum(self._buckets.get(api_key, ()))

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("groupwire_requests",
                                       "Requests answered, by api and error",
                                       labels=["api", "error"])
        for (api_key, code), n in sorted(self._counts.items()):
            requests.add_metric([_api_name(api_key), ErrorCode.name_of(code)], n)
        yield requests
        latency = HistogramMetricFamily("groupwire_request_latency_seconds",
                                        "Time from a request's arrival to its answer",
                                        labels=["api"])
        for api_key, buckets in sorted(self._buckets.items()):
            cumulative, total = [], 0
            for bound, n in zip((*LATENCY_BUCKETS, float("inf")), buckets, strict=True):
                total += n
                cumulative.append((floatToGoString(bound), total))
            latency.add_metric([_api_name(api_key)], cumulative, self._sums[api_key])
        yield latency


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = RequestStats()
        r.register(self.requests)
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
        self.loop_stalls = Histogram(
            "groupwire_event_loop_stall_seconds",
            "How late the event loop ran a 10 ms timer: the time it spent on something else",
            buckets=LATENCY_BUCKETS, registry=r)
        self.longest_loop_stall = Gauge(
            "groupwire_event_loop_longest_stall_seconds",
            "The longest the event loop was kept from running since the broker started",
            registry=r)
        self.expirations = Counter("groupwire_member_expirations",
                                   "Members removed without leaving, by kind", ["kind"],
                                   registry=r)
        self.commits_fenced = Counter("groupwire_commits_fenced",
                                      "Commits refused by ownership fencing", registry=r)
        self.sasl_authentications = Counter(
            "groupwire_sasl_authentications",
            "SASL authentications by mechanism (other: one not enabled) and result "
            "(success, failure)", ["mechanism", "result"], registry=r)
        self.authorization_denials = Counter(
            "groupwire_authorization_denials",
            "Requests (or parts of them) the ACL authorizer refused, by resource type "
            "and operation", ["resource_type", "operation"], registry=r)
        self.bytes_in = 0
        self.bytes_out = 0
        """Plain ints on the hot path; exported as counters when scraped."""
        self.storage_errors = Counter("groupwire_storage_errors", "Failed log writes",
                                      registry=r)
        self.background_task_failures = Counter(
            "groupwire_background_task_failures",
            "Crashes of the broker's long-lived tasks (each restarted with backoff, or "
            "fatal), by task kind", ["task"], registry=r)
        # the request memory budget (broker.budget); the broker sets the gauges' functions
        self.memory_budget = Gauge("groupwire_request_memory_budget_bytes",
                                   "Bytes that partial and queued requests may hold "
                                   "(--queued-max-request-bytes)", registry=r)
        self.memory_reserved = Gauge("groupwire_request_memory_reserved_bytes",
                                     "Bytes of partial and queued requests reserved",
                                     registry=r)
        self.memory_waiting = Gauge("groupwire_request_memory_waiting_connections",
                                    "Connections not read until memory frees", registry=r)
        self.memory_paused = Counter("groupwire_request_memory_paused",
                                     "Times a connection stopped being read for want of "
                                     "memory", registry=r)
        self.write_paused = Counter("groupwire_connection_write_paused",
                                    "Times a connection stopped being read because its "
                                    "client was not reading its answers", registry=r)

    def answered(self, api_key: int, error_code: int, seconds: float) -> None:
        self.requests.answered(api_key, error_code, seconds)

    def answered_run(self, api_key: int, error_code: int, count: int,
                     seconds: float) -> None:
        self.requests.answered_run(api_key, error_code, count, seconds)

    def watch(self, views: StateViews) -> None:
        self.registry.register(_StateCollector(views, self))


def _api_name(api_key: int) -> str:
    """Kafka's API name (``JoinGroup``) for a key, ``Unknown`` for keys we do not serve."""
    try:
        return RESPONSE_TYPES[ApiKey(api_key)].__name__.removesuffix("Response")
    except (ValueError, KeyError):
        return "Unknown"


class ClusterView(Protocol):
    """What the cluster metrics read from a broker's :class:`ClusterNode`."""

    def cluster_counters(self) -> dict[str, int]: ...
    def cluster_gauges(self) -> dict[str, int]: ...


_CLUSTER_COUNTERS: Final = {
    "isr_shrinks": "ISR shrinks this broker wrote as a partition leader",
    "isr_expands": "ISR expansions this broker wrote as a partition leader",
    "leader_elections": "Partitions this broker became the leader of",
    "controller_elections": "Times this broker became the controller",
    "group_events_dropped": "Group events dropped while no leader of __group_events took them",
}
_CLUSTER_GAUGES: Final = {
    "leader_partitions": "Partitions this broker leads",
    "under_replicated_partitions": "Led partitions whose ISR is smaller than their replicas",
    "offline_partitions": "Partitions without a leader (reported by the controller only)",
    "is_controller": "1 while this broker is the controller",
    "fenced": "1 while this broker has lost its etcd lease and leads nothing",
    "live_brokers": "Brokers registered in etcd, as this broker sees them",
}


class _ClusterCollector(Collector):
    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        counters = self._view.cluster_counters()
        for name, text in _CLUSTER_COUNTERS.items():
            yield CounterMetricFamily(f"groupwire_cluster_{name}", text,
                                      value=counters.get(name, 0))
        gauges = self._view.cluster_gauges()
        for name, text in _CLUSTER_GAUGES.items():
            yield GaugeMetricFamily(f"groupwire_cluster_{name}", text,
                                    value=gauges.get(name, 0))


def watch_cluster(metrics: BrokerMetrics, view: ClusterView) -> None:
    """Cluster mode: the ``groupwire_cluster_*`` families (docs/reference/metrics.md)."""
    metrics.registry.register(_ClusterCollector(view))
