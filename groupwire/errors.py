"""Every exception the SDK raises, importable from one place.

``GroupwireError`` is the root; ``BrokerResponseError`` and its one-subclass-per-code
family carry the broker's Kafka error codes (``error_for(code)`` picks the class).
"""

from groupwire.client.errors import *  # noqa: F403
from groupwire.client.errors import __all__ as __all__
