"""Typed errors, following Kafka's exception names; each is also a fitting builtin."""

from engine._native.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    IndexFullError,
    InvalidOffsetError,
    InvalidRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)

__all__ = [
    "KafkaEngineError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordSizeLimitError",
    "UnsupportedCompressionTypeError",
    "CorruptIndexError",
    "InvalidOffsetError",
    "IndexFullError",
    "CorruptSnapshotError",
    "CorruptCheckpointError",
]
