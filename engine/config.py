"""Kafka-named configuration: `.properties` parsing, broker configs and per-topic resolution.

Every setting the engine reads has Kafka's name, type and default (Kafka's ServerLogConfigs,
TopicConfig and RemoteLogManagerConfig). Three pieces:

- `parse_properties` / `load_properties`: Java `.properties` syntax (`=`, `:` or whitespace
  separators, `#`/`!` comments, `\\` line continuations, `\\t \\n \\r \\f \\uXXXX` escapes,
  duplicate keys: the last wins).
- `BrokerConfig`: the broker's properties, every known key parsed and validated at
  construction; unknown keys are kept and reported by `unused()`.
- `TopicConfig.resolve(overrides, broker)`: every topic config with its value and source:
  the topic override, the broker synonym (`log.retention.ms` > `log.retention.minutes` >
  `log.retention.hours`, `log.roll.ms` > `log.roll.hours`, ...), or the default.

All errors are `ConfigError` (a `KafkaEngineError` and a `ValueError`) naming the key, the
value seen and the rule it broke. Config values never change after construction; the only
mutable state is `BrokerConfig`'s record of prefixes handed out (for `unused()`), a set
updated atomically, so instances may be shared between threads.

Defaults follow Kafka 4.0 (`message.max.bytes` 1048588,
`log.flush.interval.*` Long.MAX_VALUE, `log.retention.hours`/`log.roll.hours` 168, ...).
Engine extension: a broker-level `remote.storage.enable` is the default for every topic.
"""

from __future__ import annotations

import difflib
import enum
import errno
import fcntl
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ConfigError, _shown

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_STORE_FILE",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "Custom",
    "Importance",
    "OneOf",
    "Range",
    "ResolvedValue",
    "TopicConfig",
    "TopicConfigStore",
    "ValidList",
    "broker_directories",
    "create_missing_dirs",
    "filesystem_tier_dirs",
    "load_broker_config",
    "load_properties",
    "parse_properties",
]

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
_LONG_DIGITS = len(str(LONG_MAX))
MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000
# Kafka's `-2` for local retention: "use retention.ms / retention.bytes".
LOCAL_RETENTION_USE_TOTAL = -2
# LegacyRecord.RECORD_OVERHEAD_V0: the smallest segment.bytes Kafka accepts.
MIN_SEGMENT_BYTES = 14


class ConfigType(enum.Enum):
    """Kafka's ConfigDef.Type subset used by the engine."""

    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"
    CLASS = "class"


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class ConfigSource(enum.Enum):
    """Where a resolved topic value came from (Kafka's DescribeConfigs source names)."""

    DYNAMIC_TOPIC_CONFIG = "topic override"
    STATIC_BROKER_CONFIG = "broker config"
    DEFAULT_CONFIG = "default"


# ---------------------------------------------------------------------------- validators


@dataclass(frozen=True)
class Range:
    """Inclusive numeric bounds; either end may be None (unbounded)."""

    min: float | None = None
    max: float | None = None

    def check(self, key: str, value: Any) -> None:
        if value is None:
            return
        if (self.min is not None and value < self.min) or (
            self.max is not None and value > self.max
        ):
            raise ConfigError(key, value, f"must be {self.describe()}")

    def describe(self) -> str:
        if self.max is None:
            return f"at least {self.min}"
        if self.min is None:
            return f"at most {self.max}"
        return f"between {self.min} and {self.max} inclusive"


@dataclass(frozen=True)
class OneOf:
    """The value must be one of `choices` (case-sensitive, as Kafka's ValidString)."""

    choices: tuple[str, ...]

    def check(self, key: str, value: Any) -> None:
        if value is not None and value not in self.choices:
            raise ConfigError(key, value, f"must be one of {list(self.choices)}")


@dataclass(frozen=True)
class ValidList:
    """Every element of a list value must be one of `choices` (Kafka's ValidList)."""

    choices: tuple[str, ...]
    allow_empty: bool = False

    def check(self, key: str, value: Any) -> None:
        if value is None:
            return
        if not value and not self.allow_empty:
            raise ConfigError(key, value, f"must not be empty; choose from {list(self.choices)}")
        for item in value:
            if item not in self.choices:
                raise ConfigError(key, value, f"each element must be one of {list(self.choices)}")


@dataclass(frozen=True)
class Custom:
    """A predicate with a description of the rule it enforces."""

    predicate: Callable[[Any], bool]
    rule: str

    def check(self, key: str, value: Any) -> None:
        if value is not None and not self.predicate(value):
            raise ConfigError(key, value, self.rule)


Validator = Range | OneOf | ValidList | Custom

_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_CLASS_NAME = re.compile(r"[A-Za-z_][\w$]*(\.[A-Za-z_][\w$]*)*(:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)?")


# ---------------------------------------------------------------------------- definitions


@dataclass(frozen=True)
class ConfigDef:
    """One config: Kafka name, type, default, validator, importance and doc line.

    `synonyms` (topic configs only) are the broker keys that supply the default, in
    priority order, each with the factor that converts its unit to this config's unit.
    """

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None = None
    importance: Importance = Importance.MEDIUM
    doc: str = ""
    synonyms: tuple[tuple[str, int], ...] = field(default=())

    def parse(self, raw: Any) -> Any:
        """Convert `raw` (a string, or an already typed value) and validate it."""
        value = _convert(self.name, self.type, raw)
        if self.validator is not None:
            self.validator.check(self.name, value)
        return value


def _convert(key: str, type_: ConfigType, raw: Any) -> Any:
    if raw is None:
        return None
    if type_ in (ConfigType.INT, ConfigType.LONG):
        return _to_integer(key, type_, raw)
    if type_ is ConfigType.DOUBLE:
        return _to_double(key, raw)
    if type_ is ConfigType.BOOLEAN:
        return _to_bool(key, raw)
    if type_ is ConfigType.LIST:
        return _to_list(key, raw)
    if not isinstance(raw, str):
        raise ConfigError(key, raw, f"expected a {type_.value}")
    value = raw.strip()
    if type_ is ConfigType.CLASS and not _CLASS_NAME.fullmatch(value):
        raise ConfigError(key, raw, "expected a class name such as a.b.C or package.module:Class")
    return value


def _to_integer(key: str, type_: ConfigType, raw: Any) -> int:
    lo, hi = (INT_MIN, INT_MAX) if type_ is ConfigType.INT else (LONG_MIN, LONG_MAX)
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ConfigError(key, raw, f"expected a {type_.value}")
    if isinstance(raw, str):
        text = raw.strip()
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ConfigError(key, raw, f"expected a {type_.value} (decimal digits)")
        if len(text.lstrip("+-").lstrip("0")) > _LONG_DIGITS:
            # too long for any long; int() of it would also hit Python's conversion limit
            raise ConfigError(key, raw, f"out of range for a {type_.value} [{lo}, {hi}]")
        raw = int(text)
    if not lo <= raw <= hi:
        raise ConfigError(key, raw, f"out of range for a {type_.value} [{lo}, {hi}]")
    return raw


def _to_double(key: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ConfigError(key, raw, "expected a double")
    if isinstance(raw, str) and not _DOUBLE.fullmatch(raw.strip()):
        raise ConfigError(key, raw, "expected a double such as 0.2 or 1e-3")
    value = float(raw)
    if not math.isfinite(value):
        raise ConfigError(key, raw, "expected a finite double")
    return value


def _to_bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ConfigError(key, raw, "expected a boolean: true or false")


def _to_list(key: str, raw: Any) -> list[str]:
    if isinstance(raw, str):
        text = raw.strip()
        return [item.strip() for item in text.split(",")] if text else []
    if isinstance(raw, (list, tuple)) and all(isinstance(item, str) for item in raw):
        return list(raw)
    raise ConfigError(key, raw, "expected a comma-separated list")


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


_H, _M, _L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_T = ConfigType
_AT_LEAST_0 = Range(0)
_AT_LEAST_1 = Range(1)
_TIMESTAMP_TYPES = OneOf(("CreateTime", "LogAppendTime"))
_CLEANUP_POLICIES = ValidList(("compact", "delete"), allow_empty=True)
_RLMM_DEFAULT = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
)

#: Broker configs, Kafka's names and defaults (Kafka 4.0 values where 3.x differs).
BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    # identity and directories
    ConfigDef("broker.id", _T.INT, -1, Range(-1), _H, "Broker id; must equal node.id if both set"),
    ConfigDef("node.id", _T.INT, -1, Range(-1), _H, "Node id (KRaft name of broker.id)"),
    ConfigDef("log.dirs", _T.LIST, None, None, _H, "Log directories; log.dir if unset"),
    ConfigDef("log.dir", _T.STRING, "/tmp/kafka-logs", None, _H, "Single log directory"),
    # broker synonyms of topic configs (Kafka's ServerLogConfigs)
    ConfigDef("log.segment.bytes", _T.INT, 1073741824, Range(MIN_SEGMENT_BYTES), _H,
              "Maximum size of a single log file"),
    ConfigDef("log.roll.ms", _T.LONG, None, _AT_LEAST_1, _H,
              "Maximum time before a new segment is rolled; log.roll.hours if unset"),
    ConfigDef("log.roll.jitter.ms", _T.LONG, None, _AT_LEAST_0, _H,
              "Maximum jitter subtracted from the roll time; log.roll.jitter.hours if unset"),
    ConfigDef("log.roll.jitter.hours", _T.INT, 0, _AT_LEAST_0, _H,
              "Maximum jitter subtracted from the roll time, in hours"),
    ConfigDef("log.roll.hours", _T.INT, 168, _AT_LEAST_1, _H,
              "Maximum time in hours before a new segment is rolled"),
    ConfigDef("log.index.size.max.bytes", _T.INT, 10485760, Range(4), _M,
              "Maximum size in bytes of the offset and time index"),
    ConfigDef("log.index.interval.bytes", _T.INT, 4096, _AT_LEAST_0, _M,
              "Bytes between offset index entries"),
    ConfigDef("log.retention.ms", _T.LONG, None, None, _H,
              "Time to keep a segment; -1 no limit; falls back to minutes, then hours"),
    ConfigDef("log.retention.minutes", _T.INT, None, None, _H,
              "Retention in minutes; used if log.retention.ms is unset"),
    ConfigDef("log.retention.hours", _T.INT, 168, None, _H,
              "Retention in hours; used if ms and minutes are unset"),
    ConfigDef("log.retention.bytes", _T.LONG, -1, None, _H,
              "Maximum partition size before deleting old segments; -1 no limit"),
    ConfigDef("log.local.retention.ms", _T.LONG, -2, Range(-2), _M,
              "Local retention of tiered partitions; -2 means log.retention.ms"),
    ConfigDef("log.local.retention.bytes", _T.LONG, -2, Range(-2), _M,
              "Local size retention of tiered partitions; -2 means log.retention.bytes"),
    ConfigDef("log.flush.interval.messages", _T.LONG, LONG_MAX, _AT_LEAST_1, _H,
              "Messages accumulated before a flush"),
    ConfigDef("log.flush.interval.ms", _T.LONG, None, _AT_LEAST_0, _H,
              "Time before a flush; log.flush.scheduler.interval.ms if unset"),
    ConfigDef("log.flush.scheduler.interval.ms", _T.LONG, LONG_MAX, None, _H,
              "How often the flusher checks for logs to flush"),
    ConfigDef("log.segment.delete.delay.ms", _T.LONG, 60000, _AT_LEAST_0, _H,
              "Delay before a file is deleted from the filesystem"),
    ConfigDef("log.preallocate", _T.BOOLEAN, False, None, _M,
              "Preallocate the file when creating a new segment"),
    ConfigDef("log.retention.check.interval.ms", _T.LONG, 300000, _AT_LEAST_1, _M,
              "How often retention (local and remote) is checked"),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", _T.INT, 60000, _AT_LEAST_0, _H,
              "How often the log start offsets are checkpointed"),
    ConfigDef("message.max.bytes", _T.INT, 1048588, _AT_LEAST_0, _H,
              "Largest record batch size allowed"),
    ConfigDef("log.message.timestamp.type", _T.STRING, "CreateTime", _TIMESTAMP_TYPES, _M,
              "Timestamp type of messages: CreateTime or LogAppendTime"),
    ConfigDef("log.cleanup.policy", _T.LIST, ["delete"], _CLEANUP_POLICIES, _M,
              "Cleanup policy for segments beyond retention: delete and/or compact"),
    ConfigDef("remote.storage.enable", _T.BOOLEAN, False, None, _M,
              "Engine extension: broker-wide default of the topic config remote.storage.enable"),
    # Kafka's RemoteLogManagerConfig
    ConfigDef("remote.log.storage.system.enable", _T.BOOLEAN, False, None, _M,
              "Enable tiered storage (starts the RLM services)"),
    ConfigDef("remote.log.storage.manager.class.name", _T.CLASS, None, None, _M,
              "RemoteStorageManager implementation"),
    ConfigDef("remote.log.storage.manager.class.path", _T.STRING, None, None, _M,
              "Class path of the RemoteStorageManager implementation"),
    ConfigDef("remote.log.storage.manager.impl.prefix", _T.STRING, "rsm.config.",
              Custom(bool, "must not be empty"), _M, "Prefix of the RSM's own properties"),
    ConfigDef("remote.log.metadata.manager.class.name", _T.CLASS, _RLMM_DEFAULT, None, _M,
              "RemoteLogMetadataManager implementation"),
    ConfigDef("remote.log.metadata.manager.class.path", _T.STRING, None, None, _M,
              "Class path of the RemoteLogMetadataManager implementation"),
    ConfigDef("remote.log.metadata.manager.impl.prefix", _T.STRING, "rlmm.config.",
              Custom(bool, "must not be empty"), _M, "Prefix of the RLMM's own properties"),
    ConfigDef("remote.log.metadata.manager.listener.name", _T.STRING, None, None, _M,
              "Listener the RLMM's clients connect to"),
    ConfigDef("remote.log.metadata.custom.metadata.max.bytes", _T.INT, 128, _AT_LEAST_0, _L,
              "Largest custom metadata an RSM may return from a copy (KIP-917)"),
    ConfigDef("remote.log.index.file.cache.total.size.bytes", _T.LONG, 1073741824,
              _AT_LEAST_1, _L, "Total size of the remote index file cache"),
    ConfigDef("remote.log.manager.thread.pool.size", _T.INT, 2, _AT_LEAST_1, _M,
              "Deprecated: follower task pool size; follower.thread.pool.size wins if set"),
    ConfigDef("remote.log.manager.follower.thread.pool.size", _T.INT, 2, _AT_LEAST_1, _M,
              "Threads scheduling follower tasks"),
    ConfigDef("remote.log.manager.copier.thread.pool.size", _T.INT, 10, _AT_LEAST_1, _M,
              "Threads running copy tasks"),
    ConfigDef("remote.log.manager.expiration.thread.pool.size", _T.INT, 10, _AT_LEAST_1, _M,
              "Threads running expiration tasks"),
    ConfigDef("remote.log.manager.task.interval.ms", _T.LONG, 30000, _AT_LEAST_1, _L,
              "Interval at which RLM tasks run"),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", _T.LONG, 500, _AT_LEAST_1, _L,
              "Initial backoff of a failed RLM task"),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", _T.LONG, 30000, _AT_LEAST_1, _L,
              "Maximum backoff of a failed RLM task"),
    ConfigDef("remote.log.manager.task.retry.jitter", _T.DOUBLE, 0.2, Range(0.0, 0.5), _L,
              "Random jitter applied to the task retry backoff"),
    ConfigDef("remote.log.reader.threads", _T.INT, 10, _AT_LEAST_1, _M,
              "Threads serving remote reads"),
    ConfigDef("remote.log.reader.max.pending.tasks", _T.INT, 100, _AT_LEAST_1, _M,
              "Bound of the remote reader queue; a full queue refuses reads"),
    ConfigDef("remote.log.manager.copy.max.bytes.per.second", _T.LONG, LONG_MAX, _AT_LEAST_1,
              _M, "Copy byte-rate quota (KIP-956)"),
    ConfigDef("remote.log.manager.copy.quota.window.num", _T.INT, 11, _AT_LEAST_1, _L,
              "Samples kept for the copy quota"),
    ConfigDef("remote.log.manager.copy.quota.window.size.seconds", _T.INT, 1, _AT_LEAST_1, _L,
              "Time span of each copy quota sample"),
    ConfigDef("remote.log.manager.fetch.max.bytes.per.second", _T.LONG, LONG_MAX, _AT_LEAST_1,
              _M, "Fetch byte-rate quota (KIP-956)"),
    ConfigDef("remote.log.manager.fetch.quota.window.num", _T.INT, 11, _AT_LEAST_1, _L,
              "Samples kept for the fetch quota"),
    ConfigDef("remote.log.manager.fetch.quota.window.size.seconds", _T.INT, 1, _AT_LEAST_1, _L,
              "Time span of each fetch quota sample"),
    ConfigDef("remote.fetch.max.wait.ms", _T.INT, 500, _AT_LEAST_1, _M,
              "Longest wait for a remote fetch (KIP-1018)"),
    ConfigDef("remote.list.offsets.request.timeout.ms", _T.LONG, 30000, _AT_LEAST_1, _M,
              "Timeout of a remote ListOffsets by timestamp (KIP-1075)"),
    # the Kafka protocol listener of `serve` (Kafka's SocketServer and group coordinator)
    ConfigDef("listeners", _T.LIST, ["PLAINTEXT://:9092"], None, _H,
              "Listener URIs, e.g. PLAINTEXT://127.0.0.1:9092 (port 0: any free port)"),
    ConfigDef("advertised.listeners", _T.LIST, None, None, _H,
              "Listeners given to clients in Metadata; `listeners` if unset"),
    ConfigDef("listener.security.protocol.map", _T.LIST,
              ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT",
               "SASL_SSL:SASL_SSL"], None, _L,
              "Listener name -> security protocol (PLAINTEXT and SSL are served)"),
    ConfigDef("ssl.keystore.type", _T.STRING, "JKS", None, _M,
              "Keystore format; serve reads PEM"),
    ConfigDef("ssl.keystore.location", _T.STRING, None, None, _H,
              "PEM file with the private key and the certificate chain"),
    ConfigDef("ssl.keystore.certificate.chain", _T.STRING, None, None, _H,
              "PEM certificate chain given inline (with ssl.keystore.key)"),
    ConfigDef("ssl.keystore.key", _T.STRING, None, None, _H,
              "PEM private key given inline (with ssl.keystore.certificate.chain)"),
    ConfigDef("ssl.key.password", _T.STRING, None, None, _H,
              "Password of an encrypted private key"),
    ConfigDef("ssl.truststore.type", _T.STRING, "JKS", None, _M,
              "Truststore format; serve reads PEM"),
    ConfigDef("ssl.truststore.location", _T.STRING, None, None, _H,
              "PEM file of the CAs client certificates are checked against"),
    ConfigDef("ssl.truststore.certificates", _T.STRING, None, None, _H,
              "PEM CA certificates given inline"),
    ConfigDef("ssl.client.auth", _T.STRING, "none", OneOf(("none", "requested", "required")),
              _M, "Whether TLS clients must present a certificate"),
    ConfigDef("ssl.enabled.protocols", _T.LIST, ["TLSv1.2", "TLSv1.3"],
              ValidList(("TLSv1.2", "TLSv1.3")), _M, "TLS versions accepted"),
    ConfigDef("sasl.enabled.mechanisms", _T.LIST, ["GSSAPI"], None, _M,
              "SASL mechanisms of SASL listeners (serve: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
    ConfigDef("engine.sasl.credentials.file", _T.STRING, None, None, _H,
              "Engine extension: JSON file of salted SASL credentials (engine.protocol.sasl)"),
    ConfigDef("authorizer.class.name", _T.STRING, "", None, _L,
              "Any value turns ACL authorization on (engine.protocol.acl)"),
    ConfigDef("engine.acls.file", _T.STRING, None, None, _H,
              "Engine extension: JSON list of topic and group ACLs"),
    ConfigDef("super.users", _T.STRING, None, None, _L,
              "Principals allowed everything, `User:a;User:b`"),
    ConfigDef("allow.everyone.if.no.acl.found", _T.BOOLEAN, False, None, _L,
              "Allow access to a resource no ACL names"),
    ConfigDef("socket.request.max.bytes", _T.INT, 104857600, _AT_LEAST_1, _H,
              "Largest request accepted; a bigger one closes the connection"),
    ConfigDef("connections.max.idle.ms", _T.LONG, 600000, _AT_LEAST_1, _M,
              "Idle connections are closed after this long"),
    ConfigDef("max.connections", _T.INT, 2147483647, _AT_LEAST_0, _M,
              "Connections held at once; more are closed at accept"),
    ConfigDef("num.io.threads", _T.INT, 8, _AT_LEAST_1, _H,
              "Threads doing the blocking part of requests (log reads, offsets)"),
    ConfigDef("group.min.session.timeout.ms", _T.INT, 6000, _AT_LEAST_0, _M,
              "Smallest session timeout a group member may ask for"),
    ConfigDef("group.max.session.timeout.ms", _T.INT, 1800000, _AT_LEAST_0, _M,
              "Largest session timeout a group member may ask for"),
    ConfigDef("group.initial.rebalance.delay.ms", _T.INT, 3000, _AT_LEAST_0, _M,
              "Wait for more members before the first rebalance of an empty group"),
    ConfigDef("offsets.retention.minutes", _T.INT, 10080, _AT_LEAST_1, _H,
              "Committed offsets of an empty group are kept this long"),
    # engine extension: Prometheus exposition of the RLM metrics (no Kafka equivalent: Kafka
    # exposes them through JMX)
    ConfigDef("engine.metrics.port", _T.INT, None, Range(0, 65535), _L,
              "Engine extension: port serving the RLM metrics in Prometheus text format "
              "(unset: not served; 0: any free port)"),
    ConfigDef("engine.metrics.host", _T.STRING, "127.0.0.1", Custom(bool, "must not be empty"),
              _L, "Engine extension: address the metrics port binds to"),
)

#: Topic configs; `synonyms` name the broker keys giving their default, in priority order.
TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("segment.bytes", _T.INT, 1073741824, Range(MIN_SEGMENT_BYTES), _M,
              "Segment file size", (("log.segment.bytes", 1),)),
    ConfigDef("segment.ms", _T.LONG, 604800000, _AT_LEAST_1, _M,
              "Time before the active segment rolls",
              (("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR))),
    ConfigDef("segment.jitter.ms", _T.LONG, 0, _AT_LEAST_0, _M,
              "Maximum random jitter subtracted from segment.ms, drawn per segment",
              (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR))),
    ConfigDef("segment.index.bytes", _T.INT, 10485760, Range(4), _M,
              "Size of the offset and time index", (("log.index.size.max.bytes", 1),)),
    ConfigDef("index.interval.bytes", _T.INT, 4096, _AT_LEAST_0, _M,
              "Bytes between offset index entries", (("log.index.interval.bytes", 1),)),
    ConfigDef("retention.ms", _T.LONG, 604800000, Range(-1), _M,
              "Time to keep a segment; -1 no limit",
              (("log.retention.ms", 1), ("log.retention.minutes", MS_PER_MINUTE),
               ("log.retention.hours", MS_PER_HOUR))),
    ConfigDef("retention.bytes", _T.LONG, -1, None, _M,
              "Partition size before old segments are deleted; -1 no limit",
              (("log.retention.bytes", 1),)),
    ConfigDef("local.retention.ms", _T.LONG, -2, Range(-2), _M,
              "Local retention of a tiered topic; -2 means retention.ms",
              (("log.local.retention.ms", 1),)),
    ConfigDef("local.retention.bytes", _T.LONG, -2, Range(-2), _M,
              "Local size retention of a tiered topic; -2 means retention.bytes",
              (("log.local.retention.bytes", 1),)),
    ConfigDef("remote.storage.enable", _T.BOOLEAN, False, None, _M,
              "Tier this topic's closed segments", (("remote.storage.enable", 1),)),
    ConfigDef("remote.log.copy.disable", _T.BOOLEAN, False, None, _M,
              "Stop copying; the remote tier stays readable (KIP-950)"),
    ConfigDef("remote.log.delete.on.disable", _T.BOOLEAN, False, None, _M,
              "Delete remote data when tiering is disabled (KIP-950)"),
    ConfigDef("flush.messages", _T.LONG, LONG_MAX, _AT_LEAST_1, _M,
              "Messages accumulated before a flush", (("log.flush.interval.messages", 1),)),
    ConfigDef("flush.ms", _T.LONG, LONG_MAX, _AT_LEAST_0, _M, "Time before a flush",
              (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1))),
    ConfigDef("file.delete.delay.ms", _T.LONG, 60000, _AT_LEAST_0, _M,
              "Delay before a deleted file is removed", (("log.segment.delete.delay.ms", 1),)),
    ConfigDef("preallocate", _T.BOOLEAN, False, None, _M,
              "Preallocate segment files", (("log.preallocate", 1),)),
    ConfigDef("max.message.bytes", _T.INT, 1048588, _AT_LEAST_0, _M,
              "Largest record batch size allowed", (("message.max.bytes", 1),)),
    ConfigDef("message.timestamp.type", _T.STRING, "CreateTime", _TIMESTAMP_TYPES, _M,
              "CreateTime or LogAppendTime", (("log.message.timestamp.type", 1),)),
    ConfigDef("cleanup.policy", _T.LIST, ["delete"], _CLEANUP_POLICIES, _M,
              "delete and/or compact", (("log.cleanup.policy", 1),)),
)


# ---------------------------------------------------------------------------- properties

_NEWLINE = re.compile(r"\r\n|\r|\n")
_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text (java.util.Properties.load rules) into a dict.

    Raises ConfigError on a malformed `\\uXXXX` escape (naming the line number), and on a
    control character other than tab, form feed and line ends: a text file never holds
    one, so the input is binary (or the wrong file) and every "key" in it would be garbage.
    """
    bad = _CONTROL.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        raise ConfigError(None, bad.group(), f"not a properties file: control character "
                          f"0x{ord(bad.group()):02x} on line {line} (binary data?)")
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key_raw, value_raw = _split_key_value(line)
        try:
            result[_unescape(key_raw)] = _unescape(value_raw)
        except ValueError as exc:
            raise ConfigError(None, line, f"line {lineno}: {exc}") from None
    return result


def load_properties(path: str, encoding: str = "iso-8859-1") -> dict[str, str]:
    """Read a `.properties` file. ISO-8859-1 by default, as Kafka's loader reads it.

    Raises OSError if the file cannot be read, ConfigError if it is malformed.
    """
    with open(path, encoding=encoding, newline="") as f:
        return parse_properties(f.read())


def _logical_lines(text: str):
    """Yield (first line number, logical line) with comments, blanks and continuations done."""
    lines = _NEWLINE.split(text)
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _ends_with_odd_backslashes(line):
            parts.append(line[:-1])
            if i >= len(lines):
                line = ""
                break
            line = lines[i].lstrip(_WS)
            i += 1
        parts.append(line)
        yield lineno, "".join(parts)


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped `=`, `:` or whitespace (escapes are kept for later)."""
    j, n = 0, len(line)
    while j < n:
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=:" or c in _WS:
            break
        j += 1
    key = line[:j]
    k = j
    while k < n and line[k] in _WS:
        k += 1
    if k < n and line[k] in "=:":
        k += 1
        while k < n and line[k] in _WS:
            k += 1
    return key, line[k:]


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c if c != "\\" else "")
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uxxxx encoding: {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


# ---------------------------------------------------------------------------- broker


class BrokerConfig:
    """Validated broker configuration, keyed by Kafka names.

    `cfg[name]` returns the typed value of a known key (its default if unset) or the raw
    string of an unknown key that was given. Construction raises ConfigError on the first
    invalid value. Immutable; safe to share between threads.
    """

    def __init__(self, props: Mapping[str, str]) -> None:
        self._originals: dict[str, str] = dict(props)
        self._values: dict[str, Any] = {}
        for name, definition in BROKER_CONFIGS.items():
            raw = self._originals.get(name)
            self._values[name] = definition.default if raw is None else definition.parse(raw)
        self._prefixes_used: set[str] = set()
        self._check_cross_rules()

    def _check_cross_rules(self) -> None:
        broker_id, node_id = self._values["broker.id"], self._values["node.id"]
        if self.is_set("broker.id") and self.is_set("node.id") and broker_id != node_id:
            raise ConfigError("broker.id", broker_id, f"must equal node.id ({node_id})")
        if self.is_set("log.dirs") and not [d for d in self._values["log.dirs"] if d]:
            raise ConfigError("log.dirs", self._originals["log.dirs"],
                              "must name at least one directory")
        if not self.log_dirs or not all(self.log_dirs):
            key = "log.dirs" if self.is_set("log.dirs") else "log.dir"
            raise ConfigError(key, self._originals.get(key), "directory names must not be empty")
        lo = self._values["remote.log.manager.task.retry.backoff.ms"]
        hi = self._values["remote.log.manager.task.retry.backoff.max.ms"]
        if hi < lo:
            raise ConfigError("remote.log.manager.task.retry.backoff.max.ms", hi,
                              f"must be at least remote.log.manager.task.retry.backoff.ms ({lo})")
        if self._values["remote.storage.enable"] and not self._values[
            "remote.log.storage.system.enable"
        ]:
            raise ConfigError("remote.storage.enable", self._originals["remote.storage.enable"],
                              "requires remote.log.storage.system.enable=true")
        for definition in TOPIC_CONFIGS.values():  # broker defaults of topic configs, checked now
            _from_synonyms(self, definition, use_defaults=True)

    # -- access by Kafka name

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return _copy(self._values[name])
        if name in self._originals:
            return self._originals[name]
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return name in self._values or name in self._originals

    def is_set(self, name: str) -> bool:
        """True if `name` was given in the properties (not just defaulted)."""
        return name in self._originals

    def originals(self) -> dict[str, str]:
        """A copy of the properties as given."""
        return dict(self._originals)

    def _typed(self, name: str, types: tuple[ConfigType, ...]) -> Any:
        definition = BROKER_CONFIGS.get(name)
        if definition is None:
            raise KeyError(f"unknown broker config {name!r}")
        if definition.type not in types:
            raise TypeError(f"config {name!r} is a {definition.type.value}, "
                            f"not {'/'.join(t.value for t in types)}")
        return self._values[name]

    def get_int(self, name: str) -> int | None:
        return self._typed(name, (ConfigType.INT, ConfigType.LONG))

    def get_long(self, name: str) -> int | None:
        return self._typed(name, (ConfigType.INT, ConfigType.LONG))

    def get_double(self, name: str) -> float | None:
        return self._typed(name, (ConfigType.DOUBLE,))

    def get_bool(self, name: str) -> bool:
        return self._typed(name, (ConfigType.BOOLEAN,))

    def get_string(self, name: str) -> str | None:
        return self._typed(name, (ConfigType.STRING, ConfigType.CLASS))

    def get_list(self, name: str) -> list[str] | None:
        value = self._typed(name, (ConfigType.LIST,))
        return None if value is None else list(value)

    def get_class(self, name: str) -> str | None:
        return self._typed(name, (ConfigType.CLASS,))

    # -- plugin properties and leftovers

    def with_prefix(self, prefix: str) -> dict[str, str]:
        """Properties starting with `prefix`, with the prefix stripped (Kafka's
        originalsWithPrefix); e.g. `with_prefix(cfg["remote.log.storage.manager.impl.prefix"])`
        for the RSM. Keys returned here no longer count as unused."""
        self._prefixes_used.add(prefix)
        return {k[len(prefix):]: v for k, v in self._originals.items() if k.startswith(prefix)}

    def unused(self) -> dict[str, str]:
        """Given keys that are not broker configs and were not handed out by with_prefix."""
        return {
            k: v for k, v in self._originals.items()
            if k not in BROKER_CONFIGS and not any(k.startswith(p) for p in self._prefixes_used)
        }

    # -- values Kafka derives from several keys

    @property
    def log_dirs(self) -> list[str]:
        """`log.dirs` if set, else `[log.dir]` (Kafka's rule)."""
        dirs = self._values["log.dirs"]
        return list(dirs) if dirs is not None else [self._values["log.dir"]]

    @property
    def broker_id(self) -> int:
        """`node.id` if set, else `broker.id` (-1 when neither is set)."""
        return self._values["node.id"] if self.is_set("node.id") else self._values["broker.id"]

    @property
    def retention_ms(self) -> int:
        """log.retention.ms, else minutes × 60000, else hours × 3600000; negative → -1."""
        return _from_synonyms(self, TOPIC_CONFIGS["retention.ms"], use_defaults=True)[0]

    @property
    def follower_thread_pool_size(self) -> int:
        """follower.thread.pool.size if set, else the deprecated thread.pool.size."""
        if not self.is_set("remote.log.manager.follower.thread.pool.size") and self.is_set(
            "remote.log.manager.thread.pool.size"
        ):
            return self._values["remote.log.manager.thread.pool.size"]
        return self._values["remote.log.manager.follower.thread.pool.size"]

    def __repr__(self) -> str:
        return f"BrokerConfig({len(self._originals)} properties set)"


def _copy(value: Any) -> Any:
    """Lists are handed out as copies so no caller can change a config (or a default)."""
    return list(value) if isinstance(value, list) else value


def _from_synonyms(
    broker: BrokerConfig, definition: ConfigDef, use_defaults: bool
) -> tuple[Any, str | None]:
    """The topic value from its broker synonyms: the first one set wins; with `use_defaults`
    the first synonym with a non-null default is used next. Returns (value, broker key)."""
    chosen = next((k for k, _ in definition.synonyms if broker.is_set(k)), None)
    if chosen is None and use_defaults:
        chosen = next((k for k, _ in definition.synonyms if broker[k] is not None), None)
    if chosen is None:
        return definition.default, None
    factor = dict(definition.synonyms)[chosen]
    value = broker[chosen]
    if factor != 1:
        value = value * factor
        if not LONG_MIN <= value <= LONG_MAX:
            raise ConfigError(chosen, broker[chosen], f"× {factor} overflows {definition.name}")
    if definition.name == "retention.ms" and value < 0:
        value = -1  # Kafka: any negative retention time means "no limit"
    if definition.type is ConfigType.LIST:
        value = list(value)
    try:
        return definition.parse(value), chosen
    except ConfigError as exc:
        raise ConfigError(chosen, broker[chosen], f"as {definition.name}: {exc.rule}") from None


# ---------------------------------------------------------------------------- topic


@dataclass(frozen=True)
class ResolvedValue:
    """A topic config's value, where it came from, and the key that supplied it."""

    value: Any
    source: ConfigSource
    source_key: str | None


class TopicConfig:
    """Every topic config resolved against the broker (see `resolve`). Immutable."""

    def __init__(self, entries: Mapping[str, ResolvedValue]) -> None:
        self._entries = dict(entries)

    @classmethod
    def resolve(cls, overrides: Mapping[str, Any], broker: BrokerConfig) -> TopicConfig:
        """Resolve each topic config: the topic override, else the broker synonym that is set
        (in Kafka's priority order), else the default (which comes from the broker defaults,
        e.g. log.retention.hours=168). Raises ConfigError on an unknown or invalid override and
        on Kafka's tiered-storage rules (`_check_tiering`)."""
        entries: dict[str, ResolvedValue] = {}
        for key in overrides:
            if key not in TOPIC_CONFIGS:
                raise ConfigError(key, overrides[key], "unknown topic config")
        for name, definition in TOPIC_CONFIGS.items():
            if name in overrides:
                entries[name] = ResolvedValue(definition.parse(overrides[name]),
                                              ConfigSource.DYNAMIC_TOPIC_CONFIG, name)
                continue
            value, key = _from_synonyms(broker, definition, use_defaults=False)
            if key is None:
                value, _ = _from_synonyms(broker, definition, use_defaults=True)
                entries[name] = ResolvedValue(value, ConfigSource.DEFAULT_CONFIG, None)
            else:
                entries[name] = ResolvedValue(value, ConfigSource.STATIC_BROKER_CONFIG, key)
        config = cls(entries)
        config._check_tiering(broker)
        return config

    def _check_tiering(self, broker: BrokerConfig) -> None:
        """Kafka's rules for tiered topics (LogConfig.validateRemoteStorageOnlyIfSystemEnabled
        and its neighbours in LogConfig.validate)."""
        if not self["remote.storage.enable"]:
            return
        key = self.entry("remote.storage.enable").source_key or "remote.storage.enable"
        if not broker["remote.log.storage.system.enable"]:
            raise ConfigError(key, True, "requires remote.log.storage.system.enable=true")
        if "compact" in self["cleanup.policy"]:
            raise ConfigError(key, True, "not allowed with cleanup.policy containing compact")
        for local, total in (("local.retention.ms", "retention.ms"),
                             ("local.retention.bytes", "retention.bytes")):
            self._check_local_retention(local, total)

    def _check_local_retention(self, local: str, total: str) -> None:
        local_value, total_value = self[local], self[total]
        if local_value == LOCAL_RETENTION_USE_TOTAL:
            return
        if self["remote.log.copy.disable"] and local_value != total_value:
            raise ConfigError(local, local_value,
                              f"must equal {total} ({total_value}) or -2 when copy is disabled")
        if total_value == -1:
            return
        if local_value == -1:
            raise ConfigError(local, local_value, f"must not be -1 when {total} is {total_value}")
        if local_value > total_value:
            raise ConfigError(local, local_value, f"must be at most {total} ({total_value})")

    def __getitem__(self, name: str) -> Any:
        """The configured value (local retention may be -2; see `local_retention_ms`)."""
        return _copy(self._entries[name].value)

    def entry(self, name: str) -> ResolvedValue:
        return self._entries[name]

    def items(self):
        """(name, ResolvedValue) pairs of every topic config."""
        return list(self._entries.items())

    @property
    def local_retention_ms(self) -> int:
        """Effective local retention time: -2 resolves to retention.ms (Kafka's rule)."""
        value = self["local.retention.ms"]
        return self["retention.ms"] if value == LOCAL_RETENTION_USE_TOTAL else value

    @property
    def local_retention_bytes(self) -> int:
        """Effective local retention size: -2 resolves to retention.bytes (Kafka's rule)."""
        value = self["local.retention.bytes"]
        return self["retention.bytes"] if value == LOCAL_RETENTION_USE_TOTAL else value

    def __repr__(self) -> str:
        changed = {k: e.value for k, e in self._entries.items()
                   if e.source is not ConfigSource.DEFAULT_CONFIG}
        return f"TopicConfig({changed})"


# ---------------------------------------------------------------------------- broker files

#: Kafka broker keys in the engine's strict namespaces (`log.*`, `remote.*`) that Kafka
#: accepts and the engine does not use (the log cleaner, format down-conversion, checkpoint
#: intervals it does not schedule). They are kept, reported by `unused()` and logged, so a
#: stock Kafka server.properties loads; any other unknown `log.*` / `remote.*` key is a
#: ConfigError (most likely a typo of a key that matters).
KAFKA_BROKER_KEYS_NOT_USED = frozenset({
    "log.cleaner.enable", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms", "log.cleaner.delete.retention.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.message.format.version", "log.message.downconversion.enable",
    "log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "log.dir.failure.timeout.ms",
    "log.initial.task.delay.ms", "log.cleanup.interval.ms",
})
_STRICT_PREFIXES = ("log.", "remote.")


def _check_keys(props: Mapping[str, str], path: str) -> None:
    """The unknown-key policy of broker files (see KAFKA_BROKER_KEYS_NOT_USED)."""
    prefixes = (props.get("remote.log.storage.manager.impl.prefix", "rsm.config."),
                props.get("remote.log.metadata.manager.impl.prefix", "rlmm.config."))
    for key, value in props.items():
        if key in BROKER_CONFIGS or key in KAFKA_BROKER_KEYS_NOT_USED:
            continue
        if any(p and key.startswith(p) for p in prefixes):
            continue  # the plugin's own settings, checked by the plugin
        if key in TOPIC_CONFIGS:
            brokers = [k for k, _ in TOPIC_CONFIGS[key].synonyms]
            hint = (f"the broker default is {brokers[0]}" if brokers
                    else "it has no broker-level default")
            raise ConfigError(key, value, f"is a topic config, not a broker config ({hint}; "
                              "per-topic values: python -m engine configs --alter)", file=path)
        if key.startswith(_STRICT_PREFIXES):
            close = difflib.get_close_matches(key, list(BROKER_CONFIGS), n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(key, value, f"unknown broker config{hint}", file=path)
        log.warning("%s: %s is not a config the engine uses; ignored", path, _shown(key))


def uses_filesystem_tier(broker: BrokerConfig) -> bool:
    """No RSM class named: the engine's filesystem tier under `rsm.config.dirs`."""
    return broker["remote.log.storage.manager.class.name"] is None


def load_broker_config(path, *, check_dirs: bool = True) -> BrokerConfig:
    """Load and validate a broker `.properties` file.

    Every key Kafka defines for the engine's namespaces is parsed and checked; an unknown
    `log.*` or `remote.*` key, or a topic config given at broker level, is an error (see
    KAFKA_BROKER_KEYS_NOT_USED); other keys (num.network.threads, ...) are
    logged and ignored as Kafka ignores keys it does not know. With tiering on and no RSM
    class named, `rsm.config.dirs` (under the configured prefix) must name the filesystem
    tier's directories, none of them equal to, inside or above a log dir (the tier and the
    logs would read each other's files). With `check_dirs`, every log dir (and tier dir)
    must be a directory or be creatable as Kafka creates a missing log dir: its parent
    exists (`create_missing_dirs` creates it, once every check has passed).

    Raises ConfigError naming the key and the file; nothing is written.
    """
    path = os.fspath(path)
    try:
        props = load_properties(path)
    except ConfigError as exc:
        raise exc.in_file(path) from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(None, path, f"cannot read the properties file: {why}",
                          file=path) from None
    _check_keys(props, path)
    try:
        broker = BrokerConfig(props)
    except ConfigError as exc:
        raise exc.in_file(path) from None
    if broker["remote.log.storage.system.enable"] and uses_filesystem_tier(broker):
        key, dirs = filesystem_tier_dirs(broker)
        if not dirs:
            raise ConfigError(key, props.get(key) or None,
                              "the filesystem tier (no remote.log.storage.manager.class.name) "
                              "needs its directories, comma-separated", file=path)
        _check_tier_apart_from_logs(broker, key, dirs, path)
    if check_dirs:
        for key, d in broker_directories(broker):
            _check_dir(broker, key, d, path)
    return broker


def filesystem_tier_dirs(broker: BrokerConfig) -> tuple[str, list[str]]:
    """(key, dirs) of the filesystem tier: `<rsm prefix>dirs`, comma-separated."""
    key = broker["remote.log.storage.manager.impl.prefix"] + "dirs"
    raw = broker.originals().get(key, "")
    return key, [d.strip() for d in raw.split(",") if d.strip()]


def broker_directories(broker: BrokerConfig) -> list[tuple[str, str]]:
    """(key, directory) of every directory the broker file names: the log dirs, and the
    filesystem tier's dirs when tiering is on and no RSM class is named."""
    dirs_key = "log.dirs" if broker.is_set("log.dirs") else "log.dir"
    found = [(dirs_key, d) for d in broker.log_dirs]
    if broker["remote.log.storage.system.enable"] and uses_filesystem_tier(broker):
        key, tier = filesystem_tier_dirs(broker)
        found += [(key, d) for d in tier]
    return found


def _check_dir(broker: BrokerConfig, key: str, d: str, path: str) -> None:
    if os.path.isdir(d):
        return
    if os.path.lexists(d):
        raise ConfigError(key, d, "exists but is not a directory", file=path)
    parent = os.path.dirname(os.path.abspath(d))
    if key == "log.dir" and not broker.is_set("log.dir"):
        # a file that sets neither (the wrong file?) must not create /tmp/kafka-logs
        raise ConfigError(key, d, "directory does not exist (Kafka's default: the file sets "
                          "neither log.dirs nor log.dir)", file=path)
    if not os.path.isdir(parent):
        raise ConfigError(key, d, f"directory does not exist, nor does its parent {parent} "
                          "(only a missing last component is created)", file=path)


def _check_tier_apart_from_logs(broker: BrokerConfig, key: str, tier_dirs: list[str],
                                path: str) -> None:
    def real(d: str) -> str:
        return os.path.realpath(os.path.abspath(d))

    for t in tier_dirs:
        for d in broker.log_dirs:
            a, b = real(t), real(d)
            if os.path.commonpath([a, b]) in (a, b):
                how = "is" if a == b else ("is inside" if len(a) > len(b) else "contains")
                raise ConfigError(key, t, f"the filesystem tier {how} the log dir {d}: "
                                  "give the tier directories of its own", file=path)


def create_missing_dirs(broker: BrokerConfig) -> list[str]:
    """Creates the directories of `broker_directories` that do not exist (their parents do:
    load_broker_config checked), as Kafka's LogManager creates missing log dirs, and logs
    each. Returns those created. ConfigError naming the key when one cannot be created."""
    created = []
    for key, d in broker_directories(broker):
        if os.path.isdir(d):
            continue
        log.warning("%s: directory %s not found, creating it", key, d)
        try:
            os.mkdir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise ConfigError(key, d, "exists but is not a directory") from None
            continue  # created meanwhile
        except OSError as exc:
            name = errno.errorcode.get(exc.errno, exc.errno)
            raise ConfigError(key, d, f"cannot create the directory: {exc.strerror} "
                              f"({name})") from None
        created.append(d)
    return created


# ---------------------------------------------------------------------------- topic overrides

#: The durable per-topic overrides, in the first log dir (where Kafka's KRaft broker keeps
#: nothing of the kind: it has the metadata log; the engine has this one small file).
TOPIC_CONFIG_STORE_FILE = "topic-config-overrides.json"
_STORE_VERSION = 1


class TopicConfigStore:
    """Per-topic config overrides (Kafka names, values as given), durable in one JSON file
    `{"version": 1, "topics": {topic: {key: value}}}`, rewritten atomically (temp file,
    fsync, rename, fsync of the directory) under an advisory lock so concurrent
    `configs --alter` runs do not lose each other's changes. Every change is validated with
    TopicConfig's rules against the broker config before anything is written.
    """

    def __init__(self, path) -> None:
        self.path = os.fspath(path)

    @classmethod
    def of(cls, broker: BrokerConfig) -> TopicConfigStore:
        """The store of a broker: in its first log dir."""
        return cls(os.path.join(broker.log_dirs[0], TOPIC_CONFIG_STORE_FILE))

    def read(self) -> dict[str, dict[str, str]]:
        """All overrides by topic; {} when the file does not exist. ConfigError naming the
        file when it is not a store this version wrote."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ConfigError(None, data[:60], f"not a topic-config store: {exc}",
                              file=self.path) from None
        if (not isinstance(doc, dict) or doc.get("version") != _STORE_VERSION
                or not isinstance(doc.get("topics"), dict)):
            raise ConfigError(None, data[:60], f"not a version {_STORE_VERSION} topic-config "
                              "store", file=self.path)
        topics: dict[str, dict[str, str]] = {}
        for topic, overrides in doc["topics"].items():
            if not isinstance(overrides, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in overrides.items()):
                raise ConfigError(None, overrides, f"overrides of topic {topic!r} must map "
                                  "names to strings", file=self.path)
            topics[topic] = dict(overrides)
        return topics

    def overrides(self, topic: str) -> dict[str, str]:
        return dict(self.read().get(topic, {}))

    def resolve(self, topic: str, broker: BrokerConfig,
                topic_defaults: Mapping[str, Any] | None = None) -> TopicConfig:
        """The topic's TopicConfig from the store (ConfigError naming the file if the stored
        overrides no longer pass, e.g. after the broker file changed)."""
        merged = {**dict(topic_defaults or {}), **self.overrides(topic)}
        try:
            return TopicConfig.resolve(merged, broker)
        except ConfigError as exc:
            raise ConfigError(exc.key, exc.value, f"topic {topic!r}: {exc.rule}",
                              file=self.path) from None

    def alter(self, topic: str, broker: BrokerConfig, *, add: Mapping[str, Any] | None = None,
              delete: Iterable[str] = ()) -> dict[str, str]:
        """Sets `add` and removes `delete` (kafka-configs.sh --add-config/--delete-config)
        for `topic`, validated as a whole: unknown keys, invalid values, Kafka's tiering
        rules (local vs total retention, remote.storage.enable needing the system,
        remote.log.copy.disable needing local == total retention) and disabling
        remote.storage.enable only with remote.log.delete.on.disable=true (KRaft's rule).
        Deleting a key that is not set is a no-op, as Kafka's incremental alter. Returns the
        topic's new overrides. Nothing is written when a rule fails."""
        add = {k: str(v).strip() for k, v in dict(add or {}).items()}
        delete = list(delete)
        for key in list(add) + delete:
            if key not in TOPIC_CONFIGS:
                close = difflib.get_close_matches(key, list(TOPIC_CONFIGS), n=1, cutoff=0.8)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(key, add.get(key), f"unknown topic config{hint}")
        both = sorted(set(add) & set(delete))
        if both:
            raise ConfigError(both[0], add[both[0]], "cannot be both added and deleted")

        def plan() -> tuple[dict, dict]:
            topics = self.read()
            before = topics.get(topic, {})
            after = {k: v for k, v in before.items() if k not in delete}
            after.update(add)
            new = TopicConfig.resolve(after, broker)  # raises on any broken rule
            raw = before.get("remote.storage.enable")
            was_tiered = (broker["remote.storage.enable"] if raw is None
                          else raw.strip().lower() == "true")
            if was_tiered and not new["remote.storage.enable"] and not new[
                    "remote.log.delete.on.disable"]:
                raise ConfigError(
                    "remote.storage.enable", False,
                    "disabling tiering needs remote.log.delete.on.disable=true (deletes the "
                    "remote data); to keep it read-only set remote.log.copy.disable=true")
            changed = dict(topics)
            if after:
                changed[topic] = dict(sorted(after.items()))
            else:
                changed.pop(topic, None)
            return changed if changed != topics else None, after

        plan()  # refuse bad input before creating the lock file
        with self._locked():
            changed, after = plan()  # again under the lock: another writer may have won
            if changed is not None:
                self._write(changed)
            return after

    def remove_topic(self, topic: str) -> bool:
        """Forgets a deleted topic's overrides. Returns whether it had any."""
        with self._locked():
            topics = self.read()
            if topics.pop(topic, None) is None:
                return False
            self._write(topics)
            return True

    def _locked(self):
        return _FileLock(self.path + ".lock")

    def _write(self, topics: Mapping[str, Mapping[str, str]]) -> None:
        doc = {"version": _STORE_VERSION, "topics": {t: dict(o) for t, o in sorted(topics.items())}}
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        directory = os.path.dirname(os.path.abspath(self.path))
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class _FileLock:
    """An exclusive flock held for a read-modify-write of a small file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def __enter__(self):
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
