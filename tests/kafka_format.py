"""Kafka's record formats written from the spec (DefaultRecord, DefaultRecordBatch,
LegacyRecord), independently of the engine, for tests that build bytes the engine must read:
zigzag varints and varlongs, v2 records as named fields (so a test can replace one and know
where it sits), v2 batches around any records section with their CRC-32C, legacy v0/v1
messages whose lengths may lie, and CRC repair after a deliberate change. Shared by the
bad-input tests, the property tests and the fuzz target (tests/fuzz/fuzz_records.py)."""

from __future__ import annotations

import struct
import zlib

from crc32c import crc32c  # test extra: a missing one must fail, not skip
from kafka.record import legacy_records

__all__ = [
    "MiB", "GiB", "INT32_MAX", "INT32_MIN", "wrap64",
    "uvarint", "varint", "varlong", "bytes_field", "encode_record",
    "record_fields", "record", "field_offset", "v2_batch", "fix_crc", "legacy_message",
    "kafka_python_legacy",
]

MiB = 1 << 20
GiB = 1 << 30
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


def wrap64(v: int) -> int:
    """Two's-complement int64 arithmetic, as Kafka's Java longs (and the C code) do it."""
    return (v + 2**63) % 2**64 - 2**63


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


def bytes_field(b) -> bytes:
    """A nullable bytes field of a v2 record: its varint length (-1 for null), then the bytes."""
    return varint(-1) if b is None else varint(len(b)) + b


def encode_record(offset_delta, ts_delta, key, value, headers) -> bytes:
    """One whole v2 record (length varint included) from its values."""
    body = (b"\0" + varlong(ts_delta) + varint(offset_delta) + bytes_field(key)
            + bytes_field(value) + varint(len(headers)))
    for hk, hv in headers:
        body += bytes_field(hk) + bytes_field(hv)
    return varint(len(body)) + body


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
