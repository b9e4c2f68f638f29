"""Helpers for the object-store I/O tests: a chunk index over explicit chunk sizes (the
`ChunkRanges` protocol of engine.remote.objectstore.reads) and a per-chunk test transform
(zlib), so the I/O layer is tested independently of the plugin's format."""

from __future__ import annotations

import bisect
import itertools
import time
import zlib

from engine.remote.objectstore import SegmentObject


class ListChunkRanges:
    """Chunk i covers original [o_i, o_{i+1}) and transformed [t_i, t_{i+1})."""

    def __init__(self, original_sizes, transformed_sizes=None):
        self.osizes = list(original_sizes)
        self.tsizes = list(self.osizes if transformed_sizes is None else transformed_sizes)
        self.opos = [0, *itertools.accumulate(self.osizes)]
        self.tpos = [0, *itertools.accumulate(self.tsizes)]

    @property
    def chunk_count(self) -> int:
        return len(self.osizes)

    def original_range(self, i):
        return self.opos[i], self.opos[i + 1]

    def transformed_range(self, i):
        return self.tpos[i], self.tpos[i + 1]

    def chunks_for(self, original_start, original_end):
        if original_end <= original_start:
            return range(0)
        first = bisect.bisect_right(self.opos, original_start) - 1
        last = bisect.bisect_left(self.opos, original_end) - 1
        return range(first, min(last, self.chunk_count - 1) + 1)


def plain_segment(key: str, size: int, chunk_size: int, identity: str = "id-1"):
    sizes = [chunk_size] * (size // chunk_size) + ([size % chunk_size] if size % chunk_size
                                                   else [])
    return SegmentObject(key, ListChunkRanges(sizes or [0]), identity)


def zlib_chunks(data: bytes, chunk_size: int):
    """(transformed object bytes, ListChunkRanges, detransform) with zlib per chunk."""
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    transformed = [zlib.compress(c, 1) for c in chunks]
    index = ListChunkRanges([len(c) for c in chunks], [len(t) for t in transformed])

    def detransform(i, raw):
        return zlib.decompress(raw)

    return b"".join(transformed), index, detransform


def wait_for(predicate, what: str, timeout_s: float = 20.0) -> None:
    """Polls `predicate` until it holds; an AssertionError naming `what` after
    `timeout_s` (background work a test waits on: read-ahead, checks, disk writes)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
