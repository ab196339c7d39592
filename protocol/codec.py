"""The codec's public names in one place; each part lives in its own module.

- :mod:`groupwire.protocol.codegen` writes each message's decoder and encoder from its
  dataclass's type hints (the decoding and encoding rules are described there);
- :mod:`groupwire.protocol.bodies` holds the generated codecs of every message, each
  written when first looked up, and encodes or decodes a lone body;
- :mod:`groupwire.protocol.envelope` reads and writes the request and response envelopes
  (docs/protocol.md §2) and frames pre-packed responses;
- :mod:`groupwire.protocol.fastpath` reads a v0 Heartbeat without building objects.
"""

from groupwire.protocol.bodies import decode_message, encode_message
from groupwire.protocol.envelope import (
    RequestFrame,
    decode_request,
    decode_response,
    decode_response_body,
    decode_response_envelope,
    encode_request,
    encode_response,
    encode_response_packed,
    frame_response_packed,
    pack_body,
    peek_response_correlation_id,
)
from groupwire.protocol.fastpath import HeartbeatFields, decode_heartbeat

__all__ = [
    "HeartbeatFields",
    "RequestFrame",
    "decode_heartbeat",
    "decode_message",
    "decode_request",
    "decode_response",
    "decode_response_body",
    "decode_response_envelope",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_response_packed",
    "frame_response_packed",
    "pack_body",
    "peek_response_correlation_id",
]
