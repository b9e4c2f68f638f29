"""Hostile input for the record decoder: it must never crash, hang or over-allocate, and every
error it raises must be a typed KafkaEngineError naming where the damage is.

Covered, for v2 batches of every codec and for legacy v0/v1 messages (plain and compressed
wrappers, built with kafka-python's LegacyRecordBatchBuilder):

- truncation at every byte: a cut last entry is partial (never an error) and the whole entries
  before it still decode;
- every bit of every byte flipped: either the flip is outside the CRC (offset, partition leader
  epoch) and the batch still decodes, or a typed error names the entry; the same flips with the
  CRC fixed afterwards, so that the record parser and the codecs (not the CRC) must catch them;
- negative and huge lengths (batch, record, key, value, header count, header key and value,
  record count up to 2^31-1), varint overflow, wrong magic, unknown codecs;
- decompression bombs for gzip, snappy (raw and xerial), lz4 and zstd (1 GiB of zeros, built
  without ever holding 1 GiB), with peak allocation measured;
- the records path and the decode_columns path, which must agree on every error.

Every error is checked by type and by `.position` (and `.offset` where the batch's base
offset is known). An independent model of Kafka's framing rules (`_walk`) says which entries
a buffer holds and where framing fails.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
import zlib

import cramjam
import lz4.block as lz4_block
import numpy as np
import pytest
import xxhash
import zstandard
from crc32c import crc32c
from kafka.record import legacy_records

from engine._native import records as native
from engine.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)
from engine.records import MemoryRecords, RecordBatchBuilder, compress, decompress, scan_batches

MiB = 1 << 20
GiB = 1 << 30
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

# ---------------------------------------------------------------------------------------------
# Independent encoders (Kafka's formats, written from the spec, not from the engine).
# ---------------------------------------------------------------------------------------------


def uvarint(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def varint(v: int) -> bytes:
    return uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def varlong(v: int) -> bytes:
    return uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def record_fields(ts_delta=0, offset_delta=0, key=b"k", value=b"v", headers=((b"h", b"x"),)):
    """A v2 record body as named pieces, so a test can swap one and know where it sits."""
    f = [("attributes", b"\0"), ("timestamp_delta", varlong(ts_delta)),
         ("offset_delta", varint(offset_delta)),
         ("key_length", varint(-1 if key is None else len(key))), ("key", key or b""),
         ("value_length", varint(-1 if value is None else len(value))),
         ("value", value or b""), ("header_count", varint(len(headers)))]
    for hk, hv in headers:
        f += [("header_key_length", varint(len(hk))), ("header_key", hk),
              ("header_value_length", varint(-1 if hv is None else len(hv))),
              ("header_value", hv or b"")]
    return f


def record(fields, length=None) -> bytes:
    body = b"".join(b for _, b in fields)
    return varint(len(body) if length is None else length) + body


def field_offset(fields, name, length=None) -> int:
    """Offset of the first field `name` from the start of the record (its length varint)."""
    body_len = sum(len(b) for _, b in fields)
    pos = len(varint(body_len if length is None else length))
    for n, b in fields:
        if n == name:
            return pos
        pos += len(b)
    raise KeyError(name)


def v2_batch(section: bytes, count: int, *, base_offset=0, codec=0, attributes=None,
             last_offset_delta=None, base_ts=0, max_ts=0, leader_epoch=-1, producer_id=-1,
             producer_epoch=-1, base_sequence=-1, length=None, magic=2) -> bytes:
    """One v2 batch around a (possibly compressed) records section, CRC-32C computed."""
    attrs = codec if attributes is None else attributes
    lod = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    body = struct.pack(">hiqqqhii", attrs, lod, base_ts, max_ts, producer_id, producer_epoch,
                       base_sequence, count) + section
    size = 9 + len(body) if length is None else length
    return struct.pack(">qiibI", base_offset, size, leader_epoch, magic, crc32c(body)) + body


def fix_crc(buf: bytearray, pos: int) -> None:
    """Recomputes the CRC of the entry at `pos` (CRC-32C for v2, CRC-32 for v0/v1)."""
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    if buf[pos + 16] == 2:
        struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:pos + size])))
    else:
        struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16:pos + size])))


def legacy_message(magic: int, offset: int, key, value, *, attributes=0, timestamp=0,
                   key_len=None, value_len=None, trailer=b"") -> bytes:
    """One v0/v1 message, framing and CRC-32 included; lengths may lie."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += struct.pack(">i", (-1 if key is None else len(key)) if key_len is None else key_len)
    body += key or b""
    body += struct.pack(">i", (-1 if value is None else len(value))
                        if value_len is None else value_len)
    body += (value or b"") + trailer
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def kafka_python_legacy(magic: int, codec: int, base: int, entries) -> bytes:
    builder = legacy_records.LegacyRecordBatchBuilder(magic=magic, compression_type=codec,
                                                      batch_size=1 << 20)
    for i, (key, value) in enumerate(entries):
        builder.append(base + i if magic == 0 or codec == 0 else i, timestamp=1_700_000_000_000 + i,
                       key=key, value=value)
    out = bytes(builder.build())
    if codec and magic == 1:
        # kafka-python leaves the wrapper offset at 0; a broker stamps the last inner offset
        out = struct.pack(">q", base + len(entries) - 1) + out[8:]
    return out


# ---------------------------------------------------------------------------------------------
# Samples: small entries of every kind, placed after a plain v2 prefix batch.
# ---------------------------------------------------------------------------------------------

RECORDS = [(b"key-0", b"value-0", [("h1", b"x"), ("h2", None)]),
           (None, b"v1", []),
           (b"", None, [("", b"")])]


def engine_v2(codec: int, base_offset: int) -> bytes:
    b = RecordBatchBuilder(base_offset=base_offset, compression_type=codec,
                           producer_id=7, producer_epoch=1, base_sequence=3)
    for i, (k, v, h) in enumerate(RECORDS):
        b.append(v, key=k, headers=h, timestamp=1_700_000_000_000 + i)
    return b.build()


def _prefix() -> bytes:
    b = RecordBatchBuilder(base_offset=0)
    b.append(b"p0", key=b"k", timestamp=1)
    b.append(b"p1", timestamp=2)
    return b.build()


PREFIX = _prefix()
P = len(PREFIX)  # position of every sample
LEGACY_ENTRIES = [(b"lk0", b"lv0"), (None, b"lv1")]

SAMPLES = {
    "v2-none": (engine_v2(0, 1000), 1000),
    "v2-gzip": (engine_v2(1, 1000), 1000),
    "v2-snappy": (engine_v2(2, 1000), 1000),
    "v2-lz4": (engine_v2(3, 1000), 1000),
    "v2-zstd": (engine_v2(4, 1000), 1000),
    "v0-none": (kafka_python_legacy(0, 0, 500, LEGACY_ENTRIES[:1]), 500),
    "v1-none": (kafka_python_legacy(1, 0, 500, LEGACY_ENTRIES[:1]), 500),
    "v0-gzip": (kafka_python_legacy(0, 1, 500, LEGACY_ENTRIES), 500),
    "v0-snappy": (kafka_python_legacy(0, 2, 500, LEGACY_ENTRIES), 500),
    "v0-lz4": (kafka_python_legacy(0, 3, 500, LEGACY_ENTRIES), 500),
    "v1-gzip": (kafka_python_legacy(1, 1, 500, LEGACY_ENTRIES), 501),
    "v1-snappy": (kafka_python_legacy(1, 2, 500, LEGACY_ENTRIES), 501),
    "v1-lz4": (kafka_python_legacy(1, 3, 500, LEGACY_ENTRIES), 501),
}
COMPRESSED = [n for n in SAMPLES if not n.endswith("-none")]


def records_of(buf, **kw):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in MemoryRecords(buf, **kw).records()]


def columns_of(buf, start=0, stop=None, verify_crc=False, **kw):
    cols = MemoryRecords(buf, **kw).decode_columns(start, stop, verify_crc=verify_crc)
    c = cols._c
    out = []
    for i in range(cols.num_records):
        def binary(name, j):
            valid = c[f"{name}_validity"]
            if not (valid[j >> 3] >> (j & 7)) & 1:
                return None
            offs = c[f"{name}_offsets"]
            return bytes(c[f"{name}_data"][offs[j]:offs[j + 1]])
        hs = tuple((bytes(c["header_key_data"][c["header_key_offsets"][j]:
                                               c["header_key_offsets"][j + 1]])
                    .decode("utf-8", "surrogateescape"), binary("header_value", j))
                   for j in range(c["header_offsets"][i], c["header_offsets"][i + 1]))
        out.append((int(cols.offset[i]), int(cols.timestamp[i]), binary("key", i),
                    binary("value", i), hs))
    return out


def test_samples_decode():
    """The pristine samples decode identically on both paths (the baseline of every test)."""
    for name, (sample, base) in SAMPLES.items():
        buf = PREFIX + sample
        recs = records_of(buf)
        assert recs == columns_of(buf), name
        assert [r[0] for r in recs[2:]] == ([base, base + 1, base + 2] if name.startswith("v2")
                                            else [500] if name.endswith("none") else [500, 501])
        MemoryRecords(buf).validate()


# ---------------------------------------------------------------------------------------------
# A model of Kafka's framing walk (§1.1 of the reference) to predict what the engine sees.
# ---------------------------------------------------------------------------------------------


class Walk:
    def __init__(self, entries, valid, error=None):
        self.entries = entries  # [(position, size, magic, offset)]
        self.valid = valid
        self.error = error      # (position, offset) of the first framing error


def _walk(buf) -> Walk:
    pos, entries = 0, []
    while len(buf) - pos >= 17:
        offset, size = struct.unpack_from(">qi", buf, pos)
        magic = struct.unpack_from(">b", buf, pos + 16)[0]
        if size < 14:
            return Walk(entries, pos, (pos, offset))
        if size + 12 > len(buf) - pos:
            break
        if magic not in (0, 1, 2) or (magic == 2 and size + 12 < 61) or (magic == 1 and size < 22):
            return Walk(entries, pos, (pos, offset))
        entries.append((pos, size + 12, magic, offset))
        pos += size + 12
    return Walk(entries, pos)


def _crc_ok(buf, entry) -> bool:
    pos, size, magic, _ = entry
    if magic == 2:
        return struct.unpack_from(">I", buf, pos + 17)[0] == crc32c(bytes(buf[pos + 21:pos + size]))
    return struct.unpack_from(">I", buf, pos + 12)[0] == zlib.crc32(bytes(buf[pos + 16:pos + size]))


def _check_located(exc, batch):
    """An error from decoding `batch` names that batch: its base offset and its position (or,
    in an uncompressed v2 batch, the exact byte inside its records section)."""
    assert isinstance(exc, KafkaEngineError), repr(exc)
    h = batch.header()
    pos, size = int(h["position"]), int(h["size"])
    base = int(h["base_offset"])
    assert exc.offset == base or (base < 0 and exc.offset is None), (repr(exc), exc.offset, base)
    if batch.magic == 2 and batch.attributes & 7 == 0:
        assert exc.position == pos or pos + 61 <= exc.position <= pos + size, (repr(exc), pos)
    else:
        assert exc.position == pos, (repr(exc), exc.position, pos)


def _err_key(exc):
    return (type(exc), exc.position, exc.offset)


def _decode_each_batch(buf, limit=1 * MiB):
    """Decodes every batch on the records path and on the columns path: both must succeed with
    the same records or raise the same located typed error. Returns the records decoded."""
    mr = MemoryRecords(buf, max_decompressed_bytes=limit)
    out = []
    for i, batch in enumerate(mr.batches()):
        try:
            recs = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
        except KafkaEngineError as exc:
            _check_located(exc, batch)
            with pytest.raises(KafkaEngineError) as col:
                mr.decode_columns(i, i + 1, verify_crc=False)
            assert _err_key(col.value) == _err_key(exc), (repr(col.value), repr(exc))
            out.append(exc)
            continue
        assert columns_of(buf, i, i + 1, max_decompressed_bytes=limit) == recs
        out.append(recs)
    return out


def _framing_error_everywhere(buf, expect):
    """A framing error is raised, identically, by every entry point."""
    pos, offset = expect
    calls = [lambda: scan_batches(buf), lambda: MemoryRecords(buf).validate(),
             lambda: list(MemoryRecords(buf).records()),
             lambda: MemoryRecords(buf).decode_columns(verify_crc=False),
             lambda: native.batches(buf)]
    for call in calls:
        with pytest.raises(CorruptRecordError) as ei:
            call()
        assert type(ei.value) is CorruptRecordError
        assert (ei.value.position, ei.value.offset) == (pos, offset), repr(ei.value)


# ---------------------------------------------------------------------------------------------
# Truncation at every byte.
# ---------------------------------------------------------------------------------------------

PREFIX_RECORDS = records_of(PREFIX)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_truncation_at_every_byte(name):
    sample, _ = SAMPLES[name]
    buf = PREFIX + sample
    for cut in range(len(buf)):
        piece = buf[:cut]
        whole = P if cut >= P else 0
        scan = scan_batches(piece)
        assert len(scan) == (1 if cut >= P else 0)
        assert scan.valid_bytes == whole and scan.partial_bytes == cut - whole
        mr = MemoryRecords(piece)
        mr.validate()
        assert mr.partial_bytes == cut - whole
        expect = PREFIX_RECORDS if cut >= P else []
        assert records_of(piece) == expect
        assert columns_of(piece, verify_crc=True) == expect
    assert len(scan_batches(buf)) == 2 and scan_batches(buf).partial_bytes == 0


def test_truncation_of_many_batches():
    """A buffer of every sample back to back, cut at every byte: the entries wholly before the
    cut are exactly the ones decoded."""
    parts = [PREFIX] + [s for s, _ in SAMPLES.values()]
    buf = b"".join(parts)
    ends = np.cumsum([len(p) for p in parts])
    full = [records_of(p) for p in parts]
    for cut in range(0, len(buf), 3):
        n = int(np.searchsorted(ends, cut, side="right"))
        scan = scan_batches(buf[:cut])
        assert len(scan) == n
        assert scan.valid_bytes == (int(ends[n - 1]) if n else 0)
        assert records_of(buf[:cut]) == [r for rs in full[:n] for r in rs]


# ---------------------------------------------------------------------------------------------
# Bit flips at every byte.
# ---------------------------------------------------------------------------------------------

# Bytes of an entry that its CRC does not cover.
UNCOVERED_V2 = set(range(8)) | set(range(12, 16))  # base offset, partition leader epoch
UNCOVERED_LEGACY = set(range(8))                   # offset
SIZE_FIELD = set(range(8, 12))
MAGIC = 16


def _check_flip(buf, rel, kind, original):
    walk = _walk(buf)
    if walk.error:
        assert rel in SIZE_FIELD or rel == MAGIC, (rel, walk.error)
        _framing_error_everywhere(buf, walk.error)
        return
    scan = scan_batches(buf)
    assert [int(p) for p in scan.headers["position"]] == [e[0] for e in walk.entries]
    assert scan.valid_bytes == walk.valid
    assert bool(np.all(scan.headers["crc_valid"])) == all(_crc_ok(buf, e) for e in walk.entries)
    bad = [e for e in walk.entries if not _crc_ok(buf, e)]
    mr = MemoryRecords(buf)
    if bad:
        with pytest.raises(CorruptRecordError) as ei:
            mr.validate()
        assert type(ei.value) is CorruptRecordError
        assert (ei.value.position, ei.value.offset) == (bad[0][0], bad[0][3])
        with pytest.raises(CorruptRecordError) as ei:
            MemoryRecords(buf).decode_columns(verify_crc=True)
        assert (ei.value.position, ei.value.offset) == (bad[0][0], bad[0][3])
    else:
        mr.validate()
        if walk.valid < len(buf):  # the flip made the entry look longer: dropped as partial
            assert rel in SIZE_FIELD
        else:
            uncovered = UNCOVERED_V2 if kind == "v2" else UNCOVERED_LEGACY
            assert rel in uncovered, rel
            recs = records_of(buf)
            if rel in range(12, 16):  # the partition leader epoch changes no record
                assert recs == original
            else:
                assert [r[1:] for r in recs] == [r[1:] for r in original]
    # whatever the CRC says, decoding never does anything but decode or raise a located error
    _decode_each_batch(buf)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_bit_flips_at_every_byte(name):
    sample, _ = SAMPLES[name]
    kind = "v2" if name.startswith("v2") else "legacy"
    original = records_of(PREFIX + sample)
    for rel in range(len(sample)):
        for bit in range(8):
            buf = bytearray(PREFIX + sample)
            buf[P + rel] ^= 1 << bit
            _check_flip(bytes(buf), rel, kind, original)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_bit_flips_with_crc_fixed(name):
    """Every bit of the CRC-covered part flipped, then the CRC recomputed: the header checks,
    the record parser and the codecs must catch what they get, on both decode paths."""
    sample, _base = SAMPLES[name]
    first = 21 if name.startswith("v2") else 16
    for rel in range(first, len(sample)):
        for bit in range(8):
            buf = bytearray(PREFIX + sample)
            buf[P + rel] ^= 1 << bit
            fix_crc(buf, P)
            buf = bytes(buf)
            walk = _walk(buf)
            if walk.error:  # the magic byte, flipped to a magic the size cannot hold
                assert rel == MAGIC
                _framing_error_everywhere(buf, walk.error)
                continue
            MemoryRecords(buf).validate()
            results = _decode_each_batch(buf)
            assert results[0] == PREFIX_RECORDS
            if isinstance(results[1], KafkaEngineError):
                assert results[1].position >= P


@pytest.mark.parametrize("name", COMPRESSED)
def test_corrupt_compressed_payload_with_valid_crc(name):
    """Every byte of the compressed payload replaced by a few values, CRC recomputed."""
    sample, _base = SAMPLES[name]
    payload_start = 61 if name.startswith("v2") else _legacy_value_start(sample)
    for rel in range(payload_start, len(sample)):
        for value in {0x00, 0xFF, sample[rel] ^ 0x01, sample[rel] ^ 0x80}:
            buf = bytearray(PREFIX + sample)
            buf[P + rel] = value
            fix_crc(buf, P)
            buf = bytes(buf)
            MemoryRecords(buf).validate()
            results = _decode_each_batch(buf)
            if isinstance(results[1], KafkaEngineError):
                assert results[1].position == P
                assert results[1].offset == struct.unpack_from(">q", sample)[0]


def _legacy_value_start(msg: bytes) -> int:
    pos = 18 + (8 if msg[16] == 1 else 0)
    klen = struct.unpack_from(">i", msg, pos)[0]
    return pos + 4 + max(klen, 0) + 4


# ---------------------------------------------------------------------------------------------
# Lengths, counts and varints.
# ---------------------------------------------------------------------------------------------


def _records_error(buf, cls, position, offset, limit=1 * MiB):
    """Both decode paths raise exactly `cls` at (position, offset); scan and validate pass."""
    scan_batches(buf)
    MemoryRecords(buf).validate()
    with pytest.raises(KafkaEngineError) as ei:
        list(MemoryRecords(buf, max_decompressed_bytes=limit).records())
    assert type(ei.value) is cls, repr(ei.value)
    assert (ei.value.position, ei.value.offset) == (position, offset), repr(ei.value)
    with pytest.raises(KafkaEngineError) as ec:
        MemoryRecords(buf, max_decompressed_bytes=limit).decode_columns()
    assert _err_key(ec.value) == _err_key(ei.value), (repr(ec.value), repr(ei.value))
    return ei.value


def _one_record_batch(fields, *, length=None, base_offset=42, count=1, codec=0, extra=b""):
    section = record(fields, length) + extra
    if codec:
        section = compress(codec, section)
    return v2_batch(section, count, base_offset=base_offset, codec=codec)


@pytest.mark.parametrize("size", [-1, INT32_MIN, 0, 1, 13])
def test_entry_size_below_minimum(size):
    entry = bytearray(engine_v2(0, 1000))
    struct.pack_into(">i", entry, 8, size)
    _framing_error_everywhere(PREFIX + bytes(entry), (P, 1000))


@pytest.mark.parametrize("size", [14, 30, 48])
def test_v2_batch_size_below_batch_overhead(size):
    entry = bytearray(engine_v2(0, 1000))
    struct.pack_into(">i", entry, 8, size)
    _framing_error_everywhere(PREFIX + bytes(entry), (P, 1000))


@pytest.mark.parametrize("size", [14, 21])
def test_v1_message_size_below_v1_overhead(size):
    msg = legacy_message(1, 77, b"k", b"v")
    buf = PREFIX + struct.pack(">qi", 77, size) + msg[12:12 + size]
    _framing_error_everywhere(buf, (P, 77))


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
    _framing_error_everywhere(PREFIX + bytes(entry), (P, 1000))
    # in a cut-off trailing entry the magic is never looked at: it is partial
    assert scan_batches(PREFIX + bytes(entry[:-1])).partial_bytes == len(entry) - 1
    # a legacy message with a wrong magic
    msg = bytearray(legacy_message(1, 5, b"k", b"v"))
    msg[16] = magic & 0xFF
    fix_crc(msg, 0)
    _framing_error_everywhere(PREFIX + bytes(msg), (P, 5))


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
        _records_error(buf, InvalidRecordError, P, 1000)
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
    e = _records_error(batch(3), InvalidRecordError, base + len(section) if codec == 0 else P,
                       1000)
    assert "Truncated varint" in str(e) or "runs past" in str(e) or "Record count" in str(e)
    # one too few: the second record is left over ("Incorrect declared batch size")
    e = _records_error(batch(1), InvalidRecordError, base + len(section) // 2 if codec == 0 else P,
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
        _records_error(buf, InvalidRecordError, P + 61 + len(lead) + at if codec == 0 else P, 1000)
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
    assert _err_key(ec.value) == _err_key(ei.value)


@pytest.mark.parametrize("length", [-1, -2, INT32_MIN, INT32_MAX, 1 << 20])
def test_record_length_negative_or_huge(length):
    fields = record_fields()
    buf = PREFIX + v2_batch(record(fields, length), 1, base_offset=1000)
    _records_error(buf, InvalidRecordError, P + 61, 1000)  # names the length varint
    # ... and in the second record of a batch
    lead = record(record_fields())
    buf = PREFIX + v2_batch(lead + record(fields, length), 2, base_offset=1000)
    _records_error(buf, InvalidRecordError, P + 61 + len(lead), 1000)


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
    e = _records_error(buf, InvalidRecordError, P + 61 + at, 1000)
    assert "Varint overflow" in str(e)


@pytest.mark.parametrize("bad", [
    bytes([0xFF] * 9 + [0x02]),      # 10th byte with more than the one bit left
    bytes([0xFF] * 9 + [0x81, 0x00]),  # 11 bytes
    bytes([0x80] * 10 + [0x00]),
])
def test_varlong_overflow(bad):
    fields = [(n, bad if n == "timestamp_delta" else b) for n, b in record_fields()]
    buf = PREFIX + v2_batch(record(fields), 1, base_offset=1000)
    e = _records_error(buf, InvalidRecordError, P + 61 + field_offset(fields, "timestamp_delta"),
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
    _records_error(PREFIX + msg, cls, P, 321)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_too_short_for_lengths(magic):
    """A message whose size leaves no room for the value length."""
    head = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic else b"")
    body = head + struct.pack(">i", 1) + b"k" + b"\0\0\0"  # 3 bytes where 4 are needed
    size = 4 + len(body)
    assert size == (22 if magic else 14)  # the smallest size framing lets through
    msg = struct.pack(">qiI", 8, size, zlib.crc32(body)) + body
    _records_error(PREFIX + msg, CorruptRecordError, P, 8)


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
        _records_error(PREFIX + wrapper(inner), cls, P, 900)
    _records_error(PREFIX + wrapper(b"", value=False), InvalidRecordError, P, 900)


# ---------------------------------------------------------------------------------------------
# Codecs: unknown ids, zstd in legacy, damaged streams.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_v2(codec):
    buf = PREFIX + v2_batch(record(record_fields()), 1, base_offset=1000, codec=codec)
    _records_error(buf, UnsupportedCompressionTypeError, P, 1000)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [4, 5, 7])
def test_unsupported_codec_legacy(magic, codec):
    inner = legacy_message(magic, 0, b"a", b"b")
    payload = zstandard.ZstdCompressor().compress(inner)
    msg = legacy_message(magic, 33, None, payload, attributes=codec)
    _records_error(PREFIX + msg, UnsupportedCompressionTypeError, P, 33)


def _lz4_frame(blocks, *, flg=0x60, bd=0x40, hc=None, end=True):
    desc = bytes([flg, bd])
    if hc is None:
        hc = (xxhash.xxh32(desc).intdigest() >> 8) & 0xFF
    out = b"\x04\x22\x4d\x18" + desc + bytes([hc])
    for b in blocks:
        out += b
    return out + (b"\0\0\0\0" if end else b"")


def _lz4_block(data: bytes) -> bytes:
    c = lz4_block.compress(data, store_size=False)
    return struct.pack("<I", len(c)) + c


def _xerial(blocks: list[bytes]) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for b in blocks:
        out += struct.pack(">i", len(b)) + b
    return out


_REC = record(record_fields())
DAMAGED_STREAMS = {
    "gzip-truncated": (1, compress(1, _REC)[:-5]),
    "gzip-garbage-after": (1, compress(1, _REC) + b"\x00junk"),
    "gzip-bad-header": (1, b"\x1f\x8c" + compress(1, _REC)[2:]),
    "gzip-empty": (1, b""),
    "snappy-raw-bad": (2, b"\x05\xff\xff\xff"),
    "snappy-raw-len-overflow": (2, b"\xff\xff\xff\xff\xff\x01"),
    "snappy-raw-empty": (2, b""),
    "snappy-xerial-chunk-overrun": (2, _xerial([b"\x01\x00"])[:-1] + b"\x00\x00\x00\x7f"),
    "snappy-xerial-negative-chunk": (2, _xerial([]) + struct.pack(">i", -5) + b"\x01\x00"),
    "snappy-xerial-empty-chunk": (2, _xerial([b""])),
    "snappy-xerial-truncated-header": (2, _xerial([]) + b"\x00\x00"),
    "snappy-xerial-short-block": (2, _xerial([b"\x0a\x00abc"])),
    "lz4-no-magic": (3, b"\x00" * 16),
    "lz4-bad-version": (3, _lz4_frame([_lz4_block(_REC)], flg=0xA0)),
    "lz4-dependent-blocks": (3, _lz4_frame([_lz4_block(_REC)], flg=0x40)),
    "lz4-reserved-bits": (3, _lz4_frame([_lz4_block(_REC)], flg=0x61)),
    "lz4-bad-bd": (3, _lz4_frame([_lz4_block(_REC)], bd=0x30)),
    "lz4-bad-hc": (3, _lz4_frame([_lz4_block(_REC)], hc=0)),
    "lz4-no-end-mark": (3, _lz4_frame([_lz4_block(_REC)], end=False)),
    "lz4-block-overrun": (3, _lz4_frame([struct.pack("<I", 1000) + b"\0" * 10])),
    "lz4-block-over-max": (3, _lz4_frame([struct.pack("<I", 0x7FFFFFFF)])),
    "lz4-bad-block-data": (3, _lz4_frame([struct.pack("<I", 4) + b"\xff\xff\xff\xff"])),
    "lz4-bad-block-checksum": (3, _lz4_frame([_lz4_block(_REC) + b"\0\0\0\0"], flg=0x70)),
    "zstd-garbage-after": (4, zstandard.ZstdCompressor().compress(_REC) + b"garbage!"),
    "zstd-bad-magic": (4, b"\x29" + zstandard.ZstdCompressor().compress(_REC)[1:]),
    "zstd-empty": (4, b""),
}


@pytest.mark.parametrize("name", list(DAMAGED_STREAMS))
def test_damaged_compressed_streams(name):
    """Damaged codec streams inside batches with valid CRCs: CorruptRecordError naming the
    batch (never a codec library's own exception type)."""
    codec, payload = DAMAGED_STREAMS[name]
    buf = PREFIX + v2_batch(payload, 1, base_offset=1000, codec=codec)
    with pytest.raises(CorruptRecordError) as ei:
        list(MemoryRecords(buf).records())
    assert (ei.value.position, ei.value.offset) == (P, 1000), repr(ei.value)
    assert type(ei.value) in (CorruptRecordError, InvalidRecordError), repr(ei.value)
    with pytest.raises(CorruptRecordError) as ec:
        MemoryRecords(buf).decode_columns()
    assert _err_key(ec.value) == _err_key(ei.value)
    # the codec entry point on its own raises the same type
    with pytest.raises(CorruptRecordError):
        decompress(codec, payload, MiB, 2)


@pytest.mark.parametrize("cut", [1, 3, 8])
@pytest.mark.parametrize("content_size", [True, False])
def test_truncated_zstd_frame_is_an_error(cut, content_size):
    """A zstd frame cut short is damage (zstd-jni raises on it), not a shorter stream."""
    frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(_REC * 3)
    with pytest.raises(CorruptRecordError):
        decompress(4, frame[:-cut], MiB, 2)


@pytest.mark.parametrize("wd", [0x58, 0x98, 0xA0, 0xA8, 0xB0, 0xF8, 0xFF])
def test_zstd_window_descriptor_extremes(wd):
    """Window descriptors up to exponent 31: the frame walk sizes them without overflow, and
    the decoder's refusal is the codec's (no SystemError from a negative size)."""
    frame = bytearray(zstandard.ZstdCompressor(write_content_size=False)
                      .compress(bytes(range(256)) * 4))
    assert frame[4] == 0x00  # no content size, not single-segment: byte 5 is the window
    frame[5] = wd
    try:
        out = decompress(4, bytes(frame), MiB, 2)
    except CorruptRecordError as exc:
        assert not isinstance(exc.__cause__, SystemError), repr(exc.__cause__)
        assert exc.position is None and exc.offset is None
    else:
        assert out == bytes(range(256)) * 4
    buf = v2_batch(bytes(frame), 1, base_offset=4, codec=4)
    try:
        list(MemoryRecords(buf).records())
    except KafkaEngineError as exc:
        assert (exc.position, exc.offset) == (0, 4)


def test_decompress_without_a_batch_names_no_position():
    """decompress() called on its own knows no position or offset: None, not -1."""
    for codec, payload in ((1, b"junk"), (2, b"\xff"), (3, b"junk"), (4, b"junk")):
        with pytest.raises(CorruptRecordError) as ei:
            decompress(codec, payload)
        assert ei.value.position is None and ei.value.offset is None
    with pytest.raises(RecordSizeLimitError) as ei:
        decompress(1, compress(1, bytes(100)), 10)
    assert ei.value.position is None and "position" not in str(ei.value)
    with pytest.raises(UnsupportedCompressionTypeError) as ei:
        decompress(4, b"", 10, 1)
    assert ei.value.position is None


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_valid_codec_stream_of_bad_records(codec):
    """A well-formed compressed stream of malformed records: the parser's error, naming the
    batch (positions inside decompressed bytes mean nothing in the file)."""
    fields = [(n, varint(-7) if n == "key_length" else b) for n, b in record_fields()]
    buf = PREFIX + v2_batch(compress(codec, record(fields)), 1, base_offset=1000, codec=codec)
    e = _records_error(buf, InvalidRecordError, P, 1000)
    assert "decompressed" in str(e)


def test_lz4_magic0_header_checksum_quirk():
    """Magic 0 wrappers carry the old (wrong) LZ4 header checksum and are not checked; magic 1
    ones are."""
    inner = legacy_message(0, 0, b"a", b"b")
    frame = _lz4_frame([_lz4_block(inner)], hc=0x00)
    assert records_of(legacy_message(0, 3, None, frame, attributes=3))[0][2:4] == (b"a", b"b")
    inner1 = legacy_message(1, 0, b"a", b"b")
    msg = legacy_message(1, 3, None, _lz4_frame([_lz4_block(inner1)], hc=0x00), attributes=3)
    _records_error(msg, CorruptRecordError, 0, 3)


# ---------------------------------------------------------------------------------------------
# Decompression bombs: 1 GiB of zeros, built in a few MiB.
# ---------------------------------------------------------------------------------------------


def gzip_zeros(n_mib: int) -> bytes:
    """A valid gzip member of n MiB of zeros: after a full flush deflate restarts byte-aligned
    with no history, so every further MiB compresses to the same bytes."""
    zero = bytes(MiB)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    rep = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    final = c.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(n_mib):
        crc = zlib.crc32(zero, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = struct.pack("<II", crc, (n_mib * MiB) & 0xFFFFFFFF)
    return header + first + rep * (n_mib - 1) + final + trailer


def zstd_zeros(n_mib: int, content_size: bool) -> bytes:
    c = zstandard.ZstdCompressor(level=1, write_content_size=content_size)
    obj = c.compressobj(size=n_mib * MiB if content_size else -1)
    zero = bytes(MiB)
    return b"".join([obj.compress(zero) for _ in range(n_mib)] + [obj.flush()])


def lz4_zeros(n_mib: int, block_kib: int = 64) -> bytes:
    """Kafka's LZ4 frame (independent blocks) of n MiB of zeros: one block, repeated."""
    bd = {64: 0x40, 256: 0x50, 1024: 0x60, 4096: 0x70}[block_kib]
    block = _lz4_block(bytes(block_kib * 1024))
    return _lz4_frame([block * (n_mib * 1024 // block_kib)], bd=bd)


def snappy_raw_zeros(n: int) -> bytes:
    """One raw snappy block of n zeros: a 1-byte literal, then 64-byte copies at offset 1."""
    copies, rest = divmod(n - 1, 64)
    out = uvarint(n) + b"\x00\x00" + b"\xfe\x01\x00" * copies
    if rest:
        out += bytes([((rest - 1) << 2) | 2, 1, 0])
    return out


def snappy_xerial_zeros(n_mib: int) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    framed = struct.pack(">i", len(block)) + block
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + framed * (n_mib * 32)


BOMBS = {
    "gzip": (1, lambda n: gzip_zeros(n)),
    "snappy-raw": (2, lambda n: snappy_raw_zeros(n * MiB)),
    "snappy-xerial": (2, lambda n: snappy_xerial_zeros(n)),
    "lz4": (3, lambda n: lz4_zeros(n)),
    "zstd-streamed": (4, lambda n: zstd_zeros(n, False)),
    "zstd-content-size": (4, lambda n: zstd_zeros(n, True)),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_builders_are_valid_streams(name):
    """The bomb constructions are real streams: at 2 MiB they decode to zeros exactly."""
    codec, build = BOMBS[name]
    assert decompress(codec, build(2), 2 * MiB) == bytes(2 * MiB)
    with pytest.raises(RecordSizeLimitError):
        decompress(codec, build(2), 2 * MiB - 1)


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _measured(fn):
    """Runs fn (which must raise) and returns (exception, seconds, traced peak bytes, peak RSS
    growth in bytes or None)."""
    rss = _reset_peak_rss()
    rss0 = _status_kib("VmRSS") if rss else 0
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - returned for the caller to assert on
        err = exc
    else:
        err = None
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    grown = (_status_kib("VmHWM") - rss0) * 1024 if rss else None
    return err, elapsed, peak, grown


LIMIT = 1 * MiB
# What a bounded decoder may hold beyond the limit: one codec chunk (64 KiB LZ4 block, read
# size) and the bookkeeping of the Python objects; and one copy of its input (zlib-style
# decompressors hand back the input they did not consume as a new bytes object).
TRACED_SLACK = 256 * 1024
# Peak RSS growth allowed (codec contexts and windows, allocator slop): far below the 1 GiB.
RSS_SLACK = 24 * MiB


@pytest.fixture(scope="module")
def bombs():
    return {name: (codec, build(1024)) for name, (codec, build) in BOMBS.items()}


@pytest.mark.parametrize("path", ["records", "columns", "decompress"])
@pytest.mark.parametrize("name", list(BOMBS))
def test_v2_decompression_bomb(bombs, name, path):
    codec, payload = bombs[name]
    buf = PREFIX + v2_batch(payload, 1, base_offset=1000, codec=codec)
    mr = MemoryRecords(buf, max_decompressed_bytes=LIMIT)
    mr.validate()
    call = {"records": lambda: list(mr.records()),
            "columns": lambda: mr.decode_columns(),
            "decompress": lambda: decompress(codec, payload, LIMIT, 2, P, 1000)}[path]
    err, elapsed, peak, grown = _measured(call)
    assert type(err) is RecordSizeLimitError, repr(err)
    assert (err.position, err.offset) == (P, 1000)
    assert elapsed < 2.0, elapsed
    assert peak <= LIMIT + len(payload) + TRACED_SLACK, peak
    if grown is not None:
        assert grown <= LIMIT + RSS_SLACK, grown


@pytest.mark.parametrize("name", ["gzip", "snappy-raw", "snappy-xerial", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_decompression_bomb(bombs, name, magic):
    codec, payload = bombs[name]
    if name == "lz4" and magic == 0:
        payload = payload[:6] + b"\x00" + payload[7:]  # magic 0 writers' old header checksum
    buf = PREFIX + legacy_message(magic, 77, None, payload, attributes=codec)
    mr = MemoryRecords(buf, max_decompressed_bytes=LIMIT)
    mr.validate()
    for call in (lambda: list(mr.records()), lambda: mr.decode_columns()):
        err, elapsed, peak, grown = _measured(call)
        assert type(err) is RecordSizeLimitError, repr(err)
        assert (err.position, err.offset) == (P, 77)
        assert elapsed < 2.0
        assert peak <= LIMIT + len(payload) + TRACED_SLACK, peak
        if grown is not None:
            assert grown <= LIMIT + RSS_SLACK, grown


def test_default_limit_bomb_is_bounded(bombs):
    """With the default limit (256 MiB) a 1 GiB bomb still stops at the limit."""
    codec, payload = bombs["zstd-streamed"]
    buf = v2_batch(payload, 1, base_offset=1, codec=codec)
    err, _elapsed, peak, _grown = _measured(lambda: list(MemoryRecords(buf).records()))
    assert type(err) is RecordSizeLimitError
    limit = native.DEFAULT_MAX_DECOMPRESSED_BYTES
    assert peak <= 2 * limit + TRACED_SLACK


def test_lz4_large_block_bomb_stays_within_limit():
    """Frames of 4 MiB blocks (the largest LZ4 allows): no block is decompressed past the
    limit, whatever the block size."""
    payload = lz4_zeros(64, block_kib=4096)
    buf = v2_batch(payload, 1, base_offset=1, codec=3)
    err, _elapsed, peak, _grown = _measured(
        lambda: list(MemoryRecords(buf, max_decompressed_bytes=LIMIT).records()))
    assert type(err) is RecordSizeLimitError
    assert peak <= LIMIT + TRACED_SLACK, peak


def test_snappy_declared_length_over_limit_allocates_nothing():
    """A raw snappy block declaring 4 GiB-1 bytes, and xerial chunks declaring more than the
    limit, are refused from their headers alone."""
    for payload in (uvarint(0xFFFFFFFF) + b"\x00", _xerial([uvarint(LIMIT + 1) + b"\x00"])):
        buf = v2_batch(payload, 1, base_offset=1, codec=2)
        err, _elapsed, peak, _ = _measured(
            lambda buf=buf: list(MemoryRecords(buf, max_decompressed_bytes=LIMIT).records()))
        assert type(err) is RecordSizeLimitError
        assert peak < 64 * 1024


@pytest.mark.parametrize("members", [20_000, 50_000])
def test_gzip_many_empty_members_is_linear(members):
    """Thousands of empty gzip members (20 bytes each) must not cost time quadratic in the
    stream (each member used to copy the rest of the stream)."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    member = c.compress(b"") + c.flush()
    buf = v2_batch(member * members, 0, base_offset=1, codec=1)
    t0 = time.perf_counter()
    assert records_of(buf) == []
    assert time.perf_counter() - t0 < 0.5


def test_errors_name_the_file():
    buf = PREFIX + v2_batch(record(record_fields()), 3, base_offset=1000)
    with pytest.raises(InvalidRecordError) as ei:
        list(MemoryRecords(buf, file="00000000000000000000.log").records())
    assert ei.value.file == "00000000000000000000.log"
    assert "00000000000000000000.log" in str(ei.value)
    entry = bytearray(engine_v2(0, 1000))
    entry[16] = 9
    with pytest.raises(CorruptRecordError) as ei:
        MemoryRecords(PREFIX + bytes(entry), file="seg.log").scan()
    assert ei.value.file == "seg.log" and ei.value.position == P


# ---------------------------------------------------------------------------------------------
# Extreme offsets, timestamps and sequences: Java's wrapping arithmetic, never C's undefined
# signed overflow (checked under UBSan when the engine is built with -fsanitize=undefined).
# ---------------------------------------------------------------------------------------------


def _wrap64(v):
    return (v + 2**63) % 2**64 - 2**63


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
    want = [(_wrap64(base_offset + d), _wrap64(base_ts + d * 3 + 1)) for d in deltas]
    assert [r[:2] for r in records_of(buf)] == want
    assert [r[:2] for r in columns_of(buf)] == want
    (h,) = scan_batches(buf).headers
    assert int(h["last_offset"]) == _wrap64(base_offset + INT32_MAX)
    (batch,) = MemoryRecords(buf).batches()
    assert batch.last_offset == _wrap64(base_offset + INT32_MAX)


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
    want = [_wrap64(wrapper_offset - 2 + i) for i in range(3)]
    assert [r[0] for r in records_of(msg)] == want
    assert [r[0] for r in columns_of(msg)] == want


# ---------------------------------------------------------------------------------------------
# Scan rows handed back by callers (batches_from_headers, decode_columns(headers=...)) are
# checked against the buffer: a forged row is a ValueError, never a read outside the buffer.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position,size", [
    (2**63 - 10, 100),        # position + size overflowed int64 and passed the bounds check
    (2**62, INT32_MAX), (-1, 100), (P + 1, 100), (P, 10**6), (0, 25), (P, INT32_MIN),
])
def test_forged_scan_rows_are_refused(position, size):
    buf = PREFIX + SAMPLES["v2-none"][0]
    rows, _ = native.scan(buf, True)
    forged = rows.copy()
    forged[1]["position"] = position
    forged[1]["size"] = size
    with pytest.raises(ValueError, match="does not describe an entry"):
        native.batches_from_headers(buf, forged)
    with pytest.raises(ValueError, match="does not describe an entry"):
        native.decode_columns(buf, forged)
