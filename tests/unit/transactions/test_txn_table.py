"""The state table (state.py), the record encoding (records.py) and the core's purity."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from groupwire.broker import transactions
from groupwire.broker.transactions import (
    TRANSITIONS,
    IllegalTransitionError,
    TxnMetadata,
    TxnRecord,
    TxnState,
    check_transition,
    diagram,
    next_states,
    record_from_kv,
    transitions,
)
from tests.unit.coordinator.test_coord_purity import FORBIDDEN, _imported_modules

PACKAGE = Path(transactions.__file__).parent
S = TxnState


def test_the_table_is_kafkas_valid_previous_states_inverted() -> None:
    previous = {  # TransactionMetadata.scala's validPreviousStates
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert set(TRANSITIONS) == set(TxnState)
    for target, sources in previous.items():
        assert {s for s in TxnState if target in next_states(s)} == sources, target


def test_every_move_outside_the_table_raises() -> None:
    for source in TxnState:
        for target in TxnState:
            if target in TRANSITIONS[source]:
                check_transition(source, target)
            else:
                with pytest.raises(IllegalTransitionError):
                    check_transition(source, target)
    assert next_states(S.DEAD) == frozenset()


def test_triples_and_diagram_render_the_table() -> None:
    triples = transitions()
    assert len(triples) == sum(len(m) for m in TRANSITIONS.values()) == 16
    assert all(cause for _, _, cause in triples)
    text = diagram()
    assert text.startswith("stateDiagram-v2\n")
    for source, target, cause in triples:
        assert f"    {source.value} --> {target.value}: {cause}\n" in text


def _meta(**kw: object) -> TxnMetadata:
    base: dict[str, object] = dict(
        producer_id=7, last_producer_id=6, producer_epoch=3, last_producer_epoch=2,
        timeout_ms=60_000, state=S.ONGOING,
        partitions=frozenset({("orders", 1), ("audit", 0)}), start_ms=1_700_000_000_000,
        update_ms=1_700_000_000_500)
    base.update(kw)
    return TxnMetadata(**base)  # type: ignore[arg-type]


def test_records_round_trip_and_keys_name_the_id() -> None:
    record = TxnRecord("app-1", _meta())
    key, value = record.to_kv()
    assert msgpack.unpackb(key) == ["txn", "app-1"]
    assert value is not None
    decoded = msgpack.unpackb(value)
    assert decoded["v"] == 0 and decoded["state"] == "Ongoing"
    assert decoded["partitions"] == [["audit", 0], ["orders", 1]]
    assert record_from_kv(key, value) == record
    idle = TxnRecord("app-1", _meta(state=S.EMPTY, partitions=frozenset(), start_ms=-1))
    assert record_from_kv(*idle.to_kv()) == idle
    tombstone = TxnRecord("app-1", None)
    assert tombstone.to_kv() == (key, None)
    assert record_from_kv(key, None) == tombstone


@pytest.mark.parametrize("key, value", [
    (b"\xc1", None),
    (msgpack.packb(["group", "g"]), None),
    (msgpack.packb(["txn", 5]), None),
    (msgpack.packb(["txn", "a"]), msgpack.packb([1, 2])),
    (msgpack.packb(["txn", "a"]), msgpack.packb({"v": 0})),
])
def test_unreadable_records_raise_value_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(ValueError):
        record_from_kv(key, value)


def test_a_newer_version_or_unknown_state_is_refused_not_misread() -> None:
    key, value = TxnRecord("a", _meta()).to_kv()
    assert value is not None
    v = msgpack.unpackb(value)
    with pytest.raises(ValueError, match="newer"):
        record_from_kv(key, msgpack.packb({**v, "v": 1}))
    with pytest.raises(ValueError, match="state"):
        record_from_kv(key, msgpack.packb({**v, "state": "Committing"}))
    with pytest.raises(ValueError):
        record_from_kv(key, msgpack.packb({**v, "producer_epoch": "3"}))


def test_no_module_imports_io_the_clock_or_the_wire_messages() -> None:
    sources = sorted(PACKAGE.glob("*.py"))
    assert len(sources) >= 6
    assert {p.name: _imported_modules(p) & FORBIDDEN for p in sources
            if _imported_modules(p) & FORBIDDEN} == {}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("groupwire.protocol.messages"), path.name
                assert node.module.split(".")[:3] != ["groupwire", "broker", "coordinator"]
    code = ("import sys, groupwire.broker.transactions; print(sorted(m for m in "
            "('asyncio', 'socket', 'selectors', 'threading') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_the_readme_shows_the_tables_diagram() -> None:
    readme = (PACKAGE / "README.md").read_text()
    block = readme.split("<!-- state-diagram:begin -->\n", 1)[1].split(
        "<!-- state-diagram:end -->", 1)[0]
    assert block == f"```mermaid\n{diagram()}```\n"
