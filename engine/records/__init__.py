"""The record format's Python face: batches, records, codecs, columns and the builder.

Everything heavy runs in `engine._native.records` without the GIL; this package adds
Kafka's names and friendly iteration.
"""

from engine._native.records import (
    Record,
    RecordBatch,
    codec_name,
    compress,
    decompress,
)
from engine._native.records import scan as _scan
from engine.records.builder import RecordBatchBuilder, build_control_batch, build_end_txn_marker
from engine.records.columnar import RecordColumns
from engine.records.control import (
    ControlRecord,
    ControlRecordType,
    control_record_key,
    end_txn_marker_value,
    parse_control_record,
)
from engine.records.memory_records import (
    BATCH_HEADER_DTYPE,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    FileRecords,
    MemoryRecords,
)
from engine.records.types import CompressionType, TimestampType

__all__ = [
    "BATCH_HEADER_DTYPE", "DEFAULT_MAX_DECOMPRESSED_BYTES", "BatchScan",
    "CompressionType", "ControlRecord", "ControlRecordType", "FileRecords", "MemoryRecords",
    "Record", "RecordBatch", "RecordBatchBuilder", "RecordColumns", "TimestampType",
    "build_control_batch", "build_end_txn_marker", "codec_name", "compress",
    "control_record_key", "decompress", "end_txn_marker_value", "parse_control_record",
    "scan_batches",
]


class BatchScan:
    """Result of `scan_batches`: `headers` (BATCH_HEADER_DTYPE rows), `valid_bytes` (end of
    the last whole entry) and `partial_bytes` (a partial trailing entry's length)."""

    __slots__ = ("headers", "valid_bytes", "partial_bytes")

    def __init__(self, headers, valid_bytes: int, total_bytes: int):
        self.headers = headers
        self.valid_bytes = valid_bytes
        self.partial_bytes = total_bytes - valid_bytes

    def __len__(self) -> int:
        return len(self.headers)


def scan_batches(buffer, *, verify_crc: bool = True) -> BatchScan:
    """One nogil pass over `buffer`: every batch header, with CRCs checked when asked."""
    headers, valid = _scan(buffer, verify_crc)
    return BatchScan(headers, valid, memoryview(buffer).nbytes)
