"""Kafka's enums for the record format, defined with the native kernels."""

from engine._native.records import CompressionType, TimestampType

__all__ = ["CompressionType", "TimestampType"]
