"""Batch sections decompressed into the per-thread buffer through the codecs' C APIs (lz4,
zstd) and cramjam's decompress_raw_into (snappy) give exactly what the Python codec paths
give: the same records and columns for every framing the producers write, the same typed
errors naming the batch, and no sharing between threads."""

from __future__ import annotations

import os
import random
import struct
import sys
import threading

import cramjam
import lz4.frame
import pytest
import zstandard

from engine._native import codecs as native_codecs
from engine.checksums import crc32c
from engine.errors import CorruptRecordError, RecordSizeLimitError
from engine.records import CompressionType, MemoryRecords, RecordBatchBuilder

OVERHEAD = 61  # v2 batch header bytes before the records section


@pytest.fixture(params=[True, False], ids=["c-api", "python"])
def c_api(request):
    before = native_codecs._codec_c_api()
    native_codecs._codec_c_api(request.param)
    yield request.param
    native_codecs._codec_c_api(before["lz4"] or before["zstd"])


@pytest.mark.skipif(sys.platform != "linux", reason="symbols resolve through dlopen/dlsym")
def test_the_c_api_resolves_from_the_installed_wheels():
    assert native_codecs._codec_c_api() == {"lz4": True, "zstd": True}


def _records(n, seed, value_bytes=(0, 3000)):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.randint(*value_bytes)
        value = None if i % 17 == 5 else (rng.randbytes(size // 4) * 4)[:size]
        key = None if i % 11 == 3 else b"key-%d" % rng.randrange(10**6)
        headers = [(f"h{j}", None if j == 1 else rng.randbytes(j * 3)) for j in range(i % 4)]
        out.append((key, value, headers, 1_700_000_000_000 + i))
    return out


def _plain_batch(records, base_offset):
    b = RecordBatchBuilder(base_offset=base_offset, compression_type=CompressionType.NONE)
    for key, value, headers, ts in records:
        b.append(value, key=key, headers=headers, timestamp=ts)
    return b.build()


def _recompressed(plain: bytes, codec: int, payload: bytes) -> bytes:
    """`plain` (an uncompressed v2 batch) with its records section replaced by `payload`
    compressed with `codec`; length, attributes and CRC-32C fixed up."""
    head = bytearray(plain[:OVERHEAD])
    struct.pack_into(">i", head, 8, OVERHEAD - 12 + len(payload))
    attributes = struct.unpack_from(">h", head, 21)[0]
    struct.pack_into(">h", head, 21, (attributes & ~7) | codec)
    body = bytes(head[21:]) + payload
    struct.pack_into(">I", head, 17, crc32c(body))
    return bytes(head) + payload


def _xerial(section: bytes, block=32 * 1024) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(section), block):
        chunk = bytes(cramjam.snappy.compress_raw(section[i:i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def _zstd_streamed(section: bytes) -> bytes:
    c = zstandard.ZstdCompressor().compressobj()  # zstd-jni style: no content size
    return c.compress(section) + c.flush()


FRAMINGS = {
    "lz4-kafka": (3, lambda s: lz4.frame.compress(
        s, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
        content_checksum=False, store_size=False)),
    "lz4-checksums-and-size": (3, lambda s: lz4.frame.compress(
        s, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, block_checksum=True,
        content_checksum=True, store_size=True)),
    "lz4-4MiB-blocks": (3, lambda s: lz4.frame.compress(
        s, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False)),
    "zstd-content-size": (4, lambda s: zstandard.ZstdCompressor().compress(s)),
    "zstd-streamed": (4, _zstd_streamed),
    "zstd-two-frames": (4, lambda s: zstandard.ZstdCompressor().compress(s[:len(s) // 2])
                        + _zstd_streamed(s[len(s) // 2:])),
    "zstd-skippable-first": (4, lambda s: struct.pack("<II", 0x184D2A50, 3) + b"abc"
                             + zstandard.ZstdCompressor().compress(s)),
    "snappy-xerial": (2, _xerial),
    "snappy-raw": (2, lambda s: bytes(cramjam.snappy.compress_raw(s))),
    "gzip": (1, lambda s: __import__("gzip").compress(s)),
}


def _segment(framing: str, batches=6, seed=1, value_bytes=(0, 3000)) -> tuple[bytes, list]:
    codec, compress = FRAMINGS[framing]
    parts, expected = [], []
    for i in range(batches):
        recs = _records(40 + 7 * i, seed * 100 + i, value_bytes)
        plain = _plain_batch(recs, base_offset=1000 * i)
        parts.append(_recompressed(plain, codec, compress(plain[OVERHEAD:])))
        expected.append(plain)
    return b"".join(parts), expected


def _as_tuples(records):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers, r.sequence) for r in records]


@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_sections_decode_to_the_uncompressed_records(framing, c_api):
    buf, plain = _segment(framing)
    want = _as_tuples(MemoryRecords(b"".join(plain)).records())
    assert _as_tuples(MemoryRecords(buf).records()) == want
    assert MemoryRecords(buf).decode_columns().to_pylist() == \
        MemoryRecords(b"".join(plain)).decode_columns().to_pylist()


def test_large_incompressible_values_take_stored_lz4_blocks(c_api):
    """Random values make LZ4 store blocks as they are (the block size's high bit)."""
    recs = [(b"k", os.urandom(70_000), [], 5)] * 3
    plain = _plain_batch(recs, base_offset=7)
    payload = FRAMINGS["lz4-kafka"][1](plain[OVERHEAD:])
    assert struct.unpack_from("<I", payload, 7)[0] & 0x80000000  # the first block: stored
    buf = _recompressed(plain, 3, payload)
    assert _as_tuples(MemoryRecords(buf).records()) == _as_tuples(MemoryRecords(plain).records())


# Where the compressed data of each framing's first block starts (after the frame and block
# headers): 0xFF bytes there are an impossible LZ4 literal run, zstd entropy tables and snappy
# copy offsets, so the codec itself (not the framing walk) must refuse them.
DAMAGE_AT = {"lz4-kafka": 11, "zstd-content-size": 24, "snappy-xerial": 24}


def _damaged(framing):
    """Two batches; the second's first compressed block damaged (the CRC fixed up)."""
    buf, _ = _segment(framing, batches=2)
    first = struct.unpack_from(">i", buf, 8)[0] + 12
    payload = bytearray(buf[first + OVERHEAD:])
    at = DAMAGE_AT[framing]
    payload[at:at + 48] = b"\xff" * 48
    damaged = _recompressed(buf[first:first + OVERHEAD], FRAMINGS[framing][0], bytes(payload))
    return buf[:first] + damaged, first


@pytest.mark.parametrize("framing", ["lz4-kafka", "zstd-content-size", "snappy-xerial"])
@pytest.mark.parametrize("path", ["records", "columns"])
def test_damaged_sections_raise_typed_errors_naming_the_batch(framing, path, c_api):
    buf, position = _damaged(framing)
    m = MemoryRecords(buf)
    with pytest.raises(CorruptRecordError) as ei:
        list(m.records()) if path == "records" else m.decode_columns()
    assert (ei.value.position, ei.value.offset) == (position, 1000)


@pytest.mark.parametrize("framing", ["lz4-kafka", "zstd-streamed", "snappy-xerial"])
def test_the_limit_holds_on_the_c_api_path(framing, c_api):
    buf, _ = _segment(framing, batches=1, value_bytes=(4000, 5000))
    m = MemoryRecords(buf, max_decompressed_bytes=64 * 1024)
    for run in (lambda: list(m.records()), m.decode_columns):
        with pytest.raises(RecordSizeLimitError) as ei:
            run()
        assert (ei.value.position, ei.value.offset) == (0, 0)


def test_threads_each_use_their_own_buffer_and_context():
    segments = {f: _segment(f, batches=4, seed=i) for i, f in enumerate(
        ["lz4-kafka", "zstd-streamed", "zstd-content-size", "snappy-xerial"])}
    want = {f: _as_tuples(MemoryRecords(b"".join(p)).records())
            for f, (_, p) in segments.items()}
    failures = []

    def work(framing):
        buf = segments[framing][0]
        for _ in range(15):
            if _as_tuples(MemoryRecords(buf).records()) != want[framing]:
                failures.append(framing)
            if len(MemoryRecords(buf).decode_columns()) != len(want[framing]):
                failures.append(framing)

    threads = [threading.Thread(target=work, args=(f,)) for f in segments for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
