"""What `serve`'s read APIs answer where Kafka's broker has a rule a client relies on: an
expired remote read (no error, no records) and a refused one (UNKNOWN_SERVER_ERROR) in
Fetch, the response byte limit across partitions (KIP-74), leader epochs checked, ListOffsets
bounded by the high watermark or last stable offset, full fetches that close a session, and
ListOffsets v0. The broker is the one `serve` runs (ReadBroker over a tiered broker's logs
and RLM, in this process); every request and answer goes through the protocol codec as on
the wire."""

from __future__ import annotations

import functools
import logging
import threading

import pytest
from serve_support import CODECS, TOPIC, build_tiered_broker

from engine.cli._broker import BrokerSession, LocalReads
from engine.config import load_broker_config
from engine.errors import RemoteLogReaderRejectedError
from engine.log.log_manager import LogManager
from engine.protocol import codec
from engine.protocol import errors as E
from engine.protocol.acl import CLUSTER_NAME, Acl, Authorizer
from engine.protocol.broker import Endpoint, ReadBroker
from engine.protocol.log_reader import LogReader
from engine.records import MemoryRecords, RecordBatchBuilder
from engine.rlm import fetch as rlm_fetch

FETCH, LIST_OFFSETS = 1, 2


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    return build_tiered_broker(tmp_path_factory.mktemp("answers"))


@pytest.fixture(scope="module")
def broker(tiered):
    with BrokerSession(load_broker_config(tiered.config), tiered.config) as session:
        yield ReadBroker(LogReader(session.log_manager, session.remote_log_manager()))


def _wire(api_key: int, version: int, body: dict, answer) -> dict:
    """`body` encoded and decoded as a request, `answer(decoded body)` encoded and decoded as
    the response: what a client sees."""
    req = codec.decode_request(codec.encode_request(api_key, version, 1, "t", body)[4:])
    frame = b"".join(bytes(p) for p in codec.encode_response(
        api_key, version, 1, answer(req.body)))
    return codec.decode_response(api_key, version, frame[4:])[1]


def fetch(broker, version: int, parts: list, max_bytes: int = 1 << 20,
          read_committed: bool = False, **extra) -> dict:
    body = {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": int(read_committed), "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": parts}], **extra}

    def answer(req):
        error = broker.fetch_session_error(req)
        if error:
            return {"error_code": error, "session_id": 0, "responses": []}
        targets = broker.fetch_targets(req, version)
        responses, _ = broker.fetch_once(targets, req["max_bytes"], read_committed, version)
        return {"error_code": E.NONE, "session_id": 0, "responses": responses}

    return _wire(FETCH, version, body, answer)


def _part(p: int, offset: int = 0, max_bytes: int = 1 << 20, **extra) -> dict:
    return {"partition": p, "fetch_offset": offset, "partition_max_bytes": max_bytes, **extra}


def _sizes(resp) -> list[int]:
    return [memoryview(p["records"]).nbytes for p in resp["responses"][0]["partitions"]]


# ------------------------------------------------------------------------ remote reads

@pytest.mark.parametrize("read_committed", [False, True])
def test_an_expired_remote_read_answers_no_error_and_no_records(broker, tiered,
                                                                monkeypatch, read_committed):
    """As Kafka's expired DelayedRemoteFetch: no error, no records, and no aborted
    transactions (null, as Kafka's placeholder read carries none) under read_committed."""
    # every remote read hangs past remote.fetch.max.wait.ms; a local one is answered
    release = threading.Event()
    read_remote = rlm_fetch.read_remote

    def hung(*args, **kwargs):
        release.wait(60)
        return read_remote(*args, **kwargs)

    monkeypatch.setattr(rlm_fetch, "read_remote", hung)
    # no read is served on the caller's thread: every one goes to the reader pool
    monkeypatch.setattr(broker.reader.rlm.reader, "inline_reads", False)
    monkeypatch.setattr(broker.reader.rlm.reader, "fetch_max_wait_ms", 50)
    local = tiered.offsets[1]["earliest-local"]
    try:
        resp = fetch(broker, 12, [_part(0, 0), _part(1, local)],
                     read_committed=read_committed)
    finally:
        release.set()
    tiered_row, local_row = resp["responses"][0]["partitions"]
    assert tiered_row["error_code"] == E.NONE, tiered_row
    assert memoryview(tiered_row["records"]).nbytes == 0
    assert tiered_row["aborted_transactions"] is None
    assert tiered_row["high_watermark"] == tiered.offsets[0]["latest"]
    assert (local_row["error_code"], memoryview(local_row["records"]).nbytes > 0) == (0, True)


def test_a_remote_read_refused_by_a_full_reader_queue_is_unknown_server_error(
        broker, monkeypatch):
    def full(*args, **kwargs):
        raise RemoteLogReaderRejectedError("the remote log reader queue is full")

    monkeypatch.setattr(broker.reader.rlm.reader_pool, "submit", full)
    monkeypatch.setattr(broker.reader.rlm.reader, "inline_reads", False)  # to the reader pool
    row = fetch(broker, 12, [_part(0, 0)])["responses"][0]["partitions"][0]
    assert row["error_code"] == E.UNKNOWN_SERVER_ERROR


# --------------------------------------------------------------------- KIP-74 limits

def test_max_bytes_bounds_the_response_past_the_first_batch(broker, tiered):
    local = [tiered.offsets[p]["earliest-local"] for p in range(len(CODECS))]
    for offsets in ([0] * len(CODECS), local):  # remote reads, local reads
        resp = fetch(broker, 12, [_part(p, offsets[p]) for p in range(len(CODECS))],
                     max_bytes=3000)
        sizes = _sizes(resp)
        first = next(s for s in sizes if s)
        # the first partition with data may pass max_bytes by one batch only; the response
        # is never more than max_bytes otherwise
        one = fetch(broker, 12, [_part(0, offsets[0], 1)], max_bytes=1)
        assert sizes[0] == first and (first <= 3000 or first == _sizes(one)[0]), sizes
        assert sum(sizes) <= max(3000, first), sizes
        # past the first records, a partition gets the whole batches within its own
        # partition_max_bytes too (no batch here fits in 1 byte)
        resp = fetch(broker, 12, [_part(p, offsets[p], 1) for p in range(len(CODECS))],
                     max_bytes=1 << 20)
        sizes = _sizes(resp)
        assert sizes[0] > 0 and sizes[1:] == [0] * (len(CODECS) - 1), sizes


# ------------------------------------------------------------------------ leader epochs

def list_offsets(broker, version: int, parts: list, read_committed: bool = False) -> list:
    body = {"replica_id": -1, "isolation_level": int(read_committed),
            "topics": [{"name": TOPIC, "partitions": parts}]}
    resp = _wire(LIST_OFFSETS, version, body, lambda req: broker.list_offsets(req, version))
    return resp["topics"][0]["partitions"]


def test_current_leader_epoch_is_checked_in_fetch_and_list_offsets(broker, monkeypatch):
    # the partition's leader epoch as Metadata gives it (5 here); -1 is not checked
    assert broker.leader_epoch_of(TOPIC, 0) == broker.metadata(
        {"topics": None}, 12, Endpoint(0, "h", 1))["topics"][0]["partitions"][0]["leader_epoch"]
    monkeypatch.setattr(broker, "leader_epoch_of", lambda topic, partition: 5)
    want = {4: E.FENCED_LEADER_EPOCH, 6: E.UNKNOWN_LEADER_EPOCH, 5: E.NONE, -1: E.NONE}
    for current, code in want.items():
        row = fetch(broker, 12, [_part(0, 0, current_leader_epoch=current)]
                    )["responses"][0]["partitions"][0]
        assert row["error_code"] == code, (current, row)
        assert (memoryview(row["records"]).nbytes > 0) == (code == E.NONE)
        [row] = list_offsets(broker, 9, [{"partition_index": 0, "timestamp": -1,
                                          "current_leader_epoch": current}])
        assert row["error_code"] == code, (current, row)


# ------------------------------------------------------------- ListOffsets bounds

@pytest.fixture
def open_transaction(tmp_path):
    """A partition of 10 records (timestamps 1000-1009) and then an open transaction of 5
    (2000-2004): its last stable offset is 10, its high watermark 15."""
    manager = LogManager([str(tmp_path)])
    manager.get_or_create_log(TOPIC, 0)
    plain = RecordBatchBuilder()
    for i in range(10):
        plain.append(b"v%d" % i, timestamp=1000 + i)
    manager.append_as_leader(TOPIC, 0, plain.build(), 0)
    txn = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0,
                             is_transactional=True)
    for i in range(5):
        txn.append(b"t%d" % i, timestamp=2000 + i)
    manager.append_as_leader(TOPIC, 0, txn.build(), 0)
    unified = manager.get_log(TOPIC, 0)
    assert (unified.last_stable_offset, unified.high_watermark) == (10, 15)
    yield ReadBroker(LogReader(manager, LocalReads(manager)))
    manager.shutdown()


def test_list_offsets_by_time_stop_at_the_last_stable_offset(open_transaction):
    def offsets(spec, read_committed):
        for version in (5, 9):
            [row] = list_offsets(open_transaction, version, [
                {"partition_index": 0, "timestamp": spec}], read_committed)
            assert row["error_code"] == E.NONE, row
            yield row["timestamp"], row["offset"]

    # read_committed sees nothing at or past the open transaction: -1/-1 (Kafka's answer
    # when the offset found is not below the last stable offset)
    assert set(offsets(-3, True)) == {(-1, -1)}
    assert set(offsets(2000, True)) == {(-1, -1)}
    assert set(offsets(1005, True)) == {(1005, 5)}
    assert set(offsets(-1, True)) == {(-1, 10)}
    # read_uncommitted, below the high watermark: found
    assert set(offsets(-3, False)) == {(2004, 14)}
    assert set(offsets(2000, False)) == {(2000, 10)}


def test_a_broker_without_a_tier_answers_fetch_from_its_local_logs(open_transaction):
    """A broker with remote.log.storage.system.enable=false reads through LocalReads:
    Fetch answers each partition from the local log, read_committed stopping at the last
    stable offset, an offset past the end its partition's OFFSET_OUT_OF_RANGE."""
    resp = fetch(open_transaction, 12, [_part(0)])
    [row] = resp["responses"][0]["partitions"]
    assert (row["error_code"], row["high_watermark"]) == (E.NONE, 15)
    assert [b.last_offset for b in MemoryRecords(bytes(row["records"])).batches()] == [9, 14]
    [row] = fetch(open_transaction, 12, [_part(0)], read_committed=True)["responses"][0][
        "partitions"]
    assert [b.last_offset for b in MemoryRecords(bytes(row["records"])).batches()] == [9]
    [row] = fetch(open_transaction, 12, [_part(0, offset=99)])["responses"][0]["partitions"]
    assert row["error_code"] == E.OFFSET_OUT_OF_RANGE


# ------------------------------------------------------------------ ListOffsets v0

def test_list_offsets_v0_answers_offsets_arrays_from_the_local_segments(broker, tiered):
    """Kafka's v0 (legacyFetchOffsetsBefore): the local segments' base offsets and the log
    end offset, highest first, at most max_num_offsets of them; earliest is the first
    local offset (tiered records are not listed), unlike v1+ where it is the log start."""
    unified = broker.reader.log_manager.get_log(TOPIC, 0)
    bases = [seg.base_offset for seg in unified.segments]
    end = unified.high_watermark
    assert len(bases) > 1 and end == unified.log_end_offset

    def v0(timestamp, max_num):
        body = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "timestamp": timestamp, "max_num_offsets": max_num}]}]}
        [row] = _wire(LIST_OFFSETS, 0, body, lambda req: broker.list_offsets(req, 0)
                      )["topics"][0]["partitions"]
        return row["error_code"], row["old_style_offsets"]

    earliest_local = tiered.offsets[0]["earliest-local"]
    assert earliest_local == bases[0] > 0
    assert v0(-2, 1) == v0(-2, 10) == (E.NONE, [earliest_local])
    assert list_offsets(broker, 1, [{"partition_index": 0, "timestamp": -2}]
                        )[0]["offset"] == 0  # v1+: the log start, in the tier
    every = sorted({*bases, end}, reverse=True)
    assert v0(-1, 1) == (E.NONE, [end])
    assert v0(-1, 100) == (E.NONE, every)
    assert v0(-1, 2) == (E.NONE, every[:2])
    assert v0(-1, 0) == (E.NONE, [])
    # by time: the segments modified at or before it (files are never older than 1 ms)
    assert v0(1, 5) == (E.NONE, [])
    assert v0(2**62, 100) == (E.NONE, every)
    # only latest and earliest of the negative specs exist in v0
    assert v0(-3, 1) == (E.UNSUPPORTED_VERSION, [])


# ------------------------------------------------------------------ Metadata and ACLs

def _acl(principal, resource_type, name, operation):
    return Acl(principal, resource_type, name, "literal", operation, "allow")


def test_metadata_by_topic_id_hides_the_name_and_computes_authorized_operations(broker):
    authorizer = Authorizer([_acl("User:alice", "topic", TOPIC, "read"),
                             _acl("User:alice", "cluster", CLUSTER_NAME, "describe")],
                            frozenset(), allow_if_no_acl=False)
    topic_id = broker.topic_ids[TOPIC]

    def metadata(principal, version, body):
        allowed = functools.partial(authorizer.allowed, principal)
        return _wire(3, version, body, lambda req: broker.metadata(
            req, version, Endpoint(0, "h", 1), allowed))

    by_id = {"topics": [{"topic_id": topic_id, "name": None}],
             "include_topic_authorized_operations": True}
    [row] = metadata("User:bob", 12, by_id)["topics"]
    assert (row["error_code"], row["name"], row["topic_id"]) == (
        E.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
    assert row["partitions"] == [] and row["topic_authorized_operations"] == -2**31
    [row] = metadata("User:alice", 12, by_id)["topics"]
    assert (row["error_code"], row["name"], len(row["partitions"])) == (0, TOPIC, len(CODECS))
    # READ, and DESCRIBE that READ implies (AclOperation codes 3 and 8)
    assert row["topic_authorized_operations"] == (1 << 3) | (1 << 8)
    # not asked: Kafka's default
    [row] = metadata("User:alice", 12, {"topics": [{"topic_id": topic_id, "name": None}]}
                     )["topics"]
    assert row["topic_authorized_operations"] == -2**31
    cluster = {"topics": None, "include_cluster_authorized_operations": True}
    assert metadata("User:alice", 10, cluster)["cluster_authorized_operations"] == 1 << 8
    assert metadata("User:bob", 10, cluster)["cluster_authorized_operations"] == 0
    # no authorizer: every operation the resource type has
    [row] = _wire(3, 12, by_id, lambda req: broker.metadata(req, 12, Endpoint(0, "h", 1))
                  )["topics"]
    assert row["topic_authorized_operations"] == sum(1 << c for c in (3, 4, 5, 6, 7, 8, 10, 11))


# ----------------------------------------------------------------------- fetch sessions

def test_a_full_fetch_naming_a_session_is_served(broker):
    # epoch 0 (a new session) or -1 (the last request of one) makes a full fetch: Kafka
    # closes the session it names and serves it; an incremental one names a session this
    # broker never has
    for epoch in (0, -1):
        resp = fetch(broker, 12, [_part(0)], session_id=7, session_epoch=epoch)
        assert (resp["error_code"], resp["session_id"]) == (E.NONE, 0), epoch
        assert _sizes(resp)[0] > 0
    resp = fetch(broker, 12, [_part(0)], session_id=7, session_epoch=1)
    assert (resp["error_code"], resp["responses"]) == (E.FETCH_SESSION_ID_NOT_FOUND, [])


# ---------------------------------------------------------------- damaged metadata

def test_damaged_remote_log_metadata_answers_list_offsets_with_a_storage_error(
        tmp_path, caplog):
    tiered = build_tiered_broker(tmp_path)
    damaged = next(f for d in ("d1", "d2") for f in (
        tiered.dirs[d] / "__remote_log_metadata").glob(f"{TOPIC}-0-*/*.log"))
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(data)
    with BrokerSession(load_broker_config(tiered.config), tiered.config) as session:
        broker = ReadBroker(LogReader(session.log_manager, session.remote_log_manager()))
        with caplog.at_level(logging.INFO, logger="engine.protocol.broker"):
            rows = list_offsets(broker, 9, [{"partition_index": p, "timestamp": -2}
                                            for p in (0, 1)])
    assert [r["error_code"] for r in rows] == [E.KAFKA_STORAGE_ERROR, E.NONE], rows
    [record] = [r for r in caplog.records if r.name == "engine.protocol.broker"]
    assert record.levelno == logging.ERROR and str(damaged) in record.getMessage()


# ---------------------------------------------------------------------- topic ids

def test_topic_ids_are_the_log_managers(tmp_path):
    """A topic's id is the LogManager's (engine.log.topic_ids), one rule for `run` and
    `serve`: the one its partitions record, written to a partition that records none, and
    partitions that disagree are an InconsistentTopicIdError naming each one, not an id
    picked among them."""
    from engine.common import Uuid
    from engine.errors import InconsistentTopicIdError
    from engine.log.checkpoint import PartitionMetadataFile

    with LogManager([str(tmp_path)]) as manager:
        for p in (0, 1, 2):
            manager.get_or_create_log(TOPIC, p)
    (tmp_path / f"{TOPIC}-2" / "partition.metadata").unlink()
    with LogManager([str(tmp_path)]) as manager:
        broker = ReadBroker(LogReader(manager, LocalReads(manager)))
        topic_id = manager.topic_id(TOPIC)
        assert broker.topic_ids == {TOPIC: bytes(topic_id)}
        assert manager.get_log(TOPIC, 2).partition_metadata.read().topic_id == topic_id
    ids = {0: topic_id, 1: Uuid.random()}
    for p, i in ids.items():
        PartitionMetadataFile(tmp_path / f"{TOPIC}-{p}" / "partition.metadata").write(i)
    with LogManager([str(tmp_path)]) as manager, \
            pytest.raises(InconsistentTopicIdError) as caught:
        ReadBroker(LogReader(manager, LocalReads(manager)))
    for p, i in ids.items():
        assert f"{TOPIC}-{p} has {i}" in str(caught.value)
