"""The Kafka APIs the door serves, each by its translator (``broker.kafka.translate``)."""

from __future__ import annotations

from groupwire.broker.kafka.apis.admin import ADMIN_TRANSLATORS
from groupwire.broker.kafka.apis.configs import CONFIG_TRANSLATORS
from groupwire.broker.kafka.apis.elections import ELECTION_TRANSLATORS
from groupwire.broker.kafka.apis.groups import GROUP_TRANSLATORS
from groupwire.broker.kafka.apis.records import RECORD_TRANSLATORS
from groupwire.broker.kafka.apis.sasl import SASL_TRANSLATORS
from groupwire.broker.kafka.apis.transactions import TRANSACTION_TRANSLATORS
from groupwire.broker.kafka.translate import Translator

TRANSLATORS: dict[int, Translator] = {
    **RECORD_TRANSLATORS,
    **GROUP_TRANSLATORS,
    **ADMIN_TRANSLATORS,
    **CONFIG_TRANSLATORS,
    **ELECTION_TRANSLATORS,
    **SASL_TRANSLATORS,
    **TRANSACTION_TRANSLATORS,
}
"""Kafka api key -> its translator; ApiVersions advertises exactly these keys."""
