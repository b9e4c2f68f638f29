"""Property tests (hypothesis) of the record format: the native builder and decoder against an
independent encoder written from the spec, round trips for every codec, the three read paths
(scan, records, columns) agreeing, and agreement with kafka-python's decoder on the same bytes.

Example counts are moderate so the file runs in well under a minute; set
HYPOTHESIS_PROFILE=deep for a longer search.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import zlib

import kafka.record as kafka_records
import kafka.record.default_records as default_records
import kafka.record.legacy_records as legacy_records
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka_format import encode_record, v2_batch, wrap64

from engine._native import records as native
from engine.errors import KafkaEngineError
from engine.records import MemoryRecords, compress, decompress, scan_batches

settings.register_profile("default", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

int64_edgy = st.one_of(st.integers(*INT64),
                       st.sampled_from([INT64[0], INT64[0] + 1, -1, 0, 1, INT64[1] - 1, INT64[1],
                                        2**31, -(2**31) - 1, 2**62, -(2**62)]))
int32_edgy = st.one_of(st.integers(*INT32),
                       st.sampled_from([INT32[0], -1, 0, 1, 63, 64, 8191, 8192, INT32[1]]))
blob = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.binary(min_size=120,
                                                                           max_size=300))
header_key = st.text(max_size=8)
headers = st.lists(st.tuples(header_key, st.one_of(st.none(), st.binary(max_size=16))),
                   max_size=4)


@st.composite
def record_lists(draw, min_size=0, max_size=8, ts=int64_edgy):
    """(offset_delta, timestamp, key, value, headers) with non-decreasing deltas, as the
    builder takes them."""
    n = draw(st.integers(min_size, max_size))
    delta = draw(st.integers(-1000, 1000))
    out = []
    for _ in range(n):
        t = draw(ts)
        if out:  # the builder takes deltas from the first timestamp that fit an int64
            base = out[0][1]
            t = min(max(t, base + INT64[0], INT64[0]), base + INT64[1], INT64[1])
        out.append((delta, t, draw(blob), draw(blob), draw(headers)))
        delta = min(delta + draw(st.sampled_from([1, 1, 1, 2, 1000, 2**20])), 2**31 - 1)
    return out


def decoded(buf, **kw):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in MemoryRecords(buf, **kw).records()]


def columns(buf, **kw):
    cols = MemoryRecords(buf).decode_columns(**kw)
    c = cols._c

    def binary(name, j):
        if not (c[f"{name}_validity"][j >> 3] >> (j & 7)) & 1:
            return None
        offs = c[f"{name}_offsets"]
        return bytes(c[f"{name}_data"][offs[j]:offs[j + 1]])

    out = []
    for i in range(cols.num_records):
        hs = tuple((bytes(c["header_key_data"][c["header_key_offsets"][j]:
                                               c["header_key_offsets"][j + 1]])
                    .decode("utf-8", "surrogateescape"), binary("header_value", j))
                   for j in range(c["header_offsets"][i], c["header_offsets"][i + 1]))
        out.append((int(cols.offset[i]), int(cols.timestamp[i]), binary("key", i),
                    binary("value", i), hs))
    # the view columns of the same decode hold the same rows
    assert MemoryRecords(buf).decode_columns(views=True, **kw).to_pylist() == cols.to_pylist()
    return out, [int(b) for b in cols.batch_index]


def expected(records, base_offset, base_ts):
    return [(base_offset + d, ts, k, v, tuple((hk, hv) for hk, hv in h))
            for d, ts, k, v, h in records]


# ---------------------------------------------------------------------------------------------
# The native writer against the spec, and the native reader against the spec
# ---------------------------------------------------------------------------------------------


@given(record_lists(min_size=1), st.integers(0, 2**62))
def test_native_builder_writes_the_spec_encoding(records, base_offset):
    """Varints and varlongs (offset deltas, timestamp deltas at int64's edges, lengths, header
    counts) come out of the native builder byte for byte as the spec encodes them."""
    out = native.build_v2_batch(records, base_offset=base_offset)
    base_ts = records[0][1]
    section = b"".join(encode_record(d, wrap64(ts - base_ts), k, v,
                                     [(hk.encode("utf-8", "surrogateescape"), hv) for hk, hv in h])
                       for d, ts, k, v, h in records)
    max_ts = max(ts for _, ts, *_ in records)
    ref = v2_batch(section, len(records), base_offset=base_offset,
                   last_offset_delta=records[-1][0], base_ts=base_ts, max_ts=max_ts)
    assert out == ref


@given(st.lists(st.tuples(int32_edgy, int64_edgy, blob, blob, headers), min_size=1, max_size=6),
       st.integers(0, 2**62), int64_edgy)
def test_decoder_reads_the_spec_encoding(recs, base_offset, base_ts):
    """Arbitrary int32 offset deltas (any order) and int64 timestamp deltas, hand-encoded,
    decode to base + delta with Java's wrapping arithmetic, on both decode paths."""
    section = b"".join(encode_record(d, ts, k, v, [(hk.encode(), hv) for hk, hv in h])
                       for d, ts, k, v, h in recs)
    buf = v2_batch(section, len(recs), base_offset=base_offset, base_ts=base_ts,
                   last_offset_delta=0)
    want = [(base_offset + d, wrap64(base_ts + ts), k, v, tuple(h)) for d, ts, k, v, h in recs]
    assert decoded(buf) == want
    assert columns(buf)[0] == want


@given(st.integers(*INT32))
def test_varint_every_width(v):
    """One int32 through every varint field the parser has (offset delta, and as header count
    or lengths where the value is a legal one)."""
    buf = v2_batch(encode_record(v, -v, None, None, []), 1, base_offset=2**40)
    ((offset, ts, key, value, hs),) = decoded(buf)
    assert offset == 2**40 + v and ts == -v and key is None and value is None and hs == ()


# ---------------------------------------------------------------------------------------------
# Round trips for every codec, and the three read paths agreeing
# ---------------------------------------------------------------------------------------------


@given(record_lists(), st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 2**62),
       st.booleans())
def test_roundtrip_every_codec(records, codec, base_offset, log_append):
    out = native.build_v2_batch(records, base_offset=base_offset, compression=codec,
                                timestamp_type=1 if log_append else 0, log_append_time=77)
    want = expected(records, base_offset, records[0][1] if records else -1)
    if log_append:
        want = [(o, 77, k, v, h) for o, _, k, v, h in want]
    assert decoded(out) == want
    cols, batch_index = columns(out)
    assert cols == want and batch_index == [0] * len(want)
    scan = scan_batches(out)
    (h,) = scan.headers
    assert scan.partial_bytes == 0 and bool(h["crc_valid"])
    # an empty batch is written as Kafka writes one: no records section, codec none
    assert int(h["record_count"]) == len(records)
    assert int(h["compression"]) == (codec if records else 0)
    if records:
        assert int(h["last_offset"]) == base_offset + records[-1][0]
        assert int(h["max_timestamp"]) == (77 if log_append else max(r[1] for r in records))


@given(st.binary(max_size=200_000), st.sampled_from([1, 2, 3, 4]))
@settings(max_examples=60)
def test_codec_roundtrip(data, codec):
    packed = compress(codec, data)
    assert bytes(decompress(codec, packed, len(data), 2)) == data
    if data:
        with pytest.raises(KafkaEngineError):
            decompress(codec, packed, len(data) - 1, 2)


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=5), st.integers(0, 9))
@settings(max_examples=30)
def test_gzip_multi_member(parts, level):
    """Concatenated gzip members (Kafka's readers accept them) decode to the concatenation."""
    data = b"".join(_gzip(p, level) for p in parts)
    assert bytes(decompress(1, data, 1 << 20, 2)) == b"".join(parts)


def _gzip(data, level):
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


@st.composite
def entries(draw):
    """One entry: a v2 batch of any codec, or a legacy message/wrapper (kafka-python)."""
    kind = draw(st.sampled_from(["v2", "v2", "v0", "v1"]))
    if kind == "v2":
        records = draw(record_lists(max_size=4, ts=st.integers(0, 2**45)))
        codec = draw(st.sampled_from([0, 1, 2, 3, 4]))
        return native.build_v2_batch(records, base_offset=draw(st.integers(0, 2**40)),
                                     compression=codec)
    magic = int(kind[1])
    codec = draw(st.sampled_from([0, 1, 2, 3]))
    n = draw(st.integers(1, 3)) if codec else 1
    builder = legacy_records.LegacyRecordBatchBuilder(magic=magic, compression_type=codec,
                                                      batch_size=1 << 20)
    base = draw(st.integers(0, 2**40))
    for i in range(n):
        builder.append(base + i if magic == 0 or codec == 0 else i,
                       timestamp=draw(st.integers(0, 2**41)), key=draw(blob), value=draw(blob))
    out = bytes(builder.build())
    if codec and magic == 1:
        out = struct.pack(">q", base + n - 1) + out[8:]
    return out


@given(st.lists(entries(), min_size=1, max_size=5), st.integers(0, 100))
@settings(max_examples=100)
def test_scan_records_columns_agree(parts, tail):
    """Any mix of entries, perhaps with a cut-off last one: the scan finds the whole ones, the
    records path and the columns path decode the same records, batch by batch."""
    whole = b"".join(parts)
    cut = parts[-1][:tail] if tail < len(parts[-1]) else b""
    buf = whole + cut
    scan = scan_batches(buf)
    assert len(scan) == len(parts) and scan.partial_bytes == len(cut)
    assert bool(scan.headers["crc_valid"].all())
    per_batch = [decoded(p) for p in parts]
    assert decoded(buf) == [r for rs in per_batch for r in rs]
    cols, batch_index = columns(buf)
    assert cols == [r for rs in per_batch for r in rs]
    assert batch_index == [i for i, rs in enumerate(per_batch) for _ in rs]
    mr = MemoryRecords(buf)
    for h, batch, p in zip(scan.headers, mr.batches(), parts):
        assert batch.position == int(h["position"]) and batch.size_in_bytes == len(p)
        assert int(h["last_offset"]) == batch.last_offset
        if batch.magic == 2:
            assert batch.record_count == len(batch.records())
        # a range of the columns path alone agrees with the whole
    for i in range(len(parts)):
        assert columns(buf, start=i, stop=i + 1)[0] == per_batch[i]


# ---------------------------------------------------------------------------------------------
# kafka-python, an independent decoder and encoder
# ---------------------------------------------------------------------------------------------


def kafka_python_decode(buf):
    out = []
    mr = kafka_records.MemoryRecords(bytes(buf))
    while True:
        batch = mr.next_batch()
        if batch is None:
            return out
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))


@given(record_lists(max_size=6, ts=st.integers(-(2**40), 2**45)), st.sampled_from([0, 1, 2, 3, 4]),
       st.integers(0, 2**62))
def test_engine_bytes_decode_alike_in_kafka_python(records, codec, base_offset):
    out = native.build_v2_batch(records, base_offset=base_offset, compression=codec)
    assert kafka_python_decode(out) == decoded(out)


@given(record_lists(max_size=6, ts=st.integers(0, 2**45)), st.sampled_from([0, 1, 2, 3, 4]),
       st.integers(0, 2**40))
def test_kafka_python_bytes_decode_alike_in_engine(records, codec, base_offset):
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for d, ts, k, v, h in records:
        builder.append(d, timestamp=ts, key=k, value=v, headers=list(h))
    out = bytes(builder.build())
    # kafka-python writes offsets as given: base offset 0, deltas = offsets
    out = struct.pack(">q", base_offset) + out[8:]
    ours = decoded(out)
    assert ours == kafka_python_decode(out)
    assert columns(out)[0] == ours


@given(st.sampled_from([0, 1]), st.sampled_from([0, 1, 2, 3]),
       st.lists(st.tuples(blob, blob, st.integers(0, 2**41)), min_size=1, max_size=5))
def test_legacy_decode_alike_in_kafka_python(magic, codec, msgs):
    builder = legacy_records.LegacyRecordBatchBuilder(magic=magic, compression_type=codec,
                                                      batch_size=1 << 22)
    for i, (k, v, ts) in enumerate(msgs):
        builder.append(i, timestamp=ts, key=k, value=v)
    out = bytes(builder.build())
    if not codec:  # an uncompressed legacy "batch" is one message per entry
        assume(len(msgs) == 1)
    ours = decoded(out)
    theirs = kafka_python_decode(out)
    if magic == 0:  # magic 0 has no timestamps: kafka-python says None, the engine -1
        theirs = [(o, -1 if t is None else t, k, v, h) for o, t, k, v, h in theirs]
    assert ours == theirs
    assert columns(out)[0] == ours


# ---------------------------------------------------------------------------------------------
# Arbitrary bytes and mutations: typed errors only
# ---------------------------------------------------------------------------------------------


def _decode_everything(buf):
    mr = MemoryRecords(buf, max_decompressed_bytes=1 << 20)
    for call in (lambda: scan_batches(buf), mr.validate,
                 lambda: list(MemoryRecords(buf, max_decompressed_bytes=1 << 20)
                              .records(verify_crc=False)),
                 lambda: MemoryRecords(buf, max_decompressed_bytes=1 << 20)
                 .decode_columns(verify_crc=False),
                 lambda: MemoryRecords(buf, max_decompressed_bytes=1 << 20)
                 .decode_columns(verify_crc=False, views=True)):
        try:
            call()
        except KafkaEngineError as exc:
            assert exc.position is not None and 0 <= exc.position <= len(buf), repr(exc)


@given(st.binary(max_size=600))
@settings(max_examples=1000)
def test_arbitrary_bytes_raise_only_typed_errors(data):
    _decode_everything(data)


@given(entries(), st.data())
@settings(max_examples=500)
def test_mutated_entries_with_fixed_crc_raise_only_typed_errors(entry, data):
    buf = bytearray(entry)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(16, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    size = len(buf)
    if buf[16] == 2 and size >= 61:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    elif buf[16] in (0, 1):
        struct.pack_into(">I", buf, 12, zlib.crc32(bytes(buf[16:])))
    _decode_everything(bytes(buf))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded(data: bytes, tight_after: bool) -> memoryview:
    """`data` in an anonymous mapping between two inaccessible pages, touching the one after
    it (`tight_after`) or the one before: a read just outside `data` on that side faults
    (SIGSEGV ends the run) instead of reading whatever memory is there. The view keeps the
    mapping alive."""
    page = mmap.PAGESIZE
    body = -(-max(len(data), 1) // page) * page
    mapping = mmap.mmap(-1, body + 2 * page)
    start = page + (body - len(data) if tight_after else 0)
    mapping[start:start + len(data)] = data
    anchor = ctypes.c_char.from_buffer(mapping)
    base = ctypes.addressof(anchor)
    del anchor  # a live export would keep the mapping from ever being unmapped
    for guard in (base, base + page + body):
        if _libc.mprotect(guard, page, 0) != 0:  # PROT_NONE
            err = ctypes.get_errno()
            raise OSError(err, f"mprotect of a guard page: {os.strerror(err)}")
    return memoryview(mapping)[start:start + len(data)]


@pytest.mark.parametrize("tight_after, outside", [(True, 3), (False, -1)])
def test_guarded_buffers_fault_on_a_read_just_outside(tight_after, outside):
    import subprocess
    import sys

    code = ("import ctypes, sys; sys.path.insert(0, 'tests');"
            "from test_properties import guarded;"
            f"view = guarded(b'abc', {tight_after});"
            "assert bytes(view) == b'abc';"
            "base = ctypes.addressof(ctypes.c_char.from_buffer(view));"
            f"ctypes.string_at(base + {outside}, 1)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          timeout=120)
    assert proc.returncode == -11, proc.stderr  # SIGSEGV


@given(st.lists(entries(), min_size=1, max_size=3), st.data())
@settings(max_examples=200)
def test_forged_scan_rows_never_read_outside(parts, data):
    """Scan rows come back from callers (batches_from_headers, decode_columns(headers=...)):
    forged rows are refused (ValueError) or decoded within the buffer. The buffer sits
    against an inaccessible page on one side, so a read outside it faults the run."""
    buf = guarded(b"".join(parts), tight_after=data.draw(st.booleans()))
    rows, _ = native.scan(buf, False)
    forged = rows.copy()
    i = data.draw(st.integers(0, len(forged) - 1))
    field = data.draw(st.sampled_from(["position", "size", "magic", "record_count",
                                       "compression", "timestamp_type", "base_offset"]))
    bounds = {"position": INT64, "base_offset": INT64, "size": INT32, "record_count": INT32,
              "magic": (-128, 127), "compression": (-128, 127), "timestamp_type": (-1, 1)}
    lo, hi = bounds[field]
    near = st.integers(-3, 3).map(lambda d: int(rows[i][field]) + d).filter(
        lambda v: lo <= v <= hi)
    forged[i][field] = data.draw(st.one_of(st.integers(lo, hi), near))
    try:
        for batch in native.batches_from_headers(buf, forged, False, 1 << 20):
            batch.records()
    except ValueError:  # KafkaEngineErrors are ValueErrors too
        pass
    try:
        native.decode_columns(buf, forged, verify_crc=False, max_decompressed_bytes=1 << 20)
    except ValueError:
        pass
