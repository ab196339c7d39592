"""One owner for every long-lived task the broker's shell runs.

A background loop that dies on an exception nobody expected (a ``KeyError`` from an image
mutated under it, a bug in a fetcher) used to vanish: the broker stayed registered and
answered requests while one of its jobs had silently stopped. Here each such job is a
*service* started through :class:`Supervisor`. A crash is logged at error with its
traceback, counted (``groupwire_background_task_failures_total{task}``) and the service
is started again after a backoff. A service that keeps crashing (``max_failures`` within
``failure_window_s``), or one marked not restartable, is fatal: the supervisor calls
``on_fatal`` and the broker fences itself and exits non-zero, so its orchestrator
restarts a clean process rather than leaving a half-working one in the cluster.

Cancellation is how a service is stopped and is never counted as a failure; a service
that returns normally has finished its job and is not restarted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from groupwire.broker.logs import get_logger

__all__ = ["Restart", "Service", "Supervisor"]

log = get_logger("groupwire.broker.supervisor")

Run = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Restart:
    """How a crashed service comes back: exponential backoff, and how many crashes in
    how long make it fatal. ``max_failures=0`` makes the first crash fatal."""

    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    max_failures: int = 10
    failure_window_s: float = 60.0

    def backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.initial_backoff_s * (2 ** max(0, attempt - 1)))


DEFAULT_RESTART = Restart()
NEVER = Restart(max_failures=0)
"""For a service whose state cannot be rebuilt by starting it again."""


class Service:
    """A handle on one supervised job: its name, crash count and ``stop()``."""

    def __init__(self, supervisor: Supervisor, name: str, kind: str, run: Run,
                 restart: Restart) -> None:
        self.name = name
        self.kind = kind
        """The metric label: ``replica-fetcher`` for every fetcher, say, so the label
        set stays bounded however many instances run."""
        self._supervisor = supervisor
        self._run = run
        self._restart = restart
        self._crashes: list[float] = []
        self.failures = 0
        self.last_error: BaseException | None = None
        self._stopping = False
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._supervise(), name=name)

    @property
    def running(self) -> bool:
        return not self.task.done()

    async def _supervise(self) -> None:
        while True:
            try:
                await self._run()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a crash: every kind is supervised, none hidden
                if self._stopping:
                    return
                self._crashed(exc)
                if self._fatal():
                    self._supervisor.fatal(self, exc)
                    return
                delay = self._restart.backoff(len(self._crashes))
                log.warning("background_task_restarting", task=self.name,
                            in_s=round(delay, 3), failures=self.failures)
                await asyncio.sleep(delay)

    def _crashed(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = exc
        now = self._supervisor.clock()
        window = self._restart.failure_window_s
        self._crashes = [t for t in self._crashes if now - t < window] + [now]
        log.error("background_task_failed", task=self.name, kind=self.kind,
                  failures=self.failures, error=f"{type(exc).__name__}: {exc}",
                  exc_info=exc)
        self._supervisor.on_failure(self.kind)

    def _fatal(self) -> bool:
        return len(self._crashes) > self._restart.max_failures

    async def stop(self, timeout: float | None = 5.0) -> None:
        """Cancel the job and wait for it (bounded); its own cleanup runs first."""
        self._stopping = True
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=timeout)
        self._supervisor.forget(self)


class Supervisor:
    """Starts services and keeps them running; see the module docstring."""

    def __init__(self, *, on_failure: Callable[[str], None] = lambda _kind: None,
                 on_fatal: Callable[[str, BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 restart: Restart = DEFAULT_RESTART) -> None:
        """``on_failure(kind)``: count a crash; ``on_fatal(name, error)``: a service
        cannot go on (the broker stops with an error); without it, fatal crashes are
        only logged and the service stays down."""
        self.on_failure = on_failure
        self._on_fatal = on_fatal
        self.clock = clock
        self.restart = restart
        """The policy of services spawned without one of their own."""
        self._services: dict[str, Service] = {}
        self.fatal_error: tuple[str, BaseException] | None = None

    def spawn(self, name: str, run: Run, *, kind: str | None = None,
              restart: Restart | None = None) -> Service:
        """Start ``run()`` as a service called ``name`` (unique among running ones)."""
        old = self._services.get(name)
        if old is not None and old.running:
            raise RuntimeError(f"a service named {name!r} is already running")
        service = Service(self, name, kind or name, run, restart or self.restart)
        self._services[name] = service
        return service

    def services(self) -> list[Service]:
        return list(self._services.values())

    def get(self, name: str) -> Service | None:
        return self._services.get(name)

    def forget(self, service: Service) -> None:
        if self._services.get(service.name) is service:
            del self._services[service.name]

    def fatal(self, service: Service, exc: BaseException) -> None:
        log.critical("background_task_fatal", task=service.name, failures=service.failures,
                     error=f"{type(exc).__name__}: {exc}",
                     why="it keeps failing or cannot be restarted; the broker stops so "
                         "that its orchestrator starts a clean one")
        if self.fatal_error is None:
            self.fatal_error = (service.name, exc)
        if self._on_fatal is not None:
            self._on_fatal(service.name, exc)

    async def close(self, timeout: float = 5.0) -> None:
        """Stop every service still running, all at once, each bounded by ``timeout``."""
        services = list(self._services.values())
        await asyncio.gather(*(s.stop(timeout) for s in services))
