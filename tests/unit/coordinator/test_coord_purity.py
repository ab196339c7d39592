"""The coordinator is sans-I/O: no event loop, no sockets, no clock, no sleeping."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from groupwire.broker import coordinator

PACKAGE = Path(coordinator.__file__).parent
FORBIDDEN = {"asyncio", "socket", "time", "datetime", "threading", "selectors", "select",
             "trio", "anyio", "uvloop"}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_imports_io_or_the_clock() -> None:
    sources = sorted(PACKAGE.glob("*.py"))
    assert len(sources) > 10
    offenders = {p.name: _imported_modules(p) & FORBIDDEN for p in sources}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_importing_the_package_loads_no_event_loop_or_sockets() -> None:
    code = ("import sys, groupwire.broker.coordinator; "
            "print(sorted(m for m in ('asyncio', 'socket', 'selectors', 'threading') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent.parent)
    assert out.stdout.strip() == "[]"
