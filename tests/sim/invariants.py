"""What must hold after every step, judged from public views (DescribeGroups, the replies
clients see) and the engine's state moves, against the simulator's own rules."""

from __future__ import annotations

from typing import Final

from groupwire.broker.coordinator.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
)
from groupwire.protocol.consumer import decode_assignment
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DescribedGroup,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tests.sim.world import World

# Kafka's classic group moves (docs/design/kafka.md §2), written out here independently of the
# coordinator's own table so that a wrong table would be caught too.
LEGAL: Final[frozenset[tuple[GroupState, GroupState]]] = frozenset(
    {(EMPTY, PREPARING_REBALANCE), (STABLE, PREPARING_REBALANCE),
     (COMPLETING_REBALANCE, PREPARING_REBALANCE), (PREPARING_REBALANCE, COMPLETING_REBALANCE),
     (PREPARING_REBALANCE, EMPTY), (COMPLETING_REBALANCE, STABLE)}
    | {(s, DEAD) for s in GroupState if s is not DEAD})


WRITE_FAILED: Final = frozenset({ErrorCode.KAFKA_STORAGE_ERROR,
                                 ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.NOT_COORDINATOR})
"""What a commit accepted but whose write failed answers: not a refusal."""


class InvariantError(AssertionError):
    """An invariant failed; the schedule adds its seed and steps."""


class Checker:
    """Keeps what was observed so far and checks it after every step."""

    def __init__(self, world: World, group_id: str, session_of: dict[str, int],
                 slack_ms: int) -> None:
        self.world = world
        self.group_id = group_id
        self.session_of = session_of          # member id -> its session timeout
        self.slack_ms = slack_ms              # max rebalance timeout + grace + delay
        self.contact: dict[str, int] = {}     # member id -> last time it could be renewed
        self.instance_of: dict[str, str] = {}  # member id -> group instance id
        self.leaders: dict[int, set[str]] = {}
        self.owners: dict[int, dict[tuple[str, int], str]] = {}
        self.generation = -1
        self.members: frozenset[str] = frozenset()
        self.described: DescribedGroup | None = None
        self.commits_accepted = 0
        self._assignments: dict[bytes, list[tuple[str, list[int]]]] = {}
        # offsets: what OffsetFetch must show, from the commits answered NONE
        self.expected: dict[tuple[str, int], int] = {}
        self._token_of: dict[tuple[str, int], int] = {}
        self._commit_context: dict[tuple[int, int], tuple[DescribedGroup, str, int, bool]] = {}
        self._early: dict[tuple[int, int], dict[tuple[str, int], ErrorCode]] = {}
        self._reborn_after = 0  # requests up to this cid were to a group since deleted
        world.on_reply = self.saw_reply
        world.on_deleted = self.saw_deleted
        world.on_offset_deleted = self.saw_offset_deleted

    def identity(self, member_id: str) -> str:
        instance = self.instance_of.get(member_id)
        return f"instance:{instance}" if instance is not None else f"member:{member_id}"

    # --- observations ---------------------------------------------------------------------

    def saw_request(self, member_id: str) -> None:
        if member_id:
            self.contact[member_id] = self.world.now

    def saw_deleted(self, group_id: str) -> None:
        """A new group of that name starts again at generation 0."""
        if group_id == self.group_id:
            self.leaders.clear()
            self.owners.clear()
            self.expected.clear()
            self._token_of.clear()
            # answers held for a write of the deleted group may come after this
            self._reborn_after = self.world.last_cid

    def saw_offset_deleted(self, group_id: str, tp: tuple[str, int]) -> None:
        """Expired (or otherwise tombstoned): OffsetFetch shows nothing for it now."""
        if group_id == self.group_id:
            self.expected.pop(tp, None)
            self._token_of.pop(tp, None)

    def saw_reply(self, key: tuple[int, int], request: Request, resp: Response) -> None:
        """Every answer as the coordinator produces it (parked ones when released, held
        ones when their write settles). Answering a Join or Sync re-arms the member's
        session (Kafka), hence the renewal."""
        if key[1] <= self._reborn_after and not isinstance(resp, OffsetCommitResponse):
            return  # about the group deleted since, not the one of that name now
        if isinstance(resp, OffsetCommitResponse) and isinstance(request, OffsetCommitRequest):
            self.saw_commit_answer(key, request, resp)
        elif isinstance(resp, JoinGroupResponse) and isinstance(request, JoinGroupRequest):
            self.saw_join(resp, request.group_instance_id)
        elif isinstance(resp, SyncGroupResponse) and isinstance(request, SyncGroupRequest):
            self.contact[request.member_id] = self.world.now
            self.saw_sync(resp, request.member_id, request.generation_id)

    def saw_join(self, resp: JoinGroupResponse, instance_id: str | None) -> None:
        if resp.member_id:
            self.contact[resp.member_id] = self.world.now
            if instance_id is not None:
                self.instance_of[resp.member_id] = instance_id
        if resp.error_code != ErrorCode.NONE:
            return
        for m in resp.members:
            if m.group_instance_id is not None:
                self.instance_of[m.member_id] = m.group_instance_id
        raw = self.leaders.setdefault(resp.generation_id, set())
        if resp.leader not in raw:
            raw.add(resp.leader)
            self._check_leader(resp.generation_id)

    def saw_sync(self, resp: SyncGroupResponse, member_id: str, generation_id: int) -> None:
        if resp.error_code != ErrorCode.NONE:
            return
        owners = self.owners.setdefault(generation_id, {})
        me = self.identity(member_id)
        for topic, parts in decode_assignment(resp.assignment).assigned_partitions:
            for p in parts:
                other = owners.setdefault((topic, p), me)
                if other != me:
                    raise InvariantError(f"generation {generation_id}: {(topic, p)} handed "
                                         f"to {other} and {me}")

    def before_commit(self) -> DescribedGroup:
        return self.world.describe(self.group_id)

    def sent_commit(self, key: tuple[int, int], before: DescribedGroup, member_id: str,
                    generation_id: int, *, judge: bool, owned: bool = False,
                    ) -> dict[tuple[str, int], ErrorCode] | None:
        """A commit was sent as ``key``; with ``judge``, :meth:`saw_commit` judges its
        answer (now, or when its write settles). Returns the answer's codes if it came."""
        codes = self._early.pop(key, None)
        if codes is not None:
            if judge:
                self.saw_commit(before, member_id, generation_id, codes, owned=owned)
            return codes
        if judge:
            self._commit_context[key] = (before, member_id, generation_id, owned)
        return None

    def saw_commit_answer(self, key: tuple[int, int], request: OffsetCommitRequest,
                          resp: OffsetCommitResponse) -> None:
        """A commit's answer: each partition answered NONE is what OffsetFetch must show
        from now on, unless a later write of it was stored first."""
        codes = {(t.name, p.partition_index): ErrorCode(p.error_code)
                 for t in resp.topics for p in t.partitions}
        if request.group_id == self.group_id and key[1] > self._reborn_after and any(
                c is ErrorCode.NONE for c in codes.values()):
            token = self.world.write_of.get(key)
            if token is None:
                raise InvariantError(f"commit {key} answered NONE without a write")
            for t in request.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if codes.get(tp) is ErrorCode.NONE and token > self._token_of.get(tp, 0):
                        self.expected[tp] = p.committed_offset
                        self._token_of[tp] = token
        context = self._commit_context.pop(key, None)
        if context is None:
            self._early[key] = codes
        else:
            before, member_id, generation_id, owned = context
            self.saw_commit(before, member_id, generation_id, codes, owned=owned)

    def saw_commit(self, before: DescribedGroup, member_id: str, generation_id: int,
                   codes: dict[tuple[str, int], ErrorCode], *, owned: bool = False) -> None:
        """``owned``: the partitions are the ones this member was assigned; then a Stable
        group must take the commit from its current member (Kafka)."""
        current_ids = {m.member_id for m in before.members}
        if (owned and before.group_state == STABLE.value and member_id in current_ids
                and generation_id == before.generation_id
                and any(c is not ErrorCode.NONE and c not in WRITE_FAILED
                        for c in codes.values())):
            raise InvariantError(f"Stable group refused a commit of its own partitions from "
                                 f"current member {member_id!r}: {codes}")
        if not codes or any(c is not ErrorCode.NONE for c in codes.values()):
            return
        self.commits_accepted += 1
        if generation_id < 0 and before.group_state == EMPTY.value:
            return  # Kafka: an Empty group only stores offsets; anyone may commit
        current = {m.member_id for m in before.members}
        if member_id not in current or generation_id != before.generation_id:
            raise InvariantError(
                f"commit accepted from {member_id!r} generation {generation_id}, but the "
                f"group ({before.group_state}) is at generation {before.generation_id} "
                f"with members {sorted(current)}")

    # --- after every step -------------------------------------------------------------------

    def check(self, parked: frozenset[str] = frozenset()) -> None:
        """``parked``: members whose JoinGroup or SyncGroup is still unanswered; like
        Kafka's awaiting members they are kept alive until answered (the join phase counts
        initial-delay windows, so a clock jump may legitimately extend it)."""
        world = self.world
        moves, world.transitions[:] = list(world.transitions), []
        for source, target in moves:
            if (source, target) not in LEGAL:
                raise InvariantError(f"illegal transition {source.value} -> {target.value}")
        g = world.describe(self.group_id)
        self.described = g
        state = g.group_state
        ids = frozenset(m.member_id for m in g.members)
        for m in g.members:
            if m.group_instance_id is not None:
                self.instance_of[m.member_id] = m.group_instance_id
        now = world.now
        # a completed join phase re-arms every remaining member's session (Kafka)
        if g.generation_id != self.generation:
            for mid in ids:
                self.contact[mid] = now
            self.generation = g.generation_id
        for mid in ids - self.members:
            self.contact.setdefault(mid, now)
        for mid in parked & ids:
            self.contact[mid] = now
        self.members = ids
        self._check_leaders()
        self._check_deadlines(ids, now)
        self._check_offsets()
        if state == STABLE.value:
            self._check_stable(g)
        elif state in (EMPTY.value, DEAD.value, "") and ids:
            raise InvariantError(f"{state or 'absent'} group has members {sorted(ids)}")

    def _check_offsets(self) -> None:
        """OffsetFetch shows only offsets whose commit was answered NONE, and never
        loses one unless committed over (or expired, or the group deleted)."""
        shown = self.world.offsets(self.group_id)
        for tp, offset in shown.items():
            if tp not in self.expected:
                raise InvariantError(f"OffsetFetch shows {offset} for {tp}, which no "
                                     f"commit answered NONE set")
            if offset != self.expected[tp]:
                raise InvariantError(f"OffsetFetch shows {offset} for {tp}; the last "
                                     f"commit answered NONE set {self.expected[tp]}")
        lost = sorted(set(self.expected) - set(shown))
        if lost:
            raise InvariantError(f"committed offsets lost from OffsetFetch: {lost}")

    def check_settled(self) -> None:
        """Once every write settled: every request that wrote was answered exactly once
        (twice is caught as it happens), unless its connection closed."""
        world = self.world
        if world.coord.pending_writes():
            raise InvariantError(f"writes never settled: {world.coord.pending_writes()}")
        unanswered = sorted(key for key in world.write_of
                            if key not in world.replies and key[0] not in world.closed)
        if unanswered:
            raise InvariantError(f"requests never answered: {unanswered}")
        self._check_offsets()

    def _check_leader(self, generation: int) -> None:
        who = {self.identity(r) for r in self.leaders[generation]}
        if len(who) > 1:
            raise InvariantError(f"generation {generation} has leaders {sorted(who)}")

    def _check_leaders(self) -> None:
        """Again once Describe taught more member -> instance pairs: only generations
        with several leader ids can fail."""
        for generation, raw in self.leaders.items():
            if len(raw) > 1:
                self._check_leader(generation)

    def _check_deadlines(self, ids: frozenset[str], now: int) -> None:
        for mid in ids:
            session = self.session_of.get(mid)
            if session is None:
                continue
            deadline = self.contact[mid] + session + self.slack_ms
            if now > deadline:
                raise InvariantError(f"member {mid} still in the group at {now}, past its "
                                     f"deadline {deadline} (last renewal {self.contact[mid]})")

    def _decoded(self, data: bytes) -> list[tuple[str, list[int]]]:
        cached = self._assignments.get(data)
        if cached is None:
            cached = self._assignments[data] = decode_assignment(data).assigned_partitions
        return cached

    def _check_stable(self, g: DescribedGroup) -> None:
        owned: dict[tuple[str, int], str] = {}
        for m in g.members:
            if not m.member_assignment:
                raise InvariantError(f"Stable member {m.member_id} has no assignment")
            for topic, parts in self._decoded(m.member_assignment):
                count = self.world.topics.get(topic)
                for p in parts:
                    if count is None or not 0 <= p < count:
                        raise InvariantError(f"{m.member_id} assigned unknown {(topic, p)}")
                    other = owned.setdefault((topic, p), m.member_id)
                    if other != m.member_id:
                        raise InvariantError(f"Stable: {(topic, p)} assigned to {other} "
                                             f"and {m.member_id}")
