"""Kafka's protocol error codes (org.apache.kafka.common.protocol.Errors) used by `serve`,
and the mapping of the engine's typed errors onto them."""

from __future__ import annotations

import concurrent.futures

from engine.errors import (
    CorruptRecordError,
    CorruptRemoteLogMetadataError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RemoteFetchTimeoutError,
    RemoteLogReaderRejectedError,
    UnknownTopicOrPartitionError,
)

__all__ = ["error_code", "is_expired_remote_read"]

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
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
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
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
    if isinstance(exc, (KafkaStorageError, CorruptRemoteLogMetadataError)):
        # a log dir offline, or a partition offline for its damaged remote-log metadata
        return KAFKA_STORAGE_ERROR
    if isinstance(exc, CorruptRecordError):
        return CORRUPT_MESSAGE
    if isinstance(exc, RemoteLogReaderRejectedError):
        # Kafka's RejectedExecutionException from the reader pool: no code of its own
        return UNKNOWN_SERVER_ERROR
    if is_expired_remote_read(exc):
        # ListOffsets: Kafka's expired DelayedRemoteListOffsets. A Fetch never answers it
        # (is_expired_remote_read): the Java consumer throws from poll() on it
        return REQUEST_TIMED_OUT
    return UNKNOWN_SERVER_ERROR


def is_expired_remote_read(exc: BaseException) -> bool:
    """Whether a remote read outlasted its wait: Kafka's expired DelayedRemoteFetch answers
    that partition with no error and no records (the consumer fetches it again)."""
    return isinstance(exc, (RemoteFetchTimeoutError, concurrent.futures.TimeoutError))
