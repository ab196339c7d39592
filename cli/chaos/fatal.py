"""Which consumer errors end a chaos run, and the one line that tells the user why.

A member process that meets an error no retry can cure (the broker refuses the session
timeout, the group, the protocol ...) reports it to the runner on stdout as one JSON line
and exits with :data:`FATAL_EXIT`; the runner stops the run at once with :func:`explain`'s
line. Everything else (a broker restarting, a coordinator moving, a lost connection) is
retried with :class:`Backoff`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from groupwire.client.errors import (
    BrokerNotAvailableError,
    BrokerResponseError,
    CommitFailedError,
    GroupwireError,
)

FATAL_EXIT = 3
"""A member's exit code when it stopped on a fatal error (its stdout says which)."""

FATAL_PREFIX = "chaos-fatal "
"""Starts the member's stdout line that carries the fatal error as JSON."""


def is_fatal(exc: BaseException) -> bool:
    """True when retrying cannot help: a non-retriable broker answer, or a broken client."""
    if isinstance(exc, BrokerResponseError):
        return not exc.retriable
    if isinstance(exc, (BrokerNotAvailableError, CommitFailedError, ConnectionError,
                        TimeoutError)):
        return False
    return isinstance(exc, GroupwireError)  # closed, illegal state, crashed task, old broker


def code_of(exc: BaseException) -> str:
    if isinstance(exc, BrokerResponseError):
        return exc.code.name
    return type(exc).__name__


@dataclass
class Backoff:
    """Bounded exponential back-off with full jitter, reset by a success."""

    base_s: float = 0.05
    cap_s: float = 2.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay(self) -> float:
        self.failures += 1
        ceiling = min(self.cap_s, self.base_s * 2 ** min(self.failures - 1, 16))
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0

    def worth_journaling(self) -> bool:
        """Journal the 1st, 2nd, 4th, 8th ... failure of a streak: the journal stays small."""
        return self.failures & (self.failures - 1) == 0


def explain(code: str, message: str, *, member: str, session_timeout_ms: int,
            bootstrap: str, group: str, consumers: int) -> str:
    """One line: the cause (with its code) and the fix."""
    if code == "INVALID_SESSION_TIMEOUT":
        return (f"the broker at {bootstrap} refuses a {session_timeout_ms} ms session timeout "
                f"(INVALID_SESSION_TIMEOUT): it is outside the broker's "
                f"--group-min-session-timeout-ms .. --group-max-session-timeout-ms "
                f"(6000 .. 1800000 by default); pass a --session-timeout-ms within them, "
                f"or change the broker's bounds")
    if code == "GROUP_AUTHORIZATION_FAILED":
        return (f"the broker at {bootstrap} does not let this client use the group {group!r} "
                f"(GROUP_AUTHORIZATION_FAILED): grant it access, or pass --group with a "
                f"group it may use")
    if code == "TOPIC_AUTHORIZATION_FAILED":
        return (f"the broker at {bootstrap} does not let this client read the run's topic "
                f"(TOPIC_AUTHORIZATION_FAILED): grant its user READ and DESCRIBE on the "
                f"topic, or pass --topic with one it may read")
    if code in ("SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM"):
        return (f"the broker at {bootstrap} refused consumer {member}'s credentials "
                f"({code}: {message}): check --sasl-username, --sasl-mechanism and the "
                f"password (GROUPWIRE_SASL_PASSWORD or --command-config)")
    if code == "INVALID_GROUP_ID":
        return (f"the broker at {bootstrap} refuses the group id {group!r} (INVALID_GROUP_ID): "
                f"pass --group with another name")
    if code == "INCONSISTENT_GROUP_PROTOCOL":
        return (f"the group {group!r} is in use by consumers of another protocol or assignor "
                f"(INCONSISTENT_GROUP_PROTOCOL): pass --group with a group of this run only")
    if code == "GROUP_MAX_SIZE_REACHED":
        return (f"the group {group!r} is full (GROUP_MAX_SIZE_REACHED): pass fewer --consumers "
                f"than {consumers}, or raise the broker's --group-max-size")
    if code in ("UNSUPPORTED_VERSION", "IncompatibleBrokerError"):
        return (f"the broker at {bootstrap} does not speak a request version the consumer "
                f"needs ({code}: {message}): run a broker of this groupwire's version")
    return (f"consumer {member} stopped on an error no retry can cure ({code}: {message}); "
            f"its journal has the details (keep it with --report DIR)")
