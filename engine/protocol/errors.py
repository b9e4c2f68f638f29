"""Kafka's protocol error codes (org.apache.kafka.common.protocol.Errors) used by `serve`,
and the mapping of the engine's typed errors onto them."""

from __future__ import annotations

import concurrent.futures

from engine.errors import (
    CorruptRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RemoteFetchTimeoutError,
    RemoteLogReaderRejectedError,
    UnknownTopicOrPartitionError,
)

__all__ = ["error_code"]

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
GROUP_ID_NOT_FOUND = 69
FETCH_SESSION_ID_NOT_FOUND = 70
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
UNKNOWN_TOPIC_ID = 100
# DescribeConfigs: resource types and config sources (ConfigResource.Type, ConfigSource)
RESOURCE_TOPIC = 2


def error_code(exc: BaseException) -> int:
    """The code Kafka answers for the engine's error of one partition."""
    if isinstance(exc, OffsetOutOfRangeError):
        return OFFSET_OUT_OF_RANGE
    if isinstance(exc, UnknownTopicOrPartitionError):
        return UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, KafkaStorageError):
        return KAFKA_STORAGE_ERROR
    if isinstance(exc, CorruptRecordError):
        return CORRUPT_MESSAGE
    if isinstance(exc, (RemoteFetchTimeoutError, RemoteLogReaderRejectedError,
                        concurrent.futures.TimeoutError)):
        return REQUEST_TIMED_OUT  # retriable: the client fetches again
    return UNKNOWN_SERVER_ERROR
