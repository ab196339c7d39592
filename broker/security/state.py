"""The broker's security state: the ACLs, the users' credentials and the SASL mechanisms
enabled, shared by every connection (each gets its own :class:`SaslServer`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from groupwire.broker.security.acls import AclBinding, Authorizer
from groupwire.broker.security.credentials import CredentialTable
from groupwire.broker.security.sasl import SaslServer

__all__ = ["SecurityState"]


class SecurityState:
    def __init__(self, bindings: Iterable[AclBinding], credentials: CredentialTable,
                 super_users: Iterable[str], enabled_mechanisms: Sequence[str]) -> None:
        self.authorizer = Authorizer(bindings, frozenset(super_users))
        self.credentials = credentials
        self.enabled_mechanisms: tuple[str, ...] = tuple(enabled_mechanisms)
        SaslServer(self.enabled_mechanisms, credentials)  # refuse an unknown one now

    def sasl_server(self) -> SaslServer:
        """A new exchange, for one connection."""
        return SaslServer(self.enabled_mechanisms, self.credentials)
