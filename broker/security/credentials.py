"""SCRAM credentials (RFC 5802): what the broker keeps of a password, and the one table of
users that SCRAM and PLAIN both check against.

A credential is the salt, the iteration count, and two keys derived from the salted
password; the password itself is never kept, and cannot be recovered from them. The
salted password is PBKDF2-HMAC of the password's plain UTF-8 bytes: no SASLprep, as
Kafka's own ``ScramFormatter`` does, so a credential made by a Kafka tool is usable here.
(scramp's client does apply SASLprep; the two agree on every password SASLprep leaves
as it is, which is every ASCII password.)

Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, scram_salted_password

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "MIN_SALT_BYTES",
    "CredentialTable",
    "ScramCredential",
    "credential_from_password",
    "credential_from_salted",
    "digest_size",
    "password_matches",
    "salted_password",
    "upsertion_problem",
]

DEFAULT_ITERATIONS: Final = 4096
MIN_SALT_BYTES: Final = 12
"""scramp refuses a shorter salt at authentication, so one is refused when stored."""
SALT_BYTES: Final = 32

_HASH: Final = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}


def _hash_name(mechanism: ScramMechanism) -> str:
    try:
        return _HASH[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None


def digest_size(mechanism: ScramMechanism) -> int:
    """The length of the mechanism's salted password and keys: 32 or 64 bytes."""
    return hashlib.new(_hash_name(mechanism)).digest_size


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # the keys are as good as a password to an offline attack
        return (f"ScramCredential({self.mechanism.sasl_name}, "
                f"iterations={self.iterations})")


salted_password = scram_salted_password
"""RFC 5802's ``Hi(Normalize(password), salt, i)``, the SDK's KIP-554 upsertion's too."""


def credential_from_salted(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials' upsertion (KIP-554) turns into."""
    name = _hash_name(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(mechanism, bytes(salt), stored_key, server_key, iterations)


def credential_from_password(mechanism: ScramMechanism, password: str,
                             iterations: int = DEFAULT_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    """A new credential, with a random 32-byte salt unless one is given."""
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    return credential_from_salted(mechanism, salt,
                                  salted_password(mechanism, password, salt, iterations),
                                  iterations)


def password_matches(cred: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``cred`` was made from (PLAIN's check): one PBKDF2
    at the credential's iteration count, compared in constant time."""
    derived = credential_from_salted(
        cred.mechanism, cred.salt,
        salted_password(cred.mechanism, password, cred.salt, cred.iterations),
        cred.iterations)
    return hmac.compare_digest(derived.stored_key, cred.stored_key)


def upsertion_problem(name: str, mechanism: ScramMechanism | int, iterations: int,
                      salt: bytes, salted: bytes) -> tuple[ErrorCode, str] | None:
    """Why an AlterUserScramCredentials upsertion is refused (error and message, as
    Kafka answers), or None."""
    if mechanism not in _HASH:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, \
            f"unknown SCRAM mechanism code {int(mechanism)}"
    mech = ScramMechanism(mechanism)
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty"
    if iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, \
            f"iterations {iterations} is less than the minimum {MIN_ITERATIONS} " \
            f"for {mech.sasl_name}"
    if iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, \
            f"iterations {iterations} is more than the maximum {MAX_ITERATIONS} " \
            f"for {mech.sasl_name}"
    if not salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "the salt is empty"
    if len(salt) < MIN_SALT_BYTES:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, \
            f"the salt is {len(salt)} bytes; at least {MIN_SALT_BYTES} are needed"
    if len(salted) != digest_size(mech):
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, \
            f"the salted password is {len(salted)} bytes; {mech.sasl_name} makes " \
            f"{digest_size(mech)}"
    return None


class CredentialTable:
    """Each user's credentials, at most one per mechanism."""

    def __init__(self, items: Iterable[tuple[str, ScramCredential]] = ()) -> None:
        self._users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        self.version = 0
        """Bumped on every change."""
        for user, cred in items:
            self._users.setdefault(user, {})[cred.mechanism] = cred

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        creds = self._users.get(user)
        return None if creds is None else creds.get(mechanism)

    def any_of(self, user: str) -> ScramCredential | None:
        """The credential PLAIN checks a password against: SCRAM-SHA-256's first."""
        creds = self._users.get(user)
        if not creds:
            return None
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            if mechanism in creds:
                return creds[mechanism]
        return None

    def upsert(self, user: str, cred: ScramCredential) -> None:
        self._users.setdefault(user, {})[cred.mechanism] = cred
        self.version += 1

    def delete(self, user: str, mechanism: ScramMechanism) -> bool:
        """Whether there was such a credential (Kafka answers RESOURCE_NOT_FOUND if not)."""
        creds = self._users.get(user)
        if creds is None or mechanism not in creds:
            return False
        del creds[mechanism]
        if not creds:
            del self._users[user]
        self.version += 1
        return True

    def users(self) -> list[str]:
        return sorted(self._users)

    def mechanisms_of(self, user: str) -> list[ScramCredential]:
        """``user``'s credentials, SCRAM-SHA-256's first; empty for an unknown user."""
        creds = self._users.get(user, {})
        return [creds[m] for m in sorted(creds)]

    def items(self) -> Iterator[tuple[str, ScramCredential]]:
        """Every (user, credential), users in name order."""
        for user in sorted(self._users):
            for cred in self.mechanisms_of(user):
                yield user, cred

    def replace_all(self, items: CredentialTable | Iterable[tuple[str, ScramCredential]],
                    ) -> None:
        """Exactly ``items`` from now on (a snapshot loaded or received)."""
        entries = list(items.items() if isinstance(items, CredentialTable) else items)
        users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        for user, cred in entries:
            users.setdefault(user, {})[cred.mechanism] = cred
        self._users = users  # one assignment: a PLAIN check on a worker thread sees either
        self.version += 1

    def __len__(self) -> int:
        """How many users have a credential."""
        return len(self._users)

    def __contains__(self, user: object) -> bool:
        return user in self._users
