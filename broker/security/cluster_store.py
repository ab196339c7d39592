"""A cluster's ACLs and SCRAM credentials, kept in its metadata so every broker enforces
the same ones.

Under the cluster's prefix (docs/design/cluster.md, "What etcd holds")::

    security/acls/<id>     one binding; <id> a hash of it, the value its JSON
    security/users/<name>  that user's credentials: per mechanism the salt, stored key,
                           server key and iterations (never the password)

The values use ``security.json``'s encodings (:mod:`.store`), so they read the same.

Each broker reads these keys before it listens, then follows them with a watch and
applies every change to its authorizer and credential table (``replace_all``): a change
made through any broker is enforced by all of them as soon as their watch delivers it.

A change (:meth:`ClusterSecurity.persist`) is written as what it changes, not as a whole
new state: the bindings added and removed, the (user, mechanism) credentials set or
deleted. One txn writes the keys that differ from what etcd holds, each compared with
the mod revision it was read at; if another broker wrote one of them meanwhile, the keys
are read again and the same change applied to what they now hold. Two brokers changing
ACLs, or one user's credentials, at the same time thus keep both changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from groupwire.broker.cluster.keys import acl_key, security_prefix, user_key
from groupwire.broker.cluster.txn import (
    MAX_TXN_OPS,
    Compare,
    Delete,
    Operation,
    Put,
    Txn,
    WatchEvent,
)
from groupwire.broker.etcd.store import (
    EtcdError,
    EtcdUnavailableError,
    MetadataStore,
    WatchCompactedError,
)
from groupwire.broker.logs import get_logger
from groupwire.broker.security.acls import AclBinding
from groupwire.broker.security.credentials import CredentialTable, ScramCredential
from groupwire.broker.security.state import SecurityState

# security.json's encodings of a binding and of a user's credentials, with its checks.
from groupwire.broker.security.store import FORMAT_VERSION, SECURITY_FILE, SecurityStoreError
from groupwire.broker.security.store import decode_document as _decode_document
from groupwire.broker.security.store import encode_document as _encode_document
from groupwire.broker.supervisor import Service, Supervisor
from groupwire.protocol.acls import ScramMechanism

__all__ = ["ClusterSecurity", "binding_id", "follow_cluster_security", "upsert_user"]

log = get_logger("groupwire.security")

TRIES: Final = 5
"""Writes of one change that may meet another broker's before it gives up (raises)."""
RETRY_S: Final = 0.2
"""Pause before following again after the watch failed, so a down etcd is not hammered."""

Creds = dict[ScramMechanism, ScramCredential]


# --- the values -----------------------------------------------------------------------


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def encode_binding(binding: AclBinding) -> bytes:
    return _dump(_encode_document([binding], CredentialTable())["acls"][0])


def binding_id(binding: AclBinding) -> str:
    """The binding's key: the same binding added through two brokers is one key."""
    return hashlib.sha256(encode_binding(binding)).hexdigest()[:32]


def encode_user(user: str, creds: Iterable[ScramCredential]) -> bytes:
    table = CredentialTable((user, c) for c in creds)
    return _dump({"credentials": _encode_document([], table)["credentials"].get(user, [])})


def decode_binding(key: str, value: bytes) -> AclBinding:
    try:
        bindings, _ = _decode_document(
            {"version": FORMAT_VERSION, "acls": [json.loads(value)], "credentials": {}})
    except (ValueError, TypeError, KeyError) as exc:
        raise SecurityStoreError(f"etcd key {key!r}: not an ACL binding: {exc}") from exc
    return bindings[0]


def decode_user(key: str, user: str, value: bytes) -> Creds:
    try:
        obj = json.loads(value)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        _, table = _decode_document({"version": FORMAT_VERSION, "acls": [],
                                     "credentials": {user: obj["credentials"]}})
    except (ValueError, TypeError, KeyError) as exc:
        raise SecurityStoreError(f"etcd key {key!r}: not SCRAM credentials: {exc}") from exc
    return {c.mechanism: c for c in table.mechanisms_of(user)}


# --- the broker's copy ------------------------------------------------------------------


@dataclass(slots=True)
class _Change:
    """What one ACL or credential request changes, to be applied to whatever etcd holds."""

    add: list[AclBinding] = field(default_factory=list)
    remove: set[AclBinding] = field(default_factory=set)
    users: dict[str, dict[ScramMechanism, ScramCredential | None]] = field(
        default_factory=dict)
    """Per user, per mechanism: the credential it now has; None: deleted."""


class ClusterSecurity:
    """The security keys as this broker last saw them, each with its mod revision, and
    the watch that keeps them (and the broker's :class:`SecurityState`) current.

    The watch is a supervised service (``security-watch``): a crash is logged, counted
    and the service started again, reading every key afresh first. A stalled stream is
    the store's to notice (the etcd client checks a silent watch and replaces it), so a
    revoked ACL reaches this broker within about one watch timeout."""

    def __init__(self, store: MetadataStore, cluster: str, state: SecurityState, *,
                 supervisor: Supervisor | None = None) -> None:
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._service: Service | None = None
        self._store = store
        self._cluster = cluster
        self._prefix = security_prefix(cluster)
        self._state = state
        self._acls: dict[str, tuple[int, AclBinding | None]] = {}
        """key → (mod revision, binding); None: a value that could not be read."""
        self._users: dict[str, tuple[int, str, Creds]] = {}
        """key → (mod revision, user, credentials)."""
        self._deleted: dict[str, int] = {}
        """key → the revision that deleted it, so an older put arriving later (a watch
        behind this broker's own write) does not bring it back."""
        self._seen = 0
        """The revision up to which a read or the watch has brought everything."""
        self._watched = 0
        """Where the current watch stream is: no event at or below it can arrive again,
        so the deletions up to it need not be remembered."""
        self._dirty = False
        self._changed = asyncio.Event()
        self._loaded = False
        """Whether the last read is what the service starts from (``load`` just ran)."""

    # --- life cycle ---------------------------------------------------------------------

    async def load(self) -> None:
        """The first read, before the broker listens. Raises EtcdError if etcd cannot be
        read, SecurityStoreError naming a key whose value is not what it should be (fix
        or delete it with etcdctl)."""
        await self._read(strict=True)
        self._loaded = True

    def start(self) -> None:
        self._service = self._supervisor.spawn(f"security-watch-{self._cluster}", self._run,
                                               kind="security-watch")

    @property
    def service(self) -> Service | None:
        return self._service

    async def close(self) -> None:
        if self._service is not None:
            await self._service.stop()
            self._service = None

    @property
    def revision(self) -> int:
        return self._seen

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate`` holds, looked at after every read, watch response and
        write (the caller bounds the wait)."""
        while not predicate():
            await self._changed.wait()

    # --- following etcd -----------------------------------------------------------------

    async def _run(self) -> None:
        fresh, self._loaded = self._loaded, False  # after a crash: read everything again
        while True:
            try:
                if not fresh:
                    await self._read(strict=False)
                fresh = False
                self._watched = self._seen  # the new stream starts after it
                self._prune()
                stream = self._store.watch(self._prefix, self._seen + 1)
                try:
                    async for events in stream:
                        self._on_events(events)
                finally:
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
                return  # the store was closed
            except WatchCompactedError as exc:
                log.info("security_watch_compacted", error=str(exc))
                continue
            except EtcdError as exc:
                log.warning("security_watch_lost", error=str(exc))
            await asyncio.sleep(RETRY_S)

    async def _read(self, *, strict: bool) -> None:
        """Everything under the prefix: what the read lacks and is not newer than it was
        deleted; what it holds is put (unless this broker already has a newer one)."""
        kvs, revision = await self._store.get_prefix(self._prefix)
        present = {kv.key for kv in kvs}
        for key in [*self._acls, *self._users]:
            if key not in present and self._known(key) <= revision:
                self._forget(key, revision)
        for kv in kvs:
            self._put(kv.key, kv.mod_revision, kv.value, strict=strict)
        self._seen = max(self._seen, revision)
        self._apply()
        self._wake()

    def _on_events(self, events: list[WatchEvent]) -> None:
        if not events:
            return  # the store's word that the watch is current: nothing to apply
        for event in events:
            if event.kind == "delete":
                self._forget(event.kv.key, event.kv.mod_revision)
            else:
                self._put(event.kv.key, event.kv.mod_revision, event.kv.value, strict=False)
        top = max(e.kv.mod_revision for e in events)
        self._seen = max(self._seen, top)
        self._watched = max(self._watched, top)
        self._prune()
        self._apply()
        self._wake()

    def _prune(self) -> None:
        self._deleted = {k: r for k, r in self._deleted.items() if r > self._watched}

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _known(self, key: str) -> int:
        if key in self._acls:
            return self._acls[key][0]
        if key in self._users:
            return self._users[key][0]
        return self._deleted.get(key, 0)

    def _put(self, key: str, revision: int, value: bytes, *, strict: bool) -> None:
        if revision <= self._known(key):
            return
        kind, _, name = key[len(self._prefix):].partition("/")
        if not name or kind not in ("acls", "users"):
            return  # a newer broker's kind of key
        try:
            if kind == "acls":
                binding: AclBinding | None = decode_binding(key, value)
            else:
                creds = decode_user(key, name, value)
        except SecurityStoreError as exc:
            if strict:
                raise
            log.error("security_value_ignored", key=key, error=str(exc))
            binding, creds = None, {}  # the key's revision is kept, for the next compare
        self._deleted.pop(key, None)
        if kind == "acls":
            self._acls[key] = (revision, binding)
        else:
            self._users[key] = (revision, name, creds)
        self._dirty = True

    def _forget(self, key: str, revision: int) -> None:
        if revision <= self._known(key):
            return
        if self._acls.pop(key, None) is not None or self._users.pop(key, None) is not None:
            self._dirty = True
        self._deleted[key] = revision

    def _apply(self) -> None:
        """The authorizer and the credential table become exactly the keys' contents."""
        if not self._dirty:
            return
        self._dirty = False
        self._state.authorizer.replace_all(self._bindings())
        self._state.credentials.replace_all(
            (user, cred) for _, user, creds in (self._users[k] for k in sorted(self._users))
            for cred in (creds[m] for m in sorted(creds)))

    def _bindings(self) -> list[AclBinding]:
        return [b for _, b in (self._acls[k] for k in sorted(self._acls)) if b is not None]

    # --- writing --------------------------------------------------------------------------

    async def persist(self, bindings: list[AclBinding], credentials: CredentialTable) -> None:
        """Store the change from the current state to this one (``SecurityApis`` built it
        from the state this broker applied, which is these keys'); applied here too, so
        the caller leaves the state alone. Raises EtcdError if etcd cannot take it,
        SecurityStoreError if other brokers' writes kept getting in the way."""
        change = self._change_to(bindings, credentials)
        why = "other changes to the same ACLs or users kept conflicting"
        for attempt in range(TRIES):
            if attempt:
                await self._read(strict=False)
            batches = self._writes(change)
            try:
                for batch in batches:
                    txn = Txn(tuple(c for c, _ in batch), tuple(op for _, op in batch))
                    result = await self._store.txn(txn)
                    if not result.succeeded:
                        why = "other changes to the same ACLs or users kept conflicting"
                        break  # someone wrote one of these keys: read again
                    for _, op in batch:
                        if isinstance(op, Put):
                            self._put(op.key, result.revision, op.value, strict=True)
                        else:
                            self._forget(op.key, result.revision)
                else:
                    self._apply()
                    self._wake()
                    return
            except EtcdUnavailableError as exc:
                # The txn may or may not have been applied: the next read tells, and the
                # change is the same whichever it was.
                log.warning("security_write_unknown", error=str(exc))
                why = str(exc)
            self._apply()
        raise SecurityStoreError(f"etcd: {why} ({TRIES} tries)")

    def _change_to(self, bindings: list[AclBinding], credentials: CredentialTable,
                   ) -> _Change:
        have = set(self._bindings())
        want = dict.fromkeys(bindings)
        change = _Change(add=[b for b in want if b not in have],
                         remove={b for b in have if b not in want})
        had: dict[str, Creds] = {user: creds for _, user, creds in self._users.values()}
        wanted: dict[str, Creds] = {}
        for user, cred in credentials.items():
            wanted.setdefault(user, {})[cred.mechanism] = cred
        for user in had.keys() | wanted.keys():
            before, after = had.get(user, {}), wanted.get(user, {})
            delta = {m: after.get(m) for m in before.keys() | after.keys()
                     if before.get(m) != after.get(m)}
            if delta:
                change.users[user] = delta
        return change

    def _writes(self, change: _Change) -> list[list[tuple[Compare, Operation]]]:
        """The change applied to the keys as they are now: each key written only if it
        differs, guarded by its mod revision; at most etcd's txn size per batch."""
        writes: list[tuple[Compare, Operation]] = []
        present = set(self._bindings())
        for new in change.add:
            if new not in present:
                key = acl_key(self._cluster, binding_id(new))
                writes.append((self._guard(key), Put(key, encode_binding(new))))
        for key, (_, held) in self._acls.items():
            if held is not None and held in change.remove:
                writes.append((self._guard(key), Delete(key)))
        for user, delta in change.users.items():
            key = user_key(self._cluster, user)
            entry = self._users.get(key)
            before = {} if entry is None else entry[2]
            after = dict(before)
            for mechanism, cred in delta.items():
                if cred is None:
                    after.pop(mechanism, None)
                else:
                    after[mechanism] = cred
            if after == before:
                continue
            op: Operation = Put(key, encode_user(user, after.values())) if after \
                else Delete(key)
            writes.append((self._guard(key), op))
        return [writes[i:i + MAX_TXN_OPS] for i in range(0, len(writes), MAX_TXN_OPS)]

    def _guard(self, key: str) -> Compare:
        """The key is as this broker last saw it (absent: mod revision 0)."""
        entry_rev = self._acls[key][0] if key in self._acls else \
            self._users[key][0] if key in self._users else 0
        return Compare(key, "mod", "==", entry_rev)


async def follow_cluster_security(store: MetadataStore, cluster: str, state: SecurityState,
                                  *, data_dir: Path, where: str, timeout_s: float,
                                  supervisor: Supervisor | None = None,
                                  ) -> ClusterSecurity:
    """A cluster broker's start: read the keys into ``state``, then follow them. Raises
    SecurityStoreError (one line for the operator) if etcd does not answer within
    ``timeout_s`` or a value is unreadable. ``where``: etcd's endpoints, for the message."""
    if (Path(data_dir) / SECURITY_FILE).exists():
        log.warning("security_file_ignored", path=str(Path(data_dir) / SECURITY_FILE),
                    reason="cluster mode: ACLs and users are the cluster's, in etcd")
    security = ClusterSecurity(store, cluster, state, supervisor=supervisor)
    try:
        async with asyncio.timeout(timeout_s):
            await security.load()
    except TimeoutError:
        raise SecurityStoreError(
            f"etcd at {where} did not answer within {timeout_s:.0f} s") from None
    except EtcdError as exc:
        raise SecurityStoreError(f"etcd at {where}: {exc}") from None
    security.start()
    return security


# --- offline ------------------------------------------------------------------------------


async def upsert_user(store: MetadataStore, cluster: str, user: str,
                      creds: list[ScramCredential]) -> None:
    """Add or replace ``user``'s credentials (per mechanism; the others stay) straight in
    the cluster's metadata: ``groupwire users add --etcd-endpoints``, for the first super
    user before any broker runs (a running broker's watch picks it up all the same)."""
    key = user_key(cluster, user)
    for _ in range(TRIES):
        kv = await store.get(key)
        current = {} if kv is None else decode_user(key, user, kv.value)
        current.update({c.mechanism: c for c in creds})
        guard = Compare(key, "mod", "==", 0 if kv is None else kv.mod_revision)
        result = await store.txn(Txn((guard,), (Put(key, encode_user(user, current.values())),)))
        if result.succeeded:
            return
    raise SecurityStoreError(f"etcd key {key!r} kept changing while it was written "
                             f"({TRIES} tries)")
