"""Replay one seed, or run a range: ``python -m tests.sim.run --seed N [--trace]`` or
``python -m tests.sim.run --schedules 3000 [--start 0] [--steps 60]``."""

from __future__ import annotations

import argparse
import sys
import time

from tests.sim.schedule import DEFAULT_STEPS, SimulationFailure, Stats, run_schedule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, help="replay exactly this seed")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--schedules", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--trace", action="store_true", help="print the steps of --seed")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start,
                                                              args.start + args.schedules)
    stats = Stats()
    began = time.perf_counter()
    failed = 0
    for seed in seeds:
        trace: list[str] = []
        try:
            run_schedule(seed, args.steps, stats, trace)
            if args.trace and args.seed is not None:
                print("\n".join(f"{i:3d} {line}" for i, line in enumerate(trace)))
        except SimulationFailure as exc:
            failed += 1
            print(exc, file=sys.stderr)
            if args.seed is not None:
                raise
    took = time.perf_counter() - began
    print(f"{stats.schedules} schedules passed, {failed} failed, {stats.steps} steps, "
          f"{stats.commits_accepted} commits accepted, {stats.generations} generations, "
          f"{took:.1f} s; faults {dict(sorted(stats.faults.items()))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
