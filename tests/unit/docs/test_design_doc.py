"""The state diagram in docs/design/coordinator.md is the coordinator's transition table.

Regenerate it after changing the table: ``python -m tests.unit.docs.test_design_doc``.
"""

import sys
from pathlib import Path

from groupwire.broker.coordinator.transitions import BEGIN, END, diagram, with_diagram

DOC = Path(__file__).resolve().parents[3] / "docs" / "design" / "coordinator.md"


def test_state_diagram_matches_the_table() -> None:
    text = DOC.read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == f"\n```mermaid\n{diagram()}```\n"
    assert with_diagram(text) == text


def main() -> int:
    text = DOC.read_text()
    new = with_diagram(text)
    if new != text:
        DOC.write_text(new)
        print(f"{DOC}: state diagram regenerated from the transition table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
