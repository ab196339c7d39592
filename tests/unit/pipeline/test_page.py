"""The report page and its SVG charts, built from plain rows (no Spark, no browser)."""

from __future__ import annotations

import re
from typing import Any

from groupwire.pipeline.report.page import ReportData, bucket_size, render, when
from groupwire.pipeline.report.svg import nice_step

T0 = 1_732_250_000_000


def rebalance(i: int, reason: str, duration: int, moved: int, *,
              completed: bool = True) -> dict[str, Any]:
    started = T0 + i * 7_000
    return {"group_id": "g", "generation_id": i + 1 if completed else None,
            "reason": reason, "detail": None, "trigger_member_id": f"m-{i}",
            "started_ms": started, "completed_ms": started + duration if completed else None,
            "duration_ms": duration if completed else None, "partitions_moved": moved,
            "completed": completed}


def sample() -> ReportData:
    rbs = [rebalance(0, "member-joined", 40, 6), rebalance(1, "member-joined", 55, 3),
           rebalance(2, "connection-lost", 230, 2), rebalance(3, "session-expired", 1200, 3),
           rebalance(4, "member-left", 0, 0, completed=False)]
    sessions = [{"group_id": "g", "member_id": "m-0", "group_instance_id": None,
                 "joined_ms": T0, "connection_lost_ms": T0 + 13_000,
                 "ended_ms": T0 + 13_200, "end_type": "member_expired",
                 "end_reason": "connection-lost", "session_ms": 13_200,
                 "partitions_at_end": 2, "commits_fenced": 0}]
    downtime = [{"group_id": "g", "topic": "orders", "partition": p, "unowned_ms": ms,
                 "gaps": 1 if ms else 0, "longest_ms": ms, "still_unowned": False}
                for p, ms in enumerate([0, 450, 450, 1200])]
    return ReportData(source="127.0.0.1:9092", generated_ms=T0 + 60_000, rebalances=rbs,
                      sessions=sessions, downtime=downtime,
                      event_counts={"rebalance_started": 5, "rebalance_completed": 4},
                      group="g", first_ms=T0, last_ms=T0 + 30_000)


def charts(page: str) -> dict[str, str]:
    return dict(re.findall(r'<svg class="chart[^"]*" role="img" aria-label="([^"]+)"(.*?)</svg>',
                           page, flags=re.S))


def marks(svg: str) -> list[tuple[str, float]]:
    return [(k, float(v)) for k, v in re.findall(
        r'<rect class="mark" data-key="([^"]*)" data-value="([^"]*)"', svg)]


def test_each_chart_draws_what_the_rows_hold() -> None:
    page = render(sample())
    got = charts(page)
    assert set(got) == {"rebalances over time", "duration distribution",
                        "partitions moved per rebalance", "time without owner per partition"}
    over_time = marks(got["rebalances over time"])
    assert sum(v for _, v in over_time) == 5  # the running one counts where it started
    assert {k for k, _ in over_time} == {"member-joined", "connection-lost",
                                         "session-expired", "member-left"}
    assert sum(v for _, v in marks(got["duration distribution"])) == 4  # completed only
    assert [v for _, v in marks(got["partitions moved per rebalance"])] == [6, 3, 2, 3]
    # a partition never without owner draws no bar, the others their total
    assert marks(got["time without owner per partition"]) == [
        ("orders[1]", 450), ("orders[2]", 450), ("orders[3]", 1200)]


def test_the_page_is_self_contained() -> None:
    page = render(sample())
    assert "<script" not in page and "http" not in page.replace("127.0.0.1:9092", "")
    assert "1 still running" in page and "connection-lost" in page


def test_an_empty_window_explains_itself_instead_of_drawing_axes() -> None:
    page = render(ReportData(source="b:1", generated_ms=T0, rebalances=[], sessions=[],
                             downtime=[]))
    assert 'class="mark"' not in page
    assert "no rebalance in this window" in page
    assert "no partition was ever without owner" in page


def test_names_from_the_wire_are_escaped() -> None:
    data = sample()
    rows = [{**data.rebalances[0], "reason": "<script>x</script>"}]
    page = render(ReportData(source="s", generated_ms=T0, rebalances=rows, sessions=[],
                             downtime=[]))
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_scales_and_buckets() -> None:
    assert [nice_step(s, 5) for s in (7, 100, 1234, 0)] == [2.0, 20.0, 500.0, 1.0]
    assert bucket_size(30_000) == 1_000 and bucket_size(3_600_000) == 60_000
    assert bucket_size(400 * 86_400_000) == 7 * 86_400_000
    assert bucket_size(1000 * 86_400_000) == 3 * 7 * 86_400_000  # still at most 60 columns
    assert when(T0) == "2024-11-22 04:33:20.000Z" and when(None) == "-"
