"""Views of a sequence of record batches: in memory (MemoryRecords) or a file (FileRecords).

Both are thin over `engine._native.records`: one nogil scan finds every entry, and batches,
records or columns are decoded from it on demand. An entry cut short at the end of the
buffer (a fetch response trimmed at max bytes, a torn log tail) is not an error: it is left
out and reported by `partial_bytes`, as Kafka's readers do.
"""

from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Iterator

import numpy as np

from engine._native import records as _records
from engine.errors import CorruptRecordError, KafkaEngineError
from engine.records import _prefetch
from engine.records.columnar import RecordColumns

__all__ = ["MemoryRecords", "FileRecords", "BATCH_HEADER_DTYPE",
           "DEFAULT_MAX_DECOMPRESSED_BYTES"]

BATCH_HEADER_DTYPE = _records.BATCH_HEADER_DTYPE
DEFAULT_MAX_DECOMPRESSED_BYTES = _records.DEFAULT_MAX_DECOMPRESSED_BYTES


class MemoryRecords:
    """Record batches in any buffer (bytes, bytearray, memoryview, mmap, numpy).

    `file` only names the source in error messages. Scans are cached; the object is safe to
    read from several threads once `scan()` has run.
    """

    def __init__(self, buffer, *, file: str | os.PathLike | None = None,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
        self._view = _records.BufferView(buffer)
        self.file = None if file is None else os.fspath(file)
        self.max_decompressed_bytes = max_decompressed_bytes
        self._headers: np.ndarray | None = None
        self._crc_checked = False
        self._valid_bytes = 0

    @property
    def buffer(self):
        return self._view.obj

    def size_in_bytes(self) -> int:
        return len(self._view)

    def _named(self, exc: KafkaEngineError) -> KafkaEngineError:
        return exc.with_file(self.file) if self.file is not None else exc

    def scan(self, verify_crc: bool = False) -> np.ndarray:
        """The BATCH_HEADER_DTYPE row of every whole entry (cached)."""
        if self._headers is None or (verify_crc and not self._crc_checked):
            try:
                self._headers, self._valid_bytes = _records.scan(self._view, verify_crc)
            except KafkaEngineError as exc:
                raise self._named(exc) from None
            self._crc_checked = verify_crc
        return self._headers

    @property
    def valid_bytes(self) -> int:
        """End of the last whole entry."""
        self.scan()
        return self._valid_bytes

    @property
    def partial_bytes(self) -> int:
        """Bytes of a partial trailing entry (0 when the buffer ends on a boundary)."""
        return len(self._view) - self.valid_bytes

    def batches(self) -> Iterator[_records.RecordBatch]:
        headers = self.scan()
        yield from _records.batches_from_headers(self._view, headers, self._crc_checked,
                                                 self.max_decompressed_bytes)

    def records(self, verify_crc: bool = True,
                decompress_ahead: int = 0) -> Iterator[_records.Record]:
        """Every record of every batch in order (legacy wrappers expanded). Each batch's CRC
        is checked first unless `verify_crc` is False (Kafka consumers' check.crcs).

        With `decompress_ahead` > 0, compressed batches are decompressed that many groups
        ahead on a shared thread pool (the codecs release the GIL). It is off by default:
        measured here (bench/RESULTS.md) the pool threads' GIL hand-offs cost more than the
        overlap gains while this thread is busy creating Record objects.
        """
        # one list per batch: chain hands its records out from C, where a generator
        # yielding each record would be resumed once per record
        return itertools.chain.from_iterable(self._record_lists(verify_crc, decompress_ahead))

    def _record_lists(self, verify_crc: bool, decompress_ahead: int) -> Iterator[list]:
        batches = list(self.batches())
        sections = (_prefetch.sections_ahead(batches, decompress_ahead, verify_crc)
                    if decompress_ahead > 0 else None)
        try:
            for batch in batches:
                if sections is None:
                    if verify_crc:
                        batch.ensure_valid()
                    yield batch.records()
                else:
                    section = next(sections)
                    if isinstance(section, Exception):
                        raise section
                    yield batch.records(section)
        except KafkaEngineError as exc:
            raise self._named(exc) from None
        finally:
            if sections is not None:
                sections.close()

    def validate(self) -> None:
        """Raises CorruptRecordError for the first entry whose CRC is wrong."""
        headers = self.scan(verify_crc=True)
        bad = np.flatnonzero(~headers["crc_valid"])
        if len(bad):
            batch = _records.batches_from_headers(self._view, headers[bad[:1]], True)[0]
            try:
                batch.ensure_valid()
            except CorruptRecordError as exc:
                raise self._named(exc) from None

    def decode_columns(self, start: int = 0, stop: int | None = None, *,
                       min_offset: int = -1, max_offset: int = -1,
                       include_control: bool = True, verify_crc: bool = True,
                       views: bool = False, with_keys: bool = True, with_values: bool = True,
                       with_headers: bool = True) -> RecordColumns:
        """Records of batches [start, stop) as column buffers (see RecordColumns). CRCs are
        checked batch by batch just before decoding, while the bytes are in cache.

        Keys, values and headers are built only when asked for (`with_keys`, `with_values`,
        `with_headers`; not with `views`, which copies no key or value anyway): a reader of
        offsets and timestamps copies no record bytes, and without `verify_crc` never reads
        the values of an uncompressed batch at all.

        With `views`, keys and values are not copied: they become Arrow binary views into
        this buffer (uncompressed batches) or into each batch's decompressed section, which
        the arrays keep alive, for consumers that take view types (pyarrow, Polars, DuckDB).
        A FileRecords mapping then outlives close() and the file's deletion for as long as
        the arrays exist; the file must not be truncated meanwhile (sealed segments only)."""
        headers = self.scan()
        stop = -1 if stop is None else stop
        try:
            if views:
                cols = _records.decode_view_columns(
                    self._view, headers, start, stop, min_offset, max_offset, include_control,
                    verify_crc, self.max_decompressed_bytes)
            else:
                cols = _records.decode_columns(
                    self._view, headers, start, stop, min_offset, max_offset, include_control,
                    verify_crc, self.max_decompressed_bytes, with_keys, with_values,
                    with_headers)
        except KafkaEngineError as exc:
            raise self._named(exc) from None
        return RecordColumns(cols, headers)

    def decode_column_chunks(self, chunk_bytes: int = 8 << 20, *, threads: int | None = None,
                             min_offset: int = -1, max_offset: int = -1,
                             include_control: bool = True,
                             verify_crc: bool = True) -> list[RecordColumns]:
        """The records as a list of RecordColumns, one per run of whole batches of about
        `chunk_bytes`, decoded in parallel on `threads` threads (None: the shared pool sized
        from the CPU count). Decoding runs without the GIL, so this scales with cores; the
        chunks are in offset order and, unlike one big decode, need no final copy (each one
        becomes an Arrow record batch as it is)."""
        headers = self.scan()
        bounds = _chunk_bounds(headers, chunk_bytes)
        if len(bounds) <= 1 or threads == 1:
            return [self.decode_columns(a, b, min_offset=min_offset, max_offset=max_offset,
                                        include_control=include_control,
                                        verify_crc=verify_crc) for a, b in bounds]
        pool = _prefetch.executor(threads)
        futures = [pool.submit(self.decode_columns, a, b, min_offset=min_offset,
                               max_offset=max_offset, include_control=include_control,
                               verify_crc=verify_crc) for a, b in bounds]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()

    def __iter__(self):
        return self.batches()

    def __repr__(self):
        return f"MemoryRecords({len(self._view)} bytes{', ' + self.file if self.file else ''})"


def _chunk_bounds(headers: np.ndarray, chunk_bytes: int) -> list[tuple[int, int]]:
    """[start, stop) row ranges of about `chunk_bytes` each (at least one batch)."""
    if len(headers) == 0:
        return [(0, 0)]
    ends = np.cumsum(headers["size"], dtype=np.int64)
    cuts = np.searchsorted(ends, np.arange(chunk_bytes, int(ends[-1]), chunk_bytes), side="left")
    edges = sorted(set([0, *(int(c) + 1 for c in cuts), len(headers)]))
    return [(a, b) for a, b in itertools.pairwise(edges) if a < b]


class FileRecords(MemoryRecords):
    """A log segment (or any file of batches) memory-mapped read-only.

    `end` limits the view to the first `end` bytes (a segment's known size). Close it (or use
    `with`) to unmap; batches and records obtained from it must not outlive it.
    """

    def __init__(self, path: str | os.PathLike, *, end: int | None = None,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            length = size if end is None else min(end, size)
            self._mmap = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ) if length else None
        buf = memoryview(self._mmap) if self._mmap is not None else b""
        super().__init__(buf, file=self.path, max_decompressed_bytes=max_decompressed_bytes)

    def close(self) -> None:
        if self._mmap is not None:
            self._view = _records.BufferView(b"")
            self._headers = None
            mapping, self._mmap = self._mmap, None
            try:
                mapping.close()
            except BufferError:
                # view columns (decode_columns(views=True)) still export the mapping: it is
                # unmapped when the last array using it is collected
                del mapping

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
