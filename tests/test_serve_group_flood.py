"""A JoinGroup flood on `serve` from raw sockets: two thousand would-be members with large
metadata, each on its own connection. `group.max.size` bounds what the group holds as
Kafka's coordinator bounds it (while a rebalance is prepared, the members awaiting a join
count, so ids handed out with MEMBER_ID_REQUIRED cannot all come back as members), the rest
are refused with GROUP_MAX_SIZE_REACHED at once, and other clients are answered
throughout."""

from __future__ import annotations

import selectors
import time

import pytest
from groups_support import RawClient, build_group_broker
from serve_support import ServeProcess, process_rss_kib

from engine.protocol import errors as E

MAX_SIZE = 500
FLOOD = 4 * MAX_SIZE
METADATA = b"\x00\x01" + b"t" * (32 * 1024)


@pytest.fixture
def server(tmp_path):
    config, _ = build_group_broker(tmp_path, f"group.max.size={MAX_SIZE}\n")
    proc = ServeProcess(config)
    yield proc
    proc.kill()
    assert "Traceback" not in proc.output(), proc.output()


def test_a_join_group_flood_is_bounded_by_group_max_size(server):
    made: list[RawClient] = []

    def connect() -> RawClient:
        made.append(RawClient(server.port))
        return made[-1]

    try:
        anchor = connect()
        first = anchor.join("flood", session_ms=600_000)
        member = first["member_id"]
        # the anchor holds the next rebalance open (its long rebalance and session
        # timeouts) until it rejoins, so every join of the flood lands while the group prepares it
        joined = anchor.join("flood", member, rebalance_ms=600_000, session_ms=600_000)
        assert anchor.sync("flood", joined["generation_id"], member,
                           assignments={member: b"a"})["error_code"] == E.NONE
        flood = [connect() for _ in range(FLOOD)]
        ids = []
        for c in flood:  # the Stable group hands out member ids to anyone
            answer = c.join("flood", metadata=METADATA, session_ms=60_000)
            assert answer["error_code"] == E.MEMBER_ID_REQUIRED, answer
            ids.append(answer["member_id"])
        rss_before = process_rss_kib(server.proc.pid)
        for c, member_id in zip(flood, ids):
            c.send_join("flood", member_id, metadata=METADATA, session_ms=60_000)
        refused = _refused(flood, FLOOD - MAX_SIZE)
        # everyone else is answered while the flood waits in the rebalance
        other = connect()
        assert other.call(18, {})["error_code"] == E.NONE
        assert other.call(3, {"topics": None, "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False}
                          )["topics"][0]["error_code"] == E.NONE
        described = other.describe("flood")
        assert (described["group_state"], len(described["members"])) == (
            "PreparingRebalance", MAX_SIZE + 1)
        # the group holds what it admitted: its metadata, not the refused joins'
        grown_kib = process_rss_kib(server.proc.pid) - rss_before
        assert grown_kib < 4 * MAX_SIZE * len(METADATA) // 1024 + 64 * 1024, grown_kib
        # the anchor rejoins last: Kafka's coordinator counts the members awaiting the
        # join, so it is the one left out, and the rebalance completes with the flood
        rejoined = anchor.join("flood", member, session_ms=600_000)
        assert rejoined["error_code"] == E.GROUP_MAX_SIZE_REACHED, rejoined
        left_out = set(map(id, refused))
        admitted = [c.receive() for c in flood if id(c) not in left_out]
        assert len(admitted) == MAX_SIZE and len(refused) == FLOOD - MAX_SIZE
        assert {a["error_code"] for a in admitted} == {E.NONE}
        [leader] = [a for a in admitted if a["members"]]
        assert len(leader["members"]) == MAX_SIZE
        assert {bytes(m["metadata"]) for m in leader["members"]} == {METADATA}
    finally:
        for c in made:
            c.close()


def _refused(flood: list[RawClient], expected: int) -> list[RawClient]:
    """The connections whose pending join was answered GROUP_MAX_SIZE_REACHED (at once);
    waits for `expected` of them (an admitted join stays unanswered until the rebalance
    completes)."""
    refused: list[RawClient] = []
    with selectors.DefaultSelector() as waiting:  # thousands of descriptors: no select()
        for c in flood:
            waiting.register(c.sock, selectors.EVENT_READ, c)
        deadline = time.monotonic() + 120
        while len(refused) < expected and time.monotonic() < deadline:
            for key, _ in waiting.select(1.0):
                answer = key.data.receive()
                assert answer["error_code"] == E.GROUP_MAX_SIZE_REACHED, answer
                refused.append(key.data)
                waiting.unregister(key.fileobj)
    return refused
