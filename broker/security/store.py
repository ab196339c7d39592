"""A single broker's ACLs and SCRAM credentials, durable in ``<data_dir>/security.json``.

::

    {"version": 1,
     "acls": [{"resource_type": "TOPIC", "name": "orders", "pattern_type": "LITERAL",
               "principal": "User:alice", "host": "*", "operation": "READ",
               "permission": "ALLOW"}, ...],
     "credentials": {"alice": [{"mechanism": "SCRAM-SHA-256", "salt": "<b64>",
                                "stored_key": "<b64>", "server_key": "<b64>",
                                "iterations": 4096}, ...]}}

Never a password. The whole file is rewritten on every change (write a temporary file,
fsync, rename, fsync the directory), so a crash leaves the old or the new file whole,
and a change is durable once :func:`save_security` returns. The file is readable by its
owner only: the keys are what an offline guessing attack needs.

Blocking file I/O: the broker calls these on a worker thread, one save at a time and in
the order of the changes (a later snapshot must not be overtaken by an earlier one).
The topic store never touches the file: it removes stray directories under ``logs/``
only.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, TypeVar

from groupwire.broker.security.acls import (
    AccessControlEntry,
    AclBinding,
    ResourcePattern,
    binding_problem,
)
from groupwire.broker.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    CredentialTable,
    ScramCredential,
    digest_size,
)
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.topic_store import LOCK_FILE, _lock
from groupwire.protocol.acls import (
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)

__all__ = [
    "SECURITY_FILE",
    "SecurityStoreError",
    "decode_document",
    "encode_document",
    "load_security",
    "offline_upsert",
    "save_security",
]

SECURITY_FILE: Final = "security.json"
FORMAT_VERSION: Final = 1


class SecurityStoreError(Exception):
    """The security file cannot be read or written; the message is one line naming it."""


def load_security(data_dir: Path) -> tuple[list[AclBinding], CredentialTable]:
    """What the file holds; nothing if there is no file (a leftover ``.tmp`` is ignored)."""
    path = Path(data_dir) / SECURITY_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], CredentialTable()
    except OSError as exc:
        raise SecurityStoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return decode_document(json.loads(raw))
    except (ValueError, TypeError, KeyError, binascii.Error) as exc:
        raise SecurityStoreError(f"{path} is corrupt: {_one_line(exc)}") from exc


def save_security(data_dir: Path, bindings: Iterable[AclBinding],
                  credentials: CredentialTable) -> None:
    """Replace the file with these ACLs and credentials; durable once this returns."""
    path = Path(data_dir) / SECURITY_FILE
    data = json.dumps(encode_document(bindings, credentials), indent=1, sort_keys=True).encode()
    try:
        _write_atomic(path, data + b"\n")
    except OSError as exc:
        raise SecurityStoreError(f"cannot write {path}: {exc.strerror or exc}") from exc


def offline_upsert(data_dir: Path, user: str, creds: list[ScramCredential]) -> None:
    """Store ``user``'s credentials in the data dir of a broker that is not running
    (``groupwire users add --data-dir``), creating the directory if need be."""
    data_dir = Path(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SecurityStoreError(f"cannot create {data_dir}: {exc.strerror or exc}") from exc
    try:
        fd = _lock(data_dir / LOCK_FILE)  # the broker's own lock: one writer at a time
    except StorageError as exc:
        if isinstance(exc.__cause__, BlockingIOError):
            raise SecurityStoreError(
                f"a broker is running on {data_dir} ({exc.message}); add the user through "
                f"it (--bootstrap) or stop it first") from exc
        raise SecurityStoreError(exc.message) from exc
    try:
        bindings, table = load_security(data_dir)
        for cred in creds:
            table.upsert(user, cred)
        save_security(data_dir, bindings, table)
    finally:
        os.close(fd)


# --- the format ---------------------------------------------------------------------


def encode_document(bindings: Iterable[AclBinding], credentials: CredentialTable,
                    ) -> dict[str, Any]:
    """The JSON form of ACLs and credentials (``security.json``; cluster_store reuses
    its parts for etcd values)."""
    acls = [{"resource_type": b.pattern.resource_type.name, "name": b.pattern.name,
             "pattern_type": b.pattern.pattern_type.name, "principal": b.entry.principal,
             "host": b.entry.host, "operation": b.entry.operation.name,
             "permission": b.entry.permission.name} for b in bindings]
    users: dict[str, list[dict[str, Any]]] = {}
    for user, cred in credentials.items():
        users.setdefault(user, []).append({
            "mechanism": cred.mechanism.sasl_name, "salt": _b64(cred.salt),
            "stored_key": _b64(cred.stored_key), "server_key": _b64(cred.server_key),
            "iterations": cred.iterations})
    return {"version": FORMAT_VERSION, "acls": acls, "credentials": users}


def decode_document(doc: Any) -> tuple[list[AclBinding], CredentialTable]:
    """:func:`encode_document`'s inverse; ValueError naming what is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"format version {doc.get('version')!r}, expected {FORMAT_VERSION}")
    bindings = []
    for i, acl in enumerate(_typed(doc["acls"], list, "acls")):
        a = _typed(acl, dict, f"acls[{i}]")
        binding = AclBinding(
            ResourcePattern(_member(ResourceType, a, "resource_type"), _str(a, "name"),
                            _member(PatternType, a, "pattern_type")),
            AccessControlEntry(_str(a, "principal"), _str(a, "host"),
                               _member(AclOperation, a, "operation"),
                               _member(AclPermission, a, "permission")))
        problem = binding_problem(binding)
        if problem:
            raise ValueError(f"acls[{i}]: {problem}")
        bindings.append(binding)
    table = CredentialTable()
    for user, creds in _typed(doc["credentials"], dict, "credentials").items():
        for c in _typed(creds, list, f"credentials of {user!r}"):
            c = _typed(c, dict, f"a credential of {user!r}")
            mechanism = ScramMechanism.from_sasl_name(_str(c, "mechanism"))
            if mechanism is ScramMechanism.UNKNOWN:
                raise ValueError(f"{user!r}: unknown mechanism {c['mechanism']!r}")
            iterations = _typed(c["iterations"], int, f"{user!r}'s iterations")
            if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                raise ValueError(f"{user!r}: iterations {iterations} out of bounds")
            cred = ScramCredential(mechanism, _unb64(c, "salt"), _unb64(c, "stored_key"),
                                   _unb64(c, "server_key"), iterations)
            size = digest_size(mechanism)
            if not cred.salt or len(cred.stored_key) != size or len(cred.server_key) != size:
                raise ValueError(f"{user!r}: a {mechanism.sasl_name} key or salt of the "
                                 f"wrong length")
            table.upsert(user, cred)
    return bindings, CredentialTable(table.items())


def _typed(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{what} is not a JSON {kind.__name__}")
    return value


def _str(obj: dict[str, Any], key: str) -> str:
    value: str = _typed(obj[key], str, repr(key))
    return value


_M = TypeVar("_M", bound=enum.Enum)


def _member(kind: type[_M], obj: dict[str, Any], key: str) -> _M:
    name = _str(obj, key)
    try:
        return kind[name]
    except KeyError:
        raise ValueError(f"{key} {name!r} is not a {kind.__name__}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(obj: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(_str(obj, key), validate=True)


def _one_line(exc: Exception) -> str:
    text = str(exc) if not isinstance(exc, KeyError) else f"missing {exc}"
    return " ".join(text.split()) or type(exc).__name__


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a leftover .tmp keeps its old mode through O_CREAT
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
