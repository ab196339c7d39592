"""Authentication and authorization: Kafka's ACL model (:mod:`.acls`), SCRAM credentials
(:mod:`.credentials`), the per-connection SASL exchange (:mod:`.sasl`), their durable
file (:mod:`.store`) and the broker's shared state (:mod:`.state`).

``acls``, ``credentials`` and ``sasl`` are pure (no I/O, no clock); ``store`` does
blocking file I/O and runs on a worker thread.
"""

from groupwire.broker.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Authorizer,
    ResourcePattern,
    binding_problem,
    filter_problem,
)
from groupwire.broker.security.credentials import (
    CredentialTable,
    ScramCredential,
    credential_from_password,
    credential_from_salted,
    password_matches,
    upsertion_problem,
)
from groupwire.broker.security.sasl import SaslServer, SaslStep
from groupwire.broker.security.state import SecurityState
from groupwire.broker.security.store import (
    SecurityStoreError,
    load_security,
    offline_upsert,
    save_security,
)

__all__ = [
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "Authorizer",
    "CredentialTable",
    "ResourcePattern",
    "SaslServer",
    "SaslStep",
    "ScramCredential",
    "SecurityState",
    "SecurityStoreError",
    "binding_problem",
    "credential_from_password",
    "credential_from_salted",
    "filter_problem",
    "load_security",
    "offline_upsert",
    "password_matches",
    "save_security",
    "upsertion_problem",
]
