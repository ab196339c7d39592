"""The topic-admin rules alone (broker.topics.rules): pure functions of what exists."""

from __future__ import annotations

from groupwire.broker.topics.rules import (
    Growth,
    Limits,
    NewTopic,
    Refusal,
    Topics,
    check_creates,
    check_deletes,
    check_growths,
)
from groupwire.protocol.errors import ErrorCode

LIMITS = Limits(max_partitions=10, default_partitions=2, default_replication_factor=1)
INTERNAL = frozenset({"__consumer_offsets"})


def _topics(**overrides: object) -> Topics:
    values: dict[str, object] = {"partitions": {"__consumer_offsets": 3, "a": 2},
                                 "internal": INTERNAL, "hosted": 5, "brokers": 3}
    values.update(overrides)
    return Topics(**values)  # type: ignore[arg-type]


def _codes(answers: list[object]) -> list[ErrorCode]:
    return [a.code if isinstance(a, Refusal) else ErrorCode.NONE for a in answers]


def test_creates_are_checked_in_order_and_count_against_the_limit() -> None:
    answers = check_creates([("x", -1, -1), ("y", 3, 3), ("z", 1, 1), ("a", 1, 1)],
                            _topics(), LIMITS)
    assert answers[:2] == [NewTopic("x", 2, 1), NewTopic("y", 3, 3)]
    z = answers[2]  # 5 hosted + 2 + 3 accepted before it + 1 = 11 > 10
    assert isinstance(z, Refusal) and z.code == ErrorCode.POLICY_VIOLATION
    assert z.message == ("1 more partitions for 'z' would make 11, over the broker's limit "
                         "of 10 partitions (--max-partitions; it hosts 5, internal topics "
                         "included, and 5 are being created)")
    assert _codes([answers[3]]) == [ErrorCode.TOPIC_ALREADY_EXISTS]


def test_every_refusal_of_a_create() -> None:
    answers = check_creates(
        [("d", 1, 1), ("d", 1, 1), ("bad/name", 1, 1), ("__x", 1, 1), ("a", 0, 0),
         ("p0", 0, 1), ("p", 10_001, 1), ("r0", 1, 0), ("r4", 1, 4), ("t", 1, 1),
         ("over", 6, 1)], _topics(taken={"t"}), LIMITS)
    assert _codes(answers) == [
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.TOPIC_ALREADY_EXISTS,  # existence before the counts, as Kafka
        ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_REPLICATION_FACTOR,
        ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.POLICY_VIOLATION]
    r4 = answers[8]
    assert isinstance(r4, Refusal)
    assert r4.message == "replication factor 4 is larger than the 3 live brokers"


def test_growths() -> None:
    answers = check_growths(
        [("a", 4), ("a2", 1), ("__consumer_offsets", 5), ("nope", 2), ("g", 3),
         ("h", 2), ("h", 3)],
        _topics(partitions={"__consumer_offsets": 3, "a": 2, "a2": 2, "g": 1, "h": 1},
                growing={"g"}), LIMITS)
    assert answers[0] == Growth("a", 2, 4)
    assert _codes(answers[1:]) == [
        ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    over = check_growths([("a", 4), ("b", 6)],
                         _topics(partitions={"a": 2, "b": 1}), LIMITS)
    assert _codes(over) == [ErrorCode.NONE, ErrorCode.POLICY_VIOLATION]  # 5 + 2 + 5 > 10
    # a cluster counts the broker the new partitions would land on
    assert _codes(check_growths([("a", 3)], _topics(), LIMITS, {"a": 10})) == [
        ErrorCode.POLICY_VIOLATION]


def test_deletes() -> None:
    answers = check_deletes(["a", "nope", "__consumer_offsets", "b", "b"], _topics())
    assert answers[0] == "a"
    assert _codes(answers[1:]) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   ErrorCode.INVALID_TOPIC_EXCEPTION,
                                   ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
