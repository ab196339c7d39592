"""A minimal stand-in for the asyncio shell: it keeps each ``__transaction_state``
partition's log, stores or fails writes when told (or at once), runs marker work, and
hands replies back by request token. Tests drive the clock through ``now``."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from groupwire.broker.transactions import (
    TRANSITIONS,
    MarkerWork,
    Partition,
    Reply,
    Result,
    TransactionConfig,
    TransactionCoordinator,
    Transition,
    TxnRecord,
    Write,
)
from groupwire.protocol.errors import ErrorCode

TIMEOUT = 60_000


class Shell:
    def __init__(self, config: TransactionConfig | None = None, *, auto_store: bool = True,
                 auto_markers: bool = True, host: Iterable[int] | None = None) -> None:
        self.config = config if config is not None else TransactionConfig(partitions=4)
        self.coordinator = TransactionCoordinator(self.config)
        self.now = 1_000
        self.auto_store = auto_store
        self.auto_markers = auto_markers
        self.log: dict[int, list[TxnRecord]] = {p: [] for p in range(self.config.partitions)}
        self.writes: dict[int, Write] = {}
        """Writes made and not yet settled."""
        self.markers: dict[int, MarkerWork] = {}
        """Marker work handed out and not yet settled."""
        self.marker_history: list[MarkerWork] = []
        self.replies: dict[int, Reply] = {}
        self.transitions: list[Transition] = []
        self.coordinator_epochs: dict[int, int] = {}
        self._token = 0
        self._fresh = 4_000
        for p in range(self.config.partitions) if host is None else host:
            self.load(p)

    # --- executing results ---

    def run(self, result: Result) -> Result:
        """Take in ``result``; with auto_store / auto_markers, settle what it asks at once
        (and what that asks in turn)."""
        for t in result.transitions:
            assert t[2] in TRANSITIONS[t[1]], f"transition not in the table: {t}"
        self.transitions.extend(result.transitions)
        for reply in result.replies:
            assert reply.token not in self.replies, f"answered twice: {reply}"
            self.replies[reply.token] = reply
        for write in result.writes:
            self.writes[write.token] = write
        for work in result.markers:
            self.markers[work.token] = work
            self.marker_history.append(work)
        if self.auto_store:
            for write in result.writes:
                self.store(write.token)
        if self.auto_markers:
            for work in result.markers:
                if work.token in self.markers:
                    self.markers_done(work.token)
        return result

    def store(self, token: int) -> Result:
        write = self.writes.pop(token)
        self.log[write.partition].append(write.record)
        return self.run(self.coordinator.stored(token, self.now))

    def fail(self, token: int, code: ErrorCode = ErrorCode.COORDINATOR_NOT_AVAILABLE) -> Result:
        del self.writes[token]
        return self.run(self.coordinator.write_failed(token, code, self.now))

    def markers_done(self, token: int) -> Result:
        del self.markers[token]
        return self.run(self.coordinator.markers_written(token, self.now))

    def markers_fail(self, token: int, retry: Collection[Partition]) -> Result:
        del self.markers[token]
        return self.run(self.coordinator.markers_failed(token, retry, self.now))

    def expire(self) -> Result:
        return self.run(self.coordinator.expire(self.now))

    def advance(self, ms: int) -> None:
        """Move the clock, firing the timer at each deadline on the way, as the shell's
        single timer does."""
        end = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= end:
            self.now = max(self.now, deadline)
            self.expire()
        self.now = end

    def load(self, partition: int) -> Result:
        epoch = self.coordinator_epochs.get(partition, 0) + 1
        self.coordinator_epochs[partition] = epoch
        return self.run(self.coordinator.load_partition(
            partition, list(self.log[partition]), epoch, self.now))

    def unload(self, partition: int) -> Result:
        return self.run(self.coordinator.unload_partition(partition, self.now))

    def restart(self) -> None:
        """A new coordinator from the logs; unsettled writes and markers are lost."""
        self.coordinator = TransactionCoordinator(self.config)
        self.writes.clear()
        self.markers.clear()
        for p in range(self.config.partitions):
            self.load(p)

    # --- requests: each returns its reply, None while it waits for a write ---

    def token(self) -> int:
        self._token += 1
        return self._token

    def fresh(self) -> int:
        self._fresh += 1
        return self._fresh

    def _reply(self, token: int, result: Result) -> Reply | None:
        self.run(result)
        return self.replies.get(token)

    def init(self, tid: str, timeout_ms: int = TIMEOUT, pid: int = -1, epoch: int = -1,
             fresh: int | None = None) -> Reply | None:
        token = self.token()
        return self._reply(token, self.coordinator.init_producer_id(
            token, tid, timeout_ms, pid, epoch, self.fresh() if fresh is None else fresh,
            self.now))

    def add(self, tid: str, pid: int, epoch: int,
            partitions: Collection[Partition] = (("orders", 0),)) -> Reply | None:
        token = self.token()
        return self._reply(token, self.coordinator.add_partitions(
            token, tid, pid, epoch, partitions, self.now))

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str) -> Reply | None:
        token = self.token()
        return self._reply(token, self.coordinator.add_offsets(
            token, tid, pid, epoch, group, self.now))

    def end(self, tid: str, pid: int, epoch: int, commit: bool = True) -> Reply | None:
        token = self.token()
        return self._reply(token, self.coordinator.end_txn(
            token, tid, pid, epoch, commit, self.now))

    def state(self, tid: str) -> str:
        (d,) = self.coordinator.describe([tid])
        return d.state if d.error_code == ErrorCode.NONE else d.error_code.name

    def begin(self, tid: str, partitions: Collection[Partition] = (("orders", 0),),
              timeout_ms: int = TIMEOUT) -> tuple[int, int]:
        """InitProducerId then AddPartitions, both answered NONE: ``(pid, epoch)``."""
        reply = self.init(tid, timeout_ms)
        assert reply is not None and reply.code == ErrorCode.NONE, reply
        added = self.add(tid, reply.producer_id, reply.producer_epoch, partitions)
        assert added is not None and added.code == ErrorCode.NONE, added
        return reply.producer_id, reply.producer_epoch
