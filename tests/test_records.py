"""engine.records: scan rows, batch fields, record decode, columns, buffers and threads."""

import threading

import numpy as np
import pytest

from engine.errors import CorruptRecordError, InvalidRecordError, RecordSizeLimitError
from engine.records import (
    BATCH_HEADER_DTYPE,
    CompressionType,
    ControlRecordType,
    FileRecords,
    MemoryRecords,
    RecordBatchBuilder,
    TimestampType,
    build_end_txn_marker,
    parse_control_record,
    scan_batches,
)
from engine.records.sample import sample_batches

CODECS = list(CompressionType)


def _batch(codec=CompressionType.NONE, base_offset=0, n=3, **kw):
    b = RecordBatchBuilder(base_offset=base_offset, compression_type=codec, **kw)
    for i in range(n):
        b.append(b"value-%d" % i, key=None if i == 1 else b"k%d" % i,
                 headers=[("h", b"x%d" % i), ("null", None)], timestamp=1000 + 10 * i)
    return b.build()


@pytest.mark.parametrize("codec", CODECS)
def test_scan_row_holds_every_header_field(codec):
    data = _batch(codec, base_offset=42, producer_id=7, producer_epoch=3, base_sequence=11,
                  is_transactional=True, partition_leader_epoch=5)
    scan = scan_batches(data)
    assert scan.headers.dtype == BATCH_HEADER_DTYPE
    row = scan.headers[0]
    assert (row["position"], row["size"], row["magic"]) == (0, len(data), 2)
    assert (row["base_offset"], row["last_offset"]) == (42, 44)
    assert row["partition_leader_epoch"] == 5
    assert row["compression"] == codec
    assert row["timestamp_type"] == 0
    assert row["is_transactional"] and not row["is_control"]
    assert (row["base_timestamp"], row["max_timestamp"]) == (1000, 1020)
    assert (row["producer_id"], row["producer_epoch"], row["base_sequence"]) == (7, 3, 11)
    assert row["record_count"] == 3 and row["crc_valid"]
    assert scan.valid_bytes == len(data) and scan.partial_bytes == 0


@pytest.mark.parametrize("codec", CODECS)
def test_records_carry_kafka_fields(codec):
    data = _batch(codec, base_offset=100, producer_id=1, producer_epoch=0,
                  base_sequence=2147483646)
    recs = list(MemoryRecords(data).records())
    assert [r.offset for r in recs] == [100, 101, 102]
    assert [r.timestamp for r in recs] == [1000, 1010, 1020]
    assert [r.key for r in recs] == [b"k0", None, b"k2"]
    assert recs[0].headers == (("h", b"x0"), ("null", None))
    # sequences wrap past Integer.MAX_VALUE to 0, as Kafka's producer does
    assert [r.sequence for r in recs] == [2147483646, 2147483647, 0]
    assert all(r.timestamp_type is TimestampType.CREATE_TIME for r in recs)


def test_log_append_time_overrides_record_timestamps():
    data = _batch(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=5555)
    batch = next(MemoryRecords(data).batches())
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 5555
    assert {r.timestamp for r in batch.records()} == {5555}


def test_partial_trailing_batch_is_reported_not_raised():
    data = _batch() + _batch(base_offset=3)
    for cut in range(1, 80):
        mr = MemoryRecords(data[:-cut])
        assert len(mr.scan()) == 1
        assert mr.partial_bytes == len(data) - cut - mr.valid_bytes
        assert [r.offset for r in mr.records()] == [0, 1, 2]


def test_validate_names_position_and_offset_of_bad_crc():
    good = _batch()
    bad = bytearray(_batch(base_offset=3))
    bad[-1] ^= 0x01
    mr = MemoryRecords(good + bytes(bad), file="seg.log")
    with pytest.raises(CorruptRecordError) as info:
        mr.validate()
    assert info.value.position == len(good)
    assert info.value.offset == 3
    assert info.value.file == "seg.log"
    assert "seg.log" in str(info.value) and str(len(good)) in str(info.value)


def test_control_batch_markers_parse():
    data = build_end_txn_marker(False, base_offset=9, producer_id=4, producer_epoch=1,
                                coordinator_epoch=17, timestamp=1)
    batch = next(MemoryRecords(data).batches())
    assert batch.is_control and batch.is_transactional and batch.base_sequence == -1
    (rec,) = batch.records()
    assert rec.is_control
    control = parse_control_record(rec.key, rec.value)
    assert control.type is ControlRecordType.ABORT and control.coordinator_epoch == 17


@pytest.mark.parametrize("codec", CODECS)
def test_columns_equal_records(codec):
    data = b"".join(sample_batches(450, codec, batch_size=100, seed=3)) + _batch(codec, 450)
    mr = MemoryRecords(data)
    rows = mr.decode_columns().to_pylist()
    recs = list(mr.records())
    assert len(rows) == len(recs) == 453
    for row, r in zip(rows, recs):
        assert (row["offset"], row["timestamp"], row["key"], row["value"]) == (
            r.offset, r.timestamp, r.key, r.value)
        assert [tuple(h) for h in row["headers"]] == list(r.headers)


def test_columns_trim_to_offset_bounds_and_skip_control():
    data = (_batch(base_offset=0) + build_end_txn_marker(True, base_offset=3, producer_id=1,
                                                         producer_epoch=0, timestamp=5)
            + _batch(base_offset=4))
    cols = MemoryRecords(data).decode_columns(min_offset=1, max_offset=6, include_control=False)
    assert cols.offset.tolist() == [1, 2, 4, 5]
    assert cols.batch_index.tolist() == [0, 0, 2, 2]


def test_arrow_wrap_is_zero_copy():
    import pyarrow as pa  # a test extra
    cols = MemoryRecords(_batch()).decode_columns()
    values = cols.values()
    assert values.to_pylist() == [b"value-0", b"value-1", b"value-2"]
    assert values.buffers()[2].address == cols["value_data"].ctypes.data
    assert isinstance(cols.to_arrow(), pa.RecordBatch)


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "numpy", "mmap"])
def test_any_buffer_decodes(kind, tmp_path):
    data = _batch(CompressionType.LZ4) + _batch(base_offset=3)
    if kind == "mmap":
        path = tmp_path / "00000000000000000000.log"
        path.write_bytes(data)
        with FileRecords(path) as fr:
            assert [r.offset for r in fr.records()] == list(range(6))
        return
    buf = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
           "numpy": np.frombuffer(data, dtype=np.uint8)}[kind]
    assert [r.offset for r in MemoryRecords(buf).records()] == list(range(6))


def test_empty_file_records(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    with FileRecords(path) as fr:
        assert list(fr.batches()) == [] and fr.partial_bytes == 0


def test_decompressed_size_is_bounded():
    builder = RecordBatchBuilder(compression_type=CompressionType.ZSTD)
    builder.append(b"\0" * (4 << 20), timestamp=1)
    mr = MemoryRecords(builder.build(), max_decompressed_bytes=1 << 20)
    with pytest.raises(RecordSizeLimitError) as info:
        list(mr.records())
    assert info.value.position == 0


def test_records_count_beyond_section_is_invalid_before_allocating():
    data = bytearray(_batch(n=1))
    data[57:61] = (2**31 - 1).to_bytes(4, "big")
    from engine.checksums import crc32c
    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError) as info:
        list(MemoryRecords(bytes(data)).records())
    assert info.value.position == 0 and info.value.offset == 0


def test_scan_and_columns_run_in_threads():
    data = b"".join(sample_batches(2000, CompressionType.NONE, seed=5))
    expect = MemoryRecords(data).decode_columns().offset.tolist()
    results, errors = [], []

    def work():
        try:
            mr = MemoryRecords(data)
            mr.validate()
            results.append(mr.decode_columns().offset.tolist())
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [expect] * 4


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_column_chunks_in_parallel_equal_one_decode(codec):
    data = b"".join(sample_batches(3000, codec, batch_size=100, seed=9))
    mr = MemoryRecords(data)
    whole = mr.decode_columns()
    for threads in (1, 2, 3):
        chunks = mr.decode_column_chunks(chunk_bytes=64 * 1024, threads=threads)
        assert len(chunks) > 3
        assert np.concatenate([c.offset for c in chunks]).tolist() == whole.offset.tolist()
        values = [v for c in chunks for v in c.values().to_pylist()]
        assert values == whole.values().to_pylist()


def test_decompress_ahead_gives_the_same_records():
    data = b"".join(sample_batches(3000, CompressionType.LZ4, batch_size=50, seed=4))
    mr = MemoryRecords(data)
    inline = [(r.offset, r.key, r.value, r.headers) for r in mr.records(decompress_ahead=0)]
    ahead = [(r.offset, r.key, r.value, r.headers) for r in mr.records(decompress_ahead=3)]
    assert inline == ahead and len(inline) == 3000


def test_decompress_ahead_raises_at_the_bad_batch_not_before():
    good = b"".join(sample_batches(1000, CompressionType.GZIP, batch_size=50, seed=4))
    bad = bytearray(b"".join(sample_batches(50, CompressionType.GZIP, base_offset=1000)))
    bad[-3] ^= 0x40
    seen = []
    with pytest.raises(CorruptRecordError) as info:
        for r in MemoryRecords(good + bytes(bad)).records(decompress_ahead=4):
            seen.append(r.offset)
    assert seen == list(range(1000)) and info.value.position == len(good)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_columns_not_asked_for_are_not_built(codec):
    data = _batch(codec, n=5) + _batch(codec, base_offset=5, n=4)
    whole = MemoryRecords(data).decode_columns()
    slim = MemoryRecords(data).decode_columns(with_keys=False, with_values=False,
                                              with_headers=False)
    assert slim.offset.tolist() == whole.offset.tolist() == list(range(9))
    assert slim.timestamp.tolist() == whole.timestamp.tolist()
    assert not [k for k in ("key_data", "value_data", "header_key_data", "header_value_data",
                            "value_offsets", "header_offsets") if k in slim._c]
    with pytest.raises(ValueError, match="values were not decoded"):
        slim.values()
    with pytest.raises(ValueError, match="headers were not decoded"):
        slim.header_lists()
    values = MemoryRecords(data).decode_columns(with_keys=False, with_headers=False)
    assert values.values().to_pylist() == whole.values().to_pylist()
    headers = MemoryRecords(data).decode_columns(with_values=False)
    assert headers.header_lists().to_pylist() == whole.header_lists().to_pylist()
    assert headers.keys().to_pylist() == whole.keys().to_pylist()


_UNTOUCHED = """
import ctypes, mmap, sys
from engine.records import MemoryRecords, RecordBatchBuilder
page = mmap.PAGESIZE
b = RecordBatchBuilder()
b.append(b"v" * (6 * page), key=b"k", timestamp=1000)
b.append(b"small", key=b"k2", timestamp=1001)
data = b.build()
at = data.index(b"v" * 64)  # the first value's bytes
buf = mmap.mmap(-1, len(data) + page)
buf[:len(data)] = data
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
start = (base + at + page - 1) // page * page  # whole pages inside the value
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(start, 4 * page, 0) == 0, ctypes.get_errno()  # PROT_NONE
records = MemoryRecords(memoryview(buf)[:len(data)])
cols = records.decode_columns(verify_crc=False, with_values=sys.argv[1] == "values")
print(cols.offset.tolist(), cols.timestamp.tolist(), cols.keys().to_pylist())
"""


def test_values_not_asked_for_are_never_read():
    """The value of an uncompressed batch lies partly in pages made unreadable (PROT_NONE):
    a decode without values (and without the CRC check, which reads every byte) succeeds;
    the same decode with values reads those pages and dies of SIGSEGV."""
    import signal
    import subprocess
    import sys

    def run(which):
        return subprocess.run([sys.executable, "-c", _UNTOUCHED, which], capture_output=True,
                              text=True, timeout=60, check=False)

    untouched = run("offsets")
    assert untouched.returncode == 0, untouched.stderr
    assert untouched.stdout.strip() == "[0, 1] [1000, 1001] [b'k', b'k2']"
    touched = run("values")
    assert touched.returncode == -signal.SIGSEGV, (touched.returncode, touched.stderr)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_header_keys_and_timestamps_shared_between_records_stay_exact(codec):
    # consecutive records may share one str for an equal header key at the same index and
    # one int for an equal timestamp: keys that differ in length, content, count or
    # position (and more headers than the shared slots) must still come out exactly
    many = [(f"k{j}", b"%d" % j) for j in range(11)]
    rows = [
        ([("trace", b"1"), ("span", None)], 7),
        ([("trace", b"2"), ("span", b"")], 7),
        ([("tracf", b"3")], 7),
        ([("trac", b"4"), ("trace", b"5")], 8),
        ([], 8),
        ([("\udcff\udcfe", b"6")], 8),
        (many, 9),
        (many[:3] + [("k3x", b"y")] + many[4:], 9),
        ([("span", None), ("trace", b"7")], 7),
    ]
    b = RecordBatchBuilder(compression_type=codec)
    for headers, ts in rows:
        b.append(b"v", headers=headers, timestamp=ts)
    recs = list(MemoryRecords(b.build()).records())
    assert [list(r.headers) for r in recs] == [[(k, v) for k, v in h] for h, _ in rows]
    assert [r.timestamp for r in recs] == [ts for _, ts in rows]
    assert recs[0].headers[0][0] is recs[1].headers[0][0]  # shared, not merely equal


def test_record_fields_are_read_only_and_outside_the_cyclic_gc():
    import gc

    rec = next(iter(MemoryRecords(_batch()).records()))
    for name in ("offset", "timestamp", "key", "value", "headers", "sequence", "is_control"):
        with pytest.raises(AttributeError):
            setattr(rec, name, None)
    assert not gc.is_tracked(rec)
    assert (rec.offset, rec.timestamp, rec.key, rec.value) == (0, 1000, b"k0", b"value-0")


def test_a_buffer_view_gives_the_address_of_the_bytes_it_holds():
    """The broker plugin hands a view's address to Java, which copies from it: the address is
    where the exporter's bytes start, a slice's included, and they stay there while the view
    lives."""
    import ctypes
    import gc

    from engine._native import records as native

    data = bytes(range(256)) * 4
    view = native.BufferView(memoryview(data)[100:300])
    del data
    gc.collect()
    assert len(view) == 200
    assert ctypes.string_at(view.address, 200) == (bytes(range(256)) * 4)[100:300]
