"""The leader-epoch cache of one partition replica (Kafka's ``leader-epoch-checkpoint``,
KIP-101 and KIP-279), as a value, and the follower's truncation rule built on it.

Each entry says "from this offset on, batches were written by the leader of this epoch".
A leader answers OffsetsForLeaderEpoch from it; a follower compares that answer with its
own cache to find where its log stopped matching the leader's, and truncates there
instead of at its high watermark, which may be behind (data loss) or ahead (divergence).
The shell reads and writes the checkpoint file and the log; this module only decides.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

SINGLE_BROKER_LEADER_EPOCH: Final = 0
"""A single broker's only leader epoch: its logs keep no cache, it leads in epoch 0
since their start, and stamps 0 into v1 batches (docs/protocol.md §4)."""
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1
CHECKPOINT_VERSION: Final = 0
"""Kafka's checkpoint files start with version 0; ours follow the same layout."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Entries strictly increasing in both epoch and start offset.

    Mutable like Kafka's, but without I/O: the shell writes :meth:`encode` to the
    checkpoint file after each change that must survive a restart."""

    __slots__ = ("_entries",)

    def __init__(self, entries: tuple[EpochEntry, ...] | list[EpochEntry] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (its first batch's base offset,
        or the leader's log end when it takes the epoch).

        The latest epoch again is a no-op (every batch of an epoch calls this). A newer
        epoch at the same offset as the latest replaces it: that epoch wrote nothing, and
        keeping both would break the strict order. Anything going backwards is a bug in
        the caller, who must truncate first, so it is refused rather than repaired."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} at offset {start_offset}: both must be >= 0")
        if not self._entries:
            self._entries.append(EpochEntry(epoch, start_offset))
            return
        last = self._entries[-1]
        if start_offset < last.start_offset:
            raise ValueError(
                f"epoch {epoch} at offset {start_offset}: before the start {last.start_offset}"
                f" of the latest epoch {last.epoch}; truncate the cache first")
        if epoch < last.epoch:
            raise ValueError(
                f"epoch {epoch} at offset {start_offset}: older than the latest epoch"
                f" {last.epoch}")
        if epoch == last.epoch:
            return
        if start_offset == last.start_offset:
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch's answer: ``(epoch, end_offset)`` for the largest epoch
        <= ``requested_epoch``, its end being the next epoch's start offset, or the log
        end for the latest epoch.

        As Kafka: an epoch older than every entry answers ``(requested_epoch, first
        start offset)`` (the log may have lost earlier epochs to retention, but the
        requested one ended no later than that); an undefined epoch, an empty cache or
        an epoch newer than the latest answer ``(-1, -1)``."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        last = self._entries[-1]
        if requested_epoch == last.epoch:
            return requested_epoch, log_end_offset
        if requested_epoch > last.epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epochs = [e.epoch for e in self._entries]
        higher = bisect_right(epochs, requested_epoch)  # first entry with epoch > requested
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut to end before ``end_offset``: epochs starting at or after it
        are gone."""
        if end_offset < 0:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset`` (retention, DeleteRecords): epochs that
        started at or before it collapse into the last of them, which now starts there."""
        keep = [e for e in self._entries if e.start_offset > start_offset]
        dropped = [e for e in self._entries if e.start_offset <= start_offset]
        if dropped:
            keep.insert(0, EpochEntry(dropped[-1].epoch, start_offset))
        self._entries = keep

    def encode(self) -> bytes:
        """The checkpoint file: a version line, a count line, then ``epoch offset``."""
        lines = [str(CHECKPOINT_VERSION), str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        return ("\n".join(lines) + "\n").encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> LeaderEpochCache:
        """Refuses (ValueError) anything :meth:`encode` would not have written, so a torn
        or foreign file is noticed rather than trusted."""
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError as exc:
            raise ValueError(f"leader-epoch checkpoint is not ASCII: {exc}") from None
        if not text.endswith("\n"):
            raise ValueError("leader-epoch checkpoint does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 2:
            raise ValueError("leader-epoch checkpoint: missing version or count line")
        version = _parse_int(lines[0], "version")
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"leader-epoch checkpoint: unknown version {version}")
        count = _parse_int(lines[1], "count")
        if count != len(lines) - 2:
            raise ValueError(
                f"leader-epoch checkpoint: count {count} but {len(lines) - 2} entries")
        cache = cls()
        for number, line in enumerate(lines[2:], start=3):
            fields = line.split(" ")
            if len(fields) != 2:
                raise ValueError(f"leader-epoch checkpoint line {number}: {line!r}")
            epoch = _parse_int(fields[0], f"line {number} epoch")
            offset = _parse_int(fields[1], f"line {number} offset")
            latest = cache._entries[-1] if cache._entries else None
            if epoch < 0 or offset < 0 or (
                    latest is not None
                    and (epoch <= latest.epoch or offset <= latest.start_offset)):
                raise ValueError(
                    f"leader-epoch checkpoint line {number}: {line!r} is not after the"
                    " previous entry, or negative")
            cache._entries.append(EpochEntry(epoch, offset))
        return cache

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaderEpochCache) and self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache([{inner}])"


def _parse_int(text: str, what: str) -> int:
    # int() would also take "+1", " 1" and "1_0": the file holds only plain digits.
    digits = text[1:] if text.startswith("-") else text
    if not digits.isdigit() or not digits.isascii():
        raise ValueError(f"leader-epoch checkpoint: {what} {text!r} is not an integer")
    return int(text)


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where a follower cuts its log after one OffsetsForLeaderEpoch round trip."""

    offset: int
    """Truncate the log (and the cache, :meth:`LeaderEpochCache.truncate_from_end`) so
    that it ends here; equal to the log end means nothing to cut."""
    done: bool
    """False: the leader answered an epoch this follower never had, so the logs may
    still differ below ``offset``; ask again with the (new) latest epoch."""


def divergence(follower_cache: LeaderEpochCache, follower_leo: int,
               leader_answer_epoch: int, leader_answer_end: int, *,
               high_watermark: int) -> Truncation:
    """KIP-279's follower rule (Kafka's ``getOffsetTruncationState``), given the leader's
    answer to "where does my latest epoch end on your log?".

    - The leader knows no end (``-1``): fall back to the high watermark, pre-KIP-101.
    - The leader answers an epoch the follower also has: the logs agree up to the
      smaller of the two ends of that epoch; cut there, done.
    - The leader answers an epoch the follower never had: the follower's largest epoch
      below it ends where the two may first differ; cut there and ask again for that
      epoch, since the leader may have ended it earlier (the multi-round case).
    - The follower has no epoch at or below the answer: trust the leader's end.
    """
    if leader_answer_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(high_watermark, follower_leo), done=True)
    if leader_answer_epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader_answer_end, follower_leo), done=True)
    own_epoch, own_end = follower_cache.end_offset_for(leader_answer_epoch, follower_leo)
    if own_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(leader_answer_end, follower_leo), done=True)
    if own_epoch != leader_answer_epoch:
        return Truncation(min(own_end, follower_leo), done=False)
    return Truncation(min(own_end, leader_answer_end, follower_leo), done=True)
