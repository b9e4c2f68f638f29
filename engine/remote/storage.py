"""KIP-405's RemoteStorageManager (RSM) plugin interface.

An RSM stores the files of one local segment in remote storage and serves them back. It is
configured with the broker properties under `remote.log.storage.manager.impl.prefix`
(`rsm.config.` by default), the prefix stripped, plus `broker.id`.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Mapping

from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.metadata import RemoteLogSegmentMetadata

__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteStorageManager",
    "RemoteStorageError",
    "RemoteResourceNotFoundError",
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
                          end_position: int | None = None) -> BinaryIO:
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

    def close(self) -> None:
        """Releases resources. Idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
