"""Every benchmark, run small (``--smoke``), so none of them rots; plus the framework.
(spark_source smoke-runs in tests/spark, on the Spark session the suite starts anyway.)

The smoke runs check the shape of what a benchmark prints (one well-formed JSON line per
figure, finite numbers in order, at least one figure measured), never what was measured:
on a busy machine a difference of two measurements (memory per member) can come out
below zero, and a smoke run must not fail by luck.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import run as runner
from bench.common import Figure, bench_main, check_goal, etcd_missing, with_goal
from bench.kafka_clients import librdkafka_reason
from bench.loadgen import by_port
from tests.bench.figures import check_figure_line

REPO = Path(__file__).resolve().parents[2]
SMOKE_TIMEOUT_S = 240
ON_THE_SHARED_SESSION = ("smoke-run on the suite's Spark session instead of its own: "
                         "tests/spark/test_bench_spark_source.py")


SKIPS: dict[str, Any] = {"spark_source": lambda: ON_THE_SHARED_SESSION,
                         "cluster_failover": etcd_missing,
                         "cluster_throughput": etcd_missing,
                         "kafka_clients": librdkafka_reason}


def _smoke_params() -> list[Any]:
    params = []
    for name in runner.BENCHES:
        marks = [pytest.mark.slow]
        if name == "spark_source":
            marks.append(pytest.mark.spark)
        if not (REPO / "bench" / f"{name}.py").exists():
            marks.append(pytest.mark.skip(reason=f"bench/{name}.py is not written yet"))
        elif name in SKIPS and (why := SKIPS[name]()) is not None:
            marks.append(pytest.mark.skip(reason=why))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _smoke_params())
def test_bench_smoke(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--smoke", "--json"], cwd=REPO,
        capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    assert lines, f"bench {name} printed no figure:\n{proc.stderr[-3000:]}"
    figures = [check_figure_line(x, name) for x in lines]  # --json: nothing but figures
    assert any(f["rounds"] > 0 for f in figures), figures  # something was measured


# --- the framework ----------------------------------------------------------------------


def test_figure_statistics_and_json() -> None:
    fig = Figure("x", "ms", [3.0, 1.0, 2.0, 10.0], {"n": 1}, note="why")
    data = fig.to_json("b")
    assert (data["median"], data["min"], data["max"], data["rounds"]) == (2.5, 1.0, 10.0, 4)
    assert data["bench"] == "b" and data["settings"] == {"n": 1} and data["note"] == "why"
    empty = Figure("y", "ms", [], {}).to_json("b")
    assert empty["median"] is None and empty["rounds"] == 0
    json.dumps(empty, allow_nan=False)  # valid JSON even with no rounds


@pytest.mark.parametrize(("value", "goal", "met"), [
    (0.5, ">= 0.5", True), (0.49, ">= 0.5", False), (999, "< 1000", True),
    (1000, "< 1000", False), (2, "<= 2", True), (3, "> 2", True)])
def test_goals(value: float, goal: str, met: bool) -> None:
    assert check_goal(value, goal) is met
    assert with_goal(Figure("f", "u", [value], {}), goal).met is met


def test_goal_with_unknown_operator_is_refused() -> None:
    with pytest.raises(ValueError, match="goal"):
        check_goal(1, "~ 2")


def test_bench_main_prints_json_lines_then_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[argparse.Namespace] = []

    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--size", type=int, default=3)

    def run(args: argparse.Namespace) -> list[Figure]:
        seen.append(args)
        return [Figure("a", "ms", [1.0] * args.rounds, {"size": args.size}, goal="< 2")]

    main = bench_main("fake", add, run, default_rounds=4, default_warmup=2)
    assert main(["--json", "--size", "7"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(x)["settings"] for x in out.splitlines()] == [{"size": 7}]
    assert "fake" in err  # the table goes to stderr with --json
    assert (seen[0].rounds, seen[0].warmup, seen[0].smoke) == (4, 2, False)
    assert main(["--smoke"]) == 0
    assert (seen[1].rounds, seen[1].warmup) == (1, 0)


def test_runner_keeps_the_latest_run_of_each_bench(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(runner, "RESULTS_MD", tmp_path / "RESULTS.md")
    monkeypatch.setattr(runner, "NOTES_DIR", tmp_path / "notes")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "memory.md").write_text("Where the bytes go.")
    machine = {"cpu_model": "Test CPU", "cores": 2, "python": "3.11", "uvloop": True}
    import datetime as dt

    def fig(bench: str, median: float) -> dict[str, Any]:
        return Figure("f", "ms", [median], {}, goal="< 5", met=median < 5).to_json(bench)

    t1 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    t2 = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    runner.append_results("r1", t1, machine, {
        "memory": (["python", "-m", "bench.memory"], [fig("memory", 9.0)], None),
        "rebalance": (["python", "-m", "bench.rebalance"], [fig("rebalance", 1.0)], None)})
    runner.append_results("r2", t2, machine, {
        "memory": (["python", "-m", "bench.memory", "--rounds", "2"], [fig("memory", 3.0)],
                   None),
        "heartbeat": (["python", "-m", "bench.heartbeat"], [], "bench heartbeat: boom")})
    md = runner.write_results_md().read_text()
    assert md.index("(`rebalance`)") < md.index("(`memory`)")  # the order
    memory = md[md.index("(`memory`)"):]
    assert "`python -m bench.memory --rounds 2`" in memory and "| 3 |" in memory
    assert "| yes |" in memory and "Where the bytes go." in memory
    assert "| 1 |" in md[md.index("(`rebalance`)"):md.index("(`memory`)")]
    assert "(`heartbeat`)" not in md  # its only run failed: no figures to show
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "2026-01-01.jsonl", "2026-01-02.jsonl"]


def _goal_fig(name: str, median: float, goal: str | None) -> dict[str, Any]:
    return with_goal(Figure(name, "ratio", [median], {}), goal).to_json("throughput") \
        if goal is not None else Figure(name, "ratio", [median], {}).to_json("throughput")


def test_the_status_line_is_computed_from_the_figures_it_sits_under() -> None:
    figs = [_goal_fig("produce groupwire / redis", 0.708, ">= 1"),
            _goal_fig("consume x1 groupwire / redis", 1.09, ">= 1"),
            _goal_fig("groupwire produce", 115400, None)]
    assert runner.status_line(figs) == (
        "Status (computed from the figures above): 1 of 2 goals met; not met: "
        "produce groupwire / redis 0.708 (goal >= 1).")
    assert runner.status_line(figs[1:]) == (
        "Status (computed from the figures above): its goal is met.")
    assert runner.status_line(figs[2:]) is None  # no goal, no status


def test_a_note_that_claims_a_status_in_prose_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(runner, "RESULTS_MD", tmp_path / "RESULTS.md")
    monkeypatch.setattr(runner, "NOTES_DIR", tmp_path / "notes")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "throughput.md").write_text(
        "Why produce is slower.\nStatus: all three goals met in the run above.\n")
    import datetime as dt
    runner.append_results("r1", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), {}, {
        "throughput": (["python", "-m", "bench.throughput"],
                       [_goal_fig("produce groupwire / redis", 0.708, ">= 1")], None)})
    with pytest.raises(ValueError, match="Status: all three goals met"):
        runner.write_results_md()


@pytest.mark.parametrize("text", [
    "Status: goal met in the run above", "Both goals met in the run above (10 kills)",
    "reach 0.93x (goal >= 0.5: met)", "measured 1.54, goal missed: in its slowest"])
def test_status_claims_are_found(text: str) -> None:
    assert runner.status_claims(f"Where the time goes.\n{text}\nMore.") == [text]


def test_the_notes_kept_in_the_repo_claim_no_status() -> None:
    for path in sorted(runner.NOTES_DIR.glob("*.md")):
        assert runner.status_claims(path.read_text()) == [], path.name


def test_loadgen_sends_each_member_to_the_port_its_row_names() -> None:
    rows = [["g-0", "m0", 1, 9001], ["g-1", "m1", 1], ["g-2", "m2", 3, 9002],
            ["g-3", "m3", 1, 9001]]
    assert by_port(rows, 9000) == {9001: [rows[0], rows[3]], 9000: [rows[1]],
                                   9002: [rows[2]]}
