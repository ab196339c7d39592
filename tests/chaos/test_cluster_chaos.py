"""`groupwire chaos --cluster`: the verdict's cluster checks on hand-made logs and
journals, and a short seeded run against three brokers and etcd (skipped without etcd)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from groupwire.broker.storage.segment import segment_stem
from groupwire.cli.chaos.replica_logs import read_partition, replicas_of, values
from groupwire.cli.chaos.schedule import CLUSTER_FAULTS, draw
from groupwire.cli.chaos.verdict import (
    ClusterFindings,
    acked_missing,
    consume_gap,
    coordinator_rebalances,
    epoch_conflicts,
    judge,
    produce_gaps,
)
from groupwire.protocol.batches import BatchRecord, encode_batch, stamp_batch


def batch(base: int, epoch: int, *vals: bytes) -> bytes:
    """A batch as a leader of ``epoch`` stores it at ``base``."""
    data = encode_batch([BatchRecord(v, timestamp_ms=1000) for v in vals])
    return stamp_batch(data, base, epoch)


def replica(tmp_path: Path, node: int, *batches: bytes, torn: bytes = b"") -> Path:
    """A broker data dir holding partition ``t-0`` made of ``batches`` (and a cut tail)."""
    data = tmp_path / f"broker-{node}"
    directory = data / "logs" / "t-0"
    directory.mkdir(parents=True)
    (directory / f"{segment_stem(0)}.log").write_bytes(b"".join(batches) + torn)
    return data


def test_replicas_that_agree_or_are_behind_have_no_epoch_conflict(tmp_path: Path) -> None:
    a, b, c = batch(0, 0, b"r0", b"r1"), batch(2, 0, b"r2"), batch(3, 1, b"r3")
    dirs = {
        1: replica(tmp_path, 1, a, b, c),
        2: replica(tmp_path, 2, a, b, torn=c[:20]),  # behind, its last write cut by SIGKILL
        # a dead leader's tail of epoch 0 not yet truncated: a later epoch won offset 3
        3: replica(tmp_path, 3, a, b, batch(3, 0, b"stale")),
    }
    replicas = replicas_of(dirs, "t", 0)
    assert [len(r) for r in replicas.values()] == [3, 2, 3]
    assert epoch_conflicts(replicas) == []
    assert values(replicas[1]) == {0: b"r0", 1: b"r1", 2: b"r2", 3: b"r3"}
    assert read_partition(tmp_path / "broker-4", "t", 0) is None  # holds no replica


def test_two_leaders_writing_in_one_epoch_is_a_conflict(tmp_path: Path) -> None:
    a = batch(0, 0, b"r0")
    dirs = {
        1: replica(tmp_path, 1, a, batch(1, 2, b"from broker 1")),
        2: replica(tmp_path, 2, a, batch(1, 2, b"from broker 2")),
        # same epoch, other boundaries: one batch where the others have two
        3: replica(tmp_path, 3, batch(0, 0, b"r0", b"x")),
    }
    conflicts = epoch_conflicts(replicas_of(dirs, "t", 0))
    assert conflicts == [
        "epoch 2 at offset 1: brokers 1 and 2 hold different batches",
        "epoch 0 at offset 0: brokers 1 and 3 hold different batches",
        "epoch 0 at offset 0: brokers 2 and 3 hold different batches",
    ]
    found = ClusterFindings(epoch_conflicts=[f"t-0: {conflicts[0]}"])
    assert found.violations == ["two leaders wrote in one epoch: t-0: " + conflicts[0]]


def test_an_acknowledged_record_overwritten_at_its_offset_is_lost() -> None:
    acked = {(0, 0): b"r0", (0, 1): b"r1", (1, 0): b"r2"}
    # partition 0: one replica has r1, the other holds another record at offset 1
    stored = {0: [{0: b"r0", 1: b"other"}, {0: b"r0", 1: b"r1"}], 1: [{0: b"r9"}]}
    assert acked_missing(acked, stored) == [(1, 0)]
    assert acked_missing(acked, {0: [{0: b"r0"}]}) == [(0, 1), (1, 0)]


def test_a_committed_offset_going_back_is_a_regression() -> None:
    samples = [(1.0, {0: 5, 1: 2}), (2.0, {0: 7}), (3.0, {0: 6, 1: 2})]
    v = judge([], set(), {}, set(), samples, 2, [], 4.0, 10.0)
    v.cluster = ClusterFindings(brokers=3)
    assert v.offsets_backwards == ["partition 0: 7 -> 6 at 3.000"]
    figures = v.as_dict()["cluster"]
    assert isinstance(figures, dict)
    assert figures["offsets_regressed"] == 1 and figures["acked_lost"] == 0


def test_unavailability_per_partition_and_for_the_group() -> None:
    acks = [(10.5, 0), (11.0, 0), (14.0, 0), (10.5, 1)]
    # partition 2 never acknowledged anything: unavailable all along
    assert produce_gaps(acks, 3, 10.0, 15.0) == {0: 3.0, 1: 4.5, 2: 5.0}
    events: list[dict[str, object]] = [
        {"t": 11.0, "event": "records", "records": [[0, 0]]},
        {"t": 11.5, "event": "records", "records": [[0, 0]]},  # read again: no new record
        # [0, 1] was acknowledged at 12.0 and read only at 16.0
        {"t": 16.0, "event": "records", "records": [[0, 1], [0, 2]]},
        {"t": 17.0, "event": "committed", "offsets": {"0": 3}},
    ]
    acked_at = {(0, 0): 10.5, (0, 1): 12.0, (0, 2): 15.5}
    assert consume_gap(events, acked_at) == 4.0


def test_only_rebalances_after_a_coordinator_fault_and_no_member_fault_count() -> None:
    rebalances = [(5.0, "member-joined"), (21.0, "session-expired"), (32.0, "member-left"),
                  (50.0, "member-left")]
    # coordinator faults at 20 and 30; a consumer was killed at 29
    counted = coordinator_rebalances(rebalances, [20.0, 30.0], [29.0], 5.0)
    assert counted == [(21.0, "session-expired")]


def test_a_cluster_schedule_has_broker_and_etcd_faults_by_role() -> None:
    faults = draw(12, 3, 6, 20.0, cluster=True)
    cluster = [f for f in faults if f.kind in CLUSTER_FAULTS]
    assert len(cluster) == 6 and {f.kind for f in cluster} == set(CLUSTER_FAULTS)
    assert {f.role for f in cluster} == {"leader", "follower", "controller", "coordinator"}
    # without a cluster a seed draws what it always drew
    single = draw(12, 3, 6, 20.0)
    assert [f.kind for f in single].count("broker-kill") == 6
    assert [f for f in single if f.kind != "broker-kill"] == [
        f for f in faults if f.kind not in CLUSTER_FAULTS]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("etcd") is None,
                    reason="etcd is not on PATH (install etcd 3.4+ to run a cluster chaos run)")
def test_a_short_cluster_run_loses_nothing(tmp_path: Path) -> None:
    report = tmp_path / "report"
    # seed 12: every cluster fault among consumer faults: two broker kills, a broker
    # frozen past its lease, etcd killed and restarted, etcd frozen, and one broker's
    # etcd connections half-open past its lease
    result = subprocess.run(
        [sys.executable, "-m", "groupwire", "chaos", "--cluster", "3", "--consumers", "3",
         "--faults", "3", "--broker-faults", "6", "--records", "2000", "--rate", "100",
         "--seed", "12", "--report", str(report), "--json"],
        capture_output=True, text=True, timeout=400)
    verdict = json.loads(result.stdout)
    assert verdict == json.loads((report / "verdict.json").read_text())
    cluster = verdict["cluster"]
    assert verdict["produced"] > 0 and verdict["lost"] == 0
    assert verdict["log_duplicates"] == 0  # leaders killed; the producer idempotent
    assert cluster["brokers"] == 3
    assert cluster["acked_lost"] == 0 and cluster["acked_missing_from_logs"] == 0
    assert cluster["offsets_regressed"] == 0 and verdict["offsets_backwards"] == []
    assert cluster["offset_samples"] > 20  # sampled from the coordinator, wherever it was
    assert cluster["epoch_conflicts"] == 0
    assert set(cluster["produce_unavailable_s"]) == {str(p) for p in range(12)}
    faults = verdict["faults"]
    assert sum(f.startswith("killed broker") for f in faults) == 2, faults
    assert sum(f.startswith("froze broker") for f in faults) == 1, faults
    assert sum(f.startswith("etcd killed") for f in faults) == 1, faults
    assert sum(f.startswith("etcd frozen") for f in faults) == 1, faults
    assert sum("etcd connections half-open" in f for f in faults) == 1, faults
    # every broker came back: all three wrote their replicas of the topic
    assert all((report / f"broker-{i}-data" / "logs" / f"{verdict['topic']}-0").is_dir()
               for i in (1, 2, 3))
    assert verdict["violations"] == [], verdict
    assert result.returncode == 0, result.stderr
