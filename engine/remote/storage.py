"""KIP-405's RemoteStorageManager (RSM) plugin interface.

An RSM stores the files of one local segment in remote storage and serves them back. It is
configured with the broker properties under `remote.log.storage.manager.impl.prefix`
(`rsm.config.` by default), the prefix stripped, plus `broker.id`.

The contract: Kafka's four abstract methods, plus every other read the engine makes of an
RSM (ranged reads into a buffer, read-only views, whole index files), each declared here
with a default built on `fetch_log_segment` / `fetch_index`. A plugin that implements only
Kafka's interface therefore works everywhere (the RLM, `fetch`, the Spark source, export);
a store that can do better overrides the defaults. Two hooks the engine calls do nothing by
default: `register_metrics` (the plugin's metrics into the RLM's registry) and
`read_forward` (a sequential reader names the next segment, for read-ahead across segment
boundaries). Callers never probe for methods.
"""

from __future__ import annotations

import abc
import enum
import io
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.metadata import RemoteLogSegmentMetadata

__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
]


class IndexType(enum.Enum):
    """The auxiliary files stored with a segment (Kafka's RemoteStorageManager.IndexType)."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader_epoch"


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What `copy_log_segment_data` uploads for one segment.

    `leader_epoch_index` is the text of a leader-epoch checkpoint holding every epoch entry
    from the log start up to (not including) the next segment's base offset;
    `transaction_index` is None when the segment has no aborted transactions;
    `producer_snapshot` is the `.snapshot` at the next segment's base offset, or None when
    the log has none (older logs; the RSM then stores an empty snapshot).
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot: Path | None
    leader_epoch_index: bytes


class RemoteStorageManager(abc.ABC):
    """Stores and serves remote segments. Implementations must be thread-safe: the copier,
    expiration and reader pools call one instance concurrently.

    Errors: RemoteResourceNotFoundError for something that does not exist,
    RemoteStorageError for every other failure.
    """

    def configure(self, configs: Mapping[str, str]) -> None:
        """Takes the `rsm.config.`-prefixed broker properties (prefix stripped) and
        `broker.id`. Raises ConfigError for a bad value."""

    @abc.abstractmethod
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              segment_data: LogSegmentData) -> bytes | None:
        """Copies the segment and its auxiliary files. Idempotent: a retry with the same
        metadata overwrites whatever a failed attempt left. Returns custom metadata bytes
        (KIP-917) to store with COPY_SEGMENT_FINISHED, or None."""

    @abc.abstractmethod
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO | io.RawIOBase:
        """A readable binary stream over the segment's `.log` bytes from `start_position`
        to `end_position` (both inclusive; None: to the end). The caller closes it."""

    @abc.abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata,
                    index_type: IndexType) -> BinaryIO:
        """A readable binary stream over one auxiliary file. A transaction index that was
        not copied raises RemoteResourceNotFoundError."""

    @abc.abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Deletes every file of the segment. Idempotent: nothing to delete is not an
        error."""

    # -- reads the engine makes, with defaults on the abstract methods ------------------

    @property
    def zero_copy_ranges(self) -> bool:
        """Whether `map_range` returns views of data already in memory (a mapping of a
        stored file): redoing it costs nothing, so a reader never keeps or stitches ranges.
        A plugin overrides it with a property or a class attribute."""
        return False

    @property
    def reads_local_files(self) -> bool:
        """Whether a read's storage I/O is opening, checking and reading files of a local
        filesystem (the filesystem tier), not requests to a store: such waits are short,
        so the RLM runs the reads of one fetch that need it as one reader task, in turn,
        rather than a task each. A plugin overrides it with a property or a class
        attribute."""
        return False

    def read_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                   end_exclusive: int) -> bytes | memoryview:
        """`.log` bytes [start, end_exclusive). Requires 0 <= start <= end_exclusive <=
        segment size (ValueError otherwise); RemoteStorageError when the store returns
        fewer bytes."""
        _check_range(metadata, start, end_exclusive)
        if start == end_exclusive:
            return b""
        with self.fetch_log_segment(metadata, start, end_exclusive - 1) as stream:
            return _read_exactly(stream, end_exclusive - start, metadata, start)

    def read_range_into(self, metadata: RemoteLogSegmentMetadata, start: int,
                        buffer) -> int:
        """Fills the writable `buffer` with `.log` bytes from `start` (the range must lie
        inside the segment). Returns the bytes read (len(buffer))."""
        view = memoryview(buffer).cast("B")
        try:
            data = self.read_range(metadata, start, start + len(view))
            view[:] = data
            return len(view)
        finally:
            view.release()

    def read_range_once(self, metadata: RemoteLogSegmentMetadata, start: int,
                        end_exclusive: int) -> bytes | memoryview:
        """`.log` bytes [start, end_exclusive) that the caller reads once and not again
        soon (a segment's tail read to learn its end offset): a store with a cache or
        read-ahead reads just these bytes, leaving both alone. As `read_range` otherwise;
        the default is `read_range`."""
        return self.read_range(metadata, start, end_exclusive)

    def map_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                  end_exclusive: int) -> memoryview:
        """A read-only view of `.log` bytes [start, end_exclusive): zero-copy where the
        store can give one (see `zero_copy_ranges`), else a view of a fresh read."""
        return memoryview(self.read_range(metadata, start, end_exclusive)).toreadonly()

    def map_prefix(self, metadata: RemoteLogSegmentMetadata, start: int,
                   end_exclusive: int) -> memoryview:
        """`map_range` of [start, e) for the e <= end_exclusive up to which the bytes are
        one view of the store's memory, joined from nothing (e > start for a non-empty
        range): a caller that reads on maps again from e. The default: the whole range."""
        return self.map_range(metadata, start, end_exclusive)

    def map_range_if_open(self, metadata: RemoteLogSegmentMetadata, start: int,
                          end_exclusive: int) -> memoryview | None:
        """`map_range` when it needs no storage I/O at all (the data is already open and
        checked in memory), else None. The RLM serves reads that get a view here on the
        caller's thread; the default never can."""
        return None

    def verifies_batch_crcs(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Whether this RSM checks the CRC of every record batch of the segment's `.log`
        before it serves any range of it (`read_range`, `read_range_into`, `map_range`,
        `map_range_if_open`), failing the read otherwise: a reader's own CRC pass over
        those ranges would check the same bytes again, so it may skip it (offset continuity
        is still the reader's). The answer may turn true later (a store that checks a
        segment once its bytes are all at hand) and false again: a reader asks after it read
        its range, and true then covers that range. The default: no."""
        return False

    def read_generation(self, metadata: RemoteLogSegmentMetadata) -> Hashable | None:
        """A token naming the `.log` bytes this RSM's ranges of the segment serve now, or
        None. Two equal tokens of one segment id promise the same bytes: the token changes
        whenever bytes of the segment are read from storage again (a chunk fetched again, a file
        replaced or rewritten), before those bytes are served. A reader that checked the
        batch CRCs of a range keeps that verdict under the token and skips the CRC pass
        when it reads the range again under the same one (engine.remote.read_verdicts):
        a token must never stay the same while the bytes behind it may differ. The default,
        None, never vouches for anything: every read is checked."""
        return None

    def fetch_index_bytes(self, metadata: RemoteLogSegmentMetadata,
                          index_type: IndexType) -> bytes:
        """The whole auxiliary file, as `fetch_index` (and its checks) gives it."""
        with self.fetch_index(metadata, index_type) as stream:
            return stream.read()

    # -- hooks the engine calls, no-ops by default ---------------------------------------

    def register_metrics(self, registry) -> None:
        """Adds the plugin's own metrics to `registry` (a prometheus_client
        CollectorRegistry: the RemoteLogManager's), so that one scrape of the RLM's metrics
        port sees them too. Called once per RLM; the default has none to add."""

    @property
    def reads_ahead(self) -> bool:
        """Whether `read_forward` has any effect (the store reads ahead): a caller skips
        finding the next segment when it has none."""
        return False

    def read_forward(self, metadata: RemoteLogSegmentMetadata,
                     next_segment: RemoteLogSegmentMetadata | None) -> None:
        """Says that the caller reads `metadata`'s `.log` forward (a consumer fetch walking
        on, a Spark task's ranges, export) and, past its end, continues into `next_segment`
        (the next segment of the lineage; None when there is none or it is unknown). A
        store with read-ahead uses it to prefetch past the segment's end (a reader may name
        several links of the lineage ahead, one call each, for read-ahead wider than a
        segment); the default does nothing, and reads are correct either way."""

    def close(self) -> None:
        """Releases resources. Idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check_range(metadata: RemoteLogSegmentMetadata, start: int, end_exclusive: int) -> None:
    size = metadata.segment_size_in_bytes
    if start < 0 or end_exclusive < start or end_exclusive > size:
        raise ValueError(f"byte range [{start}, {end_exclusive}) outside remote segment "
                         f"{metadata.remote_log_segment_id} of {size} bytes")


def _read_exactly(stream: io.RawIOBase | BinaryIO, n: int, metadata: RemoteLogSegmentMetadata,
                  start: int) -> bytes:
    parts, left = [], n
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            raise RemoteStorageError(
                f"remote segment {metadata.remote_log_segment_id} ended at byte "
                f"{start + n - left}, expected {start + n}")
        parts.append(chunk)
        left -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)
