"""The pure parts of bench/transactions.py: how records split into transactions, the end
offsets a phase must leave, and the figures (ratios paired within a round).

The benchmark itself runs in tests/bench/test_smoke.py (``--smoke``).
"""

from __future__ import annotations

import pytest

from bench.transactions import (
    PLAIN,
    RDK,
    SDK,
    Phase,
    Results,
    expected_end,
    figures,
    transactions,
    txn_phase,
)

TXN100, TXN1000 = txn_phase(100), txn_phase(1000)


def phase(records: int, seconds: float, commits: int = 0, *, capped: bool = False,
          primed: int = 0) -> Phase:
    return Phase(records, seconds, commits, broker_cpu_s=records * 2e-6,
                 client_cpu_s=records * 1e-6, capped=capped, primed=primed)


def test_records_split_into_whole_transactions_and_a_last_short_one() -> None:
    assert transactions(250, 100) == [100, 100, 50]
    assert transactions(200, 100) == [100, 100]
    assert transactions(3, 1000) == [3]


@pytest.mark.parametrize(("got", "size", "end"), [
    (phase(1000, 1.0, primed=1), None, 1001),        # no markers; the primer counts
    (phase(1000, 1.0, 10), 100, 1000 + 10 * 4),       # a marker per partition written
    (phase(1002, 1.0, 11), 100, 1002 + 10 * 4 + 2),   # the last one wrote to 2 of 4
])
def test_end_offsets_are_the_records_and_one_marker_per_partition_and_commit(
        got: Phase, size: int | None, end: int) -> None:
    assert expected_end(got, size) == end


def test_ratios_pair_the_phases_of_one_round_and_skip_a_round_that_failed() -> None:
    res = Results()
    res.add(RDK, PLAIN, phase(1000, 1.0))
    res.add(RDK, TXN100, phase(1000, 4.0, 10))
    res.add(RDK, TXN1000, phase(1000, 2.0, 1))
    res.add(RDK, PLAIN, None)  # round 2: the baseline failed
    res.add(RDK, TXN100, phase(1000, 1.0, 10))
    res.add(RDK, TXN1000, phase(1000, 1.0, 1))
    res.failures[(RDK, PLAIN)] = "broker gone"
    figs = {f.name: f for f in figures(res, {}, {}, [RDK])}
    ratio = figs[f"{RDK} {TXN100} / {PLAIN}"]
    assert ratio.values == [0.25]  # 250/s over 1000/s in round 1; round 2 has no pair
    assert ratio.note is not None and "broker gone" in ratio.note
    assert figs[f"{RDK} {TXN1000} / {PLAIN}"].values == [0.5]
    assert figs[f"{RDK} {TXN100}"].values == [250.0, 1000.0]
    assert figs[f"{RDK} {TXN100} commits"].values == [2.5, 10.0]
    assert figs[f"{RDK} {TXN100} broker cpu"].values == pytest.approx([2.0, 2.0])
    assert figs[f"{RDK} {PLAIN} client cpu"].values == pytest.approx([1.0])
    assert all(f.goal is None and f.met is None for f in figs.values())  # ratios recorded


def test_a_skipped_system_gives_figures_without_rounds_that_say_why() -> None:
    res = Results()
    res.add(RDK, PLAIN, phase(1000, 1.0))
    figs = {f.name: f for f in figures(res, {}, {SDK: "groupwire sdk skipped: no API"},
                                       [RDK, SDK])}
    sdk = figs[f"{SDK} {TXN100} / {PLAIN}"]
    assert sdk.rounds == 0 and sdk.note == "groupwire sdk skipped: no API"
    unmeasured = figs[f"{RDK} {TXN100}"]  # nothing ran, nothing failed: said so
    assert unmeasured.rounds == 0 and unmeasured.note is not None


def test_a_phase_stopped_at_the_time_limit_says_so() -> None:
    res = Results()
    res.add(SDK, PLAIN, phase(1000, 1.0))
    res.add(SDK, TXN100, phase(500, 10.0, 5, capped=True))
    figs = {f.name: f for f in figures(res, {}, {}, [SDK])}
    note = figs[f"{SDK} {TXN100}"].note
    assert note is not None and "1 of 1 rounds stopped at the time limit" in note
    assert figs[f"{SDK} {TXN100}"].values == [50.0]
