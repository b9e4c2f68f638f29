"""Producer-state snapshots: byte layout, CRC-32C, corruption errors and real Kafka files."""

import struct
from pathlib import Path

import crc32c as crc32c_package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import CorruptSnapshotError
from engine.log.producer_state import (
    ProducerSnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_files,
    offset_from_snapshot_file,
    read_snapshot,
    snapshot_file,
    write_snapshot,
)

DATADIR = (Path(__file__).resolve().parents[1].parent / "shared" / "vectors"
           / "codecrafters-kafka-tester-kraft-datadir")
EMPTY_SNAPSHOT = bytes.fromhex("0001 48674bc7 00000000")

int64 = st.integers(-(2**63), 2**63 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
entries_st = st.lists(st.builds(ProducerSnapshotEntry, int64, st.integers(-(2**15), 2**15 - 1),
                                int32, int64, int32, int64, int32, int64), max_size=20)


@settings(max_examples=200, deadline=None)
@given(entries=entries_st)
def test_round_trip_and_layout(entries):
    data = encode_snapshot(entries)
    assert len(data) == 10 + 46 * len(entries)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, len(entries))
    assert crc == crc32c_package.crc32c(data[6:])  # CRC-32C over [6, end)
    assert decode_snapshot(data) == entries
    if entries:
        e = entries[0]
        assert data[10:56] == struct.pack(">qhiqiqiq", e.producer_id, e.producer_epoch,
                                          e.last_sequence, e.last_offset, e.offset_delta,
                                          e.timestamp, e.coordinator_epoch,
                                          e.current_txn_first_offset)


def test_empty_snapshot_bytes():
    assert encode_snapshot([]) == EMPTY_SNAPSHOT
    assert decode_snapshot(EMPTY_SNAPSHOT) == []


def corrupt(data, at, value):
    out = bytearray(data)
    out[at] = value
    return bytes(out)


ONE = encode_snapshot([ProducerSnapshotEntry(5, 1, 9, 100, 2, 1700000000000, -1, -1)])


@pytest.mark.parametrize("data, reason", [
    (b"", "no version"),
    (corrupt(ONE, 1, 2), "unknown version 2"),
    (corrupt(ONE, 1, 0), "unknown version 0"),
    (ONE[:8], "shorter than its 10-byte header"),
    (ONE[:-1], "does not match its 1 entries"),
    (ONE + b"\x00", "does not match"),
    (corrupt(ONE, 20, ONE[20] ^ 1), "CRC mismatch"),
    (corrupt(ONE, 3, ONE[3] ^ 0x80), "CRC mismatch"),
    (EMPTY_SNAPSHOT[:6] + struct.pack(">i", -1), "entry count -1"),
])
def test_corrupt_snapshots_raise(tmp_path, data, reason):
    path = tmp_path / "00000000000000000007.snapshot"
    path.write_bytes(data)
    with pytest.raises(CorruptSnapshotError, match=reason) as err:
        read_snapshot(path)
    assert err.value.file == str(path) and str(path) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_fields_out_of_range_are_refused():
    with pytest.raises(ValueError, match="entry 0"):
        encode_snapshot([ProducerSnapshotEntry(1, 2**15, 0, 0, 0, 0, 0, 0)])


def test_write_is_atomic_and_replaces(tmp_path):
    path = snapshot_file(tmp_path, 42)
    assert path.name == "00000000000000000042.snapshot" and offset_from_snapshot_file(path) == 42
    path.write_bytes(b"garbage that is longer than the new snapshot")
    write_snapshot(path, [])
    assert path.read_bytes() == EMPTY_SNAPSHOT and not list(tmp_path.glob("*.tmp"))
    write_snapshot(snapshot_file(tmp_path, 7), [], sync=False)
    (tmp_path / "not-a-snapshot.snapshot").write_bytes(b"")
    assert [o for o, _ in list_snapshot_files(tmp_path)] == [7, 42]
    with pytest.raises(ValueError):
        offset_from_snapshot_file("12.snapshot")
    with pytest.raises(ValueError):
        snapshot_file(tmp_path, -1)


REAL_SNAPSHOTS = {
    ("e856b9a", "foo-0", 3): [ProducerSnapshotEntry(0, 0, 2, 2, 0, 1725272041932, -1, -1)],
    ("510714e", "foo-0", 1): [ProducerSnapshotEntry(0, 0, 0, 0, 0, 1726045973899, -1, -1)],
    ("e856b9a", "__cluster_metadata-0", 81): [],
    ("e856b9a", "__cluster_metadata-0", 116): [],
    ("510714e", "__cluster_metadata-0", 129): [],
}


@pytest.mark.parametrize("commit, partition, offset", sorted(REAL_SNAPSHOTS))
def test_real_kafka_snapshots(tmp_path, commit, partition, offset):
    directory = DATADIR / commit / "kraft-combined-logs" / partition
    if not directory.is_dir():
        pytest.fail(f"conformance vectors not found at {directory}")
    path = snapshot_file(directory, offset)
    entries = read_snapshot(path)
    assert entries == REAL_SNAPSHOTS[commit, partition, offset]
    original = path.read_bytes()
    assert len(original) == 10 + 46 * len(entries)
    assert struct.unpack_from(">I", original, 2)[0] == crc32c_package.crc32c(original[6:])
    copy = snapshot_file(tmp_path, offset)
    write_snapshot(copy, entries)
    assert copy.read_bytes() == original
    assert read_snapshot(copy) == entries
    listed = [o for o, _ in list_snapshot_files(directory)]
    assert offset in listed and listed == sorted(listed)
