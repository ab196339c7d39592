"""Kafka's ACL model as the SDK's values: who (a principal from a host) may or may not do
what (an operation) on which resources (a literal name or a prefix).

An :class:`AclBinding` is one rule, as ``Admin.create_acls`` takes it and
``Admin.describe_acls`` returns it; an :class:`AclBindingFilter` selects rules to list
or delete. Both are frozen and ordered (sorting bindings groups them by resource), and
their constructors refuse a value the broker would refuse, so a typo fails where it is
made. Enum values may be given as names in any case (``"read"``, ``"Read"``,
``"cluster-action"``), as Kafka's tools accept them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from groupwire.protocol.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramMechanism,
)
from groupwire.protocol.errors import RemoteProtocolError
from groupwire.protocol.messages import (
    AclCreation,
    DeleteAclsFilter,
    DeleteAclsMatchingAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "ScramMechanism",
    "parse_operation",
    "parse_pattern_type",
    "parse_permission",
    "parse_resource_type",
    "parse_scram_mechanism",
]

E = TypeVar("E", bound=enum.IntEnum)

_CONCRETE_TYPES: Final = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                          ResourceType.TRANSACTIONAL_ID)
_CONCRETE_PATTERNS: Final = (PatternType.LITERAL, PatternType.PREFIXED)
_CONCRETE_PERMISSIONS: Final = (AclPermission.ALLOW, AclPermission.DENY)


def _key(text: str) -> str:
    return text.strip().replace("-", "").replace("_", "").upper()


def _parse(kind: type[E], value: E | str | int, what: str, allowed: Iterable[E]) -> E:
    """``value`` as a member of ``kind`` among ``allowed``: the member itself, its code,
    or its name in any case, with or without ``-``/``_`` (``ClusterAction``)."""
    choices = list(allowed)
    found: E | None = None
    if isinstance(value, str):
        wanted = _key(value)
        found = next((m for m in choices if _key(m.name) == wanted), None)
    else:
        found = next((m for m in choices if m == value), None)
    if found is None:
        names = ", ".join(m.name for m in choices)
        raise ValueError(f"{what} must be one of {names}, not {value!r}")
    return found


def _usable(kind: type[E]) -> list[E]:
    return [m for m in kind if m.name != "UNKNOWN"]


def parse_resource_type(value: ResourceType | str | int, *, concrete: bool = False,
                        ) -> ResourceType:
    """``"topic"`` → TOPIC, ``"transactional-id"`` → TRANSACTIONAL_ID; ``concrete`` leaves
    out ANY (a binding names one type)."""
    allowed = _CONCRETE_TYPES if concrete else _usable(ResourceType)
    return _parse(ResourceType, value, "resource type", allowed)


def parse_pattern_type(value: PatternType | str | int, *, concrete: bool = False,
                       ) -> PatternType:
    """``"prefixed"`` → PREFIXED; ``concrete`` allows only LITERAL and PREFIXED."""
    allowed = _CONCRETE_PATTERNS if concrete else _usable(PatternType)
    return _parse(PatternType, value, "pattern type", allowed)


def parse_operation(value: AclOperation | str | int, *, concrete: bool = False,
                    ) -> AclOperation:
    """``"read"`` → READ, ``"describe-configs"`` → DESCRIBE_CONFIGS; ``concrete``
    leaves out ANY (ALL stays: it is a real grant)."""
    allowed = [m for m in _usable(AclOperation) if not (concrete and m is AclOperation.ANY)]
    return _parse(AclOperation, value, "operation", allowed)


def parse_permission(value: AclPermission | str | int, *, concrete: bool = False,
                     ) -> AclPermission:
    """``"allow"`` → ALLOW; ``concrete`` leaves out ANY."""
    allowed = _CONCRETE_PERMISSIONS if concrete else _usable(AclPermission)
    return _parse(AclPermission, value, "permission", allowed)


def parse_scram_mechanism(value: ScramMechanism | str | int) -> ScramMechanism:
    """``"SCRAM-SHA-512"`` (or ``"scram_sha_512"``, or 2) → SCRAM_SHA_512."""
    return _parse(ScramMechanism, value, "SCRAM mechanism", _usable(ScramMechanism))


def check_principal(principal: str) -> str:
    """``TYPE:NAME`` (``User:alice``, ``User:*``), as Kafka writes principals."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"principal must be TYPE:NAME, e.g. User:alice, not {principal!r}")
    return principal


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """The resources a binding applies to: the one named (LITERAL; ``*`` is every
    resource of the type) or every one whose name starts with ``name`` (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type",
                           parse_resource_type(self.resource_type, concrete=True))
        object.__setattr__(self, "pattern_type",
                           parse_pattern_type(self.pattern_type, concrete=True))
        if not self.name:
            raise ValueError(f"a {self.resource_type.name} resource needs a name")
        if self.resource_type is ResourceType.CLUSTER and (
                self.name != CLUSTER_NAME or self.pattern_type is not PatternType.LITERAL):
            raise ValueError(f"the cluster resource is LITERAL {CLUSTER_NAME!r}, "
                             f"not {self.pattern_type.name} {self.name!r}")

    @classmethod
    def topic(cls, name: str, *, prefixed: bool = False) -> ResourcePattern:
        return cls(ResourceType.TOPIC, name, _pattern(prefixed))

    @classmethod
    def group(cls, name: str, *, prefixed: bool = False) -> ResourcePattern:
        return cls(ResourceType.GROUP, name, _pattern(prefixed))

    @classmethod
    def cluster(cls) -> ResourcePattern:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)

    @classmethod
    def transactional_id(cls, name: str, *, prefixed: bool = False) -> ResourcePattern:
        """A transactional producer's id: WRITE lets a producer use it (InitProducerId,
        its transactions), DESCRIBE lets tools find and describe it."""
        return cls(ResourceType.TRANSACTIONAL_ID, name, _pattern(prefixed))

    def __str__(self) -> str:
        return f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}"


def _pattern(prefixed: bool) -> PatternType:
    return PatternType.PREFIXED if prefixed else PatternType.LITERAL


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """Who may (ALLOW) or may not (DENY) do ``operation``: ``principal`` (``User:alice``,
    ``User:*`` for everyone) connecting from ``host`` (an IP address, ``*`` for any)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def __post_init__(self) -> None:
        check_principal(self.principal)
        if not self.host:
            raise ValueError("host must be an address or '*', not empty")
        object.__setattr__(self, "operation", parse_operation(self.operation, concrete=True))
        object.__setattr__(self, "permission",
                           parse_permission(self.permission, concrete=True))


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One rule: ``entry`` on the resources of ``pattern``.

    ``AclBinding.allow("User:alice", "read", "topic", "orders")`` reads as it is
    written; the flat properties (``principal``, ``operation`` ...) save a hop.
    """

    pattern: ResourcePattern
    entry: AccessControlEntry

    @classmethod
    def allow(cls, principal: str, operation: AclOperation | str,
              resource_type: ResourceType | str, name: str | None = None, *,
              pattern: PatternType | str = PatternType.LITERAL,
              host: str = WILDCARD) -> AclBinding:
        """ALLOW ``principal`` to ``operation`` on a resource (``name`` may be left out
        for the cluster)."""
        return cls._make(AclPermission.ALLOW, principal, operation, resource_type, name,
                         pattern, host)

    @classmethod
    def deny(cls, principal: str, operation: AclOperation | str,
             resource_type: ResourceType | str, name: str | None = None, *,
             pattern: PatternType | str = PatternType.LITERAL,
             host: str = WILDCARD) -> AclBinding:
        """DENY, which wins over every ALLOW that matches the same request."""
        return cls._make(AclPermission.DENY, principal, operation, resource_type, name,
                         pattern, host)

    @classmethod
    def _make(cls, permission: AclPermission, principal: str, operation: AclOperation | str,
              resource_type: ResourceType | str, name: str | None,
              pattern: PatternType | str, host: str) -> AclBinding:
        rtype = parse_resource_type(resource_type, concrete=True)
        if name is None:
            if rtype is not ResourceType.CLUSTER:
                raise ValueError(f"a {rtype.name} binding needs a resource name")
            name = CLUSTER_NAME
        return cls(ResourcePattern(rtype, name, parse_pattern_type(pattern, concrete=True)),
                   AccessControlEntry(principal, host, parse_operation(operation),
                                      permission))

    @property
    def resource_type(self) -> ResourceType:
        return self.pattern.resource_type

    @property
    def resource_name(self) -> str:
        return self.pattern.name

    @property
    def pattern_type(self) -> PatternType:
        return self.pattern.pattern_type

    @property
    def principal(self) -> str:
        return self.entry.principal

    @property
    def host(self) -> str:
        return self.entry.host

    @property
    def operation(self) -> AclOperation:
        return self.entry.operation

    @property
    def permission(self) -> AclPermission:
        return self.entry.permission

    def to_filter(self) -> AclBindingFilter:
        """The filter matching exactly this binding (to delete it alone)."""
        return AclBindingFilter(self.resource_type, self.resource_name, self.pattern_type,
                                self.principal, self.host, self.operation, self.permission)

    def __str__(self) -> str:
        return (f"{self.principal} {self.permission.name} {self.operation.name} "
                f"from {self.host} on {self.pattern}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings to list or delete: every field left at ANY (or None) matches
    every value; the default filter matches every binding.

    ``pattern_type`` MATCH with a ``resource_name`` selects the bindings that apply to
    that resource: its LITERAL name, the LITERAL ``*``, and every PREFIXED pattern the
    name starts with (as Kafka's ``--resource-pattern-type match``).
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", parse_resource_type(self.resource_type))
        object.__setattr__(self, "pattern_type", parse_pattern_type(self.pattern_type))
        object.__setattr__(self, "operation", parse_operation(self.operation))
        object.__setattr__(self, "permission", parse_permission(self.permission))
        if self.principal is not None:
            check_principal(self.principal)

    @classmethod
    def of(cls, *, resource_type: ResourceType | str = ResourceType.ANY,
           resource_name: str | None = None, pattern_type: PatternType | str = PatternType.ANY,
           principal: str | None = None, host: str | None = None,
           operation: AclOperation | str = AclOperation.ANY,
           permission: AclPermission | str = AclPermission.ANY) -> AclBindingFilter:
        """A filter from names (``of(resource_type="topic", operation="read")``)."""
        return cls(parse_resource_type(resource_type), resource_name,
                   parse_pattern_type(pattern_type), principal, host,
                   parse_operation(operation), parse_permission(permission))

    @property
    def matches_everything(self) -> bool:
        return self == AclBindingFilter()

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` is one this filter selects (the broker's rule, for callers
        that filter bindings they already hold)."""
        return (self._matches_pattern(binding.pattern)
                and self.principal in (None, binding.principal)
                and self.host in (None, binding.host)
                and self.operation in (AclOperation.ANY, binding.operation)
                and self.permission in (AclPermission.ANY, binding.permission))

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type is PatternType.MATCH:
            name = self.resource_name
            if name is None:
                return True
            if pattern.pattern_type is PatternType.LITERAL:
                return pattern.name in (name, WILDCARD)
            return name.startswith(pattern.name)
        if self.pattern_type not in (PatternType.ANY, pattern.pattern_type):
            return False
        return self.resource_name in (None, pattern.name)

    def __str__(self) -> str:
        parts = [f"{label}={value}" for label, value in (
            ("resource-type", self.resource_type.name), ("resource-name", self.resource_name),
            ("pattern-type", self.pattern_type.name), ("principal", self.principal),
            ("host", self.host), ("operation", self.operation.name),
            ("permission", self.permission.name))
            if value not in (None, "ANY")]
        return " ".join(parts) or "every binding"


# --- the wire's shapes, for Admin ---------------------------------------------------------


def describe_request(f: AclBindingFilter) -> DescribeAclsRequest:
    return DescribeAclsRequest(
        resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
        pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
        host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission))


def delete_filter(f: AclBindingFilter) -> DeleteAclsFilter:
    return DeleteAclsFilter(
        resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
        pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
        host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission))


def creation(b: AclBinding) -> AclCreation:
    return AclCreation(
        resource_type=int(b.resource_type), resource_name=b.resource_name,
        resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
        operation=int(b.operation), permission_type=int(b.permission))


def _from_wire(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
               operation: int, permission: int) -> AclBinding:
    """A binding the broker sent; a value no binding can hold is the broker's fault."""
    try:
        return AclBinding(ResourcePattern(ResourceType(resource_type), name,
                                          PatternType(pattern_type)),
                          AccessControlEntry(principal, host, AclOperation(operation),
                                             AclPermission(permission)))
    except ValueError as exc:
        raise RemoteProtocolError(f"the broker sent an impossible ACL binding: {exc}"
                                  ) from exc


def bindings_from_describe(resp: DescribeAclsResponse) -> list[AclBinding]:
    return [_from_wire(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                       a.operation, a.permission_type)
            for r in resp.resources for a in r.acls]


def binding_from_match(m: DeleteAclsMatchingAcl) -> AclBinding:
    return _from_wire(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                      m.operation, m.permission_type)
