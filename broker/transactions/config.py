"""Transaction coordinator settings: Kafka's transaction.* knobs, same names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from groupwire.protocol.hashing import OFFSETS_TOPIC_PARTITIONS


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    transaction_max_timeout_ms: int = 900_000
    """``transaction.max.timeout.ms``: the longest timeout InitProducerId may ask for."""
    transactional_id_expiration_ms: int = 604_800_000
    """``transactional.id.expiration.ms``: an id idle this long (no transaction open) is
    removed with a tombstone."""
    partitions: int = 50
    """``transaction.state.log.num.partitions``: where transactional ids are placed.
    Fixed once ids are stored: changing it moves them."""
    offsets_partitions: int = OFFSETS_TOPIC_PARTITIONS
    """``offsets.topic.num.partitions``: AddOffsetsToTxn adds the group's
    ``__consumer_offsets`` partition to the transaction."""
    retry_backoff_ms: int = 100
    """How long after a failure the coordinator tries its own work again: markers that
    failed on some partitions, and the records it writes unasked (the Complete record
    after markers, a timeout's abort, an expired id's tombstone)."""

    def __post_init__(self) -> None:
        for name in ("transaction_max_timeout_ms", "transactional_id_expiration_ms",
                     "partitions", "offsets_partitions"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.retry_backoff_ms < 0:
            raise ValueError(f"retry_backoff_ms must not be negative, got {self.retry_backoff_ms}")
