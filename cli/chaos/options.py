"""What one ``groupwire chaos`` run is asked to do, apart from the run itself
(:mod:`groupwire.cli.chaos.runner`, which loads the broker's storage code): the
subcommand's parser reads its defaults here, so ``groupwire chaos --help`` and a usage
error import no broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from groupwire.client.security import SecurityConfig

OWN_BROKER_SESSION_TIMEOUT_MS = 3000
"""The run's own broker accepts 100 ms and up: short sessions make faults quick to notice."""
EXTERNAL_SESSION_TIMEOUT_MS = 6000
"""The lowest session timeout a broker with default settings accepts."""


class ChaosFatal(Exception):
    """The run cannot go on; the message is the one line for the user."""


@dataclass
class ChaosOptions:
    bootstrap: str | None = None
    consumers: int = 6
    faults: int = 20
    records: int = 5000
    broker_faults: int = 0
    seed: int = 0
    session_timeout_ms: int | None = None
    """None: 3000 with the run's own broker, 6000 with ``bootstrap``."""
    partitions: int = 12
    rate: int = 500
    report: Path | None = None
    rebalance_report: bool = False
    topic: str | None = None
    """None: ``chaos-SEED-STAMP``, a topic of this run only."""
    cluster: int = 0
    """Brokers of the run's own cluster (with its own etcd); 0: one broker, no etcd."""
    group: str | None = None
    """None: ``chaos-group-SEED-STAMP``, a group of this run only."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """How every client of the run reaches the broker (``bootstrap``'s only)."""
    client_properties: dict[str, str] = field(default_factory=dict, repr=False)
    """``security`` as Kafka client properties: the member processes build their own."""

    @property
    def session_timeout(self) -> int:
        if self.session_timeout_ms is not None:
            return self.session_timeout_ms
        if self.bootstrap is None:
            return OWN_BROKER_SESSION_TIMEOUT_MS
        return EXTERNAL_SESSION_TIMEOUT_MS
