"""Builds the configured RemoteStorageManager and RemoteLogMetadataManager (the broker's
plugin loading, RemoteLogManager.createRemoteStorageManager / createRemoteLogMetadataManager).

- RSM: `remote.log.storage.manager.class.name`; unset means the engine's filesystem tier
  (`engine.remote.filesystem.FileSystemRemoteStorageManager`, configured by
  `rsm.config.dirs`). It is configured with the properties under
  `remote.log.storage.manager.impl.prefix` (prefix stripped) plus `broker.id`.
- The object-store tier (`engine.remote.objectstore.rsm.ObjectStorageRemoteStorageManager`)
  is also named `engine.remote.ObjectStorageRemoteStorageManager`, and by the Aiven plugin's
  class name `io.aiven.kafka.tieredstorage.RemoteStorageManager`, so a broker file written for
  the plugin loads unchanged (RSM_CLASS_ALIASES).
- RLMM: `remote.log.metadata.manager.class.name`; unset or Kafka's default
  `TopicBasedRemoteLogMetadataManager` (a Kafka topic this engine does not have) means the
  embedded RLMM (`engine.remote.embedded_rlmm.EmbeddedRemoteLogMetadataManager`), stored in
  the first log dir. It is configured with the properties under
  `remote.log.metadata.manager.impl.prefix` plus `broker.id` and `log.dir` (the first log
  dir).

Class names are "package.module.ClassName" or "package.module:ClassName". A class that
cannot be imported, is not the right interface or cannot be built raises ConfigError naming
the class-name key; a ConfigError from the plugin's `configure` is raised again with its
key prefixed (e.g. `rsm.config.dirs`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TypeVar

from engine.config import BrokerConfig, ConfigError
from engine.remote.metadata_manager import RemoteLogMetadataManager
from engine.remote.storage import RemoteStorageManager

#: the two plugin interfaces a broker config names a class for
_Plugin = TypeVar("_Plugin", RemoteStorageManager, RemoteLogMetadataManager)

__all__ = [
    "DEFAULT_RLMM_CLASS",
    "DEFAULT_RSM_CLASS",
    "KAFKA_TOPIC_BASED_RLMM_CLASS",
    "OBJECT_STORAGE_RSM_CLASS",
    "RSM_CLASS_ALIASES",
    "create_remote_log_metadata_manager",
    "create_remote_storage_manager",
    "open_remote_log_metadata_reader",
]

RSM_CLASS_KEY = "remote.log.storage.manager.class.name"
RSM_PREFIX_KEY = "remote.log.storage.manager.impl.prefix"
RLMM_CLASS_KEY = "remote.log.metadata.manager.class.name"
RLMM_PREFIX_KEY = "remote.log.metadata.manager.impl.prefix"
DEFAULT_RSM_CLASS = "engine.remote.filesystem:FileSystemRemoteStorageManager"
DEFAULT_RLMM_CLASS = "engine.remote.embedded_rlmm:EmbeddedRemoteLogMetadataManager"
OBJECT_STORAGE_RSM_CLASS = "engine.remote.objectstore.rsm:ObjectStorageRemoteStorageManager"
#: Other names of the engine's RSMs: the short one and the Aiven plugin's.
RSM_CLASS_ALIASES = {
    "engine.remote.ObjectStorageRemoteStorageManager": OBJECT_STORAGE_RSM_CLASS,
    "io.aiven.kafka.tieredstorage.RemoteStorageManager": OBJECT_STORAGE_RSM_CLASS,
}
KAFKA_TOPIC_BASED_RLMM_CLASS = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager")


def create_remote_storage_manager(broker_config: BrokerConfig) -> RemoteStorageManager:
    """A configured RSM. ConfigError for a bad class name or plugin setting."""
    name = broker_config[RSM_CLASS_KEY] or DEFAULT_RSM_CLASS
    name = RSM_CLASS_ALIASES.get(name.strip(), name)
    prefix = broker_config[RSM_PREFIX_KEY]
    configs = broker_config.with_prefix(prefix)
    configs["broker.id"] = str(broker_config.broker_id)
    # the interface is an ABC on purpose: _build checks the class against it, never
    # instantiates it (mypy refuses abstract classes as type[T] arguments)
    return _build(RSM_CLASS_KEY, name, RemoteStorageManager,  # type: ignore[type-abstract]
                  prefix, configs)


def create_remote_log_metadata_manager(broker_config: BrokerConfig,
                                       first_log_dir) -> RemoteLogMetadataManager:
    """A configured RLMM storing under `first_log_dir` unless its settings say otherwise.
    ConfigError for a bad class name or plugin setting."""
    name = broker_config[RLMM_CLASS_KEY]
    if not name or name == KAFKA_TOPIC_BASED_RLMM_CLASS:
        name = DEFAULT_RLMM_CLASS
    prefix = broker_config[RLMM_PREFIX_KEY]
    configs = broker_config.with_prefix(prefix)
    configs["broker.id"] = str(broker_config.broker_id)
    configs["log.dir"] = str(first_log_dir)
    return _build(RLMM_CLASS_KEY, name,
                  RemoteLogMetadataManager,  # type: ignore[type-abstract]  # as above
                  prefix, configs)


def open_remote_log_metadata_reader(broker_config: BrokerConfig) -> RemoteLogMetadataManager:
    """The configured RLMM for a command that only reads it while the broker may run
    (`scrub`): the embedded one opened read-only (no lock taken, nothing written), any other
    class built as `create_remote_log_metadata_manager` builds it. ConfigError when the
    embedded store's directory does not exist (nothing was tiered with this configuration,
    or the configuration is not the broker's)."""
    from pathlib import Path

    from engine.remote.embedded_rlmm import (
        METADATA_DIR_CONFIG,
        METADATA_DIR_NAME,
        EmbeddedRemoteLogMetadataManager,
    )

    name = broker_config[RLMM_CLASS_KEY]
    first_log_dir = broker_config.log_dirs[0]
    if name and name != KAFKA_TOPIC_BASED_RLMM_CLASS and \
            name.replace(":", ".") != DEFAULT_RLMM_CLASS.replace(":", "."):
        return create_remote_log_metadata_manager(broker_config, first_log_dir)
    prefixed = broker_config.with_prefix(broker_config[RLMM_PREFIX_KEY])
    if prefixed.get(METADATA_DIR_CONFIG):
        key = broker_config[RLMM_PREFIX_KEY] + METADATA_DIR_CONFIG
        directory = Path(prefixed[METADATA_DIR_CONFIG])
    else:
        key, directory = "log.dirs", Path(first_log_dir) / METADATA_DIR_NAME
    if not directory.is_dir():
        raise ConfigError(key, str(directory), "holds no remote log metadata: nothing has "
                                               "been tiered with this configuration")
    return EmbeddedRemoteLogMetadataManager.open_read_only(directory)


def _build(key: str, name: str, interface: type[_Plugin], prefix: str,
           configs: Mapping[str, str]) -> _Plugin:
    cls = _load_class(key, name)
    if not (isinstance(cls, type) and issubclass(cls, interface)):
        raise ConfigError(key, name, f"is not a {interface.__module__}.{interface.__name__}")
    try:
        plugin = cls()
    except Exception as exc:
        raise ConfigError(key, name, f"cannot be instantiated without arguments: "
                                     f"{type(exc).__name__}: {exc}") from exc
    try:
        plugin.configure(dict(configs))
    except ConfigError as exc:
        plugin.close()
        full = exc.key if exc.key is None or exc.key.startswith(prefix) else prefix + exc.key
        raise ConfigError(full, exc.value, exc.rule) from exc
    except BaseException:
        plugin.close()
        raise
    return plugin


def _load_class(key: str, name: str) -> type:
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(key, name, "expected package.module.ClassName or "
                                     "package.module:ClassName")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(key, name, f"cannot import module {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(key, name, f"module {module_name!r} has no {attr!r}") from None
