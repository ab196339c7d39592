"""Prometheus metrics of one broker, on a registry of its own.

Counters and histograms are updated on the request path; everything that is a view of
state (groups by state, members, offsets, lag) is computed when Prometheus scrapes, so no
timer ever walks all groups. A scrape reads all of it on the event loop, the only thread
that changes it (:meth:`BrokerMetrics.snapshot`, served by ``broker.metrics_endpoint``),
walking groups and topics a slice at a time. Offsets and lag are summed per topic and per
group and topic; per partition only with ``--metrics-partition-series``, so that by default
the series grow with topics x groups, not with partitions.
"""

from __future__ import annotations

import asyncio
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

from groupwire.broker.pacing import finish_in_slices
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.codec import API_NAMES as KAFKA_API_NAMES
from groupwire.protocol.messages import RESPONSE_TYPES, ApiKey
from groupwire.protocol.steps import Steps, run_steps

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def _no_topics() -> Mapping[str, int]:
    return {}


def _no_log_end(_topic: str, _partition: int) -> int | None:
    return None


def _no_groups() -> Iterable[str]:
    return ()


def _no_offsets(_group: str) -> Mapping[tuple[str, int], int]:
    return {}


@dataclass(frozen=True, slots=True)
class StateViews:
    """Callables the scrape-time collector reads, on the event loop; supplied by the broker.

    A snapshot walks groups and topics over several turns of the loop, so ``topics``,
    ``group_ids`` and ``committed`` return copies, never the containers the loop changes.
    """

    groups_by_state: Callable[[], Mapping[str, int]]
    members: Callable[[], int]
    topics: Callable[[], Mapping[str, int]] = _no_topics
    """The topics whose offsets are exported (internal ones left out), with their
    partition counts."""
    log_end: Callable[[str, int], int | None] = _no_log_end
    """A partition's next offset to be read (its high watermark); None: not exported (an
    internal topic) or gone (its topic was deleted since ``topics``)."""
    group_ids: Callable[[], Iterable[str]] = _no_groups
    committed: Callable[[str], Mapping[tuple[str, int], int]] = _no_offsets
    """A group's committed offset per ``(topic, partition)``."""
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
    """Groups, members, offsets, lag and storage health, read from the broker's state.

    :meth:`steps` does the work a group or a topic at a time, so a snapshot of 10 000
    groups can let the loop run others in between (``BrokerMetrics.snapshot``); a plain
    ``collect`` (a test reading the registry on the loop) runs them all at once.
    """

    def __init__(self, views: StateViews, metrics: BrokerMetrics, *,
                 partition_series: bool) -> None:
        self._views = views
        self._metrics = metrics
        self._partition_series = partition_series
        self._ready: list[Metric] | None = None

    def prepare(self, families: list[Metric]) -> None:
        """What the next ``collect`` yields: families :meth:`steps` made in slices."""
        self._ready = families

    def describe(self) -> Iterator[Metric]:
        """The families, empty: registering reads these, not the state."""
        empty = StateViews(groups_by_state=dict, members=int)
        blank = _StateCollector(empty, self._metrics, partition_series=self._partition_series)
        return iter(run_steps(blank.steps()))

    def collect(self) -> Iterator[Metric]:
        ready, self._ready = self._ready, None
        yield from ready if ready is not None else run_steps(self.steps())

    def steps(self) -> Steps[list[Metric]]:
        """Every family, yielding after each group and each topic.

        Each group's offsets and the log ends its lag is computed from are read in one
        step, so every lag is of one moment (and never negative). Topics are read after
        the groups, and log ends only grow: a partition's committed offset plus its lag
        is at most the log end the same snapshot shows.
        """
        views, per_partition = self._views, self._partition_series
        group_committed = GaugeMetricFamily(
            "groupwire_group_committed_offset",
            "Committed offsets of a group, summed over the topic's partitions",
            labels=["group", "topic"])
        group_lag = GaugeMetricFamily(
            "groupwire_group_lag",
            "Log end offset minus committed offset, summed over the topic's partitions the "
            "group committed", labels=["group", "topic"])
        topic_end = GaugeMetricFamily(
            "groupwire_topic_log_end_offset",
            "Next offset to be written, summed over the topic's partitions", labels=["topic"])
        committed = GaugeMetricFamily("groupwire_committed_offset", "Last committed offset",
                                      labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("groupwire_consumer_lag",
                                "Log end offset minus committed offset",
                                labels=["group", "topic", "partition"])
        leo = GaugeMetricFamily("groupwire_log_end_offset", "Next offset to be written",
                                labels=["topic", "partition"])
        for group in views.group_ids():
            sums: dict[str, list[int]] = {}
            for (topic, partition), offset in views.committed(group).items():
                end = views.log_end(topic, partition)
                if end is None:
                    continue
                behind = max(0, end - offset)
                both = sums.setdefault(topic, [0, 0])
                both[0] += offset
                both[1] += behind
                if per_partition:
                    labels = [group, topic, str(partition)]
                    committed.add_metric(labels, offset)
                    lag.add_metric(labels, behind)
            for topic, (offsets, behind) in sums.items():
                group_committed.add_metric([group, topic], offsets)
                group_lag.add_metric([group, topic], behind)
            yield
        for topic, count in views.topics().items():
            ends = [(p, end) for p in range(count)
                    if (end := views.log_end(topic, p)) is not None]
            if ends:  # none: deleted since topics() was read (or no replica here)
                topic_end.add_metric([topic], sum(end for _p, end in ends))
                if per_partition:
                    for p, end in ends:
                        leo.add_metric([topic, str(p)], end)
            yield
        families: list[Metric] = [*self._now(), group_committed, group_lag, topic_end]
        if per_partition:
            families += [committed, lag, leo]
        return [*families, *self._storage()]

    def _now(self) -> Iterator[Metric]:
        """The figures read in the snapshot's last step."""
        yield CounterMetricFamily("groupwire_bytes_in", "Bytes received from clients",
                                  value=self._metrics.bytes_in)
        yield CounterMetricFamily("groupwire_bytes_out", "Bytes sent to clients",
                                  value=self._metrics.bytes_out)
        groups = GaugeMetricFamily("groupwire_groups", "Consumer groups by state",
                                   labels=["state"])
        by_state = self._views.groups_by_state()
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            groups.add_metric([state], by_state.get(state, 0))
        yield groups
        yield GaugeMetricFamily("groupwire_members", "Members across all groups",
                                value=self._views.members())

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
        self._state: _StateCollector | None = None
        self._snapshot_lock = asyncio.Lock()
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

    def watch(self, views: StateViews, *, partition_series: bool = False) -> None:
        """Export the broker's state; ``partition_series``: per partition too
        (``--metrics-partition-series``), not only summed per topic and group."""
        self._state = _StateCollector(views, self, partition_series=partition_series)
        self.registry.register(self._state)

    async def snapshot(self, slice_s: float) -> list[Metric]:
        """Every family, read on the event loop (call it there): the state a group or a
        topic at a time, giving the loop to others every ``slice_s`` (``broker.pacing``),
        the rest in the last turn. The families are copies, to be formatted anywhere."""
        async with self._snapshot_lock:  # one at a time: prepare() hands over to collect()
            state = self._state
            if state is not None:
                state.prepare(await finish_in_slices(state.steps(), slice_s))
            return list(self.registry.collect())


def _api_name(api_key: int) -> str:
    """Kafka's API name (``JoinGroup``) for a key, ``Unknown`` for keys we do not serve
    (the Kafka door's APIs count under the same names, docs/protocol.md §13)."""
    try:
        return RESPONSE_TYPES[ApiKey(api_key)].__name__.removesuffix("Response")
    except (ValueError, KeyError):
        return KAFKA_API_NAMES.get(api_key, "Unknown")


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
    "offline_partitions_storage_lost": "Partitions without a leader because their live ISR "
                                       "members came back without their logs (a new "
                                       "storage id; reported by the controller only)",
    "offline_leader_partitions": "Partitions this broker leads on a log that went offline "
                                 "(a failed write or fsync) with no other in-sync replica "
                                 "to hand them to: their writes are refused",
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


class TransactionView(Protocol):
    """What the transaction metrics read from the broker's transaction shell."""

    def transaction_counters(self) -> dict[str, int]: ...
    def unstable_records(self) -> dict[str, int]:
        """Per topic: records above the last stable offset (in open transactions)."""
        ...


_TXN_COUNTERS: Final = {
    "commits": "Transactions whose commit was decided (PrepareCommit stored)",
    "aborts_client": "Transactions aborted by their producer (EndTxn abort)",
    "aborts_timeout": "Transactions aborted by the coordinator past their timeout",
    "aborts_fenced": "Open transactions aborted because a new producer with the same "
                     "transactional id started (InitProducerId)",
    "producers_fenced": "Transactional requests refused PRODUCER_FENCED",
    "ids_expired": "Transactional ids forgotten after --transactional-id-expiration-ms",
}


class _TransactionCollector(Collector):
    def __init__(self, view: TransactionView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        counters = self._view.transaction_counters()
        for name, text in _TXN_COUNTERS.items():
            yield CounterMetricFamily(f"groupwire_transactions_{name}", text,
                                      value=counters.get(name, 0))
        yield GaugeMetricFamily("groupwire_transactions_open",
                                "Transactions open (Ongoing) on this coordinator",
                                value=counters.get("open", 0))
        lag = GaugeMetricFamily(
            "groupwire_topic_unstable_records",
            "High watermark minus last stable offset, summed over a topic's partitions: "
            "records a read_committed consumer cannot read yet", labels=["topic"])
        for topic, behind in self._view.unstable_records().items():
            lag.add_metric([topic], behind)
        yield lag


def watch_transactions(metrics: BrokerMetrics, view: TransactionView) -> None:
    """The ``groupwire_transactions_*`` families (docs/reference/metrics.md)."""
    metrics.registry.register(_TransactionCollector(view))
