"""Where a scan reads, named as the `kafka-tiered` source's options (every scan face and the
export take them): `config` (the engine's properties file) and/or broker properties given
directly (any name with a dot: `log.dirs`, `rsm.config.dirs`, ...; they override the file);
or `bucket` (a bucket alone, its store's settings under the plugin's names or as the file's
`rsm.config.*` keys), with `remoteLogMetadataPath` (remote-log metadata files naming what
to read) and `failOnDataLoss`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.config import ConfigError, load_properties

__all__ = ["TierOptions", "option_bool", "parse_tier_options", "reader_properties"]


@dataclass(frozen=True)
class TierOptions:
    """The tier a scan reads: the broker properties it reads with, and for a bucket alone
    the bucket, its remote-log metadata files (comma-separated) and whether offsets missing
    between its segments fail the read."""

    broker_properties: Mapping[str, str]
    bucket: str | None = None
    remote_log_metadata: str | None = None
    fail_on_data_loss: bool = True


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Option `name` (looked up lower-cased, as Spark passes option keys): true or false."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(name, raw, "must be true or false")
    return text == "true"


def reader_properties(opts: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The broker properties the scan reads with (the config file, then dotted options; or
    a bucket's object-store RSM settings) and the bucket option. `opts` are lower-cased."""
    props: dict[str, str] = {}
    config_path = opts.get("config")
    if config_path:
        try:
            props.update(load_properties(config_path))
        except FileNotFoundError:
            raise ConfigError("config", config_path, "file not found") from None
        except OSError as exc:
            raise ConfigError("config", config_path, f"cannot be read: {exc}") from None
    dotted = {key: str(value) for key, value in opts.items() if "." in key}
    bucket = opts.get("bucket")
    if bucket:
        # a bucket alone: its store's settings are options under the plugin's names (or the
        # file's rsm.config.* keys); tasks build the object-store RSM from these properties
        from engine.remote.bucket import bucket_configs

        rsm_prefix = "rsm.config."
        settings = {k: v for k, v in dotted.items() if not k.startswith(rsm_prefix)}
        props.update({k: v for k, v in dotted.items() if k.startswith(rsm_prefix)})
        configs = bucket_configs(str(bucket), settings, props)
        props = {"remote.log.storage.manager.class.name":
                 "engine.remote.ObjectStorageRemoteStorageManager",
                 **{f"{rsm_prefix}{k}": v for k, v in configs.items()}}
    props.update({} if bucket else dotted)
    if not props:
        raise ConfigError("config", None, "the engine's configuration is missing: give the "
                                          "option config=<properties file> or the broker "
                                          "properties (log.dirs, rsm.config.dirs, ...) as options")
    return props, bucket


def parse_tier_options(options: Mapping[str, str]) -> TierOptions:
    """The tier `options` name (case-insensitive names; others are left alone). Raises
    ConfigError naming the option and what is wrong."""
    opts = {str(k).lower(): v for k, v in options.items()}
    props, bucket = reader_properties(opts)
    metadata = opts.get("remotelogmetadatapath")
    if metadata and not bucket:
        raise ConfigError("remoteLogMetadataPath", metadata, "only with the bucket option "
                                                             "(a broker's tier reads its RLMM)")
    return TierOptions(props, str(bucket) if bucket else None,
                       str(metadata) if metadata else None,
                       option_bool(opts, "failOnDataLoss", True))
