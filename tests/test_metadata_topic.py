"""Kafka's `__remote_log_metadata` records, read from partition directories written as a
broker writes them (batches from the record builder, values framed as Kafka's
AbstractApiMessageSerde frames them, messages built from the schemas with the generic
encoder), decode to the cache state the embedded RLMM reaches with the same events."""

from __future__ import annotations

import struct

import pytest

from engine.common import Uuid
from engine.errors import CorruptRemoteLogMetadataError
from engine.message_codec import encode_message, parse_schema
from engine.records import CompressionType, RecordBatchBuilder, build_end_txn_marker
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.remote.metadata_cache import RemoteLogMetadataCache
from engine.remote.metadata_files import RemoteLogMetadataFiles
from engine.remote.metadata_topic import (
    MESSAGES,
    RemoteLogMetadataTopic,
    RemoteLogSegmentMetadataSnapshot,
    apply_snapshot,
    decode_record_value,
    encode_record_value,
)

S = RemoteLogSegmentState
D = RemotePartitionDeleteState
SCHEMAS = {key: parse_schema(name, text) for key, (name, _, text) in MESSAGES.items()}
T0 = 1_700_000_000_000
TIP = TopicIdPartition(Uuid.random(), "orders", 0)
TIP2 = TopicIdPartition(Uuid.random(), "orders", 1)
GONE = TopicIdPartition(Uuid.random(), "dropped", 0)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ---- events as Kafka's transforms turn them into messages --------------------------------

def tip_entry(tip):
    return {"name": tip.topic, "id": bytes(tip.topic_id), "partition": tip.partition}


def segment_fields(md, version):
    out = {"start_offset": md.start_offset, "end_offset": md.end_offset,
           "broker_id": md.broker_id, "max_timestamp_ms": md.max_timestamp_ms,
           "event_timestamp_ms": md.event_timestamp_ms,
           "segment_leader_epochs": [{"leader_epoch": e, "offset": o}
                                     for e, o in sorted(md.segment_leader_epochs.items())],
           "segment_size_in_bytes": md.segment_size_in_bytes,
           "custom_metadata": md.custom_metadata,
           "remote_log_segment_state": int(md.state), "txn_index_empty": md.txn_idx_empty}
    if version >= 1:
        out["broker_leader_epoch"] = 4
    return out


def message(event, version):
    """(api key, message dict) by the schemas' field names."""
    if isinstance(event, RemoteLogSegmentMetadata):
        sid = event.remote_log_segment_id
        return 0, {"remote_log_segment_id": {"topic_id_partition": tip_entry(
            sid.topic_id_partition), "id": bytes(sid.id)}, **segment_fields(event, version)}
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        sid = event.remote_log_segment_id
        out = {"remote_log_segment_id": {"topic_id_partition": tip_entry(
            sid.topic_id_partition), "id": bytes(sid.id)},
            "broker_id": event.broker_id, "event_timestamp_ms": event.event_timestamp_ms,
            "custom_metadata": event.custom_metadata,
            "remote_log_segment_state": int(event.state)}
        if version >= 1:
            out.update(broker_leader_epoch=4, end_offset=99)
        return 1, out
    if isinstance(event, RemotePartitionDeleteMetadata):
        out = {"topic_id_partition": tip_entry(event.topic_id_partition),
               "broker_id": event.broker_id, "event_timestamp_ms": event.event_timestamp_ms,
               "remote_partition_delete_state": int(event.state)}
        if version >= 1:
            out.update(broker_leader_epoch=4, end_offset=99)
        return 2, out
    return 3, {"segment_id": bytes(event.segment_id), **segment_fields(event, version)}


def value_of(event, version) -> bytes:
    api_key, msg = message(event, version)
    return (uvarint(1) + uvarint(api_key) + uvarint(version)
            + encode_message(SCHEMAS[api_key], version, msg, flexible=True))


def write_partition(log_dir, values, number=0, *, per_batch=2, roll_at=None):
    """`values` as records of `__remote_log_metadata-<number>`: null keys, `per_batch`
    records a batch (every other batch compressed, a commit marker after the first), a
    second segment file from offset `roll_at`."""
    directory = log_dir / f"__remote_log_metadata-{number}"
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[int, bytearray] = {}
    current = offset = 0
    for n, i in enumerate(range(0, len(values), per_batch)):
        if roll_at is not None and offset >= roll_at and current == 0:
            current = offset
        b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=3,
                               compression_type=CompressionType.GZIP if n % 2
                               else CompressionType.NONE)
        for v in values[i:i + per_batch]:
            b.append(v, key=None, timestamp=T0 + offset)
            offset += 1
        files.setdefault(current, bytearray()).extend(b.build())
        if n == 0:
            files[current].extend(build_end_txn_marker(True, base_offset=offset,
                                                       producer_id=7, producer_epoch=0))
            offset += 1
    for start, data in files.items():
        (directory / f"{start:020d}.log").write_bytes(bytes(data))
    return directory


# ---- a scenario touching every event of the state machine --------------------------------

def seg(tip, start, end, epochs, *, custom=None, txn_empty=False):
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, Uuid.random()), start, end,
                                    T0 + end, 1, T0 + start, 1000 + end, epochs, custom,
                                    S.COPY_SEGMENT_STARTED, txn_empty)


def update(md, state, at, custom=None):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, T0 + at, custom, state, 2)


def scenario():
    a = seg(TIP, 0, 99, {0: 0}, custom=b"\x01\x02", txn_empty=True)
    b = seg(TIP, 100, 199, {0: 100, 1: 150})
    c = seg(TIP, 200, 299, {1: 200})
    c_retry = seg(TIP, 200, 320, {1: 200, 2: 300})    # a later leader re-uploads: displaces c
    d = seg(TIP, 321, 400, {2: 321})
    e = seg(TIP2, 0, 49, {5: 0})
    f = seg(GONE, 0, 9, {0: 0})
    return [
        a, update(a, S.COPY_SEGMENT_FINISHED, 1, b"\x09"),
        b, e, update(b, S.COPY_SEGMENT_FINISHED, 2),
        c, update(c, S.COPY_SEGMENT_FINISHED, 3),
        c_retry, update(c_retry, S.COPY_SEGMENT_FINISHED, 4),
        d,                                                  # still copying
        update(e, S.COPY_SEGMENT_FINISHED, 5),
        update(a, S.DELETE_SEGMENT_STARTED, 6), update(a, S.DELETE_SEGMENT_FINISHED, 7),
        update(b, S.DELETE_SEGMENT_STARTED, 8),             # being deleted
        f, update(f, S.COPY_SEGMENT_FINISHED, 9),
        RemotePartitionDeleteMetadata(GONE, D.DELETE_PARTITION_MARKED, T0 + 10, 0),
        RemotePartitionDeleteMetadata(GONE, D.DELETE_PARTITION_STARTED, T0 + 11, 0),
        RemotePartitionDeleteMetadata(GONE, D.DELETE_PARTITION_FINISHED, T0 + 12, 0),
    ]


def embedded_caches(tmp_path, events) -> RemoteLogMetadataFiles:
    """The embedded RLMM fed `events`, read back through its files."""
    directory = tmp_path / "embedded" / "__remote_log_metadata"
    with EmbeddedRemoteLogMetadataManager(directory) as rlmm:
        for event in events:
            if isinstance(event, RemoteLogSegmentMetadata):
                rlmm.add_remote_log_segment_metadata(event)
            elif isinstance(event, RemoteLogSegmentMetadataUpdate):
                rlmm.update_remote_log_segment_metadata(event)
            else:
                rlmm.put_remote_partition_delete_metadata(event)
    return RemoteLogMetadataFiles(directory)


def state_of(cache: RemoteLogMetadataCache):
    return (cache.list_all_remote_log_segments(), cache.epoch_states(),
            cache.partition_delete_metadata,
            {e: cache.highest_offset_for_epoch(e) for e in range(6)})


@pytest.mark.parametrize("versions", [(0,), (1,), (0, 1)], ids=["v0", "v1", "mixed"])
def test_every_record_type_and_version_decodes_to_the_embedded_rlmm_state(tmp_path, versions):
    events = scenario()
    values = [value_of(ev, versions[i % len(versions)]) for i, ev in enumerate(events)]
    write_partition(tmp_path / "kafka", values[:9], 0, roll_at=5)
    write_partition(tmp_path / "kafka", values[9:], 1, per_batch=3)
    topic = RemoteLogMetadataTopic(sorted((tmp_path / "kafka").iterdir())).load()
    assert topic.records == len(events) and topic.skipped == []
    embedded = embedded_caches(tmp_path, events)
    for tip in (TIP, TIP2, GONE):
        assert state_of(topic.caches[tip]) == state_of(embedded.cache(tip)), tip
    got = topic.caches[TIP]
    # what the bucket readers take: FINISHED and still looked up
    finished = [md for md in got.list_all_remote_log_segments()
                if md.state == S.COPY_SEGMENT_FINISHED]
    assert [(md.start_offset, md.end_offset) for md in finished] == [(200, 299), (200, 320)]
    assert got.remote_log_segment_metadata(1, 250).end_offset == 320
    assert len(topic.caches[GONE]) == 0
    assert topic.caches[GONE].partition_delete_state == D.DELETE_PARTITION_FINISHED


def test_the_log_dir_is_found_from_any_of_its_paths(tmp_path):
    events = scenario()[:5]
    write_partition(tmp_path / "logs", [value_of(ev, 1) for ev in events], 7)
    (tmp_path / "logs" / "log-start-offset-checkpoint").write_text(
        "0\n2\norders 0 120\norders 1 0\n")
    for n, path in enumerate((tmp_path / "logs", tmp_path / "logs" / "__remote_log_metadata-7")):
        files = RemoteLogMetadataFiles(str(path))
        assert files.partitions() == {TIP, TIP2}
        assert files.log_start_offset(TIP) == 120
        assert state_of(files.cache(TIP)) == state_of(embedded_caches(
            tmp_path / f"e{n}", events).cache(TIP))
    assert RemoteLogMetadataFiles(tmp_path / "logs").cache(GONE) is None


def test_records_above_the_high_watermark_are_not_read(tmp_path):
    events = scenario()[:5]
    write_partition(tmp_path / "logs", [value_of(ev, 0) for ev in events], 0, per_batch=1)
    # offsets: a=0, marker=1, a finished=2, b=3, e=4, b finished=5
    (tmp_path / "logs" / "replication-offset-checkpoint").write_text(
        "0\n1\n__remote_log_metadata 0 5\n")
    cache = RemoteLogMetadataFiles(tmp_path / "logs").cache(TIP)
    assert [md.state for md in cache.list_all_remote_log_segments()] == [
        S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED]


def test_a_refused_event_is_skipped_as_kafka_skips_it(tmp_path, caplog):
    a = seg(TIP, 0, 9, {0: 0})
    unknown = seg(TIP, 10, 19, {0: 10})
    events = [a, update(unknown, S.COPY_SEGMENT_FINISHED, 1), update(a, S.COPY_SEGMENT_FINISHED, 2)]
    directory = write_partition(tmp_path, [value_of(ev, 1) for ev in events], 0, per_batch=1)
    topic = RemoteLogMetadataTopic([directory]).load()
    assert len(topic.skipped) == 1 and "offset 2" in topic.skipped[0]
    assert [md.state for md in topic.caches[TIP].list_all_remote_log_segments()] == [
        S.COPY_SEGMENT_FINISHED]


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("state", [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED,
                                   S.DELETE_SEGMENT_STARTED])
def test_snapshot_records_load_as_kafka_loaded_them(tmp_path, version, state):
    md = seg(TIP, 10, 29, {3: 10, 4: 20}, custom=b"c", txn_empty=True)
    snapshot = RemoteLogSegmentMetadataSnapshot(
        md.remote_log_segment_id.id, md.start_offset, md.end_offset, md.max_timestamp_ms,
        7, T0 + 50, md.segment_size_in_bytes, dict(md.segment_leader_epochs), b"c", state,
        True)
    decoded = decode_record_value(value_of(snapshot, version))
    assert decoded == snapshot
    cache = RemoteLogMetadataCache(TIP)
    apply_snapshot(cache, decoded)
    events = [RemoteLogSegmentMetadata(
        md.remote_log_segment_id, 10, 29, md.max_timestamp_ms, 7, T0 + 50,
        md.segment_size_in_bytes, md.segment_leader_epochs, b"c", S.COPY_SEGMENT_STARTED, True)]
    if state != S.COPY_SEGMENT_STARTED:
        events.append(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, T0 + 50, b"c",
                                                     state, 7))
    assert state_of(cache) == state_of(embedded_caches(tmp_path, events).cache(TIP))


def test_a_snapshot_record_in_the_topic_names_no_partition(tmp_path):
    md = seg(TIP, 0, 9, {0: 0})
    snapshot = RemoteLogSegmentMetadataSnapshot(md.remote_log_segment_id.id, 0, 9, 0, 0, 0,
                                                10, {0: 0}, None, S.COPY_SEGMENT_FINISHED)
    directory = write_partition(tmp_path, [value_of(md, 0), value_of(snapshot, 0)], 0,
                                per_batch=1)
    with pytest.raises(CorruptRemoteLogMetadataError, match="names no partition") as err:
        RemoteLogMetadataTopic([directory]).load()
    assert err.value.offset == 2 and err.value.file.endswith("00000000000000000000.log")
    assert err.value.position > 0


def test_the_schema_grammar_writes_kafkas_bytes():
    """RemoteLogSegmentMetadataRecord v1 encoded by hand from Kafka's JSON schema (field
    order, compact lengths + 1, a tagged-field section closing every struct, tags
    ascending) and by the engine."""
    tip = TopicIdPartition(Uuid.from_bytes(bytes(range(16))), "ab", 2)
    sid = Uuid.from_bytes(bytes(range(16, 32)))
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, sid), 5, 9, 77, 3, 88, 1234,
                                  {1: 5, 2: 7}, b"\xaa", S.COPY_SEGMENT_STARTED, True)
    by_hand = (b"\x01\x00\x01"                                  # frame 1, key 0, version 1
               + b"\x03ab" + bytes(range(16)) + struct.pack(">i", 2) + b"\x00"
               + bytes(range(16, 32)) + b"\x00"
               + struct.pack(">qqiqq", 5, 9, 3, 77, 88)
               + b"\x03" + struct.pack(">iq", 1, 5) + b"\x00" + struct.pack(">iq", 2, 7) + b"\x00"
               + struct.pack(">i", 1234) + b"\x02\xaa" + b"\x00"
               + b"\x02" + b"\x00\x01\x01" + b"\x01\x04" + struct.pack(">i", 6))
    assert value_of(md, 1) == by_hand[:-4] + struct.pack(">i", 4)
    assert encode_record_value(md, 1, broker_leader_epoch=6) == by_hand
    assert decode_record_value(by_hand) == md


# ---- hostile input ------------------------------------------------------------------------

def test_every_truncation_of_every_record_is_a_typed_error():
    events = scenario()
    for version in (0, 1):
        for event in events:
            value = value_of(event, version)
            for cut in range(len(value)):
                with pytest.raises(CorruptRemoteLogMetadataError):
                    decode_record_value(value[:cut])


@pytest.mark.parametrize("value, problem", [
    (b"\x00\x00\x00", "frame version 0"),
    (b"\x02\x00\x00", "frame version 2"),
    (b"\x01\x04\x00\x00", "api key 4"),
    (b"\x01\x00\x02\x00", "version 2"),
    (b"\x01\x80\x80\x02\x00", "too large"),
    (b"\x01\xff\xff\xff\xff\xff", "longer than 5"),
])
def test_unknown_frames_keys_and_versions_are_typed_errors(value, problem):
    with pytest.raises(CorruptRemoteLogMetadataError, match=problem):
        decode_record_value(value)


def test_lying_lengths_and_bad_values_are_typed_errors():
    md = seg(TIP, 0, 9, {0: 0})
    good = value_of(md, 0)
    assert good[3] == 1 + len("orders")
    with pytest.raises(CorruptRemoteLogMetadataError, match="Name"):
        decode_record_value(good[:3] + b"\x7f" + good[4:])          # topic name too long
    with pytest.raises(CorruptRemoteLogMetadataError, match="left over"):
        decode_record_value(good + b"\x00")
    epochs_at = 3 + (1 + 6 + 16 + 4 + 1) + (16 + 1) + (8 + 8 + 4 + 8 + 8)
    assert good[epochs_at] == 2                                     # one epoch entry
    with pytest.raises(CorruptRemoteLogMetadataError, match="SegmentLeaderEpochs"):
        decode_record_value(good[:epochs_at] + b"\xff\xff\x03" + good[epochs_at + 1:])
    bad_state = encode_message(SCHEMAS[0], 0, {**message(md, 0)[1],
                                               "remote_log_segment_state": 9}, flexible=True)
    with pytest.raises(CorruptRemoteLogMetadataError, match="9"):
        decode_record_value(b"\x01\x00\x00" + bad_state)
    no_epochs = encode_message(SCHEMAS[0], 0, {**message(md, 0)[1],
                                               "segment_leader_epochs": []}, flexible=True)
    with pytest.raises(CorruptRemoteLogMetadataError, match="epochs"):
        decode_record_value(b"\x01\x00\x00" + no_epochs)


def test_damaged_files_name_file_position_and_offset(tmp_path):
    events = scenario()[:3]
    values = [value_of(ev, 0) for ev in events]
    directory = write_partition(tmp_path / "a", values, 0, per_batch=1)
    path = directory / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF                                                # inside the last record
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRemoteLogMetadataError) as err:
        RemoteLogMetadataTopic([directory]).load()
    assert err.value.file == str(path) and err.value.offset == 3 and err.value.position > 0

    broken = values[1][:-4]                                          # a record cut short
    directory = write_partition(tmp_path / "b", [values[0], broken, values[2]], 0, per_batch=1)
    with pytest.raises(CorruptRemoteLogMetadataError, match="record at offset 2") as err:
        RemoteLogMetadataTopic([directory]).load()
    assert err.value.offset == 2 and err.value.position is not None

    directory = write_partition(tmp_path / "c", [values[0], None], 0, per_batch=1)
    with pytest.raises(CorruptRemoteLogMetadataError, match="null value") as err:
        RemoteLogMetadataTopic([directory]).load()
    assert err.value.offset == 2


def test_a_batch_cut_short_is_a_write_in_progress_only_at_the_uncommitted_tail(tmp_path):
    events = scenario()[:5]
    values = [value_of(ev, 1) for ev in events]
    # two files: offsets 0-2 (a, a marker, a finished) and 3-5 (b, e, b finished)
    directory = write_partition(tmp_path / "logs", values, 0, per_batch=1, roll_at=3)
    first, last = sorted(directory.glob("*.log"))
    last.write_bytes(last.read_bytes()[:-9])                        # the active tail torn
    topic = RemoteLogMetadataTopic([directory]).load()
    assert topic.records == 4                                       # b's update is cut off
    assert [md.state for md in topic.caches[TIP].list_all_remote_log_segments()] == [
        S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED]

    checkpoint = tmp_path / "logs" / "replication-offset-checkpoint"
    checkpoint.write_text("0\n1\n__remote_log_metadata 0 6\n")      # ... but was committed
    with pytest.raises(CorruptRemoteLogMetadataError, match="high watermark 6") as err:
        RemoteLogMetadataTopic([directory]).load()
    assert err.value.file == str(last) and err.value.offset == 5
    checkpoint.unlink()

    data = bytearray(first.read_bytes())
    struct.pack_into(">i", data, 8, 1 << 20)                        # a length that lies
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptRemoteLogMetadataError, match="not a whole batch") as err:
        RemoteLogMetadataTopic([directory]).load()
    assert err.value.file == str(first) and err.value.position == 0 and err.value.offset == 0


def test_damaged_values_raise_only_typed_errors():
    import random

    rng = random.Random(405)
    values = [value_of(ev, v) for ev in scenario() for v in (0, 1)]
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(3000):
        data = bytearray(rng.choice(values))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            decode_record_value(bytes(data))
            outcomes["decoded"] += 1
        except CorruptRemoteLogMetadataError as exc:
            assert exc.position is not None
            outcomes["refused"] += 1
    assert outcomes["decoded"] and outcomes["refused"]
