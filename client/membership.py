"""The consumer's group membership as a pure state machine (docs/design/kafka.md §15).

It decides what each JoinGroup / SyncGroup / Heartbeat / OffsetCommit answer means for the
member, and when the application has gone too long without polling. No I/O, no asyncio,
no clock: the shells (the app-loop consumer and the heartbeat thread) pass ``now_ms`` in and
carry out the returned :class:`Action`. Both shells share one instance under a lock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from groupwire.protocol.errors import ErrorCode

__all__ = ["NO_GENERATION", "Action", "CommitCheck", "Generation", "MemberState", "Membership"]

NO_GENERATION: Final = -1

_FATAL_JOIN: Final = frozenset({
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ErrorCode.INVALID_SESSION_TIMEOUT,
    ErrorCode.INVALID_GROUP_ID, ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_AUTHORIZATION_FAILED,
})
_COORDINATOR: Final = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
})


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"            # JoinGroup sent (PREPARING_REBALANCE)
    SYNCING = "syncing"            # JoinGroup answered, SyncGroup pending (COMPLETING_REBALANCE)
    STABLE = "stable"
    FATAL = "fatal"
    CLOSED = "closed"


class Action(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"                    # join again now
    RETRY = "retry"                      # join again after a backoff
    FIND_COORDINATOR = "find_coordinator"
    FATAL = "fatal"
    IGNORE = "ignore"                    # an answer about a generation we no longer hold


class CommitCheck(enum.Enum):
    OK = "ok"
    REBALANCING = "rebalancing"   # RebalanceInProgressError
    FAILED = "failed"             # CommitFailedError: no generation to commit with


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str


class Membership:
    """One member's view of its group; every method is O(1)."""

    def __init__(self, *, group_instance_id: str | None, max_poll_interval_ms: int,
                 now_ms: int) -> None:
        self.group_instance_id = group_instance_id
        self.max_poll_interval_ms = max_poll_interval_ms
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation_id = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.rejoin_needed = True
        self.lost_pending = False      # partitions held must be reported lost on next poll
        self.fatal_code: ErrorCode | None = None
        self.fatal_message = ""
        self.last_poll_ms = now_ms
        self.in_poll = False
        self.last_heartbeat_answer_ms: int | None = None
        self.rebalance_count = 0
        self.rebalance_started_ms: int | None = None
        self.last_rebalance_duration_ms: int | None = None
        self.poll_expired_count = 0

    # --- properties ------------------------------------------------------------------

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def generation(self) -> Generation:
        return Generation(self.generation_id, self.member_id)

    def needs_join(self) -> bool:
        """True when the next poll must (re)join: unjoined, or a rejoin was requested."""
        if self.state in (MemberState.FATAL, MemberState.CLOSED):
            return False
        return self.state == MemberState.UNJOINED or (
            self.state == MemberState.STABLE and self.rejoin_needed)

    def heartbeat_target(self) -> Generation | None:
        """What to heartbeat for, or None: only once JoinGroup answered (docs/design/kafka.md
        §15.2)."""
        if self.state in (MemberState.SYNCING, MemberState.STABLE) and self.member_id:
            return Generation(self.generation_id, self.member_id)
        return None

    # --- application polls -----------------------------------------------------------

    def poll_started(self, now_ms: int) -> None:
        self.in_poll = True
        self.last_poll_ms = now_ms

    def poll_ended(self, now_ms: int) -> None:
        self.in_poll = False
        self.last_poll_ms = now_ms

    def poll_age_ms(self, now_ms: int) -> int:
        return 0 if self.in_poll else max(0, now_ms - self.last_poll_ms)

    def poll_expired(self, now_ms: int) -> bool:
        """The app stopped polling for longer than max_poll_interval_ms while a member."""
        return (self.state in (MemberState.SYNCING, MemberState.STABLE)
                and self.poll_age_ms(now_ms) > self.max_poll_interval_ms)

    def expire_poll(self, now_ms: int) -> Generation | None:
        """Poll-timeout expiry: reset generation and member id, mark partitions lost.

        Returns the identity to send in a LeaveGroup (dynamic members only), else None.
        """
        leave = None
        if not self.is_static and self.member_id:
            leave = self.generation
        self.poll_expired_count += 1
        self._reset(keep_member_id=False, now_ms=now_ms)
        return leave

    # --- JoinGroup / SyncGroup ---------------------------------------------------------

    def join_sent(self, now_ms: int) -> None:
        if self.rebalance_started_ms is None:
            self.rebalance_started_ms = now_ms
        self.state = MemberState.JOINING
        self.rejoin_needed = False

    def on_join_response(self, code: int, *, member_id: str, generation_id: int,
                         protocol_name: str | None, leader: str, now_ms: int) -> Action:
        err = _code(code)
        if err == ErrorCode.NONE:
            self.member_id = member_id
            self.generation_id = generation_id
            self.protocol_name = protocol_name
            self.leader_id = leader
            self.state = MemberState.SYNCING
            return Action.OK
        self.state = MemberState.UNJOINED
        if err == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = member_id
            return Action.REJOIN
        if err == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset(keep_member_id=False, now_ms=now_ms)
            return Action.REJOIN
        if err == ErrorCode.ILLEGAL_GENERATION:
            self._reset(keep_member_id=True, now_ms=now_ms)
            return Action.REJOIN
        if err in _COORDINATOR:
            return Action.FIND_COORDINATOR
        if err in _FATAL_JOIN:
            return self._fatal(err)
        return Action.RETRY  # REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS, others

    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    def on_sync_response(self, code: int, now_ms: int) -> Action:
        err = _code(code)
        if err == ErrorCode.NONE:
            self.state = MemberState.STABLE
            self.last_heartbeat_answer_ms = now_ms
            self.rebalance_count += 1
            if self.rebalance_started_ms is not None:
                self.last_rebalance_duration_ms = now_ms - self.rebalance_started_ms
            self.rebalance_started_ms = None
            return Action.OK
        self.state = MemberState.UNJOINED
        if err == ErrorCode.REBALANCE_IN_PROGRESS:
            return Action.REJOIN
        return self._membership_error(err, now_ms)

    def connection_failed(self) -> None:
        """A JoinGroup/SyncGroup died with its connection: the next poll re-sends it."""
        if self.state in (MemberState.JOINING, MemberState.SYNCING):
            self.state = MemberState.UNJOINED

    def request_rejoin(self) -> None:
        """Cooperative second round, metadata change, or a server REBALANCE_IN_PROGRESS."""
        self.rejoin_needed = True

    # --- Heartbeat -----------------------------------------------------------------------

    def on_heartbeat_response(self, code: int, sent: Generation, now_ms: int) -> Action:
        err = _code(code)
        if sent != self.generation:
            return Action.IGNORE
        if self.state == MemberState.JOINING:
            # Sent before our JoinGroup: that JoinGroup's answer is the newer truth (a stale
            # ILLEGAL_GENERATION here must not reset the generation it is about to bring).
            return Action.IGNORE
        if err == ErrorCode.NONE:
            self.last_heartbeat_answer_ms = now_ms
            return Action.OK
        if err == ErrorCode.REBALANCE_IN_PROGRESS:
            self.last_heartbeat_answer_ms = now_ms
            if self.state == MemberState.STABLE:
                self.rejoin_needed = True
            return Action.REJOIN
        return self._membership_error(err, now_ms)

    def _membership_error(self, err: ErrorCode, now_ms: int) -> Action:
        """What SyncGroup and Heartbeat errors mean for membership (docs/design/kafka.md
        §15.2-15.3):
        a new generation is needed (member id kept only for ILLEGAL_GENERATION), a fenced
        static member or one the broker's ACLs refuse stops, a lost coordinator is looked
        up again, the rest is retried."""
        if err in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset(keep_member_id=err == ErrorCode.ILLEGAL_GENERATION, now_ms=now_ms)
            return Action.REJOIN
        if err in (ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_AUTHORIZATION_FAILED):
            return self._fatal(err)  # ACLs (or member ownership) refuse: retrying cannot help
        if err in _COORDINATOR:
            return Action.FIND_COORDINATOR
        return Action.RETRY

    def check_session(self, now_ms: int, session_timeout_ms: int) -> bool:
        """Presume the session lost when no heartbeat answer came for a whole session
        timeout (a process frozen by SIGSTOP or a VM pause, a broker away that long).

        By then the broker has removed the member and given its partitions away, so
        records fetched before must not be handed out: the partitions are reported lost,
        the buffers dropped, and the member joins afresh. True if that just happened.
        """
        heard = self.last_heartbeat_answer_ms
        if (self.state is not MemberState.STABLE or heard is None
                or now_ms - heard <= session_timeout_ms):
            return False
        self.last_heartbeat_answer_ms = None
        self._reset(keep_member_id=False, now_ms=now_ms)
        return True

    # --- commits ---------------------------------------------------------------------------

    def commit_check(self) -> CommitCheck:
        """May a group commit be sent now, with :attr:`generation` (docs/design/kafka.md
        §15.3)?"""
        if self.state == MemberState.STABLE and self.generation_id >= 0:
            return CommitCheck.OK
        if self.state in (MemberState.JOINING, MemberState.SYNCING) or (
                self.state == MemberState.UNJOINED and self.generation_id >= 0):
            return CommitCheck.REBALANCING
        return CommitCheck.FAILED

    def on_commit_error(self, code: int, sent: Generation, now_ms: int) -> Action:
        err = _code(code)
        if err == ErrorCode.REBALANCE_IN_PROGRESS:
            if sent == self.generation:
                self.rejoin_needed = True
            return Action.REJOIN
        if (err in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION)
                and sent != self.generation):
            return Action.REJOIN  # about a generation we have already left
        return self._membership_error(err, now_ms)

    # --- lifecycle -----------------------------------------------------------------------

    def take_lost(self) -> bool:
        """Whether partitions held must be reported lost; clears the flag."""
        lost, self.lost_pending = self.lost_pending, False
        return lost

    def leave(self) -> Generation | None:
        """The app unsubscribed: forget the membership (its partitions were revoked, not
        lost). Returns the identity a dynamic member sends in its LeaveGroup."""
        leave = self.generation if self.member_id and not self.is_static else None
        self.generation_id = NO_GENERATION
        self.protocol_name = None
        self.leader_id = ""
        self.member_id = ""
        self.lost_pending = False
        self.rejoin_needed = True
        if self.state not in (MemberState.FATAL, MemberState.CLOSED):
            self.state = MemberState.UNJOINED
        return leave

    def close(self) -> None:
        self.state = MemberState.CLOSED

    def _reset(self, *, keep_member_id: bool, now_ms: int) -> None:
        if self.generation_id >= 0 or self.state in (MemberState.STABLE, MemberState.SYNCING):
            self.lost_pending = True
        self.generation_id = NO_GENERATION
        self.protocol_name = None
        self.leader_id = ""
        if not keep_member_id:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        if self.rebalance_started_ms is None:
            self.rebalance_started_ms = now_ms

    def _fatal(self, err: ErrorCode) -> Action:
        self.state = MemberState.FATAL
        self.fatal_code = err
        if self.generation_id >= 0:
            self.lost_pending = True
        self.generation_id = NO_GENERATION
        return Action.FATAL


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
