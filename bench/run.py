"""Run the benchmarks, keep their figures, and refresh bench/RESULTS.md.

Each benchmark runs as its own process (``python -m bench.NAME --json``), so one that
crashes or hangs costs only its own figures. Figures are appended, with the machine's
description, to ``bench/results/<YYYY-MM-DD>.jsonl``; RESULTS.md is then rebuilt from
the latest run of every benchmark found in all result files. Smoke runs write nothing.

Whether goals are met is said only by lines computed from the figures they sit under
(:func:`status_line`); a note in ``bench/notes/`` that claims a status in prose is refused
(:func:`status_claims`), since it goes stale the moment the benchmark runs again.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, die_with_parent, fmt, machine, repo_env

BENCH_DIR = REPO_ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
NOTES_DIR = BENCH_DIR / "notes"
RESULTS_MD = BENCH_DIR / "RESULTS.md"
# In the order of the issue's list; modules not written yet are skipped.
BENCHES = ["heartbeat", "rebalance", "failover", "throughput", "cooperative", "spark_source",
           "memory", "soak", "cluster_failover", "cluster_throughput", "security",
           "cli_startup", "cli_produce", "kafka_codec", "kafka_records", "kafka_clients",
           "transactions"]
TIMEOUT_S = 3600.0
SMOKE_TIMEOUT_S = 300.0


STATUS_CLAIM = re.compile(
    r"^\s*status\b|\bgoals? (?:\w+ )?(?:met|missed|not met)\b|\(goal [^)]*: (?:met|missed)\)",
    re.IGNORECASE | re.MULTILINE)
"""Prose that says whether a goal is met: only :func:`status_line` may say it."""


def available() -> list[str]:
    return [name for name in BENCHES if (BENCH_DIR / f"{name}.py").exists()]


def bench_command(name: str, args: argparse.Namespace) -> list[str]:
    cmd = ["python", "-m", f"bench.{name}", "--json"]
    if args.smoke:
        cmd.append("--smoke")
    if args.rounds is not None:
        cmd += ["--rounds", str(args.rounds)]
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    return cmd


def run_one(name: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], str | None]:
    """The figures a benchmark printed, and why it failed (None when it did not)."""
    cmd = bench_command(name, args)
    print(f"== {shlex.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen([sys.executable, *cmd[1:]], cwd=REPO_ROOT, env=repo_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", preexec_fn=die_with_parent)
    err_tail: list[str] = []
    out: list[str] = []

    def tee() -> None:  # progress stays visible; the last lines say why a bench failed
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            err_tail[:] = [*err_tail[-4:], line.rstrip()]

    def collect() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    # one reader per pipe: communicate() would read stderr too, beside tee(), and the two
    # would split a multi-byte character between them
    readers = [threading.Thread(target=tee, daemon=True),
               threading.Thread(target=collect, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=SMOKE_TIMEOUT_S if args.smoke else TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return [], "timed out"
    for reader in readers:
        reader.join(5)
    stdout = "".join(out)
    figures = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                figures.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    if proc.returncode != 0:
        tail = [x for x in err_tail if x.strip()]
        return figures, tail[-1] if tail else f"exit {proc.returncode}"
    return figures, None


def append_results(run_id: str, when: dt.datetime, machine_desc: dict[str, Any],
                   by_bench: dict[str, tuple[list[str], list[dict[str, Any]], str | None]],
                   ) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{when:%Y-%m-%d}.jsonl"
    with path.open("a") as out:
        out.write(json.dumps({"kind": "run", "run_id": run_id, "time": when.isoformat(),
                              "machine": machine_desc}) + "\n")
        for name, (cmd, figures, error) in by_bench.items():
            command = shlex.join(cmd)
            if error is not None:
                out.write(json.dumps({"kind": "error", "run_id": run_id, "bench": name,
                                      "command": command, "error": error}) + "\n")
            for fig in figures:
                out.write(json.dumps({"kind": "figure", "run_id": run_id, "command": command,
                                      **fig}) + "\n")
    return path


def latest_runs() -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """For each benchmark, the figures of its latest run that produced any, and the runs."""
    runs: dict[str, dict[str, Any]] = {}
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
    order: dict[str, list[str]] = {}
    for path in sorted(RESULTS_DIR.glob("*.jsonl")) if RESULTS_DIR.exists() else []:
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("kind") == "run":
                runs[rec["run_id"]] = rec
            elif rec.get("kind") == "figure":
                key = (rec["bench"], rec["run_id"])
                if key not in by_run:
                    by_run[key] = []
                    order.setdefault(rec["bench"], []).append(rec["run_id"])
                by_run[key].append(rec)
    latest = {bench: by_run[(bench, ids[-1])] for bench, ids in order.items()}
    return latest, runs


def title_of(name: str) -> str:
    """The first line of the benchmark module's docstring (read, not imported)."""
    path = BENCH_DIR / f"{name}.py"
    if not path.exists():
        return name
    doc = ast.get_docstring(ast.parse(path.read_text())) or name
    return doc.strip().splitlines()[0].rstrip(".")


def cell(x: float | None) -> str:
    return "-" if x is None else fmt(x)


def machine_line(m: dict[str, Any]) -> str:
    return (f"{m.get('cpu_model')}, {m.get('cores')} cores, Python {m.get('python')}, "
            f"uvloop {'on' if m.get('uvloop') else 'off'}, {m.get('os')}, "
            f"load average {m.get('loadavg_1m')} at the start")


def status_line(figures: list[dict[str, Any]]) -> str | None:
    """Whether this run's figures meet their goals, computed from them (None: no goals)."""
    judged = [f for f in figures if f.get("met") is not None]
    if not judged:
        return None
    missed = [f for f in judged if not f["met"]]
    if not missed:
        met = {1: "its goal is met", 2: "both goals are met"}.get(
            len(judged), f"all {len(judged)} goals are met")
        return f"Status (computed from the figures above): {met}."
    which = "; ".join(f"{f['name']} {cell(f['median'])} (goal {f.get('goal')})"
                      for f in missed)
    return (f"Status (computed from the figures above): {len(judged) - len(missed)} of "
            f"{len(judged)} goals met; not met: {which}.")


def status_claims(text: str) -> list[str]:
    """The lines of a note that claim a goal's status in prose."""
    lines = text.splitlines()
    return sorted({lines[text.count("\n", 0, m.start())].strip()
                   for m in STATUS_CLAIM.finditer(text)})


def render(latest: dict[str, list[dict[str, Any]]], runs: dict[str, dict[str, Any]]) -> str:
    lines = ["# Benchmark results", "",
             "Generated by `python -m bench.run` from `bench/results/*.jsonl` (the latest run "
             "of each benchmark); do not edit by hand. Each figure is the median over the "
             "measured rounds, with the min and max beside it. Ratios are taken within one "
             "run, so both sides saw the same machine.", ""]
    names = [n for n in BENCHES if n in latest] + sorted(set(latest) - set(BENCHES))
    if not names:
        lines += ["No results yet: run `python -m bench.run`.", ""]
    for name in names:
        figures = latest[name]
        run = runs.get(figures[0]["run_id"], {})
        command = figures[0]["command"].replace(" --json", "")
        lines += [f"## {title_of(name)} (`{name}`)", "",
                  f"Command: `{command}`  ",
                  f"Run: {run.get('time', '?')[:19].replace('T', ' ')} UTC on "
                  f"{machine_line(run.get('machine', {}))}", "",
                  "| figure | median | min | max | unit | rounds | goal | met |",
                  "|---|---:|---:|---:|---|---:|---|---|"]
        for f in figures:
            met = "" if f.get("met") is None else ("yes" if f["met"] else "**no**")
            lines.append(f"| {f['name']} | {cell(f['median'])} | {cell(f['min'])} | "
                         f"{cell(f['max'])} | {f['unit']} | {f['rounds']} | "
                         f"{f.get('goal') or ''} | {met} |")
        status = status_line(figures)
        if status is not None:
            lines += ["", status]
        notes = [(f["name"], f["note"]) for f in figures if f.get("note")]
        if notes:
            lines.append("")
            lines += [f"- {n}: {note}" for n, note in notes]
        settings = {json.dumps(f.get("settings", {}), sort_keys=True) for f in figures}
        if len(settings) == 1:
            lines += ["", f"Settings: `{settings.pop()}`"]
        notes_path = NOTES_DIR / f"{name}.md"
        if notes_path.exists():
            text = notes_path.read_text().strip()
            claims = status_claims(text)
            if claims:
                raise ValueError(
                    f"bench/notes/{notes_path.name} says whether goals are met in "
                    f"prose, which goes stale when the benchmark runs again (the status "
                    f"line is computed from the figures): {claims[0]!r}")
            lines += ["", "### Notes", "", text]
        lines.append("")
    return "\n".join(lines)


def write_results_md() -> Path:
    latest, runs = latest_runs()
    RESULTS_MD.write_text(render(latest, runs))
    return RESULTS_MD


def main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of "
                                                 f"{', '.join(BENCHES)} that exist)")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds-long runs with tiny sizes; nothing is written")
    parser.add_argument("--rounds", type=int, help="measured rounds (default: each bench's)")
    parser.add_argument("--warmup", type=int, help="warm-up rounds (default: each bench's)")
    parser.add_argument("--no-write", action="store_true",
                        help="print the figures but keep results/ and RESULTS.md as they are")
    parser.add_argument("--render-only", action="store_true",
                        help="only rebuild RESULTS.md from the stored results")
    args = parser.parse_args(argv)
    if args.render_only:
        print(write_results_md())
        return 0
    present = available()
    unknown = [n for n in args.names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHES)}")
    missing = [n for n in args.names if n not in present]
    for n in missing:
        print(f"bench {n}: bench/{n}.py does not exist yet, skipped", file=sys.stderr)
    names = [n for n in (args.names or present) if n in present]
    when = dt.datetime.now(dt.UTC)
    run_id = f"{when:%Y%m%dT%H%M%S}-{int(time.time() * 1000) % 1000:03d}"
    machine_desc = machine()
    by_bench: dict[str, tuple[list[str], list[dict[str, Any]], str | None]] = {}
    for name in names:
        figures, error = run_one(name, args)
        by_bench[name] = (bench_command(name, args), figures, error)
        for fig in figures:
            print(json.dumps(fig), flush=True)
        if error is not None:
            print(f"bench {name} failed: {error}", file=sys.stderr)
    if not (args.smoke or args.no_write):
        path = append_results(run_id, when, machine_desc, by_bench)
        print(f"results appended to {path.relative_to(REPO_ROOT)}; "
              f"{write_results_md().relative_to(REPO_ROOT)} refreshed", file=sys.stderr)
    return 1 if any(err is not None for _, _, err in by_bench.values()) else 0


if __name__ == "__main__":
    sys.exit(main(None))
