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

The package re-exports every public name of its modules, so `engine.config` is the one
import: `definitions` (the tables), `properties` (the parser), `broker` (BrokerConfig,
TopicConfig, load_broker_config) and `store` (TopicConfigStore).
"""

from __future__ import annotations

from engine.config.broker import (
    KAFKA_BROKER_KEYS_NOT_USED,
    BrokerConfig,
    ResolvedValue,
    TopicConfig,
    broker_directories,
    create_missing_dirs,
    filesystem_tier_dirs,
    load_broker_config,
    uses_filesystem_tier,
)
from engine.config.definitions import (
    BROKER_CONFIGS,
    INT_MAX,
    INT_MIN,
    LOCAL_RETENTION_USE_TOTAL,
    LONG_MAX,
    LONG_MIN,
    MIN_SEGMENT_BYTES,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigSource,
    ConfigType,
    Custom,
    Importance,
    OneOf,
    Range,
    Validator,
    ValidList,
)
from engine.config.properties import (
    load_properties,
    parse_properties,
)
from engine.config.store import (
    TOPIC_CONFIG_STORE_FILE,
    TopicConfigStore,
)
from engine.errors import ConfigError

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
    # constants and helpers the modules above share, public as they were before the split
    "INT_MAX",
    "INT_MIN",
    "KAFKA_BROKER_KEYS_NOT_USED",
    "LOCAL_RETENTION_USE_TOTAL",
    "LONG_MAX",
    "LONG_MIN",
    "MIN_SEGMENT_BYTES",
    "MS_PER_HOUR",
    "MS_PER_MINUTE",
    "Validator",
    "uses_filesystem_tier",
]
