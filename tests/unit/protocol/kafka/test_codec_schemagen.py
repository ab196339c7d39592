"""schema.py is what schemagen writes from the pinned kafka-python's JSON schemas, and
schemagen reads those schemas as Kafka's generator does."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwire.protocol.kafka import schema, schemagen
from groupwire.protocol.kafka.spec import Field
from tests.unit.protocol.kafka.conftest import HAVE_KAFKA_PYTHON


def _pinned_kafka_python() -> str | None:
    if not HAVE_KAFKA_PYTHON:
        return "kafka-python (the dev extra) is not installed"
    try:
        schemagen.resources_dir()
    except schemagen.SchemaError as exc:
        return str(exc)
    return None


needs_schemas = pytest.mark.skipif(_pinned_kafka_python() is not None,
                                   reason=_pinned_kafka_python() or "")


@needs_schemas
def test_regenerating_gives_the_committed_file() -> None:
    assert schemagen.generate() == schemagen.SCHEMA_PY.read_text(encoding="utf-8"), (
        "protocol/kafka/schema.py is stale: run python -m groupwire.protocol.kafka.schemagen")


@needs_schemas
def test_check_exits_1_when_the_file_differs(tmp_path: Path) -> None:
    target = tmp_path / "schema.py"
    assert schemagen.main(["--output", str(target)]) == 0
    assert schemagen.main(["--check", "--output", str(target)]) == 0
    target.write_text(target.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert schemagen.main(["--check", "--output", str(target)]) == 1
    assert schemagen.main(["--check", "--output", str(tmp_path / "missing.py")]) == 1


def test_the_served_table_is_the_one_input() -> None:
    names = {name: versions for name, versions in schemagen.SERVED.items()}
    assert {schema.API_NAMES[k]: v for k, v in schema.SERVED.items()} == names
    for table in (schema.REQUESTS, schema.RESPONSES):
        assert {m.name: m.versions for m in table.values()} == names


@pytest.mark.parametrize(("kafka", "ours"), [
    ("ThrottleTimeMs", "throttle_time_ms"), ("TopicName", "topic_name"),
    ("V3AndBelowProducerId", "v3_and_below_producer_id"), ("ISRNodes", "isr_nodes"),
    ("TopicID", "topic_id"), ("Records", "records"),
])
def test_field_names(kafka: str, ours: str) -> None:
    assert schemagen.snake_case(kafka) == ours


def test_comments_are_stripped_but_not_inside_strings() -> None:
    text = '// head\n{ "a": "http://x", // tail\n  "b": "q\\"//" }\n'
    assert schemagen.strip_comments(text) == '\n{ "a": "http://x", \n  "b": "q\\"//" }\n'


def test_versions_and_defaults_as_kafkas_generator_reads_them() -> None:
    assert schemagen.parse_versions("3+") == (3, 0x7FFF)
    assert schemagen.parse_versions("2-4") == (2, 4)
    assert schemagen.parse_versions("7") == (7, 7)
    assert schemagen.parse_versions("none") is None
    served = (0, 5)
    common = {"Leader": [{"name": "Id", "type": "int32", "versions": "0+", "default": "-1"}]}
    raw = [
        {"name": "Gone", "type": "int32", "versions": "6+"},  # outside the served range
        {"name": "Max", "type": "int32", "versions": "1+", "default": "0x7fffffff"},
        {"name": "Rack", "type": "string", "versions": "0+", "nullableVersions": "2+"},
        {"name": "Txn", "type": "string", "versions": "3+", "nullableVersions": "3+",
         "default": "null"},
        {"name": "Flag", "type": "bool", "versions": "0+", "default": "true"},
        {"name": "Leaders", "type": "[]Leader", "versions": "0+"},
        {"name": "Data", "type": "records", "versions": "0+", "nullableVersions": "0+"},
        {"name": "Epoch", "type": "int64", "versions": "4+", "taggedVersions": "4+", "tag": 2},
    ]
    fields = schemagen.convert_fields(raw, served, common, "Test")
    assert [f.name for f in fields] == ["max", "rack", "txn", "flag", "leaders", "data",
                                        "epoch"]
    by_name = {f.name: f for f in fields}
    assert by_name["max"] == Field("max", "int32", (1, 5), default=0x7FFFFFFF)
    assert by_name["rack"] == Field("rack", "string", (0, 5), nullable=(2, 5), default="")
    assert by_name["txn"].default is None and by_name["flag"].default is True
    assert by_name["leaders"] == Field("leaders", "struct", (0, 5), array=True, default=(),
                                       fields=(Field("id", "int32", (0, 5), default=-1),))
    assert by_name["data"].default is None
    assert (by_name["epoch"].tag, by_name["epoch"].tagged) == (2, (4, 5))


def test_schemas_it_cannot_read_are_refused() -> None:
    with pytest.raises(schemagen.SchemaError, match="no fields"):
        schemagen.convert_fields([{"name": "X", "type": "[]Nope", "versions": "0+"}],
                                 (0, 1), {}, "T")
    with pytest.raises(schemagen.SchemaError, match="tag"):
        schemagen.convert_fields([{"name": "X", "type": "int8", "versions": "0+", "tag": 1}],
                                 (0, 1), {}, "T")
