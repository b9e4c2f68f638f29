"""decode_columns(views=True): keys, values and header keys and values as Arrow views into the
segment (or each batch's decompressed section) equal the copied columns for every shared
vector, every codec, legacy data, control batches and offset filters, with and without the CRC
check; and the arrays keep what they point into alive after the segment is closed and its file
deleted."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest
import vectors as V

from engine.records import CompressionType, FileRecords, MemoryRecords, build_end_txn_marker
from engine.records.sample import sample_batches


def _both(buf, **options):
    """(copied, views) to_pylist() of the same decode, or the same error type from both."""
    try:
        copied = MemoryRecords(buf).decode_columns(**options).to_pylist()
    except Exception as exc:  # noqa: BLE001 - the views path must fail the same way
        with pytest.raises(type(exc)):
            MemoryRecords(buf).decode_columns(views=True, **options)
        return None, None
    cols = MemoryRecords(buf).decode_columns(views=True, **options)
    assert cols.views
    assert cols.keys().type == pa.binary_view() and cols.values().type == pa.binary_view()
    headers = cols.header_lists()
    assert headers.type == pa.list_(pa.struct([("key", pa.string_view()),
                                               ("value", pa.binary_view())]))
    for array in (cols.keys(), cols.values(), headers):
        array.validate(full=True)
    return copied, cols.to_pylist()


@pytest.mark.parametrize("relpath", V.record_vector_files(), ids=V.short_id)
def test_views_equal_copies_for_every_shared_vector(relpath):
    for blob in V.load_blobs(relpath):
        for verify_crc in (True, False):
            copied, views = _both(blob.data, verify_crc=verify_crc)
            assert views == copied, blob.id


@pytest.mark.parametrize("codec", list(CompressionType))
def test_views_equal_copies_for_every_codec(codec):
    buf = b"".join(sample_batches(360, codec, batch_size=30, seed=int(codec)))
    copied, views = _both(buf)
    assert copied and views == copied
    assert _both(buf, verify_crc=False) == (copied, copied)
    first, last = views[0]["offset"], views[-1]["offset"]
    for lo, hi in ((first + 7, -1), (-1, last - 5), (first + 40, first + 41)):
        assert _both(buf, min_offset=lo, max_offset=hi)[1] == \
            [r for r in copied if r["offset"] >= lo and (hi < 0 or r["offset"] < hi)]


@pytest.mark.parametrize("codec", [CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_sections_share_a_few_blocks_and_a_large_one_moves_to_a_block_of_its_own(codec):
    """Decompressed sections lie one after another in blocks that grow from 256 KiB: many
    small batches share blocks, and a batch larger than the block in use (1.5 MiB here) goes
    to a new one whole, with the batches after it still correct."""
    small = list(sample_batches(400, codec, batch_size=20, seed=11))
    large = list(sample_batches(150, codec, batch_size=150, base_offset=400, seed=12,
                                min_value=9000, max_value=11000))
    tail = list(sample_batches(60, codec, batch_size=20, base_offset=550, seed=13))
    buf = b"".join(small + large + tail)
    copied, views = _both(buf)
    assert copied and views == copied
    cols = MemoryRecords(buf).decode_columns(views=True)
    assert 2 <= len(cols["buffers"]) <= 6  # the source, then a few blocks for 24 sections


def test_control_batches_are_left_out_or_kept_as_asked():
    buf = (b"".join(sample_batches(10, batch_size=5, seed=3))
           + build_end_txn_marker(True, base_offset=10, producer_id=4, producer_epoch=0))
    for include in (True, False):
        copied, views = _both(buf, include_control=include)
        assert views == copied
    assert len(_both(buf, include_control=False)[1]) == 10


def test_short_values_are_inline_and_long_ones_point_into_the_segment():
    buf = b"".join(sample_batches(30, batch_size=10, seed=5))
    cols = MemoryRecords(buf).decode_columns(views=True)
    assert cols["buffers"][0] is not None and len(cols["buffers"]) == 1  # nothing copied
    for name in ("key_views", "header_key_views", "header_value_views"):
        views = cols[name].view("<i4").reshape(-1, 4)
        assert all(length <= 12 or index == 0 for length, _, index, _ in views.tolist())
    assert "header_key_data" not in cols._c and "header_value_data" not in cols._c


def test_arrays_outlive_the_closed_and_deleted_segment(tmp_path):
    """Decode, close and delete the segment, drop everything but the arrays, then use them;
    once the arrays go, the mapping goes too."""
    for codec in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
        path = tmp_path / f"{int(codec)}.log"
        path.write_bytes(b"".join(sample_batches(240, codec, batch_size=40, seed=9)))
        want = MemoryRecords(path.read_bytes()).decode_columns().to_pylist()
        segment = FileRecords(path)
        cols = segment.decode_columns(views=True)
        keys, values, headers = cols.keys(), cols.values(), cols.header_lists()
        segment.close()
        path.unlink()
        del cols, segment
        gc.collect()
        filler = [bytes(4096) for _ in range(2000)]  # reuse of any freed memory shows up
        assert keys.to_pylist() == [r["key"] for r in want]
        assert values.to_pylist() == [r["value"] for r in want]
        assert [[(h["key"], h["value"]) for h in hs] for hs in headers.to_pylist()] == \
            [list(r["headers"]) for r in want]
        del filler, keys, values, headers
        gc.collect()
        with open("/proc/self/maps") as maps:
            assert str(path) not in maps.read()
