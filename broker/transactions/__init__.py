"""The sans-I/O transaction coordinator: Kafka's transactions (KIP-98, KIP-360) as a pure
state machine.

``TransactionCoordinator`` takes requests, write outcomes, marker outcomes and time as
plain arguments and returns a :class:`Result` (replies, records to store, markers to
write) that an asyncio shell executes. No clock, no sockets, no asyncio here; see
README.md for the inputs, the outputs and the state table.
"""

from groupwire.broker.transactions.config import TransactionConfig
from groupwire.broker.transactions.coordinator import (
    MAX_EPOCH,
    OFFSETS_TOPIC,
    TransactionCoordinator,
    epoch_exhausted,
)
from groupwire.broker.transactions.outputs import (
    EMPTY_RESULT,
    WRITE_ERRORS,
    ListedTransaction,
    MarkerWork,
    Reply,
    Result,
    Transition,
    TxnCounters,
    TxnDescription,
    TxnListing,
    Write,
    write_error_code,
)
from groupwire.broker.transactions.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_START,
    Partition,
    TxnMetadata,
    TxnRecord,
    record_from_kv,
)
from groupwire.broker.transactions.state import (
    TRANSITIONS,
    IllegalTransitionError,
    TxnState,
    check_transition,
    diagram,
    next_states,
    transitions,
)

__all__ = [
    "EMPTY_RESULT",
    "MAX_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_START",
    "OFFSETS_TOPIC",
    "TRANSITIONS",
    "WRITE_ERRORS",
    "IllegalTransitionError",
    "ListedTransaction",
    "MarkerWork",
    "Partition",
    "Reply",
    "Result",
    "TransactionConfig",
    "TransactionCoordinator",
    "Transition",
    "TxnCounters",
    "TxnDescription",
    "TxnListing",
    "TxnMetadata",
    "TxnRecord",
    "TxnState",
    "Write",
    "check_transition",
    "diagram",
    "epoch_exhausted",
    "next_states",
    "record_from_kv",
    "transitions",
    "write_error_code",
]
