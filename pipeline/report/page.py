"""The rebalance report as one self-contained HTML page (inline SVG and CSS, no script).

Takes the small collected tables as plain rows (dicts keyed like the Parquet columns), so
it is pure and testable without Spark. Four charts: rebalances over time by reason,
duration distribution, partitions moved per rebalance, time without owner per partition;
then the rebalances and member sessions as tables.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any, Final

from groupwire.pipeline.report.svg import Bar, bar_rows_chart, column_chart, nice_step, stack

Row = Mapping[str, Any]

BUCKETS_MS: Final = (1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000,
                     3_600_000, 21_600_000, 86_400_000, 7 * 86_400_000)
MAX_BUCKETS: Final = 60
MAX_TABLE_ROWS: Final = 200
MAX_PARTITION_ROWS: Final = 60


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything the page shows; rows are keyed like the Parquet tables' columns."""

    source: str
    generated_ms: int
    rebalances: Sequence[Row]
    sessions: Sequence[Row]
    downtime: Sequence[Row]
    event_counts: Mapping[str, int] = field(default_factory=dict)
    group: str | None = None
    since_ms: int | None = None
    first_ms: int | None = None
    last_ms: int | None = None


def when(ms: int | None) -> str:
    """Epoch ms as a UTC time people read (``-`` for none)."""
    if ms is None:
        return "-"
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _clock(ms: int, bucket_ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    if bucket_ms >= 86_400_000:
        return t.strftime("%m-%d")
    return t.strftime("%H:%M" if bucket_ms >= 60_000 else "%H:%M:%S")


def bucket_size(span_ms: int) -> int:
    """The smallest listed bucket that cuts ``span_ms`` into at most ``MAX_BUCKETS``."""
    for size in BUCKETS_MS:
        if span_ms / size <= MAX_BUCKETS:
            return size
    return BUCKETS_MS[-1] * math.ceil(span_ms / BUCKETS_MS[-1] / MAX_BUCKETS)


def reasons_in(rebalances: Sequence[Row]) -> list[str]:
    """Reasons by how often they occur, most first (the legend's order)."""
    counts = Counter(str(r["reason"]) for r in rebalances)
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def rebalances_over_time(rebalances: Sequence[Row], first_ms: int | None,
                         last_ms: int | None) -> str:
    if not rebalances:
        return column_chart("rebalances over time", [], "rebalances",
                            empty_message="no rebalance in this window")
    starts = [int(r["started_ms"]) for r in rebalances]
    lo = min(starts) if first_ms is None else min(first_ms, min(starts))
    hi = max(starts) if last_ms is None else max(last_ms, max(starts))
    size = bucket_size(hi - lo + 1)
    lo -= lo % size
    n = (hi - lo) // size + 1
    per: list[Counter[str]] = [Counter() for _ in range(n)]
    for r in rebalances:
        per[(int(r["started_ms"]) - lo) // size][str(r["reason"])] += 1
    order = reasons_in(rebalances)
    bars = [Bar(_clock(lo + i * size, size), stack(c, order),
                f"{when(lo + i * size)} +{size // 1000} s") for i, c in enumerate(per)]
    return column_chart("rebalances over time", bars,
                        f"rebalances per {_span(size)} (UTC)", legend=order)


def duration_distribution(rebalances: Sequence[Row]) -> str:
    durations = [int(r["duration_ms"]) for r in rebalances if r.get("duration_ms") is not None]
    if not durations:
        return column_chart("duration distribution", [], "rebalances",
                            empty_message="no completed rebalance in this window")
    step = max(int(nice_step(max(durations) + 1, 12)), 1)
    n = max(durations) // step + 1
    counts = [0] * n
    for d in durations:
        counts[d // step] += 1
    bars = [Bar(f"{i * step}–{(i + 1) * step}", (("rebalances", float(c)),),
                f"{i * step}-{(i + 1) * step} ms") for i, c in enumerate(counts)]
    return column_chart("duration distribution", bars,
                        f"rebalances per {step} ms of duration", label_every=max(
                            1, math.ceil(len(bars) / 8)))


def partitions_moved(rebalances: Sequence[Row], many_groups: bool) -> str:
    done = [r for r in rebalances if r.get("completed")]
    order = reasons_in(done)
    bars = []
    for r in done:
        label = f"g{r['generation_id']}"
        if many_groups:
            label = f"{r['group_id']}/{label}"
        bars.append(Bar(label, ((str(r["reason"]), float(r["partitions_moved"])),),
                        f"{label} at {when(r['completed_ms'])}"))
    return column_chart("partitions moved per rebalance", bars,
                        "partitions moved", legend=order,
                        empty_message="no rebalance moved a partition in this window")


def time_without_owner(downtime: Sequence[Row], many_groups: bool) -> tuple[str, int]:
    """The chart and how many partitions were left out (the longest are kept)."""
    rows = sorted(downtime, key=lambda r: (-int(r["unowned_ms"]), r["topic"], r["partition"]))
    kept = sorted(rows[:MAX_PARTITION_ROWS],
                  key=lambda r: (r["group_id"], r["topic"], r["partition"]))
    bars = []
    for r in kept:
        label = f"{r['topic']}[{r['partition']}]"
        if many_groups:
            label = f"{r['group_id']}: {label}"
        tip = f"{r['unowned_ms']} ms in {r['gaps']} gap(s), longest {r['longest_ms']} ms"
        if r.get("still_unowned"):
            tip += ", still without owner"
        bars.append((label, float(r["unowned_ms"]), tip))
    chart = bar_rows_chart("time without owner per partition", bars,
                           "milliseconds without owner",
                           empty_message="no partition was ever without owner")
    return chart, len(rows) - len(kept)


def _span(ms: int) -> str:
    if ms % 3_600_000 == 0:
        return f"{ms // 3_600_000} h"
    if ms % 60_000 == 0:
        return f"{ms // 60_000} min"
    return f"{ms // 1000} s"


def _table(columns: Sequence[tuple[str, str]], rows: Sequence[Row]) -> str:
    head = "".join(f"<th>{escape(title)}</th>" for _, title in columns)
    body = []
    for r in rows[-MAX_TABLE_ROWS:]:
        cells = []
        for key, _ in columns:
            value = r.get(key)
            text = when(value) if key.endswith("_ms") and key not in (
                "duration_ms", "session_ms", "unowned_ms", "longest_ms") else value
            cells.append(f"<td>{escape('-' if text is None else str(text))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="note">the last {MAX_TABLE_ROWS} of {len(rows)} rows; all are in '
            "the Parquet table</p>" if len(rows) > MAX_TABLE_ROWS else "")
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>{more}")


STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:960px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:32px}
.chart{display:block;max-width:100%;height:auto;background:#fff}
.axis{stroke:#555}.grid{stroke:#eee}.tick,.legend,.value{font-size:11px;fill:#444}
.axis-label{font-size:12px;fill:#222}.note{color:#666;fill:#666;font-size:13px}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:12px;width:100%}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;white-space:nowrap}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{color:#666}
"""


def render(data: ReportData) -> str:
    """The whole page."""
    many = len({r["group_id"] for r in (*data.rebalances, *data.downtime)}) > 1
    completed = [r for r in data.rebalances if r.get("completed")]
    durations = sorted(int(r["duration_ms"]) for r in completed)
    ended = Counter(str(s.get("end_reason") or s.get("end_type")) for s in data.sessions
                    if s.get("ended_ms") is not None)
    downtime_chart, left_out = time_without_owner(data.downtime, many)
    summary = [
        ("source", data.source),
        ("group", data.group or "all groups"),
        ("window", f"{when(data.first_ms)} to {when(data.last_ms)}"
                   + (f" (since {when(data.since_ms)})" if data.since_ms is not None else "")),
        ("events", ", ".join(f"{k} {v}" for k, v in sorted(data.event_counts.items())) or "0"),
        ("rebalances", f"{len(completed)} completed, "
                       f"{len(data.rebalances) - len(completed)} still running"),
        ("duration", f"median {durations[len(durations) // 2]} ms, max {durations[-1]} ms"
                     if durations else "-"),
        ("members", f"{len(data.sessions)} member ids, "
                    + (", ".join(f"{k} {v}" for k, v in sorted(ended.items()))
                       or "none removed")),
        ("time without owner", f"{sum(int(r['unowned_ms']) for r in data.downtime)} ms "
                               f"over {len(data.downtime)} partitions"),
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>groupwire rebalance report: {escape(data.group or 'all groups')}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>groupwire rebalance report</h1>",
        "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in summary)
        + "</dl>",
        f'<p class="note">generated {escape(when(data.generated_ms))} from __group_events; '
        "times are the broker's, in UTC</p>",
        '<h2 id="over-time">Rebalances over time, by reason</h2>',
        rebalances_over_time(data.rebalances, data.first_ms, data.last_ms),
        '<h2 id="durations">Duration distribution</h2>',
        duration_distribution(completed),
        '<h2 id="moved">Partitions moved per rebalance</h2>',
        partitions_moved(data.rebalances, many),
        '<h2 id="without-owner">Time without owner per partition</h2>',
        '<p class="note">from when the broker knew the owner was gone (connection lost or '
        "removal) until a rebalance gave the partition to another member</p>",
        downtime_chart,
        (f'<p class="note">{left_out} partitions with less time without owner are not '
         "drawn</p>" if left_out else ""),
        '<h2 id="rebalances">Rebalances</h2>',
        _table([("group_id", "group"), ("generation_id", "generation"), ("reason", "reason"),
                ("detail", "detail"), ("trigger_member_id", "trigger"),
                ("started_ms", "started"), ("duration_ms", "ms"),
                ("partitions_moved", "moved")], data.rebalances),
        '<h2 id="sessions">Member sessions</h2>',
        _table([("group_id", "group"), ("member_id", "member"),
                ("group_instance_id", "instance"), ("joined_ms", "joined"),
                ("connection_lost_ms", "connection lost"), ("ended_ms", "ended"),
                ("end_type", "end"), ("end_reason", "reason"), ("session_ms", "ms"),
                ("partitions_at_end", "owned at end"), ("commits_fenced", "fenced commits")],
               data.sessions),
        "</body></html>",
    ]
    return "\n".join(parts)
