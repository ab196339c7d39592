"""The pure parts of bench/kafka_clients.py: group bookkeeping, figures, profile summaries.

The benchmark itself runs in tests/bench/test_smoke.py (``--smoke``); these pin what its
figures and notes would say in the cases a smoke run rarely meets (a failed phase, a
capped failover, a rebalance half done).
"""

from __future__ import annotations

from typing import Any

from bench.kafka_clients import (
    FAILOVER_CAP_S,
    GW,
    TANSU,
    Results,
    figures,
    group_settled,
    hot_spots,
    owned,
    settled,
    wanted_figures,
)


def ev(kind: str, *parts: int) -> dict[str, Any]:
    return {"e": kind, "t": 0.0, "p": list(parts)}


def test_eager_and_incremental_callbacks_give_what_a_member_holds() -> None:
    eager = [ev("ready"), ev("assigned", 0, 1), ev("revoked", 0, 1), ev("assigned", 0, 1, 2, 3)]
    assert owned(eager) == {0, 1, 2, 3} and settled(eager)
    incremental = [ev("assigned", 0, 1), ev("assigned", 2), ev("lost", 0)]
    assert owned(incremental) == {1, 2}
    assert not settled(incremental)  # its last callback took partitions away
    assert not settled([ev("ready")])


def test_a_group_is_settled_when_its_members_split_every_partition_once() -> None:
    a, b = [ev("assigned", 0, 1)], [ev("assigned", 2, 3)]
    assert group_settled([a, b], 4)
    assert not group_settled([a, [ev("ready")]], 4)  # b holds nothing yet
    assert not group_settled([a, [ev("assigned", 1, 2, 3)]], 4)  # 1 held twice
    assert not group_settled([a, [ev("assigned", 2)]], 4)  # 3 held by nobody
    assert not group_settled([a, [*b, ev("revoked")]], 4)  # mid-rebalance


def test_a_failed_phase_is_a_figure_without_rounds_that_says_why() -> None:
    res = Results()
    res.failures[f"{GW} consume"] = "consumed 10 of 100 in 60 s"
    res.add(f"{TANSU} consume", 300_000.0)
    wanted = wanted_figures({"gw", "tansu"}, {"consume"})
    figs = {f.name: f for f in figures(res, {}, {}, wanted)}
    gw = figs[f"{GW} consume"]
    assert gw.rounds == 0 and gw.met is None and gw.note is not None
    assert "consumed 10 of 100" in gw.note
    assert "consumed 10 of 100" in (figs[f"{GW} consume broker cpu"].note or "")
    assert figs[f"{TANSU} consume"].values == [300_000.0]
    assert figs["consume groupwire / tansu"].note is not None  # nothing to divide
    assert not any("produce" in name or "sdk" in name for name in figs)


def test_capped_failovers_are_counted_in_the_note_and_judged_as_measured() -> None:
    res = Results()
    for t in (1.2, FAILOVER_CAP_S, FAILOVER_CAP_S):
        res.add(f"{GW} failover", t)
    res.capped[f"{GW} failover"] = 2
    skipped = {TANSU: "tansu skipped: no tansu binary"}
    figs = {f.name: f for f in figures(res, {}, skipped, wanted_figures({"gw", "tansu"},
                                                                        {"failover"}))}
    gw = figs[f"{GW} failover"]
    assert gw.median == FAILOVER_CAP_S and gw.met is False
    assert gw.note is not None and "2 of 3 kills hit" in gw.note
    assert figs[f"{TANSU} failover"].note == "tansu skipped: no tansu binary"


def test_hot_spots_share_samples_by_leaf_and_by_every_frame_on_the_stack() -> None:
    collapsed = "\n".join([
        "process 1:main;run (/x/asyncio/runners.py:118);walk (/r/protocol/k/records.py:558) 6",
        "process 1:main;run (/x/asyncio/runners.py:118);send (/r/broker/fetch.py:336) 3",
        "run (/x/asyncio/runners.py:118) 1",
        "garbage line",
    ])
    text = hot_spots(collapsed)
    assert text.startswith("10 samples")
    by_line, by_function, inclusive = text.split("\n\n")[1:]
    assert "60.0%  walk (/r/protocol/k/records.py:558)" in by_line
    assert " 10.0%  run (/x/asyncio/runners.py:118)" in by_line
    assert " 60.0%  walk (/r/protocol/k/records.py)" in by_function
    assert "100.0%  run (/x/asyncio/runners.py)" in inclusive
    assert " 30.0%  send (/r/broker/fetch.py)" in inclusive
    assert "process" not in text
    assert hot_spots("") == "no samples\n"
