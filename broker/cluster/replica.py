"""A partition's replication state on its leader: where each follower's log ends, when it
was last caught up, the ISR (committed, and the change on its way to etcd), the high
watermark and whether an acks=all produce may be answered (docs/design/cluster.md,
"Replication").

Kafka's rules, from ``Partition`` and ``Replica``: a follower is caught up when a fetch
asks from at least the leader's log end at the time of that fetch; the high watermark is
the smallest log end over the maximal ISR (KIP-497) and never goes down. Time is an
argument (ms); the shell feeds fetches and appends in and writes the ISR changes out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

UNKNOWN_OFFSET = -1
"""A follower's log end before its first fetch to this leader."""

AckRefusal = Literal["NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"]
"""Kafka's errors 19 and 20: refused before appending, or appended but the ISR shrank
below ``min.insync.replicas`` before the high watermark passed the batch."""


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int
    last_caught_up_ms: int
    last_fetch_leader_leo: int
    """The leader's log end when this follower last fetched."""
    last_fetch_ms: int


class LeaderReplicaState:
    """Constructed when this broker becomes the partition's leader (or the epoch
    changes): that is when the followers' positions are forgotten and their clocks
    restart, as Kafka's ``resetReplicaState`` does."""

    def __init__(self, *, leader: int, replicas: list[int] | tuple[int, ...],
                 isr: set[int] | frozenset[int], leader_epoch: int, log_end_offset: int,
                 high_watermark: int, replica_lag_time_max_ms: int, now_ms: int,
                 partition_epoch: int = 0, epoch_start_offset: int | None = None) -> None:
        if leader not in replicas:
            raise ValueError(f"leader {leader} is not a replica of {list(replicas)}")
        if leader not in isr or not set(isr) <= set(replicas):
            raise ValueError(f"ISR {sorted(isr)} must hold the leader and only replicas")
        if not 0 <= high_watermark <= log_end_offset:
            raise ValueError(f"high watermark {high_watermark} outside [0, {log_end_offset}]")
        self.leader = leader
        self.replicas = tuple(replicas)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._isr = frozenset(isr)
        self._pending: frozenset[int] | None = None
        self._leo = log_end_offset
        self._hw = high_watermark
        self.epoch_start_offset = (log_end_offset if epoch_start_offset is None
                                   else epoch_start_offset)
        """Where this leader's epoch begins: a follower joins the ISR only once it has
        all of it, so it never counts as in sync with a log from an older leader."""
        # Kafka: ISR members start caught up now, the others long ago, so a member that
        # never fetches leaves after the lag time and an outsider cannot hold the HW.
        self._followers = {
            node: FollowerState(UNKNOWN_OFFSET, now_ms if node in self._isr else 0,
                                UNKNOWN_OFFSET, 0)
            for node in self.replicas if node != leader}

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (what etcd holds)."""
        return self._isr

    @property
    def pending_isr(self) -> frozenset[int] | None:
        return self._pending

    @property
    def maximal_isr(self) -> frozenset[int]:
        """KIP-497: while a change is on its way, both the old and the new ISR count."""
        return self._isr if self._pending is None else self._isr | self._pending

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    def follower(self, node: int) -> FollowerState:
        return self._followers[node]

    def follower_fetched(self, node: int, fetch_offset: int, leader_leo_at_fetch: int,
                         now_ms: int) -> bool:
        """A Fetch from follower ``node`` asking from ``fetch_offset`` (so its log ends
        there), when the leader's log ended at ``leader_leo_at_fetch``. Returns whether
        the high watermark moved.

        Kafka's ``updateFetchState``: caught up now if it asked from the leader's end; else
        caught up as of its previous fetch if it now has everything the leader had then
        (a follower that always trails a busy leader by one fetch stays in sync)."""
        state = self._followers.get(node)
        if state is None:
            raise KeyError(f"node {node} is not a follower of this partition")
        if fetch_offset >= leader_leo_at_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_leo = max(state.last_fetch_leader_leo, leader_leo_at_fetch)
        state.last_fetch_ms = now_ms
        return self._advance_hw()

    def leader_appended(self, new_leo: int) -> bool:
        """The leader's own log grew; with an ISR of one that alone moves the HW."""
        if new_leo < self._leo:
            raise ValueError(f"a leader's log does not shrink: {self._leo} -> {new_leo}")
        self._leo = new_leo
        return self._advance_hw()

    def _advance_hw(self) -> bool:
        candidate = self._leo
        for node in self.maximal_isr:
            if node != self.leader:
                candidate = min(candidate, self._followers[node].log_end_offset)
        if candidate > self._hw:
            self._hw = candidate
            return True
        return False

    def _caught_up(self, node: int, now_ms: int) -> bool:
        state = self._followers[node]
        return (state.log_end_offset == self._leo
                or now_ms - state.last_caught_up_ms <= self.replica_lag_time_max_ms)

    def isr_to_shrink(self, now_ms: int) -> frozenset[int]:
        """Followers in the ISR not caught up for more than the lag time. Empty while a
        change is pending: the next decision waits for etcd's answer, as in Kafka."""
        if self._pending is not None:
            return frozenset()
        return frozenset(n for n in self._isr
                         if n != self.leader and not self._caught_up(n, now_ms))

    def isr_to_expand(self) -> frozenset[int]:
        """Replicas outside the ISR whose log reaches both the high watermark and the
        start of this leader's epoch. Empty while a change is pending."""
        if self._pending is not None:
            return frozenset()
        floor = max(self._hw, self.epoch_start_offset)
        return frozenset(n for n, s in self._followers.items()
                         if n not in self._isr and s.log_end_offset >= floor)

    def propose_isr(self, new_isr: set[int] | frozenset[int]) -> None:
        """A write of ``new_isr`` to etcd is on its way; until it is answered the HW is
        computed over old ∪ new."""
        if self._pending is not None:
            raise ValueError(f"an ISR change to {sorted(self._pending)} is already pending")
        new = frozenset(new_isr)
        if self.leader not in new or not new <= set(self.replicas):
            raise ValueError(f"ISR {sorted(new)} must hold the leader and only replicas")
        self._pending = new

    def isr_committed(self, new_isr: set[int] | frozenset[int], partition_epoch: int) -> bool:
        """etcd took the change (or the watch brought a newer one from this leader's
        epoch): ``new_isr`` is now the ISR. Returns whether the HW moved (a shrink
        drops a laggard that was holding it)."""
        new = frozenset(new_isr)
        if self.leader not in new or not new <= set(self.replicas):
            raise ValueError(f"ISR {sorted(new)} must hold the leader and only replicas")
        # A follower that left (it lagged, or took itself out: its log went offline)
        # rejoins only after fetching again, never on the position it last reported.
        for node in self._isr - new:
            if node != self.leader:
                self._followers[node].log_end_offset = UNKNOWN_OFFSET
        self._isr = new
        self._pending = None
        self.partition_epoch = partition_epoch
        return self._advance_hw()

    def isr_change_failed(self) -> None:
        """The guarded write lost (a stale image): the committed ISR stands, and the
        decision is taken again from the state the watch brings."""
        self._pending = None

    def append_refusal(self, min_insync: int) -> AckRefusal | None:
        """Checked when an acks=all batch arrives, before it is appended: Kafka counts
        the committed ISR."""
        if len(self._isr) < min_insync:
            return "NOT_ENOUGH_REPLICAS"
        return None

    def can_ack(self, required_offset: int, min_insync: int) -> bool | AckRefusal:
        """Whether an appended acks=all batch may be answered; ``required_offset`` is
        the offset after its last record. False: not yet (the HW has not passed it).
        True: done. A refusal: the HW passed it, but the ISR shrank below
        ``min_insync`` meanwhile (Kafka's ``checkEnoughReplicasReachOffset``)."""
        if self._hw < required_offset:
            return False
        if len(self._isr) < min_insync:
            return "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
        return True
