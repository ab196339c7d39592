"""§2 request limits against a live broker: oversized bodies are answered INVALID_REQUEST
on their correlation id, naming the field, and cost the broker too little to disturb an
unrelated group (issue 14: eight such frames once stalled it 38 s)."""

from __future__ import annotations

from .conftest import Connect
from .wire import Api, Err, WireConn, create_topic, describe, stable_single

MAX_STRING_BYTES = 32_767
MAX_ARRAY_ITEMS = 10_000
MAX_BODY_ITEMS = 50_000


async def test_frames_of_many_empty_arrays_are_refused_and_a_neighbour_stays_stable(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "limits-neighbour")
    neighbour = await stable_single(conn, "limits-neighbour-group", "limits-neighbour", [0],
                                    session_timeout_ms=60_000)
    generation = neighbour.generation_id
    attackers = [await connect(f"attacker-{i}") for i in range(2)]
    hostile = {"topics": [[]] * 400_000}  # a legal frame: 400 000 one-byte empty arrays
    sent = [(a, a.send(Api.METADATA, hostile)) for a in attackers for _ in range(4)]
    beat = await neighbour.heartbeat()  # answered among the hostile frames
    assert beat["error_code"] == Err.NONE, beat
    for attacker, fut in sent:
        body = await fut
        assert body["error_code"] == Err.INVALID_REQUEST, body
        assert body["error_message"] == (
            f"topics: request body over the limit of {MAX_BODY_ITEMS} items "
            "(array elements and map entries)")
        assert not attacker.closed.is_set()  # the connection is kept (§2)
    group = await describe(conn, "limits-neighbour-group")
    assert group["group_state"] == "Stable" and group["generation_id"] == generation
    assert [m["member_id"] for m in group["members"]] == [neighbour.member_id]


async def test_a_long_group_id_is_refused_by_every_group_api(conn: WireConn) -> None:
    group_id = "g" * 40_000
    calls = {
        Api.JOIN_GROUP: {"group_id": group_id, "member_id": "", "session_timeout_ms": 10_000,
                         "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
                         "protocols": [{"name": "range", "metadata": b""}]},
        Api.SYNC_GROUP: {"group_id": group_id, "generation_id": 1, "member_id": "m"},
        Api.HEARTBEAT: {"group_id": group_id, "generation_id": 1, "member_id": "m"},
        Api.LEAVE_GROUP: {"group_id": group_id, "members": [{"member_id": "m"}]},
        Api.OFFSET_COMMIT: {"group_id": group_id, "topics": []},
        Api.OFFSET_FETCH: {"group_id": group_id},
    }
    for api, body in calls.items():
        answer = await conn.call(api, body)
        assert answer["error_code"] == Err.INVALID_REQUEST, (api, answer)
        assert answer["error_message"] == (
            f"group_id: string of 40000 bytes over the limit of {MAX_STRING_BYTES}"), api
    for api, body in ((Api.DESCRIBE_GROUPS, {"groups": [group_id]}),
                      (Api.DELETE_GROUPS, {"groups_names": ["ok", group_id]})):
        answer = await conn.call(api, body)
        assert answer["error_code"] == Err.INVALID_REQUEST, (api, answer)
        assert "[" in answer["error_message"] and "40000 bytes" in answer["error_message"]
    listed = await conn.call(Api.LIST_GROUPS, {})
    assert all(len(g["group_id"]) < 100 for g in listed["groups"])


async def test_a_long_client_id_is_refused_and_the_connection_kept(conn: WireConn) -> None:
    answer = await conn.call(Api.API_VERSIONS, {}, client_id="c" * 40_000)
    assert answer["error_code"] == Err.INVALID_REQUEST
    assert answer["error_message"].startswith("client_id: string of 40000 bytes")
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE


async def test_an_array_field_over_the_limit_is_refused(conn: WireConn) -> None:
    answer = await conn.call(Api.DESCRIBE_GROUPS,
                             {"groups": [f"g{i}" for i in range(MAX_ARRAY_ITEMS + 1)]})
    assert answer["error_code"] == Err.INVALID_REQUEST
    assert answer["error_message"] == (
        f"groups: {MAX_ARRAY_ITEMS + 1} items over the limit of {MAX_ARRAY_ITEMS}")
    answer = await conn.call(Api.DESCRIBE_GROUPS,
                             {"groups": [f"g{i}" for i in range(MAX_ARRAY_ITEMS)]})
    assert answer["error_code"] == Err.NONE and len(answer["groups"]) == MAX_ARRAY_ITEMS

