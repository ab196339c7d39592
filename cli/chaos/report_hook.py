"""Write a chaos run's rebalance report (the Spark job) beside its journals and verdict.

Called while the run's broker still serves, so the job reads the run's own
``__group_events``. A missing Spark or a failed job is a note, never a verdict: the
report explains a run, it does not judge it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console

from groupwire.cli.report import (
    SPARK_LOG,
    STEP_PREFIX,
    SUMMARY_PREFIX,
    job_command,
    job_env,
    last_error,
    spark_missing,
)

REPORT_DIR = "rebalance-report"


async def write_rebalance_report(bootstrap: str, report_dir: Path, group: str,
                                 console: Console, since_ms: int | None = None,
                                 security: Mapping[str, str] | None = None,
                                 ) -> Path | None:
    """Run the job on ``group``'s events (from ``since_ms``) into ``report_dir/rebalance-report``;
    the page's path, or None (after saying why) when it could not be written. ``security``:
    the run's client properties, handed to the job in its environment."""
    reason = spark_missing()
    if reason is not None:
        console.print(f"[yellow]rebalance report skipped[/]: {reason}")
        return None
    out = report_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    cmd = job_command(bootstrap, out, group=group, since_ms=since_ms)
    with (out / SPARK_LOG).open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=log, env=job_env(security))
        assert proc.stdout is not None
        page: str | None = None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(STEP_PREFIX):
                console.print(f"  [dim]rebalance report: {line[len(STEP_PREFIX):]}[/]")
            elif line.startswith(SUMMARY_PREFIX):
                page = str(out / "report.html")
        code = await proc.wait()
    if code != 0 or page is None:
        console.print(f"[yellow]rebalance report failed[/] (exit {code}): "
                      f"{last_error(out / SPARK_LOG)}")
        return None
    console.print(f"rebalance report: {page}")
    return Path(page)
