"""What the bad-input tests of the record decoder share (tests/test_bad_input_*.py): sample
entries of every kind after a plain v2 prefix batch, both decode paths as plain tuples, an
independent model of Kafka's framing walk that predicts where the engine must fail, and the
checks that an error is typed and located."""

from __future__ import annotations

import struct
import zlib

import pytest
from crc32c import crc32c
from kafka_format import (
    MiB,
    kafka_python_legacy,
)

from engine._native import records as native
from engine.errors import (
    CorruptRecordError,
    KafkaEngineError,
)
from engine.records import MemoryRecords, RecordBatchBuilder, scan_batches

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


# ---------------------------------------------------------------------------------------------
# A model of Kafka's framing walk (ByteBufferLogInputStream) to predict what the engine sees.
# ---------------------------------------------------------------------------------------------


class Walk:
    def __init__(self, entries, valid, error=None):
        self.entries = entries  # [(position, size, magic, offset)]
        self.valid = valid
        self.error = error      # (position, offset) of the first framing error


def walk_entries(buf) -> Walk:
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


def crc_ok(buf, entry) -> bool:
    pos, size, magic, _ = entry
    if magic == 2:
        return struct.unpack_from(">I", buf, pos + 17)[0] == crc32c(bytes(buf[pos + 21:pos + size]))
    return struct.unpack_from(">I", buf, pos + 12)[0] == zlib.crc32(bytes(buf[pos + 16:pos + size]))


def check_located(exc, batch):
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


def err_key(exc):
    return (type(exc), exc.position, exc.offset)


def decode_each_batch(buf, limit=1 * MiB):
    """Decodes every batch on the records path and on the columns path: both must succeed with
    the same records or raise the same located typed error. Returns the records decoded."""
    mr = MemoryRecords(buf, max_decompressed_bytes=limit)
    out = []
    for i, batch in enumerate(mr.batches()):
        try:
            recs = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
        except KafkaEngineError as exc:
            check_located(exc, batch)
            with pytest.raises(KafkaEngineError) as col:
                mr.decode_columns(i, i + 1, verify_crc=False)
            assert err_key(col.value) == err_key(exc), (repr(col.value), repr(exc))
            out.append(exc)
            continue
        assert columns_of(buf, i, i + 1, max_decompressed_bytes=limit) == recs
        out.append(recs)
    return out


def framing_error_everywhere(buf, expect):
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


PREFIX_RECORDS = records_of(PREFIX)


def records_error(buf, cls, position, offset, limit=1 * MiB):
    """Both decode paths raise exactly `cls` at (position, offset); scan and validate pass."""
    scan_batches(buf)
    MemoryRecords(buf).validate()
    with pytest.raises(KafkaEngineError) as ei:
        list(MemoryRecords(buf, max_decompressed_bytes=limit).records())
    assert type(ei.value) is cls, repr(ei.value)
    assert (ei.value.position, ei.value.offset) == (position, offset), repr(ei.value)
    with pytest.raises(KafkaEngineError) as ec:
        MemoryRecords(buf, max_decompressed_bytes=limit).decode_columns()
    assert err_key(ec.value) == err_key(ei.value), (repr(ec.value), repr(ei.value))
    return ei.value
