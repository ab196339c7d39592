"""groupwire's wire protocol, sans I/O: frames, messages, codec, errors, hashing.

Nothing here touches sockets, event loops or clocks, and nothing keeps state but
caches: a message's codec is written when first looked up, into a read-only table
(``bodies``), and a message class's ``__init__`` when first built (``frozen``), so
importing the package costs little.
"""

from groupwire.protocol import messages
from groupwire.protocol.codec import (
    RequestFrame,
    decode_message,
    decode_request,
    decode_response,
    decode_response_body,
    decode_response_envelope,
    encode_message,
    encode_request,
    encode_response,
    peek_response_correlation_id,
)
from groupwire.protocol.consumer import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import (
    BodyError,
    EnvelopeError,
    ErrorCode,
    FrameError,
    LocalProtocolError,
    MalformedRequestError,
    ProtocolError,
    RemoteProtocolError,
    UnsupportedRequestError,
)
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame
from groupwire.protocol.hashing import (
    coordinator_partition,
    java_hashcode,
    kafka_abs,
    murmur2,
    partition_for_key,
)
from groupwire.protocol.messages import ApiKey, Request, Response

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "DEFAULT_MAX_FRAME_BYTES",
    "ApiKey",
    "Assignment",
    "BodyError",
    "ConsumerProtocolError",
    "EnvelopeError",
    "ErrorCode",
    "FrameDecoder",
    "FrameError",
    "LocalProtocolError",
    "MalformedRequestError",
    "ProtocolError",
    "RemoteProtocolError",
    "Request",
    "RequestFrame",
    "Response",
    "Subscription",
    "UnsupportedRequestError",
    "coordinator_partition",
    "decode_assignment",
    "decode_message",
    "decode_request",
    "decode_response",
    "decode_response_body",
    "decode_response_envelope",
    "decode_subscription",
    "encode_assignment",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_subscription",
    "frame",
    "java_hashcode",
    "kafka_abs",
    "messages",
    "murmur2",
    "partition_for_key",
    "peek_response_correlation_id",
]
