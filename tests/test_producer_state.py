"""Producer-state snapshots: byte layout, CRC-32C, corruption errors and real Kafka files."""

import struct
from pathlib import Path

import crc32c as crc32c_package
import pytest
from broker_support import engine_in_process
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


# ---- producer state kept by UnifiedLog ------------------------------------------------------

import logging  # noqa: E402
import os  # noqa: E402

from engine.log import AbortedTxn, UnifiedLog  # noqa: E402
from engine.log.producer_state import ProducerStateManager  # noqa: E402
from engine.records import RecordBatchBuilder, build_end_txn_marker  # noqa: E402

T0 = 1_700_000_000_000


def _data(producer_id=-1, epoch=-1, seq=-1, n=2, txn=False, ts=T0):
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=txn)
    for i in range(n):
        b.append(b"v%d" % i, key=b"k", timestamp=ts + i)
    return b.build()


def _marker(producer_id, commit, *, epoch=0, coordinator_epoch=7, ts=T0 + 100):
    return build_end_txn_marker(commit, base_offset=0, producer_id=producer_id,
                                producer_epoch=epoch, timestamp=ts,
                                coordinator_epoch=coordinator_epoch)


def _txn_indexes(log):
    return {s.base_offset: s.txn_index.all_aborted_txns() for s in log.segments}


def _scenario(log):
    """Idempotent producer 1, transactions of 2 (aborted) and 3 (committed) interleaved,
    with rolls in between. Returns the offsets of interest."""
    log.append_as_leader(_data(1, 0, 0, n=3), 0)                     # 0-2
    first2, _ = log.append_as_leader(_data(2, 5, 0, txn=True), 0)    # 3-4
    assert log.last_stable_offset == 3 and log.high_watermark == 5
    log.roll()
    first3, _ = log.append_as_leader(_data(3, 1, 10, txn=True), 0)   # 5-6
    log.append_as_leader(_data(1, 0, 3, n=2), 0)                     # 7-8
    abort2, _ = log.append_as_leader(_marker(2, False, epoch=5), 0)  # 9
    assert log.last_stable_offset == first3 == 5
    log.roll()
    log.append_as_leader(_data(2, 6, 2, txn=True), 1)                # 10-11 (new txn)
    _commit3, _ = log.append_as_leader(_marker(3, True, epoch=1), 1)  # 12
    abort2b, _ = log.append_as_leader(_marker(2, False, epoch=6), 1)  # 13
    assert log.last_stable_offset == log.high_watermark == 14
    return first2, first3, abort2, abort2b


def test_log_tracks_producers_transactions_and_the_txn_index(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0")
    first2, first3, abort2, abort2b = _scenario(log)
    assert _txn_indexes(log) == {
        0: [], 5: [AbortedTxn(2, first2, abort2, first3)], 10: [AbortedTxn(2, 10, abort2b, 14)]}
    assert log.collect_aborted_transactions(0, 14) == [AbortedTxn(2, 3, 9, 5),
                                                        AbortedTxn(2, 10, 13, 14)]
    assert log.collect_aborted_transactions(10, 12) == [AbortedTxn(2, 10, 13, 14)]
    # Snapshots at each roll, named by the new segment's base offset, hold the state then.
    at5 = {e.producer_id: e for e in read_snapshot(log.producer_snapshot_file(5))}
    assert at5[1].last_sequence == 2 and at5[1].last_offset == 2
    assert at5[2].current_txn_first_offset == 3 and at5[2].producer_epoch == 5
    at10 = {e.producer_id: e for e in read_snapshot(log.producer_snapshot_file(10))}
    assert at10[1].last_sequence == 4 and at10[1].last_offset == 8
    assert at10[1].offset_delta == 1
    assert at10[2].current_txn_first_offset == -1 and at10[2].coordinator_epoch == 7
    assert at10[3].current_txn_first_offset == 5 and at10[3].last_sequence == 11
    assert log.producer_snapshot_file(7) is None
    state = log.producer_state.snapshot_entries()
    log.close()
    assert read_snapshot(tmp_path / "t-0" / "00000000000000000014.snapshot") == state


def test_recovery_rebuilds_producer_state_and_txn_indexes(tmp_path, caplog):
    d = tmp_path / "t-0"
    log = UnifiedLog.open(d)
    _scenario(log)
    log.append_as_leader(_data(4, 0, 0, txn=True), 1)  # left open: 14-15
    expected_txns, expected_state = _txn_indexes(log), log.producer_state.snapshot_entries()
    log.close()
    for p in list(d.glob("*.txnindex")) + [d / "00000000000000000016.snapshot"]:
        p.unlink()
    log = UnifiedLog.open(d, recovery_point=0)  # unclean: every segment is scanned
    assert _txn_indexes(log) == expected_txns
    assert log.producer_state.snapshot_entries() == expected_state
    log.close()
    # Recovery from offset 10: the state starts from the snapshot at 10; a damaged one is
    # deleted and the one at 5 is used instead.
    (d / "00000000000000000016.snapshot").unlink()
    (d / "00000000000000000010.txnindex").unlink()
    (d / "00000000000000000010.snapshot").write_bytes(b"\x00\x01garbage")
    with caplog.at_level(logging.WARNING):
        log = UnifiedLog.open(d, recovery_point=10)
    assert "unreadable producer snapshot" in caplog.text
    assert not (d / "00000000000000000010.snapshot").exists()
    assert _txn_indexes(log) == expected_txns
    assert log.producer_state.snapshot_entries() == expected_state
    assert log.last_stable_offset == 14
    # Truncation into the open transaction and before the second abort rebuilds too.
    log.truncate_to(12)  # the COMMIT of 3 is gone: its transaction (from 5) is open again
    assert log.last_stable_offset == 5 and _txn_indexes(log)[10] == []
    assert {p.name for p in d.glob("*.snapshot")} == {"00000000000000000005.snapshot"}
    log.append_as_leader(_marker(2, False, epoch=6), 1)
    assert _txn_indexes(log)[10] == [AbortedTxn(2, 10, 12, 5)]
    log.close()


def test_snapshots_go_with_their_segments(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", config={"retention.ms": -1})
    _scenario(log)
    log.delete_records(10)
    assert log.delete_old_segments() == 2
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert names == ["00000000000000000010.snapshot"]  # 5 went with segment 5
    log.close()
    log = UnifiedLog.open(tmp_path / "t-0", log_start_offset=10)
    assert log.last_stable_offset == 14 and 3 in {e.producer_id for e in
                                                  log.producer_state.snapshot_entries()}
    log.close()


def test_manager_state_machine_directly(tmp_path):
    state = ProducerStateManager(tmp_path)
    state.update(9, 0, 2**31 - 2, 100, 104, T0, False)  # the sequence wraps past int32 max
    assert state.producers[9].last_sequence == 2
    assert state.end_txn(9, 0, 105, T0, 3, True) is None  # no transaction open: nothing
    state.update(9, 0, 3, 106, 106, T0, True)
    assert state.first_unstable_offset() == 106
    state.take_snapshot()
    again = ProducerStateManager(tmp_path)
    again.load_snapshot(tmp_path / "00000000000000000107.snapshot")
    assert again.snapshot_entries() == state.snapshot_entries()
    assert again.first_unstable_offset() == 106


def _dump_verify(path):
    return engine_in_process("dump-log", "--verify", str(path), check=False)


def test_dump_log_verify_checks_snapshots_and_txn_indexes_against_the_log(tmp_path):
    d = tmp_path / "t-0"
    log = UnifiedLog.open(d)
    _scenario(log)
    log.close()
    ok = _dump_verify(d)
    assert ok.returncode == 0, ok.stderr
    snap = d / "00000000000000000010.snapshot"
    entries = read_snapshot(snap)
    tampered = [e if e.producer_id != 3 else ProducerSnapshotEntry(
        3, 1, 11, 6, 1, e.timestamp, -1, -1) for e in entries]  # transaction 3 not open
    write_snapshot(snap, tampered)
    bad = _dump_verify(d)
    assert bad.returncode == 1 and "producer 3" in bad.stderr and snap.name in bad.stderr
    write_snapshot(snap, entries)
    txn = d / "00000000000000000005.txnindex"
    data = bytearray(txn.read_bytes())
    data[26:34] = (6).to_bytes(8, "big")  # a wrong last stable offset
    txn.write_bytes(bytes(data))
    bad = _dump_verify(d)
    assert bad.returncode == 1 and "last stable offset" in bad.stderr, bad.stderr
    assert os.path.basename(txn) in bad.stderr


def test_stray_snapshots_are_removed_at_load(tmp_path):
    d = tmp_path / "t-0"
    log = UnifiedLog.open(d)
    _scenario(log)
    log.close()  # snapshots 5 and 10 (rolls) and 14 (the log end)
    write_snapshot(d / "00000000000000000007.snapshot", [])   # not at a segment base
    write_snapshot(d / "00000000000000000003.snapshot", [])
    UnifiedLog.open(d).close()
    names = sorted(p.name[:20] for p in d.glob("*.snapshot"))
    assert names == ["00000000000000000005", "00000000000000000010", "00000000000000000014"]
