"""``groupwire acls list|add|remove``: the SDK's Admin on the broker's ACL bindings.

Names are Kafka's and case-insensitive (``--operation read``, ``--resource-type Topic``).
``--transactional-id`` names a transactional producer's id, as Kafka's ``kafka-acls``
does: WRITE lets a producer use it, DESCRIBE lets tools find and describe it.
``remove`` is a dry run unless ``--execute`` is given, as ``groups reset-offsets`` is:
removing the wrong binding locks a team out (or lets it in) at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from groupwire.cli.arguments import add_connection_flags
from groupwire.cli.errors import EXIT_FAILURE, CliError
from groupwire.cli.output import emit_json, table
from groupwire.cli.running import run_with_admin
from groupwire.client.acls import (
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourcePattern,
    ResourceType,
    check_principal,
    parse_operation,
    parse_pattern_type,
    parse_permission,
    parse_resource_type,
)
from groupwire.client.admin import Admin

T = TypeVar("T")

COLUMNS = ["resource type", "resource name", "pattern", "principal", "host", "operation",
           "permission"]

_FILTER_FLAGS = ("resource_type", "resource_name", "pattern_type", "principal", "host",
                 "operation", "permission")


def _arg(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type`` from a parser raising ValueError (a one-line usage error)."""
    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def register(subparsers: Any) -> None:
    """Add ``acls`` and its actions to the ``groupwire`` subparsers."""
    acls = subparsers.add_parser(
        "acls", help="list, add and remove ACL bindings (brokers run with --authorizer acl)")
    actions = acls.add_subparsers(dest="acls_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser(
        "list", help="list ACL bindings, all or those the filters select",
        description="Every filter left out matches every value. --pattern-type match with "
                    "--resource-name lists what applies to that resource: its literal "
                    "bindings, the literal '*', and every prefix it starts with.")
    _add_filter_flags(p, "list the bindings")
    add_connection_flags(p)
    p.set_defaults(func=list_acls)

    p = actions.add_parser(
        "add", help="allow or deny principals operations on a topic, a group, a "
                    "transactional id or the cluster",
        description="Add one binding per --operation. DENY wins over ALLOW; without a "
                    "matching ALLOW a request is denied. Adding a binding that exists is "
                    "no error.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--allow", action="store_true", help="grant the operations")
    which.add_argument("--deny", action="store_true", help="refuse the operations")
    p.add_argument("--principal", required=True, type=_arg(check_principal),
                   metavar="TYPE:NAME", help="who: User:alice, or User:* for everyone")
    p.add_argument("--host", default=WILDCARD,
                   help="from which client address (default '*': any)")
    p.add_argument("--operation", action="append", required=True,
                   type=_arg(lambda t: parse_operation(t, concrete=True)), metavar="OP",
                   help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, "
                        "DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL "
                        "(repeatable)")
    resource = p.add_mutually_exclusive_group(required=True)
    resource.add_argument("--topic", metavar="TOPIC", help="on this topic ('*': every one)")
    resource.add_argument("--group", metavar="GROUP", help="on this group ('*': every one)")
    resource.add_argument("--transactional-id", metavar="ID",
                          help="on this transactional producer id ('*': every one); "
                               "a transactional producer needs WRITE on it")
    resource.add_argument("--cluster", action="store_true",
                          help="on the cluster (topic creation, ACLs, users, "
                               "IDEMPOTENT_WRITE)")
    p.add_argument("--prefixed", action="store_true",
                   help="--topic/--group/--transactional-id is a prefix: every name "
                        "starting with it")
    add_connection_flags(p)
    p.set_defaults(func=add)

    p = actions.add_parser(
        "remove", help="remove the ACL bindings the filters select (dry run by default)",
        description="Print the bindings the filters select and remove nothing, unless "
                    "--execute is given; then remove them and print what was removed. At "
                    "least one filter is needed (--resource-type any selects every "
                    "binding).")
    _add_filter_flags(p, "remove the bindings")
    p.add_argument("--execute", action="store_true",
                   help="remove them (default: a dry run that only lists them)")
    add_connection_flags(p)
    p.set_defaults(func=remove)


def _add_filter_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--resource-type", type=_arg(parse_resource_type), metavar="TYPE",
                   help="topic, group, cluster, transactional-id or any (default)")
    p.add_argument("--resource-name", metavar="NAME", help="the resource's name or prefix")
    p.add_argument("--transactional-id", metavar="ID",
                   help=f"{what} on this transactional id (--resource-type "
                        "transactional-id --resource-name ID)")
    p.add_argument("--pattern-type", type=_arg(parse_pattern_type), metavar="TYPE",
                   help="literal, prefixed, match or any (default)")
    p.add_argument("--principal", type=_arg(check_principal), metavar="TYPE:NAME",
                   help="e.g. User:alice")
    p.add_argument("--host", help="client address, or '*'")
    p.add_argument("--operation", type=_arg(parse_operation), metavar="OP",
                   help="e.g. read, write, describe, or any (default)")
    p.add_argument("--permission", type=_arg(parse_permission), metavar="PERM",
                   help="allow, deny or any (default)")


def _filter(args: argparse.Namespace) -> AclBindingFilter:
    kwargs = {name: getattr(args, name) for name in _FILTER_FLAGS
              if getattr(args, name) is not None}
    if args.transactional_id is not None:
        if args.resource_type not in (None, ResourceType.TRANSACTIONAL_ID) or (
                args.resource_name not in (None, args.transactional_id)):
            raise CliError("--transactional-id names the resource: give it without "
                           "--resource-type or --resource-name")
        kwargs.update(resource_type=ResourceType.TRANSACTIONAL_ID,
                      resource_name=args.transactional_id)
    try:
        return AclBindingFilter(**kwargs)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def binding_json(b: AclBinding) -> dict[str, str]:
    return {"resource_type": b.resource_type.name, "resource_name": b.resource_name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission": b.permission.name}


def _row(b: AclBinding) -> tuple[str, ...]:
    return (b.resource_type.name, b.resource_name, b.pattern_type.name, b.principal, b.host,
            b.operation.name, b.permission.name)


def _show(title: str, bindings: Sequence[AclBinding]) -> None:
    table(title, COLUMNS, [_row(b) for b in bindings])


def list_acls(args: argparse.Namespace) -> int:
    acl_filter = _filter(args)

    async def body(admin: Admin) -> int:
        bindings = await admin.describe_acls(acl_filter)
        if args.json:
            emit_json([binding_json(b) for b in bindings])
        else:
            _show("ACL bindings" if acl_filter.matches_everything
                  else f"ACL bindings matching {acl_filter}", bindings)
        return 0

    return run_with_admin(args, body)


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    """One binding per --operation, in the order given."""
    if args.cluster:
        if args.prefixed:
            raise CliError("--prefixed: the cluster has one name, no prefix")
        pattern = ResourcePattern.cluster()
    else:
        rtype, name = ((ResourceType.TOPIC, args.topic) if args.topic is not None
                       else (ResourceType.GROUP, args.group) if args.group is not None
                       else (ResourceType.TRANSACTIONAL_ID, args.transactional_id))
        try:
            pattern = ResourcePattern(rtype, name, PatternType.PREFIXED if args.prefixed
                                      else PatternType.LITERAL)
        except ValueError as exc:
            raise CliError(str(exc)) from exc
    make = AclBinding.allow if args.allow else AclBinding.deny
    try:
        return list(dict.fromkeys(
            make(args.principal, op, pattern.resource_type, pattern.name,
                 pattern=pattern.pattern_type, host=args.host) for op in args.operation))
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def add(args: argparse.Namespace) -> int:
    bindings = bindings_to_add(args)

    async def body(admin: Admin) -> int:
        results = await admin.create_acls(bindings)
        errors = {b: e for b, e in results.items() if e is not None}
        if errors and len(errors) == len(results) and len({e.code for e in errors.values()
                                                          }) == 1:
            raise CliError(str(next(iter(errors.values()))))  # e.g. SECURITY_DISABLED: once
        if args.json:
            emit_json({"added": [binding_json(b) for b, e in results.items() if e is None],
                       "errors": [{**binding_json(b), "error": str(e)}
                                  for b, e in errors.items()]})
            return EXIT_FAILURE if errors else 0
        table("added ACL bindings", [*COLUMNS, "result"],
              [(*_row(b), "added" if e is None else str(e)) for b, e in results.items()])
        if errors:
            print(f"groupwire acls add: error: {next(iter(errors.values()))}",
                  file=sys.stderr)
        return EXIT_FAILURE if errors else 0

    return run_with_admin(args, body)


def remove(args: argparse.Namespace) -> int:
    if all(getattr(args, name) is None for name in (*_FILTER_FLAGS, "transactional_id")):
        raise CliError("give at least one filter (--resource-type any selects every "
                       "binding)")
    acl_filter = _filter(args)

    async def body(admin: Admin) -> int:
        if args.execute:
            (bindings,) = await admin.delete_acls([acl_filter])
        else:
            bindings = await admin.describe_acls(acl_filter)
        if args.json:
            emit_json({"executed": args.execute,
                       "bindings": [binding_json(b) for b in bindings]})
            return 0
        if not bindings:
            print(f"no ACL binding matches ({acl_filter}): nothing "
                  f"{'removed' if args.execute else 'to remove'}")
            return 0
        if args.execute:
            _show(f"removed {len(bindings)} ACL binding(s)", bindings)
            return 0
        _show("ACL bindings that --execute would remove (dry run: nothing removed)",
              bindings)
        print(f"dry run: run again with --execute to remove these {len(bindings)} "
              "binding(s)", file=sys.stderr)
        return 0

    return run_with_admin(args, body)
