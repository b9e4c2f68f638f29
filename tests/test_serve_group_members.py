"""Members of classic groups on `serve`, driven with raw JoinGroup, SyncGroup, Heartbeat,
LeaveGroup and DescribeGroups requests (through the project's codec) where the point is
the coordinator's answer rather than what a consumer library makes of it: a follower's
unchanged rejoin of a Stable group gets the current generation at once; a replaced static
member's old id is fenced and an admin removes a static member by its instance id;
DescribeGroups shows protocol and member data only in Stable."""

from __future__ import annotations

import time

import pytest
from groups_support import RawClient, build_group_broker
from serve_support import ServeProcess

from engine.protocol import errors as E


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config, _ = build_group_broker(tmp_path_factory.mktemp("members"))
    proc = ServeProcess(config)
    yield proc
    proc.kill()
    assert "Traceback" not in proc.output(), proc.output()


@pytest.fixture
def clients(server):
    made: list[RawClient] = []

    def connect() -> RawClient:
        made.append(RawClient(server.port))
        return made[-1]

    yield connect
    for c in made:
        c.close()


def _dynamic_join(c: RawClient, group: str, **kw) -> str:
    """KIP-394: the first join gets MEMBER_ID_REQUIRED and the id to join with."""
    first = c.join(group, **kw)
    assert first["error_code"] == E.MEMBER_ID_REQUIRED, first
    return first["member_id"]


def _until_rebalancing(c: RawClient, group: str, generation: int, member_id: str) -> None:
    for _ in range(600):  # the other connection's join may not be handled yet
        code = c.heartbeat(group, generation, member_id)
        if code == E.REBALANCE_IN_PROGRESS:
            return
        assert code == E.NONE, code
        time.sleep(0.05)
    raise AssertionError("the group never began to rebalance")


def _stable_pair(clients, group: str):
    """Two dynamic members, a (the leader) and b, in a Stable group of generation 2."""
    a, b = clients(), clients()
    ma = _dynamic_join(a, group)
    joined = a.join(group, ma)
    assert (joined["error_code"], joined["generation_id"], joined["leader"]) == (
        E.NONE, 1, ma), joined
    assert a.sync(group, 1, ma, assignments={ma: b"all"})["error_code"] == E.NONE
    mb = _dynamic_join(b, group)
    b.send_join(group, mb)
    _until_rebalancing(a, group, 1, ma)
    joined = a.join(group, ma)
    assert (joined["error_code"], joined["generation_id"]) == (E.NONE, 2), joined
    assert {m["member_id"] for m in joined["members"]} == {ma, mb}
    assert b.receive()["generation_id"] == 2
    b.send_sync(group, 2, mb)
    assert a.sync(group, 2, ma, assignments={ma: b"A", mb: b"B"})["assignment"] == b"A"
    assert b.receive()["assignment"] == b"B"
    return a, ma, b, mb


def test_an_unchanged_rejoin_of_a_stable_follower_gets_the_current_generation(clients):
    a, ma, b, mb = _stable_pair(clients, "rejoin")
    # the follower rejoins with the metadata it joined with: answered at once with the
    # current generation (no rebalance, so the leader, which does not rejoin, stays)
    again = b.join("rejoin", mb)
    assert (again["error_code"], again["generation_id"], again["leader"],
            again["member_id"], again["members"]) == (E.NONE, 2, ma, mb, []), again
    assert a.heartbeat("rejoin", 2, ma) == E.NONE
    assert b.sync("rejoin", 2, mb)["assignment"] == b"B"
    assert a.describe("rejoin")["group_state"] == "Stable"
    # new metadata does rebalance
    b.send_join("rejoin", mb, metadata=b"other topics")
    _until_rebalancing(a, "rejoin", 2, ma)
    assert a.join("rejoin", ma)["generation_id"] == 3
    assert b.receive()["generation_id"] == 3


def _commit(c: RawClient, group: str, generation: int, member_id: str,
            instance_id: str | None) -> int:
    from groups_support import TOPIC

    resp = c.call(8, {"group_id": group, "generation_id_or_member_epoch": generation,
                      "member_id": member_id, "group_instance_id": instance_id,
                      "topics": [{"name": TOPIC, "partitions": [
                          {"partition_index": 0, "committed_offset": 5,
                           "committed_leader_epoch": -1, "committed_metadata": None}]}]})
    return resp["topics"][0]["partitions"][0]["error_code"]


def _leave(c: RawClient, group: str, *members: tuple[str, str | None]) -> dict:
    return c.call(13, {"group_id": group, "members": [
        {"member_id": m, "group_instance_id": i, "reason": None} for m, i in members]})


def test_a_replaced_static_member_is_fenced_and_leaves_by_instance_id(clients):
    old, new = clients(), clients()
    first = old.join("static", instance_id="i1")  # never MEMBER_ID_REQUIRED
    m1 = first["member_id"]
    assert (first["error_code"], first["generation_id"], first["leader"]) == (
        E.NONE, 1, m1), first
    assert old.sync("static", 1, m1, assignments={m1: b"p0"},
                    instance_id="i1")["error_code"] == E.NONE
    # the instance comes back without its member id: it takes the old member's place in
    # the same generation, with its assignment
    second = new.join("static", instance_id="i1")
    m2 = second["member_id"]
    assert m2 != m1 and (second["error_code"], second["generation_id"]) == (E.NONE, 1)
    assert new.sync("static", 1, m2, instance_id="i1")["assignment"] == b"p0"
    # everything the old member id still sends is fenced
    assert old.heartbeat("static", 1, m1, instance_id="i1") == E.FENCED_INSTANCE_ID
    assert _commit(old, "static", 1, m1, "i1") == E.FENCED_INSTANCE_ID
    assert old.sync("static", 1, m1, instance_id="i1")["error_code"] == E.FENCED_INSTANCE_ID
    assert old.join("static", m1, instance_id="i1")["error_code"] == E.FENCED_INSTANCE_ID
    left = _leave(old, "static", (m1, "i1"))
    assert [r["error_code"] for r in left["members"]] == [E.FENCED_INSTANCE_ID], left
    assert new.heartbeat("static", 1, m2, instance_id="i1") == E.NONE
    assert _commit(new, "static", 1, m2, "i1") == E.NONE
    # an admin removes static members by instance id alone (KIP-345's LeaveGroup v3+)
    admin = clients()
    left = _leave(admin, "static", ("", "i1"), ("", "unknown"))
    assert left["error_code"] == E.NONE
    assert [(r["group_instance_id"], r["error_code"]) for r in left["members"]] == [
        ("i1", E.NONE), ("unknown", E.UNKNOWN_MEMBER_ID)], left
    described = admin.describe("static")
    assert (described["group_state"], described["members"]) == ("Empty", [])
    assert new.heartbeat("static", 1, m2, instance_id="i1") == E.UNKNOWN_MEMBER_ID


def test_describe_groups_shows_protocol_and_member_data_only_when_stable(clients):
    a = clients()
    ma = _dynamic_join(a, "described")
    assert a.join("described", ma, metadata=b"subscription")["generation_id"] == 1
    completing = a.describe("described")
    assert (completing["group_state"], completing["protocol_type"],
            completing["protocol_data"]) == ("CompletingRebalance", "consumer", ""), completing
    [member] = completing["members"]
    assert (member["member_id"], member["member_metadata"], member["member_assignment"]) == (
        ma, b"", b"")
    a.sync("described", 1, ma, assignments={ma: b"assigned"})
    stable = a.describe("described")
    assert (stable["group_state"], stable["protocol_data"]) == ("Stable", "range")
    [member] = stable["members"]
    assert (member["member_metadata"], member["member_assignment"]) == (
        b"subscription", b"assigned")
