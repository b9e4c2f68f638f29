"""The object-store tier's own configuration, in the Aiven plugin's names (under
`rsm.config.`), so a broker file written for the plugin loads unchanged.

`RsmConfig.from_configs` reads the tier's keys (`RSM_CONFIG_KEYS`), has the chunk caches'
settings read (`ChunkCacheConfig`, `CHUNK_CACHE_CONFIG_KEYS`), and refuses any key that is
neither these, the store's (`STORE_CONFIG_KEYS`, read by `StoreConfig`) nor an
`encryption.key.pairs.<id>.{public,private}.key.file`: a ConfigError names the key (a
secret's value is never shown) and suggests the closest known name. `load_key_ring` loads and
checks the key pairs' PEM files, so a bad key fails at `configure`, before anything is
written with it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.config import ConfigError
from engine.errors import HIDDEN, is_secret_key
from engine.remote.objectstore import custom_metadata as cm
from engine.remote.objectstore.chunk_cache import CHUNK_CACHE_CONFIG_KEYS, ChunkCacheConfig
from engine.remote.objectstore.config_values import ConfigValues
from engine.remote.objectstore.reads import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_REQUEST_BYTES,
)
from engine.remote.objectstore.store import STORE_CONFIG_KEYS
from engine.remote.objectstore.transforms import KeyRing

__all__ = [
    "RSM_CONFIG_KEYS",
    "RsmConfig",
    "check_unknown_keys",
    "load_key_ring",
]

INT32_MAX = 2**31 - 1

#: The keys the tier reads itself (names under `rsm.config.`); the store reads
#: STORE_CONFIG_KEYS and the caches CHUNK_CACHE_CONFIG_KEYS.
#: `encryption.key.pairs.<id>.{public,private}.key.file` come on top. The plugin's metrics
#: keys are accepted (the engine's metrics have no sampling windows to set).
RSM_CONFIG_KEYS = frozenset({
    "broker.id", "key.prefix", "key.prefix.mask", "chunk.size", "compression.enabled",
    "compression.heuristic.enabled", "encryption.enabled", "encryption.key.pair.id",
    "encryption.key.pairs", "custom.metadata.fields.include", "segment.format",
    "fetch.max.in.flight.requests", "fetch.max.request.bytes",
    "metrics.num.samples", "metrics.sample.window.ms", "metrics.recording.level",
})
_KEY_FILE_SUFFIXES = (".public.key.file", ".private.key.file")


@dataclass(frozen=True)
class RsmConfig:
    """The tier's own settings (the store's are in `StoreConfig`, the caches' in `cache`)."""

    key_prefix: str = ""
    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: bool = False
    compression_heuristic: bool = False
    encryption: bool = False
    key_pair_id: str | None = None
    key_files: tuple[tuple[str, str, str], ...] = ()
    custom_metadata_fields: tuple[int, ...] = ()
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    cache: ChunkCacheConfig = field(default_factory=ChunkCacheConfig)
    broker_id: int = -1

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> RsmConfig:
        """ConfigError naming the first unknown or bad key."""
        check_unknown_keys(configs)
        values = ConfigValues(configs)
        _check_segment_format(values)
        values.boolean("key.prefix.mask")
        compression, heuristic = _compression(values)
        key_pair_id, key_files = _encryption(values)
        fields = _custom_metadata_fields(values)
        prefix = configs.get("key.prefix")
        return cls(
            key_prefix="" if prefix is None else str(prefix),
            # the plugin requires chunk.size; omitted, the engine takes its benchmarked size
            chunk_size=values.integer("chunk.size", DEFAULT_CHUNK_SIZE, 1, INT32_MAX // 2),
            compression=compression, compression_heuristic=heuristic,
            encryption=key_pair_id is not None, key_pair_id=key_pair_id, key_files=key_files,
            custom_metadata_fields=fields,
            max_in_flight=values.integer("fetch.max.in.flight.requests", DEFAULT_MAX_IN_FLIGHT,
                                         1, 64),
            max_request_bytes=values.integer("fetch.max.request.bytes",
                                             DEFAULT_MAX_REQUEST_BYTES, 1, INT32_MAX),
            cache=ChunkCacheConfig.from_configs(configs),
            broker_id=values.integer("broker.id", -1, -1, INT32_MAX),
        )


def check_unknown_keys(configs: Mapping[str, str]) -> None:
    """ConfigError for the first key that none of the tier, its store and its caches reads."""
    known = RSM_CONFIG_KEYS | STORE_CONFIG_KEYS | CHUNK_CACHE_CONFIG_KEYS
    for key in configs:
        if key in known:
            continue
        if key.startswith("encryption.key.pairs.") and key.endswith(_KEY_FILE_SUFFIXES):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(key, _shown_value(key, configs[key], close),
                          f"unknown object-store tier config{hint}")


def _shown_value(key: str, value, close: list[str]):
    """What an error about the unknown `key` shows of its value: nothing when it or the
    known key it resembles holds a secret (a misspelt secret key still carries a secret)."""
    return HIDDEN if close and is_secret_key(close[0]) else value


def load_key_ring(config: RsmConfig) -> KeyRing:
    """The key pairs of `config.key_files`, loaded and checked; ConfigError naming the key
    of a missing, unreadable or mismatched PEM file."""
    files = {key_id: (public, private) for key_id, public, private in config.key_files}
    try:
        return KeyRing.load(config.key_pair_id, files,
                            lambda key_id, kind: f"encryption.key.pairs.{key_id}.{kind}.key.file")
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError("encryption.key.pair.id", config.key_pair_id, str(exc)) from None


def _check_segment_format(values: ConfigValues) -> None:
    fmt = values.get("segment.format")
    if fmt is not None and fmt.lower() != "kafka":
        raise ConfigError("segment.format", fmt, "only the kafka segment format is "
                                                 "supported (not iceberg)")


def _compression(values: ConfigValues) -> tuple[bool, bool]:
    """(compression.enabled, compression.heuristic.enabled); the heuristic needs the first."""
    compression = values.boolean("compression.enabled")
    heuristic = values.boolean("compression.heuristic.enabled")
    if heuristic and not compression:
        raise ConfigError("compression.heuristic.enabled", values.get(
            "compression.heuristic.enabled"), "needs compression.enabled=true")
    return compression, heuristic


def _encryption(values: ConfigValues
                ) -> tuple[str | None, tuple[tuple[str, str, str], ...]]:
    """(the active key pair id, (id, public key file, private key file) of every pair in
    `encryption.key.pairs`), or (None, ()) with encryption off."""
    if not values.boolean("encryption.enabled"):
        return None, ()
    key_pair_id = values.get("encryption.key.pair.id")
    if key_pair_id is None:
        raise ConfigError("encryption.key.pair.id", None,
                          "required with encryption.enabled=true")
    ids = values.listing("encryption.key.pairs")
    if key_pair_id not in ids:
        raise ConfigError("encryption.key.pairs", values.get("encryption.key.pairs"),
                          f"must list the encryption key pair {key_pair_id!r} "
                          "(encryption.key.pair.id)")
    return key_pair_id, tuple((key_id, _key_file(values, key_id, "public"),
                               _key_file(values, key_id, "private")) for key_id in ids)


def _key_file(values: ConfigValues, key_id: str, kind: str) -> str:
    key = f"encryption.key.pairs.{key_id}.{kind}.key.file"
    path = values.get(key)
    if path is None:
        raise ConfigError(key, None, f"required: the {kind} key file (PEM) of key pair "
                                     f"{key_id!r}")
    return path


def _custom_metadata_fields(values: ConfigValues) -> tuple[int, ...]:
    """The field ids `custom.metadata.fields.include` names, sorted, each once."""
    fields = set()
    for name in values.listing("custom.metadata.fields.include"):
        if name not in cm.FIELD_NAMES:
            raise ConfigError("custom.metadata.fields.include",
                              values.get("custom.metadata.fields.include"),
                              f"{name!r} is not one of {', '.join(cm.FIELD_NAMES)}")
        fields.add(cm.FIELD_NAMES[name])
    return tuple(sorted(fields))
