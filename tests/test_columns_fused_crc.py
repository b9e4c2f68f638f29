"""decode_columns() checks an uncompressed batch's CRC while it copies the batch's records
(fused): every column equals the decode that checks each CRC in a pass of its own first, over
the shared vectors, every codec, aiokafka-built batches, offset filters and column choices;
and a flipped byte anywhere a CRC covers (a value, a record's length, a header, the batch
header) fails with the same typed error, naming the same batch, as that decode."""

from __future__ import annotations

import numpy as np
import pytest
import vectors as V

from engine._native.columnar import decode_columns
from engine._native.scan import scan
from engine.errors import CorruptRecordError
from engine.records import CompressionType, MemoryRecords, build_end_txn_marker
from engine.records.sample import sample_batches

OPTIONS = [{}, {"min_offset": 7, "max_offset": 455}, {"min_offset": 250},
           {"with_keys": False}, {"with_values": False}, {"with_headers": False},
           {"include_control": False}]


def _segment(codec=CompressionType.NONE) -> bytes:
    return (b"".join(sample_batches(450, codec, batch_size=100, seed=5))
            + build_end_txn_marker(True, base_offset=450, producer_id=1, producer_epoch=0,
                                   timestamp=5)
            + b"".join(sample_batches(60, codec, batch_size=30, base_offset=451, seed=6)))


def _assert_same(fused: dict, unfused: dict) -> None:
    assert fused.keys() == unfused.keys()
    for name, column in unfused.items():
        if isinstance(column, np.ndarray):
            assert column.dtype == fused[name].dtype and np.array_equal(column, fused[name]), name
        else:
            assert fused[name] == column, name


def _both(buf, **options) -> tuple[dict | None, Exception | None]:
    """The fused decode, checked against the unfused one: equal columns, or the same error."""
    try:
        unfused = decode_columns(buf, fuse_crc=False, **options)
    except Exception as exc:  # noqa: BLE001 - the fused decode must fail the same way
        with pytest.raises(type(exc)) as fused_error:
            decode_columns(buf, **options)
        assert str(fused_error.value) == str(exc)
        return None, exc
    fused = decode_columns(buf, **options)
    _assert_same(fused, unfused)
    return fused, None


@pytest.mark.parametrize("codec", list(CompressionType))
def test_fused_columns_equal_unfused(codec):
    buf = _segment(codec)
    for options in OPTIONS:
        fused, error = _both(buf, **options)
        assert error is None and fused["num_records"] > 0, options


@pytest.mark.parametrize("relpath", V.record_vector_files(), ids=V.short_id)
def test_fused_columns_equal_unfused_for_every_shared_vector(relpath):
    for blob in V.load_blobs(relpath):
        _both(blob.data)


def test_fused_columns_of_aiokafka_batches_equal_its_records():
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    batches = []
    for base in range(0, 300, 100):
        b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(100):
            b.append(i, 1_700_000_000_000 + base + i, b"user-%d" % (base + i),
                     b'{"n": %d, "pad": "%s"}' % (i, b"x" * (100 + 9 * i)),
                     [("trace-id", b"%016x" % (base + i))])
        batch = bytearray(b.build())
        batch[0:8] = base.to_bytes(8, "big")
        batches.append(bytes(batch))
    buf = b"".join(batches)
    fused, _ = _both(buf)
    rows = MemoryRecords(buf).decode_columns().to_pylist()
    assert [(r.offset, r.key, r.value) for r in MemoryRecords(buf).records()] == \
        [(row["offset"], row["key"], row["value"]) for row in rows]
    assert fused["num_records"] == 300


def _flip_at(buf: bytes, where: str) -> tuple[bytearray, int, int]:
    """A copy of `buf` with one byte of its second batch flipped; (copy, batch position,
    batch base offset)."""
    row = scan(buf, False)[0][1]
    position, size = int(row["position"]), int(row["size"])
    batch = next(b for b in MemoryRecords(buf).batches() if b.position == position)
    record = batch.records()[5]
    at = {
        "value": buf.index(record.value, position) + len(record.value) // 2,
        "record length": position + 61,  # the first record's length varint
        "header": buf.index(record.headers[0][1], position),
        "batch header": position + 30,  # inside the base timestamp
        "last byte": position + size - 1,
    }[where]
    out = bytearray(buf)
    out[at] ^= 0x41
    return out, position, int(row["base_offset"])


@pytest.mark.parametrize("where", ["value", "record length", "header", "batch header",
                                   "last byte"])
@pytest.mark.parametrize("options", [{}, {"with_values": False}, {"min_offset": 120}],
                         ids=["all", "no-values", "filtered"])
def test_flipped_byte_fails_the_crc_as_unfused(where, options):
    buf, position, offset = _flip_at(_segment(), where)
    _, error = _both(bytes(buf), **options)
    assert type(error) is CorruptRecordError
    assert error.reason.startswith("Record batch is corrupt (stored crc = ")
    assert (error.position, error.offset) == (position, offset)


def test_flipped_byte_passes_without_verify_crc():
    buf, _, _ = _flip_at(_segment(), "value")
    fused, error = _both(bytes(buf), verify_crc=False)
    assert error is None and fused["num_records"] == 511
