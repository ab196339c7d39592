"""The report page opened in a real browser: Debian's ``chromium``, headless.

A probe script appended to a copy of the page measures every chart's marks after layout
(``getBBox``), so the test sees what the browser drew, not just what the HTML says. Skips
with the reason when no chromium is installed.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import pytest

from groupwire.pipeline.report.page import ReportData, render

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no headless browser: install Debian's chromium package")
CHART_TITLES = {"rebalances over time", "duration distribution",
                "partitions moved per rebalance", "time without owner per partition"}
BROWSER_TIMEOUT_S = 120

PROBE = """<pre id="gw-probe"></pre><script>
const charts = [...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('rect.mark')].map(r => {
    const b = r.getBBox();
    return {key: r.dataset.key, value: Number(r.dataset.value), w: b.width, h: b.height};
  });
  return {title: svg.getAttribute('aria-label'), width: box.width, height: box.height, marks};
});
document.getElementById('gw-probe').textContent = JSON.stringify(charts);
</script>"""


def drawn(page: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """The charts as laid out by chromium: title -> {width, height, marks}."""
    assert CHROMIUM is not None
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                      encoding="utf-8")
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False)
    found = re.search(r'<pre id="gw-probe">(.*?)</pre>', out.stdout, flags=re.S)
    assert found is not None and found.group(1), f"no probe output:\n{out.stderr[-2000:]}"
    charts = json.loads(html.unescape(found.group(1)))
    return {c["title"]: c for c in charts}


def assert_all_drawn(charts: dict[str, dict[str, Any]]) -> None:
    assert set(charts) == CHART_TITLES
    for title, chart in charts.items():
        assert chart["width"] > 0 and chart["height"] > 0, title
        assert chart["marks"], f"{title}: no marks"
        for mark in chart["marks"]:
            assert mark["w"] > 0 and mark["h"] > 0, (title, mark)


T0 = 1_732_250_000_000


def sample_rows() -> ReportData:
    rbs = [{"group_id": "g", "generation_id": i + 1, "reason": reason, "detail": None,
            "trigger_member_id": f"m-{i}", "started_ms": T0 + i * 5_000,
            "completed_ms": T0 + i * 5_000 + ms, "duration_ms": ms, "partitions_moved": moved,
            "completed": True}
           for i, (reason, ms, moved) in enumerate([("member-joined", 30, 4),
                                                    ("connection-lost", 420, 2),
                                                    ("poll-interval-expired", 90, 1)])]
    downtime = [{"group_id": "g", "topic": "t", "partition": p, "unowned_ms": ms,
                 "gaps": 1, "longest_ms": ms, "still_unowned": False}
                for p, ms in [(0, 620), (1, 90)]]
    return ReportData(source="127.0.0.1:9", generated_ms=T0 + 20_000, rebalances=rbs,
                      sessions=[], downtime=downtime, first_ms=T0, last_ms=T0 + 15_000)


@needs_chromium
def test_charts_are_drawn_by_the_browser(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(sample_rows()), encoding="utf-8")
    charts = drawn(page, tmp_path)
    assert_all_drawn(charts)
    moved = charts["partitions moved per rebalance"]["marks"]
    assert [m["value"] for m in moved] == [4, 2, 1]
    heights = [m["h"] for m in moved]
    assert heights[0] > heights[1] > heights[2]  # drawn to scale
    bars = charts["time without owner per partition"]["marks"]
    assert [(m["key"], m["value"]) for m in bars] == [("t[0]", 620), ("t[1]", 90)]
    assert bars[0]["w"] > bars[1]["w"]


# --- the job's own page, from records through Spark -------------------------------------

RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                 "timestamp timestamp, headers array<struct<key:string,value:binary>>")


def _events() -> list[dict[str, Any]]:
    base: dict[str, Any] = {"group_id": "shop", "group_instance_id": None, "detail": None,
            "duration_ms": None, "partitions": []}

    def e(type_: str, ts: int, **kw: Any) -> dict[str, Any]:
        return {**base, "type": type_, "ts_ms": T0 + ts, "generation_id": 0,
                "member_id": None, "reason": None, **kw}

    return [
        e("member_joined", 0, member_id="a"),
        e("rebalance_started", 0, member_id="a", reason="member-joined"),
        e("rebalance_completed", 40, member_id="a", reason="member-joined", generation_id=1,
          duration_ms=40, partitions=[["orders", [0, 1, 2, 3]]]),
        e("member_joined", 900, member_id="b"),
        e("rebalance_started", 900, member_id="b", reason="member-joined", generation_id=1),
        e("rebalance_completed", 960, member_id="b", reason="member-joined", generation_id=2,
          duration_ms=60, partitions=[["orders", [2, 3]]]),
        e("connection_lost", 3_000, member_id="b", generation_id=2,
          partitions=[["orders", [2, 3]]]),
        e("member_expired", 3_200, member_id="b", reason="connection-lost", generation_id=2,
          partitions=[["orders", [2, 3]]]),
        e("rebalance_started", 3_200, member_id="b", reason="connection-lost",
          generation_id=2),
        e("rebalance_completed", 3_450, member_id="b", reason="connection-lost",
          generation_id=3, duration_ms=250, partitions=[["orders", [2, 3]]]),
    ]


@needs_chromium
@pytest.mark.spark
def test_the_jobs_report_is_drawn_by_the_browser(spark: SparkSession, tmp_path: Path) -> None:
    from groupwire.pipeline.report.job import build_report
    from groupwire.pipeline.report.options import ReportOptions

    rows: list[tuple[Any, ...]] = [(b"shop", msgpack.packb(ev), "__group_events", 0, i,
             dt.datetime.fromtimestamp(ev["ts_ms"] / 1000, dt.UTC), [])
            for i, ev in enumerate(_events())]
    records = spark.createDataFrame(rows, RECORD_SCHEMA)
    out = tmp_path / "out"
    summary = build_report(spark, records, ReportOptions(bootstrap="test", out=out))
    assert (summary.rebalances, summary.member_ids, summary.unowned_ms) == (3, 2, 2 * 450)
    charts = drawn(out / "report.html", tmp_path)
    assert_all_drawn(charts)
    assert [m["value"] for m in charts["partitions moved per rebalance"]["marks"]] == [4, 2, 2]
    over_time = charts["rebalances over time"]["marks"]
    per_reason: dict[str, float] = {}
    for m in over_time:
        per_reason[m["key"]] = per_reason.get(m["key"], 0) + m["value"]
    assert per_reason == {"member-joined": 2, "connection-lost": 1}
    assert [(m["key"], m["value"]) for m in
            charts["time without owner per partition"]["marks"]] == [
        ("orders[2]", 450), ("orders[3]", 450)]


@pytest.mark.spark
def test_a_window_with_no_events_still_writes_tables_and_a_page(spark: SparkSession,
                                                               tmp_path: Path) -> None:
    from groupwire.pipeline.report.job import build_report
    from groupwire.pipeline.report.options import ReportOptions

    records = spark.createDataFrame([], RECORD_SCHEMA)
    out = tmp_path / "empty"
    summary = build_report(spark, records, ReportOptions(bootstrap="test", out=out,
                                                         group="nobody"))
    assert (summary.events, summary.rebalances, summary.first_ms) == (0, 0, None)
    assert spark.read.parquet(str(out / "rebalances")).count() == 0
    page = (out / "report.html").read_text()
    assert "no rebalance in this window" in page and 'class="mark"' not in page
