"""Every config the engine reads, with Kafka's name, type, default, validator, importance
and (for topic configs) broker synonyms: `BROKER_CONFIGS` and `TOPIC_CONFIGS`, plus the value
conversions (`_convert`) both `BrokerConfig` and `TopicConfig` apply. Kept apart from the
classes that use them because the tables are data, read and extended on their own.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ConfigError

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
    ConfigDef("max.connections.per.ip", _T.INT, 2147483647, _AT_LEAST_0, _M,
              "Connections held at once from one address; more are closed at accept"),
    ConfigDef("sasl.server.max.receive.size", _T.INT, 524288, _AT_LEAST_1, _M,
              "Largest request accepted on a SASL listener before authentication"),
    ConfigDef("fetch.max.bytes", _T.INT, 57671680, Range(1024), _M,
              "Most record bytes a Fetch response holds, whatever the request asks"),
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
    ConfigDef("offset.metadata.max.bytes", _T.INT, 4096, _AT_LEAST_0, _H,
              "Largest metadata string of a committed offset; a larger one is refused"),
    ConfigDef("group.max.size", _T.INT, 2147483647, _AT_LEAST_1, _M,
              "Most members a group may hold; a join beyond it is refused"),
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
