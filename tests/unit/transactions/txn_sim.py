"""Transactions end to end, in a model small enough to run thousands of schedules.

The coordinator core runs behind a pretend shell that keeps its ``__transaction_state``
logs and settles writes and marker jobs when the schedule says (late, out of order,
failed, or lost in a crash). Data partitions keep records tagged with the transaction
that wrote them and apply markers with Kafka's fencing (a producer epoch or coordinator
epoch older than one already seen is refused). Producer clients follow Kafka's client:
one request at a time, retry on retriable codes, give up when fenced.

A schedule is a list of ``(op, arg)`` steps (see :data:`OPS`); :func:`run` plays it,
settles everything, and raises :class:`Violation` if anything went wrong:

- a record of an aborted transaction visible to read_committed, or a transaction visible
  in one partition and aborted in another;
- a transaction whose EndTxn(commit) was answered NONE not visible once its markers are
  written; one whose EndTxn(abort) was answered NONE visible;
- a visible transaction whose client never asked to commit it;
- NONE to AddPartitions/EndTxn for an epoch older than one already handed out or marked
  (a fenced producer let back in);
- the coordinator's answers (describe) differing from its log's last records;
- a move not in the state table, or a code no Kafka client should see here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from groupwire.broker.transactions import (
    TRANSITIONS,
    MarkerWork,
    Result,
    TransactionConfig,
    TransactionCoordinator,
    TxnRecord,
    Write,
)
from groupwire.protocol.errors import ErrorCode

E = ErrorCode
CONFIG = TransactionConfig(transaction_max_timeout_ms=10_000,
                           transactional_id_expiration_ms=15_000, partitions=2,
                           offsets_partitions=2, retry_backoff_ms=50)
TXN_IDS = ("t0", "t1", "t2")  # partitions 0, 1, 0 of 2
TXN_TIMEOUT = 4_000
TOPICS = (("d", 0), ("d", 1), ("d", 2))
GROUPS = ("g0", "g1")
RETRIABLE = frozenset({E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR,
                       E.COORDINATOR_NOT_AVAILABLE})
FATAL = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING})
"""Fatal to a client here. INVALID_PRODUCER_ID_MAPPING: its id expired while it idled."""

OPS = ("client",) * 6 + ("store",) * 4 + ("markers",) * 3 + ("time",) * 2 + (
    "fail", "new_client", "crash", "lose")
"""Weighted: a step's op is ``OPS[op % len(OPS)]``. A second producer and a crash also
need ``arg % 8 == 0`` / ``arg % 4 == 0``: a few per run, not one every twenty steps."""
Step = tuple[int, int]
Tag = tuple[int, int]
"""A client's transaction: ``(client number, transaction number)``."""


class Violation(AssertionError):
    pass


class DataPartition:
    """A partition's transactional records: ``[tag, producer id, outcome]`` with outcome
    None while open, True committed, False aborted."""

    def __init__(self) -> None:
        self.records: list[list[object]] = []
        self.epochs: dict[int, int] = {}
        self.coordinator_epochs: dict[int, int] = {}
        self.open: dict[int, list[int]] = {}

    def produce(self, pid: int, epoch: int, tag: Tag) -> bool:
        if epoch < self.epochs.get(pid, -1):
            return False  # INVALID_PRODUCER_EPOCH: a fenced producer
        self.epochs[pid] = epoch
        open_ = self.open.setdefault(pid, [])
        if open_ and self.records[open_[0]][0] != tag:
            raise Violation(f"producer {pid} has two transactions open in one partition: "
                            f"{self.records[open_[0]][0]} and {tag}")
        open_.append(len(self.records))
        self.records.append([tag, pid, None])
        return True

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> bool:
        if (epoch < self.epochs.get(pid, -1)
                or coordinator_epoch < self.coordinator_epochs.get(pid, -1)):
            return False  # fenced: a stale marker
        self.epochs[pid] = epoch
        self.coordinator_epochs[pid] = coordinator_epoch
        for i in self.open.pop(pid, []):
            self.records[i][2] = commit
        return True


@dataclass
class Client:
    number: int
    tid: str
    pid: int = -1
    epoch: int = -1
    phase: str = "init"  # init, ready, txn, dead
    request: tuple[str, object] | None = None
    """The request it waits on or will send again: (kind, argument)."""
    token: int | None = None
    """Its token while the request is out."""
    added: set[tuple[str, int]] = field(default_factory=set)
    txn: int = 0
    abortable: bool = False
    lose_next: bool = False


@dataclass
class TagInfo:
    commit_sent: bool = False
    commit_acked: bool = False
    abort_acked: bool = False


class World:
    def __init__(self) -> None:
        self.now = 0
        self.coordinator_epoch = 1
        self.coordinator = TransactionCoordinator(CONFIG)
        self.log: dict[int, list[TxnRecord]] = {p: [] for p in range(CONFIG.partitions)}
        self.writes: dict[int, Write] = {}
        self.markers: list[tuple[bool, MarkerWork]] = []
        """Marker jobs not yet run, each with whether the coordinator that made them
        still hosts the transaction (else it is stale: run late, reported to no one)."""
        partitions = [*TOPICS, *(self.coordinator.offsets_partition(g) for g in GROUPS)]
        self.data = {p: DataPartition() for p in partitions}
        self.clients: list[Client] = []
        self.by_token: dict[int, Client] = {}
        self.tags: dict[Tag, TagInfo] = {}
        self.max_epoch: dict[int, int] = {}
        self.quiescing = False
        self.stats: Counter[str] = Counter()
        """What happened, so tests can tell the schedules exercise it all."""
        self._token = 0
        self._pid = 100
        for p in range(CONFIG.partitions):
            self.apply(self.coordinator.load_partition(p, [], self.coordinator_epoch, self.now))
        for tid in TXN_IDS:
            self.new_client(tid)

    # --- the shell ---

    def apply(self, result: Result) -> None:
        for tid, source, target in result.transitions:
            if target not in TRANSITIONS[source]:
                raise Violation(f"{tid}: {source} -> {target} is not in the table")
            self.stats[f"{source.value}->{target.value}"] += 1
        for write in result.writes:
            self.writes[write.token] = write
        for work in result.markers:
            self.markers.append((True, work))
            if work.producer_epoch > self.max_epoch.get(work.producer_id, -1):
                self.max_epoch[work.producer_id] = work.producer_epoch
        for reply in result.replies:
            self.deliver(reply.token, reply.code, reply.producer_id, reply.producer_epoch)

    def store(self, token: int) -> None:
        write = self.writes.pop(token)
        self.log[write.partition].append(write.record)
        self.apply(self.coordinator.stored(token, self.now))

    def fail(self, token: int, code: ErrorCode) -> None:
        del self.writes[token]
        self.stats["write failed"] += 1
        self.apply(self.coordinator.write_failed(token, code, self.now))

    def run_markers(self, index: int, fail_mask: int) -> None:
        live, work = self.markers.pop(index)
        retry = []
        for i, partition in enumerate(work.partitions):
            if fail_mask >> i & 1:
                retry.append(partition)  # not written: NOT_LEADER, timeout...
                self.stats["marker failed"] += 1
                continue
            written = self.data[partition].marker(work.producer_id, work.producer_epoch,
                                                  work.commit, work.coordinator_epoch)
            if not written and live:
                raise Violation(f"a partition refused the live marker job {work}")
            self._check_visible(partition)
        if not live:
            self.stats["stale marker job run"] += 1
            return  # the coordinator that asked is gone: nobody to tell
        if retry:
            self.apply(self.coordinator.markers_failed(work.token, retry, self.now))
        else:
            self.apply(self.coordinator.markers_written(work.token, self.now))

    def advance(self, ms: int) -> None:
        end = self.now + ms
        for _ in range(1_000):
            deadline = self.coordinator.next_deadline()
            if deadline is None or deadline > end:
                break
            self.now = max(self.now, deadline)
            self.apply(self.coordinator.expire(self.now))
        self.now = end

    def crash(self, arg: int) -> None:
        """Writes in flight are stored or lost (by ``arg``'s bits); the partitions'
        leadership moves (one partition, or all: a restart) and the coordinator resumes
        from the logs, with a higher coordinator epoch."""
        moved = (range(CONFIG.partitions) if arg % 3 == 0
                 else [arg // 3 % CONFIG.partitions])
        self.stats["restart" if arg % 3 == 0 else "partition moved"] += 1
        for i, (token, write) in enumerate(sorted(self.writes.items())):
            if write.partition in moved:
                del self.writes[token]
                if arg >> (i + 4) & 1:
                    self.log[write.partition].append(write.record)
        self.markers = [(live and self.coordinator.partition_of(w.transactional_id) not in moved, w)
                        for live, w in self.markers]
        self.coordinator_epoch += 1
        for p in moved:
            self.apply(self.coordinator.unload_partition(p, self.now))
        if len(moved) == CONFIG.partitions:
            self.coordinator = TransactionCoordinator(CONFIG)
            self.writes.clear()
        for p in moved:
            self.apply(self.coordinator.load_partition(p, list(self.log[p]),
                                                       self.coordinator_epoch, self.now))

    # --- clients ---

    def new_client(self, tid: str) -> None:
        self.clients.append(Client(len(self.clients), tid))

    def send(self, client: Client) -> None:
        assert client.request is not None
        self._token += 1
        token = client.token = self._token
        self.by_token[token] = client
        kind, arg = client.request
        c = self.coordinator
        if kind == "init":
            assert isinstance(arg, tuple)
            self._pid += 1
            result = c.init_producer_id(token, client.tid, TXN_TIMEOUT, arg[0], arg[1],
                                        self._pid, self.now)
        elif kind == "add":
            assert isinstance(arg, tuple)
            result = c.add_partitions(token, client.tid, client.pid, client.epoch, arg,
                                      self.now)
        elif kind == "offsets":
            assert isinstance(arg, str)
            result = c.add_offsets(token, client.tid, client.pid, client.epoch, arg,
                                   self.now)
        else:
            if arg:
                self.tags[(client.number, client.txn)].commit_sent = True
            result = c.end_txn(token, client.tid, client.pid, client.epoch, bool(arg),
                               self.now)
        self.apply(result)

    def act(self, client: Client, arg: int) -> None:
        """The client's next move: send again what is unanswered, else a step of its
        transactional loop."""
        if client.phase == "dead" or client.token is not None or self.quiescing:
            return
        if client.request is None:
            if client.phase == "init":
                client.request = ("init", (-1, -1))
            elif client.phase == "ready":
                choice = arg % 8
                if choice == 0:  # KIP-360: re-initialize naming its own id and epoch
                    client.request = ("init", (client.pid, client.epoch))
                elif choice == 1:
                    client.request = ("offsets", GROUPS[arg // 8 % len(GROUPS)])
                else:
                    client.request = ("add", self._some_partitions(arg // 8))
            else:
                choice = arg % 10
                if client.abortable or choice == 0:
                    client.request = ("end", False)
                elif choice <= 2:
                    client.request = ("end", True)
                elif choice == 3:
                    client.request = ("add", self._some_partitions(arg // 10))
                elif choice == 4:
                    client.request = ("offsets", GROUPS[arg // 10 % len(GROUPS)])
                else:
                    self._produce(client, arg // 10)
                    return
        self.send(client)

    def _some_partitions(self, arg: int) -> tuple[tuple[str, int], ...]:
        chosen = tuple(p for i, p in enumerate(TOPICS) if arg >> i & 1)
        return chosen or (TOPICS[arg % len(TOPICS)],)

    def _produce(self, client: Client, arg: int) -> None:
        targets = sorted(client.added)
        partition = targets[arg % len(targets)]
        if self.data[partition].produce(client.pid, client.epoch, (client.number, client.txn)):
            self.stats["produced"] += 1
        else:
            self.stats["produce fenced"] += 1
            client.abortable = True

    def deliver(self, token: int, code: ErrorCode, pid: int, epoch: int) -> None:
        client = self.by_token.pop(token, None)
        if client is None:
            raise Violation(f"a reply to no request: {token}")
        assert client.request is not None and client.token == token
        kind, arg = client.request
        if code == E.NONE and kind != "init" and client.epoch < self.max_epoch.get(
                client.pid, -1):
            raise Violation(f"client {client.number} ({client.pid}, {client.epoch}) was "
                            f"answered NONE to {kind} after epoch "
                            f"{self.max_epoch[client.pid]} was handed out")
        if code == E.NONE and kind == "init" and epoch > self.max_epoch.get(pid, -1):
            self.max_epoch[pid] = epoch
        client.token = None
        if client.lose_next and not self.quiescing:
            self.stats["reply lost"] += 1
            client.lose_next = False
            self.send(client)  # the answer was lost on the way: it asks again
            return
        if code in RETRIABLE:
            return  # request kept: sent again at its next turn
        client.request = None
        if code in FATAL:
            self.stats[f"client got {code.name}"] += 1
            client.phase = "dead"
            if not any(c.tid == client.tid and c.phase != "dead" for c in self.clients):
                self.new_client(client.tid)  # the application starts a new producer
            return
        if code != E.NONE:
            raise Violation(f"client {client.number} got {code.name} to {kind}")
        if kind == "init":
            client.pid, client.epoch = pid, epoch
            client.phase, client.abortable = "ready", False
            client.added.clear()
        elif kind in ("add", "offsets"):
            if client.phase == "ready":
                client.phase = "txn"
                client.txn += 1
                self.tags[(client.number, client.txn)] = TagInfo()
            if kind == "add":
                assert isinstance(arg, tuple)
                client.added.update(arg)
            else:
                assert isinstance(arg, str)
                client.added.add(self.coordinator.offsets_partition(arg))
        else:
            info = self.tags[(client.number, client.txn)]
            if arg:
                info.commit_acked = True
            else:
                info.abort_acked = True
            client.phase = "ready"
            client.added.clear()
            client.abortable = False

    # --- invariants ---

    def _check_visible(self, partition: tuple[str, int]) -> None:
        for tag, _, outcome in self.data[partition].records:
            if outcome is True and not self.tags[tag].commit_sent:  # type: ignore[index]
                raise Violation(f"{tag} is visible but its client never asked to commit")

    def check_log(self) -> None:
        """What the coordinator answers is what its log says last."""
        for tid in TXN_IDS:
            partition = self.coordinator.partition_of(tid)
            if not self.coordinator.hosts(partition):
                continue
            last = None
            for record in self.log[partition]:
                if record.transactional_id == tid:
                    last = record.metadata
            (d,) = self.coordinator.describe([tid])
            if last is None:
                if d.error_code != E.TRANSACTIONAL_ID_NOT_FOUND:
                    raise Violation(f"{tid}: described {d} with nothing stored")
                continue
            seen = (d.state, d.producer_id, d.producer_epoch, d.timeout_ms, d.start_ms,
                    d.partitions)
            stored = (last.state.value, last.producer_id, last.producer_epoch, last.timeout_ms,
                      last.start_ms, tuple(sorted(last.partitions)))
            if seen != stored:
                raise Violation(f"{tid}: described {seen}, stored {stored}")

    def settle(self) -> None:
        """No new client work: store every write, run every marker job, let time pass
        until every transaction has ended."""
        self.quiescing = True
        for _ in range(500):
            if self.writes:
                self.store(min(self.writes))
            elif self.markers:
                self.run_markers(0, 0)
            elif any(d.state in ("Ongoing", "PrepareCommit", "PrepareAbort")
                     for d in self.coordinator.describe(TXN_IDS)):
                deadline = self.coordinator.next_deadline()
                assert deadline is not None, "an open transaction with no deadline"
                self.advance(max(0, deadline - self.now))
            else:
                return
        raise Violation("the coordinator never settled")

    def check_outcomes(self) -> None:
        outcomes: dict[Tag, set[object]] = {}
        for partition, data in self.data.items():
            for tag, _, outcome in data.records:
                if outcome is None:
                    raise Violation(f"{tag} still open in {partition} after settling")
                outcomes.setdefault(tag, set()).add(outcome)  # type: ignore[arg-type]
        for tag, seen in outcomes.items():
            info = self.tags[tag]
            if len(seen) > 1:
                raise Violation(f"{tag} committed in some partitions, aborted in others")
            if info.commit_acked and seen != {True}:
                raise Violation(f"{tag}: commit answered NONE but it was aborted")
            if info.abort_acked and seen != {False}:
                raise Violation(f"{tag}: abort answered NONE but it was committed")
            if seen == {True} and not info.commit_sent:
                raise Violation(f"{tag}: committed without being asked")


def step(world: World, op: int, arg: int) -> None:
    name = OPS[op % len(OPS)]
    if name == "client":
        live = [c for c in world.clients if c.phase != "dead"]
        if live:
            world.act(live[arg % len(live)], arg // len(live))
    elif name == "store" and world.writes:
        tokens = sorted(world.writes)
        world.store(tokens[arg % len(tokens)])
    elif name == "fail" and world.writes:
        tokens = sorted(world.writes)
        code = (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR)[arg // len(tokens) % 2]
        world.fail(tokens[arg % len(tokens)], code)
    elif name == "markers" and world.markers:
        # mostly the newest job, so that older ones (stale ones too) linger and land late
        count = len(world.markers)
        index = count - 1 if arg % 4 else arg // 4 % count
        fail_mask = arg // 64 if arg % 5 == 0 else 0
        world.run_markers(index, fail_mask)
    elif name == "time":  # now and then long enough for idle ids to expire
        world.advance(20_000 if arg % 16 == 0 else arg % 1_000)
    elif name == "new_client" and arg % 8 == 0:
        world.new_client(TXN_IDS[arg // 8 % len(TXN_IDS)])
    elif name == "crash" and arg % 4 == 0:
        world.crash(arg // 4)
    elif name == "lose":
        live = [c for c in world.clients if c.phase != "dead"]
        if live:
            live[arg % len(live)].lose_next = True
    world.check_log()


def run(schedule: Iterable[Step]) -> World:
    world = World()
    for op, arg in schedule:
        step(world, op, arg)
    world.settle()
    world.check_log()
    world.check_outcomes()
    return world


def random_schedule(rng_seed: int, length: int) -> Sequence[Step]:
    import random

    rng = random.Random(rng_seed)
    return [(rng.randrange(len(OPS)), rng.randrange(1 << 16)) for _ in range(length)]
