"""The state diagram in docs/design.md is the coordinator's transition table."""

from pathlib import Path

from groupwire.broker.coordinator.state import diagram

DOC = Path(__file__).resolve().parents[3] / "docs" / "design.md"


def test_state_diagram_matches_the_table() -> None:
    text = DOC.read_text()
    block = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert block == diagram()
