"""What the SDK's public API takes and returns is importable from ``groupwire`` (issue 25):
a user should never need ``groupwire.client.admin`` to name an Admin result."""

from __future__ import annotations

import inspect
import typing

import groupwire
from groupwire.client import admin


def _admin_types() -> set[type]:
    """Classes of groupwire.client.admin that Admin's public methods take or return."""
    found: set[type] = set()

    def walk(tp: object) -> None:
        if isinstance(tp, type) and tp.__module__ == admin.__name__:
            found.add(tp)
        for arg in typing.get_args(tp):
            walk(arg)

    for name, method in inspect.getmembers(admin.Admin, inspect.isfunction):
        if name.startswith("_"):
            continue
        for hint in typing.get_type_hints(method).values():
            walk(hint)
    return found


def test_every_type_admin_takes_or_returns_is_exported() -> None:
    types = _admin_types() - {admin.Admin}
    assert types, "Admin's signatures name no classes of its own"
    missing = sorted(t.__name__ for t in types if t.__name__ not in groupwire.__all__)
    assert missing == []
    for t in types:
        assert getattr(groupwire, t.__name__) is t


def test_the_issue_s_four_names_import_from_the_front_door() -> None:
    from groupwire import ClusterDescription, GroupDescription, PartitionLag, TopicSpec

    assert TopicSpec is admin.TopicSpec and PartitionLag is admin.PartitionLag
    assert GroupDescription is admin.GroupDescription
    assert ClusterDescription is admin.ClusterDescription
