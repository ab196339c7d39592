"""SaslHandshake and SaslAuthenticate through the Kafka door.

The exchange itself is the msgpack door's (``broker.connection``: mechanisms, the gate
before authentication, failures that close the connection); only the frames differ.
After a SaslHandshake v0 the client sends bare SASL tokens rather than SaslAuthenticate
requests (kafka-python does when its ``api_version`` is set below 1.0): those frames have
no Kafka header, so the connection takes them itself (``KafkaConnection._raw_token``),
and this module sees only the handshake.
"""

from __future__ import annotations

from typing import Final

from groupwire.broker.kafka.translate import (
    Body,
    Dispatch,
    KafkaContext,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.protocol.messages import (
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36


def _handshake_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(SaslHandshakeRequest(mechanism=body["mechanism"]))


def _handshake_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, SaslHandshakeResponse)
    return {"error_code": kafka_code(response.error_code),
            "mechanisms": list(response.mechanisms)}


def _authenticate_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(SaslAuthenticateRequest(auth_bytes=bytes(body["auth_bytes"])))


def _authenticate_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, SaslAuthenticateResponse)
    return {"error_code": kafka_code(response.error_code),
            "error_message": response.error_message,
            "auth_bytes": response.auth_bytes, "session_lifetime_ms": response.session_lifetime_ms}


SASL_TRANSLATORS: dict[int, Translator] = {
    SASL_HANDSHAKE: Simple(_handshake_request, _handshake_response),
    SASL_AUTHENTICATE: Simple(_authenticate_request, _authenticate_response),
}
