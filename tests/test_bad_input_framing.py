"""Hostile input for the record decoder, at the framing layer (the scan of entries): it
must never crash, hang or over-allocate, and every error it raises must be a typed
KafkaEngineError naming where the damage is (by `.position`, and `.offset` where the
batch's base offset is known). The samples and the framing model are in bad_input_support,
the encoders in kafka_format.

Covered, for v2 batches of every codec and legacy v0/v1 messages: truncation at every byte
(a cut last entry is partial, never an error, and the whole entries before it still
decode); every bit of every byte flipped, with the CRC as written and fixed afterwards; and
scan rows handed back by callers that do not describe an entry.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from bad_input_support import (
    COMPRESSED,
    PREFIX,
    PREFIX_RECORDS,
    SAMPLES,
    P,
    columns_of,
    crc_ok,
    decode_each_batch,
    framing_error_everywhere,
    records_of,
    walk_entries,
)
from kafka_format import (
    INT32_MAX,
    INT32_MIN,
    fix_crc,
)

from engine._native import records as native
from engine.errors import (
    CorruptRecordError,
    KafkaEngineError,
)
from engine.records import MemoryRecords, scan_batches


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
# Truncation at every byte.
# ---------------------------------------------------------------------------------------------


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
    walk = walk_entries(buf)
    if walk.error:
        assert rel in SIZE_FIELD or rel == MAGIC, (rel, walk.error)
        framing_error_everywhere(buf, walk.error)
        return
    scan = scan_batches(buf)
    assert [int(p) for p in scan.headers["position"]] == [e[0] for e in walk.entries]
    assert scan.valid_bytes == walk.valid
    assert bool(np.all(scan.headers["crc_valid"])) == all(crc_ok(buf, e) for e in walk.entries)
    bad = [e for e in walk.entries if not crc_ok(buf, e)]
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
    decode_each_batch(buf)


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
            walk = walk_entries(buf)
            if walk.error:  # the magic byte, flipped to a magic the size cannot hold
                assert rel == MAGIC
                framing_error_everywhere(buf, walk.error)
                continue
            MemoryRecords(buf).validate()
            results = decode_each_batch(buf)
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
            results = decode_each_batch(buf)
            if isinstance(results[1], KafkaEngineError):
                assert results[1].position == P
                assert results[1].offset == struct.unpack_from(">q", sample)[0]


def _legacy_value_start(msg: bytes) -> int:
    pos = 18 + (8 if msg[16] == 1 else 0)
    klen = struct.unpack_from(">i", msg, pos)[0]
    return pos + 4 + max(klen, 0) + 4


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
