"""The data directory's metadata file and the topic name rules.

``meta.json`` holds the cluster id, the ``__consumer_offsets`` partition count (fixed when
the directory is created, since it decides which partition holds each group) and every
topic's partition count. It is replaced atomically, so a crash leaves the old or the new.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final

from groupwire.broker.storage.errors import StorageError, TopicRefusedError
from groupwire.broker.topics.rules import name_refusal

META_FILE: Final = "meta.json"
META_FORMAT: Final = 1
OFFSETS_TOPIC: Final = "__consumer_offsets"
EVENTS_TOPIC: Final = "__group_events"
TRANSACTIONS_TOPIC: Final = "__transaction_state"
"""Created on first need (``TopicStore.begin_create_internal``), as Kafka creates it."""
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, EVENTS_TOPIC, TRANSACTIONS_TOPIC})


def check_topic_name(name: str) -> None:
    """Raise :class:`TopicRefusedError` unless ``name`` may be created by a client
    (:func:`broker.topics.rules.name_refusal`, the rule both modes apply)."""
    refusal = name_refusal(name)
    if refusal is not None:
        raise TopicRefusedError(refusal.message)


@dataclass(slots=True)
class StoreMeta:
    cluster_id: str
    offsets_partitions: int
    topics: dict[str, int] = field(default_factory=dict)

    def dump(self) -> bytes:
        return json.dumps({
            "format": META_FORMAT,
            "cluster_id": self.cluster_id,
            "offsets_partitions": self.offsets_partitions,
            "topics": dict(sorted(self.topics.items())),
        }, indent=1).encode() + b"\n"

    @classmethod
    def load(cls, raw: bytes, source: str) -> StoreMeta:
        try:
            doc = json.loads(raw)
            if doc.get("format") != META_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            cluster_id, offsets, topics = (doc["cluster_id"], doc["offsets_partitions"],
                                           doc["topics"])
            if not isinstance(cluster_id, str) or type(offsets) is not int or offsets < 1:
                raise ValueError("bad cluster_id or offsets_partitions")
            if not isinstance(topics, dict) or not all(
                    isinstance(k, str) and type(v) is int and v >= 1 for k, v in topics.items()):
                raise ValueError("bad topics")
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise StorageError(f"unreadable metadata {source}: {exc}") from exc
        return cls(cluster_id=cluster_id, offsets_partitions=offsets, topics=dict(topics))
