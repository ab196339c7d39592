"""``groupwire bench NAME [ARGS]``: run a benchmark from the source checkout.

The benchmarks (``bench/``) are not in the wheel: they start brokers, servers and load
generators as processes and belong with the repository. This command finds ``bench/``
next to the installed packages (an editable install or a run from the checkout) or in
the current directory, and runs ``python -m bench.NAME ARGS`` (``all``: the runner,
``python -m bench.run ARGS``) there. ``register(subparsers)`` adds the subcommand.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

NOT_FOUND = ("bench/ not found: the benchmarks live in the source checkout, not in the "
             "wheel; run this from the repository root or install it editable "
             "(pip install -e .)")


class BenchNotFoundError(Exception):
    """No usable bench/ directory, or no such benchmark in it."""


def find_bench_dir(cwd: Path | None = None) -> Path:
    """The checkout's bench/: beside the installed ``broker`` package, else in ``cwd``."""
    here = Path(__file__).resolve().parent.parent
    for root in (here, (cwd or Path.cwd()).resolve()):
        candidate = root / "bench"
        if (candidate / "run.py").is_file() and (candidate / "common.py").is_file():
            return candidate
    raise BenchNotFoundError(NOT_FOUND)


def known_benches(bench_dir: Path) -> list[str]:
    """The runner's list (``BENCHES`` in bench/run.py), read without importing it."""
    tree = ast.parse((bench_dir / "run.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "BENCHES"):
            names = ast.literal_eval(node.value)
            return [n for n in names if isinstance(n, str)]
    return []


def bench_command(name: str, args: list[str], bench_dir: Path) -> list[str]:
    if name == "all":
        return [sys.executable, "-m", "bench.run", *args]
    names = known_benches(bench_dir)
    if name not in names:
        raise BenchNotFoundError(f"unknown benchmark {name!r}; known: all, {', '.join(names)}")
    if not (bench_dir / f"{name}.py").is_file():
        raise BenchNotFoundError(f"bench/{name}.py is not in this checkout yet")
    return [sys.executable, "-m", f"bench.{name}", *args]


def run_bench(name: str, args: list[str], cwd: Path | None = None) -> int:
    bench_dir = find_bench_dir(cwd)
    root = bench_dir.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    cmd = bench_command(name, args, bench_dir)
    try:
        return subprocess.run(cmd, cwd=root, env=env, check=False).returncode
    except KeyboardInterrupt:
        return 130


def _cmd_bench(args: argparse.Namespace) -> int:
    from broker.cli import CliError

    try:
        return run_bench(args.name, list(args.args))
    except BenchNotFoundError as exc:
        raise CliError(str(exc)) from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench", help="run a benchmark (or all) from the source checkout",
        description="Run bench/NAME.py from the source checkout (`all`: every benchmark, "
                    "results appended to bench/results/ and bench/RESULTS.md refreshed). "
                    "ARGS go to the benchmark: --rounds N, --warmup N, --smoke, --json, "
                    "and its own flags (groupwire bench NAME --help).")
    p.add_argument("name", metavar="NAME",
                   help="heartbeat, rebalance, failover, throughput, cooperative, "
                        "spark_source, memory, or all")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="passed to the benchmark")
    p.set_defaults(func=_cmd_bench)
