"""`BrokerConfig` (the broker's properties, parsed and validated at construction),
`TopicConfig` (every topic config resolved from override, broker synonym or default) and
`load_broker_config` with the checks of the directories a broker config names.
"""

from __future__ import annotations

import difflib
import errno
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.definitions import (
    BROKER_CONFIGS,
    LOCAL_RETENTION_USE_TOTAL,
    LONG_MAX,
    LONG_MIN,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigSource,
    ConfigType,
)
from engine.config.properties import load_properties
from engine.errors import ConfigError, _shown

# the name the broker config's warnings have always been logged under
log = logging.getLogger("engine.config")

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

    def with_overrides(self, overrides: Mapping[str, Any]) -> TopicConfig:
        """This config with `overrides` applied as topic overrides (values parsed; the
        tiering rules are not checked again); itself when there are none."""
        if not overrides:
            return self
        entries = dict(self._entries)
        for name, value in overrides.items():
            entries[name] = ResolvedValue(TOPIC_CONFIGS[name].parse(value),
                                          ConfigSource.DYNAMIC_TOPIC_CONFIG, name)
        return TopicConfig(entries)

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
