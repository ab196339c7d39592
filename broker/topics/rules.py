"""The topic-admin rules, one copy for both modes (docs/protocol.md §4).

A single broker (``broker.topic_apis``) and a cluster's controller
(``broker.clustering.controller_apis``) used to check CreateTopics, CreatePartitions and
DeleteTopics each in its own way, and drifted: the cluster enforced no
``--max-partitions`` at all, so a topic over the limit was written to etcd and then
refused by every broker's disk, for ever. Both now ask these functions, which see only
numbers (what exists, what is hosted, what the request asks), so a request gets the same
code and message in either mode.

Sans-I/O: no asyncio, no clock, no storage; the callers say what exists.

Checks, in Kafka's order: a name given twice in one request (INVALID_REQUEST, every
entry for it); the name (INVALID_TOPIC_EXCEPTION); existence (TOPIC_ALREADY_EXISTS,
UNKNOWN_TOPIC_OR_PARTITION); internal topics (INVALID_TOPIC_EXCEPTION); counts
(INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR); then the broker's limit
(POLICY_VIOLATION).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from groupwire.protocol.errors import ErrorCode

MAX_PARTITIONS_PER_TOPIC: Final = 10_000
"""The wire contract's bound on one topic's partitions (an array's longest)."""
RESERVED_PREFIX: Final = "__"
"""Names a client may not create: the broker's own topics have them."""
DEFAULT: Final = -1
"""``num_partitions`` / ``replication_factor`` meaning "the broker's default"."""

_TOPIC_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True, slots=True)
class Refusal:
    """An entry refused: the code and message it is answered with."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class Limits:
    """The broker's settings the rules apply."""

    max_partitions: int
    """``--max-partitions``: partitions one broker hosts, internal topics included."""
    default_partitions: int
    """``--num-partitions``: a creation's count when it asks for -1."""
    default_replication_factor: int
    """A creation's replication factor when it asks for -1 (1 on a single broker)."""


@dataclass(frozen=True, slots=True)
class Topics:
    """What exists, as one mode sees it when a request arrives."""

    partitions: Mapping[str, int]
    """Every topic, with its partition count (internal ones included)."""
    internal: Collection[str]
    """The broker's own topics: never created, grown or deleted by a client."""
    hosted: int
    """Partitions the fullest broker concerned hosts, internal topics included."""
    brokers: int
    """Live brokers: the largest replication factor that can be placed (1 alone)."""
    taken: Collection[str] = ()
    """Names being created or deleted (single broker: the work is off the loop)."""
    growing: Collection[str] = ()
    """Topics being given more partitions now."""
    reserved: int = 0
    """Partitions of creations in flight (they count against the limit too)."""


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A creation the rules allow, with the defaults filled in."""

    name: str
    partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class Growth:
    """A CreatePartitions the rules allow: ``name`` from ``current`` to ``total``."""

    name: str
    current: int
    total: int


def name_refusal(name: object) -> Refusal | None:
    """Why ``name`` may not be created by a client, or None if it may."""
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name):
        return _invalid_topic(f"invalid topic name {name!r}: 1-249 of [A-Za-z0-9._-] "
                              f"required")
    if name in (".", ".."):
        return _invalid_topic(f"invalid topic name {name!r}")
    if name.startswith(RESERVED_PREFIX):
        return _invalid_topic(f"invalid topic name {name!r}: the {RESERVED_PREFIX} prefix "
                              f"is reserved")
    return None


def named_twice(names: Sequence[str]) -> set[str]:
    """Names given more than once in one request (every entry for them is refused)."""
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    return twice


def check_creates(requested: Sequence[tuple[str, int, int]], topics: Topics,
                  limits: Limits) -> list[NewTopic | Refusal]:
    """One answer per ``(name, num_partitions, replication_factor)``, in order. Allowed
    creations count against the limit for the entries after them."""
    twice = named_twice([name for name, _, _ in requested])
    reserved = topics.reserved
    answers: list[NewTopic | Refusal] = []
    for name, asked_partitions, asked_rf in requested:
        partitions = limits.default_partitions if asked_partitions == DEFAULT \
            else asked_partitions
        rf = limits.default_replication_factor if asked_rf == DEFAULT else asked_rf
        refusal = (_duplicate(name) if name in twice
                   else name_refusal(name)
                   or _exists(name, topics)
                   or partitions_refusal(partitions)
                   or replication_refusal(rf, topics.brokers)
                   or limit_refusal(name, partitions, topics.hosted, reserved, limits))
        if refusal is not None:
            answers.append(refusal)
            continue
        reserved += partitions
        answers.append(NewTopic(name, partitions, rf))
    return answers


def check_growths(requested: Sequence[tuple[str, int]], topics: Topics, limits: Limits,
                  hosted_for: Mapping[str, int] | None = None) -> list[Growth | Refusal]:
    """One answer per ``(name, new total)``, in order. ``hosted_for``: a topic's own
    ``hosted`` where it differs from ``topics.hosted`` (a cluster counts the brokers
    that would take the new partitions)."""
    twice = named_twice([name for name, _ in requested])
    reserved = topics.reserved
    answers: list[Growth | Refusal] = []
    for name, total in requested:
        current = topics.partitions.get(name)
        refusal: Refusal | None
        if name in twice:
            refusal = _duplicate(name)
        elif current is None:
            refusal = Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        elif name in topics.internal:
            refusal = _invalid_topic(f"{name} is internal: its partitions are fixed")
        elif name in topics.growing:
            refusal = Refusal(ErrorCode.INVALID_PARTITIONS,
                              f"topic {name!r} is already being given more partitions: "
                              f"retry once that is done")
        elif total <= current:
            refusal = Refusal(ErrorCode.INVALID_PARTITIONS,
                              f"topic {name!r} has {current} partitions; the new total "
                              f"must be larger, got {total}")
        else:
            hosted = (topics.hosted if hosted_for is None
                      else hosted_for.get(name, topics.hosted))
            refusal = (partitions_refusal(total)
                       or limit_refusal(name, total - current, hosted, reserved, limits))
        if refusal is not None:
            answers.append(refusal)
            continue
        assert current is not None
        reserved += total - current
        answers.append(Growth(name, current, total))
    return answers


def check_deletes(names: Sequence[str], topics: Topics) -> list[str | Refusal]:
    """One answer per name, in order: the name itself if it may be deleted."""
    twice = named_twice(names)
    answers: list[str | Refusal] = []
    for name in names:
        if name in twice:
            answers.append(_duplicate(name))
        elif name not in topics.partitions:
            answers.append(Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"unknown topic {name!r}"))
        elif name in topics.internal:
            answers.append(_invalid_topic(f"{name} is internal: the broker's own topic, "
                                          f"it cannot be deleted"))
        else:
            answers.append(name)
    return answers


def partitions_refusal(partitions: int) -> Refusal | None:
    """A topic's partition count outside 1 to ``MAX_PARTITIONS_PER_TOPIC``."""
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        return Refusal(ErrorCode.INVALID_PARTITIONS,
                       f"number of partitions must be 1-{MAX_PARTITIONS_PER_TOPIC}, got "
                       f"{partitions}")
    return None


def replication_refusal(rf: int, brokers: int) -> Refusal | None:
    """A replication factor below 1, or above the live brokers."""
    if rf < 1:
        return Refusal(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"replication factor must be at least 1, got {rf}")
    if rf > brokers:
        live = "1 live broker" if brokers == 1 else f"{brokers} live brokers"
        return Refusal(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"replication factor {rf} is larger than the {live}")
    return None


def limit_refusal(name: str, adding: int, hosted: int, reserved: int,
                  limits: Limits) -> Refusal | None:
    """``adding`` partitions that would take a broker hosting ``hosted`` (and creating
    ``reserved``) past ``--max-partitions`` (Kafka's answer to a request past an
    operator's limit)."""
    limit = limits.max_partitions
    total = hosted + reserved + adding
    if total <= limit:
        return None
    being = f", and {reserved} are being created" if reserved else ""
    return Refusal(ErrorCode.POLICY_VIOLATION,
                   f"{adding} more partitions for {name!r} would make {total}, over the "
                   f"broker's limit of {limit} partitions (--max-partitions; it hosts "
                   f"{hosted}, internal topics included{being})")


def _exists(name: str, topics: Topics) -> Refusal | None:
    if name in topics.partitions:
        return Refusal(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    if name in topics.taken:
        return Refusal(ErrorCode.TOPIC_ALREADY_EXISTS,
                       f"topic {name!r} already exists (it is being created or deleted)")
    return None


def _duplicate(name: str) -> Refusal:
    return Refusal(ErrorCode.INVALID_REQUEST, f"topic {name!r} named more than once")


def _invalid_topic(message: str) -> Refusal:
    return Refusal(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
