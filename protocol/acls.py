"""Kafka's ACL enum codes, as DescribeAcls, CreateAcls and DeleteAcls carry them.

The numbers are Kafka's (``org.apache.kafka.common.acl`` and ``.resource``), so a Kafka
admin tool's codes mean the same here. ``UNKNOWN`` (0) is never valid in a request.
"""

from __future__ import annotations

import enum
from typing import Final

CLUSTER_NAME: Final = "kafka-cluster"
"""The one CLUSTER resource's name, as in Kafka."""

WILDCARD: Final = "*"
"""A LITERAL resource name, principal (``User:*``) or host matching every one."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    """On the cluster: InitProducerId without a transactional id (an idempotent producer),
    which WRITE on any topic allows too (Kafka 3.0+)."""


class AclPermission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ScramMechanism(enum.IntEnum):
    """KIP-554's mechanism codes in Describe/AlterUserScramCredentials."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def sasl_name(self) -> str:
        """The SASL mechanism name: ``SCRAM-SHA-256``."""
        return self.name.replace("_", "-")

    @classmethod
    def from_sasl_name(cls, name: str) -> ScramMechanism:
        """``SCRAM-SHA-512`` → SCRAM_SHA_512; UNKNOWN for any other name."""
        try:
            found = cls[name.upper().replace("-", "_")]
        except KeyError:
            return cls.UNKNOWN
        return found
