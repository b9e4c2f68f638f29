"""Hostile input for the record decoder, in the records of a batch: it must never crash, hang or
over-allocate, and every error it raises must be a typed KafkaEngineError naming where the
damage is (by `.position`, and `.offset` where the batch's base offset is known). The
samples and the framing model are in bad_input_support, the encoders in kafka_format.

Covered: negative and huge lengths (batch, record, key, value, header count, header key
and value, record count up to 2^31-1), varint and varlong overflow, wrong magic, legacy
messages with lying lengths and bad inner sets, and extreme offsets, timestamps and
sequences (Java's wrapping arithmetic).
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from bad_input_support import (
    PREFIX,
    PREFIX_RECORDS,
    P,
    columns_of,
    engine_v2,
    err_key,
    framing_error_everywhere,
    records_error,
    records_of,
)
from crc32c import crc32c
from kafka_format import (
    INT32_MAX,
    INT32_MIN,
    MiB,
    field_offset,
    fix_crc,
    legacy_message,
    record,
    record_fields,
    v2_batch,
    varint,
    varlong,
    wrap64,
)

from engine._native import records as native
from engine.errors import (
    CorruptRecordError,
    InvalidRecordError,
)
from engine.records import MemoryRecords, compress, scan_batches

# ---------------------------------------------------------------------------------------------
# Lengths, counts and varints.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [-1, INT32_MIN, 0, 1, 13])
def test_entry_size_below_minimum(size):
    entry = bytearray(engine_v2(0, 1000))
    struct.pack_into(">i", entry, 8, size)
    framing_error_everywhere(PREFIX + bytes(entry), (P, 1000))


@pytest.mark.parametrize("size", [14, 30, 48])
def test_v2_batch_size_below_batch_overhead(size):
    entry = bytearray(engine_v2(0, 1000))
    struct.pack_into(">i", entry, 8, size)
    framing_error_everywhere(PREFIX + bytes(entry), (P, 1000))


@pytest.mark.parametrize("size", [14, 21])
def test_v1_message_size_below_v1_overhead(size):
    msg = legacy_message(1, 77, b"k", b"v")
    buf = PREFIX + struct.pack(">qi", 77, size) + msg[12:12 + size]
    framing_error_everywhere(buf, (P, 77))


@pytest.mark.parametrize("size", [INT32_MAX, INT32_MAX - 11, 1 << 24])
def test_huge_entry_size_is_a_partial_entry(size):
    """A size running past the buffer is a partial trailing entry (Kafka's readers stop
    there), whatever the size: no error, no allocation."""
    entry = bytearray(engine_v2(0, 1000))
    struct.pack_into(">i", entry, 8, size)
    buf = PREFIX + bytes(entry)
    scan = scan_batches(buf)
    assert len(scan) == 1 and scan.partial_bytes == len(entry)
    assert records_of(buf) == PREFIX_RECORDS
    assert columns_of(buf, verify_crc=True) == PREFIX_RECORDS


def test_entry_larger_than_2gib_is_corrupt():
    """An entry whose total size (size field + 12) does not fit an int32 can only be damage
    (Kafka's sizes are int32). It must be refused, not wrapped into a negative size (which read
    far outside the buffer). The 2 GiB buffer is calloc'ed zero pages: nothing is touched."""
    n = 12 + INT32_MAX + 40
    try:
        buf = np.zeros(n, np.uint8)
    except MemoryError:
        pytest.skip("cannot reserve 2 GiB of address space")
    head = struct.pack(">qiIbb", 9, INT32_MAX, 0, 0, 0)
    buf[:len(head)] = np.frombuffer(head, np.uint8)
    for verify in (False, True):
        with pytest.raises(CorruptRecordError) as ei:
            native.scan(buf, verify)
        assert (ei.value.position, ei.value.offset) == (0, 9)


@pytest.mark.parametrize("magic", [3, 4, 127, -1, -128])  # -1 is 255 as a byte
def test_wrong_magic(magic):
    entry = bytearray(engine_v2(0, 1000))
    entry[16] = magic & 0xFF
    framing_error_everywhere(PREFIX + bytes(entry), (P, 1000))
    # in a cut-off trailing entry the magic is never looked at: it is partial
    assert scan_batches(PREFIX + bytes(entry[:-1])).partial_bytes == len(entry) - 1
    # a legacy message with a wrong magic
    msg = bytearray(legacy_message(1, 5, b"k", b"v"))
    msg[16] = magic & 0xFF
    fix_crc(msg, 0)
    framing_error_everywhere(PREFIX + bytes(msg), (P, 5))


@pytest.mark.parametrize("count", [-1, INT32_MIN, INT32_MAX, 2**30, 4])
@pytest.mark.parametrize("codec", [0, 1, 4])
def test_impossible_record_count(count, codec):
    """Counts that the section cannot hold are refused before anything is sized by them."""
    section = record(record_fields())
    if codec:
        section = compress(codec, section)
    buf = PREFIX + v2_batch(section, count, base_offset=1000, codec=codec)
    tracemalloc.start()
    try:
        records_error(buf, InvalidRecordError, P, 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_record_count_off_by_one(codec):
    fields = record_fields()
    section = record(fields) * 2
    base = P + 61

    def batch(count):
        s = compress(codec, section) if codec else section
        return PREFIX + v2_batch(s, count, base_offset=1000, codec=codec)

    # one record too many declared: the third record's length varint is missing
    e = records_error(batch(3), InvalidRecordError, base + len(section) if codec == 0 else P,
                       1000)
    assert "Truncated varint" in str(e) or "runs past" in str(e) or "Record count" in str(e)
    # one too few: the second record is left over ("Incorrect declared batch size")
    e = records_error(batch(1), InvalidRecordError, base + len(section) // 2 if codec == 0 else P,
                       1000)
    assert "Incorrect declared batch size" in str(e)
    # zero declared: Kafka's reader returns no records without reading the section
    assert records_of(batch(0)) == PREFIX_RECORDS
    assert columns_of(batch(0)) == PREFIX_RECORDS
    # the right count decodes
    assert len(records_of(batch(2))) == 4


FIELD_CASES = [
    # (field, bad varint value, error position: at the field (True) or at the data after it)
    ("key_length", -2, True), ("key_length", INT32_MIN, True),
    ("key_length", INT32_MAX, False), ("key_length", "past", False),
    ("value_length", -2, True), ("value_length", INT32_MIN, True),
    ("value_length", INT32_MAX, False), ("value_length", "past", False),
    ("header_count", -1, True), ("header_count", INT32_MIN, True),
    ("header_count", INT32_MAX, True), ("header_count", 2, None),
    ("header_key_length", -1, True), ("header_key_length", INT32_MIN, True),
    ("header_key_length", INT32_MAX, False), ("header_key_length", "past", False),
    ("header_value_length", -2, True), ("header_value_length", INT32_MIN, True),
    ("header_value_length", INT32_MAX, False), ("header_value_length", "past", False),
]


@pytest.mark.parametrize("field,value,at_field", FIELD_CASES)
@pytest.mark.parametrize("codec", [0, 1, 3])
def test_bad_field_lengths(field, value, at_field, codec):
    """Negative and huge key/value/header lengths and counts: InvalidRecordError naming the
    field (or the bytes that would run past the record), never an allocation of that size."""
    fields = record_fields()
    if value == "past":  # one byte more than the record has left after the length
        at = field_offset(fields, field)
        value = len(record(fields)) - at - 1 + 1
    fields = [(n, varint(value) if n == field else b) for n, b in fields]
    lead = record(record_fields(key=b"first"))  # a good record before the bad one
    rec = record(fields)
    at = field_offset(fields, field)
    if at_field is False:
        at += len(varint(value))  # "runs past the record end" names the data's start
    elif at_field is None:  # two headers declared, one present: the 2nd header key length
        at = len(rec)  # ...is missing: truncated varint at the end of the record body
    section = lead + rec
    s = compress(codec, section) if codec else section
    buf = PREFIX + v2_batch(s, 2, base_offset=1000, codec=codec)
    tracemalloc.start()
    try:
        records_error(buf, InvalidRecordError, P + 61 + len(lead) + at if codec == 0 else P, 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB


@pytest.mark.parametrize("length_delta", [-1, 1, -3])
def test_record_length_disagrees_with_fields(length_delta):
    fields = record_fields()
    body = sum(len(b) for _, b in fields)
    rec = record(fields, body + length_delta)
    extra = b"\0" * max(length_delta, 0)
    buf = PREFIX + v2_batch(rec + extra, 1, base_offset=1000)
    with pytest.raises(InvalidRecordError) as ei:
        list(MemoryRecords(buf).records())
    assert ei.value.offset == 1000 and P + 61 <= ei.value.position <= len(buf)
    with pytest.raises(InvalidRecordError) as ec:
        MemoryRecords(buf).decode_columns()
    assert err_key(ec.value) == err_key(ei.value)


@pytest.mark.parametrize("length", [-1, -2, INT32_MIN, INT32_MAX, 1 << 20])
def test_record_length_negative_or_huge(length):
    fields = record_fields()
    buf = PREFIX + v2_batch(record(fields, length), 1, base_offset=1000)
    records_error(buf, InvalidRecordError, P + 61, 1000)  # names the length varint
    # ... and in the second record of a batch
    lead = record(record_fields())
    buf = PREFIX + v2_batch(lead + record(fields, length), 2, base_offset=1000)
    records_error(buf, InvalidRecordError, P + 61 + len(lead), 1000)


VARINT_FIELDS = ["length", "offset_delta", "key_length", "value_length", "header_count",
                 "header_key_length", "header_value_length"]
OVERLONG_VARINTS = [
    bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x10]),  # 5th byte carries bits beyond 32
    bytes([0x80, 0x80, 0x80, 0x80, 0x70]),
    bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x8F, 0x01]),  # 6 bytes: continuation on the 5th
    bytes([0x80] * 9 + [0x00]),  # 10 bytes
]


@pytest.mark.parametrize("field", VARINT_FIELDS)
@pytest.mark.parametrize("bad", OVERLONG_VARINTS, ids=lambda b: b.hex())
def test_varint_overflow(field, bad):
    fields = record_fields()
    if field == "length":
        body = b"".join(b for _, b in fields)
        section = bad + body
        at = 0
    else:
        fields = [(n, bad if n == field else b) for n, b in fields]
        section = record(fields)
        at = field_offset(fields, field)
    buf = PREFIX + v2_batch(section, 1, base_offset=1000)
    e = records_error(buf, InvalidRecordError, P + 61 + at, 1000)
    assert "Varint overflow" in str(e)


@pytest.mark.parametrize("bad", [
    bytes([0xFF] * 9 + [0x02]),      # 10th byte with more than the one bit left
    bytes([0xFF] * 9 + [0x81, 0x00]),  # 11 bytes
    bytes([0x80] * 10 + [0x00]),
])
def test_varlong_overflow(bad):
    fields = [(n, bad if n == "timestamp_delta" else b) for n, b in record_fields()]
    buf = PREFIX + v2_batch(record(fields), 1, base_offset=1000)
    e = records_error(buf, InvalidRecordError, P + 61 + field_offset(fields, "timestamp_delta"),
                       1000)
    assert "Varint overflow" in str(e)


@pytest.mark.parametrize("delta", [2**63 - 1, -(2**63), -1, 2**62])
def test_ten_byte_varlong_decodes(delta):
    """A full 10-byte varlong is legal (its 10th byte carries one bit)."""
    fields = record_fields(ts_delta=delta)
    assert len(varlong(delta)) == (10 if abs(delta) >= 2**62 else 1)
    buf = v2_batch(record(fields), 1, base_offset=5, base_ts=0)
    (rec,) = records_of(buf)
    assert rec[1] == delta
    assert columns_of(buf)[0][1] == delta


@pytest.mark.parametrize("field", ["timestamp_delta", "offset_delta", "key_length",
                                   "header_count"])
def test_varint_cut_by_record_length(field):
    """A varint whose continuation bytes lie past the record's declared end is truncated,
    even though the bytes after the record would complete it."""
    fields = [(n, b"\x80\x00" if n == field else b) for n, b in record_fields()]  # 0, 2 bytes
    names = [n for n, _ in fields]
    in_body = sum(len(b) for _, b in fields[:names.index(field)])
    body = b"".join(b for _, b in fields)
    length = in_body + 1  # the record ends right after the varint's first byte
    buf = PREFIX + v2_batch(varint(length) + body, 1, base_offset=1000)
    with pytest.raises(InvalidRecordError) as ei:
        list(MemoryRecords(buf).records())
    assert ei.value.offset == 1000
    assert ei.value.position == P + 61 + len(varint(length)) + in_body, repr(ei.value)
    assert "Truncated varint" in str(ei.value)


# ---------------------------------------------------------------------------------------------
# Legacy messages with lying lengths.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("key_len,value_len,trailer,cls", [
    (-2, None, b"", CorruptRecordError),
    (INT32_MIN, None, b"", CorruptRecordError),
    (INT32_MAX, None, b"", CorruptRecordError),
    (2, None, b"", CorruptRecordError),  # key runs into the value length
    (None, -2, b"", CorruptRecordError),
    (None, INT32_MAX, b"", CorruptRecordError),
    (None, 2, b"", CorruptRecordError),
    (None, None, b"xx", InvalidRecordError),  # bytes after the value
])
def test_legacy_bad_lengths(magic, key_len, value_len, trailer, cls):
    msg = legacy_message(magic, 321, b"k", b"v", key_len=key_len, value_len=value_len,
                         trailer=trailer)
    records_error(PREFIX + msg, cls, P, 321)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_too_short_for_lengths(magic):
    """A message whose size leaves no room for the value length."""
    head = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic else b"")
    body = head + struct.pack(">i", 1) + b"k" + b"\0\0\0"  # 3 bytes where 4 are needed
    size = 4 + len(body)
    assert size == (22 if magic else 14)  # the smallest size framing lets through
    msg = struct.pack(">qiI", 8, size, zlib.crc32(body)) + body
    records_error(PREFIX + msg, CorruptRecordError, P, 8)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [1, 2, 3])
def test_legacy_wrapper_bad_inner_sets(magic, codec):
    """Compressed wrappers whose inner message set is wrong: each error names the wrapper."""
    def wrapper(inner: bytes, value=True):
        return legacy_message(magic, 900, None, compress(codec, inner) if value else None,
                              attributes=codec)

    good_inner = legacy_message(magic, 0, b"a", b"b")
    cases = [
        (good_inner[:-1], CorruptRecordError),                      # partial inner message
        (good_inner[:-3] + b"\0\0\0", CorruptRecordError),          # bad inner CRC
        (legacy_message(magic, 0, b"a", b"b", attributes=1), InvalidRecordError),  # nested codec
        (struct.pack(">qi", 0, 3) + b"\0" * 20, CorruptRecordError),  # inner size below 14
        (good_inner[:16] + b"\x07" + good_inner[17:], CorruptRecordError),  # inner magic 7
    ]
    if magic == 0:
        cases.append((legacy_message(1, 0, b"a", b"b"), InvalidRecordError))  # v1 in a v0
    inner_v2 = v2_batch(record(record_fields()), 1)
    cases.append((inner_v2, InvalidRecordError))  # a v2 batch inside a legacy wrapper
    for inner, cls in cases:
        records_error(PREFIX + wrapper(inner), cls, P, 900)
    records_error(PREFIX + wrapper(b"", value=False), InvalidRecordError, P, 900)


# ---------------------------------------------------------------------------------------------
# Extreme offsets, timestamps and sequences: Java's wrapping arithmetic, never C's undefined
# signed overflow (checked under UBSan when the engine is built with -fsanitize=undefined).
# ---------------------------------------------------------------------------------------------


def _java_increment_sequence(seq, inc):
    def w(v):
        return (v + 2**31) % 2**32 - 2**31
    if seq > w(INT32_MAX - inc):
        return w(inc - w(INT32_MAX - seq) - 1)
    return w(seq + inc)


@pytest.mark.parametrize("base_offset", [2**63 - 2, 2**63 - 1, -(2**63), -5])
@pytest.mark.parametrize("base_ts", [2**63 - 1, -(2**63)])
def test_offsets_and_timestamps_wrap_like_java(base_offset, base_ts):
    deltas = [0, 1, 7, INT32_MAX]
    section = b"".join(record(record_fields(ts_delta=d * 3 + 1, offset_delta=d)) for d in deltas)
    buf = v2_batch(section, len(deltas), base_offset=base_offset, base_ts=base_ts,
                   last_offset_delta=INT32_MAX)
    want = [(wrap64(base_offset + d), wrap64(base_ts + d * 3 + 1)) for d in deltas]
    assert [r[:2] for r in records_of(buf)] == want
    assert [r[:2] for r in columns_of(buf)] == want
    (h,) = scan_batches(buf).headers
    assert int(h["last_offset"]) == wrap64(base_offset + INT32_MAX)
    (batch,) = MemoryRecords(buf).batches()
    assert batch.last_offset == wrap64(base_offset + INT32_MAX)


@pytest.mark.parametrize("base_sequence,delta", [
    (INT32_MAX, 0), (INT32_MAX, 1), (INT32_MAX - 3, 10), (0, INT32_MAX), (5, INT32_MAX),
    (INT32_MAX, -1), (10, -20), (INT32_MAX, -(2**24) + 1), (2147483640, -524288),
])
def test_sequences_wrap_like_java(base_sequence, delta):
    """Record sequence = baseSequence + offsetDelta, wrapping past INT32_MAX to 0 (Kafka's
    DefaultRecordBatch.incrementSequence), for any delta the data may hold."""
    sec = record(record_fields(offset_delta=delta))
    body = struct.pack(">hiqqqhii", 0, delta, 0, 0, 7, 1, base_sequence, 1) + sec
    buf = struct.pack(">qiibI", 100, 9 + len(body), -1, 2, crc32c(body)) + body
    (batch,) = MemoryRecords(buf).batches()
    want = _java_increment_sequence(base_sequence, delta)
    assert batch.records()[0].sequence == want
    assert batch.last_sequence == want


@pytest.mark.parametrize("wrapper_offset", [-(2**63) + 1, 2**63 - 1, 1])
def test_legacy_relative_offsets_wrap_like_java(wrapper_offset):
    inner = b"".join(legacy_message(1, i, b"k", b"v") for i in range(3))
    msg = legacy_message(1, wrapper_offset, None, compress(1, inner), attributes=1)
    want = [wrap64(wrapper_offset - 2 + i) for i in range(3)]
    assert [r[0] for r in records_of(msg)] == want
    assert [r[0] for r in columns_of(msg)] == want
