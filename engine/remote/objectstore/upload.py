"""A segment's `.log` and `.indexes` objects uploaded in the plugin's format: the `.log` as
the file itself (plain mode: byte-identical to the Kafka segment) or as transformed chunks
streamed into a multipart upload, and the indexes concatenated (each encrypted whole when
encryption is on; an empty one takes no bytes). Each returns what the manifest records of
its object and the bytes written; the caller uploads the manifest last."""

from __future__ import annotations

import os

from engine.errors import RemoteStorageError
from engine.remote.objectstore import segment_source
from engine.remote.objectstore.manifest import (
    GCM_OVERHEAD,
    FixedChunkIndex,
    SegmentIndex,
    SegmentIndexes,
    VariableChunkIndex,
)
from engine.remote.objectstore.segment_source import INT32_MAX
from engine.remote.objectstore.store import ObjectStore
from engine.remote.objectstore.transforms import ChunkTransform
from engine.remote.storage import IndexType, LogSegmentData

__all__ = ["upload_indexes", "upload_log"]


def upload_log(store: ObjectStore, key: str, path, file_size: int, chunk_size: int,
               transform: ChunkTransform, pool, ahead: int):
    """(chunk index, bytes written) of the `.log` uploaded to `key`; transformed chunks are
    made on `pool`, at most `ahead` of the upload."""
    c = chunk_size
    if transform.identity:
        written = store.upload(key, path, object_type="log")
        if written != file_size:
            raise RemoteStorageError(
                f"segment {path} changed during its upload: {written} bytes sent, "
                f"{file_size} expected", file=str(path))
        n = max(1, -(-file_size // c))
        last = file_size - (n - 1) * c
        return FixedChunkIndex(c, file_size, c, last), written
    sizes: list[int] = []
    written = store.upload(key, segment_source.transformed_chunks(
        path, file_size, c, transform, sizes, pool, ahead), object_type="log")
    if sum(sizes) != written or len(sizes) != (-(-file_size // c) if file_size else 0):
        raise RemoteStorageError(f"upload of {path} sent {written} bytes for "
                                 f"{len(sizes)} chunks", file=str(path))
    if transform.compression:
        return VariableChunkIndex(c, file_size, sizes), written
    extra = GCM_OVERHEAD if transform.data_key is not None else 0
    if not sizes:
        return FixedChunkIndex(c, 0, c + extra, 0), written
    return FixedChunkIndex(c, file_size, c + extra, sizes[-1]), written


def upload_indexes(store: ObjectStore, key: str, data: LogSegmentData,
                   transform: ChunkTransform) -> tuple[SegmentIndexes, int]:
    """(the manifest's index entries, bytes written) of the `.indexes` uploaded to `key`."""
    sources = [
        (IndexType.OFFSET, data.offset_index),
        (IndexType.TIMESTAMP, data.time_index),
        (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot),
        (IndexType.LEADER_EPOCH, bytes(data.leader_epoch_index)),
    ]
    txn = data.transaction_index
    if txn is not None and os.path.exists(txn):
        sources.append((IndexType.TRANSACTION, txn))
    parts, entries, position = [], {}, 0
    for index_type, source in sources:
        raw = segment_source.read_source(source)
        stored = transform.encrypt(raw) if raw else b""
        parts.append(stored)
        entries[index_type] = SegmentIndex(position, len(stored))
        position += len(stored)
    if position > INT32_MAX:
        raise RemoteStorageError(f"the indexes of segment {data.log_segment} take "
                                 f"{position} bytes, over int32", file=str(data.log_segment))
    indexes = SegmentIndexes(entries[IndexType.OFFSET], entries[IndexType.TIMESTAMP],
                             entries[IndexType.PRODUCER_SNAPSHOT],
                             entries[IndexType.LEADER_EPOCH],
                             entries.get(IndexType.TRANSACTION))
    written = store.upload(key, b"".join(parts), object_type="indexes")
    return indexes, written
