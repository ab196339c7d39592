"""The cluster core is sans-I/O like the coordinator: no event loop, sockets or clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from groupwire.broker import cluster
from groupwire.broker.cluster.txn import Compare, KeyValue, Put, Txn
from tests.unit.coordinator.test_coord_purity import FORBIDDEN, _imported_modules

PACKAGE = Path(cluster.__file__).parent


def test_no_module_imports_io_or_the_clock() -> None:
    sources = sorted(PACKAGE.glob("*.py"))
    assert sources
    offenders = {p.name: _imported_modules(p) & FORBIDDEN for p in sources}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_importing_the_core_loads_no_event_loop_or_sockets() -> None:
    modules = ", ".join(f"groupwire.broker.cluster.{m}"
                        for m in ("keys", "image", "placement", "controller"))
    code = (f"import sys, {modules}; "
            "print(sorted(m for m in ('asyncio', 'socket', 'selectors', 'threading') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent.parent)
    assert out.stdout.strip() == "[]"


def test_a_compare_reads_a_missing_key_as_zero() -> None:
    kv = KeyValue("k", b"v", create_revision=5, mod_revision=9, version=3, lease=7)
    assert Compare("k", "create", "==", 0).holds(None)
    assert Compare("k", "create", "==", 5).holds(kv)
    assert not Compare("k", "mod", "==", 5).holds(kv)
    assert Compare("k", "version", ">", 2).holds(kv)
    assert Compare("k", "lease", "!=", 0).holds(kv)
    assert Compare("k", "mod", "<", 10).holds(kv)


def test_a_txn_over_etcds_op_limit_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="129 over etcd's 128"):
        Txn(compares=(), success=tuple(Put(f"k{i}", b"") for i in range(129)))
