"""Listeners in Kafka's form: ``NAME://host:port``, one server socket each.

The name is the security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL): Kafka's
``listener.security.protocol.map`` is not offered, so a name says how the listener is
secured. Pure: parsing and the advertised addresses, no sockets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from groupwire.protocol.security import SECURITY_PROTOCOLS

WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})
DEFAULT_ADVERTISED_HOST: Final = "127.0.0.1"


class ListenerError(ValueError):
    """A listener list that cannot be used; the message names the flag."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    security_protocol: str
    host: str
    """Empty: every interface."""
    port: int
    """0: any free port (tests)."""

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def plaintext(host: str, port: int) -> Listener:
    """The listener of a broker given no ``--listeners``: ``--host`` and ``--port``."""
    return Listener("PLAINTEXT", "PLAINTEXT", host, port)


def parse_listeners(text: str, flag: str) -> list[Listener]:
    """``NAME://host:port,...`` as Kafka writes it; names unique, ``[v6]`` hosts allowed."""
    found: list[Listener] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        found.append(_parse_one(item, flag))
    if not found:
        raise ListenerError(f"{flag}: expected NAME://HOST:PORT[,...], got {text!r}")
    names = [listener.name for listener in found]
    for name in names:
        if names.count(name) > 1:
            raise ListenerError(f"{flag}: listener {name} given more than once")
    return found


def _parse_one(item: str, flag: str) -> Listener:
    name, sep, address = item.partition("://")
    if not sep:
        raise ListenerError(f"{flag}: expected NAME://HOST:PORT, got {item!r}")
    name = name.strip().upper()
    if name not in SECURITY_PROTOCOLS:
        raise ListenerError(
            f"{flag}: listener name must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {name!r} in {item!r}")
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ListenerError(f"{flag}: expected NAME://[IPV6]:PORT, got {item!r}")
        port_text = rest[1:]
    else:
        host, colon, port_text = address.rpartition(":")
        if not colon:
            raise ListenerError(f"{flag}: {item!r} has no port (NAME://HOST:PORT)")
        if ":" in host:
            raise ListenerError(f"{flag}: write an IPv6 host in brackets, got {item!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ListenerError(f"{flag}: port must be a number, got {item!r}") from None
    if not 0 <= port <= 65535:
        raise ListenerError(f"{flag}: port must be 0-65535, got {item!r}")
    return Listener(name, name, host, port)


def check_advertised(listeners: list[Listener], advertised: list[Listener],
                     flag: str, listeners_flag: str = "--listeners") -> None:
    """Every advertised name must be one the broker listens on."""
    names = {listener.name for listener in listeners}
    for entry in advertised:
        if entry.name not in names:
            raise ListenerError(
                f"{flag}: {entry.name} is not among {listeners_flag} "
                f"({', '.join(sorted(names))})")


def advertised_addresses(listeners: list[Listener], advertised: list[Listener],
                         advertised_host: str, bound: Mapping[str, int],
                         ) -> dict[str, tuple[str, int]]:
    """What Metadata names for each listener: its ``--advertised-listeners`` entry, else
    ``--advertised-host`` (as before listeners existed), else the listener's own host
    (127.0.0.1 for every interface); the port is the one bound when none is given (0)."""
    given = {entry.name: entry for entry in advertised}
    out: dict[str, tuple[str, int]] = {}
    for listener in listeners:
        port = bound.get(listener.name, listener.port)
        host = advertised_host or (
            DEFAULT_ADVERTISED_HOST if listener.host in WILDCARD_HOSTS else listener.host)
        entry = given.get(listener.name)
        if entry is not None:
            host = entry.host or host
            port = entry.port or port
        out[listener.name] = (host, port)
    return out
