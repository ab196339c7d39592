"""How a subcommand runs its coroutine: on one event loop (uvloop's where it is
installed, as the broker runs), with the SDK's failures turned into one-line errors, and
SIGINT and SIGTERM turned into a clean stop (:class:`Stop`)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from groupwire.cli.arguments import security_from_args
from groupwire.cli.errors import CliError
from groupwire.client.admin import Admin
from groupwire.client.errors import BrokerNotAvailableError, GroupwireError
from groupwire.client.security import SecurityConfig

try:
    import uvloop

    _uvloop_loop: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
except ImportError:  # uvloop is not installed on Windows: asyncio's own loop serves
    _uvloop_loop = None

T = TypeVar("T")

CLIENT_ID = "groupwire-cli"

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_loop(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` to completion on a new event loop."""
    with asyncio.Runner(loop_factory=_uvloop_loop) as runner:
        return runner.run(main())


class Stop:
    """SIGINT or SIGTERM, as a command sees them.

    A command that can end cleanly (leave its group, print its summary) watches
    :attr:`requested` or races :meth:`until` against its waits; the first signal only
    asks it to stop. A command that does not (``graceful=False``), or a second signal,
    cancels the command's task. Either way the exit code is 128 + the signal's number.
    """

    def __init__(self, task: asyncio.Task[Any], *, graceful: bool) -> None:
        self._task = task
        self._graceful = graceful
        self.event = asyncio.Event()
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    @property
    def exit_code(self) -> int:
        assert self.signum is not None
        return 128 + self.signum

    def _on_signal(self, signum: int) -> None:
        if self.signum is not None or not self._graceful:
            self._task.cancel()
        self.signum = self.signum or signum
        self.event.set()

    async def until(self, aw: Awaitable[T]) -> T | None:
        """``aw``'s result, or None once a stop is requested (``aw`` is then cancelled)."""
        work = asyncio.ensure_future(aw)
        stopped = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not work.done():
                work.cancel()
        return work.result() if work.done() and not work.cancelled() else None


def _install(loop: asyncio.AbstractEventLoop, stop: Stop) -> bool:
    # signal handlers can only be set in the main thread (tests run commands in others)
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop._on_signal, int(sig))
    return True


def _quiet_after_abort(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A command cancelled by a signal leaves its clients' requests unanswered: the
    failures of those requests, which nobody awaits any more, are no news to print."""
    exc = context.get("exception")
    if isinstance(exc, GroupwireError | OSError) and "never retrieved" in context.get(
            "message", ""):
        return
    loop.default_exception_handler(context)


def run_sdk(main: Callable[[Stop], Awaitable[int]], *, graceful: bool = False) -> int:
    """Run ``main(stop)``; the SDK's errors, bad values and lost connections become
    CliErrors, and a signal ends it with 128 + its number (see :class:`Stop`)."""

    async def body() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        stop = Stop(task, graceful=graceful)
        installed = _install(loop, stop)
        try:
            code = await main(stop)
        except asyncio.CancelledError:
            if stop.signum is None:
                raise
            task.uncancel()
            loop.set_exception_handler(_quiet_after_abort)
            return stop.exit_code
        finally:
            if installed:
                for sig in STOP_SIGNALS:
                    loop.remove_signal_handler(sig)
        return stop.exit_code if stop.signum is not None else code

    try:
        return run_loop(body)
    except BrokenPipeError:  # stdout's reader left: groupwire.cli.main's to handle
        raise
    except BrokerNotAvailableError as exc:
        raise CliError(str(exc)) from exc
    except (GroupwireError, ValueError, TypeError) as exc:
        raise CliError(str(exc) or type(exc).__name__) from exc
    except (ConnectionError, TimeoutError, socket.gaierror) as exc:
        raise CliError(f"connection failed: {exc or type(exc).__name__}") from exc
    except OSError as exc:  # a file, a process: not the network, so not named as it
        raise CliError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                       ) from exc


def run_with_admin(args: argparse.Namespace, body: Callable[[Admin], Awaitable[int]], *,
                   security: SecurityConfig | None = None) -> int:
    """Run ``body`` with an :class:`Admin` on ``--bootstrap`` (with the security
    settings of :func:`~groupwire.cli.arguments.security_from_args`), as :func:`run_sdk`
    does (``security``: already read by a caller that needed them earlier)."""
    if security is None:
        security = security_from_args(args)

    async def main(stop: Stop) -> int:
        async with Admin(args.bootstrap, client_id=CLIENT_ID,
                         request_timeout_ms=args.timeout_ms, security=security) as admin:
            return await body(admin)

    return run_sdk(main)
