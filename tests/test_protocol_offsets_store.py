"""The committed-offsets file of `serve`: replayed at open, a torn tail truncated away,
damage before the tail a typed error naming the file and position, compaction keeps the
live offsets."""

from __future__ import annotations

import pytest

from engine.protocol.offsets_store import (
    OFFSETS_STORE_FILE,
    CommittedOffset,
    CorruptOffsetsStoreError,
    OffsetsStore,
)


def _commit(store, group, partition, offset):
    store.commit(group, {("t", partition): CommittedOffset(offset, 3, "m", 1000 + offset)})


def test_offsets_are_replayed_and_group_deletes_kept(tmp_path):
    store = OffsetsStore(tmp_path)
    _commit(store, "g", 0, 5)
    _commit(store, "g", 0, 9)
    _commit(store, "h", 1, 7)
    store.delete_group("h")
    store.close()
    again = OffsetsStore(tmp_path)
    assert again.get("g") == {("t", 0): CommittedOffset(9, 3, "m", 1009)}
    assert again.groups() == ["g"]
    again.close()


@pytest.mark.parametrize("cut", [1, 4, 9, 20])
def test_a_torn_tail_is_truncated(tmp_path, cut):
    store = OffsetsStore(tmp_path)
    _commit(store, "g", 0, 5)
    _commit(store, "g", 0, 6)
    store.close()
    path = tmp_path / OFFSETS_STORE_FILE
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    again = OffsetsStore(tmp_path)
    assert again.get("g")[("t", 0)].offset == 5
    again.close()
    assert path.stat().st_size < len(data) - cut + 1  # the torn frame is gone
    _commit(OffsetsStore(tmp_path), "g", 0, 8)
    assert OffsetsStore(tmp_path).get("g")[("t", 0)].offset == 8


def test_damage_before_the_tail_is_an_error(tmp_path):
    store = OffsetsStore(tmp_path)
    _commit(store, "g", 0, 5)
    _commit(store, "g", 0, 6)
    store.close()
    path = tmp_path / OFFSETS_STORE_FILE
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # inside the first payload
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptOffsetsStoreError, match="position 0") as info:
        OffsetsStore(tmp_path)
    assert info.value.file == str(path)


def test_superseded_frames_are_compacted_at_open(tmp_path):
    store = OffsetsStore(tmp_path)
    for i in range(1200):
        _commit(store, "g", 0, i)
    store.close()
    path = tmp_path / OFFSETS_STORE_FILE
    big = path.stat().st_size
    again = OffsetsStore(tmp_path)
    assert path.stat().st_size < big / 100
    assert again.get("g")[("t", 0)].offset == 1199
    again.close()
