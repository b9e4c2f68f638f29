"""The committed-offsets file of `serve`: replayed at open, a torn tail (cut, garbled or
zero-filled) truncated away, damage before the tail a typed error naming the file and
position, compaction at open and while commits go on keeps the live offsets, recovery keeps
everything before the damage."""

from __future__ import annotations

import pytest

from engine.checksums import crc32c
from engine.protocol import offsets_store
from engine.protocol.offsets_store import (
    OFFSETS_STORE_FILE,
    CommittedOffset,
    CorruptOffsetsStoreError,
    OffsetsStore,
    recover_offsets_store,
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


def test_superseded_frames_are_compacted_at_open(tmp_path, monkeypatch):
    with monkeypatch.context() as m:  # a file written without compaction
        m.setattr(offsets_store, "_COMPACT_MIN_FRAMES", 1 << 30)
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


def _frames(tmp_path, commits):
    store = OffsetsStore(tmp_path)
    for partition, offset in commits:
        _commit(store, "g", partition, offset)
    store.close()
    return tmp_path / OFFSETS_STORE_FILE


def test_a_bad_length_in_the_middle_is_an_error_not_a_truncation(tmp_path):
    path = _frames(tmp_path, [(0, 5), (1, 6), (2, 7)])
    data = bytearray(path.read_bytes())
    second = 8 + int.from_bytes(data[:4], "big")
    data[second:second + 4] = (1 << 30).to_bytes(4, "big")  # runs past the end of the file
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptOffsetsStoreError, match=f"position {second} ") as info:
        OffsetsStore(tmp_path)
    assert info.value.file == str(path) and info.value.position == second
    assert path.read_bytes() == bytes(data)  # nothing truncated


@pytest.mark.parametrize("cut", [0, 3, 11])
def test_a_zero_filled_tail_is_a_torn_tail(tmp_path, cut):
    path = _frames(tmp_path, [(0, 5), (0, 6)])
    data = path.read_bytes()
    # a preallocated tail: zeros after the last frame, or over the end of a cut frame
    path.write_bytes(data[:len(data) - cut] + bytes(4096))
    again = OffsetsStore(tmp_path)
    assert again.get("g")[("t", 0)].offset == (6 if cut == 0 else 5)
    _commit(again, "g", 1, 9)
    again.close()
    assert OffsetsStore(tmp_path).get("g")[("t", 1)].offset == 9


def test_a_frame_that_passes_its_crc_but_is_not_an_entry_is_an_error(tmp_path):
    path = _frames(tmp_path, [(0, 5)])
    junk = b"not json"
    path.write_bytes(path.read_bytes() + len(junk).to_bytes(4, "big")
                     + crc32c(junk).to_bytes(4, "big") + junk)
    with pytest.raises(CorruptOffsetsStoreError, match="passes its CRC-32C"):
        OffsetsStore(tmp_path)


def test_a_huge_commit_loses_no_other_commit(tmp_path):
    store = OffsetsStore(tmp_path)
    _commit(store, "g", 0, 5)
    store.commit("big", {("t", 0): CommittedOffset(1, -1, "x" * (3 << 20), 1)})
    _commit(store, "h", 1, 6)
    store.close()
    again = OffsetsStore(tmp_path)
    assert again.get("g")[("t", 0)].offset == 5
    assert again.get("big")[("t", 0)].metadata == "x" * (3 << 20)
    assert again.get("h")[("t", 1)].offset == 6


def test_the_file_stays_bounded_while_commits_go_on(tmp_path):
    store = OffsetsStore(tmp_path)
    path = tmp_path / OFFSETS_STORE_FILE
    largest = 0
    for i in range(6000):
        _commit(store, "g", i % 10, i)
        largest = max(largest, path.stat().st_size)
    frame = len(path.read_bytes()) // store._frames
    # compaction keeps it under (compaction threshold + one batch) frames
    assert largest <= 1100 * frame * 1.5, (largest, frame)
    store.close()
    again = OffsetsStore(tmp_path)
    assert {p: again.get("g")[("t", p)].offset for p in range(10)} == {
        p: 5990 + p for p in range(10)}


def test_recovery_keeps_everything_before_the_damage_and_a_copy(tmp_path):
    path = _frames(tmp_path, [(0, 5), (1, 6), (2, 7)])
    data = bytearray(path.read_bytes())
    second = 8 + int.from_bytes(data[:4], "big")
    data[second + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    line = recover_offsets_store(tmp_path)
    assert f"position {second}" in line
    [copy] = tmp_path.glob(OFFSETS_STORE_FILE + ".damaged-*")
    assert copy.read_bytes() == bytes(data)
    store = OffsetsStore(tmp_path)
    assert store.get("g") == {("t", 0): CommittedOffset(5, 3, "m", 1005)}
    store.close()
    assert "nothing to recover" in recover_offsets_store(tmp_path)


def test_an_entry_without_its_fields_is_an_error(tmp_path):
    path = _frames(tmp_path, [(0, 5)])
    junk = b'{"group":"g","topic":"t"}'
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + len(junk).to_bytes(4, "big")
                     + crc32c(junk).to_bytes(4, "big") + junk)
    with pytest.raises(CorruptOffsetsStoreError, match=f"position {size} .*KeyError"):
        OffsetsStore(tmp_path)
