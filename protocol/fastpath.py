"""The Heartbeat fast path: a v0 Heartbeat request read without building any object.

The broker answers thousands of heartbeats a second. :func:`decode_heartbeat` is written
by the same generator as every other decoder (:meth:`Generator.reader
<groupwire.protocol.codegen.Generator.reader>`), after a prelude that checks the request
envelope as :func:`~groupwire.protocol.envelope.decode_request` does; it returns the
fields as a tuple, or None for anything else, which ``decode_request`` then decodes (and
names what is wrong with). The answer goes out through
:func:`~groupwire.protocol.envelope.frame_response_packed`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Final, cast

import msgpack

from groupwire.protocol.codegen import Generator
from groupwire.protocol.framing import Payload
from groupwire.protocol.limits import SCAN_ABOVE_BYTES
from groupwire.protocol.messages import ApiKey, HeartbeatRequest
from groupwire.protocol.types import INT32_RANGE

__all__ = ["HeartbeatFields", "decode_heartbeat"]

HeartbeatFields = tuple[int, str, int, str, str | None, int, int]
"""``(correlation_id, group_id, generation_id, member_id, group_instance_id, poll_age_ms,
wait_ms)`` of a v0 Heartbeat request, defaults filled in."""

_FIELD_ORDER: Final = (
    "group_id", "generation_id", "member_id", "group_instance_id", "poll_age_ms", "wait_ms",
)
if tuple(f.name for f in dataclasses.fields(HeartbeatRequest)) != _FIELD_ORDER:
    raise TypeError("HeartbeatRequest changed: update HeartbeatFields")  # pragma: no cover

_LO, _HI = INT32_RANGE.lo, INT32_RANGE.hi

# Binds the body to ``v`` if the payload is one v0 Heartbeat envelope, else returns None.
# Payloads over SCAN_ABOVE_BYTES go to decode_request, which walks them first (limits).
# Those are also the only ones that may be memoryviews (framing.LARGE_FRAME_BYTES is
# larger), so ``startswith`` is only ever called on bytes.
_ENVELOPE_PRELUDE: Final = (
    f"if len(payload) > {SCAN_ABOVE_BYTES} or not payload.startswith(HEARTBEAT_V0):",
    "    return None",
    "try:",
    "    obj = unpackb(payload, raw=False, use_list=True, strict_map_key=False)",
    "except (ValueError, TypeError):",
    "    return None",
    "if type(obj) is not list or len(obj) != 5:",
    "    return None",
    "cid = obj[2]",
    "client_id = obj[3]",
    f"if (type(cid) is not int or not {_LO} <= cid <= {_HI}",
    "        or (client_id is not None and type(client_id) is not str)):",
    "    return None",
    "v = obj[4]",
)

decode_heartbeat: Final = cast(
    Callable[[Payload], HeartbeatFields | None],
    Generator().reader(
        HeartbeatRequest,
        name="decode_heartbeat",
        params="payload",
        prelude=_ENVELOPE_PRELUDE,
        leading=("cid",),
        namespace={
            "unpackb": msgpack.unpackb,
            # array(5), api key 12, version 0: the first three bytes of every v0 Heartbeat
            "HEARTBEAT_V0": bytes((0x95, ApiKey.HEARTBEAT, 0)),
        },
    ),
)
decode_heartbeat.__module__ = __name__
decode_heartbeat.__doc__ = """The fields of a well-formed v0 Heartbeat request payload
(:data:`HeartbeatFields`), checked exactly as ``decode_request`` checks them; None for
anything else."""
