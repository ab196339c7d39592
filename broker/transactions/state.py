"""Kafka's transaction states and the one table of moves between them.

:data:`TRANSITIONS` is the whole state machine: every move the coordinator makes is
checked against it (:func:`check_transition`, which raises on any other), and the state
diagram in README.md is drawn from it (:func:`diagram`; :func:`transitions` gives the
same moves as ``(from, to, cause)`` triples for other renderers).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


class TxnState(enum.Enum):
    """Kafka's ``TransactionState``s; values are the names Describe/ListTransactions return."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


EMPTY: Final = TxnState.EMPTY
ONGOING: Final = TxnState.ONGOING
PREPARE_COMMIT: Final = TxnState.PREPARE_COMMIT
PREPARE_ABORT: Final = TxnState.PREPARE_ABORT
COMPLETE_COMMIT: Final = TxnState.COMPLETE_COMMIT
COMPLETE_ABORT: Final = TxnState.COMPLETE_ABORT
DEAD: Final = TxnState.DEAD
PREPARE_EPOCH_FENCE: Final = TxnState.PREPARE_EPOCH_FENCE

BY_NAME: Final[Mapping[str, TxnState]] = MappingProxyType({s.value: s for s in TxnState})
"""State by its wire name (ListTransactions' state filters match it exactly, as Kafka's)."""

PREPARED: Final = frozenset({PREPARE_COMMIT, PREPARE_ABORT})
"""A decision stored, markers being written: nothing else may happen until they are."""

IDLE: Final = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})
"""No transaction open: a new one may begin, and the id may expire (Kafka's
``isExpirationAllowed``)."""

_INIT = "InitProducerId"
_ADD = "AddPartitionsToTxn / AddOffsetsToTxn"
_EXPIRE = "transactional id expired"

TRANSITIONS: Final[Mapping[TxnState, Mapping[TxnState, str]]] = MappingProxyType({
    EMPTY: MappingProxyType({
        EMPTY: f"{_INIT} (epoch bumped, or a new producer id)",
        ONGOING: _ADD,
        DEAD: _EXPIRE,
    }),
    ONGOING: MappingProxyType({
        ONGOING: _ADD,
        PREPARE_COMMIT: "EndTxn(commit)",
        PREPARE_ABORT: "EndTxn(abort)",
        PREPARE_EPOCH_FENCE: f"{_INIT} from a new producer, or the transaction timed out",
    }),
    PREPARE_EPOCH_FENCE: MappingProxyType({
        PREPARE_ABORT: "abort with the bumped epoch",
    }),
    PREPARE_COMMIT: MappingProxyType({
        COMPLETE_COMMIT: "markers written",
    }),
    PREPARE_ABORT: MappingProxyType({
        COMPLETE_ABORT: "markers written",
    }),
    COMPLETE_COMMIT: MappingProxyType({
        EMPTY: _INIT,
        ONGOING: _ADD,
        DEAD: _EXPIRE,
    }),
    COMPLETE_ABORT: MappingProxyType({
        EMPTY: _INIT,
        ONGOING: _ADD,
        DEAD: _EXPIRE,
    }),
    DEAD: MappingProxyType({}),
})
"""state -> {next state: what causes the move}: the legal moves, and nothing else.

The inverse of Kafka's ``validPreviousStates``. A new transactional id starts in Empty
(with no epoch; InitProducerId's Empty -> Empty move gives it epoch 0). PrepareEpochFence
and Dead are never stored: the first is passed through on the way to PrepareAbort (the
record says PrepareAbort, with the bumped epoch), the second is the tombstone's state,
after which the id is gone."""


class IllegalTransitionError(RuntimeError):
    """The coordinator tried a move :data:`TRANSITIONS` does not list: a bug, not input."""


def next_states(state: TxnState) -> frozenset[TxnState]:
    return frozenset(TRANSITIONS[state])


def check_transition(source: TxnState, target: TxnState) -> None:
    if target not in TRANSITIONS[source]:
        raise IllegalTransitionError(
            f"illegal transaction transition {source.value} -> {target.value}")


def transitions() -> list[tuple[TxnState, TxnState, str]]:
    """Every legal move as ``(from, to, cause)``, in table order."""
    return [(source, target, cause)
            for source, moves in TRANSITIONS.items() for target, cause in moves.items()]


def diagram() -> str:
    """A Mermaid state diagram of :data:`TRANSITIONS`, each move labelled with its cause."""
    lines = ["stateDiagram-v2", f"    [*] --> {EMPTY.value}: {_INIT} (new transactional id)"]
    for source, target, cause in transitions():
        lines.append(f"    {source.value} --> {target.value}: {cause}")
    lines.append(f"    {DEAD.value} --> [*]")
    return "\n".join(lines) + "\n"
