"""Hostile input for the record decoder, in its compression codecs: it must never crash, hang or
over-allocate, and every error it raises must be a typed KafkaEngineError naming where the
damage is (by `.position`, and `.offset` where the batch's base offset is known). The
samples and the framing model are in bad_input_support, the encoders in kafka_format.

Covered: unknown codec ids, codecs a magic may not use, damaged gzip, snappy, lz4 and zstd
streams, and decompression bombs for every codec (1 GiB of zeros, built without ever
holding 1 GiB) with peak allocation measured.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
import zlib

import cramjam
import lz4.block as lz4_block
import pytest
import xxhash
import zstandard
from bad_input_support import (
    PREFIX,
    P,
    engine_v2,
    err_key,
    records_error,
    records_of,
)
from kafka_format import (
    MiB,
    legacy_message,
    record,
    record_fields,
    uvarint,
    v2_batch,
    varint,
)

from engine._native import records as native
from engine.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)
from engine.records import MemoryRecords, compress, decompress

# ---------------------------------------------------------------------------------------------
# Codecs: unknown ids, zstd in legacy, damaged streams.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_v2(codec):
    buf = PREFIX + v2_batch(record(record_fields()), 1, base_offset=1000, codec=codec)
    records_error(buf, UnsupportedCompressionTypeError, P, 1000)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [4, 5, 7])
def test_unsupported_codec_legacy(magic, codec):
    inner = legacy_message(magic, 0, b"a", b"b")
    payload = zstandard.ZstdCompressor().compress(inner)
    msg = legacy_message(magic, 33, None, payload, attributes=codec)
    records_error(PREFIX + msg, UnsupportedCompressionTypeError, P, 33)


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
    assert err_key(ec.value) == err_key(ei.value)
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
    e = records_error(buf, InvalidRecordError, P, 1000)
    assert "decompressed" in str(e)


def test_lz4_magic0_header_checksum_quirk():
    """Magic 0 wrappers carry the old (wrong) LZ4 header checksum and are not checked; magic 1
    ones are."""
    inner = legacy_message(0, 0, b"a", b"b")
    frame = _lz4_frame([_lz4_block(inner)], hc=0x00)
    assert records_of(legacy_message(0, 3, None, frame, attributes=3))[0][2:4] == (b"a", b"b")
    inner1 = legacy_message(1, 0, b"a", b"b")
    msg = legacy_message(1, 3, None, _lz4_frame([_lz4_block(inner1)], hc=0x00), attributes=3)
    records_error(msg, CorruptRecordError, 0, 3)


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
