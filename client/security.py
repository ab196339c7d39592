"""How a client reaches a secured broker: aiokafka's option names, one frozen value.

``Consumer``, ``Producer`` and ``Admin`` take ``security_protocol``, ``ssl_context``,
``sasl_mechanism``, ``sasl_plain_username`` and ``sasl_plain_password`` as aiokafka
does, and keep them here, so that every connection they open (the heartbeat thread's
included) is made the same way. The CLI builds the same value from flags, environment
variables or a Kafka-style ``--command-config`` properties file.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from groupwire.protocol.security import SASL_MECHANISMS, SECURITY_PROTOCOLS
from groupwire.protocol.tls import client_ssl_context

__all__ = [
    "DEFAULT_SASL_MECHANISM",
    "PLAINTEXT",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SecurityConfig",
    "create_ssl_context",
    "read_properties",
]

PLAINTEXT: Final = "PLAINTEXT"
DEFAULT_SASL_MECHANISM: Final = "SCRAM-SHA-256"
"""The SDK's (and the CLI's) ``sasl_mechanism`` when none is given: one a broker enables
as configured by default (``sasl_enabled_mechanisms`` SCRAM-SHA-256,SCRAM-SHA-512), and
the one ``Admin.upsert_user_scram_credential`` creates by default, so a user made with
the defaults logs in with the defaults. aiokafka's default is PLAIN, which sends the
password itself and which a groupwire broker enables only when told to."""


def create_ssl_context(*, cafile: str | Path | None = None,
                       certfile: str | Path | None = None,
                       keyfile: str | Path | None = None, password: str | None = None,
                       check_hostname: bool = True) -> ssl.SSLContext:
    """A client TLS context from PEM files (aiokafka's ``create_ssl_context``): verify the
    broker against ``cafile`` (the system's CAs without it); ``certfile``/``keyfile``
    present a client certificate to a listener that asks for one."""
    return client_ssl_context(cafile=cafile, certfile=certfile, keyfile=keyfile,
                              password=password, check_hostname=check_hostname)


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """One client's security settings; the default is plaintext without SASL, and SASL's
    mechanism is :data:`DEFAULT_SASL_MECHANISM` unless one is named."""

    security_protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = DEFAULT_SASL_MECHANISM
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None

    def __post_init__(self) -> None:
        protocol = self.security_protocol.upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of "
                             f"{', '.join(SECURITY_PROTOCOLS)}, not {self.security_protocol!r}")
        object.__setattr__(self, "security_protocol", protocol)
        mechanism = self.sasl_mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                             f"not {self.sasl_mechanism!r}")
        object.__setattr__(self, "sasl_mechanism", mechanism)
        if self.uses_sasl and (self.sasl_plain_username is None
                               or self.sasl_plain_password is None):
            raise ValueError(f"security_protocol {protocol} needs sasl_plain_username and "
                             f"sasl_plain_password")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def tls_context(self) -> ssl.SSLContext | None:
        """The context connections use: the one given, or the system's defaults when TLS
        is on without one (as aiokafka does); None for plaintext."""
        if not self.uses_tls:
            return None
        return self.ssl_context or create_ssl_context()

    @classmethod
    def from_options(cls, *, security_protocol: str = PLAINTEXT,
                     ssl_context: ssl.SSLContext | None = None,
                     sasl_mechanism: str = DEFAULT_SASL_MECHANISM,
                     sasl_plain_username: str | None = None,
                     sasl_plain_password: str | None = None) -> SecurityConfig:
        """The client constructors' keyword arguments, checked (ValueError naming one)."""
        return cls(security_protocol=security_protocol, ssl_context=ssl_context,
                   sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
                   sasl_plain_password=sasl_plain_password)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SecurityConfig:
        """Kafka's client property names (``security.protocol``, ``sasl.mechanism``,
        ``ssl.truststore.location`` as a PEM CA file, ``ssl.keystore.location`` /
        ``ssl.key.location`` as PEM, ``sasl.username``/``sasl.password`` or a
        ``sasl.jaas.config`` with ``username="..." password="..."``)."""
        protocol = props.get("security.protocol", PLAINTEXT)
        ctx = None
        if protocol.upper() in ("SSL", "SASL_SSL"):
            ctx = create_ssl_context(
                cafile=props.get("ssl.truststore.location") or props.get("ssl.cafile"),
                certfile=props.get("ssl.keystore.location") or props.get("ssl.certfile"),
                keyfile=props.get("ssl.key.location") or props.get("ssl.keyfile"),
                password=props.get("ssl.key.password"),
                check_hostname=props.get(
                    "ssl.endpoint.identification.algorithm", "https").lower() == "https")
        username = props.get("sasl.username")
        password = props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas is not None:
            username = username or _jaas_value(jaas, "username")
            password = password or _jaas_value(jaas, "password")
        return cls(security_protocol=protocol, ssl_context=ctx,
                   sasl_mechanism=props.get("sasl.mechanism", DEFAULT_SASL_MECHANISM),
                   sasl_plain_username=username, sasl_plain_password=password)


def _jaas_value(jaas: str, key: str) -> str | None:
    """``key="value"`` out of a JAAS line, as Kafka's tools' property files carry it."""
    marker = f'{key}="'
    at = jaas.find(marker)
    if at < 0:
        return None
    start = at + len(marker)
    end = jaas.find('"', start)
    return jaas[start:end] if end >= 0 else None


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java-style properties file: ``key=value`` or ``key: value`` lines, ``#`` and
    ``!`` comments, a trailing backslash continuing a line."""
    props: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for at, ch in enumerate(line):
            if ch in "=:":
                props[line[:at].strip()] = line[at + 1:].strip()
                break
        else:
            props[line] = ""
    if pending:
        props.setdefault(pending, "")
    return props
