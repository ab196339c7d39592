"""Security names the broker and the SDK must agree on, written once below both:
Kafka's security protocols and SASL mechanisms, and the principals connections take.

Light on purpose (no ssl, no scramp): the sans-I/O coordinator imports it.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ANONYMOUS",
    "PLAIN",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "user_principal",
    "uses_sasl",
    "uses_tls",
]

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's listener names and ``security.protocol`` values."""
PLAIN: Final = "PLAIN"
SASL_MECHANISMS: Final = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
ANONYMOUS: Final = "User:ANONYMOUS"
"""The principal of a connection that did not authenticate (Kafka's)."""


def uses_tls(security_protocol: str) -> bool:
    return security_protocol in ("SSL", "SASL_SSL")


def uses_sasl(security_protocol: str) -> bool:
    return security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def user_principal(user: str) -> str:
    """The principal a SASL user authenticates as: ``User:<name>``."""
    return f"User:{user}"
