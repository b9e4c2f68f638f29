"""Commits and rebalances of classic groups on `serve` with real clients: a commit made in
the revoke callback (while the group prepares its rebalance) lands, so the next owner of a
partition starts after the last record the previous one processed."""

from __future__ import annotations

import pytest
from groups_support import PARTITIONS, build_group_broker, consumer, poll_until
from serve_support import TOPIC, ServeProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    return build_group_broker(tmp_path_factory.mktemp("rebalance"))


@pytest.fixture
def config(broker):
    return broker[0]


@pytest.fixture
def serve(config):
    procs = []

    def start():
        procs.append(ServeProcess(config))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        assert "Traceback" not in proc.output(), proc.output()


def test_a_commit_in_the_revoke_callback_lands_and_nothing_is_processed_twice(serve, broker):
    from confluent_kafka import TopicPartition

    server = serve()
    ends = broker[1]
    processed: list[tuple[int, int]] = []
    position: dict[int, int] = {}
    commit_errors: list[BaseException] = []
    a = consumer(server.bootstrap, "revoke")

    def on_revoke(c, partitions):
        owned = [TopicPartition(TOPIC, tp.partition, position[tp.partition])
                 for tp in partitions if tp.partition in position]
        if owned:
            try:
                c.commit(offsets=owned, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - asserted on below
                commit_errors.append(exc)

    def on_message(c, m):
        processed.append((m.partition(), m.offset()))
        position[m.partition()] = m.offset() + 1

    a.subscribe([TOPIC], on_revoke=on_revoke)
    b = consumer(server.bootstrap, "revoke")
    try:
        poll_until([a], lambda: len(position) == PARTITIONS
                   and min(position.values()) > 100, on_message=on_message)
        b.subscribe([TOPIC], on_revoke=on_revoke)
        # both consume to the end of every partition (control records take offsets too)
        poll_until([a, b], lambda: b.assignment() and all(
            position.get(p, 0) >= ends[p] - 40 for p in range(PARTITIONS)),
            on_message=on_message)
        for _ in range(10):
            for c in (a, b):
                for m in c.consume(500, 0.1):
                    on_message(c, m)
    finally:
        a.close()
        b.close()
    assert not commit_errors, commit_errors
    assert len(processed) == len(set(processed)), "a record was processed twice"


def _tracked(bootstrap, group, events, name, **extra):
    c = consumer(bootstrap, group, **extra)
    c.subscribe([TOPIC], on_assign=lambda _c, ps: events.append((name, "assign")),
                on_revoke=lambda _c, ps: events.append((name, "revoke")))
    return c


def _owned(c):
    return {tp.partition for tp in c.assignment()}


def test_a_static_member_rejoining_takes_its_place_with_no_rebalance(serve):
    server = serve()
    events: list[tuple[str, str]] = []
    a = _tracked(server.bootstrap, "static", events, "a", **{"group.instance.id": "i1"})
    b = _tracked(server.bootstrap, "static", events, "b")
    try:
        poll_until([a, b], lambda: _owned(a) and _owned(b)
                   and _owned(a) | _owned(b) == set(range(PARTITIONS)))
        before = _owned(a)
        a.close()  # a static member leaves no LeaveGroup behind
        seen = len(events)
        a = _tracked(server.bootstrap, "static", events, "a2", **{"group.instance.id": "i1"})
        poll_until([a, b], lambda: _owned(a) == before)
        for _ in range(20):  # b would be revoked by now if a rebalance had begun
            for c in (a, b):
                c.consume(100, 0.1)
        after = events[seen:]  # before close() revokes b's partitions
    finally:
        a.close()
        b.close()
    assert [e for e in after if e[0] == "b"] == [], after


def test_members_stay_in_the_group_across_a_serve_restart(serve):
    from confluent_kafka import TopicPartition

    server = serve()
    events: list[tuple[str, str]] = []
    a = _tracked(server.bootstrap, "restart", events, "a")
    try:
        poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)))
        a.consume(100, 0.5)
        seen = len(events)
        assert server.stop() == 0
        server = serve()
        for _ in range(40):  # heartbeats go on against the restarted serve
            a.consume(100, 0.1)
        a.commit(offsets=[TopicPartition(TOPIC, p, 3) for p in range(PARTITIONS)],
                 asynchronous=False)
        after = events[seen:]
    finally:
        a.close()
    assert after == [], after  # no UNKNOWN_MEMBER_ID, so no rejoin
