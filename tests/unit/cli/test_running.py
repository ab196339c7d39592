"""How run_sdk words what ends a command: a lost connection is named as one, and
nothing else is."""

from __future__ import annotations

import pytest

from groupwire.cli.errors import CliError
from groupwire.cli.running import Stop, run_sdk


def _failing(exc: BaseException) -> int:
    async def main(stop: Stop) -> int:
        raise exc

    return run_sdk(main)


@pytest.mark.parametrize("exc", [ConnectionRefusedError(111, "refused"), TimeoutError()])
def test_a_network_failure_is_a_failed_connection(exc: BaseException) -> None:
    with pytest.raises(CliError, match=r"^connection failed: "):
        _failing(exc)


def test_another_os_error_is_not_called_a_connection_failure() -> None:
    """A chaos run once said 'connection failed: ' (and nothing more) for a signal sent
    to a process that had exited."""
    with pytest.raises(CliError) as caught:
        _failing(ProcessLookupError())
    assert str(caught.value) == "ProcessLookupError"
    with pytest.raises(CliError, match=r"^FileNotFoundError: .*journal"):
        _failing(FileNotFoundError(2, "No such file or directory", "journal"))
