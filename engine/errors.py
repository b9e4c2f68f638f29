"""Typed errors, following Kafka's exception names; each is also a fitting builtin."""

from engine._native.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
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
    "CorruptSnapshotError",
    "CorruptCheckpointError",
]
