"""How a subcommand runs its coroutine: on one event loop (uvloop's where it is
installed, as the broker runs), with the SDK's failures turned into one-line errors."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from groupwire.cli.errors import CliError
from groupwire.client.admin import Admin
from groupwire.client.errors import BrokerNotAvailableError, GroupwireError

try:
    import uvloop

    _uvloop_loop: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
except ImportError:  # uvloop is not installed on Windows: asyncio's own loop serves
    _uvloop_loop = None

T = TypeVar("T")

CLIENT_ID = "groupwire-cli"


def run_loop(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` to completion on a new event loop."""
    with asyncio.Runner(loop_factory=_uvloop_loop) as runner:
        return runner.run(main())


def run_sdk(main: Callable[[], Awaitable[int]]) -> int:
    """Run ``main()``; the SDK's errors, bad values and lost connections become CliErrors."""

    async def body() -> int:
        return await main()

    try:
        return run_loop(body)
    except BrokerNotAvailableError as exc:
        raise CliError(str(exc)) from exc
    except (GroupwireError, ValueError, TypeError) as exc:
        raise CliError(str(exc) or type(exc).__name__) from exc
    except (OSError, ConnectionError) as exc:
        raise CliError(f"connection failed: {exc}") from exc


def run_with_admin(args: argparse.Namespace, body: Callable[[Admin], Awaitable[int]]) -> int:
    """Run ``body`` with an :class:`Admin` on ``--bootstrap``, as :func:`run_sdk` does."""

    async def main() -> int:
        async with Admin(args.bootstrap, client_id=CLIENT_ID,
                         request_timeout_ms=args.timeout_ms) as admin:
            return await body(admin)

    return run_sdk(main)
