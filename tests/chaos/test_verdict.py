"""The chaos verdict catches what it claims to catch (synthetic journals)."""

from __future__ import annotations

from groupwire.cli.chaos.verdict import Verdict, judge, stored_twice


def ev(t: float, journal: str, event: str, **fields: object) -> dict[str, object]:
    return {"t": t, "journal": journal, "event": event, **fields}


CLEAN = [
    ev(1.0, "member-01", "assigned", generation=1, member="m1", partitions=[0, 1]),
    ev(2.0, "member-01", "records", generation=1, member="m1", records=[[0, 0], [1, 0]]),
    ev(2.1, "member-01", "committed", offsets={"0": 1, "1": 1}),
]


def test_a_clean_run_has_no_violation() -> None:
    v = judge(CLEAN, {(0, 0), (1, 0)}, {}, set(), [(1.5, {0: 0}), (2.5, {0: 1})], 2, [],
              3.0, 10.0)
    assert v.violations == []
    assert (v.produced, v.processed, v.duplicates) == (2, 2, 0)


def test_lost_backwards_double_owned_and_unexplained_duplicates_are_violations() -> None:
    events = [
        *CLEAN,
        ev(2.2, "member-02", "assigned", generation=1, member="m2", partitions=[1]),
        ev(2.3, "member-02", "records", generation=1, member="m2", records=[[1, 0]]),
    ]
    v = judge(events, {(0, 0), (1, 0), (1, 1)}, {}, set(), [(1.0, {0: 5}), (2.0, {0: 3})],
              2, [], 3.0, 10.0)
    text = " | ".join(v.violations)
    assert "1 acknowledged records never processed" in text
    assert "went backwards" in text
    assert "owned twice in one generation" in text
    assert "duplicates not explained" in text


def test_a_duplicate_after_a_kill_is_explained() -> None:
    events = [
        *CLEAN[:2],  # member-01 processed but was killed before committing
        ev(3.0, "member-02", "assigned", generation=2, member="m2", partitions=[0, 1]),
        ev(3.5, "member-02", "records", generation=2, member="m2", records=[[0, 0], [1, 0]]),
    ]
    v = judge(events, {(0, 0), (1, 0)}, {"member-01": 2.5}, set(), [], 2, [2.5], 4.0, 10.0)
    assert v.duplicates == 2 and v.unexplained_duplicates == []
    assert v.violations == []
    assert v.slowest_recovery_s == 0.5  # killed at 2.5, everything owned again at 3.0


def test_slow_recovery_is_a_violation() -> None:
    events = [
        CLEAN[0],
        ev(30.0, "member-02", "assigned", generation=2, member="m2", partitions=[0, 1]),
    ]
    v = judge(events, set(), {"member-01": 5.0}, set(), [], 2, [5.0], 40.0, 10.0)
    assert any("took 25.0 s" in x for x in v.violations)
    assert v.longest_unowned_s == {0: 25.0, 1: 25.0}


def test_recovery_is_measured_from_the_last_fault_before_it() -> None:
    events = [
        CLEAN[0],
        ev(9.0, "member-02", "assigned", generation=2, member="m2", partitions=[0, 1]),
    ]
    # member-01 killed at 2 s, another fault at 6 s, full ownership again at 9 s
    v = judge(events, set(), {"member-01": 2.0}, set(), [], 2, [2.0, 6.0], 20.0, 5.0)
    assert v.slowest_recovery_s == 3.0 and v.violations == []


def test_a_zombie_reading_stale_records_again_is_explained() -> None:
    events = [
        *CLEAN,
        ev(5.0, "member-02", "records", generation=0, member="z", records=[[0, 0]]),
        ev(5.1, "member-02", "commit_failed", error="CommitFailedError", partitions=[0]),
    ]
    v = judge(events, {(0, 0), (1, 0)}, {"member-02": 1.0}, {"member-02"}, [], 2, [], 6.0,
              10.0)
    assert v.duplicates == 1 and v.unexplained_duplicates == []
    assert v.zombie_commits_refused == 1


def probe(t: float, journal: str, generation: int, member: str,
          **answers: dict[str, str]) -> dict[str, object]:
    return ev(t, journal, "zombie_probe", sent=t, generation=generation, member=member,
              partitions=[0, 1], **answers)


def test_a_zombie_request_accepted_after_its_partition_moved_is_a_violation() -> None:
    events = [
        *CLEAN,
        ev(5.0, "member-02", "assigned", generation=2, member="m2", partitions=[0]),
        probe(6.0, "member-01", 1, "m1", fetch={"0": "NONE", "1": "NONE"},
              commit={"0": "PARTITION_NOT_OWNED", "1": "NONE"}),
    ]
    v = judge(events, {(0, 0), (1, 0)}, {}, {"member-01"}, [], 2, [], 7.0, 10.0)
    # partition 0 moved: its fetch is a violation, its commit was refused; partition 1 did
    # not move to anyone, so answering it is allowed
    assert v.zombie_accepted == [
        "fetch of partition 0 as m1 (generation 1) after the partition moved"]
    assert (v.zombie_fetches_refused, v.zombie_commits_refused) == (0, 1)
    assert any("accepted a zombie's fetch of partition 0" in x for x in v.violations)


def test_a_move_journaled_after_the_probe_or_to_the_same_member_does_not_count() -> None:
    events = [
        *CLEAN,
        ev(5.0, "member-01", "assigned", generation=2, member="m1", partitions=[0]),
        probe(6.0, "member-01", 1, "m1", fetch={"0": "NONE"}, commit={"0": "NONE"}),
        ev(7.0, "member-02", "assigned", generation=3, member="m2", partitions=[0, 1]),
    ]
    v = judge(events, {(0, 0), (1, 0)}, {}, {"member-01"}, [], 2, [], 8.0, 10.0)
    assert v.zombie_accepted == [] and v.violations == []


def test_refused_and_unanswered_probes_are_counted() -> None:
    events = [
        *CLEAN,
        ev(5.0, "member-02", "assigned", generation=2, member="m2", partitions=[0, 1]),
        probe(6.0, "member-01", 1, "m1",
              fetch={"0": "UNKNOWN_MEMBER_ID", "1": "UNKNOWN_MEMBER_ID"},
              commit={"0": "UNKNOWN_MEMBER_ID"}),
        ev(6.5, "member-01", "zombie_probe", sent=6.5, generation=1, member="m1",
           partitions=[0], error="ConnectionRefusedError()"),
    ]
    v = judge(events, {(0, 0), (1, 0)}, {}, {"member-01"}, [], 2, [], 8.0, 10.0)
    assert (v.zombie_probes, v.zombie_probes_unanswered) == (2, 1)
    assert (v.zombie_fetches_refused, v.zombie_commits_refused) == (2, 1)
    assert v.violations == []


def test_stored_twice_counts_each_copy_of_a_value_past_its_first() -> None:
    stored = {0: {0: b"r0", 1: b"r1", 2: b"r0", 3: b"r0", 4: None, 5: None},
              1: {0: b"r0", 1: b"r2"}}  # another partition's r0 is another record
    assert stored_twice(stored) == 2
    assert stored_twice({0: {0: b"a", 1: b"b"}}) == 0
    verdict = Verdict(log_duplicates=2)
    assert any("2 records stored twice" in v for v in verdict.violations)
    assert Verdict(log_duplicates=None).violations == []
