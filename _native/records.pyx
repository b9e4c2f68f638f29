# cython: language_level=3
"""Kafka record batches: the native record path's one public face.

The work is split by concept into modules that share C-level declarations through `.pxd`
files (cross-module calls are direct C calls through pointers exported at import, types are
shared, inline helpers are inlined in every user):

    engine._native.scan      BufferView, scan(): one nogil pass to BATCH_HEADER_DTYPE rows
    engine._native.codecs    bounded decompression, producer-style compression
    engine._native.decode    RecordBatch and Record: v2 and legacy (magic 0/1) decode
    engine._native.columnar  decode_columns(): batches into Arrow-layout column buffers, or
                             Arrow binary views into the source (decode_view_columns)
    engine._native.columns   those column buffers and the per-record appends into them
    engine._native.builder   build_v2_batch()
    engine._native.append    leader appends over scan rows (offsets, epochs, pwritev)

This module re-exports their public names, so callers import from one place. Byte layouts
are documented in `_native/include/batch.h` and Kafka's DefaultRecordBatch / LegacyRecord.
"""

from engine._native.append import (
    append_summary,
    assign_offsets,
    epoch_rises,
    scan_for_append,
    write_batches,
)
from engine._native.builder import build_v2_batch
from engine._native.codecs import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    codec_name,
    compress,
    decompress,
)
from engine._native.columnar import decode_columns, decode_view_columns
from engine._native.decode import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    RecordBatch,
    TimestampType,
    batches,
    batches_from_headers,
)
from engine._native.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)
from engine._native.scan import BATCH_HEADER_DTYPE, BufferView, scan

__all__ = [
    "BATCH_HEADER_DTYPE", "DEFAULT_MAX_DECOMPRESSED_BYTES", "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE", "NO_TIMESTAMP", "BufferView",
    "CompressionType", "CorruptRecordError", "InvalidRecordError", "KafkaEngineError",
    "Record", "RecordBatch", "RecordSizeLimitError", "TimestampType",
    "UnsupportedCompressionTypeError", "append_summary", "assign_offsets", "batches",
    "batches_from_headers", "build_v2_batch", "codec_name", "compress", "decode_columns",
    "decode_view_columns", "decompress", "epoch_rises", "scan", "scan_for_append", "write_batches",
]
