"""Typed values of an object-store tier config (the plugin's names, without `rsm.config.`),
read the plugin's way: a key that is absent or blank is unset, and a bad value raises
ConfigError naming the key and the rule it broke. The tier (`config`) and its store
(`store`) read their keys through it."""

from __future__ import annotations

from collections.abc import Mapping

from engine.config import ConfigError

__all__ = ["ConfigValues"]


class ConfigValues:
    """The values of one config mapping, by type."""

    __slots__ = ("_configs",)

    def __init__(self, configs: Mapping[str, str]):
        self._configs = configs

    def get(self, key: str) -> str | None:
        """The value, stripped; None when unset."""
        v = self._configs.get(key)
        return None if v is None or str(v).strip() == "" else str(v).strip()

    def optional_integer(self, key: str, lo: int, hi: int) -> int | None:
        """An integer in [lo, hi]; None when unset."""
        raw = self.get(key)
        if raw is None:
            return None
        try:
            v = int(raw)
        except ValueError:
            raise ConfigError(key, raw, "expected an integer") from None
        if not lo <= v <= hi:
            raise ConfigError(key, raw, f"must be in [{lo}, {hi}]")
        return v

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        """An integer in [lo, hi]; `default` (not checked) when unset."""
        v = self.optional_integer(key, lo, hi)
        return default if v is None else v

    def optional_boolean(self, key: str) -> bool | None:
        """true or false (any case); None when unset."""
        raw = self.get(key)
        if raw is None:
            return None
        if raw.lower() not in ("true", "false"):
            raise ConfigError(key, raw, "expected true or false")
        return raw.lower() == "true"

    def boolean(self, key: str, default: bool = False) -> bool:
        v = self.optional_boolean(key)
        return default if v is None else v

    def listing(self, key: str) -> list[str]:
        """A comma-separated list, its blank items dropped."""
        raw = self.get(key)
        return [] if raw is None else [p.strip() for p in raw.split(",") if p.strip()]
