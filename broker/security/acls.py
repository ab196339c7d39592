"""Kafka's ACL model and its authorizer's decision rules, as plain data and lookups.

A binding says that a principal (``User:alice`` or ``User:*``) connecting from a host
(an IP or ``*``) is allowed or denied an operation on the resources a pattern names: one
resource (LITERAL), every resource of its type (LITERAL ``*``), or every resource whose
name starts with the pattern's (PREFIXED). A DENY that applies wins over any ALLOW, and
without an ALLOW that applies the answer is no, as in Kafka's ``StandardAuthorizer``.

Pure: no I/O, no clock. The broker keeps one :class:`Authorizer` and asks it per request;
:attr:`Authorizer.version` lets a connection cache decisions until the ACLs change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, TypeVar

from groupwire.protocol.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

__all__ = [
    "WILDCARD_PRINCIPAL",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "Authorizer",
    "ResourcePattern",
    "binding_from_codes",
    "binding_problem",
    "filter_from_codes",
    "filter_problem",
]

USER_PREFIX: Final = "User:"
WILDCARD_PRINCIPAL: Final = "User:*"

_IMPLIES_DESCRIBE: Final = frozenset({AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER})
"""Kafka: whoever may read, write, delete or alter a resource may also describe it."""
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({AclOperation.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter: ANY codes and ``None`` match every value."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and \
                self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            if self.pattern_type != pattern.pattern_type:
                return False
        elif self.pattern_type not in (PatternType.ANY, PatternType.MATCH):
            return False
        if self.name is None:
            return True
        if self.pattern_type == PatternType.MATCH:
            # what applies to the resource named ``self.name``
            if pattern.pattern_type == PatternType.LITERAL:
                return pattern.name in (self.name, WILDCARD)
            if pattern.pattern_type == PatternType.PREFIXED:
                return self.name.startswith(pattern.name)
            return False
        return pattern.name == self.name

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission == AclPermission.ANY
                     or self.permission == entry.permission))


_E = TypeVar("_E", bound=IntEnum)


def _code(enum: type[_E], value: int) -> _E:
    """A wire code as its enum member; a code we do not know is UNKNOWN (0), as in Kafka."""
    try:
        return enum(value)
    except ValueError:
        return enum(0)


def binding_from_codes(resource_type: int, name: str, pattern_type: int, principal: str,
                       host: str, operation: int, permission: int) -> AclBinding:
    """A CreateAcls creation's fields as a binding; check it with :func:`binding_problem`."""
    return AclBinding(
        ResourcePattern(_code(ResourceType, resource_type), name,
                        _code(PatternType, pattern_type)),
        AccessControlEntry(principal, host, _code(AclOperation, operation),
                           _code(AclPermission, permission)))


def filter_from_codes(resource_type: int, name: str | None, pattern_type: int,
                      principal: str | None, host: str | None, operation: int,
                      permission: int) -> AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter's fields; check it with :func:`filter_problem`."""
    return AclBindingFilter(_code(ResourceType, resource_type), name,
                            _code(PatternType, pattern_type), principal, host,
                            _code(AclOperation, operation), _code(AclPermission, permission))


def binding_problem(binding: AclBinding) -> str | None:
    """Why ``binding`` cannot be created (answered as INVALID_REQUEST), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"resource type {pattern.resource_type.name} is not a resource a binding names"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {pattern.pattern_type.name} is a filter's; a binding is " \
               f"LITERAL or PREFIXED"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"operation {entry.operation.name} is a filter's, not a binding's"
    if entry.permission in (AclPermission.UNKNOWN, AclPermission.ANY):
        return f"permission {entry.permission.name} is a filter's; a binding ALLOWs or DENYs"
    if not pattern.name:
        return "the resource name is empty"
    if pattern.resource_type == ResourceType.CLUSTER and (
            pattern.name != CLUSTER_NAME or pattern.pattern_type != PatternType.LITERAL):
        return f"the only CLUSTER resource is the LITERAL {CLUSTER_NAME!r}"
    if not entry.principal.startswith(USER_PREFIX) or len(entry.principal) == len(USER_PREFIX):
        return f"principal {entry.principal!r} is not of the form User:<name> (or User:*)"
    if not entry.host:
        return "the host is empty (use '*' for every host)"
    return None


def filter_problem(f: AclBindingFilter) -> str | None:
    """Why ``f`` cannot be used to describe or delete (INVALID_REQUEST), or None."""
    if f.resource_type == ResourceType.UNKNOWN:
        return "unknown resource type"
    if f.pattern_type == PatternType.UNKNOWN:
        return "unknown pattern type"
    if f.operation == AclOperation.UNKNOWN:
        return "unknown operation"
    if f.permission == AclPermission.UNKNOWN:
        return "unknown permission type"
    return None


_Entries = dict[AccessControlEntry, None]
"""Insertion-ordered set of the entries on one pattern."""


class Authorizer:
    """Every binding, indexed by pattern so :meth:`authorize` costs a few dict lookups
    however many bindings there are: LITERAL names (``*`` included) in one dict, PREFIXED
    ones per resource type with the lengths in use, so a name is cut at those lengths."""

    def __init__(self, bindings: Iterable[AclBinding] = (),
                 super_users: frozenset[str] = frozenset()) -> None:
        self._super_users = frozenset(super_users)
        self._bindings: dict[AclBinding, None] = {}
        self._literal: dict[tuple[ResourceType, str], _Entries] = {}
        self._prefixed: dict[ResourceType, dict[str, _Entries]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self.version = 0
        """Bumped on every change, so a cached decision can tell it is stale."""
        for binding in bindings:
            self._insert(binding)

    # --- decisions ------------------------------------------------------------------

    def is_super_user(self, principal: str) -> bool:
        return principal in self._super_users

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` connecting from ``host`` (a bare IP) may do ``operation``
        on the resource: DENY wins, then an ALLOW of the operation, ALL, or an operation
        that implies it; nothing that applies means no."""
        if principal in self._super_users:
            return True
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL):
            return False  # a request is authorized for one concrete operation
        if operation == AclOperation.DESCRIBE:
            implied = _IMPLIES_DESCRIBE
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            implied = _IMPLIES_DESCRIBE_CONFIGS
        else:
            implied = frozenset()
        allowed = False
        for entries in self._applicable(resource_type, name):
            for entry in entries:
                if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
                    continue
                if entry.host != host and entry.host != WILDCARD:
                    continue
                op = entry.operation
                if entry.permission == AclPermission.DENY:
                    if op == operation or op == AclOperation.ALL:
                        return False
                elif op == operation or op == AclOperation.ALL or op in implied:
                    allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether some resource of ``resource_type`` allows ``operation`` (Kafka's
        ``authorizeByResourceType``, which an idempotent producer's InitProducerId asks of
        WRITE on topics): an ALLOW of the operation itself or ALL (nothing implies it here)
        whose pattern no DENY covers whole. A LITERAL ``*`` DENY covers every name; a
        PREFIXED DENY covers a name or prefix starting with it; a LITERAL DENY covers its
        own name. Super users, as always, may."""
        if principal in self._super_users:
            return True
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL):
            return False
        allowed: list[ResourcePattern] = []
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        for binding in self._bindings:
            pattern, entry = binding.pattern, binding.entry
            if pattern.resource_type != resource_type:
                continue
            if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
                continue
            if entry.host != host and entry.host != WILDCARD:
                continue
            if entry.operation != operation and entry.operation != AclOperation.ALL:
                continue
            if entry.permission == AclPermission.ALLOW:
                allowed.append(pattern)
            elif pattern.pattern_type == PatternType.PREFIXED:
                denied_prefixes.add(pattern.name)
            elif pattern.name == WILDCARD:
                return False  # every resource of the type is denied
            else:
                denied_literal.add(pattern.name)
        for pattern in allowed:
            if pattern.pattern_type == PatternType.LITERAL:
                if pattern.name == WILDCARD:
                    return True  # a name no DENY names is allowed
                if pattern.name in denied_literal:
                    continue
            if not any(pattern.name[:length] in denied_prefixes
                       for length in range(1, len(pattern.name) + 1)):
                return True
        return False

    def _applicable(self, resource_type: ResourceType, name: str) -> list[_Entries]:
        found = []
        literal = self._literal.get((resource_type, name))
        if literal:
            found.append(literal)
        if name != WILDCARD:
            wildcard = self._literal.get((resource_type, WILDCARD))
            if wildcard:
                found.append(wildcard)
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for length in self._prefix_lengths[resource_type]:
                if length <= len(name):
                    entries = prefixed.get(name[:length])
                    if entries:
                        found.append(entries)
        return found

    # --- the bindings ---------------------------------------------------------------

    def bindings(self) -> list[AclBinding]:
        """Every binding, in the order they were added."""
        return list(self._bindings)

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._bindings if f.matches(b)]

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Add ``bindings``; one already present is not stored twice."""
        changed = False
        for binding in bindings:
            if binding not in self._bindings:
                self._insert(binding)
                changed = True
        if changed:
            self.version += 1

    def remove(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; per filter, what it removed (a binding two
        filters match is reported under the first)."""
        removed: list[list[AclBinding]] = []
        for f in filters:
            matched = [b for b in self._bindings if f.matches(b)]
            for binding in matched:
                self._delete(binding)
            removed.append(matched)
        if any(removed):
            self.version += 1
        return removed

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        """Exactly ``bindings`` from now on (a snapshot loaded or received)."""
        self._bindings.clear()
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        for binding in bindings:
            self._insert(binding)
        self.version += 1

    def __len__(self) -> int:
        return len(self._bindings)

    def _insert(self, binding: AclBinding) -> None:
        if binding in self._bindings:
            return
        self._bindings[binding] = None
        pattern = binding.pattern
        if pattern.pattern_type == PatternType.PREFIXED:
            by_name = self._prefixed.setdefault(pattern.resource_type, {})
            entries = by_name.get(pattern.name)
            if entries is None:
                entries = by_name[pattern.name] = {}
                lengths = self._prefix_lengths.setdefault(pattern.resource_type, Counter())
                lengths[len(pattern.name)] += 1
            entries[binding.entry] = None
        else:
            key = (pattern.resource_type, pattern.name)
            self._literal.setdefault(key, {})[binding.entry] = None

    def _delete(self, binding: AclBinding) -> None:
        del self._bindings[binding]
        pattern = binding.pattern
        if pattern.pattern_type == PatternType.PREFIXED:
            by_name = self._prefixed[pattern.resource_type]
            entries = by_name[pattern.name]
            del entries[binding.entry]
            if not entries:
                del by_name[pattern.name]
                lengths = self._prefix_lengths[pattern.resource_type]
                lengths[len(pattern.name)] -= 1
                if lengths[len(pattern.name)] == 0:
                    del lengths[len(pattern.name)]
                if not by_name:
                    del self._prefixed[pattern.resource_type]
                    del self._prefix_lengths[pattern.resource_type]
        else:
            key = (pattern.resource_type, pattern.name)
            entries = self._literal[key]
            del entries[binding.entry]
            if not entries:
                del self._literal[key]
