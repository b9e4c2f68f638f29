"""Committed offsets on `serve`: metadata larger than `offset.metadata.max.bytes` is refused
per partition and stored nowhere (with a real client); offsets expire as Kafka's
coordinator expires them (`offsets.retention.minutes`, the coordinator's expiry pass with
its clock set)."""

from __future__ import annotations

import pytest
from groups_support import build_group_broker
from serve_support import TOPIC, ServeProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    return build_group_broker(tmp_path_factory.mktemp("offsets"))


@pytest.fixture
def serve(broker):
    procs = []

    def start():
        procs.append(ServeProcess(broker[0]))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        assert "Traceback" not in proc.output(), proc.output()


def test_metadata_over_offset_metadata_max_bytes_is_refused_and_stored_nowhere(serve):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import OffsetMetadataTooLargeError
    from kafka.structs import OffsetAndMetadata

    server = serve()
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="meta",
                      enable_auto_commit=False)
    tps = [TopicPartition(TOPIC, p) for p in range(3)]
    try:
        # 4096 UTF-16 units each: at the limit
        c.commit({tps[0]: OffsetAndMetadata(5, "m" * 4096, -1),
                  tps[1]: OffsetAndMetadata(6, "\U0001f600" * 2048, -1)})
        with pytest.raises(OffsetMetadataTooLargeError):
            c.commit({tps[0]: OffsetAndMetadata(50, "m" * 4097, -1),
                      tps[2]: OffsetAndMetadata(7, "ok", -1)})
        with pytest.raises(OffsetMetadataTooLargeError):
            c.commit({tps[1]: OffsetAndMetadata(60, "\U0001f600" * 2048 + "x", -1)})
        got = {tp.partition: c.committed(tp, metadata=True) for tp in tps}
    finally:
        c.close()
    assert {p: (o.offset, o.metadata) for p, o in got.items()} == {
        0: (5, "m" * 4096), 1: (6, "\U0001f600" * 2048), 2: (7, "ok")}


# ------------------------------------------------------------------------- offset expiry

_RETENTION_MS = 60_000  # offsets.retention.minutes=1


def _coordinator(log_dir):
    from engine.protocol.groups import GroupCoordinator
    from engine.protocol.offsets_store import OffsetsStore

    config = {"group.min.session.timeout.ms": 1000, "group.max.session.timeout.ms": 60000,
              "group.initial.rebalance.delay.ms": 0, "offsets.retention.minutes": 1,
              "offset.metadata.max.bytes": 4096, "group.max.size": 10}
    return GroupCoordinator(config, OffsetsStore(log_dir), reader=None)


def _expire_at(coordinator, monkeypatch, at_ms: int) -> dict:
    """Runs one expiry pass with the clock at `at_ms`; the offsets left, by group."""
    import asyncio

    from engine.protocol import group_offsets

    monkeypatch.setattr(group_offsets, "now_ms", lambda: at_ms)
    asyncio.run(coordinator._expire_offsets())
    return {g: sorted(p for _, p in coordinator.store.get(g))
            for g in coordinator.store.groups()}


def test_offsets_expire_as_kafka_expires_them(tmp_path, monkeypatch):
    from engine.protocol.group_model import STABLE, Group, Member
    from engine.protocol.offsets_store import CommittedOffset

    t0 = 1_700_000_000_000
    coordinator = _coordinator(tmp_path)
    try:
        def commit(group: str, partition: int, at_ms: int) -> None:
            coordinator.store.commit(group, {(TOPIC, partition): CommittedOffset(
                5, -1, None, at_ms)})

        # a group that never had members (protocol type unset): each offset by its commit
        for p, at in enumerate((t0, t0 + 30_000)):
            commit("standalone", p, at)
        # a consumer group that became Empty at t0: all its offsets from then, whenever
        # they were committed
        coordinator.groups["left"] = Group("left", protocol_type="consumer",
                                           empty_since_ms=t0)
        for p, at in enumerate((t0 - 10 * _RETENTION_MS, t0 + 50_000)):
            commit("left", p, at)
        # a Stable group's members keep its offsets (their metadata names no topics, so
        # Kafka takes every topic for subscribed)
        active = coordinator.groups["active"] = Group(
            "active", state=STABLE, protocol_type="consumer", protocol="range")
        active.add(Member("m", None, "c", "/h", 10000, 10000, "consumer",
                          [("range", b"")]))
        commit("active", 0, t0 - 10 * _RETENTION_MS)

        assert _expire_at(coordinator, monkeypatch, t0 + _RETENTION_MS - 1) == {
            "active": [0], "left": [0, 1], "standalone": [0, 1]}
        assert _expire_at(coordinator, monkeypatch, t0 + _RETENTION_MS + 1) == {
            "active": [0], "standalone": [1]}
        assert "left" not in coordinator.groups  # nothing left of it
        assert _expire_at(coordinator, monkeypatch, t0 + 30_000 + _RETENTION_MS + 1) == {
            "active": [0]}
    finally:
        coordinator.close()


# ------------------------------------------------------------ a partition whose log is offline

def test_a_commit_for_a_partition_whose_log_dir_is_offline_is_kept(tmp_path):
    """Kafka checks an OffsetCommit's partitions against its metadata, not their logs: a
    partition whose log dir is offline still exists, so its commit is accepted and kept
    beside the others'; a partition that does not exist is still refused."""
    import asyncio

    from engine.errors import KafkaStorageError
    from engine.protocol import errors as E

    class Reader:
        def log_offsets(self, topic, partition):
            if partition == 0:
                raise KafkaStorageError(f"{topic}-0: log dir /disk0 is offline")
            return object() if partition == 1 else None

    class Server:
        async def run_blocking(self, fn, *args):
            return fn(*args)

    coordinator = _coordinator(tmp_path)
    coordinator.reader = Reader()
    try:
        body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": p, "committed_offset": 10 + p,
                     "committed_leader_epoch": -1, "committed_metadata": ""}
                    for p in (0, 1, 2)]}]}
        session = {"allowed": lambda *_: True}
        answer = asyncio.run(coordinator._commit(body, 8, session, Server()))
        codes = {p["partition_index"]: p["error_code"]
                 for p in answer["topics"][0]["partitions"]}
        assert codes == {0: E.NONE, 1: E.NONE, 2: E.UNKNOWN_TOPIC_OR_PARTITION}
        stored = coordinator.store.get("g")
        assert {p: c.offset for (_, p), c in stored.items()} == {0: 10, 1: 11}
    finally:
        coordinator.close()
