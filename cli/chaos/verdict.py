"""What a chaos run proves, computed from the consumers' journals and offset samples."""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path


@dataclass
class Verdict:
    produced: int = 0
    processed: int = 0
    lost: list[tuple[int, int]] = field(default_factory=list)
    duplicates: int = 0
    unexplained_duplicates: list[tuple[int, int]] = field(default_factory=list)
    offsets_backwards: list[str] = field(default_factory=list)
    double_owned: list[str] = field(default_factory=list)
    zombie_commits_refused: int = 0
    zombie_fetches_refused: int = 0
    zombie_probes: int = 0
    zombie_probes_unanswered: int = 0
    zombie_accepted: list[str] = field(default_factory=list)
    slowest_recovery_s: float = 0.0
    recovery_bound_s: float = 0.0
    longest_unowned_s: dict[int, float] = field(default_factory=dict)
    cluster: ClusterFindings | None = None
    """What only a run against its own cluster checks (``--cluster``)."""
    log_duplicates: int | None = None
    """Records the topic's log holds more than once (every value the producer sends is
    new), read from the run's own broker's data dir after the run; None when the run had
    no broker of its own. The producer is idempotent: any is a violation."""

    @property
    def violations(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} acknowledged records never processed "
                       f"(first: {self.lost[:5]})")
        if self.unexplained_duplicates:
            out.append(f"{len(self.unexplained_duplicates)} duplicates not explained by a "
                       f"fault before commit (first: {self.unexplained_duplicates[:5]})")
        if self.log_duplicates:
            out.append(f"{self.log_duplicates} records stored twice in the log by the "
                       f"idempotent producer")
        out += [f"committed offset went backwards: {x}" for x in self.offsets_backwards]
        out += [f"partition owned twice in one generation: {x}" for x in self.double_owned]
        out += [f"broker accepted a zombie's {x}" for x in self.zombie_accepted]
        if self.slowest_recovery_s > self.recovery_bound_s:
            out.append(f"group took {self.slowest_recovery_s:.1f} s to own every partition "
                       f"again (bound {self.recovery_bound_s:.1f} s)")
        if self.cluster is not None:
            out += self.cluster.violations
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "produced": self.produced, "processed_distinct": self.processed,
            "lost": len(self.lost), "duplicates": self.duplicates,
            "unexplained_duplicates": len(self.unexplained_duplicates),
            "log_duplicates": self.log_duplicates,
            "offsets_backwards": self.offsets_backwards, "double_owned": self.double_owned,
            "zombie_commits_refused": self.zombie_commits_refused,
            "zombie_fetches_refused": self.zombie_fetches_refused,
            "zombie_probes": self.zombie_probes,
            "zombie_probes_unanswered": self.zombie_probes_unanswered,
            "zombie_accepted": self.zombie_accepted,
            "slowest_recovery_s": round(self.slowest_recovery_s, 3),
            "recovery_bound_s": self.recovery_bound_s,
            "longest_unowned_s": {str(p): round(s, 3)
                                  for p, s in sorted(self.longest_unowned_s.items())},
            **({} if self.cluster is None else {"cluster": self.cluster.as_dict(self)}),
            "violations": self.violations,
        }


@dataclass
class ClusterFindings:
    """A cluster run's own figures: the logs on disk, the group's rebalances, and how
    long producing and consuming stalled."""

    brokers: int = 0
    acked_missing: list[tuple[int, int]] = field(default_factory=list)
    """Acknowledged records that no replica holds at their offset, with their value."""
    epoch_conflicts: list[str] = field(default_factory=list)
    """One line per partition where two replicas hold different batches of one epoch."""
    rebalances: int = 0
    coordinator_rebalances: list[tuple[float, str]] = field(default_factory=list)
    coordinator_faults: int = 0
    produce_unavailable_s: dict[int, float] = field(default_factory=dict)
    consume_unavailable_s: float = 0.0
    zombie_fetches_served: int = 0
    offset_samples: int = 0
    """Committed-offset samples taken: the regression check is only as good as these."""
    """A woken zombie's fetches a partition leader other than the coordinator served:
    cluster mode does not fence those (docs/design/cluster.md, "The client")."""

    @property
    def violations(self) -> list[str]:
        out = []
        if self.acked_missing:
            out.append(f"{len(self.acked_missing)} acknowledged records are at their offset "
                       f"in no replica's log (first: {self.acked_missing[:5]})")
        out += [f"two leaders wrote in one epoch: {x}" for x in self.epoch_conflicts]
        return out

    def acked_lost(self, verdict: Verdict) -> int:
        """Acknowledged records never consumed, or gone from every replica."""
        return len(set(verdict.lost) | set(self.acked_missing))

    def as_dict(self, verdict: Verdict) -> dict[str, object]:
        return {
            "brokers": self.brokers,
            "acked_lost": self.acked_lost(verdict),
            "acked_missing_from_logs": len(self.acked_missing),
            "offsets_regressed": len(verdict.offsets_backwards),
            "offset_samples": self.offset_samples,
            "epoch_conflicts": len(self.epoch_conflicts),
            "epoch_conflict_details": self.epoch_conflicts,
            "rebalances": self.rebalances,
            "coordinator_faults": self.coordinator_faults,
            "coordinator_rebalances": len(self.coordinator_rebalances),
            "coordinator_rebalance_reasons": [r for _, r in self.coordinator_rebalances],
            "produce_unavailable_s": {str(p): round(s, 3)
                                      for p, s in sorted(self.produce_unavailable_s.items())},
            "group_unavailable_s": round(self.consume_unavailable_s, 3),
            "zombie_fetches_served": self.zombie_fetches_served,
        }


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch of a replica's log as stored: its offsets, leader epoch and bytes."""

    base: int
    last: int
    epoch: int
    data: bytes


def epoch_conflicts(replicas: dict[int, list[StoredBatch]]) -> list[str]:
    """Where two replicas of one partition disagree within one leader epoch.

    A leader's batches reach its followers byte for byte, so two replicas may differ
    only where one holds a later epoch's batches (the other is behind or has not yet
    truncated a dead leader's tail). Same epoch, overlapping offsets, different bytes or
    boundaries: two brokers led the partition, and accepted writes, in that epoch.
    Only offsets both replicas hold are compared (``replicas``: node -> batches in
    offset order).
    """
    out: list[str] = []
    nodes = sorted(replicas)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            theirs = replicas[b]
            starts = [y.base for y in theirs]
            for x in replicas[a]:
                first = max(0, bisect_right(starts, x.base) - 1)
                overlapping = [y for y in theirs[first:bisect_right(starts, x.last)]
                               if y.last >= x.base and y.base <= x.last]
                clash = next((y for y in overlapping if y.epoch == x.epoch
                              and (y.base, y.data) != (x.base, x.data)), None)
                if clash is not None:
                    out.append(f"epoch {x.epoch} at offset {max(x.base, clash.base)}: "
                               f"brokers {a} and {b} hold different batches")
                    break
    return out


def stored_twice(stored: dict[int, dict[int, bytes | None]]) -> int:
    """Records held more than once: per partition (offset -> value), every copy of a
    value past its first."""
    twice = 0
    for by_offset in stored.values():
        counts = Counter(v for v in by_offset.values() if v is not None)
        twice += sum(n - 1 for n in counts.values() if n > 1)
    return twice


def acked_missing(acked: dict[tuple[int, int], bytes],
                  stored: dict[int, list[dict[int, bytes | None]]]) -> list[tuple[int, int]]:
    """Acknowledged (partition, offset) -> value pairs that no replica holds.

    ``stored``: partition -> each replica's offset -> value. A consumer that read the
    offset read *a* record there; this says whether it was the acknowledged one."""
    missing = []
    for (p, o), value in acked.items():
        if not any(o in replica and replica[o] == value
                   for replica in stored.get(p, [])):
            missing.append((p, o))
    return sorted(missing)


def produce_gaps(acks: Iterable[tuple[float, int]], partitions: int, start: float,
                 end: float) -> dict[int, float]:
    """Per partition, the longest time between two acknowledgements (or the start or end
    of production): how long ``acks=all`` produce did not succeed there."""
    times: dict[int, list[float]] = {p: [start] for p in range(partitions)}
    for t, p in acks:
        times.setdefault(p, [start]).append(t)
    out = {}
    for p, ts in times.items():
        ts = sorted([*ts, max(end, ts[-1])])
        out[p] = max(b - a for a, b in pairwise(ts))
    return out


def consume_gap(events: list[dict[str, object]], acked_at: dict[tuple[int, int], float],
                ) -> float:
    """The longest time an acknowledged record waited while no member read anything.

    Measured at each read that brings records no one had read before: from the later of
    the previous read and the earliest acknowledgement among those records. Time when
    nothing was there to read does not count."""
    seen: set[tuple[int, int]] = set()
    previous: float | None = None
    longest = 0.0
    for e in events:
        if e["event"] != "records":
            continue
        t = _time(e)
        new = [k for k in ((int(p), int(o)) for p, o in e["records"])  # type: ignore[attr-defined]
               if k not in seen]
        seen.update(new)
        if previous is not None and new:
            ready = min(acked_at.get(k, t) for k in new)
            longest = max(longest, t - max(previous, ready))
        previous = t
    return longest


def coordinator_rebalances(rebalances: list[tuple[float, str]], coordinator_faults: list[float],
                           member_faults: list[float], window_s: float,
                           ) -> list[tuple[float, str]]:
    """Rebalances that started within ``window_s`` after a fault of the group's
    coordinator with no consumer fault in the ``window_s`` before them: the move of the
    coordinator is the only thing that can have started them."""
    return [(t, reason) for t, reason in rebalances
            if any(f <= t <= f + window_s for f in coordinator_faults)
            and not any(t - window_s <= m <= t for m in member_faults)]


def read_journals(directory: Path) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for path in sorted(directory.glob("member-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut by SIGKILL
            event["journal"] = path.stem
            events.append(event)
    return sorted(events, key=_time)


def _time(event: dict[str, object]) -> float:
    t = event["t"]
    assert isinstance(t, (int, float))
    return float(t)


def judge(events: list[dict[str, object]], acked: set[tuple[int, int]],
          faulted: dict[str, float], zombies: set[str],
          offset_samples: list[tuple[float, dict[int, int]]], partitions: int,
          fault_times: list[float], end_t: float, recovery_bound_s: float) -> Verdict:
    """``faulted``: journal -> time of its first fault; ``zombies``: journals stopped."""
    v = Verdict(produced=len(acked), recovery_bound_s=recovery_bound_s)
    readers: dict[tuple[int, int], set[str]] = {}
    seen: Counter[tuple[int, int]] = Counter()
    troubled: set[str] = set(faulted)
    for e in events:
        if e["event"] in ("commit_failed", "lost", "error"):
            troubled.add(str(e["journal"]))
    for e in events:
        if e["event"] != "records":
            continue
        for p, o in e["records"]:  # type: ignore[attr-defined]
            key = (int(p), int(o))
            seen[key] += 1
            readers.setdefault(key, set()).add(str(e["journal"]))
    v.processed = len(seen)
    v.lost = sorted(acked - set(seen))
    dups = [k for k, n in seen.items() if n > 1]
    v.duplicates = sum(seen[k] - 1 for k in dups)
    # a record read twice is explained when one of its readers could not commit it: killed
    # or frozen (a zombie hands out what it fetched before the freeze), or refused a commit
    v.unexplained_duplicates = sorted(k for k in dups if not readers[k] & troubled)
    v.zombie_commits_refused = sum(1 for e in events if e["event"] == "commit_failed"
                                   and e["journal"] in zombies)
    _zombie_probes(v, events)
    last: dict[int, int] = {}
    for t, sample in offset_samples:
        for p, off in sample.items():
            if off < last.get(p, -1):
                v.offsets_backwards.append(f"partition {p}: {last[p]} -> {off} at {t:.3f}")
            last[p] = max(off, last.get(p, -1))
    owners: dict[tuple[int, int], set[str]] = {}
    for e in events:
        if e["event"] == "assigned":
            for p in e["partitions"]:  # type: ignore[attr-defined]
                owners.setdefault((int(e["generation"]), int(p)), set()).add(  # type: ignore[call-overload]
                    str(e["member"]))
    v.double_owned = [f"generation {g} partition {p}: {sorted(m)}"
                      for (g, p), m in sorted(owners.items()) if len(m) > 1]
    _ownership(v, events, faulted, partitions, fault_times, end_t)
    return v


def _zombie_probes(v: Verdict, events: list[dict[str, object]]) -> None:
    """A woken zombie fetched and committed as its old self: after its partitions moved
    to another member, the broker must have refused every one of those requests."""
    for probe in (e for e in events if e["event"] == "zombie_probe"):
        v.zombie_probes += 1
        if "error" in probe:
            v.zombie_probes_unanswered += 1  # e.g. the broker was down at that moment
            continue
        sent, member = float(probe["sent"]), str(probe["member"])  # type: ignore[arg-type]
        generation = int(probe["generation"])  # type: ignore[call-overload]
        moved = {int(p) for e in events  # type: ignore[attr-defined]
                 if e["event"] == "assigned" and _time(e) < sent
                 and str(e["member"]) != member
                 and int(e["generation"]) > generation  # type: ignore[call-overload]
                 for p in e["partitions"]}  # type: ignore[attr-defined]
        for kind in ("fetch", "commit"):
            codes = probe.get(kind) or {}
            for p, code in codes.items():  # type: ignore[attr-defined]
                if code != "NONE":
                    if kind == "fetch":
                        v.zombie_fetches_refused += 1
                    else:
                        v.zombie_commits_refused += 1
                elif int(p) in moved:
                    v.zombie_accepted.append(
                        f"{kind} of partition {p} as {member} (generation {generation}) "
                        f"after the partition moved")


def _ownership(v: Verdict, events: list[dict[str, object]], faulted: dict[str, float],
               partitions: int, fault_times: list[float], end_t: float) -> None:
    """Who holds what over time: gaps per partition, and recovery after each fault."""
    held: dict[str, set[int]] = {}
    timeline: list[tuple[float, int]] = []  # (time, number of partitions owned)
    unowned_since: dict[int, float] = {}
    dead_at = dict(faulted)
    changes = [(_time(e), e) for e in events if e["event"] in ("assigned", "revoked", "lost")]
    deaths: list[tuple[float, dict[str, object]]] = [
        (t, {"event": "dead", "journal": j}) for j, t in dead_at.items()]
    marks = sorted(changes + deaths, key=lambda x: x[0])
    start = None
    for t, e in marks:
        j = str(e["journal"])
        parts = {int(p) for p in e.get("partitions", [])}  # type: ignore[attr-defined]
        mine = held.setdefault(j, set())
        if e["event"] == "assigned":
            mine |= parts
        elif e["event"] in ("revoked", "lost"):
            mine -= parts
        else:
            mine.clear()
        owned = set().union(*held.values())
        if start is None and len(owned) == partitions:
            start = t
        if start is not None:
            for p in range(partitions):
                if p not in owned:
                    unowned_since.setdefault(p, t)
                elif p in unowned_since:
                    gap = t - unowned_since.pop(p)
                    v.longest_unowned_s[p] = max(v.longest_unowned_s.get(p, 0.0), gap)
        timeline.append((t, len(owned)))
    for p, since in unowned_since.items():
        v.longest_unowned_s[p] = max(v.longest_unowned_s.get(p, 0.0), end_t - since)
    faults = sorted(fault_times)
    for i, ft in enumerate(faults):
        before = [n for t, n in timeline if t <= ft]
        if before and before[-1] == partitions:
            continue  # this fault took nothing away from the group
        back = next((t for t, n in timeline if t > ft and n == partitions), end_t)
        if i + 1 < len(faults) and faults[i + 1] < back:
            continue  # another fault struck before recovery: measured from that one
        v.slowest_recovery_s = max(v.slowest_recovery_s, back - ft)
