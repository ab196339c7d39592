"""How long the groupwire command takes to start (issue 25).

Each round runs, as fresh processes of this interpreter: ``groupwire --version``, a
usage error (``groupwire nosuch``), ``groupwire topics --help``, ``groupwire topics list
--help`` (a client command, every module it needs to connect imported, then the help
printed instead), ``groupwire broker --help`` (the broker's settings table), and the
imports alone of the SDK (``import groupwire.client`` and ``import groupwire.client.admin``)
and of the command ``groupwire topics list`` runs. Wall time per process, python's own
start-up included: ``python -c pass`` is measured beside them as the floor.

Python reads each module's bytecode from a cache that an installed package has (pip
compiles it): the processes get one of their own, filled before any run is measured.
``--compile-each-run`` leaves the environment's setting alone instead; where it says
PYTHONDONTWRITEBYTECODE, every process compiles every module it imports from source.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO_ROOT, Figure, bench_main, repo_env, with_goal

GOAL_S = "<= 0.3"
"""The issue's bound for the command's own start-up, for a client command too."""

_SCRIPT = Path(sys.executable).parent / "groupwire"
GROUPWIRE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "groupwire"]
"""The installed ``groupwire`` script, as a user runs it (``python -m groupwire`` without)."""
PYTHON = [sys.executable]

CASES: tuple[tuple[str, list[str], str | None], ...] = (
    ("python -c pass (the floor)", [*PYTHON, "-c", "pass"], None),
    ("groupwire --version", [*GROUPWIRE, "--version"], GOAL_S),
    ("groupwire nosuch (usage error)", [*GROUPWIRE, "nosuch"], GOAL_S),
    ("groupwire topics --help", [*GROUPWIRE, "topics", "--help"], None),
    ("groupwire topics list --help", [*GROUPWIRE, "topics", "list", "--help"], GOAL_S),
    ("import of what topics list runs",
     [*PYTHON, "-c", "import groupwire.cli.main, groupwire.cli.topics"], GOAL_S),
    ("groupwire broker --help", [*GROUPWIRE, "broker", "--help"], None),
    ("import groupwire.client", [*PYTHON, "-c", "import groupwire.client"], None),
    ("import groupwire.client.admin", [*PYTHON, "-c", "import groupwire.client.admin"], None),
    ("import groupwire.protocol", [*PYTHON, "-c", "import groupwire.protocol"], None),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=7,
                   help="processes per case per round; a round's figure is their median "
                        "(default 7)")
    p.add_argument("--compile-each-run", action="store_true",
                   help="no bytecode cache of our own: as the environment has it")


def wall_s(argv: list[str], env: dict[str, str]) -> float:
    """Wall time of one process, from spawn to exit."""
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="cli-startup-pycache-") as cache:
        env = repo_env()
        cached = not args.compile_each_run
        if cached:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = cache
            for _, argv, _ in CASES:  # fill the cache
                wall_s(argv, env)
        runs = 1 if args.smoke else args.runs
        values: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
        for r in range(args.warmup + args.rounds):
            for name, argv, _ in CASES:
                # interleaved, so every case sees the same load on the shared machine
                samples = sorted(wall_s(argv, env) for _ in range(runs))
                if r >= args.warmup:
                    values[name].append(samples[len(samples) // 2])
    settings = {"runs_per_round": runs, "bytecode": "cached" if cached else (
        "compiled each run" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "as is")}
    figures = []
    for name, _, goal in CASES:
        figure = Figure(name, "s", values[name], settings)
        figures.append(figure if goal is None else with_goal(figure, goal))
    return figures


main = bench_main("cli_startup", add_arguments, run, default_rounds=5, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
