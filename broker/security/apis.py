"""DescribeAcls, CreateAcls, DeleteAcls and the SCRAM credential APIs (KIP-554).

Every change is stored before it takes effect and before it is answered: the new ACLs or
credentials are built aside, handed to ``persist`` (the data dir's ``security.json`` on a
single broker), and only once that returns are they applied to the authorizer and the
credential table and answered. A change that could not be stored changes nothing and is
answered KAFKA_STORAGE_ERROR. Changes run one at a time, so two never interleave between
store and apply. In a cluster ``persist`` writes the change to the cluster's metadata and
applies it itself (``persist_applies``), merged with what other brokers changed
meanwhile, which applying this request's view afterwards could undo.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from groupwire.broker.logs import get_logger
from groupwire.broker.security.acls import (
    AclBinding,
    AclBindingFilter,
    binding_from_codes,
    binding_problem,
    filter_from_codes,
    filter_problem,
)
from groupwire.broker.security.credentials import (
    CredentialTable,
    credential_from_salted,
    upsertion_problem,
)
from groupwire.broker.security.state import SecurityState
from groupwire.protocol.acls import ScramMechanism
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AclCreationResult,
    AclDescription,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CreateAclsRequest,
    CreateAclsResponse,
    CredentialInfo,
    DeleteAclsFilter,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)

log = get_logger("groupwire.security")

Persist = Callable[[list[AclBinding], CredentialTable], Awaitable[None]]
"""Store this whole state durably, or raise (OSError or the store's error)."""

_DISABLED = "no authorizer is configured (start the broker with --authorizer acl)"


@dataclass(frozen=True, slots=True)
class _StoreFailed:
    message: str


class SecurityApis:
    def __init__(self, state: SecurityState, *, authorizer_on: bool,
                 persist: Persist, persist_applies: bool = False) -> None:
        self._state = state
        self._authorizer_on = authorizer_on
        self._persist = persist
        self._apply = not persist_applies
        self._changing = asyncio.Lock()

    # --- ACLs -------------------------------------------------------------------------

    def describe_acls(self, request: DescribeAclsRequest) -> DescribeAclsResponse:
        if not self._authorizer_on:
            return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED,
                                        error_message=_DISABLED)
        f = filter_from_codes(request.resource_type_filter, request.resource_name_filter,
                              request.pattern_type_filter, request.principal_filter,
                              request.host_filter, request.operation,
                              request.permission_type)
        problem = filter_problem(f)
        if problem is not None:
            return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                        error_message=problem)
        return DescribeAclsResponse(resources=_by_resource(self._state.authorizer.describe(f)))

    async def create_acls(self, request: CreateAclsRequest, principal: str,
                          ) -> CreateAclsResponse:
        if not self._authorizer_on:
            return CreateAclsResponse(
                error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED,
                results=[AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED,
                                           error_message=_DISABLED)
                         for _ in request.creations])
        results: list[AclCreationResult] = []
        valid: list[AclBinding] = []
        for c in request.creations:
            binding = binding_from_codes(c.resource_type, c.resource_name,
                                         c.resource_pattern_type, c.principal, c.host,
                                         c.operation, c.permission_type)
            problem = binding_problem(binding)
            if problem is None:
                valid.append(binding)
                results.append(AclCreationResult())
            else:
                results.append(AclCreationResult(error_code=ErrorCode.INVALID_REQUEST,
                                                  error_message=problem))
        if valid:
            async with self._changing:
                authorizer = self._state.authorizer
                current = authorizer.bindings()
                present = set(current)
                new = [b for b in dict.fromkeys(valid) if b not in present]
                failed = await self._store([*current, *new], self._state.credentials)
                if failed is not None:
                    return CreateAclsResponse(results=[
                        r if r.error_code else AclCreationResult(
                            error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                            error_message=failed.message) for r in results])
                if self._apply:
                    authorizer.add(new)
            log.info("acls_created", principal=principal, acls=[_show(b) for b in new])
        return CreateAclsResponse(results=results)

    async def delete_acls(self, request: DeleteAclsRequest, principal: str,
                          ) -> DeleteAclsResponse:
        if not self._authorizer_on:
            return DeleteAclsResponse(
                error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED,
                filter_results=[DeleteAclsFilterResult(
                    error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED)
                    for _ in request.filters])
        filters: list[AclBindingFilter | str] = [_filter_of(f) for f in request.filters]
        async with self._changing:
            authorizer = self._state.authorizer
            current = authorizer.bindings()
            matched: list[list[AclBinding]] = []
            taken: set[AclBinding] = set()
            for f in filters:
                if isinstance(f, str):
                    matched.append([])
                    continue
                hits = [b for b in current if b not in taken and f.matches(b)]
                taken.update(hits)
                matched.append(hits)
            if taken:
                failed = await self._store([b for b in current if b not in taken],
                                           self._state.credentials)
                if failed is not None:
                    return DeleteAclsResponse(filter_results=[
                        DeleteAclsFilterResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                                               error_message=failed.message)
                        for _ in filters])
                if self._apply:
                    authorizer.replace_all([b for b in current if b not in taken])
        if taken:
            log.info("acls_deleted", principal=principal, acls=[_show(b) for b in taken])
        results = []
        for f, hits in zip(filters, matched, strict=True):
            if isinstance(f, str):
                results.append(DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST,
                                                      error_message=f))
            else:
                results.append(DeleteAclsFilterResult(matching_acls=[
                    DeleteAclsMatchingAcl(
                        resource_type=b.pattern.resource_type,
                        resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type,
                        principal=b.entry.principal, host=b.entry.host,
                        operation=b.entry.operation, permission_type=b.entry.permission)
                    for b in hits]))
        return DeleteAclsResponse(filter_results=results)

    # --- SCRAM credentials -------------------------------------------------------------

    def describe_credentials(self, request: DescribeUserScramCredentialsRequest,
                             ) -> DescribeUserScramCredentialsResponse:
        table = self._state.credentials
        if request.users is None:
            names = table.users()
            repeated: set[str] = set()
        else:
            asked = [u.name for u in request.users]
            names = list(dict.fromkeys(asked))
            repeated = {n for n in names if asked.count(n) > 1}
        results = []
        for name in names:
            if name in repeated:
                results.append(DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message=f"user {name!r} is named more than once"))
                continue
            creds = table.mechanisms_of(name)
            if not creds:
                results.append(DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"user {name!r} has no SCRAM credential"))
                continue
            results.append(DescribeUserScramCredentialsResult(user=name, credential_infos=[
                CredentialInfo(mechanism=int(c.mechanism), iterations=c.iterations)
                for c in creds]))
        return DescribeUserScramCredentialsResponse(results=results)

    async def alter_credentials(self, request: AlterUserScramCredentialsRequest,
                                principal: str) -> AlterUserScramCredentialsResponse:
        names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        order = list(dict.fromkeys(names))
        errors: dict[str, tuple[ErrorCode, str]] = {}
        for name in order:
            if names.count(name) > 1:  # Kafka: one alteration per user and request
                errors[name] = (ErrorCode.DUPLICATE_RESOURCE,
                                f"user {name!r} is altered more than once in the request")
        async with self._changing:
            table = self._state.credentials
            after = CredentialTable(table.items())
            changed: list[str] = []
            for d in request.deletions:
                if d.name in errors:
                    continue
                mechanism = _mechanism(d.mechanism)
                if mechanism is None:
                    errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                      f"unknown SCRAM mechanism code {d.mechanism}")
                elif not after.delete(d.name, mechanism):
                    errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                                      f"user {d.name!r} has no {mechanism.sasl_name} "
                                      f"credential")
                else:
                    changed.append(d.name)
            for u in request.upsertions:
                if u.name in errors:
                    continue
                problem = upsertion_problem(u.name, u.mechanism, u.iterations, u.salt,
                                            u.salted_password)
                if problem is not None:
                    errors[u.name] = problem
                    continue
                after.upsert(u.name, credential_from_salted(
                    ScramMechanism(u.mechanism), u.salt, u.salted_password, u.iterations))
                changed.append(u.name)
            if changed:
                failed = await self._store(self._state.authorizer.bindings(), after)
                if failed is not None:
                    for name in changed:
                        errors[name] = (ErrorCode.KAFKA_STORAGE_ERROR, failed.message)
                    changed = []
                elif self._apply:
                    table.replace_all(after)
        if changed:
            log.info("credentials_altered", principal=principal, users=sorted(set(changed)))
        return AlterUserScramCredentialsResponse(results=[
            AlterUserScramCredentialsResult(user=name, error_code=errors[name][0],
                                            error_message=errors[name][1])
            if name in errors else AlterUserScramCredentialsResult(user=name)
            for name in order])

    # --- storing --------------------------------------------------------------------------

    async def _store(self, bindings: list[AclBinding], credentials: CredentialTable,
                     ) -> _StoreFailed | None:
        try:
            await self._persist(bindings, credentials)
        except Exception as exc:  # the store's own error, or the disk's
            log.error("security_store_failed", error=f"{type(exc).__name__}: {exc}")
            return _StoreFailed(f"the change could not be stored: {exc}")
        return None


def _mechanism(code: int) -> ScramMechanism | None:
    try:
        mechanism = ScramMechanism(code)
    except ValueError:
        return None
    return None if mechanism is ScramMechanism.UNKNOWN else mechanism


def _filter_of(f: DeleteAclsFilter) -> AclBindingFilter | str:
    """The filter, or why it is refused (INVALID_REQUEST)."""
    parsed = filter_from_codes(f.resource_type_filter, f.resource_name_filter,
                               f.pattern_type_filter, f.principal_filter, f.host_filter,
                               f.operation, f.permission_type)
    problem = filter_problem(parsed)
    return parsed if problem is None else problem


def _by_resource(bindings: Iterable[AclBinding]) -> list[DescribeAclsResource]:
    """DescribeAcls' shape: one entry per resource pattern, its ACLs under it."""
    grouped: dict[tuple[int, str, int], list[AclDescription]] = {}
    for b in bindings:
        key = (int(b.pattern.resource_type), b.pattern.name, int(b.pattern.pattern_type))
        grouped.setdefault(key, []).append(AclDescription(
            principal=b.entry.principal, host=b.entry.host,
            operation=int(b.entry.operation), permission_type=int(b.entry.permission)))
    return [DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt,
                                 acls=acls) for (rt, name, pt), acls in grouped.items()]


def _show(b: AclBinding) -> str:
    """``ALLOW User:alice@* READ TOPIC:LITERAL:orders``, for the log."""
    p, e = b.pattern, b.entry
    return (f"{e.permission.name} {e.principal}@{e.host} {e.operation.name} "
            f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}")
