from engine._native.append import (
    append_summary as append_summary,
)
from engine._native.append import (
    assign_offsets as assign_offsets,
)
from engine._native.append import (
    epoch_rises as epoch_rises,
)
from engine._native.append import (
    scan_for_append as scan_for_append,
)
from engine._native.append import (
    write_batches as write_batches,
)
from engine._native.builder import build_v2_batch as build_v2_batch
from engine._native.codecs import (
    DEFAULT_MAX_DECOMPRESSED_BYTES as DEFAULT_MAX_DECOMPRESSED_BYTES,
)
from engine._native.codecs import (
    CompressionType as CompressionType,
)
from engine._native.codecs import (
    codec_name as codec_name,
)
from engine._native.codecs import (
    compress as compress,
)
from engine._native.codecs import (
    decompress as decompress,
)
from engine._native.columnar import decode_columns as decode_columns
from engine._native.columnar import decode_view_columns as decode_view_columns
from engine._native.decode import (
    NO_PARTITION_LEADER_EPOCH as NO_PARTITION_LEADER_EPOCH,
)
from engine._native.decode import (
    NO_PRODUCER_EPOCH as NO_PRODUCER_EPOCH,
)
from engine._native.decode import (
    NO_PRODUCER_ID as NO_PRODUCER_ID,
)
from engine._native.decode import (
    NO_SEQUENCE as NO_SEQUENCE,
)
from engine._native.decode import (
    NO_TIMESTAMP as NO_TIMESTAMP,
)
from engine._native.decode import (
    Record as Record,
)
from engine._native.decode import (
    RecordBatch as RecordBatch,
)
from engine._native.decode import (
    TimestampType as TimestampType,
)
from engine._native.decode import (
    batches as batches,
)
from engine._native.decode import (
    batches_from_headers as batches_from_headers,
)
from engine._native.errors import (
    CorruptRecordError as CorruptRecordError,
)
from engine._native.errors import (
    InvalidRecordError as InvalidRecordError,
)
from engine._native.errors import (
    KafkaEngineError as KafkaEngineError,
)
from engine._native.errors import (
    RecordSizeLimitError as RecordSizeLimitError,
)
from engine._native.errors import (
    UnsupportedCompressionTypeError as UnsupportedCompressionTypeError,
)
from engine._native.scan import (
    BATCH_HEADER_DTYPE as BATCH_HEADER_DTYPE,
)
from engine._native.scan import (
    BufferView as BufferView,
)
from engine._native.scan import (
    scan as scan,
)

__all__ = [
    "BATCH_HEADER_DTYPE", "DEFAULT_MAX_DECOMPRESSED_BYTES", "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE", "NO_TIMESTAMP", "BufferView",
    "CompressionType", "CorruptRecordError", "InvalidRecordError", "KafkaEngineError",
    "Record", "RecordBatch", "RecordSizeLimitError", "TimestampType",
    "UnsupportedCompressionTypeError", "append_summary", "assign_offsets", "batches",
    "batches_from_headers", "build_v2_batch", "codec_name", "compress", "decode_columns",
    "decode_view_columns", "decompress", "epoch_rises", "scan", "scan_for_append", "write_batches",
]
