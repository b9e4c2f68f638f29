"""Damage in the MIDDLE of a log (not at its tail): bit flips and truncation of a middle
segment's .log, a misdirecting offset-index entry, a damaged .txnindex. Each ends in a typed
error naming the file and position, or in Kafka's recovery with a logged account of what was
dropped; never in reads that silently jump over valid data."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import CorruptIndexError, CorruptRecordError
from engine.log import UnifiedLog
from engine.records import FileRecords, MemoryRecords, RecordBatchBuilder, build_end_txn_marker

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000


def _batch(i, n=5, **kw):
    b = RecordBatchBuilder(**kw)
    for j in range(n):
        b.append(b"value-%04d-%02d-" % (i, j) + b"x" * 20, key=b"k%d" % j,
                 timestamp=T0 + i * 10 + j)
    return b.build()


def _build(d, batches=40):
    """A clean log of about six segments of several batches, with offset-index entries."""
    log = UnifiedLog.open(d, segment_bytes=1600, index_interval_bytes=200)
    for i in range(batches):
        log.append_as_leader(_batch(i), i // 20)
    assert len(log.segments) >= 5
    log.close()


def _headers(path):
    with FileRecords(path) as fr:
        return fr.scan().copy()


def _segment(d, k):
    """(path, batch headers) of the k-th segment of `d`."""
    path = sorted(d.glob("*.log"))[k]
    return path, _headers(path)


def _read_from(log, offset):
    """Reads from `offset` on with the hints; returns the offsets read."""
    seen = []
    while offset < log.log_end_offset:
        view, nxt = log.read(offset, 4096)
        assert nxt > offset
        seen += [r.offset for r in MemoryRecords(bytes(view)).records(verify_crc=False)
                 if r.offset >= offset]
        offset = nxt
    return seen


def _flip(path, position, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


def test_bit_flip_in_a_middle_segment_payload(tmp_path, caplog):
    d = tmp_path / "t-0"
    _build(d)
    path, headers = _segment(d, 2)
    bad = headers[2]
    _flip(path, int(bad["position"]) + int(bad["size"]) - 3)  # inside the records
    # Clean start: nothing is scanned; the damaged batch is served as stored (Kafka does
    # not check CRCs on fetch), the consumer's CRC check catches it, and nothing is skipped.
    log = UnifiedLog.open(d, clean_shutdown=True)
    end = log.log_end_offset
    view, _ = log.read(int(bad["base_offset"]), 1)
    with pytest.raises(CorruptRecordError):
        list(MemoryRecords(bytes(view)).records(verify_crc=True))
    assert _read_from(log, 0) == list(range(end))
    log.close()
    verify = subprocess.run([sys.executable, "-m", "engine", "dump-log", "--verify", str(d)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert verify.returncode == 1 and path.name in verify.stderr
    # Unclean start from the beginning: Kafka's recovery keeps every batch before the damage,
    # drops the rest, and says what it dropped.
    later = sorted(p.name for p in d.glob("*.log"))[3:]
    with caplog.at_level(logging.WARNING):
        log = UnifiedLog.open(d, recovery_point=0)
    assert log.log_end_offset == int(bad["base_offset"])
    assert _read_from(log, 0) == list(range(int(bad["base_offset"])))
    assert str(path) in caplog.text and all(name in caplog.text for name in later)
    assert f"byte position {int(bad['position'])}" in caplog.text
    log.close()


@pytest.mark.parametrize("damage", ["length", "truncation"])
def test_unframeable_bytes_in_a_middle_segment_are_a_typed_error(tmp_path, damage):
    d = tmp_path / "t-0"
    _build(d)
    path, headers = _segment(d, 2)
    bad = headers[2]
    position = int(bad["position"])
    if damage == "length":
        _flip(path, position + 8, 0x40)  # the batch length's high byte: overruns the file
    else:
        os.truncate(path, position + int(bad["size"]) // 2)  # a torn batch mid-log
    next_base = int(_segment(d, 3)[1]["base_offset"][0])
    log = UnifiedLog.open(d, clean_shutdown=True)
    first_bad = int(bad["base_offset"])
    # Everything before the damage reads; the damaged batch and those after it in the same
    # segment raise, naming the file and byte position; nothing jumps to the next segment.
    offset, seen = 0, []
    with pytest.raises(CorruptRecordError) as err:
        while True:
            view, nxt = log.read(offset, 4096)
            seen += [r.offset for r in MemoryRecords(bytes(view)).records() if r.offset >= offset]
            offset = nxt
    assert seen == list(range(first_bad))
    assert str(err.value.file) == str(path) and err.value.position == position
    assert "damaged at byte" in str(err.value)
    with pytest.raises(CorruptRecordError):
        log.read(first_bad + 1, 4096)
    # An offset past the damage is either refused too or, when an index entry beyond the
    # damage leads to it, served from the very batch holding it.
    last = int(headers["last_offset"][-1])
    try:
        view, _ = log.read(last, 4096)
        (batch,) = list(MemoryRecords(bytes(view)).batches())
        assert batch.base_offset <= last <= batch.last_offset
    except CorruptRecordError as exc:
        assert str(exc.file) == str(path)
    assert _read_from(log, next_base)[0] == next_base  # later segments stay readable
    log.close()


def test_misdirecting_offset_index_entry_in_a_middle_segment(tmp_path, caplog):
    d = tmp_path / "t-0"
    _build(d)
    path, headers = _segment(d, 2)
    index = path.with_suffix(".index")
    assert index.stat().st_size >= 16
    data = bytearray(index.read_bytes())
    relative = int.from_bytes(data[8:12], "big")
    data[12:16] = (int.from_bytes(data[12:16], "big") + 3).to_bytes(4, "big")
    index.write_bytes(bytes(data))  # still sane for Kafka's check: only the last entry counts
    base = int(headers["base_offset"][0])
    target = base + relative
    log = UnifiedLog.open(d, clean_shutdown=True)
    with pytest.raises(CorruptIndexError) as err:
        log.read(target, 4096)
    assert str(err.value.file) == str(index) and err.value.offset == target
    log.close()
    # Deleting the index (as the message says) has it rebuilt; the log reads whole again.
    index.unlink()
    with caplog.at_level(logging.INFO):
        log = UnifiedLog.open(d, clean_shutdown=True)
    assert _read_from(log, 0) == list(range(log.log_end_offset))
    log.close()


def test_damaged_txn_index_of_a_middle_segment_is_rebuilt_at_load(tmp_path, caplog):
    d = tmp_path / "t-0"
    log = UnifiedLog.open(d, segment_bytes=1600, index_interval_bytes=200)
    for i in range(30):
        if i % 5 == 2:  # a transaction of producer i, aborted, every fifth batch
            log.append_as_leader(_batch(i, producer_id=i, producer_epoch=0, base_sequence=0,
                                        is_transactional=True), 0)
            log.append_as_leader(build_end_txn_marker(False, base_offset=0, producer_id=i,
                                                      producer_epoch=0, timestamp=T0), 0)
        else:
            log.append_as_leader(_batch(i), 0)
    expected = {s.base_offset: s.txn_index.all_aborted_txns() for s in log.segments}
    log.close()
    middle = [b for b, txns in expected.items() if txns][1]
    txn_index = d / f"{middle:020d}.txnindex"
    _flip(txn_index, 0, 0x10)  # version byte > 0: Kafka's reader rejects it
    with caplog.at_level(logging.WARNING):
        log = UnifiedLog.open(d, clean_shutdown=True)
    assert txn_index.name in caplog.text and "rebuilding" in caplog.text
    assert {s.base_offset: s.txn_index.all_aborted_txns() for s in log.segments} == expected
    assert _read_from(log, 0) == list(range(log.log_end_offset))
    log.close()


def test_timestamp_lookup_does_not_answer_past_damage(tmp_path):
    d = tmp_path / "t-0"
    _build(d)
    path, headers = _segment(d, 2)
    bad = headers[2]
    os.truncate(path, int(bad["position"]) + int(bad["size"]) // 2)  # torn batch mid-log
    log = UnifiedLog.open(d, clean_shutdown=True)
    before = int(headers["max_timestamp"][1])
    assert log.fetch_offset_by_timestamp(before)[0] <= int(headers["last_offset"][1])
    # A record after the damage in that segment: not the next segment's first offset.
    with pytest.raises(CorruptRecordError) as err:
        log.fetch_offset_by_timestamp(int(headers["max_timestamp"][-1]))
    assert str(err.value.file) == str(path) and err.value.position == int(bad["position"])
    log.close()
