"""Start a chaos run's child (a consumer, a broker, etcd) so that it dies with the run.

``python -m groupwire.cli.chaos.child PARENT_PID MODULE ARGS...`` arranges for this
process to be SIGKILLed when its parent dies, then runs ``python -m MODULE ARGS...`` in
it; ``... PARENT_PID --exec PROGRAM ARGS...`` execs a program instead (the parent-death
signal survives the exec). The runner also puts each child in its own process group
and kills that group on exit, but a runner that is itself SIGKILLed runs no exit code at
all: only the kernel's parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``) covers
that case, at no cost and without a thread. Where prctl is missing, a daemon thread
polls ``os.getppid()`` instead.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Mapping

PR_SET_PDEATHSIG = 1
WATCHDOG_PERIOD_S = 0.5
EXEC = "--exec"


async def start_child(*argv: str, stdout: int, stderr: int,
                      env: Mapping[str, str] | None = None) -> asyncio.subprocess.Process:
    """``python -m MODULE ARGS`` (or ``--exec PROGRAM ARGS``) in its own process group,
    dying with this process; ``env`` is added to this process's environment (secrets go
    there, never into ``argv``, which ``ps`` shows)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "groupwire.cli.chaos.child", str(os.getpid()), *argv,
        stdout=stdout, stderr=stderr, stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True, env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})


def _set_parent_death_signal() -> bool:
    """Ask the kernel to SIGKILL this process when its parent exits; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCHDOG_PERIOD_S)  # polling is the watchdog's whole job
    os.kill(os.getpid(), signal.SIGKILL)


def guard(parent: int) -> None:
    """Die with ``parent``: at once if it is already gone (we were re-parented)."""
    if not _set_parent_death_signal():
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                         name="parent-watchdog").start()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m groupwire.cli.chaos.child PARENT_PID MODULE [ARGS...]")
    guard(int(sys.argv[1]))
    module = sys.argv[2]
    if module == EXEC:  # a program, not a module: the watchdog thread would not survive
        os.execv(sys.argv[3], sys.argv[3:])
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
